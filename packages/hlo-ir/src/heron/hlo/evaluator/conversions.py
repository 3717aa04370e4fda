"""convert, bitcast-convert and stochastic-convert with XLA's semantics.

convert (all checked bit-for-bit against XLA:CPU through jax):

* float -> integer truncates towards zero and saturates to the target range;
  NaN -> 0; negative -> 0 for unsigned targets. The saturation test uses the
  integer bounds converted to the source type, so f4e2m1fn 6.0 -> s4 is 7
  (7 itself converts to 6.0).
* integer -> integer keeps the low bits (two's-complement wrap), any width.
* integer -> f32/f64/f16/bf16 rounds once to nearest even, as XLA:GPU converts
  (``cvt.rn.bf16.s32``, ``cvt.rn.bf16.s64``); integer -> the fp8/f4 formats goes
  through f32. XLA:CPU goes through f32 for bf16 too, so s32 2^24 + 2^16 + 1 is
  16777216 there and 16908288 here: heron follows XLA:GPU where the two differ.
* float -> float rounds to nearest even; overflow follows the target format
  (inf, NaN for the ``fn`` formats without inf, saturation for f4e2m1fn),
  exactly as ml_dtypes does from f32, except that XLA turns every NaN into
  f4e2m1fn's -0 (ml_dtypes gives +0 for -NaN). From f64, XLA:GPU rounds once to
  every narrower format, bf16 included (``cvt.rn.bf16.f64``; we narrow to f32 with
  round-to-odd first, which is equivalent); XLA:CPU goes through f32 for bf16
  (double rounding), which heron does not follow.
  f64 -> f8e8m0fnu: XLA turns every value below 2^-127 (the smallest e8m0
  value) into NaN, where f32 -> f8e8m0fnu rounds it up; both reproduced.
* anything -> pred is ``x != 0`` (NaN -> true); pred -> number is 0 / 1.
* complex -> real converts the real part (the imaginary part is dropped, also
  for pred); real -> complex has a +0 imaginary part.

bitcast-convert reinterprets bits, little-endian: a wider element splits into
a new minor dimension whose index 0 holds the least significant bits, and a
narrower one is packed from the minor dimension. Sub-byte types pack the same
way inside a byte (s8 0x12 -> s4 [2, 1]). Complex types only bitcast to
themselves: XLA rejects real <-> complex and c64 <-> c128.

stochastic-convert follows XLA's StochasticConvertDecomposer: for a float to
signed-integer conversion the fractional part, scaled by 2^bits(random), is
compared against the random operand and the magnitude is rounded up when the
random value is smaller. XLA defines no other stochastic conversion.
"""

from __future__ import annotations

import numpy as np

from heron.hlo.element_types import ElementType
from heron.hlo.errors import HloEvaluationError
from heron.hlo.evaluator import float_semantics as fs
from heron.hlo.evaluator import integer_semantics as ints

_UINT_OF_WIDTH = {8: np.uint8, 16: np.uint16, 32: np.uint32, 64: np.uint64}
_E8M0_MIN = 2.0**-127


def element_type_of(x: np.ndarray, opcode: str = "convert") -> ElementType:
    try:
        return ElementType.from_numpy(np.asarray(x).dtype)
    except ValueError:
        raise HloEvaluationError(
            f"{opcode}: operand dtype {np.asarray(x).dtype} is not an HLO element type"
        ) from None


def convert_array(x: np.ndarray, to: ElementType) -> np.ndarray:
    """XLA ``convert`` of every element of ``x`` to ``to`` (same dims)."""
    x = np.asarray(x)
    src = element_type_of(x)
    if not to.is_array_type:
        raise HloEvaluationError(f"convert: cannot convert {src} to {to}")
    with np.errstate(all="ignore"):
        result = _convert(x, src, to)
    return np.asarray(result, dtype=to.numpy_dtype).reshape(x.shape)


def _convert(x: np.ndarray, src: ElementType, to: ElementType) -> np.ndarray:
    if src is to:
        return x.copy()
    if src.is_complex:
        if to.is_complex:
            comp = to.component_type
            re = _convert(np.real(x), src.component_type, comp)
            im = _convert(np.imag(x), src.component_type, comp)
            return _make_complex(re, im, to)
        return _convert(np.real(x), src.component_type, to)
    if to.is_complex:
        comp = to.component_type
        re = _convert(x, src, comp)
        return _make_complex(re, np.zeros_like(re), to)
    if to.is_pred:
        if src.is_floating:
            return x.astype(np.float64) != 0
        return ints.to_codes(x, src) != 0
    if src.is_floating:
        if to.is_floating:
            return _float_to_float(x, src, to)
        return _float_to_int(x, src, to)
    # integer or pred source
    value = ints.values(x, ElementType.U8 if src.is_pred else src)
    if to.is_floating:
        if to is ElementType.F64:
            return value.astype(np.float64)
        if to is ElementType.BF16:
            return _int_to_bf16(value)
        as_f32 = value.astype(np.float32)
        return as_f32 if to is ElementType.F32 else fs.from_f32(as_f32, to)
    return ints.from_codes(value.astype(np.uint64), to)


