"""XLA ``convert`` of one scalar between any two of the 26 array element types.

The semantics are the reference evaluator's (``heron.hlo.evaluator.conversions``,
checked there against XLA): float -> integer truncates and saturates against
the integer bounds converted to the *source* type, NaN -> 0; integers wrap;
integer -> float rounds once to f32, f64 or bf16 (XLA:GPU's ``cvt.rn.bf16.s32``;
XLA:CPU goes through f32) and to the other formats from f32; float -> float
rounds once to nearest even, f64 -> bf16 too (XLA:GPU's ``cvt.rn.bf16.f64``;
XLA:CPU rounds through f32). f64 -> f16, bf16 and fp8/f4 round once: the f64
is narrowed to f32 with round-to-odd, after which one more rounding to a format
of at most 11 significant bits is exact-then-rounded (24 >= 2 * 11 + 2). That
avoids ``fptrunc double to half``, which the host cannot run and which would
tie the result to the hardware. Values are in :func:`scalar_type` form: fp8
and f4 are integer bit patterns, converted by :mod:`.conv_small_float`.
"""

from __future__ import annotations

from fractions import Fraction

import numpy as np
from mlir import ir
from mlir.dialects import arith
from mlir.dialects import complex as complex_dialect

from heron.emitters.elemental.conv_small_float import (
    F16_FORMAT,
    FORMATS,
    f32_to_small_float,
    f64_to_format,
    small_float_to_f32,
)
from heron.emitters.ir_utils import int_constant
from heron.emitters.mlir_types import scalar_type
from heron.hlo.element_types import ElementType
from heron.hlo.errors import UnsupportedError

F32, F64 = ElementType.F32, ElementType.F64


def convert_scalar(value: ir.Value, src: ElementType, dst: ElementType) -> ir.Value:
    """``value`` (of ``scalar_type(src)``) converted to ``scalar_type(dst)`` as XLA converts."""
    for element in (src, dst):
        if not element.is_array_type:
            raise UnsupportedError(f"convert: element type {element.value} cannot be converted")
    if src is dst:
        return value
    if src.is_complex:
        component = src.component_type
        real = complex_dialect.ReOp(value).result
        if not dst.is_complex:
            return convert_scalar(real, component, dst)
        imag = complex_dialect.ImOp(value).result
        parts = [convert_scalar(v, component, dst.component_type) for v in (real, imag)]
        return complex_dialect.CreateOp(scalar_type(dst), *parts).result
    if dst.is_complex:
        component = dst.component_type
        real = convert_scalar(value, src, component)
        zero = arith.ConstantOp(scalar_type(component), 0.0).result
        return complex_dialect.CreateOp(scalar_type(dst), real, zero).result
    if dst.is_pred:
        if src.is_floating:
            wide = widen(value, src)
            zero = arith.ConstantOp(wide.type, 0.0).result
            return arith.CmpFOp(arith.CmpFPredicate.UNE, wide, zero).result  # NaN -> true
        zero = int_constant(0, src.bit_width)
        return arith.CmpIOp(arith.CmpIPredicate.ne, value, zero).result
    if src.is_floating:
        if dst.is_floating:
            return _float_to_float(value, src, dst)
        return float_to_int(widen(value, src), src, dst)
    if dst.is_floating:
        if dst is F64:
            return _int_to_float(value, src, ir.F64Type.get())
        if dst is ElementType.BF16:  # once, as XLA:GPU (LLVM's sitofp to bfloat)
            return _int_to_float(value, src, scalar_type(dst))
        return narrow_f32(_int_to_float(value, src, ir.F32Type.get()), dst)
    return _int_to_int(value, src, dst)


def widen(value: ir.Value, src: ElementType) -> ir.Value:
    """A real float ``value`` exactly in its compute type: f64 stays, anything else is f32."""
    if src in (F32, F64):
        return value
    if src in FORMATS:
        return small_float_to_f32(value, src)
    return arith.ExtFOp(ir.F32Type.get(), value).result


def narrow_f32(value: ir.Value, dst: ElementType) -> ir.Value:
    """An f32 rounded to the real float type ``dst`` (nearest even; fp8/f4 as bit patterns)."""
    if dst is F32:
        return value
    if dst is F64:
        return arith.ExtFOp(ir.F64Type.get(), value).result
    if dst in FORMATS:
        return f32_to_small_float(value, dst)
    return arith.TruncFOp(scalar_type(dst), value).result


