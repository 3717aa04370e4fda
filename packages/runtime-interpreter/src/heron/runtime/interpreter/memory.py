"""Memory of the interpreter device, with the sanitizer's bookkeeping.

A :class:`Memory` is bytes: one copy for global memory (a device buffer, or
a ``memref.global``), one copy per block of the batch for shared memory
(workgroup attributions), one per lane for private memory
(``memref.alloca``). A :class:`MemRef` is an SSA memref value: a memory seen
with a static memref type (row-major, element type from :mod:`~.types`).

Every access goes through :func:`read` or :func:`write`, which

- check bounds (every index against its dimension; an error names the
  kernel, the op, the thread, the index and the bound) and the alignment a
  vector access promises;
- count, for global memory, how many times each byte is read and written,
  so that the harness can report elements never written, or written or read
  more than once (bijection checks) exactly, with no poison values to guess;
- for shared memory, report a read of an element never written, and races
  between threads of one block: an element written by one thread and read
  or written by another with no barrier in between (a barrier, see
  :func:`barrier`, starts a new interval for the blocks that reach it).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from heron.runtime.interpreter.errors import InterpreterError
from heron.runtime.interpreter.types import MemRefType, parse_type  # noqa: F401 (re-export)

if TYPE_CHECKING:
    from heron.runtime.interpreter.engine import Frame, Launch
    from heron.runtime.interpreter.program import Op, Program

__all__ = [
    "MemRef",
    "Memory",
    "atomic_targets",
    "barrier",
    "count_bit_writes",
    "flat_index",
    "globals_of",
    "lane_rows",
    "read",
    "shared_memref",
    "write",
]

NO_LANE = -1
SEVERAL_LANES = -2
ATOMIC_LANES = -3


class Memory:
    """Bytes in ``copies`` rows (see the module docstring), plus what the sanitizer tracks."""

    def __init__(
        self,
        name: str,
        space: str,
        data: np.ndarray,
        *,
        constant: bool = False,
        count_accesses: bool = False,
    ) -> None:
        if data.dtype != np.uint8 or data.ndim != 2:
            raise InterpreterError(f"memory '{name}' must be a 2-D uint8 array")
        self.name = name
        self.space = space
        self.data = data
        self.constant = constant
        #: Global memory: reads and writes of each byte (None when not counted).
        self.reads = np.zeros(data.shape[1], np.uint32) if count_accesses else None
        self.writes = np.zeros(data.shape[1], np.uint32) if count_accesses else None
        #: Writes of each bit, kept once a packed (sub-byte) store is seen: ``(bytes, 8)``.
        self.bit_writes: np.ndarray | None = None
        # Shared memory: per element (of the one type it is used with), whether it
        # was ever written, and which thread wrote / read it since the last barrier.
        self.written: np.ndarray | None = None
        self.writer: np.ndarray | None = None
        self.reader: np.ndarray | None = None

    @property
    def nbytes(self) -> int:
        return self.data.shape[1]

    def track_shared(self, size: int) -> None:
        if self.written is None:
            shape = (self.data.shape[0], size)
            self.written = np.zeros(shape, np.bool_)
            self.writer = np.full(shape, NO_LANE, np.int64)
            self.reader = np.full(shape, NO_LANE, np.int64)


class MemRef:
    """An SSA memref value: ``memory`` seen as ``type``."""

    __slots__ = ("memory", "type")

    def __init__(self, memory: Memory, type: MemRefType) -> None:
        needed = type.size * type.dtype.itemsize
        if needed > memory.nbytes:
            raise InterpreterError(
                f"{type} needs {needed} bytes; memory '{memory.name}' has {memory.nbytes}"
            )
        self.memory = memory
        self.type = type

    def elements(self) -> np.ndarray:
        """The memory as ``(copies, size)`` elements of the memref's type (a view)."""
        itemsize = self.type.dtype.itemsize
        raw = self.memory.data[:, : self.type.size * itemsize]
        return raw.view(self.type.dtype)

    def __repr__(self) -> str:
        return f"MemRef({self.memory.name}, {self.type})"


def reinterpret(ref: MemRef, type_text: str) -> MemRef:
    """``ref``'s memory seen as ``type_text`` (``arith.bitcast`` of a memref).

    The element width must stay the same: a compare-and-swap loop on a float
    buffer works on its integer view, and both views share the bytes (and
    their access counts).
    """
    target = parse_type(type_text)
    if not isinstance(target, MemRefType) or target.size != ref.type.size:
        raise InterpreterError(f"cannot view {ref.type} as {type_text}")
    if target.dtype.itemsize != ref.type.dtype.itemsize:
        raise InterpreterError(f"cannot view {ref.type} as {type_text}: the widths differ")
    return MemRef(ref.memory, target)


