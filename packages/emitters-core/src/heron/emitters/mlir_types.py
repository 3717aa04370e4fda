"""How HLO element types and shapes appear in heron's MLIR.

One table, used by every emitter and pass, so that a type means the same thing
everywhere:

- ``pred`` is ``i1`` in registers (``i8`` in memory, see the lower-tensors pass);
- signed and unsigned integers are signless ``iN`` (the ops choose signedness);
- floats are MLIR's float types, including the fp8 family and ``f4E2M1FN``;
- ``c64``/``c128`` are ``complex<f32>``/``complex<f64>``.

A tensor carries the HLO layout as its encoding, ``{minor_to_major = array<i64:
...>}``, only when the layout is not the default row-major one, so that
flatten-tensors can linearise indices the way the buffer is laid out.
"""

from __future__ import annotations

from mlir import ir
from mlir.dialects import arith

from heron.hlo.element_types import ElementType
from heron.hlo.errors import UnsupportedError
from heron.hlo.shapes import ArrayShape

LAYOUT_ENCODING_KEY = "minor_to_major"

_FLOAT_TYPES = {
    ElementType.F16: lambda: ir.F16Type.get(),
    ElementType.BF16: lambda: ir.BF16Type.get(),
    ElementType.F32: lambda: ir.F32Type.get(),
    ElementType.F64: lambda: ir.F64Type.get(),
    ElementType.F8E4M3FN: lambda: ir.Float8E4M3FNType.get(),
    ElementType.F8E5M2: lambda: ir.Float8E5M2Type.get(),
    ElementType.F8E4M3FNUZ: lambda: ir.Float8E4M3FNUZType.get(),
    ElementType.F8E5M2FNUZ: lambda: ir.Float8E5M2FNUZType.get(),
    ElementType.F8E4M3B11FNUZ: lambda: ir.Float8E4M3B11FNUZType.get(),
    ElementType.F8E4M3: lambda: ir.Float8E4M3Type.get(),
    ElementType.F8E3M4: lambda: ir.Float8E3M4Type.get(),
    ElementType.F8E8M0FNU: lambda: ir.Float8E8M0FNUType.get(),
    ElementType.F4E2M1FN: lambda: ir.Float4E2M1FNType.get(),
}


def element_type(element: ElementType) -> ir.Type:
    """The MLIR type of one element of ``element`` (needs an active context)."""
    if element is ElementType.PRED:
        return ir.IntegerType.get_signless(1)
    if element.is_integral:
        return ir.IntegerType.get_signless(element.bit_width)
    if element.is_complex:
        return ir.ComplexType.get(element_type(element.component_type))
    factory = _FLOAT_TYPES.get(element)
    if factory is None:
        raise UnsupportedError(f"element type {element.value} has no MLIR representation")
    return factory()


def scalar_type(element: ElementType) -> ir.Type:
    """The MLIR type of one element *in registers*: what lowerings compute with.

    Equal to :func:`element_type` except for the fp8 family and f4, which are
    held as same-width signless integers (``i8``, ``i4``): LLVM has no such
    float types, so their conversions are bit manipulation, and keeping the
    bits in integers means no op on an fp8-typed value ever reaches LLVM.
    Tensors keep the float types (:func:`tensor_type`); reading an element
    bitcasts it (:func:`to_scalar`) and writing bitcasts back (:func:`to_element`).
    """
    if element.is_floating and element.bit_width <= 8:
        return ir.IntegerType.get_signless(element.bit_width)
    return element_type(element)


def to_scalar(value: ir.Value, element: ElementType) -> ir.Value:
    """A value of :func:`element_type` (read from a tensor) as :func:`scalar_type`."""
    target = scalar_type(element)
    if value.type == target:
        return value
    return arith.BitcastOp(target, value).result


def to_element(value: ir.Value, element: ElementType) -> ir.Value:
    """A value of :func:`scalar_type` as :func:`element_type` (to write into a tensor)."""
    target = element_type(element)
    if value.type == target:
        return value
    return arith.BitcastOp(target, value).result


def layout_encoding(shape: ArrayShape) -> ir.Attribute | None:
    """The tensor encoding that records a non-default layout, or None."""
    order = shape.minor_to_major
    if order == tuple(range(shape.rank - 1, -1, -1)):
        return None
    return ir.DictAttr.get({LAYOUT_ENCODING_KEY: ir.DenseI64ArrayAttr.get(list(order))})


def tensor_type(shape: ArrayShape) -> ir.RankedTensorType:
    """``tensor<dims x element>`` for an HLO array shape, with its layout encoding if needed."""
    return ir.RankedTensorType.get(
        list(shape.dims),
        element_type(shape.element_type),
        layout_encoding(shape),
        loc=ir.Location.unknown(),
    )


def minor_to_major(tensor: ir.RankedTensorType) -> tuple[int, ...]:
    """The layout a tensor type records (row-major when it has no encoding)."""
    encoding = tensor.encoding
    rank = tensor.rank
    if encoding is None:
        return tuple(range(rank - 1, -1, -1))
    entry = ir.DictAttr(encoding)[LAYOUT_ENCODING_KEY]
    return tuple(ir.DenseI64ArrayAttr(entry))


def index_type() -> ir.IndexType:
    return ir.IndexType.get()
