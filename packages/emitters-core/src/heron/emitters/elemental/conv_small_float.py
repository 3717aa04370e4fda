"""The fp8 family and f4e2m1fn <-> f32 as integer code on their bit patterns.

LLVM has no fp8/f4 types, so these formats live in registers as ``i8``/``i4``
bit patterns (:func:`heron.emitters.mlir_types.scalar_type`) and every
conversion is written here as shifts, masks and selects on ``i32`` (the one
float op: a subnormal's mantissa times a power of two, exact). Widening
is exact; narrowing from f32 rounds once to nearest even and treats overflow,
infinities and NaN exactly as the reference evaluator does (ml_dtypes, plus
XLA's NaN -> -0 for f4e2m1fn). f8e8m0fnu (a bare exponent) follows ml_dtypes'
own rules: ties round up, zero and negatives are NaN, values below 2^-127
round up to it. The exhaustive tests in ``test_elemental_conv_small_float.py``
check every pattern. The same rounding code, on ``i64``, narrows f64 to f16 in
one rounding (:data:`F16_FORMAT`), which the host cannot do with ``fptrunc``.
"""

from __future__ import annotations

import enum

import attrs
from mlir import ir
from mlir.dialects import arith

from heron.emitters.ir_utils import int_constant
from heron.hlo.element_types import ElementType


class Specials(enum.Enum):
    """How a format spends its special encodings (decides overflow and NaN)."""

    IEEE = "ieee"  #: exponent all ones: inf (mantissa 0) or NaN; overflow -> inf
    FN = "fn"  #: no inf; all ones is NaN; overflow and inf -> NaN (sign kept)
    FNUZ = "fnuz"  #: no inf, no -0; 0x80 is the only NaN; overflow, inf -> NaN
    SATURATE = "saturate"  #: no inf, no NaN; overflow and inf saturate (f4e2m1fn)
    E8M0 = "e8m0"  #: unsigned exponent only; 0xff is NaN


@attrs.frozen
class SmallFloat:
    """One fp8/f4 format: field widths, exponent bias and special encodings."""

    exponent_bits: int
    mantissa_bits: int
    bias: int
    specials: Specials

    @property
    def width(self) -> int:
        signed = 0 if self.specials is Specials.E8M0 else 1
        return signed + self.exponent_bits + self.mantissa_bits

    @property
    def max_finite(self) -> int:
        """Bit pattern (without sign) of the largest finite value."""
        all_ones = (1 << (self.exponent_bits + self.mantissa_bits)) - 1
        if self.specials is Specials.IEEE:
            return all_ones - (1 << self.mantissa_bits)  # exponent all ones is inf/NaN
        if self.specials in (Specials.FN, Specials.E8M0):
            return all_ones - 1
        return all_ones


FORMATS: dict[ElementType, SmallFloat] = {
    ElementType.F8E4M3FN: SmallFloat(4, 3, 7, Specials.FN),
    ElementType.F8E5M2: SmallFloat(5, 2, 15, Specials.IEEE),
    ElementType.F8E4M3FNUZ: SmallFloat(4, 3, 8, Specials.FNUZ),
    ElementType.F8E5M2FNUZ: SmallFloat(5, 2, 16, Specials.FNUZ),
    ElementType.F8E4M3B11FNUZ: SmallFloat(4, 3, 11, Specials.FNUZ),
    ElementType.F8E4M3: SmallFloat(4, 3, 7, Specials.IEEE),
    ElementType.F8E3M4: SmallFloat(3, 4, 3, Specials.IEEE),
    ElementType.F8E8M0FNU: SmallFloat(8, 0, 127, Specials.E8M0),
    ElementType.F4E2M1FN: SmallFloat(2, 1, 1, Specials.SATURATE),
}

_F32_NAN = 0x7FC00000
_F32_INF = 0x7F800000
_F32_SIGN = 0x80000000


def _i32(value: int) -> ir.Value:
    return int_constant(value, 32)


def _const(value: int, like: ir.Value) -> ir.Value:
    """An integer constant of ``like``'s type."""
    return int_constant(value, ir.IntegerType(like.type).width)


def _operand(value: ir.Value | int, like: ir.Value) -> ir.Value:
    return _const(value, like) if isinstance(value, int) else value


def _select(condition: ir.Value, a: ir.Value, b: ir.Value) -> ir.Value:
    return arith.SelectOp(condition, a, b).result


def _cmp(predicate: arith.CmpIPredicate, a: ir.Value, b: ir.Value | int) -> ir.Value:
    return arith.CmpIOp(predicate, a, _operand(b, a)).result


def _and(a: ir.Value, mask: ir.Value | int) -> ir.Value:
    return arith.AndIOp(a, _operand(mask, a)).result


