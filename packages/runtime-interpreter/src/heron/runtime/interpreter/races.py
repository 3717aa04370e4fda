"""The global-memory race sanitizer: two threads of one launch on one element of global memory.

A GPU runs the blocks of a launch, and the warps of a block, in no fixed
order; nothing orders two threads' accesses to global memory but a barrier
(between threads of one block) or atomics. So an element of global memory
that one thread writes and another thread reads or writes in the same
launch has no defined value: on the hardware it changes from run to run.
The interpreter runs lanes in lockstep and batches one after the other, so
it gives one of the possible answers, the same every time, and would hide
the bug without this bookkeeping. The classic compiler cause is a kernel
whose output shares its buffer with an operand that it reads at other
indices than the one each thread writes (docs/interpreter.md, "The
sanitizer").

Bookkeeping, in the style of :mod:`~.memory`'s shared-memory sanitizer but
kept for a whole launch (every batch of it), per element of global memory:

- ``writer``: the thread that wrote it (its global linear number, block
  after block: ``block * threads_per_block + thread``), :data:`NO_THREAD`,
  or :data:`ATOMIC` (atomic updates);
- ``reader``: the thread that read it, ``_BLOCK_GROUP - b`` for several
  threads all of block ``b``, or :data:`MIXED` for threads of more than one
  block;
- once a barrier has run in the launch, the barrier count (*epoch*) of the
  recording block when each record was made.

An access conflicts with another thread's record unless both threads are in
one block and the record is older than a barrier that block has passed since
(a ``gpu.barrier`` orders a block's global accesses too); such a record is
then replaced, which is the shared-memory sanitizer's reset at a barrier,
done lazily. Atomic updates do not race with each other nor with plain
reads (they are order-dependent by design, and a compare-and-swap loop
starts with a plain load); a plain write of an element another thread
updates atomically in the same launch is a race (the atomic record keeps no
thread: a thread's own plain store after its own atomic update of one
element is reported too, a pattern heron's kernels do not have).

Elements are the bytes under the buffer: every view of one allocation (the
executor's slices) and every argument of a launch that names the same bytes
share their records, per element width (two views of one byte range with
different element widths are not compared with each other).

Cost: the records cover only the window of elements a launch touched (grown
geometrically), are made fresh for every launch, and a coalesced access (lane
``k`` at ``start + k * width``) or a uniform one is checked over a slice
without gathering. Reads of memory no thread of the launch has written yet
are kept aside (their slice, or the index array the access computed anyway)
and recorded only when a write to that memory comes, so the inputs of a
launch, which nothing writes, cost no records at all.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np

if TYPE_CHECKING:
    from heron.runtime.core.device import Dim3
    from heron.runtime.interpreter.engine import Frame
    from heron.runtime.interpreter.lanes import LaneSpace
    from heron.runtime.interpreter.memory import MemRef
    from heron.runtime.interpreter.program import Op

__all__ = ["ATOMIC", "MIXED", "NO_THREAD", "GlobalRaces", "tracked"]

NO_THREAD = -1
#: Writer record: atomic updates (of any threads).
ATOMIC = -2
#: Reader record: threads of more than one block.
MIXED = -2
#: Reader record of several threads all of block ``b``: ``_BLOCK_GROUP - b``.
_BLOCK_GROUP = -3
#: Whether launches keep the records (benchmarks switch it off to measure what it costs).
ENABLED = True
#: Reads kept unrecorded (see :class:`_Records`) up to this many elements or accesses.
DEFERRED_ELEMENTS = 1 << 22
DEFERRED_ACCESSES = 1 << 16

Index = np.ndarray | slice


def tracked(ref: MemRef) -> bool:
    """Whether accesses of ``ref`` are checked: global memory that can be written."""
    memory = ref.memory
    return memory.space == "global" and not memory.constant


class _Deferred(NamedTuple):
    """A read not yet in the reader records: elements (absolute keys, or a slice of them),
    the threads (one per key, or one record for all), their barrier epochs (None: before
    the launch's first barrier), and whether an element may repeat."""

    keys: np.ndarray | slice
    threads: np.ndarray | int
    block: int | None
    epochs: np.ndarray | int | None
    general: bool


class _Records:
    """The records of elements ``[lo, hi)`` of one allocation (one element width and phase).

    Each array exists once needed: ``writer`` once a thread of the launch writes here,
    ``reader`` once a read must be recorded. Reads of memory nobody has written yet in
    the launch are kept aside (``deferred``) and recorded only when a first write comes
    (they may race with it): memory a launch only reads, its inputs, costs no records.
    """

    __slots__ = (
        "deferred",
        "deferred_size",
        "hi",
        "limit",
        "lo",
        "names",
        "reader",
        "reader_epoch",
        "writer",
        "writer_epoch",
    )

    def __init__(self, limit: int) -> None:
        #: Elements of the allocation: the window never grows past it.
        self.limit = limit
        self.lo = 0
        self.hi = 0
        self.reader: np.ndarray | None = None
        self.writer: np.ndarray | None = None
        self.reader_epoch: np.ndarray | None = None
        self.writer_epoch: np.ndarray | None = None
        #: Reads not recorded yet; None once they are (a write came, or too many).
        self.deferred: list[_Deferred] | None = []
        self.deferred_size = 0
        #: The memories (arguments) through which the launch reached these bytes.
        self.names: list[str] = []

    @property
    def written(self) -> bool:
        """Whether a thread of the launch wrote (or atomically updated) any element here."""
        return self.writer is not None

    def cover(self, low: int, high: int, epochs: bool) -> None:
        """Make the window hold ``[low, high)`` (and epochs, when ``epochs``)."""
        if self.hi > self.lo and low >= self.lo and high <= self.hi:
            if epochs:
                self._add_epochs()
            return
        if self.hi > self.lo:  # grow by at least the current span: windows that creep
            span = self.hi - self.lo  # batch by batch cost O(n) in all, not O(n^2)
            new_lo = min(low, self.lo)
            new_hi = max(high, self.hi)
            if new_lo < self.lo:
                new_lo = max(0, min(new_lo, self.lo - span))
            if new_hi > self.hi:
                new_hi = min(self.limit, max(new_hi, self.hi + span))
        elif 4 * (high - low) >= self.limit:  # most of the allocation: all of it at once
            new_lo, new_hi = 0, self.limit
        else:
            new_lo, new_hi = low, high
        for name in ("reader", "writer", "reader_epoch", "writer_epoch"):
            array = getattr(self, name)
            if array is not None:
                fill = NO_THREAD if name in ("reader", "writer") else 0
                grown = np.full(new_hi - new_lo, fill, array.dtype)
                grown[self.lo - new_lo : self.hi - new_lo] = array
                setattr(self, name, grown)
        self.lo, self.hi = new_lo, new_hi
        if epochs:
            self._add_epochs()

    def make(self, name: str, dtype: type, epochs: bool) -> np.ndarray:
        """``reader`` or ``writer``, made (every element unrecorded) if it is not yet, with
        its epochs when ``epochs`` (a barrier has run in the launch)."""
        array = getattr(self, name)
        if array is None:
            array = np.full(self.hi - self.lo, NO_THREAD, dtype)
            setattr(self, name, array)
        if epochs:
            self._add_epochs()
        return array

    def _add_epochs(self) -> None:
        """Records made before the launch's first barrier are all of epoch 0."""
        if self.reader is not None and self.reader_epoch is None:
            self.reader_epoch = np.zeros(self.hi - self.lo, np.int32)
        if self.writer is not None and self.writer_epoch is None:
            self.writer_epoch = np.zeros(self.hi - self.lo, np.int32)


class GlobalRaces:
    """One launch's records (every batch of it); see the module docstring."""

    def __init__(self, grid: Dim3, block: Dim3) -> None:
        self.grid = tuple(grid)
        self.block = tuple(block)
        self.threads_per_block = block[0] * block[1] * block[2]
        total = self.threads_per_block * grid[0] * grid[1] * grid[2]
        # Thread numbers in int32 halve what the checks gather and scatter.
        self.dtype = np.int32 if total + 8 < 2**31 else np.int64
        #: (allocation id, element width, phase) -> (allocation, its records).
        self._records: dict[tuple[int, int, int], tuple[np.ndarray, _Records]] = {}
        #: id(memory), width -> (memory, records, the memory's first element in them).
        self._places: dict[tuple[int, int], tuple[Any, _Records, int]] = {}
        #: Whether any block of the launch has passed a barrier (epochs are kept from then on).
        self.barriers = False
        self._lanes: LaneSpace | None = None
        self._epochs = np.zeros(0, np.int32)
        self._threads: dict[int, np.ndarray] = {}

    # -- batches and barriers ---------------------------------------------------------
    def start_batch(self, lanes: LaneSpace) -> None:
        """The next batch of blocks: its lanes' thread numbers, and barrier counts at 0."""
        self._lanes = lanes
        self._epochs = np.zeros(lanes.block_count, np.int32)
        self._threads = {}

    def barrier(self, blocks: np.ndarray) -> None:
        """The batch's ``blocks`` (indices in the batch) passed a barrier."""
        self._epochs[blocks] += 1
        self.barriers = True

    def _lane_threads(self, width: int) -> np.ndarray:
        """Each lane's global thread number, repeated ``width`` times (lane-major)."""
        threads = self._threads.get(width)
        if threads is None:
            lanes = self._lanes
            first = lanes.first_block * self.threads_per_block
            threads = np.arange(first, first + lanes.size, dtype=self.dtype)
            if width > 1:
                threads = np.repeat(threads, width)
            self._threads[width] = threads
        return threads

    def _epochs_of(self, threads: np.ndarray) -> np.ndarray | None:
        """The barrier count of each thread's block now (None before the first barrier)."""
        if not self.barriers:
            return None
        return self._epochs[threads // self.threads_per_block - self._lanes.first_block]

    # -- where an access lands ----------------------------------------------------------
    def _place(self, ref: MemRef) -> tuple[_Records, int]:
        """The records of ``ref``'s bytes, and the key of its element 0 in them."""
        memory = ref.memory
        itemsize = ref.type.dtype.itemsize
        found = self._places.get((id(memory), itemsize))
        if found is not None:
            return found[1], found[2]
        data = memory.data
        root = data
        while isinstance(root.base, np.ndarray):
            root = root.base
        offset = data.__array_interface__["data"][0] - root.__array_interface__["data"][0]
        key = (id(root), itemsize, offset % itemsize)
        entry = self._records.get(key)
        if entry is None:
            entry = self._records[key] = (root, _Records(root.nbytes // itemsize + 1))
        records = entry[1]
        if memory.name not in records.names:
            records.names.append(memory.name)
        self._places[(id(memory), itemsize)] = (memory, records, offset // itemsize)
        return records, offset // itemsize

    # -- the accesses -------------------------------------------------------------------
    def access(
        self,
        frame: Frame,
        op: Op,
        ref: MemRef,
        positions: np.ndarray,
        active: np.ndarray | None,
        kind: str,
    ) -> None:
        """Check and record ``kind`` (``read``, ``write``, ``atomic``) accesses of elements
        ``positions`` (``(k, width)``, one row per accessing lane: ``active``, or all)."""
        if positions.size == 0:
            return
        records, base = self._place(ref)
        width = positions.shape[1]
        keys = positions.reshape(-1) + base
        threads = self._lane_threads(width)
        if active is not None:
            threads = threads.reshape(-1, width)[active].reshape(-1)
        epochs = self._epochs_of(threads)
        if kind == "read" and self._defer(records, _Deferred(keys, threads, None, epochs, True)):
            return
        if kind != "read":
            self._record_deferred(records)  # before the window is placed: it may move it
        records.cover(int(keys.min()), int(keys.max()) + 1, self.barriers)
        report = _Report(frame, op, ref, lambda: positions, active, self)
        self._check(records, keys - records.lo, threads, epochs, kind, report, True)

    def contiguous(self, frame: Frame, op: Op, ref: MemRef, start: int, width: int, kind: str):
        """Every lane ``k`` of the batch accesses elements ``start + k * width`` onwards."""
        records, base = self._place(ref)
        count = frame.lanes.size * width
        low = start + base
        threads = self._lane_threads(width)
        epochs = self._epochs_of(threads)
        keys = slice(low, low + count)
        if kind == "read" and self._defer(records, _Deferred(keys, threads, None, epochs, False)):
            return
        if kind != "read":
            self._record_deferred(records)  # before the window is placed: it may move it
        records.cover(low, low + count, self.barriers)
        report = _Report(
            frame,
            op,
            ref,
            lambda: np.arange(start, start + count, dtype=np.int64).reshape(-1, width),
            None,
            self,
        )
        index = slice(low - records.lo, low - records.lo + count)
        self._check(records, index, threads, epochs, kind, report, False)

    def uniform_read(self, frame: Frame, op: Op, ref: MemRef, start: int, width: int) -> None:
        """Every lane of the batch reads elements ``[start, start + width)``."""
        records, base = self._place(ref)
        lanes = frame.lanes
        low = start + base
        if lanes.size == 1:
            group, block = lanes.first_block * self.threads_per_block, lanes.first_block
        elif lanes.block_count == 1:
            group, block = _BLOCK_GROUP - lanes.first_block, lanes.first_block
        else:
            group, block = MIXED, -1
        epoch = int(self._epochs[0]) if block >= 0 else 0
        keys = slice(low, low + width)
        at = epoch if self.barriers else None
        if self._defer(records, _Deferred(keys, group, block, at, False)):
            return
        records.cover(low, low + width, self.barriers)
        if width == 1 and self._uniform_element(records, low - records.lo, group, block, epoch):
            return
        index = slice(low - records.lo, low - records.lo + width)
        if records.written:
            writer = records.writer[index]
            conflict = (writer >= 0) & (writer != group)
            if conflict.any() and self.barriers and block >= 0:
                conflict &= ~self._ordered(writer, records.writer_epoch[index], block, epoch)
            if conflict.any():  # name the first thread with the general check
                positions = np.broadcast_to(
                    np.arange(start, start + width, dtype=np.int64), (lanes.size, width)
                )
                self.access(frame, op, ref, positions, None, "read")
        self._record_readers(records, index, np.asarray(group, self.dtype), block, at)

    def _uniform_element(self, records, at: int, group: int, block: int, epoch: int) -> bool:
        """A uniform read of one element with Python integers (a loop on few threads reads
        one element an iteration: numpy calls would cost more than the access). False: a
        case left to the array code (a conflict to report, a reader to merge)."""
        if records.written:
            writer = int(records.writer[at])
            if writer >= 0 and writer != group:
                if not (self.barriers and block >= 0 and writer // self.threads_per_block == block):
                    return False
                if int(records.writer_epoch[at]) >= epoch:
                    return False
        reader_records = records.make("reader", self.dtype, self.barriers)
        reader = int(reader_records[at])
        if reader != NO_THREAD and reader != group:
            return False
        reader_records[at] = group
        if self.barriers:
            records.reader_epoch[at] = epoch
        return True

    # -- deferred reads -----------------------------------------------------------------
    def _defer(self, records: _Records, read: _Deferred) -> bool:
        """Keep ``read`` aside while nothing of ``records`` is written (False: record it now)."""
        deferred = records.deferred
        if deferred is None:
            return False
        deferred.append(read)
        keys = read.keys
        records.deferred_size += keys.stop - keys.start if isinstance(keys, slice) else keys.size
        if records.deferred_size > DEFERRED_ELEMENTS or len(deferred) > DEFERRED_ACCESSES:
            self._record_deferred(records)
        return True

    def _record_deferred(self, records: _Records) -> None:
        """Record the reads kept aside, in order, and keep no more aside (the caller places
        its own window after this: recording may move it)."""
        deferred, records.deferred = records.deferred, None
        if not deferred:
            return
        low = min(
            d.keys.start if isinstance(d.keys, slice) else int(d.keys.min()) for d in deferred
        )
        high = max(
            d.keys.stop if isinstance(d.keys, slice) else int(d.keys.max()) + 1 for d in deferred
        )
        records.cover(low, high, self.barriers)
        run: list[_Deferred] = []  # uniform reads of one group, recorded together
        for read in deferred:
            if run and not (isinstance(read.threads, int) and read[1:] == run[0][1:]):
                self._record_uniform_run(records, run)
                run = []
            if isinstance(read.threads, int):
                run.append(read)
                continue
            keys = read.keys
            if isinstance(keys, slice):
                index = slice(keys.start - records.lo, keys.stop - records.lo)
            else:
                index = keys - records.lo
            self._read(records, index, read.threads, self._recorded_epochs(read), read.general)
        if run:
            self._record_uniform_run(records, run)

    def _recorded_epochs(self, read: _Deferred):
        """A kept read's epochs as the records hold them: 0 before the first barrier."""
        return 0 if read.epochs is None and self.barriers else read.epochs

    def _record_uniform_run(self, records: _Records, run: list[_Deferred]) -> None:
        """Record uniform reads of one group (a loop on few threads reads one element an
        iteration): one numpy call for all of them (reading an element twice changes
        nothing)."""
        first = run[0]
        keys = np.unique(
            np.concatenate([np.arange(r.keys.start, r.keys.stop, dtype=np.int64) for r in run])
        )
        group = np.asarray(first.threads, self.dtype)
        self._record_readers(
            records, keys - records.lo, group, first.block, self._recorded_epochs(first)
        )

    # -- the rules ---------------------------------------------------------------------
    def _check(self, records, index: Index, threads, epochs, kind: str, report, general) -> None:
        """Compare the accesses (element ``index``, thread ``threads``, at barrier counts
        ``epochs``) with the records, report the first conflict, then record them.
        ``general``: ``index`` may repeat an element (several lanes on one element)."""
        blocks = threads // self.threads_per_block if epochs is not None else None
        if records.written:
            writer = records.writer[index]
            conflict = (writer >= 0) & (writer != threads)
            if kind == "write":
                conflict |= writer == ATOMIC
            if epochs is not None and conflict.any():
                conflict &= ~self._ordered(writer, records.writer_epoch[index], blocks, epochs)
            if conflict.any():
                report.fail(conflict, writer, "written")
        if kind == "read":
            self._read(records, index, threads, epochs, general)
            return
        if kind == "write" and records.reader is not None:
            reader = records.reader[index]
            conflict = (reader != NO_THREAD) & (reader != threads)
            if epochs is not None and conflict.any():
                conflict &= ~self._ordered(reader, records.reader_epoch[index], blocks, epochs)
            if conflict.any():
                report.fail(conflict, reader, "read")
        writer = records.make("writer", self.dtype, self.barriers)
        writer[index] = threads if kind == "write" else ATOMIC
        if epochs is not None:
            records.writer_epoch[index] = epochs
        if kind == "write" and general:  # two lanes on one element: one of them won
            back = writer[index]
            clash = back != threads
            if clash.any():
                report.fail(clash, back, "also writes in this operation")

    def _read(self, records, index: Index, threads, epochs, general: bool) -> None:
        """Record reads; several lanes reading one element make a group record."""
        reader = records.make("reader", self.dtype, self.barriers)
        current = reader[index]
        if (current == NO_THREAD).all():
            reader[index] = threads
            if epochs is not None:
                records.reader_epoch[index] = epochs
            if not general or (reader[index] == threads).all():
                return
            reader[index] = NO_THREAD  # some element read by several lanes
        elif not general or _distinct(index):
            self._record_readers(records, index, threads, None, epochs)
            return
        self._group_readers(records, index, threads, epochs)

    def _group_readers(self, records, index: np.ndarray, threads, epochs) -> None:
        """Reads of one operation that touch one element more than once: one record per
        element (the thread, several threads of one block, or threads of several blocks)."""
        order = np.argsort(index, kind="stable")
        sorted_index = index[order]
        starts = np.empty(sorted_index.size, np.bool_)
        starts[0] = True
        np.not_equal(sorted_index[1:], sorted_index[:-1], out=starts[1:])
        first = np.flatnonzero(starts)
        sorted_threads = threads[order]
        low = np.minimum.reduceat(sorted_threads, first)
        high = np.maximum.reduceat(sorted_threads, first)
        size = self.threads_per_block
        low_block, high_block = low // size, high // size
        group = np.where(
            low == high,
            low,
            np.where(low_block == high_block, _BLOCK_GROUP - low_block, MIXED),
        ).astype(self.dtype)
        block = np.where(low_block == high_block, low_block, -1)
        epoch = None
        if epochs is not None:  # the threads of one group are of one block: one epoch
            epoch = np.maximum.reduceat(np.broadcast_to(epochs, index.shape)[order], first)
        self._record_readers(records, sorted_index[first], group, block, epoch)

    def _record_readers(self, records, index: Index, group, block, epoch) -> None:
        """Add reader ``group`` (a thread, or a group record, of ``block``: -1 for several,
        None to derive it from ``group``; at barrier count ``epoch``) to the reader records."""
        reader = records.make("reader", self.dtype, self.barriers)
        current = reader[index]
        fresh = current == NO_THREAD
        if fresh.all():
            reader[index] = group
        else:
            if block is None:  # group: the accessing threads themselves
                block = group // self.threads_per_block
            take = fresh | (current == group)
            if epoch is not None:
                take |= self._ordered(current, records.reader_epoch[index], block, epoch)
            same = (self._block_of(current) == block) & (np.asarray(block) >= 0)
            reader[index] = np.where(
                take, group, np.where(same, _BLOCK_GROUP - np.asarray(block), MIXED)
            )
        if epoch is not None:
            records.reader_epoch[index] = epoch

    def _block_of(self, record: np.ndarray) -> np.ndarray:
        """The block of a record (-1: none, or several)."""
        return np.where(
            record >= 0,
            record // self.threads_per_block,
            np.where(record <= _BLOCK_GROUP, _BLOCK_GROUP - record, -1),
        )

    def _ordered(self, record, record_epoch, block, epoch) -> np.ndarray:
        """Whether a barrier of ``block`` (passed ``epoch`` times now) separates the records
        (of ``record_epoch``) from the access: same block, an older epoch."""
        return (self._block_of(record) == block) & (record_epoch < epoch) & (np.asarray(block) >= 0)

    # -- messages ------------------------------------------------------------------------
    def describe(self, record: int) -> str:
        """A record in words: the thread, or the group of threads, it stands for."""
        if record >= 0:
            block, thread = divmod(int(record), self.threads_per_block)
            where = _coordinates("block", block, self.grid)
            return f"{where} {_coordinates('thread', thread, self.block)}"
        if record <= _BLOCK_GROUP:
            return f"several threads of {_coordinates('block', _BLOCK_GROUP - record, self.grid)}"
        return "threads of several blocks"


def _coordinates(what: str, linear: int, sizes) -> str:
    x = linear % sizes[0]
    y = (linear // sizes[0]) % sizes[1]
    z = linear // (sizes[0] * sizes[1])
    return f"{what} ({x}, {y}, {z})"


def _distinct(index: np.ndarray) -> bool:
    """Whether no element repeats (increasing, or counted over a window not much larger
    than the accesses; else sorted)."""
    if index.size < 2 or bool((index[1:] > index[:-1]).all()):
        return True
    low = int(index.min())
    span = int(index.max()) - low + 1
    if span <= 8 * index.size:
        return int(np.bincount(index - low, minlength=span).max()) <= 1
    ordered = np.sort(index)
    return bool((ordered[1:] > ordered[:-1]).all())


class _Report:
    """Turns a conflict (per access) into the SanitizerError for its first lane."""

    def __init__(self, frame, op, ref, positions, active, races: GlobalRaces) -> None:
        self.frame = frame
        self.op = op
        self.ref = ref
        #: Makes the ``(k, width)`` element positions of the accesses (only when reporting).
        self.positions = positions
        self.active = active
        self.races = races

    def fail(self, conflict: np.ndarray, other: np.ndarray, what: str) -> None:
        frame, active, ref, races = self.frame, self.active, self.ref, self.races
        positions = self.positions()
        width = positions.shape[1]
        conflict = np.asarray(conflict).reshape(-1, width)
        other = np.broadcast_to(np.asarray(other).reshape(-1), conflict.size).reshape(-1, width)
        rows = np.flatnonzero(conflict.any(axis=1))
        bad = np.zeros(frame.lanes.size, np.bool_)
        bad[rows if active is None else active[rows]] = True
        verb = {"read": "reads", "write": "writes", "atomic": "updates"}[_kind_of(self.op)]
        records, _ = races._place(ref)
        aliases = ""
        if len(records.names) > 1:
            aliases = f"; the launch reaches these bytes as {', '.join(map(repr, records.names))}"

        def detail(lane: int) -> str:
            row = lane if active is None else int(np.searchsorted(active, lane))
            column = int(np.flatnonzero(conflict[row])[0])
            element = int(positions[row, column])
            whom = int(other[row, column])
            if whom == ATOMIC and what != "read":
                done = "updated atomically by other threads"
            elif what.startswith("also"):
                done = f"{races.describe(whom)} {what}"
            else:
                done = f"{what} by {races.describe(whom)}"
            return (
                f"{verb} element {element} of global memory '{ref.memory.name}' ({ref.type}),"
                f" {done} in the same launch with no barrier between them{aliases}"
                " (blocks and warps run in no fixed order on a GPU)"
            )

        frame.fail("global-memory-race", self.op, bad, detail)


def _kind_of(op: Op) -> str:
    if "atomic" in op.name:
        return "atomic"
    if op.name.endswith("store"):
        return "write"
    return "read"
