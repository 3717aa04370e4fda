"""Shapes and layouts, as HLO text spells them.

An array shape is an element type, dimension sizes and an optional layout
(``f32[8,4]{1,0}``); a tuple shape is an ordered, possibly nested, list of
shapes (``(f32[], (s32[2], pred[]))``). Layout suffixes that heron does not
interpret (tiling ``T(8,128)``, memory space ``S(1)``, element size ``E(4)``)
are kept verbatim so that printing gives them back.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import TypeAlias

import attrs

from heron.hlo.element_types import ElementType

#: The most elements one array may have. Far above any real device memory,
#: far below 2**62 (where byte sizes overflow int64): a shape beyond it is an
#: error at parse time instead of an allocation attempt later.
MAX_ELEMENTS = 2**48


@attrs.frozen(cache_hash=True)
class Layout:
    """A minor-to-major dimension order, plus uninterpreted suffix text.

    ``{1,0:T(8,128)}`` becomes ``Layout((1, 0), "T(8,128)")``.
    """

    minor_to_major: tuple[int, ...]
    suffix: str = ""

    def __str__(self) -> str:
        body = ",".join(str(d) for d in self.minor_to_major)
        return "{" + body + (":" + self.suffix if self.suffix else "") + "}"

    @classmethod
    def default_for_rank(cls, rank: int) -> Layout:
        """Row-major: the last dimension is the most minor."""
        return cls(tuple(range(rank - 1, -1, -1)))

    @property
    def is_default(self) -> bool:
        return not self.suffix and self.minor_to_major == tuple(
            range(len(self.minor_to_major) - 1, -1, -1)
        )

    @property
    def is_tiled(self) -> bool:
        """Whether the suffix tiles the buffer: it has a ``T`` part (``T(8,128)``,
        ``T(8,128)(2,1)``). heron's kernels and memory layout know minor-to-major
        orders only; the suffix's other parts (an element size ``E(4)``, a memory
        space ``S(1)``, ...) leave that order as it is. The one test of it: every
        refusal of tiled layouts asks here."""
        return "T" in _suffix_tags(self.suffix)


def _suffix_tags(suffix: str) -> list[str]:
    """The tags of a layout suffix's parts, in order: ``T(8,128)(2,1)E(4)S(1)`` ->
    ``["T", "E", "S"]``.

    XLA prints the parts one after another (``D``, ``T``, ``L``, ``#``, ``*``, ``E``,
    ``S``, ``SC``, ``P``, ``M``), each a tag and its parenthesised groups; a tag is
    read outside parentheses only, so a physical shape's own layout (``P(...)``)
    names none. Colons and spaces between parts are accepted as separators.
    """
    tags: list[str] = []
    tag = ""
    depth = 0
    for c in suffix:
        if c == "(":
            if depth == 0 and tag:
                tags.append(tag)
                tag = ""
            depth += 1
        elif c == ")":
            depth = max(depth - 1, 0)
        elif depth == 0:
            if c.isalpha() or c in "#*":
                tag += c
            elif tag:
                tags.append(tag)
                tag = ""
    if tag:
        tags.append(tag)
    return tags


@attrs.frozen(cache_hash=True)
class ArrayShape:
    """An array (or token) shape.

    ``dynamic`` marks bounded dynamic dimensions (``<=8``): the size recorded is
    the bound. It is empty when no dimension is dynamic.
    """

    element_type: ElementType
    dims: tuple[int, ...]
    layout: Layout | None = None
    dynamic: tuple[bool, ...] = ()
    #: The product of ``dims``, counted once: the fusion passes' cost model reads it
    #: millions of times for a large program (3.5 million in jax-cosmo's Fisher matrix).
    num_elements: int = attrs.field(init=False, eq=False, hash=False, repr=False)

    def __attrs_post_init__(self) -> None:
        object.__setattr__(self, "num_elements", math.prod(self.dims))

    @property
    def rank(self) -> int:
        return len(self.dims)

    @property
    def is_tuple(self) -> bool:
        return False

    @property
    def is_token(self) -> bool:
        return self.element_type is ElementType.TOKEN

    @property
    def is_scalar(self) -> bool:
        return not self.dims

    @property
    def numpy_dtype(self):
        return self.element_type.numpy_dtype

    @property
    def minor_to_major(self) -> tuple[int, ...]:
        """The layout's order, row-major when the shape carries no layout."""
        if self.layout is None:
            return tuple(range(self.rank - 1, -1, -1))
        return self.layout.minor_to_major

    @property
    def is_row_major(self) -> bool:
        """Whether the last dimension is the most minor, and so on (no layout counts)."""
        return self.minor_to_major == tuple(range(self.rank - 1, -1, -1))

    @classmethod
    def row_major(cls, element_type: ElementType, dims: tuple[int, ...]) -> ArrayShape:
        """An array of ``dims`` with the row-major layout written out (a pass after
        layout assignment makes its shapes so)."""
        return cls(element_type, tuple(dims), Layout.default_for_rank(len(dims)))

    @property
    def major_to_minor(self) -> tuple[int, ...]:
        """The physical order: dimension numbers from the most major to the most minor.

        The order the elements lie in memory (``reversed(minor_to_major)``),
        size-1 dimensions included; a caller that ignores them filters them out.
        """
        return tuple(reversed(self.minor_to_major))

    @property
    def is_dynamic(self) -> bool:
        return any(self.dynamic)

    def with_element_type(self, element_type: ElementType) -> ArrayShape:
        return attrs.evolve(self, element_type=element_type)

    def with_dims(self, dims: tuple[int, ...]) -> ArrayShape:
        """Same element type, new dimensions, and no layout (it would not fit)."""
        return ArrayShape(self.element_type, tuple(dims))

    def without_layout(self) -> ArrayShape:
        return ArrayShape(self.element_type, self.dims, None, self.dynamic)

    def same_type_and_dims(self, other: Shape) -> bool:
        """Equality that ignores layouts (what shape inference can check)."""
        return (
            isinstance(other, ArrayShape)
            and other.element_type is self.element_type
            and other.dims == self.dims
        )

    def leaves(self) -> Iterator[ArrayShape]:
        yield self

    def __str__(self) -> str:
        if self.is_token:
            return "token[]"
        parts = []
        for i, d in enumerate(self.dims):
            is_dyn = bool(self.dynamic) and self.dynamic[i]
            parts.append(f"<={d}" if is_dyn else str(d))
        text = f"{self.element_type.value}[{','.join(parts)}]"
        if self.layout is not None:
            text += str(self.layout)
        return text


