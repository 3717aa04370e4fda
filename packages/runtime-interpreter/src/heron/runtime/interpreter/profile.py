"""What a profiler would count, recorded while the interpreter runs a kernel.

An :class:`AccessRecorder` is the optional observer of a launch
(``engine.Launch.observer``; ``InterpreterDevice.observer``): every load,
store and atomic of global or shared memory tells it which lanes accessed
which bytes (:func:`heron.runtime.interpreter.memory.read` / ``write`` /
``atomic_targets``), and every block of operations run tells it how many
warps ran them. Absent (None, the default), nothing is recorded and nothing
costs.

A *request* is one IR memory operation executed by one warp (the warps of
the lanes that are active when it runs), as the load/store unit sees one
instruction of one warp. Per request it counts:

- **global memory**: the distinct ``sector_bytes`` sectors (32 B on NVIDIA
  and AMD) the warp's bytes fall in, against the *ideal* for the same bytes:
  the sectors they would take if the warp's distinct bytes were contiguous
  from its lowest byte (``ceil((lowest % 32 + distinct bytes) / 32)``). So a
  coalesced f32 load is 4 sectors (ideal 4), a stride-2 one 8 (ideal 4), a
  broadcast of one word 1 (ideal 1), and a row of 32 f32 that starts in the
  middle of a sector 5 (ideal 5: the misalignment is the data's, not the
  kernel's). The union of bytes touched per buffer gives the unique DRAM
  bytes, and bytes per lane per request the achieved vector width.
- **shared memory**: bank conflicts, with ``banks`` banks of ``bank_bytes``
  bytes (32 x 4 B). A request is served in *phases* of at most
  ``banks * bank_bytes`` bytes (a warp of 32 lanes of 4 B in one phase; 8 B
  accesses in two half-warps, 16 B in four quarter-warps; a 64-lane AMD
  wavefront of 4 B in two halves, as the LDS serves it); a phase takes as
  many *wavefronts* as the largest number of distinct 4-byte words any one
  bank holds among its lanes (several lanes reading the same word is a
  broadcast: free). Conflicts = wavefronts - phases, Nsight Compute's
  ``l1tex__data_bank_conflicts_pipe_lsu_mem_shared`` model. Each shared
  allocation is taken to start at bank 0.

The numbers of the memory model are parameters (:class:`MemoryModel`): the
device's facts belong to its Target, which this runtime package does not
import; ``heron.harness.profile`` builds the model from the Target.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import attrs
import numpy as np

__all__ = ["AccessRecorder", "MemoryModel", "RequestStats", "SampleComplete"]


class SampleComplete(Exception):  # noqa: N818 - not an error: the sample is done
    """Raised by a recorder with a block limit when the launch reaches a block past it.

    The launch stops there (its outputs are incomplete); what was recorded
    covers the blocks before it.
    """


@attrs.frozen
class MemoryModel:
    """The memory system's geometry: global sectors and shared-memory banks (bytes)."""

    sector_bytes: int = 32
    banks: int = 32
    bank_bytes: int = 4


@attrs.define
class RequestStats:
    """Counts over the requests of one kind (``load``/``store``/``atomic``) in one space."""

    #: Warp-level requests (one IR memory op executed by one warp).
    requests: int = 0
    #: Lane accesses (one lane, one op), and the bytes they asked for.
    lane_accesses: int = 0
    bytes_requested: int = 0
    #: Global: sectors touched, and the ideal for the same bytes (see the module docstring).
    sectors: int = 0
    ideal_sectors: int = 0
    #: Shared: wavefronts, and phases (a conflict-free request takes one wavefront a phase).
    wavefronts: int = 0
    phases: int = 0
    #: Lane accesses by bytes per lane (the vector width achieved).
    widths: Counter = attrs.field(factory=Counter)

    def add(self, other: RequestStats) -> None:
        for name in (
            "requests",
            "lane_accesses",
            "bytes_requested",
            "sectors",
            "ideal_sectors",
            "wavefronts",
            "phases",
        ):
            setattr(self, name, getattr(self, name) + getattr(other, name))
        self.widths.update(other.widths)

    @property
    def sectors_per_request(self) -> float:
        return self.sectors / self.requests if self.requests else 0.0

    @property
    def ideal_sectors_per_request(self) -> float:
        return self.ideal_sectors / self.requests if self.requests else 0.0

    @property
    def bank_conflicts(self) -> int:
        return self.wavefronts - self.phases

    @property
    def bytes_per_lane(self) -> float:
        """The achieved vector width: bytes one lane moves per request, on average."""
        return self.bytes_requested / self.lane_accesses if self.lane_accesses else 0.0

    def as_dict(self, space: str) -> dict[str, Any]:
        out: dict[str, Any] = {
            "requests": self.requests,
            "lane_accesses": self.lane_accesses,
            "bytes_requested": self.bytes_requested,
            "bytes_per_lane": round(self.bytes_per_lane, 3),
            "widths": {str(k): v for k, v in sorted(self.widths.items())},
        }
        if space == "global":
            out.update(
                sectors=self.sectors,
                ideal_sectors=self.ideal_sectors,
                sectors_per_request=round(self.sectors_per_request, 3),
                ideal_sectors_per_request=round(self.ideal_sectors_per_request, 3),
            )
        else:
            out.update(
                wavefronts=self.wavefronts,
                phases=self.phases,
                bank_conflicts=self.bank_conflicts,
            )
        return out


