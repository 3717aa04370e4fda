"""Elemental lowerings of convert, bitcast-convert, reduce-precision and stochastic-convert.

Also the conversion helpers other lowerings use for fp8/f4 arithmetic
(:func:`to_f32`, :func:`from_f32`): XLA computes those formats in f32 and
rounds back once per op, and since the formats are integer bit patterns in
registers, the rounding is the integer code of :mod:`.conv_small_float`.
The semantics of every op follow the reference evaluator
(``heron.hlo.evaluator.conversions`` and ``float_semantics.reduce_precision``);
the per-pair conversion logic is in :mod:`.conv_scalar`.
"""

from __future__ import annotations

from collections.abc import Sequence

from mlir import ir
from mlir.dialects import arith, math

from heron.emitters.elemental.conv_bits import (
    IEEE_LAYOUT,
    from_bits,
    reduce_precision_bits,
    to_bits,
)
from heron.emitters.elemental.conv_scalar import (
    F32,
    bound_in_source,
    convert_scalar,
    float_to_int,
    integer_bounds,
    narrow_f32,
    widen,
)
from heron.emitters.elemental.core import ElementalContext, Values, lowering, unsupported
from heron.emitters.ir_utils import index_constant, int_constant
from heron.hlo.element_types import ElementType
from heron.hlo.ir import Instruction


def to_f32(value: ir.Value, element: ElementType) -> ir.Value:
    """A scalar of ``element`` (any real float, integer or pred) as f32, as convert does.

    Exact for f16, bf16, the fp8 family and f4; f64 and wide integers round
    to nearest even.
    """
    return convert_scalar(value, element, F32)


def from_f32(value: ir.Value, element: ElementType) -> ir.Value:
    """An f32 converted to ``scalar_type(element)``, rounding (or saturating) as convert does."""
    return convert_scalar(value, F32, element)


def _operand_type(inst: Instruction, number: int = 0) -> ElementType:
    return inst.operands[number].array_shape.element_type


@lowering("convert")
def _convert(inst: Instruction, indices: Sequence[ir.Value], ctx: ElementalContext) -> Values:
    src, dst = _operand_type(inst), inst.array_shape.element_type
    if not src.is_array_type or not dst.is_array_type:
        raise unsupported(ctx, inst, f"cannot convert {src.value} to {dst.value}")
    return [convert_scalar(ctx.operand(inst, 0, indices), src, dst)]