@attrs.frozen(cache_hash=True)
class TupleShape:
    """An ordered list of shapes; element shapes may be tuples themselves."""

    elements: tuple[Shape, ...]

    @property
    def is_tuple(self) -> bool:
        return True

    @property
    def is_token(self) -> bool:
        return False

    def leaves(self) -> Iterator[ArrayShape]:
        """Array leaves in depth-first order (the flattening XLA uses for outputs)."""
        for element in self.elements:
            yield from element.leaves()

    def without_layout(self) -> TupleShape:
        return TupleShape(tuple(e.without_layout() for e in self.elements))

    def same_type_and_dims(self, other: Shape) -> bool:
        return (
            isinstance(other, TupleShape)
            and len(other.elements) == len(self.elements)
            and all(a.same_type_and_dims(b) for a, b in zip(self.elements, other.elements))
        )

    def __str__(self) -> str:
        return "(" + ", ".join(str(e) for e in self.elements) + ")"


Shape: TypeAlias = ArrayShape | TupleShape


def array_shape(element_type: ElementType | str, dims: tuple[int, ...] | list[int]) -> ArrayShape:
    """Convenience constructor: ``array_shape("f32", (2, 3))``."""
    if isinstance(element_type, str):
        element_type = ElementType.parse(element_type)
    return ArrayShape(element_type, tuple(int(d) for d in dims))


def scalar_shape(element_type: ElementType | str) -> ArrayShape:
    return array_shape(element_type, ())


def token_shape() -> ArrayShape:
    return ArrayShape(ElementType.TOKEN, ())