@attrs.define
class _Buffer:
    """Bytes of one global memory touched by loads (and atomics) and by stores."""

    name: str
    read: np.ndarray
    written: np.ndarray


class AccessRecorder:
    """The observer of a launch (see the module docstring); one per kernel profiled."""

    def __init__(self, model: MemoryModel | None = None, max_blocks: int | None = None) -> None:
        self.model = model or MemoryModel()
        #: Stop the launch (:class:`SampleComplete`) at the first batch past this many blocks.
        self.max_blocks = max_blocks
        #: Blocks run (the batches started) and the grid's blocks.
        self.blocks_run = 0
        self.blocks_total = 0
        #: (space, kind) -> stats over the whole kernel.
        self.totals: dict[tuple[str, str], RequestStats] = {}
        #: (op description, space, kind) -> stats of that op.
        self.by_op: dict[tuple[str, str, str], RequestStats] = {}
        self._buffers: dict[int, _Buffer] = {}
        #: Warp-level IR operations executed (an op run by a warp with an active lane).
        self.warp_operations = 0
        #: Thread-level IR operations executed (by active lanes).
        self.thread_operations = 0
        self.warps_launched = 0
        self._batches_seen: set[tuple[int, int]] = set()

    # -- the observer interface ---------------------------------------------------------

    def operations(self, frame: Any, count: int) -> None:
        """``count`` operations run over ``frame``'s lanes under its mask."""
        lanes = frame.lanes
        key = (lanes.first_block, lanes.block_count)
        if key not in self._batches_seen:
            if self.max_blocks is not None and lanes.first_block >= self.max_blocks:
                raise SampleComplete(f"{self.blocks_run} blocks recorded")
            self._batches_seen.add(key)
            self.blocks_run += lanes.block_count
            self.blocks_total = int(np.prod(lanes.grid))
            self.warps_launched += int(np.unique(lanes.warp_in_batch).size)
        if frame.mask is None:
            warps = int(lanes.warp_in_batch[-1]) + 1 if lanes.size else 0
            active = lanes.size
        else:
            active = int(np.count_nonzero(frame.mask))
            warps = int(np.unique(lanes.warp_in_batch[frame.mask]).size) if active else 0
        self.warp_operations += count * warps
        self.thread_operations += count * active

    def access(self, frame: Any, op: Any, kind: str, ref: Any, flat, width: int, active) -> None:
        """Lanes ``active`` (indices, None: all) access ``width`` elements at element ``flat``."""
        space = ref.memory.space
        if space == "private":
            return
        lanes = frame.lanes
        every = np.broadcast_to(np.asarray(flat, np.int64), (lanes.size,))
        if active is None:
            elements, warp, lane = every, lanes.warp_in_batch, lanes.lane_in_warp
        else:
            if active.size == 0:
                return
            elements = every[active]
            warp, lane = lanes.warp_in_batch[active], lanes.lane_in_warp[active]
        itemsize = ref.type.dtype.itemsize
        stats = RequestStats(
            requests=int(np.unique(warp).size),
            lane_accesses=int(elements.size),
            bytes_requested=int(elements.size) * width * itemsize,
        )
        stats.widths[width * itemsize] = int(elements.size)
        start = elements * itemsize
        if space == "global":
            self._global(stats, ref, start, warp, elements, width, itemsize, kind)
        else:
            self._shared(stats, ref, start, warp, lane, width * itemsize, lanes.warp_size)
        self.totals.setdefault((space, kind), RequestStats()).add(stats)
        self.by_op.setdefault((op.describe(), space, kind), RequestStats()).add(stats)

    # -- global memory ------------------------------------------------------------------

    def _global(self, stats, ref, start, warp, elements, width, itemsize, kind) -> None:
        sector = self.model.sector_bytes
        nbytes = width * itemsize
        memory = ref.memory
        # Sectors: each lane's bytes [start, start + nbytes) fall in one or more sectors.
        first = start // sector
        span = (start + nbytes - 1) // sector - first + 1
        steps = np.arange(int(span.max()))
        sectors = first[:, None] + np.minimum(steps, span[:, None] - 1)
        total_sectors = memory.nbytes // sector + 2
        keys = np.unique(warp[:, None] * total_sectors + sectors)
        stats.sectors = int(keys.size)
        # Ideal: the warp's distinct bytes packed from its lowest byte.
        size = ref.type.size + width
        element_keys = np.unique(warp[:, None] * size + elements[:, None] + np.arange(width))
        owners = element_keys // size
        starts = np.flatnonzero(np.r_[True, owners[1:] != owners[:-1]])
        distinct = np.diff(np.r_[starts, element_keys.size]) * itemsize
        lowest = (element_keys[starts] % size) * itemsize
        stats.ideal_sectors = int(np.sum(-(-(lowest % sector + distinct) // sector)))
        # Unique bytes, per buffer.
        buffer = self._buffers.get(id(memory))
        if buffer is None:
            buffer = _Buffer(
                memory.name,
                np.zeros(memory.nbytes, np.bool_),
                np.zeros(memory.nbytes, np.bool_),
            )
            self._buffers[id(memory)] = buffer
        touched = (start[:, None] + np.arange(nbytes)).reshape(-1)
        if kind != "store":
            buffer.read[touched] = True
        if kind != "load":
            buffer.written[touched] = True

    # -- shared memory ------------------------------------------------------------------

    def _shared(self, stats, ref, start, warp, lane, access_bytes: int, warp_size: int) -> None:
        banks, bank_bytes = self.model.banks, self.model.bank_bytes
        per_phase = banks * bank_bytes // max(access_bytes, bank_bytes)
        lanes_per_phase = max(1, min(warp_size, per_phase))
        phases_per_warp = -(-warp_size // lanes_per_phase)
        group = warp * phases_per_warp + lane // lanes_per_phase
        first = start // bank_bytes
        span = (start + access_bytes - 1) // bank_bytes - first + 1
        steps = np.arange(int(span.max()))
        words = first[:, None] + np.minimum(steps, span[:, None] - 1)
        total_words = ref.memory.nbytes // bank_bytes + 2
        keys = np.unique(group[:, None] * total_words + words)
        key_group, key_word = keys // total_words, keys % total_words
        per_bank, counts = np.unique(key_group * banks + key_word % banks, return_counts=True)
        bank_group = per_bank // banks
        starts = np.flatnonzero(np.r_[True, bank_group[1:] != bank_group[:-1]])
        stats.wavefronts = int(np.maximum.reduceat(counts, starts).sum())
        stats.phases = int(starts.size)

    # -- results ------------------------------------------------------------------------

    def buffers(self) -> list[dict[str, Any]]:
        """Per global buffer: unique bytes and 32-byte sectors read and written."""
        sector = self.model.sector_bytes
        out = []
        for buffer in self._buffers.values():
            either = buffer.read | buffer.written
            padded = np.zeros(-(-either.size // sector) * sector, np.bool_)
            padded[: either.size] = either
            out.append(
                {
                    "name": buffer.name,
                    "unique_bytes_read": int(buffer.read.sum()),
                    "unique_bytes_written": int(buffer.written.sum()),
                    "unique_bytes": int(either.sum()),
                    "unique_sectors": int(padded.reshape(-1, sector).any(axis=1).sum()),
                }
            )
        return out

    def stats(self, space: str, kind: str | None = None) -> RequestStats:
        """The totals of ``space`` (``global``/``workgroup``), of one kind or all."""
        total = RequestStats()
        for (s, k), stats in self.totals.items():
            if s == space and (kind is None or k == kind):
                total.add(stats)
        return total
