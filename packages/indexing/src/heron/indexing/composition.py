"""Composition of indexing maps: how a fusion's root indices reach its parameters.

``compose(first, second)`` is ``second ∘ first``: first's results are fed to
second's dimensions. Chaining the per-instruction output-to-input maps this
way gives the map from a fusion's output to each operand.

Symbols of the result are numbered range variables first (first's, then
second's), then runtime variables (first's, then second's), because
``Symbol(i)`` below ``len(range_vars)`` means a range variable. The domain is
first's domain, restricted to the points whose results lie in second's
dimension bounds, and by second's own constraints; the simplifier drops the
restrictions that provably hold.
"""

from __future__ import annotations

import functools

from heron.indexing.affine import AffineExpr, Symbol, replace
from heron.indexing.indexing_map import IndexingError, IndexingMap, Variable
from heron.indexing.simplifier import simplify


def _unique_names(variables: list[Variable], taken: set[str], default: str) -> list[Variable]:
    """Rename variables whose names clash (both maps may call a symbol ``s0``)."""
    renamed = []
    for index, var in enumerate(variables):
        name = var.name
        if name in taken:
            name = f"{default}{index}"
            suffix = 0
            while name in taken:
                suffix += 1
                name = f"{default}{index}_{suffix}"
        taken.add(name)
        renamed.append(Variable(name, var.bounds) if name != var.name else var)
    return renamed


@functools.lru_cache(maxsize=8192)
def compose(first: IndexingMap, second: IndexingMap) -> IndexingMap:
    """``second ∘ first``, simplified (``len(first.results) == second.num_dims``).

    Memoised (maps are frozen values): the partitioner composes a map per operand
    access of every kernel, the fusion passes' cost model one per read, and most are
    the same few (an identity through an elementwise op's identity)."""
    if first.num_results != second.num_dims:
        raise IndexingError(
            f"cannot compose: the first map has {first.num_results} result(s) but the second "
            f"has {second.num_dims} dimension(s)\n  first:  {first.format()}\n"
            f"  second: {second.format()}"
        )
    r1, r2 = len(first.range_vars), len(second.range_vars)
    t1 = len(first.runtime_vars)
    first_symbols: list[AffineExpr] = [Symbol(i) for i in range(r1)]
    first_symbols += [Symbol(r1 + r2 + i) for i in range(t1)]
    second_symbols: list[AffineExpr] = [Symbol(r1 + i) for i in range(r2)]
    second_symbols += [Symbol(r1 + r2 + t1 + i) for i in range(len(second.runtime_vars))]

    first_results = [replace(e, symbols=first_symbols) for e in first.results]

    def from_second(expr: AffineExpr) -> AffineExpr:
        return replace(expr, dims=first_results, symbols=second_symbols)

    taken = {v.name for v in first.dimensions}
    range_vars = _unique_names([*first.range_vars, *second.range_vars], taken, "s")
    runtime_vars = _unique_names([*first.runtime_vars, *second.runtime_vars], taken, "rt")

    constraints = [(replace(e, symbols=first_symbols), r) for e, r in first.constraints]
    constraints += [(from_second(e), r) for e, r in second.constraints]
    constraints += [(e, v.bounds) for e, v in zip(first_results, second.dimensions)]
    composed = IndexingMap(
        first.dimensions,
        tuple(from_second(e) for e in second.results),
        tuple(range_vars),
        tuple(runtime_vars),
        tuple(constraints),
    )
    return simplify(composed)