def _shr(a: ir.Value, amount: int | ir.Value) -> ir.Value:
    return arith.ShRUIOp(a, _operand(amount, a)).result


def _shl(a: ir.Value, amount: int | ir.Value) -> ir.Value:
    return arith.ShLIOp(a, _operand(amount, a)).result


def _add(a: ir.Value, b: ir.Value | int) -> ir.Value:
    return arith.AddIOp(a, _operand(b, a)).result


def _or(a: ir.Value, b: ir.Value | int) -> ir.Value:
    return arith.OrIOp(a, _operand(b, a)).result


def _round_shift(value: ir.Value, shift: int | ir.Value) -> ir.Value:
    """``value >> shift`` rounded to nearest even (value >= 0, 1 <= shift < width - 1)."""
    one = _const(1, value)
    amount = _operand(shift, value)
    half_minus_one = arith.SubIOp(arith.ShLIOp(one, arith.SubIOp(amount, one)).result, one).result
    odd = arith.AndIOp(arith.ShRUIOp(value, amount).result, one).result
    return arith.ShRUIOp(_add(_add(value, half_minus_one), odd), amount).result


def small_float_to_f32(bits: ir.Value, element: ElementType) -> ir.Value:
    """The f32 holding exactly the value of the ``element`` bit pattern ``bits`` (i8/i4).

    NaN becomes the quiet f32 NaN with the pattern's sign (fnuz NaN: negative),
    as ml_dtypes widens it.
    """
    fmt = FORMATS[element]
    i32, f32 = ir.IntegerType.get_signless(32), ir.F32Type.get()
    x = arith.ExtUIOp(i32, bits).result
    eq = arith.CmpIPredicate.eq
    if fmt.specials is Specials.E8M0:
        normal = _shl(x, 23)
        result = _select(_cmp(eq, x, _i32(0)), _i32(0x00400000), normal)  # 2^-127: subnormal
        result = _select(_cmp(eq, x, _i32(0xFF)), _i32(_F32_NAN), result)
        return arith.BitcastOp(f32, result).result
    m, e = fmt.mantissa_bits, fmt.exponent_bits
    sign = _shl(_shr(x, fmt.width - 1), 31)
    magnitude = _and(x, (1 << (e + m)) - 1)
    exponent = _shr(magnitude, m)
    mantissa = _and(magnitude, (1 << m) - 1)
    # Normal: rebias the exponent, widen the mantissa (the shift keeps the fields apart).
    normal = _add(_shl(magnitude, 23 - m), (127 - fmt.bias) << 23)
    # Subnormal: mantissa * 2^(1 - bias - m), exact in f32 (a normal f32 for every format).
    scale = arith.ConstantOp(f32, 2.0 ** (1 - fmt.bias - m)).result
    scaled = arith.MulFOp(arith.UIToFPOp(f32, mantissa).result, scale).result
    subnormal = arith.BitcastOp(i32, scaled).result
    result = _select(_cmp(eq, exponent, _i32(0)), subnormal, normal)
    result = _or(result, sign)
    all_ones = (1 << e) - 1
    if fmt.specials is Specials.IEEE:
        special = _cmp(eq, exponent, _i32(all_ones))
        inf_or_nan = _select(_cmp(eq, mantissa, _i32(0)), _i32(_F32_INF), _i32(_F32_NAN))
        result = _select(special, _or(inf_or_nan, sign), result)
    elif fmt.specials is Specials.FN:
        nan = _cmp(eq, magnitude, _i32((1 << (e + m)) - 1))
        result = _select(nan, _or(sign, _F32_NAN), result)
    elif fmt.specials is Specials.FNUZ:
        nan = _cmp(eq, x, _i32(1 << (fmt.width - 1)))
        result = _select(nan, _i32(_F32_NAN | _F32_SIGN), result)
    return arith.BitcastOp(f32, result).result


#: f16 described like the small formats: f64 -> f16 rounds with the same integer code.
F16_FORMAT = SmallFloat(5, 10, 15, Specials.IEEE)


def f32_to_small_float(value: ir.Value, element: ElementType) -> ir.Value:
    """``value`` (f32) rounded to ``element``, as its bit pattern (i8 or i4)."""
    return f32_to_format(value, FORMATS[element])


def f32_to_format(value: ir.Value, fmt: SmallFloat) -> ir.Value:
    """``value`` (f32) rounded to nearest even in ``fmt``, as an ``i<fmt.width>`` pattern."""
    x = arith.BitcastOp(ir.IntegerType.get_signless(32), value).result
    if fmt.specials is Specials.E8M0:
        out = ir.IntegerType.get_signless(fmt.width)
        return arith.TruncIOp(out, _f32_to_e8m0(x)).result
    return round_bits_to_format(x, 8, 23, fmt)


