"""MLIR ``affine_map`` text, the form emitters hand to MLIR.

heron has no MLIR bindings; emitters write this text into the IR they
generate and MLIR parses it later. An ``affine_map`` has no domain, so
``to_mlir_affine_map`` drops bounds and constraints (the emitter guards
those separately), and ``from_mlir_affine_map`` takes the bounds as
arguments. MLIR knows no runtime variables: they print as trailing symbols.
"""

from __future__ import annotations

from collections.abc import Sequence

from heron.indexing.indexing_map import IndexingError, IndexingMap, Variable
from heron.indexing.interval import Interval
from heron.indexing.parser import parse_map_header

Bounds = Interval | tuple[int, int]


def to_mlir_affine_map(indexing_map: IndexingMap) -> str:
    """``affine_map<(d0, d1)[s0] -> (d1, d0 * 4 + s0)>`` (MLIR's d/s names)."""
    dims = [f"d{i}" for i in range(indexing_map.num_dims)]
    symbols = [f"s{i}" for i in range(indexing_map.num_symbols)]
    head = "(" + ", ".join(dims) + ")"
    if symbols:
        head += "[" + ", ".join(symbols) + "]"
    body = ", ".join(e.format(dims, symbols) for e in indexing_map.results)
    return f"affine_map<{head} -> ({body})>"


def _interval(bounds: Bounds, what: str) -> Interval:
    interval = bounds if isinstance(bounds, Interval) else Interval(*bounds)
    if interval.is_empty:
        raise IndexingError(f"empty range {interval} for {what}")
    return interval


def from_mlir_affine_map(
    text: str,
    dim_bounds: Sequence[Bounds],
    symbol_bounds: Sequence[Bounds] = (),
    num_runtime_vars: int = 0,
) -> IndexingMap:
    """An ``IndexingMap`` from ``affine_map<...>`` (or the bare map) and the variables' bounds.

    The last ``num_runtime_vars`` symbols become runtime variables.
    """
    body = text.strip()
    if body.startswith("affine_map"):
        inner = body[len("affine_map") :].strip()
        if not (inner.startswith("<") and inner.endswith(">")):
            raise IndexingError(f"expected 'affine_map<...>', got {text!r}")
        body = inner[1:-1]
    dims, symbols, runtime, results = parse_map_header(body)
    if runtime:
        raise IndexingError(f"an MLIR affine_map has no runtime variables ('{{...}}'): {text!r}")
    if len(dims) != len(dim_bounds):
        raise IndexingError(
            f"{text!r} has {len(dims)} dimension(s) but {len(dim_bounds)} bound(s) were given"
        )
    if len(symbols) != len(symbol_bounds):
        raise IndexingError(
            f"{text!r} has {len(symbols)} symbol(s) but {len(symbol_bounds)} bound(s) were given"
        )
    if not 0 <= num_runtime_vars <= len(symbols):
        raise IndexingError(
            f"{num_runtime_vars} runtime variable(s) asked for, but {text!r} has "
            f"{len(symbols)} symbol(s)"
        )
    variables = [
        Variable(n, _interval(b, n))
        for n, b in zip([*dims, *symbols], [*dim_bounds, *symbol_bounds])
    ]
    n_range = len(symbols) - num_runtime_vars
    return IndexingMap(
        tuple(variables[: len(dims)]),
        tuple(results),
        tuple(variables[len(dims) : len(dims) + n_range]),
        tuple(variables[len(dims) + n_range :]),
    )