def global_memref(buffer: np.ndarray, type_text: str, name: str) -> MemRef:
    """A kernel argument: the device buffer ``buffer`` (uint8, counted) as ``type_text``."""
    memref_type = parse_type(type_text)
    if not isinstance(memref_type, MemRefType):
        raise InterpreterError(f"kernel argument '{name}' is a {type_text}, not a memref")
    memory = Memory(name, "global", buffer.reshape(1, -1), count_accesses=True)
    return MemRef(memory, memref_type)


def shared_memref(launch: Launch, memref_type: MemRefType, name: str) -> MemRef:
    """Fresh shared memory for every block of ``launch``'s batch (its bytes arbitrary)."""
    blocks = launch.lanes.block_count
    nbytes = memref_type.size * memref_type.dtype.itemsize
    data = np.full((blocks, nbytes), 0xCD, np.uint8)
    memory = Memory(name, "workgroup", data)
    memory.track_shared(memref_type.size)
    launch.state.setdefault("shared", []).append(memory)
    return MemRef(memory, memref_type)


def private_memref(launch: Launch, memref_type: MemRefType, name: str) -> MemRef:
    """Fresh private memory (``memref.alloca``) for every lane of ``launch``'s batch."""
    nbytes = memref_type.size * memref_type.dtype.itemsize
    data = np.zeros((launch.lanes.size, nbytes), np.uint8)
    return MemRef(Memory(name, "private", data), memref_type)


def globals_of(program: Program) -> dict[str, Memory]:
    """Memory for every ``memref.global`` of ``program`` (initial values copied in)."""
    memories = {}
    for g in program.globals.values():
        memref_type = parse_type(g.type)
        nbytes = memref_type.size * memref_type.dtype.itemsize
        data = np.zeros((1, nbytes), np.uint8)
        if g.data is not None:
            data[0, : len(g.data)] = np.frombuffer(g.data, np.uint8)
        memories[g.name] = Memory(f"@{g.name}", "global", data, constant=g.constant)
    return memories


def lane_rows(frame: Frame, ref: MemRef) -> np.ndarray | int:
    """The row of ``ref``'s memory each lane sees: its block's, its own, or the one."""
    space = ref.memory.space
    if space == "workgroup":
        return frame.lanes.block_in_batch
    if space == "private":
        return np.arange(frame.lanes.size)
    return 0


# -- addressing --------------------------------------------------------------------------


def flat_index(frame: Frame, op: Op, ref: MemRef, indices: Sequence[Any], width: int = 1):
    """The row-major element index of ``indices`` (checked against every dimension).

    ``width`` elements are accessed from there (a vector): the last index
    must leave room for all of them.
    """
    shape = ref.type.shape
    if len(indices) != len(shape):
        raise frame.unsupported(op, f"{len(indices)} indices for {ref.type}")
    flat: Any = np.int64(0)
    for k, (index, size, stride) in enumerate(zip(indices, shape, ref.type.strides, strict=True)):
        index = np.asarray(index).astype(np.int64, copy=False)
        last = width if k == len(shape) - 1 else 1
        bad = (index < 0) | (index > size - last)
        if np.any(bad):
            _out_of_bounds(frame, op, ref, bad, index, k, size, width if last > 1 else 1)
        flat = flat + index * stride
    return flat


def _out_of_bounds(frame, op, ref, bad, index, dimension, size, width):
    def detail(lane: int) -> str:
        value = int(np.broadcast_to(index, (frame.lanes.size,))[lane])
        span = f"[{value}, {value + width})" if width > 1 else str(value)
        return (
            f"index {span} of dimension {dimension} is out of bounds for"
            f" {ref.type} ('{ref.memory.name}', size {size})"
        )

    frame.fail("out-of-bounds", op, bad, detail)


def check_alignment(frame: Frame, op: Op, ref: MemRef, flat, alignment: int | None) -> None:
    """A vector access promising ``alignment`` bytes must start on such an address."""
    if not alignment:
        return
    offset = np.asarray(flat, np.int64) * ref.type.dtype.itemsize
    bad = offset % alignment != 0
    if np.any(bad):
        frame.fail(
            "misaligned",
            op,
            bad,
            lambda lane: (
                f"byte offset {int(np.broadcast_to(offset, bad.shape)[lane])} of"
                f" '{ref.memory.name}' is not a multiple of the promised alignment {alignment}"
            ),
        )