def _int_to_bf16(value: np.ndarray) -> np.ndarray:
    """Integers rounded once to bf16 (nearest even). Below 2^53 an integer is exact in
    f64, from which a round-to-odd f32 rounds once more correctly; the few 64-bit
    integers above it are rounded exactly, one by one."""
    shape = np.shape(value)
    flat = np.ascontiguousarray(value).reshape(-1)  # a transposed view reshapes to a copy
    small = np.abs(flat.astype(np.float64)) < 2.0**53
    result = np.array(
        fs.from_f32(
            fs.f64_to_f32_round_to_odd(np.where(small, flat, 0).astype(np.float64)),
            ElementType.BF16,
        )
    )
    for at in np.flatnonzero(~small):
        result[at] = _round_integer_to_bf16(int(flat[at]))
    return result.reshape(shape)


def _round_integer_to_bf16(v: int) -> float:
    """``v`` rounded to 8 significant bits, ties to even (exact: Python integers)."""
    magnitude = abs(v)
    shift = max(0, magnitude.bit_length() - 8)
    kept, dropped = magnitude >> shift, magnitude & ((1 << shift) - 1)
    half = 1 << (shift - 1) if shift else 0
    if shift and (dropped > half or (dropped == half and kept & 1)):
        kept += 1
    return float(-(kept << shift) if v < 0 else kept << shift)


def _make_complex(re: np.ndarray, im: np.ndarray, to: ElementType) -> np.ndarray:
    out = np.empty(np.shape(re), dtype=to.numpy_dtype)
    out.real = re
    out.imag = im
    return out


def _float_to_float(x: np.ndarray, src: ElementType, to: ElementType) -> np.ndarray:
    if to is ElementType.F64:
        return x.astype(np.float64)
    if src is not ElementType.F64:
        # Every narrower float is exact in f32, and ml_dtypes rounds from f32 like XLA.
        return fs.from_f32(x.astype(np.float32), to)
    if to is ElementType.F32:
        return x.astype(np.float32)
    if to is ElementType.BF16:  # once, as XLA:GPU (cvt.rn.bf16.f64); not through f32
        return fs.from_f32(fs.f64_to_f32_round_to_odd(x), to)
    if to is ElementType.F16:
        return x.astype(np.float16)  # numpy rounds f64 -> f16 once
    narrowed = fs.from_f32(fs.f64_to_f32_round_to_odd(x), to)
    if to is ElementType.F8E8M0FNU:
        nan = np.array(np.nan, dtype=np.float32).astype(to.numpy_dtype)
        narrowed = np.where(np.abs(x) < _E8M0_MIN, nan, narrowed)
    return narrowed


def _float_to_int(x: np.ndarray, src: ElementType, to: ElementType) -> np.ndarray:
    """Truncate towards zero, saturating; NaN -> 0.

    Saturation compares against the integer bounds *converted to the source
    type*, as XLA does: f4e2m1fn 6.0 -> s4 is 7, because 7 converts to 6.0.
    """
    width = to.bit_width
    if to.is_signed_integral:
        lo, hi = -(2 ** (width - 1)), 2 ** (width - 1) - 1
    else:
        lo, hi = 0, 2**width - 1
    bounds = _convert(
        np.array([lo, hi], dtype=np.int64 if lo else np.uint64), _BOUND_T[lo < 0], src
    )
    lo_f, hi_f = bounds.astype(np.float64)
    f = x.astype(np.float64)
    t = np.trunc(f)
    above = (f >= hi_f) | (t > float(hi))
    below = (f <= lo_f) | (t < float(lo))
    inside = ~(np.isnan(f) | above | below)
    wide = np.int64 if lo < 0 else np.uint64
    v = np.where(inside, t, 0.0).astype(wide)
    v = np.where(above, wide(hi), np.where(below, wide(lo), v)).astype(wide)
    return ints.from_codes(v.astype(np.uint64), to)


_BOUND_T = {True: ElementType.S64, False: ElementType.U64}


# -- bitcast-convert ----------------------------------------------------------


