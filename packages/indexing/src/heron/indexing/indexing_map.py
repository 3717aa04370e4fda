"""IndexingMap: an affine map with a domain, XLA's unit of index reasoning.

A map sends dimension values (d0, d1... or th_x, bl_x for thread maps) and
symbol values to a tuple of result indices::

    (d0, d1)[s0]{rt0} -> (d1, d0 * 4 + s0 + rt0),
    domain: d0 in [0, 19], d1 in [0, 39], s0 in [0, 3], rt0 in [0, 5], d0 + s0 in [0, 20]

Symbols come in two kinds, numbered together: first the *range* variables
(loop variables the consumer iterates over, e.g. a reduced dimension or a
vector index), then the *runtime* variables (values read at run time, e.g.
a dynamic-slice offset, with the range they may take). In expressions both
are ``Symbol(i)``: ``i < len(range_vars)`` is a range variable, the rest are
runtime variables. In text, runtime variables are written in ``{...}``.

Constraints ``expr in [lo, hi]`` restrict the domain further (pad's
interior holes, concatenate's operand ranges); a point of the domain is a
value for every variable inside its bounds that satisfies every constraint.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator, Sequence

import attrs

from heron.indexing.affine import AffineExpr, Dim, Symbol, used_variables
from heron.indexing.interval import Interval


class IndexingError(ValueError):
    """An indexing map is malformed (bad text, mismatched counts, empty ranges...)."""


@attrs.frozen(cache_hash=True)
class Variable:
    """A named variable with its inclusive range."""

    name: str
    bounds: Interval

    def __str__(self) -> str:
        return f"{self.name} in {self.bounds}"


def _check_variables(kind: str, variables: tuple[Variable, ...]) -> None:
    for v in variables:
        if not isinstance(v, Variable):
            raise IndexingError(f"{kind} variable {v!r} is not a Variable")


def _constraint_pairs(
    constraints: Sequence[Sequence[AffineExpr | Interval]],
) -> tuple[tuple[AffineExpr, Interval], ...]:
    return tuple((expr, interval) for expr, interval in constraints)  # type: ignore[misc]


@attrs.frozen(cache_hash=True)
class IndexingMap:
    # Tuples whatever a caller passes: a map is a value (hashed, memoised by the
    # simplifier), so no field may be a list.
    dimensions: tuple[Variable, ...] = attrs.field(converter=tuple)
    results: tuple[AffineExpr, ...] = attrs.field(converter=tuple)
    range_vars: tuple[Variable, ...] = attrs.field(default=(), converter=tuple)
    runtime_vars: tuple[Variable, ...] = attrs.field(default=(), converter=tuple)
    constraints: tuple[tuple[AffineExpr, Interval], ...] = attrs.field(
        default=(), converter=_constraint_pairs
    )

    def __attrs_post_init__(self) -> None:
        _check_variables("dimension", self.dimensions)
        _check_variables("range", self.range_vars)
        _check_variables("runtime", self.runtime_vars)
        n_dims, n_syms = len(self.dimensions), self.num_symbols
        for expr in (*self.results, *(c for c, _ in self.constraints)):
            if not isinstance(expr, AffineExpr):
                raise IndexingError(f"{expr!r} is not an affine expression")
            if expr.max_dim < n_dims and expr.max_symbol < n_syms:
                continue
            dims, syms = used_variables(expr)
            bad_dims = sorted(d for d in dims if d >= n_dims)
            bad_syms = sorted(s for s in syms if s >= n_syms)
            if bad_dims or bad_syms:
                raise IndexingError(
                    f"expression {expr} uses "
                    + ", ".join([*(f"d{d}" for d in bad_dims), *(f"s{s}" for s in bad_syms)])
                    + f" but the map has {n_dims} dimension(s) and {n_syms} symbol(s)"
                )

    # -- construction helpers -------------------------------------------------
    @classmethod
    def identity(cls, dims: Sequence[int], prefix: str = "d") -> IndexingMap:
        """The identity over a shape: ``(d0, d1) -> (d0, d1)`` with d_i in [0, dims_i - 1]."""
        variables = tuple(Variable(f"{prefix}{i}", Interval(0, n - 1)) for i, n in enumerate(dims))
        return cls(variables, tuple(Dim(i) for i in range(len(dims))))

    @classmethod
    def for_shape(
        cls,
        dims: Sequence[int],
        results: Sequence[AffineExpr],
        range_sizes: Sequence[int] = (),
        runtime_bounds: Sequence[Interval] = (),
        constraints: Sequence[tuple[AffineExpr, Interval]] = (),
    ) -> IndexingMap:
        """A map whose dimensions range over ``dims`` and symbols over ``range_sizes``."""
        return cls(
            tuple(Variable(f"d{i}", Interval(0, n - 1)) for i, n in enumerate(dims)),
            tuple(results),
            tuple(Variable(f"s{i}", Interval(0, n - 1)) for i, n in enumerate(range_sizes)),
            tuple(Variable(f"rt{i}", b) for i, b in enumerate(runtime_bounds)),
            tuple(constraints),
        )

    # -- facts -----------------------------------------------------------------
    @property
    def num_dims(self) -> int:
        return len(self.dimensions)

    @property
    def num_symbols(self) -> int:
        return len(self.range_vars) + len(self.runtime_vars)

    @property
    def num_results(self) -> int:
        return len(self.results)

    @property
    def symbols(self) -> tuple[Variable, ...]:
        """Range variables then runtime variables: the order of ``Symbol`` indices."""
        return self.range_vars + self.runtime_vars

    def symbol_bounds(self, index: int) -> Interval:
        return self.symbols[index].bounds

    def variable_bounds(self, expr: Dim | Symbol) -> Interval:
        if isinstance(expr, Dim):
            return self.dimensions[expr.index].bounds
        return self.symbols[expr.index].bounds

    def has_trivially_empty_domain(self) -> bool:
        """Some variable or constraint range is empty (no analysis needed)."""
        return any(v.bounds.is_empty for v in (*self.dimensions, *self.symbols)) or any(
            r.is_empty for _, r in self.constraints
        )

    # -- evaluation ------------------------------------------------------------
    def in_domain(self, dims: Sequence[int], symbols: Sequence[int] = ()) -> bool:
        """Whether a point lies in the domain (bounds and constraints)."""
        if len(dims) != self.num_dims or len(symbols) != self.num_symbols:
            raise IndexingError(
                f"point has {len(dims)} dims and {len(symbols)} symbols; the map has "
                f"{self.num_dims} and {self.num_symbols}"
            )
        for value, var in zip(dims, self.dimensions):
            if not var.bounds.contains(value):
                return False
        for value, var in zip(symbols, self.symbols):
            if not var.bounds.contains(value):
                return False
        return all(r.contains(c.evaluate(dims, symbols)) for c, r in self.constraints)

    def evaluate(self, dims: Sequence[int], symbols: Sequence[int] = ()) -> tuple[int, ...]:
        """The results at a point (the domain is not checked: see ``in_domain``)."""
        return tuple(e.evaluate(dims, symbols) for e in self.results)

    def domain_points(self) -> Iterator[tuple[tuple[int, ...], tuple[int, ...]]]:
        """Every (dims, symbols) point of the domain, in row-major order. For tests."""
        dim_ranges = [range(v.bounds.lower, v.bounds.upper + 1) for v in self.dimensions]
        sym_ranges = [range(v.bounds.lower, v.bounds.upper + 1) for v in self.symbols]
        for point in itertools.product(*dim_ranges, *sym_ranges):
            dims, syms = point[: self.num_dims], point[self.num_dims :]
            if all(r.contains(c.evaluate(dims, syms)) for c, r in self.constraints):
                yield dims, syms

    # -- text ------------------------------------------------------------------
    def format(self) -> str:
        dim_names = [v.name for v in self.dimensions]
        symbol_names = [v.name for v in self.symbols]
        head = "(" + ", ".join(dim_names) + ")"
        if self.range_vars:
            head += "[" + ", ".join(v.name for v in self.range_vars) + "]"
        if self.runtime_vars:
            head += "{" + ", ".join(v.name for v in self.runtime_vars) + "}"
        body = ", ".join(e.format(dim_names, symbol_names) for e in self.results)
        text = f"{head} -> ({body})"
        domain = [str(v) for v in (*self.dimensions, *self.symbols)]
        domain += [f"{c.format(dim_names, symbol_names)} in {r}" for c, r in self.constraints]
        if domain:
            text += ", domain: " + ", ".join(domain)
        return text

    def __str__(self) -> str:
        return self.format()