def mutated(frame: Frame) -> None:
    """Note that memory changed: results of pure calls made before may read stale values."""
    state = frame.launch.state
    state["memory_generation"] = state.get("memory_generation", 0) + 1


# -- reads and writes ------------------------------------------------------------------------


def _active_lanes(frame: Frame) -> np.ndarray | None:
    """Indices of active lanes, or None when every lane is active."""
    return None if frame.mask is None else np.flatnonzero(frame.mask)


def _element_positions(flat, lanes: np.ndarray | None, size: int, width: int) -> np.ndarray:
    """``(k, width)`` element indices of the accessing lanes (``k`` lanes)."""
    flat = np.asarray(flat, np.int64)
    if flat.ndim == 0:
        count = size if lanes is None else lanes.size
        flat = np.full(count, flat)
    elif lanes is not None:
        flat = flat[lanes]
    return flat[:, None] + np.arange(width)


def _count(counter: np.ndarray, positions: np.ndarray, itemsize: int, size: int) -> None:
    """Add one access per entry of ``positions`` (element indices) to each byte's counter.

    Few accesses into a large buffer (the common case: one small load of a
    big input) touch only their elements; many use one ``bincount``.
    """
    per_byte = counter[: size * itemsize].reshape(size, itemsize)
    flat = positions.reshape(-1)
    if flat.size * 8 < size:
        touched, times = np.unique(flat, return_counts=True)
        per_byte[touched] += times.astype(np.uint32)[:, None]
        return
    per_element = np.bincount(flat, minlength=size)[:size].astype(np.uint32)
    per_byte += per_element[:, None]


def read(frame: Frame, op: Op, ref: MemRef, flat, width: int = 1) -> np.ndarray:
    """Load ``width`` elements (a vector when ``width > 1``) at element ``flat`` per lane.

    Inactive lanes read nothing and get zeros. A uniform index on global
    memory with every lane active gives a uniform (0-d) value.
    """
    memory = ref.memory
    elements = ref.elements()
    lanes_count = frame.lanes.size
    active = _active_lanes(frame)
    if frame.launch.observer is not None:
        frame.launch.observer.access(frame, op, "load", ref, flat, width, active)
    rows = lane_rows(frame, ref)
    flat = np.asarray(flat, np.int64)
    if np.ndim(rows) == 0 and flat.ndim == 0 and active is None:
        value = elements[0, int(flat) : int(flat) + width]
        if memory.reads is not None:
            itemsize = ref.type.dtype.itemsize
            start = int(flat) * itemsize
            memory.reads[start : start + width * itemsize] += np.uint32(lanes_count)
        return value.copy() if width > 1 else value[0].copy()
    positions = _element_positions(flat, active, lanes_count, width)
    row_index = rows if np.ndim(rows) == 0 else (rows if active is None else rows[active])
    if memory.written is not None:
        _check_shared_read(frame, op, ref, row_index, positions, active)
    values = elements[np.asarray(row_index)[..., None] if np.ndim(row_index) else 0, positions]
    if memory.reads is not None:
        _count(memory.reads, positions, ref.type.dtype.itemsize, ref.type.size)
    if active is None:
        return values if width > 1 else values[:, 0]
    out = np.zeros((lanes_count, width), ref.type.dtype)
    out[active] = values
    return out if width > 1 else out[:, 0]


def write(frame: Frame, op: Op, ref: MemRef, flat, values, width: int = 1) -> None:
    """Store ``values`` (per lane; ``width`` elements each when a vector) at element ``flat``."""
    memory = ref.memory
    mutated(frame)
    if memory.constant:
        frame.fail(
            "write-to-constant",
            op,
            np.ones(frame.lanes.size, np.bool_),
            lambda lane: f"'{memory.name}' is a constant global",
        )
    lanes_count = frame.lanes.size
    active = _active_lanes(frame)
    if active is not None and active.size == 0:
        return
    if frame.launch.observer is not None:
        frame.launch.observer.access(frame, op, "store", ref, flat, width, active)
    rows = lane_rows(frame, ref)
    positions = _element_positions(flat, active, lanes_count, width)
    data = np.asarray(values, ref.type.dtype)
    data = np.broadcast_to(data, (lanes_count, width) if width > 1 else (lanes_count,))
    if active is not None:
        data = data[active]
    row_index = rows if np.ndim(rows) == 0 else (rows if active is None else rows[active])
    if memory.written is not None:
        _check_shared_write(frame, op, ref, row_index, positions, active)
    elements = ref.elements()
    target_rows = np.asarray(row_index)[..., None] if np.ndim(row_index) else 0
    elements[target_rows, positions] = data.reshape(positions.shape)
    if memory.writes is not None:
        _count(memory.writes, positions, ref.type.dtype.itemsize, ref.type.size)


