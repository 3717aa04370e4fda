"""Affine expressions over dimensions and symbols, as MLIR and XLA write them.

An expression is a tree of ``Constant``, ``Dim`` (d0, d1...), ``Symbol``
(s0, s1...) and ``Binary`` nodes (+, *, floordiv, ceildiv, mod). Nodes are
immutable and hashable with structural equality, so they can key dicts (the
constraints of an indexing map) and be compared in tests; they are hash-consed
(:class:`AffineExpr`), so that equality and hashing cost O(1).

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
import operator
from collections.abc import Sequence


class BinaryKind(enum.Enum):
    ADD = "+"
    MUL = "*"
    FLOORDIV = "floordiv"
    CEILDIV = "ceildiv"
    MOD = "mod"


#: Canonical order of the kinds in a sum's terms (the simplifier's, through ``order_key``).
_KIND_RANK = {
    BinaryKind.MUL: 0,
    BinaryKind.FLOORDIV: 1,
    BinaryKind.CEILDIV: 2,
    BinaryKind.MOD: 3,
    BinaryKind.ADD: 4,
}

#: Every node built and not yet forgotten, by its kind and fields (children by identity).
_INTERNED: dict[tuple, AffineExpr] = {}
#: How many nodes :data:`_INTERNED` keeps before it starts again: a bound on its memory
#: (a node built after a reset may equal one built before: equality then compares fields).
_INTERN_LIMIT = 1 << 17


def _interned(
    cls: type,
    key: tuple,
    hash_: int,
    order_key: tuple,
    max_dim: int,
    max_symbol: int,
    **fields: object,
) -> AffineExpr:
    """A new node of ``cls``, remembered under ``key``."""
    node = object.__new__(cls)
    for name, value in fields.items():
        object.__setattr__(node, name, value)
    object.__setattr__(node, "hash", hash_)
    object.__setattr__(node, "order_key", order_key)
    object.__setattr__(node, "max_dim", max_dim)
    object.__setattr__(node, "max_symbol", max_symbol)
    if len(_INTERNED) >= _INTERN_LIMIT:
        _INTERNED.clear()
    _INTERNED[key] = node
    return node


def forget_interned() -> None:
    """Start the intern table again (:func:`heron.indexing.forget_memos`); nodes built
    before stay valid and equal to the ones built after."""
    _INTERNED.clear()


class AffineExpr:
    """Base of all expression nodes; operators build (and lightly fold) new nodes.

    Nodes are hash-consed: building a node equal to one already built returns that
    node, so equality is identity almost always and costs O(1), as does hashing (the
    hash is computed once, from the children's). The simplifier compares, hashes and
    sorts the same sub-expressions thousands of times per kernel; as attrs values that
    compared whole trees, it was a fifth of compiling an indexing-heavy program.
    ``order_key`` is the canonical order of the terms of a sum (compound terms, then
    dimensions, symbols, constants), also computed once.
    """

    __slots__ = ("hash", "max_dim", "max_symbol", "order_key")
    hash: int
    order_key: tuple
    #: The highest dimension and symbol index the expression uses (-1: none), what an
    #: IndexingMap checks of every expression it is built with.
    max_dim: int
    max_symbol: int

    def __hash__(self) -> int:
        return self.hash

    def __eq__(self, other: object) -> bool:
        if self is other:
            return True
        if type(other) is not type(self):
            return NotImplemented if not isinstance(other, AffineExpr) else False
        # Equal nodes are one object unless the intern table was reset between them.
        return self.hash == other.hash and self._fields() == other._fields()  # type: ignore[attr-defined]

    def __ne__(self, other: object) -> bool:
        equal = self.__eq__(other)
        return equal if equal is NotImplemented else not equal

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError(f"affine expressions are immutable (setting {name!r})")

    def __delattr__(self, name: str) -> None:
        raise AttributeError(f"affine expressions are immutable (deleting {name!r})")

    def __copy__(self) -> AffineExpr:
        return self

    def __deepcopy__(self, memo: dict) -> AffineExpr:
        return self

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


class _Leaf(AffineExpr):
    """A leaf: one integer (a constant's value, a variable's index), interned by kind."""

    __slots__ = ()
    _TAG: int  #: interning key of the kind (a Binary's is its rank, >= 0)
    _RANK: int  #: first element of the order key
    _FIELD: str  #: the integer's name

    def __new__(cls, number: int) -> _Leaf:
        number = int(operator.index(number))  # numpy integers and bools as plain ints
        key = (cls._TAG, number)
        node = _INTERNED.get(key)
        if node is None:
            max_dim = number if cls is Dim else -1
            max_symbol = number if cls is Symbol else -1
            fields = {cls._FIELD: number}
            node = _interned(
                cls, key, hash(key), (cls._RANK, number), max_dim, max_symbol, **fields
            )
        return node  # type: ignore[return-value]

    def _fields(self) -> tuple:
        return (getattr(self, self._FIELD),)

    def __reduce__(self) -> tuple:
        return type(self), self._fields()


class Constant(_Leaf):
    __slots__ = ("value",)
    _TAG, _RANK, _FIELD = -1, 3, "value"
    value: int

    def evaluate(self, dims: Sequence[int], symbols: Sequence[int] = ()) -> int:
        return self.value


class Dim(_Leaf):
    __slots__ = ("index",)
    _TAG, _RANK, _FIELD = -2, 1, "index"
    index: int

    def evaluate(self, dims: Sequence[int], symbols: Sequence[int] = ()) -> int:
        return dims[self.index]


class Symbol(_Leaf):
    __slots__ = ("index",)
    _TAG, _RANK, _FIELD = -3, 2, "index"
    index: int

    def evaluate(self, dims: Sequence[int], symbols: Sequence[int] = ()) -> int:
        return symbols[self.index]


class Binary(AffineExpr):
    __slots__ = ("kind", "lhs", "rhs")
    kind: BinaryKind
    lhs: AffineExpr
    rhs: AffineExpr

    def __new__(cls, kind: BinaryKind, lhs: AffineExpr, rhs: AffineExpr) -> Binary:
        rank = _KIND_RANK.get(kind)
        if rank is None:
            raise TypeError(f"{kind!r} is not a BinaryKind")
        key = (rank, lhs, rhs)
        node = _INTERNED.get(key)
        if node is None:
            if not (isinstance(lhs, AffineExpr) and isinstance(rhs, AffineExpr)):
                raise TypeError(f"{kind.value} of {lhs!r} and {rhs!r}: not affine expressions")
            node = _interned(
                cls,
                key,
                hash((rank, lhs.hash, rhs.hash)),
                (0, lhs.order_key, rank, rhs.order_key),
                max(lhs.max_dim, rhs.max_dim),
                max(lhs.max_symbol, rhs.max_symbol),
                kind=kind,
                lhs=lhs,
                rhs=rhs,
            )
        return node  # type: ignore[return-value]

    def _fields(self) -> tuple:
        return (self.kind, self.lhs, self.rhs)

    def __reduce__(self) -> tuple:
        return Binary, (self.kind, self.lhs, self.rhs)

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
