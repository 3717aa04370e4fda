"""Affine expressions over dimensions and symbols, as MLIR and XLA write them.

An expression is a tree of ``Constant``, ``Dim`` (d0, d1...), ``Symbol``
(s0, s1...) and ``Binary`` nodes (+, *, floordiv, ceildiv, mod). Nodes are
immutable and hashable with structural equality, so they can key dicts (the
constraints of an indexing map) and be compared in tests.

The constructors in this module fold the trivial cases (constant arithmetic,
``x + 0``, ``x * 1``, ``x * 0``, ``x floordiv 1``, ``x mod 1``) so that
expressions built by the analyses stay small; everything smarter, and
everything that needs the variables' ranges, is the simplifier's job.

``floordiv``, ``ceildiv`` and ``mod`` follow MLIR: floor division rounds to
minus infinity, ``mod`` has the sign of the (positive) divisor.
"""

from __future__ import annotations

import enum
import functools
from collections.abc import Sequence

import attrs


class BinaryKind(enum.Enum):
    ADD = "+"
    MUL = "*"
    FLOORDIV = "floordiv"
    CEILDIV = "ceildiv"
    MOD = "mod"


class AffineExpr:
    """Base of all expression nodes; operators build (and lightly fold) new nodes."""

    __slots__ = ()

    # -- construction --------------------------------------------------------
    def __add__(self, other: AffineExpr | int) -> AffineExpr:
        return add(self, _expr(other))

    def __radd__(self, other: int) -> AffineExpr:
        return add(_expr(other), self)

    def __sub__(self, other: AffineExpr | int) -> AffineExpr:
        return add(self, mul(_expr(other), Constant(-1)))

    def __rsub__(self, other: int) -> AffineExpr:
        return add(_expr(other), mul(self, Constant(-1)))

    def __neg__(self) -> AffineExpr:
        return mul(self, Constant(-1))

    def __mul__(self, other: AffineExpr | int) -> AffineExpr:
        return mul(self, _expr(other))

    def __rmul__(self, other: int) -> AffineExpr:
        return mul(_expr(other), self)

    def __floordiv__(self, other: AffineExpr | int) -> AffineExpr:
        return floordiv(self, _expr(other))

    def __mod__(self, other: AffineExpr | int) -> AffineExpr:
        return mod(self, _expr(other))

    def ceildiv(self, other: AffineExpr | int) -> AffineExpr:
        return ceildiv(self, _expr(other))

    # -- inspection ----------------------------------------------------------
    # Concrete nodes define ``evaluate(dims, symbols) -> int``.

    def format(self, dim_names: Sequence[str] | None = None,
               symbol_names: Sequence[str] | None = None) -> str:  # fmt: skip
        """Text in MLIR's syntax, with the given variable names (d0/s0 by default)."""
        return _format(self, dim_names, symbol_names, _Prec.ADD)

    def __str__(self) -> str:
        return self.format()

    def __repr__(self) -> str:
        return f"AffineExpr({self.format()})"


@attrs.frozen(repr=False)
class Constant(AffineExpr):
    value: int

    def evaluate(self, dims: Sequence[int], symbols: Sequence[int] = ()) -> int:
        return self.value


@attrs.frozen(repr=False)
class Dim(AffineExpr):
    index: int

    def evaluate(self, dims: Sequence[int], symbols: Sequence[int] = ()) -> int:
        return dims[self.index]


@attrs.frozen(repr=False)
class Symbol(AffineExpr):
    index: int

    def evaluate(self, dims: Sequence[int], symbols: Sequence[int] = ()) -> int:
        return symbols[self.index]


@attrs.frozen(repr=False, cache_hash=True)
class Binary(AffineExpr):
    kind: BinaryKind
    lhs: AffineExpr
    rhs: AffineExpr

    def evaluate(self, dims: Sequence[int], symbols: Sequence[int] = ()) -> int:
        a = self.lhs.evaluate(dims, symbols)
        b = self.rhs.evaluate(dims, symbols)
        return _apply(self.kind, a, b)