def count_bit_writes(memory: Memory, byte_positions: np.ndarray, bits: np.ndarray) -> None:
    """Count a write of the set ``bits`` (uint8 masks) of each byte (packed sub-byte stores)."""
    if memory.writes is None:
        return
    if memory.bit_writes is None:
        memory.bit_writes = np.zeros((memory.nbytes, 8), np.uint32)
    expanded = ((bits[:, None] >> np.arange(8, dtype=np.uint8)) & 1).astype(np.uint32)
    np.add.at(memory.bit_writes, byte_positions, expanded)


# -- the shared-memory sanitizer ------------------------------------------------------------
#
# Per element of a shared memory (and per block), since the block's last barrier:
# ``writer`` is the thread that wrote it (NO_LANE: none; ATOMIC_LANES: atomic updates,
# which do not race with each other but do with plain accesses of other threads), and
# ``reader`` the thread that read it (SEVERAL_LANES: more than one). ``written`` says
# whether any thread ever wrote it (a read of an element never written is a finding).


def _lane_ids(frame: Frame, active: np.ndarray | None, width: int) -> np.ndarray:
    threads = frame.lanes.thread_linear if active is None else frame.lanes.thread_linear[active]
    return np.repeat(threads[:, None], width, axis=1)


def _access_of(active: np.ndarray | None, lane: int) -> int:
    """The row of the access arrays that belongs to batch lane ``lane``."""
    return lane if active is None else int(np.searchsorted(active, lane))


def _report(frame, op, active, problems: np.ndarray, kind: str, detail) -> None:
    """Raise ``kind`` for the first accessing lane (row ``k`` of ``problems``) with a problem."""
    per_access = problems.any(axis=1)
    if not per_access.any():
        return
    first = np.flatnonzero(per_access)
    bad = np.zeros(frame.lanes.size, np.bool_)
    bad[active[first] if active is not None else first] = True
    frame.fail(kind, op, bad, detail)


def _rows_for(rows, positions: np.ndarray) -> np.ndarray:
    """Each access's memory row, shaped to broadcast against ``positions``."""
    if np.ndim(rows):
        return np.asarray(rows)[:, None]
    return np.full((positions.shape[0], 1), int(rows), np.int64)


def _several_lanes(keys: np.ndarray, lanes: np.ndarray) -> np.ndarray:
    """Per access: whether another thread of the same op touches the same key (vectorised)."""
    if keys.size < 2:
        return np.zeros(keys.shape, np.bool_)
    order = np.argsort(keys, kind="stable")
    sorted_keys = keys[order]
    starts_mask = np.empty(keys.size, np.bool_)
    starts_mask[0] = True
    np.not_equal(sorted_keys[1:], sorted_keys[:-1], out=starts_mask[1:])
    if starts_mask.all():
        return np.zeros(keys.shape, np.bool_)
    starts = np.flatnonzero(starts_mask)
    sorted_lanes = lanes[order]
    differs = np.minimum.reduceat(sorted_lanes, starts) != np.maximum.reduceat(sorted_lanes, starts)
    out = np.empty(keys.shape, np.bool_)
    out[order] = differs[np.cumsum(starts_mask) - 1]
    return out


def _describe_thread(thread: int) -> str:
    if thread == ATOMIC_LANES:
        return "atomic updates of other threads"
    if thread == SEVERAL_LANES:
        return "several threads"
    return f"thread {thread}"


def _check_initialised(frame, op, ref, written: np.ndarray, active) -> None:
    _report(
        frame,
        op,
        active,
        ~written,
        "uninitialised-shared-read",
        lambda lane: (
            f"reads an element of shared memory '{ref.memory.name}' ({ref.type}) that"
            " no thread of the block has written"
        ),
    )


def _conflict_detail(ref, active, positions, conflict, other, verb: str):
    """A message naming the element and the other thread of the first conflict of ``lane``."""

    def detail(lane: int) -> str:
        k = _access_of(active, lane)
        j = int(np.flatnonzero(conflict[k])[0])
        return (
            f"{verb} element {int(positions[k, j])} of shared memory '{ref.memory.name}'"
            f" ({ref.type}), which {_describe_thread(int(other[k, j]))} of the block"
            " accessed with no barrier in between"
        )

    return detail


