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
  :func:`barrier`, starts a new interval for the blocks that reach it);
- for global memory, report races between any two threads of a launch
  (:mod:`~.races`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from heron.runtime.interpreter.errors import InterpreterError
from heron.runtime.interpreter.races import GlobalRaces, tracked
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
        #: Whether reads and writes are counted (global memory; :attr:`reads`, :attr:`writes`).
        self.counted = count_accesses
        self._reads = np.zeros(data.shape[1], np.uint32) if count_accesses else None
        self._writes = np.zeros(data.shape[1], np.uint32) if count_accesses else None
        # Accesses counted per element of one width, ``(kind, itemsize)`` -> uint32 per
        # element, not yet added to the per-byte counters (:meth:`count`).
        self._pending: dict[tuple[str, int], np.ndarray] = {}
        # Whether the counters were lent out read-only by :meth:`counts` (copied before
        # they next change).
        self._lent = False
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

    @property
    def reads(self) -> np.ndarray | None:
        """Reads of each byte (None when not counted)."""
        self._flush()
        return self._reads

    @property
    def writes(self) -> np.ndarray | None:
        """Writes of each byte (None when not counted)."""
        self._flush()
        return self._writes

    def count(self, kind: str, itemsize: int) -> np.ndarray:
        """The per-element counter of ``kind`` (``reads``/``writes``) for elements of ``itemsize``.

        Accesses are counted per element where they happen (one ``bincount``
        over the window a batch touched) and spread to the element's bytes
        only when the per-byte counts are asked for: spreading costs a pass
        over the whole buffer, once per launch rather than once per access.
        """
        pending = self._pending.get((kind, itemsize))
        if pending is None:
            pending = np.zeros(self.nbytes // itemsize, np.uint32)
            self._pending[(kind, itemsize)] = pending
        return pending

    def counts(self) -> tuple[np.ndarray | None, np.ndarray | None, np.ndarray | None]:
        """Reads and writes of each byte, and writes of each bit, as they are now, read-only.

        The arrays are lent, not copied (the counters of a buffer are four bytes
        per byte: copying them cost a launch as much as the kernel itself); the
        memory copies them before it next changes them, so they stay as they are.
        """
        self._flush()
        self._lent = True
        return tuple(
            None if counter is None else _read_only(counter)
            for counter in (self._reads, self._writes, self.bit_writes)
        )

    def reset_counts(self) -> None:
        """Forget every access counted so far (a buffer filled anew)."""
        self._pending.clear()
        if self.counted:  # fresh zeros: nothing to copy if lent, no page written yet
            self._reads = np.zeros(self.nbytes, np.uint32)
            self._writes = np.zeros(self.nbytes, np.uint32)
        self.bit_writes = None
        self._lent = False

    def own_counts(self) -> None:
        """Take back the counters lent by :meth:`counts` (a copy) before changing them."""
        if self._lent:
            self._reads = self._reads.copy()
            self._writes = self._writes.copy()
            if self.bit_writes is not None:
                self.bit_writes = self.bit_writes.copy()
            self._lent = False

    def _flush(self) -> None:
        if self._pending:
            self.own_counts()
        while self._pending:
            (kind, itemsize), pending = self._pending.popitem()
            counter = self._reads if kind == "reads" else self._writes
            size = pending.size
            counter[: size * itemsize].reshape(size, itemsize)[...] += pending[:, None]

    def track_shared(self, size: int) -> None:
        if self.written is None:
            shape = (self.data.shape[0], size)
            self.written = np.zeros(shape, np.bool_)
            # Thread numbers within a block (and the negative markers): int32 halves
            # what the race checks gather and scatter.
            self.writer = np.full(shape, NO_LANE, np.int32)
            self.reader = np.full(shape, NO_LANE, np.int32)


def _read_only(array: np.ndarray) -> np.ndarray:
    view = array.view()
    view.flags.writeable = False
    return view


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
    if all(isinstance(index, np.integer | int) for index in indices):
        # Uniform indices (a loop's induction variable): Python integers, no numpy call.
        total = 0
        last_dimension = len(shape) - 1
        for k, (index, size, stride) in enumerate(zip(indices, shape, ref.type.strides)):
            value = int(index)
            if value < 0 or value > size - (width if k == last_dimension else 1):
                break  # out of bounds: the general path below reports it
            total += value * stride
        else:
            return np.int64(total)
    flat: Any = np.int64(0)
    for k, (index, size, stride) in enumerate(zip(indices, shape, ref.type.strides, strict=True)):
        index = np.asarray(index).astype(np.int64, copy=False)
        last = width if k == len(shape) - 1 else 1
        bad = (index < 0) | (index > size - last)
        if bad.any():
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
    if bad.any():
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


def _races(frame: Frame, ref: MemRef) -> GlobalRaces | None:
    """The launch's global-memory race records when ``ref`` is checked by them, else None."""
    races = frame.launch.races
    return races if races is not None and tracked(ref) else None


def _active_lanes(frame: Frame) -> np.ndarray | None:
    """Indices of active lanes, or None when every lane is active."""
    return None if frame.mask is None else np.flatnonzero(frame.mask)


def _consecutive(flat: np.ndarray, width: int) -> int | None:
    """``start`` when lane ``k`` accesses element ``start + k * width`` (a coalesced access:
    one slice of memory, no gather and no count per position), else None."""
    if flat.ndim != 1 or flat.size < 2:
        return None
    start = int(flat[0])
    if int(flat[-1]) != start + (flat.size - 1) * width:
        return None
    return start if bool((np.diff(flat) == width).all()) else None


def _element_positions(flat, lanes: np.ndarray | None, size: int, width: int) -> np.ndarray:
    """``(k, width)`` element indices of the accessing lanes (``k`` lanes)."""
    flat = np.asarray(flat, np.int64)
    if flat.ndim == 0:
        count = size if lanes is None else lanes.size
        flat = np.full(count, flat)
    elif lanes is not None:
        flat = flat[lanes]
    return flat[:, None] + np.arange(width)


def _count(memory: Memory, kind: str, positions: np.ndarray, itemsize: int) -> None:
    """Add one ``kind`` access per entry of ``positions`` (element indices of ``itemsize``).

    Few accesses into a large buffer (the common case: one small load of a
    big input) touch only their elements; many use one ``bincount`` over the
    window they fall in.
    """
    counter = memory.count(kind, itemsize)
    flat = positions.reshape(-1)
    if flat.size == 0:
        return
    if flat.size * 8 < counter.size:
        touched, times = np.unique(flat, return_counts=True)
        counter[touched] += times.astype(np.uint32)
        return
    low = int(flat.min())
    high = int(flat.max()) + 1
    per_element = np.bincount(flat - low if low else flat, minlength=high - low)
    counter[low:high] += per_element.astype(np.uint32)


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
    races = _races(frame, ref)
    if np.ndim(rows) == 0 and flat.ndim == 0 and active is None:
        if races is not None:
            races.uniform_read(frame, op, ref, int(flat), width)
        value = elements[0, int(flat) : int(flat) + width]
        if memory.counted:
            start = int(flat)
            memory.count("reads", ref.type.dtype.itemsize)[start : start + width] += np.uint32(
                lanes_count
            )
        return value.copy() if width > 1 else value[0].copy()
    if np.ndim(rows) == 0 and active is None and memory.written is None:
        start = _consecutive(flat, width)
        if start is not None:  # lane k reads the k-th run of ``width`` elements from start
            if races is not None:
                races.contiguous(frame, op, ref, start, width, "read")
            end = start + lanes_count * width
            if memory.counted:
                memory.count("reads", ref.type.dtype.itemsize)[start:end] += np.uint32(1)
            values = elements[0, start:end].copy()
            return values.reshape(lanes_count, width) if width > 1 else values
    positions = _element_positions(flat, active, lanes_count, width)
    row_index = rows if np.ndim(rows) == 0 else (rows if active is None else rows[active])
    if memory.written is not None:
        _check_shared_read(frame, op, ref, row_index, positions, active)
    elif races is not None:
        races.access(frame, op, ref, positions, active, "read")
    values = elements[np.asarray(row_index)[..., None] if np.ndim(row_index) else 0, positions]
    if memory.counted:
        _count(memory, "reads", positions, ref.type.dtype.itemsize)
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
    data = np.asarray(values, ref.type.dtype)
    data = np.broadcast_to(data, (lanes_count, width) if width > 1 else (lanes_count,))
    races = _races(frame, ref)
    if np.ndim(rows) == 0 and active is None and memory.written is None:
        start = _consecutive(np.asarray(flat, np.int64), width)
        if start is not None:  # lane k writes the k-th run of ``width`` elements from start
            if races is not None:
                races.contiguous(frame, op, ref, start, width, "write")
            end = start + lanes_count * width
            ref.elements()[0, start:end] = data.reshape(-1)
            if memory.counted:
                memory.count("writes", ref.type.dtype.itemsize)[start:end] += np.uint32(1)
            return
    positions = _element_positions(flat, active, lanes_count, width)
    if active is not None:
        data = data[active]
    row_index = rows if np.ndim(rows) == 0 else (rows if active is None else rows[active])
    if memory.written is not None:
        _check_shared_write(frame, op, ref, row_index, positions, active)
    elif races is not None:
        races.access(frame, op, ref, positions, active, "write")
    elements = ref.elements()
    target_rows = np.asarray(row_index)[..., None] if np.ndim(row_index) else 0
    elements[target_rows, positions] = data.reshape(positions.shape)
    if memory.counted:
        _count(memory, "writes", positions, ref.type.dtype.itemsize)


def count_bit_writes(memory: Memory, byte_positions: np.ndarray, bits: np.ndarray) -> None:
    """Count a write of the set ``bits`` (uint8 masks) of each byte (packed sub-byte stores)."""
    if not memory.counted:
        return
    memory.own_counts()
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
    return threads[:, None] if width == 1 else np.repeat(threads[:, None], width, axis=1)


def _access_of(active: np.ndarray | None, lane: int) -> int:
    """The row of the access arrays that belongs to batch lane ``lane``."""
    return lane if active is None else int(np.searchsorted(active, lane))


def _report(frame, op, active, problems: np.ndarray, kind: str, detail) -> None:
    """Raise ``kind`` for the first accessing lane (row ``k`` of ``problems``) with a problem."""
    if not problems.any():
        return
    per_access = problems.any(axis=1)
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
    if keys.size < 2 or np.bincount(keys).max() < 2:  # no key touched twice: no sort
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
    key = _rows_for(rows, positions) * memory.reader.shape[1] + positions
    _check_initialised(frame, op, ref, memory.written.reshape(-1)[key], active)
    me = _lane_ids(frame, active, positions.shape[1])
    writer = memory.writer.reshape(-1)[key]
    racing = (writer != NO_LANE) & (writer != me)
    if racing.any():
        _report(
            frame,
            op,
            active,
            racing,
            "shared-memory-race",
            _conflict_detail(ref, active, positions, racing, writer, "reads"),
        )
    key = key.reshape(-1)
    mine = np.broadcast_to(me, positions.shape).reshape(-1)
    flat_reader = memory.reader.reshape(-1)
    previous = flat_reader[key]
    alone = ((previous == NO_LANE) | (previous == mine)) & ~_several_lanes(key, mine)
    flat_reader[key] = np.where(alone, mine, SEVERAL_LANES)


def _check_shared_write(frame, op, ref, rows, positions, active) -> None:
    memory = ref.memory
    key = _rows_for(rows, positions) * memory.writer.shape[1] + positions
    me = _lane_ids(frame, active, positions.shape[1])
    writer = memory.writer.reshape(-1)[key]
    reader = memory.reader.reshape(-1)[key]
    mine = np.broadcast_to(me, positions.shape).reshape(-1)
    key = key.reshape(-1)
    together = _several_lanes(key, mine).reshape(positions.shape)
    wrote = (writer != NO_LANE) & (writer != me)
    read_ = (reader != NO_LANE) & (reader != me)
    racing = wrote | read_ | together
    if racing.any():
        other = np.where(wrote, writer, np.where(read_, reader, SEVERAL_LANES))
        _report(
            frame,
            op,
            active,
            racing,
            "shared-memory-race",
            _conflict_detail(ref, active, positions, racing, other, "writes"),
        )
    memory.writer.reshape(-1)[key] = mine
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
    races = _races(frame, ref)
    if races is not None and lanes.size:
        races.access(frame, op, ref, cols[:, None], lanes, "atomic")
    if memory.counted:
        _count(memory, "writes", cols[:, None], ref.type.dtype.itemsize)
    return lanes, rows, cols


def barrier(launch: Launch, blocks: np.ndarray) -> None:
    """A barrier reached by the batch's ``blocks`` (indices): a new interval for their threads."""
    if launch.races is not None:
        launch.races.barrier(blocks)
    for memory in launch.state.get("shared", ()):
        memory.writer[blocks] = NO_LANE
        memory.reader[blocks] = NO_LANE
