"""Range-aware simplification of indexing maps.

Clean index arithmetic is what lets later passes vectorise loads and hoist
bounds checks (the RFC's "Indexing optimization"), so the simplifier:

* keeps every sum in a canonical linear form (like terms merged, compound
  terms first, then dimensions, then symbols, the constant last), so equal
  maps print equally and compare equal;
* folds ``floordiv``/``mod``/``ceildiv`` by constants when the range of the
  dividend allows (``d0 floordiv 8`` is 0 for d0 in [0, 7]);
* pulls out of a division the terms that are multiples of the divisor, and
  the small part that cannot cross a multiple of it:
  ``(th_x * 4 + s0) mod 1024`` with s0 in [0, 3] becomes
  ``(th_x * 4) mod 1024 + s0``, ``(d0 * 4 + s0) floordiv 4`` becomes ``d0``;
* merges nested divisions and rewrites ``x - (x floordiv c) * c`` as ``x mod c``;
* moves single-variable constraints into the variable's bounds, drops the
  constraints that always hold, and spots maps whose domain is empty.

Every rewrite is exact on the map's domain; the tests check that by
evaluating random maps at every point. ``simplify`` iterates to a fixed point,
so it is idempotent.
"""

from __future__ import annotations

import functools
import math
import operator

from heron.indexing.affine import (
    AffineExpr,
    Binary,
    BinaryKind,
    Constant,
    Dim,
    Symbol,
    add,
    build,
    mod,
    mul,
    replace,
    used_symbols,
)
from heron.indexing.indexing_map import IndexingMap, Variable
from heron.indexing.interval import Interval
from heron.indexing.range_analysis import RangeEvaluator

Terms = dict[AffineExpr, int]

#: Canonical order of the terms of a sum: compound terms, dimensions, symbols
#: (computed once per node: :attr:`AffineExpr.order_key`).
_order_key = operator.attrgetter("order_key")


def linear_form(expr: AffineExpr) -> tuple[Terms, int]:
    """``expr`` as ``sum(coefficient * term) + constant``; terms are non-sum atoms."""
    terms: Terms = {}
    constant = 0
    stack: list[tuple[AffineExpr, int]] = [(expr, 1)]
    while stack:
        node, scale = stack.pop()
        if isinstance(node, Constant):
            constant += scale * node.value
        elif isinstance(node, Binary) and node.kind is BinaryKind.ADD:
            stack.append((node.rhs, scale))
            stack.append((node.lhs, scale))
        elif (
            isinstance(node, Binary)
            and node.kind is BinaryKind.MUL
            and isinstance(node.rhs, Constant)
        ):
            stack.append((node.lhs, scale * node.rhs.value))
        else:
            terms[node] = terms.get(node, 0) + scale
    return terms, constant


def from_linear_form(terms: Terms, constant: int) -> AffineExpr:
    """The canonical sum: terms in ``_order_key`` order, zero terms dropped, constant last."""
    result: AffineExpr = Constant(0)
    for term in sorted((t for t, c in terms.items() if c != 0), key=_order_key):
        result = add(result, mul(term, Constant(terms[term])))
    return add(result, Constant(constant))


def _is_const_division(expr: AffineExpr, kind: BinaryKind) -> bool:
    return (
        isinstance(expr, Binary)
        and expr.kind is kind
        and isinstance(expr.rhs, Constant)
        and expr.rhs.value > 0
    )


