"""Floating-point building blocks of the reference evaluator, with XLA's rounding.

XLA does not compute in f16, bf16, the fp8 family or f4: it converts operands
to f32, computes, and rounds the result back once per instruction. f64 stays
f64. This module reproduces that by computing every real-valued op in float64
(numpy's libm-quality routines), rounding to the *compute type* (f32, or f64
for f64) and then to the result type. For +, -, *, /, sqrt and fmod the
detour through float64 is exact-then-correctly-rounded (53 >= 2*24+2 bits),
so those results are bit-identical to IEEE f32 arithmetic; for
transcendental functions it gives the correctly rounded f32 value in
practice, which is what XLA's own approximations aim for.

Also here: XLA's NaN-propagating maximum/minimum (which order -0 below +0),
round-half-away-from-zero, the TOTALORDER key of a float bit pattern, and
reduce-precision on raw bit patterns.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

from heron.hlo.element_types import ElementType
from heron.hlo.errors import HloEvaluationError

#: (exponent bits, explicit mantissa bits) of the IEEE-like formats XLA rounds in.
_IEEE_LAYOUT: dict[ElementType, tuple[int, int]] = {
    ElementType.F16: (5, 10),
    ElementType.BF16: (8, 7),
    ElementType.F32: (8, 23),
    ElementType.F64: (11, 52),
}

_UINT_OF_WIDTH = {8: np.uint8, 16: np.uint16, 32: np.uint32, 64: np.uint64}


def compute_dtype(et: ElementType) -> np.dtype:
    """The dtype XLA evaluates arithmetic of a real float type in (f64 for f64, else f32)."""
    return np.dtype(np.float64) if et is ElementType.F64 else np.dtype(np.float32)


#: f32 bits of 2^-127, f8e8m0fnu's smallest value (code 0x00), and of the largest f32
#: subnormal: XLA rounds a positive f32 subnormal above 2^-127 up to 2^-126 (0x01).
_E8M0_SMALLEST_BITS = 0x00400000
_F32_LARGEST_SUBNORMAL_BITS = 0x007FFFFF


def from_f32(values: np.ndarray, et: ElementType) -> np.ndarray:
    """Round f32 values to ``et`` as XLA's convert does (ml_dtypes, plus two fix-ups).

    f4e2m1fn has no NaN; XLA maps every NaN to its -0 encoding, whereas
    ml_dtypes picks the zero's sign from the NaN's. f8e8m0fnu from a positive f32
    subnormal: XLA (jaxlib 0.10.2's XLA:CPU, and heron's kernels) gives 2^-127 up to
    2^-127 itself and 2^-126 above it, as ml_dtypes 0.6 did; ml_dtypes 0.7 rounds
    those to the nearer of the two instead. The rule is written out here so that the
    evaluator is XLA's whichever ml_dtypes is installed.
    """
    values = np.asarray(values, dtype=np.float32)
    out = values.astype(et.numpy_dtype)
    if et is ElementType.F4E2M1FN:
        out = np.where(np.isnan(values), np.array(-0.0, dtype=et.numpy_dtype), out)
    elif et is ElementType.F8E8M0FNU:
        bits = values.view(np.uint32)
        subnormal = (bits > 0) & (bits <= _F32_LARGEST_SUBNORMAL_BITS)
        codes = (bits > _E8M0_SMALLEST_BITS).astype(np.uint8)
        out = np.where(subnormal, codes.view(et.numpy_dtype), out)
    return out


def round_to_type(values: np.ndarray, et: ElementType) -> np.ndarray:
    """Round a float64 result to ``et`` the way XLA does: first to the compute type, then to ``et``.

    The double rounding for sub-f32 types is deliberate: XLA computes in f32 and
    converts the f32 result, so a value that lies just past a tie in float64 can
    land on the other side of it, exactly as it does in XLA.
    """
    with np.errstate(all="ignore"):
        rounded = np.asarray(values, dtype=np.float64).astype(compute_dtype(et))
        if et in (ElementType.F32, ElementType.F64):
            return rounded
        return from_f32(rounded, et)


def apply_real(fn: Callable[..., np.ndarray], operands: list[np.ndarray], et: ElementType):
    """Evaluate ``fn`` on the operands and round the result XLA's way.

    Correctly rounded IEEE operations (``EXACT_IN_COMPUTE_TYPE``) run directly
    in the compute type: float64 has more than twice f32's precision plus two
    bits, so rounding their float64 result to f32 gives the same bits as
    computing in f32, and the f32 path is several times faster. Everything
    else (the transcendental functions) is computed in float64 and rounded.
    """
    with np.errstate(all="ignore"):
        if fn in EXACT_IN_COMPUTE_TYPE:
            compute = compute_dtype(et)
            narrow = [np.asarray(op).astype(compute, copy=False) for op in operands]
            result = np.asarray(fn(*narrow)).astype(compute, copy=False)
            return result if et in (ElementType.F32, ElementType.F64) else from_f32(result, et)
        wide = [np.asarray(op).astype(np.float64) for op in operands]
        return round_to_type(fn(*wide), et)


# -- special functions --------------------------------------------------------

_erf_ufunc = np.frompyfunc(math.erf, 1, 1)


def erf64(x: np.ndarray) -> np.ndarray:
    """erf in float64 via the C library's erf (numpy has none); accurate to <1 ulp."""
    x = np.asarray(x, dtype=np.float64)
    return np.asarray(_erf_ufunc(x), dtype=np.float64).reshape(x.shape)


