"""Fewer garbage collections while a compile runs.

A compile allocates millions of small objects (instructions cloned to price a
fusion, indexing maps, MLIR operation wrappers, attrs records) and keeps most
of them only briefly. At Python's default threshold (a young collection every
700 net allocations, an older one every tenth of those) the collector ran so
often that it took 5-8% of a model's compile and 2% of a program's
(``benchmarks/opt_time.py --full``, docs/benchmarks.md), while the memory the
compile peaked at did not move: what it frees is freed by reference counting,
and the cycles it leaves (a computation and its instructions) are few.

:func:`fewer_collections` raises the young generation's threshold for the
length of a compile, and the oldest's, and puts the caller's back afterwards.
The collector still runs, every :data:`YOUNG_THRESHOLD` allocations, so a long
compile's cyclic garbage stays bounded. A full collection walks every object the
process holds (the module, its copy, every fused body): about a second each on
jax-cosmo's Fisher matrix, four of them in its HLO passes at Python's default of
one every ten middle collections, for cycles that reference counting and
:meth:`~heron.compiler.fusion.builder.Candidate.discard` leave few of (its peak
memory moved by 2%); :data:`OLDEST_THRESHOLD` makes them a hundred times rarer.
Nested compiles (a program's compile calls the fusion compiler) leave the outer
setting alone, and a process that turned automatic collection off (threshold 0)
or set a higher threshold keeps its own.
"""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Iterator

__all__ = ["OLDEST_THRESHOLD", "YOUNG_THRESHOLD", "fewer_collections"]

#: Net allocations between two young collections while a compile runs.
YOUNG_THRESHOLD = 20_000
#: Middle collections before a full one is considered while a compile runs (Python's
#: default is 10; a full collection also waits for the heap to grow by a quarter).
OLDEST_THRESHOLD = 1_000


@contextlib.contextmanager
def fewer_collections() -> Iterator[None]:
    """For the ``with`` block (or the decorated function): a young collection every
    :data:`YOUNG_THRESHOLD` allocations at most and a full one after
    :data:`OLDEST_THRESHOLD` middle ones, then the previous thresholds."""
    previous = gc.get_threshold()
    if previous[0] == 0 or previous[0] >= YOUNG_THRESHOLD:
        yield
        return
    gc.set_threshold(YOUNG_THRESHOLD, previous[1], max(previous[2], OLDEST_THRESHOLD))
    try:
        yield
    finally:
        gc.set_threshold(*previous)
