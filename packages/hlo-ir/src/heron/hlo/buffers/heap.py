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

import attrs

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


def place(requests: Sequence[HeapRequest], alignment: int) -> tuple[dict[int, Chunk], int]:
    """Offsets for every request and the heap's size (the end of the highest chunk)."""
    if alignment <= 0:
        raise UnsupportedError(f"buffer alignment must be positive, got {alignment}")
    order = sorted(requests, key=lambda r: (-r.size, r.live.start, r.key))
    # Placed chunks indexed by the stretches of time they cover, so that finding
    # the ones a request overlaps does not look at every chunk placed so far.
    span = max((r.live.end for r in requests), default=0) + 1
    width = max(1, span // 4096)
    by_time: dict[int, list[tuple[HeapRequest, Chunk]]] = {}
    chunks: dict[int, Chunk] = {}
    heap_size = 0
    for request in order:
        live = request.live
        candidates: dict[int, Chunk] = {}
        for stretch in range(live.start // width, live.end // width + 1):
            for other, chunk in by_time.get(stretch, ()):
                if other.live.overlaps(live):
                    candidates[other.key] = chunk
        best: int | None = None
        best_gap: int | None = None
        cursor = 0
        for chunk in sorted(candidates.values(), key=lambda c: c.offset):
            start = _align(cursor, alignment)
            gap = chunk.offset - start
            if gap >= request.size and (best_gap is None or gap < best_gap):
                best, best_gap = start, gap
            cursor = max(cursor, chunk.end)
        if best is None:
            best = _align(cursor, alignment)
        chunk = Chunk(best, request.size)
        chunks[request.key] = chunk
        for stretch in range(live.start // width, live.end // width + 1):
            by_time.setdefault(stretch, []).append((request, chunk))
        heap_size = max(heap_size, chunk.end)
    return chunks, heap_size