def bitcast_convert(x: np.ndarray, to: ElementType) -> np.ndarray:
    """XLA ``bitcast-convert``; the result dims change when the bit widths differ."""
    x = np.asarray(x)
    src = element_type_of(x, "bitcast-convert")
    if not to.is_array_type:
        raise HloEvaluationError(f"bitcast-convert: cannot bitcast {src} to {to}")
    if src.is_complex != to.is_complex:
        raise HloEvaluationError(
            f"bitcast-convert: cannot bitcast between real and complex types ({src} -> {to})"
        )
    if src.is_complex and src is not to:
        # XLA rejects c64 <-> c128 as well ("Conversion between complex and real type").
        raise HloEvaluationError(f"bitcast-convert: XLA cannot bitcast {src} to {to}")
    ws, wd = src.bit_width, to.bit_width
    if ws < wd:
        ratio = wd // ws
        if x.ndim == 0 or x.shape[-1] != ratio:
            raise HloEvaluationError(
                f"bitcast-convert {src} -> {to}: the operand's minor dimension must be "
                f"{ratio}, got shape {x.shape}"
            )
    if src.is_complex:
        return x.copy()
    codes = _bits_of(x, src)
    if ws == wd:
        out_codes = codes
    elif ws > wd:
        ratio = ws // wd
        pieces = [(codes >> np.uint64(k * wd)) & ints.mask_of(wd) for k in range(ratio)]
        out_codes = np.stack(pieces, axis=-1)
    else:
        ratio = wd // ws
        out_codes = np.zeros(x.shape[:-1], dtype=np.uint64)
        for k in range(ratio):
            out_codes = out_codes | (codes[..., k] << np.uint64(k * ws))
    return _from_bits(out_codes, to)


def _bits_of(x: np.ndarray, et: ElementType) -> np.ndarray:
    if et.is_floating:
        return fs.float_bits(x, et)
    return ints.to_codes(x, et)


def _from_bits(codes: np.ndarray, et: ElementType) -> np.ndarray:
    codes = np.asarray(codes, dtype=np.uint64)
    if et.is_floating:
        width = et.bit_width
        carrier = _UINT_OF_WIDTH[max(width, 8)]
        raw = np.array((codes & ints.mask_of(width)).astype(carrier), order="C")
        return raw.view(et.numpy_dtype).reshape(codes.shape)
    return ints.from_codes(codes, et)


# -- stochastic-convert -------------------------------------------------------


def stochastic_convert(x: np.ndarray, random: np.ndarray, to: ElementType) -> np.ndarray:
    """XLA ``stochastic-convert`` of float ``x`` to a signed integer type, given random bits."""
    x = np.asarray(x)
    src = element_type_of(x, "stochastic-convert")
    rnd_t = element_type_of(random, "stochastic-convert")
    if not (src.is_floating and to.is_signed_integral and rnd_t.is_unsigned_integral):
        raise HloEvaluationError(
            f"stochastic-convert from {src} (random {rnd_t}) to {to} is not supported: XLA "
            "only defines float -> signed integer with an unsigned random operand"
        )
    if np.shape(random) != x.shape:
        raise HloEvaluationError(
            f"stochastic-convert: random operand dims {np.shape(random)} differ from {x.shape}"
        )
    if rnd_t.bit_width != src.bit_width:
        raise HloEvaluationError(
            f"stochastic-convert: random operand {rnd_t} must be as wide as the operand {src}"
        )
    width = to.bit_width
    with np.errstate(all="ignore"):
        f = x.astype(np.float64)
        negative = f < 0
        magnitude = np.abs(f)
        whole = np.floor(magnitude)
        fraction = magnitude - whole
        # fraction * 2^bits is exact; converting it to the unsigned random type truncates.
        threshold = _convert(fraction * float(2**rnd_t.bit_width), ElementType.F64, rnd_t)
        round_up = ints.values(random, rnd_t) < ints.values(threshold, rnd_t)
        # floor() of a value of the source type is exact in that type; convert from there.
        whole_src = _convert(whole, ElementType.F64, src)
        truncated = ints.values(_convert(whole_src, src, to), to).astype(np.uint64)
        bumped = np.where(round_up, truncated + np.uint64(1), truncated)
        result = np.where(negative, np.uint64(0) - bumped, bumped)
        lo, hi = -(2 ** (width - 1)), 2 ** (width - 1) - 1
        # The decomposer compares against the bounds converted to the operand's type.
        bounds = _convert(np.array([lo, hi], dtype=np.int64), ElementType.S64, src)
        lo_f, hi_f = bounds.astype(np.float64)
        result = np.where(f <= lo_f, np.int64(lo).astype(np.uint64), result)
        result = np.where(f >= hi_f, np.uint64(hi), result)
        return ints.from_codes(result, to).reshape(x.shape)