@lowering("bitcast-convert")
def _bitcast_convert(
    inst: Instruction, indices: Sequence[ir.Value], ctx: ElementalContext
) -> Values:
    """Same width: reinterpret. Otherwise split/pack little-endian along the minor dimension."""
    src, dst = _operand_type(inst), inst.array_shape.element_type
    if src.is_complex or dst.is_complex:
        if src is dst:
            return [ctx.operand(inst, 0, indices)]
        raise unsupported(ctx, inst, f"XLA cannot bitcast {src.value} to {dst.value}")
    ws, wd = src.bit_width, dst.bit_width
    if ws == wd:
        return [from_bits(to_bits(ctx.operand(inst, 0, indices), src), dst)]
    if ws > wd:  # the result's minor index selects a wd-bit slice, lowest bits first
        if not indices:
            raise unsupported(ctx, inst, "a narrowing bitcast-convert needs a minor dimension")
        bits = to_bits(ctx.operand(inst, 0, indices[:-1]), src)
        part = arith.IndexCastUIOp(bits.type, indices[-1]).result
        shift = arith.MulIOp(part, int_constant(wd, ws)).result
        shifted = arith.ShRUIOp(bits, shift).result
        narrow = arith.TruncIOp(ir.IntegerType.get_signless(wd), shifted).result
        return [from_bits(narrow, dst)]
    wide = ir.IntegerType.get_signless(wd)
    packed = int_constant(0, wd)
    for k in range(wd // ws):
        piece = to_bits(ctx.operand(inst, 0, [*indices, index_constant(k)]), src)
        piece = arith.ExtUIOp(wide, piece).result
        if k:
            piece = arith.ShLIOp(piece, int_constant(k * ws, wd)).result
        packed = arith.OrIOp(packed, piece).result
    return [from_bits(packed, dst)]


@lowering("reduce-precision")
def _reduce_precision(
    inst: Instruction, indices: Sequence[ir.Value], ctx: ElementalContext
) -> Values:
    """As the evaluator: f16/bf16/f32/f64 in their own encoding, fp8/f4 via f16, e8m0 via f32."""
    et = _operand_type(inst)
    exponent_bits = inst.attr("exponent_bits")
    mantissa_bits = inst.attr("mantissa_bits")
    if not et.is_floating:
        raise unsupported(ctx, inst, f"reduce-precision of {et.value}")
    if exponent_bits is None or mantissa_bits is None:
        raise unsupported(ctx, inst, "needs exponent_bits and mantissa_bits")
    exponent_bits, mantissa_bits = int(exponent_bits), int(mantissa_bits)
    if exponent_bits < 1 or mantissa_bits < 0:
        raise unsupported(
            ctx,
            inst,
            f"needs exponent_bits >= 1, mantissa_bits >= 0 ({exponent_bits}, {mantissa_bits})",
        )
    value = ctx.operand(inst, 0, indices)
    if et in IEEE_LAYOUT:
        bits = reduce_precision_bits(to_bits(value, et), et, exponent_bits, mantissa_bits)
        return [from_bits(bits, et)]
    carrier = F32 if et is ElementType.F8E8M0FNU else ElementType.F16
    wide = narrow_f32(to_f32(value, et), carrier)  # exact: every value fits the carrier
    bits = reduce_precision_bits(to_bits(wide, carrier), carrier, exponent_bits, mantissa_bits)
    return [from_f32(to_f32(from_bits(bits, carrier), carrier), et)]


@lowering("stochastic-convert")
def _stochastic_convert(
    inst: Instruction, indices: Sequence[ir.Value], ctx: ElementalContext
) -> Values:
    """XLA's StochasticConvertDecomposer: round the magnitude up when random < fraction * 2^n."""
    src, rnd_t = _operand_type(inst, 0), _operand_type(inst, 1)
    dst = inst.array_shape.element_type
    if not (src.is_floating and dst.is_signed_integral and rnd_t.is_unsigned_integral):
        raise unsupported(
            ctx,
            inst,
            f"stochastic-convert from {src.value} (random {rnd_t.value}) to {dst.value}: XLA "
            "only defines float -> signed integer with an unsigned random operand",
        )
    if rnd_t.bit_width != src.bit_width:
        raise unsupported(ctx, inst, f"random operand {rnd_t.value} is not as wide as {src.value}")
    x = widen(ctx.operand(inst, 0, indices), src)
    random = ctx.operand(inst, 1, indices)
    ftype = x.type
    compute = ElementType.F64 if isinstance(ftype, ir.F64Type) else F32
    zero = arith.ConstantOp(ftype, 0.0).result
    negative = arith.CmpFOp(arith.CmpFPredicate.OLT, x, zero).result
    magnitude = math.AbsFOp(x).result
    whole = math.FloorOp(magnitude).result
    fraction = arith.SubFOp(magnitude, whole).result
    scale = arith.ConstantOp(ftype, float(2**rnd_t.bit_width)).result
    threshold = float_to_int(arith.MulFOp(fraction, scale).result, compute, rnd_t)
    round_up = arith.CmpIOp(arith.CmpIPredicate.ult, random, threshold).result
    truncated = float_to_int(whole, src, dst)
    width = dst.bit_width
    bumped = arith.AddIOp(truncated, int_constant(1, width)).result
    bumped = arith.SelectOp(round_up, bumped, truncated).result
    negated = arith.SubIOp(int_constant(0, width), bumped).result
    result = arith.SelectOp(negative, negated, bumped).result
    lo, hi = integer_bounds(dst)
    hi_f = bound_in_source(hi, src, ElementType.S64)
    lo_f = bound_in_source(lo, src, ElementType.S64)
    for bound, predicate, saturated in (
        (lo_f, arith.CmpFPredicate.OLE, lo),
        (hi_f, arith.CmpFPredicate.OGE, hi),
    ):
        if bound != bound:  # NaN: the comparison is never true
            continue
        hit = arith.CmpFOp(predicate, x, arith.ConstantOp(ftype, bound).result).result
        result = arith.SelectOp(hit, int_constant(saturated, width), result).result
    return [result]


__all__ = ["from_f32", "to_f32"]
