"""Simplification that also tries each result with its ``mod``s expanded.

``E mod c`` is ``E - (E floordiv c) * c`` and ``(E floordiv a) floordiv b`` is
``E floordiv (a * b)`` for positive constants (exact on all integers). Written
out so, a linearised access such as ``((x floordiv 8) mod 512) * 4096 + (x
floordiv 4096) * 2097152 + (x mod 8) * 512`` collapses to ``x * 512``, which
the range-aware simplifier alone does not see. The MLIR passes that write index
arithmetic (flatten-tensors, simplify-indexing) simplify every access map so,
and a kernel repeats the same map at many accesses (the 134 accesses of a
32-wide sort kernel are one map), so the answer is memoised like
:func:`heron.indexing.simplify`'s.
"""

from __future__ import annotations

import functools

import attrs

from heron.indexing.affine import AffineExpr, Binary, BinaryKind, Constant
from heron.indexing.indexing_map import IndexingMap
from heron.indexing.simplifier import from_linear_form, simplify

__all__ = ["simplify_with_mod_expansion"]


def _linear_terms(expr: AffineExpr, scale: int, terms: dict[AffineExpr, int]) -> int:
    """Add ``scale * expr`` to ``terms`` with every ``mod`` expanded; returns the constant part."""
    if isinstance(expr, Constant):
        return scale * expr.value
    if isinstance(expr, Binary):
        rhs = expr.rhs.value if isinstance(expr.rhs, Constant) else None
        if expr.kind is BinaryKind.ADD:
            return _linear_terms(expr.lhs, scale, terms) + _linear_terms(expr.rhs, scale, terms)
        if expr.kind is BinaryKind.MUL and rhs is not None:
            return _linear_terms(expr.lhs, scale * rhs, terms)
        if expr.kind is BinaryKind.MOD and rhs is not None and rhs > 0:
            constant = _linear_terms(expr.lhs, scale, terms)
            return constant + _linear_terms(_merged_floordiv(expr.lhs, rhs), -scale * rhs, terms)
        if expr.kind is BinaryKind.FLOORDIV and rhs is not None and rhs > 0:
            expr = _merged_floordiv(expr.lhs, rhs)
    terms[expr] = terms.get(expr, 0) + scale
    return 0


def _merged_floordiv(lhs: AffineExpr, divisor: int) -> AffineExpr:
    while (
        isinstance(lhs, Binary)
        and lhs.kind is BinaryKind.FLOORDIV
        and isinstance(lhs.rhs, Constant)
        and lhs.rhs.value > 0
    ):
        lhs, divisor = lhs.lhs, lhs.rhs.value * divisor
    return lhs // divisor


def _cost(expr: AffineExpr) -> int:
    """Operations needed to evaluate ``expr`` (divisions and remainders count double)."""
    if not isinstance(expr, Binary):
        return 0
    own = 1 if expr.kind in (BinaryKind.ADD, BinaryKind.MUL) else 2
    return own + _cost(expr.lhs) + _cost(expr.rhs)


@functools.lru_cache(maxsize=8192)
def simplify_with_mod_expansion(indexing_map: IndexingMap) -> IndexingMap:
    """``simplify``, also trying each result with its ``mod``s expanded; the cheaper one wins.

    Both forms are simplified as the results of one map: the domain is the same, so
    its constraints are normalised once and the sub-expressions the two forms share
    are simplified once (each result's simplification depends on its own value and the
    domain only, so it is what two maps would give). Memoised: maps are frozen values.
    """
    expanded_results = []
    for expr in indexing_map.results:
        terms: dict[AffineExpr, int] = {}
        constant = _linear_terms(expr, 1, terms)
        expanded_results.append(from_linear_form(terms, constant))
    count = len(indexing_map.results)
    both = simplify(attrs.evolve(indexing_map, results=(*indexing_map.results, *expanded_results)))
    simplified = attrs.evolve(both, results=both.results[:count])
    if simplified.has_trivially_empty_domain():
        return simplified
    best = [
        b if _cost(b) < _cost(a) else a
        for a, b in zip(simplified.results, both.results[count:], strict=True)
    ]
    return attrs.evolve(simplified, results=tuple(best))