class _ExprSimplifier:
    """Simplifies expressions against one set of ranges, memoising per node."""

    def __init__(self, ranges: RangeEvaluator) -> None:
        self.ranges = ranges
        self.cache: dict[AffineExpr, AffineExpr] = {}

    def range(self, expr: AffineExpr) -> Interval:
        return self.ranges.range(expr)

    def expr(self, expr: AffineExpr) -> AffineExpr:
        cached = self.cache.get(expr)
        if cached is not None:
            return cached
        result = self._simplify(expr)
        if not isinstance(result, Constant):
            bounds = self.range(result)
            if bounds.is_point:
                result = Constant(bounds.lower)
        self.cache[expr] = result
        return result

    def _simplify(self, expr: AffineExpr) -> AffineExpr:
        if not isinstance(expr, Binary):
            return expr
        if expr.kind is BinaryKind.ADD:
            lhs_terms, lhs_constant = linear_form(self.expr(expr.lhs))
            rhs_terms, rhs_constant = linear_form(self.expr(expr.rhs))
            for term, coefficient in rhs_terms.items():
                lhs_terms[term] = lhs_terms.get(term, 0) + coefficient
            return self._sum(lhs_terms, lhs_constant + rhs_constant)
        lhs = self.expr(expr.lhs)
        rhs = self.expr(expr.rhs)
        if expr.kind is BinaryKind.MUL:
            if isinstance(lhs, Constant):
                lhs, rhs = rhs, lhs
            if isinstance(rhs, Constant):
                terms, constant = linear_form(lhs)
                scale = rhs.value
                return self._sum({t: c * scale for t, c in terms.items()}, constant * scale)
            if _order_key(rhs) < _order_key(lhs):
                lhs, rhs = rhs, lhs
            return mul(lhs, rhs)
        if isinstance(rhs, Constant) and rhs.value > 0:
            return self._division(expr.kind, lhs, rhs.value)
        return build(expr.kind, lhs, rhs)

    # -- sums -------------------------------------------------------------------
    def _sum(self, terms: Terms, constant: int) -> AffineExpr:
        """Canonical sum, after turning ``x - (x floordiv c) * c`` into ``x mod c``."""
        for term, coefficient in list(terms.items()):
            if coefficient == 0 or term not in terms:
                continue
            if not _is_const_division(term, BinaryKind.FLOORDIV):
                continue
            assert isinstance(term, Binary) and isinstance(term.rhs, Constant)
            c = term.rhs.value
            if coefficient % c:
                continue
            m = -coefficient // c
            inner_terms, inner_constant = linear_form(term.lhs)
            if not inner_terms or any(terms.get(t, 0) != m * a for t, a in inner_terms.items()):
                continue
            for t in inner_terms:
                del terms[t]
            del terms[term]
            constant -= m * inner_constant
            remainder_terms, remainder_constant = linear_form(self.expr(mod(term.lhs, term.rhs)))
            for t, a in remainder_terms.items():
                terms[t] = terms.get(t, 0) + m * a
            constant += m * remainder_constant
        return from_linear_form(terms, constant)

    # -- divisions ----------------------------------------------------------------
    def _division(self, kind: BinaryKind, lhs: AffineExpr, c: int) -> AffineExpr:
        """``lhs kind c`` for a positive constant ``c``, with ``lhs`` already simplified."""
        bounds = self.range(lhs)
        if not bounds.is_empty:
            if kind is BinaryKind.CEILDIV:
                low, high = bounds.ceildiv(c).lower, bounds.ceildiv(c).upper
            else:
                low, high = bounds.lower // c, bounds.upper // c
            if low == high:
                if kind is BinaryKind.MOD:  # no wrap-around: the mod is a shift
                    terms, constant = linear_form(lhs)
                    return from_linear_form(terms, constant - low * c)
                return Constant(low)

        terms, constant = linear_form(lhs)
        # Multiples of c leave the division whole: (x + c * q) floordiv c = x floordiv c + q.
        quotient: Terms = {t: a // c for t, a in terms.items() if a % c == 0}
        rest: Terms = {t: a for t, a in terms.items() if a % c != 0}
        quotient_constant, constant = divmod(constant, c)
        if kind is BinaryKind.MOD:
            quotient, quotient_constant = {}, 0

        outside: AffineExpr = Constant(0)  # what mod lets out of the brackets
        divisor = c
        if kind is not BinaryKind.CEILDIV and rest:
            split = self._split_small_part(rest, constant, c)
            if split is not None:
                big, big_constant, small, g = split
                if kind is BinaryKind.FLOORDIV:
                    # (g * A + B) floordiv (g * c') = A floordiv c' when B is in [0, g - 1].
                    rest = {t: a // g for t, a in big.items()}
                    constant = big_constant // g
                    divisor = c // g
                else:
                    rest, constant, outside = big, big_constant, small

        if not rest:
            atom: AffineExpr = Constant(_floor_or_ceil(kind, constant, divisor))
            if kind is BinaryKind.MOD:
                atom = Constant(constant % divisor)
        else:
            inner = from_linear_form(rest, constant)
            atom = self._division_atom(kind, inner, divisor)
        result_terms, result_constant = linear_form(atom)
        for t, a in quotient.items():
            result_terms[t] = result_terms.get(t, 0) + a
        outside_terms, outside_constant = linear_form(outside)
        for t, a in outside_terms.items():
            result_terms[t] = result_terms.get(t, 0) + a
        return from_linear_form(
            result_terms, result_constant + quotient_constant + outside_constant
        )

    def _split_small_part(
        self, rest: Terms, constant: int, c: int
    ) -> tuple[Terms, int, AffineExpr, int] | None:
        """Split ``rest + constant`` into ``big`` (multiples of g, g | c) and ``small`` in [0, g-1].

        Returns (big terms, big constant, small expression, g), preferring the largest g;
        None when no split helps. This is what pulls ``s0`` out of ``(th_x * 4 + s0) mod 1024``.
        """
        candidates = sorted({math.gcd(a, c) for a in rest.values()} - {1}, reverse=True)
        for candidate in candidates:
            big = {t: a for t, a in rest.items() if a % candidate == 0}
            g = math.gcd(c, *big.values())
            small_terms = {t: a for t, a in rest.items() if a % g != 0}
            small_constant = constant % g
            big_constant = constant - small_constant
            if not small_terms and small_constant == 0 and g == 1:
                continue
            small = from_linear_form(small_terms, small_constant)
            small_bounds = self.range(small)
            if small_bounds.lower >= 0 and small_bounds.upper < g:
                return big, big_constant, small, g
        return None

    def _division_atom(self, kind: BinaryKind, inner: AffineExpr, c: int) -> AffineExpr:
        """``inner kind c`` with nested divisions merged and the range fold tried again."""
        if kind is BinaryKind.FLOORDIV and _is_const_division(inner, BinaryKind.FLOORDIV):
            # (x floordiv a) floordiv b = x floordiv (a * b) for positive a, b.
            assert isinstance(inner, Binary) and isinstance(inner.rhs, Constant)
            return self._division(kind, inner.lhs, inner.rhs.value * c)
        if kind is BinaryKind.MOD and _is_const_division(inner, BinaryKind.MOD):
            assert isinstance(inner, Binary) and isinstance(inner.rhs, Constant)
            if inner.rhs.value % c == 0:  # (x mod (k * c)) mod c = x mod c
                return self._division(kind, inner.lhs, c)
        bounds = self.range(inner)
        if not bounds.is_empty:
            low = _floor_or_ceil(kind, bounds.lower, c)
            high = _floor_or_ceil(kind, bounds.upper, c)
            if kind is not BinaryKind.MOD and low == high:
                return Constant(low)
            if kind is BinaryKind.MOD and bounds.lower // c == bounds.upper // c:
                terms, constant = linear_form(inner)
                return from_linear_form(terms, constant - (bounds.lower // c) * c)
        return build(kind, inner, Constant(c))


def _floor_or_ceil(kind: BinaryKind, value: int, c: int) -> int:
    return -((-value) // c) if kind is BinaryKind.CEILDIV else value // c


# -- whole maps ---------------------------------------------------------------------


def simplify_expr(expr: AffineExpr, indexing_map: IndexingMap) -> AffineExpr:
    """``expr`` simplified using the ranges of ``indexing_map``'s domain (constraints included)."""
    return _ExprSimplifier(RangeEvaluator(indexing_map)).expr(expr)


def _normalise_constraint(
    expr: AffineExpr, interval: Interval
) -> tuple[AffineExpr, Interval, bool]:
    """``g * E + k in [lo, hi]`` as ``E in [ceil((lo - k) / g), floor((hi - k) / g)]``.

    The leading coefficient is made positive too, so equal constraints look equal.
    Left alone when that would empty the interval; the flag says so (no integer
    point satisfies it: ``d0 * 2 in [3, 3]``).
    """
    terms, constant = linear_form(expr)
    terms = {t: a for t, a in terms.items() if a != 0}
    if not terms:
        return Constant(constant), interval, not interval.contains(constant)
    g = math.gcd(*terms.values())
    if terms[min(terms, key=_order_key)] < 0:
        g = -g
    lo, hi = interval.lower - constant, interval.upper - constant
    if g < 0:
        lo, hi = -hi, -lo
    a = abs(g)
    new_interval = Interval(-((-lo) // a), hi // a)
    if new_interval.is_empty:
        return expr, interval, True
    return from_linear_form({t: c // g for t, c in terms.items()}, 0), new_interval, False


@functools.lru_cache(maxsize=256)
def _simplifier_over(domain: IndexingMap) -> _ExprSimplifier:
    """The simplifier for ``domain`` (a map without results), its memo shared by every map
    over that domain: an emitter's maps share one domain (the thread and block ids' ranges,
    a kernel's constraints) and most of their sub-expressions, which are then simplified
    once for all of them. Exact: a node's simplification depends on the node and the
    domain's ranges alone."""
    return _ExprSimplifier(RangeEvaluator(domain))


def forget_domains() -> None:
    """Forget the domains' simplifiers (:func:`heron.indexing.forget_memos`)."""
    _simplifier_over.cache_clear()


def _bounds_only(indexing_map: IndexingMap) -> IndexingMap:
    """The domain of ``indexing_map`` without its constraints: its variables' bounds alone."""
    return IndexingMap(
        indexing_map.dimensions, (), indexing_map.range_vars, indexing_map.runtime_vars
    )


def _simplify_once(indexing_map: IndexingMap) -> IndexingMap:
    if indexing_map.has_trivially_empty_domain():
        return indexing_map
    n_dims = indexing_map.num_dims
    variables = [*indexing_map.dimensions, *indexing_map.symbols]
    plain = _simplifier_over(_bounds_only(indexing_map))

    merged: dict[AffineExpr, Interval] = {}
    impossible: list[tuple[AffineExpr, Interval]] = []
    for expr, interval in indexing_map.constraints:
        expr, interval, empty = _normalise_constraint(plain.expr(expr), interval)
        if empty:
            impossible.append((expr, interval))
            continue
        if isinstance(expr, Dim | Symbol):
            index = expr.index if isinstance(expr, Dim) else n_dims + expr.index
            tightened = variables[index].bounds.intersect(interval)
            if tightened.is_empty:
                impossible.append((expr, interval))
            else:
                variables[index] = Variable(variables[index].name, tightened)
            continue
        if isinstance(expr, Constant):
            if not interval.contains(expr.value):
                impossible.append((expr, interval))
            continue
        known = merged.get(expr)
        if known is not None and known.intersect(interval).is_empty:
            impossible.append((expr, interval))
        else:
            merged[expr] = interval if known is None else known.intersect(interval)

    dims = tuple(variables[:n_dims])
    n_range = len(indexing_map.range_vars)
    range_vars = tuple(variables[n_dims : n_dims + n_range])
    runtime_vars = tuple(variables[n_dims + n_range :])
    plain_ranges = _simplifier_over(IndexingMap(dims, (), range_vars, runtime_vars)).ranges
    constraints = [
        (expr, interval)
        for expr, interval in merged.items()
        if not interval.contains_interval(plain_ranges.range(expr))
    ]
    constraints.extend(impossible)
    constrained = IndexingMap(dims, (), range_vars, runtime_vars, tuple(constraints))
    simplifier = _simplifier_over(constrained)
    results = tuple(simplifier.expr(e) for e in indexing_map.results)
    return IndexingMap(dims, results, range_vars, runtime_vars, tuple(constraints))


@functools.lru_cache(maxsize=16384)
def simplify(indexing_map: IndexingMap) -> IndexingMap:
    """The simplified map (same variables, same meaning on the domain); idempotent.

    Memoised (maps are frozen values): a compile asks for the same few maps again
    and again (the emitters, the partitioner and flatten-tensors each simplify a
    fusion's maps; a GEMM kernel's tiles repeat one access map at other offsets),
    5 to 15 times each over the program corpus.
    """
    current = indexing_map
    for _ in range(10):
        simplified = _simplify_once(current)
        if simplified == current:
            return simplified
        current = simplified
    return current


def is_known_empty(indexing_map: IndexingMap) -> bool:
    """True when the domain is provably empty (an empty range, an impossible constraint)."""
    if indexing_map.has_trivially_empty_domain():
        return True
    simplified = simplify(indexing_map)
    if simplified.has_trivially_empty_domain():
        return True
    ranges = RangeEvaluator(simplified, use_constraints=False)
    return any(
        _normalise_constraint(expr, interval)[2] or ranges.range(expr).intersect(interval).is_empty
        for expr, interval in simplified.constraints
    )


def remove_unused_symbols(indexing_map: IndexingMap) -> IndexingMap:
    """Drop range and runtime variables no result or constraint uses (order kept).

    A symbol with an empty range is kept: it is what makes the map empty.
    """
    used: set[int] = set()
    for expr in (*indexing_map.results, *(c for c, _ in indexing_map.constraints)):
        used |= used_symbols(expr)
    symbols = indexing_map.symbols
    keep = [i for i, v in enumerate(symbols) if i in used or v.bounds.is_empty]
    if len(keep) == len(symbols):
        return indexing_map
    new_index = {old: new for new, old in enumerate(keep)}
    replacement = [Symbol(new_index.get(i, 0)) for i in range(len(symbols))]

    def rewrite(expr: AffineExpr) -> AffineExpr:
        return replace(expr, symbols=replacement)

    n_range = len(indexing_map.range_vars)
    return IndexingMap(
        indexing_map.dimensions,
        tuple(rewrite(e) for e in indexing_map.results),
        tuple(symbols[i] for i in keep if i < n_range),
        tuple(symbols[i] for i in keep if i >= n_range),
        tuple((rewrite(e), r) for e, r in indexing_map.constraints),
    )


def rescale_symbols(indexing_map: IndexingMap) -> IndexingMap:
    """Replace a range symbol held to one residue by a denser one.

    A constraint ``s mod c in [k, k]`` says only every c-th value of ``s`` is
    in the domain. Substituting ``s = s' * c + k`` (with ``s'`` over the values
    that remain) drops the constraint and lets the simplifier reason about
    ``s'`` directly, e.g. a strided slice feeding a loop. The image of every
    dimension point is unchanged, but the symbol now counts the remaining
    values, so this is a separate step from ``simplify``, which keeps every
    variable's meaning; the result is simplified.
    """
    current = simplify(indexing_map)
    n_range = len(current.range_vars)
    for position, (expr, interval) in enumerate(current.constraints):
        if not (
            interval.is_point
            and isinstance(expr, Binary)
            and expr.kind is BinaryKind.MOD
            and isinstance(expr.lhs, Symbol)
            and expr.lhs.index < n_range
            and isinstance(expr.rhs, Constant)
            and expr.rhs.value > 0
        ):
            continue
        index, stride, residue = expr.lhs.index, expr.rhs.value, interval.lower
        old = current.range_vars[index].bounds
        new_bounds = Interval(-((residue - old.lower) // stride), (old.upper - residue) // stride)
        symbols = [Symbol(i) for i in range(current.num_symbols)]
        symbols[index] = Symbol(index) * stride + residue
        range_vars = list(current.range_vars)
        range_vars[index] = Variable(range_vars[index].name, new_bounds)
        rescaled = IndexingMap(
            current.dimensions,
            tuple(replace(e, symbols=symbols) for e in current.results),
            tuple(range_vars),
            current.runtime_vars,
            tuple(
                (replace(e, symbols=symbols), r)
                for i, (e, r) in enumerate(current.constraints)
                if i != position
            ),
        )
        return rescale_symbols(rescaled)
    return current
