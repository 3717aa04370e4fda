"""Placing temporaries in one block of memory: a best-fit heap over live ranges.

Each buffer asks for ``size`` bytes during its live range; two buffers whose
ranges overlap must get disjoint bytes, two that do not may reuse them. Like
XLA's global decreasing-size best-fit heap, buffers are placed largest first
(the big ones shape the heap, the small ones fill its gaps), each at the
smallest gap left between the buffers it overlaps in time that fits it, or
above them all. Offsets are multiples of ``alignment``, which the caller gives
(the device's buffer alignment is a fact of the target, not of this module).
"""

from __future__ import annotations

from collections.abc import Sequence
from operator import itemgetter

import attrs
import numpy as np

from heron.hlo.buffers.liveness import LiveRange
from heron.hlo.errors import UnsupportedError

__all__ = ["Chunk", "HeapRequest", "place"]


@attrs.frozen
class HeapRequest:
    """``size`` bytes for buffer ``key`` during ``live``."""

    key: int
    size: int
    live: LiveRange


@attrs.frozen
class Chunk:
    """Where a request went: ``size`` bytes from ``offset``."""

    offset: int
    size: int

    @property
    def end(self) -> int:
        return self.offset + self.size


def _align(offset: int, alignment: int) -> int:
    return -(-offset // alignment) * alignment


#: Placed chunks up to which a request's overlaps are found by a walk over them; above,
#: by vector operations (a numpy call costs what a walk over a few hundred does).
_WALKED = 256


def place(requests: Sequence[HeapRequest], alignment: int) -> tuple[dict[int, Chunk], int]:
    """Offsets for every request and the heap's size (the end of the highest chunk).

    A request's overlaps in time, and the gaps between them, are found by a walk
    over the chunks placed so far while they are few, then with a few vector
    operations over them as numpy columns (bucketed by time, a model's thousands of
    temporaries living across most of its step each made 23 million overlap tests:
    10 s for a GPT-2 training step). Both find the same gap.
    """
    if alignment <= 0:
        raise UnsupportedError(f"buffer alignment must be positive, got {alignment}")
    order = sorted(requests, key=lambda r: (-r.size, r.live.start, r.key))
    count = len(order)
    walked: list[tuple[int, int, int, int]] = []  # first, last, offset, end
    firsts = np.empty(count, np.int64)
    lasts = np.empty(count, np.int64)
    offsets = np.empty(count, np.int64)
    ends = np.empty(count, np.int64)
    chunks: dict[int, Chunk] = {}
    heap_size = 0
    for placed, request in enumerate(order):
        first, last, size = request.live.start, request.live.end, request.size
        if placed <= _WALKED:
            around = sorted(
                ((o, e) for lo, hi, o, e in walked if lo <= last and hi >= first),
                key=itemgetter(0),  # on a tie, in the order placed, as the vector path
            )
            best = _walk_gaps(around, size, alignment)
        else:
            overlapping = np.flatnonzero((firsts[:placed] <= last) & (lasts[:placed] >= first))
            best = _best_gap(offsets[overlapping], ends[overlapping], size, alignment)
        chunk = Chunk(best, size)
        chunks[request.key] = chunk
        if placed < _WALKED:
            walked.append((first, last, chunk.offset, chunk.end))
        firsts[placed], lasts[placed] = first, last
        offsets[placed], ends[placed] = chunk.offset, chunk.end
        heap_size = max(heap_size, chunk.end)
    return chunks, heap_size


def _walk_gaps(around: list[tuple[int, int]], size: int, alignment: int) -> int:
    """:func:`_best_gap` by a walk over the (offset, end) of the chunks, by offset."""
    best: int | None = None
    best_gap: int | None = None
    cursor = 0
    for offset, end in around:
        start = _align(cursor, alignment)
        gap = offset - start
        if gap >= size and (best_gap is None or gap < best_gap):
            best, best_gap = start, gap
        cursor = max(cursor, end)
    return best if best is not None else _align(cursor, alignment)


def _best_gap(offsets: np.ndarray, ends: np.ndarray, size: int, alignment: int) -> int:
    """The offset of the smallest gap of at least ``size`` bytes below the chunks
    ``offsets``/``ends`` (the lowest such gap on a tie), else the first aligned offset
    above them all. Each gap runs from the highest end below a chunk, aligned, to that
    chunk's offset."""
    if not offsets.size:
        return 0
    by_offset = np.argsort(offsets, kind="stable")
    offsets, ends = offsets[by_offset], ends[by_offset]
    below = np.concatenate(([0], np.maximum.accumulate(ends)[:-1]))
    starts = -(-below // alignment) * alignment
    gaps = offsets - starts
    fitting = np.flatnonzero(gaps >= size)
    if fitting.size:
        return int(starts[fitting[np.argmin(gaps[fitting])]])
    return _align(max(0, int(ends.max())), alignment)
