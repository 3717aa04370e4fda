"""Interval analysis of affine expressions over an indexing map's domain.

The simplifier's decisions (fold ``d0 floordiv 8`` to 0, pull ``s0`` out of a
``mod``, drop a constraint that always holds) all come down to one question:
what values can this expression take on the domain? Interval arithmetic gives
a sound over-approximation in one bottom-up pass, which is cheap enough to ask
again and again. A constraint on exactly the expression asked about tightens
the answer (``d0 + d1 in [0, 5]`` bounds ``d0 + d1``).
"""

from __future__ import annotations

from heron.indexing.affine import AffineExpr, Binary, BinaryKind, Constant, Dim, Symbol
from heron.indexing.indexing_map import IndexingError, IndexingMap
from heron.indexing.interval import Interval


def _mod_range(lhs: Interval, divisor: int) -> Interval:
    if divisor > 0:
        if lhs.lower // divisor == lhs.upper // divisor:  # within one period: no wrap-around
            return Interval(lhs.lower % divisor, lhs.upper % divisor)
        return Interval(0, divisor - 1)
    if lhs.lower // divisor == lhs.upper // divisor:
        a, b = lhs.lower % divisor, lhs.upper % divisor
        return Interval(min(a, b), max(a, b))
    return Interval(divisor + 1, 0)


def _division_range(kind: BinaryKind, lhs: Interval, rhs: Interval, expr: AffineExpr) -> Interval:
    if rhs.is_point:
        c = rhs.lower
        if c == 0:
            raise IndexingError(f"{kind.value} by zero in {expr}")
        if kind is BinaryKind.FLOORDIV:
            return lhs.floordiv(c)
        if kind is BinaryKind.CEILDIV:
            return lhs.ceildiv(c)
        return _mod_range(lhs, c)
    if rhs.lower > 0:  # a positive, non-constant divisor
        if kind is BinaryKind.MOD:
            upper = rhs.upper - 1
            if lhs.lower >= 0:
                upper = min(upper, lhs.upper)
            return Interval(0, upper)
        corners = [
            getattr(lhs, "floordiv" if kind is BinaryKind.FLOORDIV else "ceildiv")(d)
            for d in (rhs.lower, rhs.upper)
        ]
        return Interval(min(c.lower for c in corners), max(c.upper for c in corners))
    raise IndexingError(f"cannot bound {expr}: the divisor's range {rhs} is not positive")


class RangeEvaluator:
    """Ranges of expressions over one map's domain, memoised (the simplifier asks often)."""

    def __init__(self, indexing_map: IndexingMap, use_constraints: bool = True) -> None:
        """``use_constraints=False`` bounds by the variables alone: the simplifier asks that
        way about the constraints themselves, which must not prove themselves redundant."""
        self.map = indexing_map
        self.constraints: dict[AffineExpr, Interval] = {}
        for expr, interval in indexing_map.constraints if use_constraints else ():
            known = self.constraints.get(expr)
            self.constraints[expr] = interval if known is None else known.intersect(interval)
        self.cache: dict[AffineExpr, Interval] = {}

    def range(self, expr: AffineExpr) -> Interval:
        cached = self.cache.get(expr)
        if cached is not None:
            return cached
        result = self._compute(expr)
        constraint = self.constraints.get(expr)
        if constraint is not None and not result.is_empty:
            tightened = result.intersect(constraint)
            # An impossible constraint makes the map empty; report the plain range then,
            # so callers see the contradiction instead of a meaningless interval.
            if not tightened.is_empty:
                result = tightened
        self.cache[expr] = result
        return result

    def _compute(self, expr: AffineExpr) -> Interval:
        if isinstance(expr, Constant):
            return Interval(expr.value, expr.value)
        if isinstance(expr, Dim | Symbol):
            return self.map.variable_bounds(expr)
        assert isinstance(expr, Binary)
        lhs = self.range(expr.lhs)
        rhs = self.range(expr.rhs)
        if lhs.is_empty or rhs.is_empty:
            return Interval(1, 0)
        if expr.kind is BinaryKind.ADD:
            return lhs + rhs
        if expr.kind is BinaryKind.MUL:
            return lhs * rhs
        return _division_range(expr.kind, lhs, rhs, expr)


def expr_range(expr: AffineExpr, indexing_map: IndexingMap) -> Interval:
    """A sound interval holding every value of ``expr`` on the map's domain."""
    return RangeEvaluator(indexing_map).range(expr)