def _check_shared_read(frame, op, ref, rows, positions, active) -> None:
    memory = ref.memory
    r = _rows_for(rows, positions)
    _check_initialised(frame, op, ref, memory.written[r, positions], active)
    me = _lane_ids(frame, active, positions.shape[1])
    writer = memory.writer[r, positions]
    racing = (writer != NO_LANE) & (writer != me)
    _report(
        frame,
        op,
        active,
        racing,
        "shared-memory-race",
        _conflict_detail(ref, active, positions, racing, writer, "reads"),
    )
    key = (r * memory.reader.shape[1] + positions).reshape(-1)
    mine = me.reshape(-1)
    flat_reader = memory.reader.reshape(-1)
    previous = flat_reader[key]
    alone = ((previous == NO_LANE) | (previous == mine)) & ~_several_lanes(key, mine)
    flat_reader[key] = np.where(alone, mine, SEVERAL_LANES)


def _check_shared_write(frame, op, ref, rows, positions, active) -> None:
    memory = ref.memory
    r = _rows_for(rows, positions)
    me = _lane_ids(frame, active, positions.shape[1])
    writer = memory.writer[r, positions]
    reader = memory.reader[r, positions]
    key = (r * memory.writer.shape[1] + positions).reshape(-1)
    together = _several_lanes(key, me.reshape(-1)).reshape(positions.shape)
    wrote = (writer != NO_LANE) & (writer != me)
    read_ = (reader != NO_LANE) & (reader != me)
    racing = wrote | read_ | together
    other = np.where(wrote, writer, np.where(read_, reader, SEVERAL_LANES))
    _report(
        frame,
        op,
        active,
        racing,
        "shared-memory-race",
        _conflict_detail(ref, active, positions, racing, other, "writes"),
    )
    memory.writer.reshape(-1)[key] = me.reshape(-1)
    memory.written.reshape(-1)[key] = True


def _check_shared_atomic(frame, op, ref, rows, cols, lanes) -> None:
    """An atomic update reads and writes: it races with plain accesses of other threads."""
    memory = ref.memory
    positions = cols[:, None]
    r = rows[:, None]
    _check_initialised(frame, op, ref, memory.written[r, positions], lanes)
    me = _lane_ids(frame, lanes, 1)
    writer = memory.writer[r, positions]
    reader = memory.reader[r, positions]
    wrote = (writer >= 0) & (writer != me)
    read_ = (reader != NO_LANE) & (reader != me)
    racing = wrote | read_
    _report(
        frame,
        op,
        lanes,
        racing,
        "shared-memory-race",
        _conflict_detail(ref, lanes, positions, racing, np.where(wrote, writer, reader), "updates"),
    )
    memory.writer[rows, cols] = ATOMIC_LANES


def atomic_targets(frame: Frame, op: Op, ref: MemRef, flat) -> tuple[np.ndarray, ...]:
    """``(lanes, rows, columns)`` of an atomic update by the active lanes at element ``flat``.

    ``flat`` must be bounds-checked (:func:`flat_index`). The update is
    checked (constant memory; shared memory: uninitialised, races with plain
    accesses) and counted as one write of its element per lane (global
    memory); the caller then reads and writes ``ref.elements()[rows, columns]``.
    """
    mutated(frame)
    memory = ref.memory
    lanes = np.flatnonzero(frame.active())
    if memory.constant and lanes.size:
        frame.fail(
            "write-to-constant",
            op,
            np.ones(frame.lanes.size, np.bool_),
            lambda lane: f"'{memory.name}' is a constant global",
        )
    size = frame.lanes.size
    rows = np.broadcast_to(np.asarray(lane_rows(frame, ref), np.int64), (size,))[lanes]
    cols = np.broadcast_to(np.asarray(flat, np.int64), (size,))[lanes]
    if frame.launch.observer is not None and lanes.size:
        frame.launch.observer.access(frame, op, "atomic", ref, flat, 1, lanes)
    if memory.written is not None and lanes.size:
        _check_shared_atomic(frame, op, ref, rows, cols, lanes)
    if memory.writes is not None:
        _count(memory.writes, cols[:, None], ref.type.dtype.itemsize, ref.type.size)
    return lanes, rows, cols


def barrier(launch: Launch, blocks: np.ndarray) -> None:
    """A barrier reached by the batch's ``blocks`` (indices): a new interval for their threads."""
    for memory in launch.state.get("shared", ()):
        memory.writer[blocks] = NO_LANE
        memory.reader[blocks] = NO_LANE