def _float_to_float(value: ir.Value, src: ElementType, dst: ElementType) -> ir.Value:
    if src is not F64:
        return narrow_f32(widen(value, src), dst)
    if dst is F32:
        return arith.TruncFOp(ir.F32Type.get(), value).result
    if dst is ElementType.F16:  # integer code: no fptrunc to half, no hardware dependence
        return arith.BitcastOp(ir.F16Type.get(), f64_to_format(value, F16_FORMAT)).result
    narrowed = narrow_f32(f64_to_f32_round_to_odd(value), dst)
    if dst is ElementType.F8E8M0FNU:
        # XLA: every f64 below 2^-127 (the smallest e8m0 value; zero, negatives) is NaN.
        magnitude = _abs_f64(value)
        tiny = arith.ConstantOp(ir.F64Type.get(), 2.0**-127).result
        below = arith.CmpFOp(arith.CmpFPredicate.OLT, magnitude, tiny).result
        narrowed = arith.SelectOp(below, int_constant(0xFF, 8), narrowed).result
    return narrowed


def _abs_f64(value: ir.Value) -> ir.Value:
    i64 = ir.IntegerType.get_signless(64)
    bits = arith.BitcastOp(i64, value).result
    cleared = arith.AndIOp(bits, int_constant((1 << 63) - 1, 64)).result
    return arith.BitcastOp(ir.F64Type.get(), cleared).result


def f64_to_f32_round_to_odd(value: ir.Value) -> ir.Value:
    """f64 -> f32 rounded to odd: truncate, and mark any inexact result with its last bit.

    A round-to-odd f32 then rounds correctly (once, to nearest even) to any
    format of at most 11 significant bits. Overflow gives the largest f32
    (odd), so the second rounding still overflows; NaN and inf pass through.
    """
    f32, f64 = ir.F32Type.get(), ir.F64Type.get()
    i32 = ir.IntegerType.get_signless(32)
    nearest = arith.TruncFOp(f32, value).result
    back = arith.ExtFOp(f64, nearest).result
    inexact = arith.CmpFOp(arith.CmpFPredicate.ONE, back, value).result  # false for NaN, inf
    negative = arith.CmpFOp(
        arith.CmpFPredicate.OLT, value, arith.ConstantOp(f64, 0.0).result
    ).result
    above = arith.CmpFOp(arith.CmpFPredicate.OGT, back, value).result
    below = arith.CmpFOp(arith.CmpFPredicate.OLT, back, value).result
    away = arith.SelectOp(negative, below, above).result  # rounded away from zero
    bits = arith.BitcastOp(i32, nearest).result
    towards_zero = arith.SubIOp(bits, int_constant(1, 32)).result  # one ulp less magnitude
    bits = arith.SelectOp(away, towards_zero, bits).result
    odd = arith.OrIOp(bits, int_constant(1, 32)).result
    bits = arith.SelectOp(inexact, odd, bits).result
    return arith.BitcastOp(f32, bits).result


def _int_to_float(value: ir.Value, src: ElementType, target: ir.Type) -> ir.Value:
    """An integer or pred rounded once to ``target`` (f32, f64 or bf16)."""
    width = 1 if src.is_pred else src.bit_width
    signed = src.is_signed_integral
    if width < 32:
        i32 = ir.IntegerType.get_signless(32)
        value = (arith.ExtSIOp if signed else arith.ExtUIOp)(i32, value).result
        signed = True  # every value of a narrower type fits a signed i32
    if signed:
        return arith.SIToFPOp(target, value).result
    return arith.UIToFPOp(target, value).result


def _int_to_int(value: ir.Value, src: ElementType, dst: ElementType) -> ir.Value:
    """Two's-complement wrap: sign- or zero-extend by the source's signedness, or truncate."""
    src_width = 1 if src.is_pred else src.bit_width
    target = scalar_type(dst)
    if dst.bit_width == src_width:
        return value
    if dst.bit_width < src_width:
        return arith.TruncIOp(target, value).result
    return (arith.ExtSIOp if src.is_signed_integral else arith.ExtUIOp)(target, value).result


def integer_bounds(dst: ElementType) -> tuple[int, int]:
    width = dst.bit_width
    if dst.is_signed_integral:
        return -(1 << (width - 1)), (1 << (width - 1)) - 1
    return 0, (1 << width) - 1