def logistic64(x: np.ndarray) -> np.ndarray:
    """1 / (1 + exp(-x)), written so that neither branch overflows."""
    with np.errstate(all="ignore"):
        e = np.exp(-np.abs(x))
        # NaN falls into the second branch and stays NaN.
        return np.where(x >= 0, 1.0 / (1.0 + e), e / (1.0 + e))


def round_half_away64(x: np.ndarray) -> np.ndarray:
    """round-nearest-afz: ties away from zero (C ``round``), keeping the sign of zero.

    Adding 0.5 and truncating is wrong for 0.49999999999999994 (the sum rounds
    up to 1), so the tie is detected on the exact fractional part instead.
    """
    with np.errstate(all="ignore"):
        t = np.trunc(x)
        frac = np.abs(x - t)
        return np.where(frac >= 0.5, t + np.copysign(1.0, x), t)


def sign64(x: np.ndarray) -> np.ndarray:
    """sign: -1, +1, the zero itself (so -0 stays -0), NaN stays NaN."""
    return np.where(x > 0, 1.0, np.where(x < 0, -1.0, x))


def cbrt64(x: np.ndarray) -> np.ndarray:
    return np.cbrt(x)


def float_maximum(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """XLA maximum: NaN if either side is NaN; +0 beats -0 (checked against XLA:CPU)."""
    with np.errstate(all="ignore"):
        both_zero = (a == 0) & (b == 0)
        zero_max = np.where(np.signbit(a) & np.signbit(b), a, np.abs(a))
        r = np.where(a > b, a, b)
        r = np.where(both_zero, zero_max, r)
        return np.where(np.isnan(a), a, np.where(np.isnan(b), b, r))


def float_minimum(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """XLA minimum: NaN if either side is NaN; -0 beats +0."""
    with np.errstate(all="ignore"):
        both_zero = (a == 0) & (b == 0)
        zero_min = np.where(np.signbit(a) | np.signbit(b), -np.abs(a), a)
        r = np.where(a < b, a, b)
        r = np.where(both_zero, zero_min, r)
        return np.where(np.isnan(a), a, np.where(np.isnan(b), b, r))


# -- bit patterns -------------------------------------------------------------

#: Types whose signaling NaNs reach XLA's f32/f64 arithmetic unquieted: widening
#: bf16 is a shift, while f16 and the fp8 formats are widened by instructions that
#: quiet them (checked on XLA:CPU: pow(sNaN, 0) is NaN in bf16/f32/f64, 1 in f16).
_SIGNALING_NAN_QUIET_BIT = {ElementType.BF16: 6, ElementType.F32: 22, ElementType.F64: 51}


def is_signaling_nan(x: np.ndarray, et: ElementType) -> np.ndarray:
    """True where ``x`` is a NaN whose quiet bit is clear (only where XLA keeps it so)."""
    x = np.asarray(x)
    quiet_bit = _SIGNALING_NAN_QUIET_BIT.get(et)
    if quiet_bit is None:
        return np.zeros(x.shape, dtype=bool)
    with np.errstate(invalid="ignore"):
        nan = np.isnan(x.astype(np.float64))
    return nan & ((float_bits(x, et) >> np.uint64(quiet_bit)) & np.uint64(1) == 0)


def power(x: np.ndarray, y: np.ndarray, et: ElementType) -> np.ndarray:
    """pow with C/IEEE special cases; a signaling NaN still poisons x^0 and 1^y (IEEE 754).

    XLA widens f16 with the hardware conversion, which quiets a signaling NaN (so
    x^0 = 1 for it); numpy's f16 conversion keeps it signaling on some hosts (an
    AMD EPYC: then libm's pow gave NaN), so f16 NaNs are quieted first."""
    if et is ElementType.F16:
        quiet = np.array(np.nan, np.float16)
        with np.errstate(invalid="ignore"):
            x, y = (np.where(np.isnan(v), quiet, v).astype(np.float16) for v in (x, y))
    result = apply_real(np.power, [x, y], et)
    with np.errstate(invalid="ignore"):
        x64, y64 = np.asarray(x).astype(np.float64), np.asarray(y).astype(np.float64)
    poisoned = (is_signaling_nan(x, et) & (y64 == 0)) | ((x64 == 1) & is_signaling_nan(y, et))
    if poisoned.any():
        result = np.where(poisoned, np.array(np.nan, dtype=result.dtype), result)
    return result


def float_bits(x: np.ndarray, et: ElementType) -> np.ndarray:
    """The raw encoding of each element as uint64 (sub-byte formats: the low bits)."""
    width = et.bit_width
    arr = np.array(x, dtype=et.numpy_dtype, order="C")  # a C-ordered copy, 0-d kept
    if width < 8:
        return arr.view(np.uint8).astype(np.uint64) & np.uint64((1 << width) - 1)
    return arr.view(_UINT_OF_WIDTH[width]).astype(np.uint64)


_FNUZ = frozenset({ElementType.F8E4M3FNUZ, ElementType.F8E5M2FNUZ, ElementType.F8E4M3B11FNUZ})


def total_order_keys(x: np.ndarray, et: ElementType) -> np.ndarray:
    """int64 keys whose integer order is TOTALORDER on ``et``.

    -NaN < -inf < ... < -0 < +0 < ... < +inf < +NaN, NaN payloads included: a
    sign-magnitude pattern becomes two's complement by flipping the magnitude
    bits of negatives. Two formats need care (both checked on XLA:CPU): the
    ``fnuz`` formats' only NaN is encoded like -0, and XLA sorts it below
    everything (it widens the value, and the NaN widens to -NaN);
    f8e8m0fnu has no sign bit, so its codes are already in order.
    """
    bits = float_bits(x, et).astype(np.int64)
    width = et.bit_width
    if et is ElementType.F8E8M0FNU:
        return bits
    if width == 64:
        signed = bits  # astype from uint64 already reinterpreted the top bit
    else:
        signed = np.where(bits >= (1 << (width - 1)), bits - (1 << width), bits)
    magnitude_mask = np.int64((1 << (width - 1)) - 1)
    keys = np.where(signed < 0, signed ^ magnitude_mask, signed)
    if et in _FNUZ:
        keys = np.where(bits == (1 << (width - 1)), np.int64(-(1 << width)), keys)
    return keys


def f64_to_f32_round_to_odd(x: np.ndarray) -> np.ndarray:
    """Narrow float64 to float32 with round-to-odd (sticky) rounding.

    A value rounded to odd at 24 bits rounds correctly to any format of at
    most 22 significant bits afterwards. XLA converts f64 to f16 and the fp8
    family in one rounding, and ml_dtypes only rounds correctly from f32, so
    this is the bridge that keeps f64 -> fp8 single-rounded.
    """
    x = np.asarray(x, dtype=np.float64)
    with np.errstate(all="ignore"):
        y = x.astype(np.float32)
        inexact = np.isfinite(x) & (y.astype(np.float64) != x)
        # Step towards zero where RNE went away from zero, then force the last bit to 1.
        away = inexact & (np.abs(y.astype(np.float64)) > np.abs(x))
        y = np.where(away, np.nextafter(y, np.float32(0)), y)
        bits = y.view(np.uint32)
        bits = np.where(inexact, bits | np.uint32(1), bits)
        return bits.astype(np.uint32).view(np.float32)


def reduce_precision(
    x: np.ndarray, et: ElementType, exponent_bits: int, mantissa_bits: int
) -> np.ndarray:
    """XLA reduce-precision: round to ``mantissa_bits`` then clamp the exponent range.

    Worked on the encoding, as XLA does: mantissa rounding is round-half-even on
    the bit pattern (so source subnormals round on the same grid), then a
    rounded exponent above the reduced range becomes a signed infinity and one
    at or below the reduced bias floor becomes a signed zero (no reduced
    subnormals). NaN inputs are returned unchanged. f16/bf16/f32/f64 are
    processed in their own encoding; the fp8 family and f4 go through f16, and
    f8e8m0fnu through f32, which is where XLA evaluates them (verified on
    XLA:CPU, e.g. f8e5m2fnuz 2^-16 survives reduce-precision(5, 2)).
    """
    if exponent_bits < 1 or mantissa_bits < 0:
        raise HloEvaluationError(
            f"reduce-precision needs exponent_bits >= 1 and mantissa_bits >= 0, "
            f"got ({exponent_bits}, {mantissa_bits})"
        )
    if et in _IEEE_LAYOUT:
        return _reduce_precision_native(x, et, exponent_bits, mantissa_bits)
    carrier = ElementType.F32 if et is ElementType.F8E8M0FNU else ElementType.F16
    with np.errstate(all="ignore"):
        wide = np.asarray(x).astype(np.float32).astype(carrier.numpy_dtype)
        reduced = _reduce_precision_native(wide, carrier, exponent_bits, mantissa_bits)
        return from_f32(reduced.astype(np.float32), et)


def _reduce_precision_native(
    x: np.ndarray, et: ElementType, exponent_bits: int, mantissa_bits: int
) -> np.ndarray:
    src_exp, src_mant = _IEEE_LAYOUT[et]
    width = 1 + src_exp + src_mant
    x = np.array(x, dtype=et.numpy_dtype, order="C")
    bits = x.view(_UINT_OF_WIDTH[width]).astype(np.uint64)
    if mantissa_bits < src_mant:
        shift = src_mant - mantissa_bits
        last_bit = np.uint64(1 << shift)
        half_minus_one = np.uint64((1 << (shift - 1)) - 1)
        keep_mask = np.uint64(~((1 << shift) - 1) & ((1 << 64) - 1))
        odd = (bits & last_bit) >> np.uint64(shift)
        bits = (bits + half_minus_one + odd) & keep_mask
    if exponent_bits < src_exp:
        exp_mask = ((1 << src_exp) - 1) << src_mant
        sign_mask = 1 << (width - 1)
        bias = (1 << (src_exp - 1)) - 1
        reduced_bias = (1 << (exponent_bits - 1)) - 1
        exponent = bits & np.uint64(exp_mask)
        overflow = exponent > np.uint64((bias + reduced_bias) << src_mant)
        underflow = exponent <= np.uint64((bias - reduced_bias) << src_mant)
        signed_zero = bits & np.uint64(sign_mask)
        signed_inf = signed_zero | np.uint64(exp_mask)
        bits = np.where(overflow, signed_inf, np.where(underflow, signed_zero, bits))
    out = bits.astype(_UINT_OF_WIDTH[width]).view(et.numpy_dtype)
    return np.where(np.isnan(x.astype(np.float64)), x, out).astype(et.numpy_dtype)


#: Operations whose result is the exact result rounded once (or exact): they give
#: the same bits computed in f32 as computed in float64 and rounded to f32.
EXACT_IN_COMPUTE_TYPE: frozenset[Callable[..., np.ndarray]] = frozenset(
    {
        np.add,
        np.subtract,
        np.multiply,
        np.divide,
        np.sqrt,
        np.negative,
        np.abs,
        np.ceil,
        np.floor,
        np.rint,
        np.fmod,
        float_maximum,
        float_minimum,
        sign64,
        round_half_away64,
    }
)
