"""Bit-level pieces of bitcast-convert and reduce-precision.

Both ops are defined on encodings, not values: bitcast-convert reinterprets
(and, between widths, splits or packs little-endian) the bits of an element;
reduce-precision rounds the mantissa field and clamps the exponent field. So
the code here moves every element type to and from a same-width signless
integer (``pred`` as 0/1 in ``i8``) and works on that.
"""

from __future__ import annotations

from mlir import ir
from mlir.dialects import arith

from heron.emitters.ir_utils import int_constant
from heron.emitters.mlir_types import scalar_type
from heron.hlo.element_types import ElementType

#: (exponent bits, explicit mantissa bits) of the formats reduce-precision works in.
IEEE_LAYOUT: dict[ElementType, tuple[int, int]] = {
    ElementType.F16: (5, 10),
    ElementType.BF16: (8, 7),
    ElementType.F32: (8, 23),
    ElementType.F64: (11, 52),
}


def to_bits(value: ir.Value, element: ElementType) -> ir.Value:
    """The encoding of a scalar of ``element`` as ``i<bit_width>`` (pred: 0/1 in i8)."""
    width = element.bit_width
    if element.is_pred:
        return arith.ExtUIOp(ir.IntegerType.get_signless(width), value).result
    if isinstance(value.type, ir.IntegerType):
        return value
    return arith.BitcastOp(ir.IntegerType.get_signless(width), value).result


def from_bits(bits: ir.Value, element: ElementType) -> ir.Value:
    """A scalar of ``element`` from its encoding in ``i<bit_width>`` (pred: nonzero is true)."""
    if element.is_pred:
        zero = int_constant(0, element.bit_width)
        return arith.CmpIOp(arith.CmpIPredicate.ne, bits, zero).result
    target = scalar_type(element)
    if target == bits.type:
        return bits
    return arith.BitcastOp(target, bits).result


def reduce_precision_bits(
    bits: ir.Value, element: ElementType, exponent_bits: int, mantissa_bits: int
) -> ir.Value:
    """XLA reduce-precision on the encoding of an f16/bf16/f32/f64 value.

    Round the mantissa to ``mantissa_bits`` half-to-even on the whole pattern
    (a carry bumps the exponent), then an exponent above the reduced range
    becomes a signed infinity and one at or below the reduced bias floor a
    signed zero (no reduced subnormals); NaN is returned unchanged.
    """
    src_exp, src_mant = IEEE_LAYOUT[element]
    width = 1 + src_exp + src_mant

    def const(value: int) -> ir.Value:
        return int_constant(value, width)

    original = bits
    if mantissa_bits < src_mant:
        shift = src_mant - mantissa_bits
        odd = arith.AndIOp(arith.ShRUIOp(bits, const(shift)).result, const(1)).result
        rounded = arith.AddIOp(bits, const((1 << (shift - 1)) - 1)).result
        rounded = arith.AddIOp(rounded, odd).result
        bits = arith.AndIOp(rounded, const(~((1 << shift) - 1))).result
    if exponent_bits < src_exp:
        exp_mask = ((1 << src_exp) - 1) << src_mant
        bias = (1 << (src_exp - 1)) - 1
        reduced_bias = (1 << (exponent_bits - 1)) - 1
        exponent = arith.AndIOp(bits, const(exp_mask)).result
        ugt, ule = arith.CmpIPredicate.ugt, arith.CmpIPredicate.ule
        overflow = arith.CmpIOp(ugt, exponent, const((bias + reduced_bias) << src_mant)).result
        underflow = arith.CmpIOp(ule, exponent, const((bias - reduced_bias) << src_mant)).result
        signed_zero = arith.AndIOp(bits, const(1 << (width - 1))).result
        signed_inf = arith.OrIOp(signed_zero, const(exp_mask)).result
        bits = arith.SelectOp(overflow, signed_inf, bits).result
        bits = arith.SelectOp(underflow, signed_zero, bits).result
    magnitude = arith.AndIOp(original, const((1 << (width - 1)) - 1)).result
    inf = ((1 << src_exp) - 1) << src_mant
    nan = arith.CmpIOp(arith.CmpIPredicate.ugt, magnitude, const(inf)).result
    return arith.SelectOp(nan, original, bits).result
