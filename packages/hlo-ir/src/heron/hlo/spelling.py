"""The known name nearest to a misspelt one, for "did you mean" hints.

``difflib`` alone ranks by common subsequences, so ``tahn`` is nearer ``tan``
(one letter dropped) than ``tanh`` (two letters swapped); typing mistakes
are mostly swaps, drops and doubles. :func:`closest` takes difflib's
candidates and ranks them by the edit distance that counts a swap of
neighbours as one edit (optimal string alignment), a candidate made of exactly
the same letters first.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable

__all__ = ["closest", "edit_distance"]


def edit_distance(a: str, b: str) -> int:
    """Insertions, deletions, substitutions and swaps of neighbours turning ``a`` into ``b``."""
    rows = [list(range(len(b) + 1))]
    for i in range(1, len(a) + 1):
        row = [i] + [0] * len(b)
        for j in range(1, len(b) + 1):
            cost = 0 if a[i - 1] == b[j - 1] else 1
            row[j] = min(rows[i - 1][j] + 1, row[j - 1] + 1, rows[i - 1][j - 1] + cost)
            if i > 1 and j > 1 and a[i - 1] == b[j - 2] and a[i - 2] == b[j - 1]:
                row[j] = min(row[j], rows[i - 2][j - 2] + 1)
        rows.append(row)
    return rows[-1][-1]


def closest(word: str, candidates: Iterable[str], cutoff: float = 0.6) -> str | None:
    """The candidate ``word`` most likely misspells, or None where none is near."""
    known = list(candidates)
    near = difflib.get_close_matches(word, known, n=5, cutoff=cutoff)
    if not near:
        return None
    return min(near, key=lambda c: (sorted(c) != sorted(word), edit_distance(word, c)))