def bound_in_source(bound: int, src: ElementType, bound_type: ElementType) -> float:
    """An integer bound converted to the float type ``src`` as convert does (may be NaN/inf)."""
    array = np.array([bound], dtype=bound_type.numpy_dtype)
    with np.errstate(all="ignore"):
        if src is F64:
            return float(array.astype(np.float64)[0])
        as_f32 = array.astype(np.float32)
        return float(as_f32.astype(src.numpy_dtype).astype(np.float64)[0])


def _round_up_to(value: Fraction, compute: np.dtype) -> float:
    """The smallest ``compute`` float >= ``value``."""
    candidate = compute.type(float(value))
    while Fraction(float(candidate)) < value:
        candidate = np.nextafter(candidate, compute.type(np.inf))
    while True:
        lower = np.nextafter(candidate, compute.type(-np.inf))
        if not np.isfinite(lower) or Fraction(float(lower)) < value:
            return float(candidate)
        candidate = lower


def _round_down_to(value: Fraction, compute: np.dtype) -> float:
    """The largest ``compute`` float <= ``value``."""
    return -_round_up_to(-value, compute)


def saturation_thresholds(
    src: ElementType, dst: ElementType, bound_type: ElementType | None = None
) -> tuple[float, float]:
    """(A, B): the float -> integer result saturates high for x >= A and low for x <= B.

    The evaluator saturates where ``x >= hi_f or trunc(x) > float(hi)`` (and
    symmetrically low), ``hi_f`` being the bound converted to the source type
    (NaN when the source overflows to NaN). ``trunc(x) > H`` for the integral
    float ``H`` is ``x >= H + 1``; both clauses are then one threshold in the
    compute type (f32, or f64 for f64 sources), where ``x`` is exact.
    """
    lo, hi = integer_bounds(dst)
    if bound_type is None:
        bound_type = ElementType.S64 if lo < 0 else ElementType.U64
    compute = np.dtype(np.float64 if src is F64 else np.float32)
    high = _round_up_to(Fraction(int(float(hi))) + 1, compute)
    low = _round_down_to(Fraction(int(float(lo))) - 1, compute)
    hi_f = bound_in_source(hi, src, bound_type)
    lo_f = bound_in_source(lo, src, bound_type)
    if not np.isnan(hi_f):
        high = min(high, hi_f)
    if not np.isnan(lo_f):
        low = max(low, lo_f)
    return high, low


def float_to_int(wide: ir.Value, src: ElementType, dst: ElementType) -> ir.Value:
    """A float of type ``src``, given in its compute type, to the integer ``dst``.

    Truncates towards zero, saturates (see :func:`saturation_thresholds`), NaN -> 0.
    """
    lo, hi = integer_bounds(dst)
    high, low = saturation_thresholds(src, dst)
    return clamp_to_int(wide, dst, high, low, lo, hi)


def clamp_to_int(
    wide: ir.Value, dst: ElementType, high: float, low: float, lo: int, hi: int
) -> ir.Value:
    """``hi`` where wide >= high, ``lo`` where wide <= low, 0 for NaN, else truncated."""
    ftype = wide.type
    i64 = ir.IntegerType.get_signless(64)
    above = arith.CmpFOp(arith.CmpFPredicate.OGE, wide, arith.ConstantOp(ftype, high)).result
    below = arith.CmpFOp(arith.CmpFPredicate.OLE, wide, arith.ConstantOp(ftype, low)).result
    nan = arith.CmpFOp(arith.CmpFPredicate.UNO, wide, wide).result
    outside = arith.OrIOp(arith.OrIOp(above, below).result, nan).result
    zero = arith.ConstantOp(ftype, 0.0).result
    inside = arith.SelectOp(outside, zero, wide).result  # never convert an out-of-range value
    if dst is ElementType.U64:
        truncated = arith.FPToUIOp(i64, inside).result
    else:
        truncated = arith.FPToSIOp(i64, inside).result
    result = arith.SelectOp(above, int_constant(hi, 64), truncated).result
    result = arith.SelectOp(below, int_constant(lo, 64), result).result
    result = arith.SelectOp(nan, int_constant(0, 64), result).result
    if dst.bit_width < 64:
        result = arith.TruncIOp(scalar_type(dst), result).result
    return result