def f64_to_format(value: ir.Value, fmt: SmallFloat) -> ir.Value:
    """``value`` (f64) rounded once to nearest even in ``fmt`` (not f8e8m0fnu)."""
    x = arith.BitcastOp(ir.IntegerType.get_signless(64), value).result
    return round_bits_to_format(x, 11, 52, fmt)


def round_bits_to_format(
    x: ir.Value, src_exponent_bits: int, src_mantissa_bits: int, fmt: SmallFloat
) -> ir.Value:
    """The IEEE encoding ``x`` (i32 or i64) rounded to nearest even in ``fmt``.

    Overflow, infinities and NaN map to ``fmt``'s encodings as ml_dtypes does.
    """
    width = ir.IntegerType(x.type).width
    src_m = src_mantissa_bits
    src_inf = ((1 << src_exponent_bits) - 1) << src_m
    ugt, eq = arith.CmpIPredicate.ugt, arith.CmpIPredicate.eq
    m = fmt.mantissa_bits
    shift = src_m - m
    rebias = fmt.bias - ((1 << (src_exponent_bits - 1)) - 1)
    sign = _shr(x, width - 1)
    magnitude = _and(x, (1 << (width - 1)) - 1)
    src_exponent = _shr(magnitude, src_m)
    # Target normal: round the whole pattern (a mantissa carry bumps the exponent), rebias.
    normal = _add(_round_shift(magnitude, shift), rebias << m)
    # Target subnormal: the significand shifted by how far the exponent lies below 1.
    is_normal = _cmp(arith.CmpIPredicate.ne, src_exponent, 0)
    implicit = _select(is_normal, _const(1 << src_m, x), _const(0, x))
    significand = _or(_and(magnitude, (1 << src_m) - 1), implicit)
    effective = arith.MaxUIOp(src_exponent, _const(1, x)).result
    distance = arith.SubIOp(_const(shift + 1 - rebias, x), effective).result
    distance = arith.MinSIOp(distance, _const(src_m + 2, x)).result  # further is 0 anyway
    distance = arith.MaxSIOp(distance, _const(1, x)).result  # only used when >= shift + 1
    subnormal = _round_shift(significand, distance)
    target_subnormal = _cmp(arith.CmpIPredicate.sle, _add(src_exponent, rebias), 0)
    rounded = _select(target_subnormal, subnormal, normal)
    overflow = _cmp(ugt, rounded, fmt.max_finite)
    nan = _cmp(ugt, magnitude, src_inf)
    infinite = _cmp(eq, magnitude, src_inf)
    too_big = arith.OrIOp(overflow, infinite).result
    top = fmt.width - 1
    signed_zero = _shl(sign, top)
    signed = _or(rounded, signed_zero)
    if fmt.specials is Specials.IEEE:
        inf = ((1 << fmt.exponent_bits) - 1) << m
        quiet_nan = inf | (1 << (m - 1))
        result = _select(too_big, _or(signed_zero, inf), signed)
        result = _select(nan, _or(signed_zero, quiet_nan), result)
    elif fmt.specials is Specials.FN:
        all_ones = (1 << top) - 1
        result = _select(arith.OrIOp(too_big, nan).result, _or(signed_zero, all_ones), signed)
    elif fmt.specials is Specials.FNUZ:
        zero = _cmp(eq, rounded, 0)
        result = _select(zero, _const(0, x), signed)  # no -0
        bad = arith.OrIOp(too_big, nan).result
        result = _select(bad, _const(1 << top, x), result)
    else:  # SATURATE (f4e2m1fn): overflow keeps the sign at the largest value; NaN -> -0
        result = _select(too_big, _or(signed_zero, fmt.max_finite), signed)
        result = _select(nan, _const(1 << top, x), result)
    return arith.TruncIOp(ir.IntegerType.get_signless(fmt.width), result).result


def _f32_to_e8m0(x: ir.Value) -> ir.Value:
    """f8e8m0fnu from f32 bits as ml_dtypes rounds: ties up; f32 subnormals to 2^-127 or 2^-126.

    Zero, negatives (-0 too), inf and NaN are NaN (0xff); overflow is NaN.
    """
    ugt, eq = arith.CmpIPredicate.ugt, arith.CmpIPredicate.eq
    normal = _shr(_add(x, 0x00400000), 23)
    normal = arith.MinUIOp(normal, _i32(0xFF)).result
    subnormal = arith.ExtUIOp(
        ir.IntegerType.get_signless(32), _cmp(ugt, x, _i32(0x00400000))
    ).result
    result = _select(_cmp(ugt, x, _i32(0x007FFFFF)), normal, subnormal)
    invalid = arith.OrIOp(_cmp(eq, x, _i32(0)), _cmp(ugt, x, _i32(0x7F7FFFFF))).result
    return _select(invalid, _i32(0xFF), result)
