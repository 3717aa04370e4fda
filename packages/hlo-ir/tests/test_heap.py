"""The best-fit heap: vectorised, it places every request where the plain walk does."""

from __future__ import annotations

import random

import pytest

from heron.hlo.buffers.heap import Chunk, HeapRequest, place
from heron.hlo.buffers.liveness import LiveRange


def _walk(requests: list[HeapRequest], alignment: int) -> tuple[dict[int, Chunk], int]:
    """The heap as its docstring says, one chunk at a time: largest first, each at the
    smallest gap between the chunks it overlaps in time (the lowest on a tie)."""
    chunks: dict[int, Chunk] = {}
    placed: list[HeapRequest] = []
    for request in sorted(requests, key=lambda r: (-r.size, r.live.start, r.key)):
        around = sorted(
            (chunks[o.key] for o in placed if o.live.overlaps(request.live)),
            key=lambda c: c.offset,
        )
        best, best_gap, cursor = None, None, 0
        for chunk in around:
            start = -(-cursor // alignment) * alignment
            gap = chunk.offset - start
            if gap >= request.size and (best_gap is None or gap < best_gap):
                best, best_gap = start, gap
            cursor = max(cursor, chunk.end)
        if best is None:
            best = -(-cursor // alignment) * alignment
        chunks[request.key] = Chunk(best, request.size)
        placed.append(request)
    return chunks, max((c.end for c in chunks.values()), default=0)


@pytest.mark.parametrize("seed", range(40))
def test_the_heap_places_as_the_walk_does(seed: int) -> None:
    # A few requests (found by a walk over the chunks placed) and hundreds (found by
    # vector operations once more than 256 are placed), sizes of zero bytes included.
    rng = random.Random(seed)
    span = rng.choice([4, 60, 5000])
    requests = []
    for key in range(rng.randint(1, 80) if seed % 4 else rng.randint(257, 600)):
        start = rng.randrange(span)
        end = min(span, start + rng.choice([0, 1, 5, rng.randrange(span)]))
        size = rng.choice([0, 1, 4, 7, 256, rng.randrange(1, 1 << 20)])
        requests.append(HeapRequest(key, size, LiveRange(start, end)))
    alignment = rng.choice([1, 16, 256])
    assert place(requests, alignment) == _walk(requests, alignment)


def test_buffers_apart_in_time_share_bytes_and_overlapping_ones_do_not() -> None:
    requests = [
        HeapRequest(0, 100, LiveRange(0, 4)),
        HeapRequest(1, 100, LiveRange(5, 9)),  # after 0: its bytes again
        HeapRequest(2, 30, LiveRange(3, 6)),  # overlaps both: above them
    ]
    chunks, size = place(requests, 16)
    assert chunks[0].offset == chunks[1].offset == 0
    assert chunks[2].offset == 112 and size == 142