def _apply(kind: BinaryKind, a: int, b: int) -> int:
    if kind is BinaryKind.ADD:
        return a + b
    if kind is BinaryKind.MUL:
        return a * b
    if b == 0:
        raise ZeroDivisionError(f"{kind.value} by zero in an affine expression")
    if kind is BinaryKind.FLOORDIV:
        return a // b
    if kind is BinaryKind.CEILDIV:
        return -((-a) // b)
    return a % b  # Python's % has the divisor's sign, as MLIR's mod


def _expr(value: AffineExpr | int) -> AffineExpr:
    if isinstance(value, AffineExpr):
        return value
    if isinstance(value, int) and not isinstance(value, bool):
        return Constant(value)
    raise TypeError(f"cannot use {value!r} in an affine expression")


# -- folding constructors ------------------------------------------------------


def add(a: AffineExpr, b: AffineExpr) -> AffineExpr:
    if isinstance(a, Constant) and isinstance(b, Constant):
        return Constant(a.value + b.value)
    if isinstance(a, Constant) and a.value == 0:
        return b
    if isinstance(b, Constant) and b.value == 0:
        return a
    if isinstance(a, Constant):  # constants go right: d0 + 1, not 1 + d0
        a, b = b, a
    return Binary(BinaryKind.ADD, a, b)


def mul(a: AffineExpr, b: AffineExpr) -> AffineExpr:
    if isinstance(a, Constant) and isinstance(b, Constant):
        return Constant(a.value * b.value)
    if isinstance(a, Constant):
        a, b = b, a
    if isinstance(b, Constant):
        if b.value == 0:
            return Constant(0)
        if b.value == 1:
            return a
        if isinstance(a, Binary) and a.kind is BinaryKind.MUL and isinstance(a.rhs, Constant):
            return mul(a.lhs, Constant(a.rhs.value * b.value))
    return Binary(BinaryKind.MUL, a, b)


def _division(kind: BinaryKind, a: AffineExpr, b: AffineExpr) -> AffineExpr:
    if isinstance(b, Constant):
        if b.value == 0:
            raise ZeroDivisionError(f"{kind.value} by zero in an affine expression")
        if isinstance(a, Constant):
            return Constant(_apply(kind, a.value, b.value))
        if b.value == 1:
            return Constant(0) if kind is BinaryKind.MOD else a
    return Binary(kind, a, b)


def floordiv(a: AffineExpr, b: AffineExpr) -> AffineExpr:
    return _division(BinaryKind.FLOORDIV, a, b)


def ceildiv(a: AffineExpr, b: AffineExpr) -> AffineExpr:
    return _division(BinaryKind.CEILDIV, a, b)


def mod(a: AffineExpr, b: AffineExpr) -> AffineExpr:
    return _division(BinaryKind.MOD, a, b)


def constant(value: int) -> Constant:
    return Constant(value)


def dim(index: int) -> Dim:
    return Dim(index)


def symbol(index: int) -> Symbol:
    return Symbol(index)


# -- queries ------------------------------------------------------------------


@functools.lru_cache(maxsize=1 << 16)
def used_variables(expr: AffineExpr) -> tuple[frozenset[int], frozenset[int]]:
    """The dimension and the symbol indices ``expr`` uses, in one walk; memoised by the
    expression's value (every IndexingMap checks its expressions with it, and the
    simplifier rebuilds maps from the same expressions many times)."""
    dims, symbols = set(), set()
    for node in walk(expr):
        if isinstance(node, Dim):
            dims.add(node.index)
        elif isinstance(node, Symbol):
            symbols.add(node.index)
    return frozenset(dims), frozenset(symbols)


def used_dims(expr: AffineExpr) -> set[int]:
    return set(used_variables(expr)[0])


def used_symbols(expr: AffineExpr) -> set[int]:
    return set(used_variables(expr)[1])


def walk(expr: AffineExpr):
    """Every node of ``expr``, parents before children."""
    stack = [expr]
    while stack:
        node = stack.pop()
        yield node
        if isinstance(node, Binary):
            stack.append(node.rhs)
            stack.append(node.lhs)


def replace(expr: AffineExpr, dims: Sequence[AffineExpr] | None = None,
            symbols: Sequence[AffineExpr] | None = None) -> AffineExpr:  # fmt: skip
    """Substitute expressions for dimensions and/or symbols (None keeps them)."""
    if isinstance(expr, Dim):
        return dims[expr.index] if dims is not None else expr
    if isinstance(expr, Symbol):
        return symbols[expr.index] if symbols is not None else expr
    if isinstance(expr, Binary):
        lhs = replace(expr.lhs, dims, symbols)
        rhs = replace(expr.rhs, dims, symbols)
        if lhs is expr.lhs and rhs is expr.rhs:
            return expr
        return _BUILDERS[expr.kind](lhs, rhs)
    return expr


_BUILDERS = {
    BinaryKind.ADD: add,
    BinaryKind.MUL: mul,
    BinaryKind.FLOORDIV: floordiv,
    BinaryKind.CEILDIV: ceildiv,
    BinaryKind.MOD: mod,
}


def build(kind: BinaryKind, lhs: AffineExpr, rhs: AffineExpr) -> AffineExpr:
    """The folding constructor for ``kind``."""
    return _BUILDERS[kind](lhs, rhs)


# -- printing -----------------------------------------------------------------


class _Prec(enum.IntEnum):
    ADD = 0
    MUL = 1
    ATOM = 2


def _format(expr: AffineExpr, dim_names, symbol_names, context: _Prec) -> str:
    if isinstance(expr, Constant):
        return str(expr.value)
    if isinstance(expr, Dim):
        return dim_names[expr.index] if dim_names is not None else f"d{expr.index}"
    if isinstance(expr, Symbol):
        return symbol_names[expr.index] if symbol_names is not None else f"s{expr.index}"
    assert isinstance(expr, Binary)
    if expr.kind is BinaryKind.ADD:
        lhs = _format(expr.lhs, dim_names, symbol_names, _Prec.ADD)
        rhs, negative = _negated_term(expr.rhs)
        if negative is not None:
            text = f"{lhs} - {_format(negative, dim_names, symbol_names, _Prec.MUL)}"
        else:
            text = f"{lhs} + {_format(rhs, dim_names, symbol_names, _Prec.MUL)}"
        return f"({text})" if context > _Prec.ADD else text
    # As the seeds write them: a chain of products needs no brackets (a * b * c),
    # but a compound left side of floordiv/ceildiv/mod is bracketed
    # ((th_x * 4) mod 1024), and so is the right side unless it is an atom.
    lhs_context = _Prec.MUL if expr.kind is BinaryKind.MUL else _Prec.ATOM
    lhs = _format(expr.lhs, dim_names, symbol_names, lhs_context)
    rhs = _format(expr.rhs, dim_names, symbol_names, _Prec.ATOM)
    text = f"{lhs} {expr.kind.value} {rhs}"
    return f"({text})" if context > _Prec.MUL or (
        context == _Prec.MUL and expr.kind is not BinaryKind.MUL
    ) else text  # fmt: skip


def _negated_term(expr: AffineExpr) -> tuple[AffineExpr, AffineExpr | None]:
    """If ``expr`` is ``-c`` or ``x * -c``, the positive term to subtract."""
    if isinstance(expr, Constant) and expr.value < 0:
        return expr, Constant(-expr.value)
    if (
        isinstance(expr, Binary)
        and expr.kind is BinaryKind.MUL
        and isinstance(expr.rhs, Constant)
        and expr.rhs.value < 0
    ):
        return expr, mul(expr.lhs, Constant(-expr.rhs.value))
    return expr, None
