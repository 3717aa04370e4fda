"""Exponentials, logarithms and the functions built on them, as arith code (f32 and f64).

Algorithms (fdlibm's structure, our own polynomials):

- exp: ``x = k*ln2 + r`` (Cody-Waite: ``ln2`` split so ``k*ln2_hi`` is exact),
  ``|r| <= ln2/2``, Taylor polynomial of ``e^r`` (degree 7 for f32, 13 for f64;
  truncation below 0.15 ulp), then ``2^k`` applied in two exact halves so
  that subnormal and overflowing results round once.
- expm1: the same reduction, ``expm1(r)`` as ``r + r^2*P(r)``, then
  ``2^k*expm1(r) + (2^k - 1)``; no cancellation for small ``x`` (``k = 0``);
  f32 in one fma (:func:`_expm1_f32`).
- log: ``x = m*2^e`` with ``m`` in [sqrt(1/2), sqrt(2)), ``f = m - 1``,
  ``s = f/(2+f)``, ``log(1+f) = f - (hfsq - s*(hfsq + R(s^2)))`` with ``R``
  the series of ``2*atanh(s)/s - 2``; ``e*ln2`` added in two parts.
- log1p: f64 ``u = 1 + x``, ``log(u) * x/(u - 1)`` (exact compensation of the
  rounding of ``u``, Goldberg/Kahan); f32 log's polynomial on ``(1 + x) 2^-k - 1``
  computed from ``x`` (:func:`_log1p_f32`).
- sinh, cosh, tanh, asinh, acosh, atanh: fdlibm's identities on top of these.
- pow: f32 in f32 with double-f32 steps (:func:`_pow_magnitude_f32`); f64 in f64 with
  a double-double log (:func:`_log_f64_double`) and ``y log x`` as a pair into exp.
"""

from __future__ import annotations

import math

import numpy as np
from mlir import ir
from mlir.dialects import arith

from heron.emitters.pipeline import math_coefficients as coeffs
from heron.emitters.pipeline.math_common import Kit

Value = ir.Value

_LN2 = math.log(2.0)
_LOG2E = 1.0 / _LN2
# ln2 split: hi has few significant bits so k*hi is exact (fdlibm's values for f64).
_LN2_HI = {32: 0.693145751953125, 64: 6.93147180369123816490e-01}
_LN2_LO = {32: 1.428606765330187045e-06, 64: 1.90821492927058770002e-10}
_LOG10_2_HI = {32: 0.301025390625, 64: 3.01029995663611771306e-01}
_LOG10_2_LO = {32: 4.6050389811980175e-06, 64: 3.69423907715893078616e-13}
_INV_LN10 = 1.0 / math.log(10.0)
# log2(e) split in two f32 parts (the high part is log2(e) rounded to f32).
_LOG2E_HI_F32 = float(np.float32(_LOG2E))
_LOG2E_LO_F32 = float(np.float32(_LOG2E - _LOG2E_HI_F32))
# Clamp ranges for the exp argument: beyond them the result is 0 or inf anyway.
_EXP_RANGE = {32: (-104.0, 90.0), 64: (-746.0, 711.0)}
# Taylor degree for e^r, |r| <= ln2/2.
_EXP_DEGREE = {32: 7, 64: 13}
# Terms of R(z) = sum 2 z^n / (2n+1), z = s^2 <= 0.0295.
_LOG_TERMS = {32: 4, 64: 10}
# Above it sinh/cosh are exp(|x|)/2, tanh(x) is +-1 to the last bit: 1 - tanh(x) is
# 2 e^(-2x), under half an ulp below 1 (2^-25 in f32) from x = 9.011 on, so tanh is
# evaluated at 9.5 at most (at 9.0 it is 0.99999994, and every larger x got that).
_HYPERBOLIC_BIG = {32: 9.5, 64: 22.0}


def _exp_coeffs(degree: int) -> list[float]:
    return [1.0 / math.factorial(n) for n in range(degree + 1)]


def _reduce(kit: Kit, x: Value) -> tuple[Value, Value]:
    """``(k, r)``: ``x = k*ln2 + r``, ``k`` an integer-valued float, ``|r| <= ln2/2``."""
    w = kit.fmt.width
    kf = kit.round_int(kit.mul(x, kit.c(_LOG2E)))
    # Two fmas: k*ln2_hi is exact anyway, and k*ln2_lo is not rounded apart.
    r = kit.fma(kf, kit.c(-_LN2_LO[w]), kit.fma(kf, kit.c(-_LN2_HI[w]), x))
    return kf, r


#: 1.5 * 2^23: an f32 ``j = x + _SHIFTER`` (``|x| < 2^22``) is ``x`` rounded to an integer
#: and holds that integer in its low mantissa bits.
_SHIFTER_F32 = 12582912.0


def _exp_f32(kit: Kit, x: Value, x_lo: Value | None, scale_log2: int, moderate: bool) -> Value:
    """f32 ``e^(x + x_lo) * 2^scale_log2`` for any ``x``: ``ex2.approx(x log2e - k) * 2^k``.

    ``j = fma(x, log2e, 1.5*2^23 + 127 + scale_log2)`` rounds ``x log2e`` to the integer
    ``k`` and holds ``k + 127 + scale_log2`` in its low bits; ``j`` is clamped
    (minnum/maxnum) so that the biased exponent is in [1, 254], and then gives both
    ``k`` (``j`` minus the shifter, exact) and the bits of ``2^(k + scale_log2)`` (``j``'s
    bits shifted to the exponent field: the shifter's own bits fall off the top). So
    one fma, two clamps, a subtraction, two fmas (``x log2e - k`` with log2e split in
    two f32 parts), a shift, ex2 and a multiply: libdevice's ``expf`` has the same ten
    instructions (its clamp is a saturation of a scaled ``x``). What the clamp leaves
    (up to 24 below, 3 above) goes into the approximate exp2's argument, which then
    gives the subnormal or overflowing result (rounded once by the final product). No
    clamp of ``x``, no NaN select: a NaN ``x`` clamps ``j`` to its lower end (minnum/
    maxnum drop NaN) and reaches ex2 as NaN, an infinite one as +-inf. ``moderate``:
    the caller guarantees a finite ``|x| <= 80``, so ``j`` needs no clamp.
    """
    shifter = _SHIFTER_F32 + 127 + scale_log2
    j = kit.fma(x, kit.c(_LOG2E), kit.c(shifter))
    if not moderate:
        j = kit.minnum(kit.maxnum(j, kit.c(_SHIFTER_F32 + 1)), kit.c(_SHIFTER_F32 + 254))
    kc = kit.sub(j, kit.c(shifter))
    t = kit.fma(x, kit.c(_LOG2E_LO_F32), kit.fma(x, kit.c(_LOG2E_HI_F32), kit.neg(kc)))
    if x_lo is not None:
        t = kit.fma(x_lo, kit.c(_LOG2E), t)
    return kit.mul(kit.exp2_approx(t), kit.bitcast_f(kit.shl(kit.bits(j), kit.fmt.mantissa)))


def exp_core(
    kit: Kit,
    x: Value,
    x_lo: Value | None = None,
    scale_log2: int = 0,
    *,
    moderate: bool = False,
) -> Value:
    """``e^(x + x_lo) * 2^scale_log2`` for finite ``x`` (clamped here), ``x_lo`` tiny
    (f32: any ``x``; ``moderate``: the caller guarantees ``|x| <= 80``)."""
    if not kit.is_f64:
        return _exp_f32(kit, x, x_lo, scale_log2, moderate)
    lo, hi = _EXP_RANGE[kit.fmt.width]
    x = kit.min(kit.max(x, kit.c(lo)), kit.c(hi))
    if x_lo is None:
        kf, r = _reduce(kit, x)
    else:  # x - k ln2_hi is exact; x_lo - k ln2_lo is small: r is rounded once
        kf = kit.round_int(kit.mul(x, kit.c(_LOG2E)))
        r_hi = kit.fma(kf, kit.c(-_LN2_HI[64]), x)
        r = kit.add(r_hi, kit.fma(kf, kit.c(-_LN2_LO[64]), x_lo))
    p = kit.poly(r, _exp_coeffs(_EXP_DEGREE[kit.fmt.width]))
    k = kit.to_int(kf)
    if scale_log2:
        k = kit.iadd(k, kit.ci(scale_log2))
    return kit.ldexp(p, k)


def _finite_or_zero(kit: Kit, x: Value) -> Value:
    return kit.select(kit.isnan(x), kit.c(0.0), x)


def exp(kit: Kit, x: Value) -> Value:
    if not kit.is_f64:  # NaN and +-inf come out of the f32 core as NaN, inf, 0
        return exp_core(kit, x)
    return kit.pass_nan(x, exp_core(kit, _finite_or_zero(kit, x)))


def exp2(kit: Kit, x: Value) -> Value:
    w = kit.fmt.width
    lo, hi = (-152.0, 130.0) if w == 32 else (-1080.0, 1026.0)
    xs = kit.min(kit.max(_finite_or_zero(kit, x), kit.c(lo)), kit.c(hi))
    kf = kit.round_int(xs)
    if kit.is_f64:
        r = kit.mul(kit.sub(xs, kf), kit.c(_LN2))
        p = kit.poly(r, _exp_coeffs(_EXP_DEGREE[w]))
    else:  # the fraction, |xs - kf| <= 0.5, is exact: only the instruction's error
        p = kit.exp2_approx(kit.sub(xs, kf))
    return kit.pass_nan(x, kit.ldexp(p, kit.to_int(kf)))


#: f32 expm1's clamp: below it the result is -1 (e^x under half an ulp of 1), above it
#: +inf (e^x over f32 max), and ``k`` stays in [-26, 129].
_EXPM1_RANGE_F32 = (-17.4, 89.0)


def _expm1_f32(kit: Kit, x: Value) -> Value:
    """``2^k expm1(r) + (2^k - 1)`` as one fma (libdevice's ``expm1f`` structure): ``x``
    clamped (``llvm.minimum``/``maximum``: NaN kept), ``k`` the rounded ``x log2e`` (one
    fma with the shifter), ``r = x - k ln2`` by two fmas, ``expm1(r) = r + r^2 Q(r)``
    (math_coefficients.EXPM1_Q, degree 5, 0.01 ulp). ``2^128`` is not an f32: at
    ``k = 128`` the fma takes ``2^127`` and its result is doubled (overflowing to inf
    where expm1 does). ``2^k`` is exact, so no approximate instruction: the error is the
    polynomial's and the roundings'. -0 is kept (``keep_zero``)."""
    lo, hi = _EXPM1_RANGE_F32
    xc = kit.min(kit.max(x, kit.c(lo)), kit.c(hi))
    kf = kit.sub(kit.fma(xc, kit.c(_LOG2E), kit.c(_SHIFTER_F32)), kit.c(_SHIFTER_F32))
    r = kit.fma(kf, kit.c(-_LN2_LO[32]), kit.fma(kf, kit.c(-_LN2_HI[32]), xc))
    p = kit.fma(kit.mul(r, r), kit.poly(r, coeffs.EXPM1_Q_F32), r)
    top = kit.eq(kf, kit.c(128.0))
    t = kit.pow2i(kit.to_int(kit.minnum(kf, kit.c(127.0))))
    result = kit.fma(p, t, kit.sub(t, kit.c(1.0)))
    result = kit.select(top, kit.add(result, result), result)
    return kit.keep_zero(x, result)


def expm1(kit: Kit, x: Value) -> Value:
    if not kit.is_f64:
        return _expm1_f32(kit, x)
    fmt = kit.fmt
    lo, hi = _EXP_RANGE[fmt.width]
    xs = kit.min(kit.max(_finite_or_zero(kit, x), kit.c(lo)), kit.c(hi))
    kf, r = _reduce(kit, xs)
    coeffs = _exp_coeffs(_EXP_DEGREE[fmt.width] + 1)[2:]
    em1r = kit.add(r, kit.mul(kit.mul(r, r), kit.poly(r, coeffs)))
    k = kit.to_int(kf)
    limit = fmt.mantissa + 2
    k_mid = kit.select(kit.le(kit.abs(kf), kit.c(float(limit))), k, kit.ci(0))
    t = kit.pow2i(k_mid)
    mid = kit.add(kit.mul(t, em1r), kit.sub(t, kit.c(1.0)))
    big = kit.ldexp(kit.add(em1r, kit.c(1.0)), k)
    result = kit.select(kit.gt(kf, kit.c(float(limit))), big, mid)
    result = kit.select(kit.lt(kf, kit.c(float(-limit))), kit.c(-1.0), result)
    return kit.pass_nan(x, kit.keep_zero(x, result))


def _log_reduce_f32(kit: Kit, x: Value, subnormal: bool = True) -> tuple[Value, Value]:
    """f32 ``(e, f)`` with ``x = (1 + f) 2^e``, ``1 + f`` in [2/3, 4/3), ``e`` an integer.

    ``e`` comes from the bits of ``x`` minus those of 2/3 (one integer
    subtraction and a shift: no frexp, no division, no branch on ``m``).
    ``subnormal=False`` where ``x`` cannot be subnormal (it is then not scaled).
    """
    if not subnormal:
        bits = kit.bits(x)
        e = kit.ashr(kit.isub(bits, kit.ci(0x3F2AAAAB)), 23)
        return e, kit.sub(kit.bitcast_f(kit.isub(bits, kit.shl(e, 23))), kit.c(1.0))
    tiny = kit.lt(x, kit.c(2.0**-126))
    scaled = kit.select(tiny, kit.mul(x, kit.c(2.0**23)), x)
    bits = kit.bits(scaled)
    e = kit.ashr(kit.isub(bits, kit.ci(0x3F2AAAAB)), 23)  # 0x3F2AAAAB: 2/3 rounded up
    f = kit.sub(kit.bitcast_f(kit.isub(bits, kit.shl(e, 23))), kit.c(1.0))
    return kit.select(tiny, kit.isub(e, kit.ci(23)), e), f


def _log1p_poly_f32(kit: Kit, f: Value) -> Value:
    """``log(1 + f) = f + f^2 Q(f)`` for ``f`` in [-1/3, 1/3): ``Q`` a degree-8
    near-minimax polynomial (math_coefficients.LOG1P_Q, error 7.7e-8 relative, under
    0.2 ulp of the logarithm) evaluated with fmas: the length of libdevice's ``logf``."""
    return kit.fma(kit.poly(f, coeffs.LOG1P_Q_F32), kit.mul(f, f), f)


def _log_parts_f32(kit: Kit, x: Value) -> tuple[Value, Value]:
    """f32 ``(e, log(m))``, ``m`` in [2/3, 4/3) (:func:`_log_reduce_f32`,
    :func:`_log1p_poly_f32`)."""
    e, f = _log_reduce_f32(kit, x)
    return kit.to_float(e), _log1p_poly_f32(kit, f)


def log_parts(kit: Kit, x: Value) -> tuple[Value, Value]:
    """``(e, log(m))`` as floats with ``x = m*2^e``, for finite ``x > 0``."""
    if not kit.is_f64:
        return _log_parts_f32(kit, x)
    m, e = kit.frexp(x)
    big = kit.gt(m, kit.c(math.sqrt(2.0)))
    m = kit.select(big, kit.mul(m, kit.c(0.5)), m)
    e = kit.select(big, kit.iadd(e, kit.ci(1)), e)
    f = kit.sub(m, kit.c(1.0))
    s = kit.div(f, kit.add(kit.c(2.0), f))
    z = kit.mul(s, s)
    terms = _LOG_TERMS[kit.fmt.width]
    big_r = kit.mul(z, kit.poly(z, [2.0 / (2 * n + 3) for n in range(terms)]))
    hfsq = kit.mul(kit.c(0.5), kit.mul(f, f))
    logm = kit.sub(f, kit.sub(hfsq, kit.mul(s, kit.add(hfsq, big_r))))
    return kit.to_float(e), logm


def _log_special(kit: Kit, x: Value, result: Value) -> Value:
    """IEEE/numpy special values of every logarithm: 0 -> -inf, < 0 -> NaN, +inf and NaN
    -> ``x``. ``result`` may be anything there: the log core runs on these inputs too
    (plain arithmetic, it cannot trap) and is overwritten."""
    result = kit.select(kit.eq(x, kit.c(0.0)), kit.c(-math.inf), result)
    result = kit.nan_if(kit.lt(x, kit.c(0.0)), result)
    return kit.select(kit.cmp("uge", x, kit.inf()), x, result)


def _log_argument(kit: Kit, x: Value) -> Value:
    ok = kit.band(kit.gt(x, kit.c(0.0)), kit.lt(x, kit.inf()))
    return kit.select(ok, x, kit.c(1.0))


def log_finite(kit: Kit, x: Value) -> Value:
    """log for finite ``x > 0`` (no special values)."""
    w = kit.fmt.width
    e, logm = log_parts(kit, x)
    return kit.fma(e, kit.c(_LN2_HI[w]), kit.fma(e, kit.c(_LN2_LO[w]), logm))


def log(kit: Kit, x: Value) -> Value:
    return _log_special(kit, x, log_finite(kit, x))


def log2(kit: Kit, x: Value) -> Value:
    e, logm = log_parts(kit, x)
    return _log_special(kit, x, kit.fma(logm, kit.c(_LOG2E), e))


def log10(kit: Kit, x: Value) -> Value:
    w = kit.fmt.width
    e, logm = log_parts(kit, x)
    tail = kit.fma(logm, kit.c(_INV_LN10), kit.mul(e, kit.c(_LOG10_2_LO[w])))
    return _log_special(kit, x, kit.fma(e, kit.c(_LOG10_2_HI[w]), tail))


def _log1p_f32(kit: Kit, x: Value) -> Value:
    """``k ln2 + log(1 + f)`` with ``(1 + x) = (1 + f) 2^k``, ``1 + f`` in [2/3, 4/3),
    and ``f`` computed from ``x`` itself, not from the rounded ``u = 1 + x`` (libdevice's
    ``log1pf`` does the same): ``k`` comes from the bits of ``u`` (as in
    :func:`_log_reduce_f32`), and ``f = (2^-k - 1) + x 2^-k`` with both terms exact
    (``x 2^-k`` and ``4 * 2^-k`` by subtracting ``k`` from the exponent bits), so ``f``
    is rounded once. Where ``u`` rounded across a power of two, ``1 + f`` is 2^-24
    outside the interval: the polynomial (:func:`_log1p_poly_f32`) holds there too.
    No division, no branch on the size of ``x``: for ``|x| < 1/3`` (``k = 0``) ``f``
    is ``x`` exactly. ``k ln2`` is one fma with ln2 rounded to f32 (0.05 ulp of the
    result at most), the ``2^-23`` of ``k``'s bits folded into it. Special values from
    ``u`` (-1 -> -inf, below -> NaN, +inf and NaN themselves) and -0 kept."""
    u = kit.add(kit.c(1.0), x)
    e = kit.iand(kit.isub(kit.bits(u), kit.ci(0x3F2AAAAB)), kit.ci(0xFF800000))  # k << 23
    scaled = kit.bitcast_f(kit.isub(kit.bits(x), e))  # x 2^-k
    four_scaled = kit.bitcast_f(kit.isub(kit.ci(0x40800000), e))  # 4 2^-k (k >= -126)
    f = kit.add(kit.fma(four_scaled, kit.c(0.25), kit.c(-1.0)), scaled)
    logm = _log1p_poly_f32(kit, f)
    ln2_f32 = float(np.float32(_LN2))
    result = kit.fma(kit.to_float(e), kit.c(ln2_f32 * 2.0**-23), logm)
    return kit.keep_zero(x, _log_special(kit, u, result))


def log1p(kit: Kit, x: Value) -> Value:
    if not kit.is_f64:
        return _log1p_f32(kit, x)
    u = kit.add(kit.c(1.0), x)
    d = kit.sub(u, kit.c(1.0))
    safe_d = kit.select(kit.eq(d, kit.c(0.0)), kit.c(1.0), d)
    logu = log(kit, u)
    result = kit.mul(logu, kit.div(x, safe_d))
    result = kit.select(kit.eq(d, kit.c(0.0)), x, result)
    result = kit.select(kit.eq(x, kit.inf()), kit.inf(), result)
    result = kit.select(kit.eq(u, kit.c(0.0)), kit.c(-math.inf), result)
    return kit.pass_nan(x, result)


def sinh(kit: Kit, x: Value) -> Value:
    a = kit.abs(x)
    t = expm1(kit, kit.min(a, kit.c(_HYPERBOLIC_BIG[kit.fmt.width])))
    small = kit.mul(kit.c(0.5), kit.add(t, kit.div(t, kit.add(t, kit.c(1.0)))))
    large = exp_core(kit, _finite_or_zero(kit, a), scale_log2=-1)
    r = kit.select(kit.lt(a, kit.c(_HYPERBOLIC_BIG[kit.fmt.width])), small, large)
    return kit.pass_nan(x, kit.keep_zero(x, kit.copysign(r, x)))


def cosh(kit: Kit, x: Value) -> Value:
    """``h + 1/(4h)`` with ``h = e^|x| / 2`` (one exponential, scaled exactly, so
    ``h`` overflows exactly where cosh does; libdevice's ``coshf`` does the same).
    f32: the quotient (at most 0.5, added to ``h >= 0.5``) within 2 ulp of its own
    (``div.full``), at most 1 ulp of the result."""
    a = kit.abs(x)
    if not kit.is_f64:  # the f32 core passes NaN and inf through
        h = exp_core(kit, a, scale_log2=-1)
        return kit.add(h, kit.div_approx(kit.c(0.25), h))
    h = exp_core(kit, _finite_or_zero(kit, a), scale_log2=-1)
    return kit.pass_nan(x, kit.add(h, kit.div(kit.c(0.25), h)))


#: XLA:GPU's f32 tanh (its elemental emitter's fast tanh, Eigen's): ``x`` clamped to
#: [-c, c], then ``x P(x^2) / Q(x^2)``, ``P`` of degree 6 and ``Q`` of degree 3 in
#: ``x^2``; ``x`` itself below :data:`_TANH_TINY_F32`. The f32 values, highest degree
#: first, as XLA's kernels carry them (read from its LLVM IR for a tanh fusion).
_TANH_NUMERATOR_F32 = tuple(
    float.fromhex(h)
    for h in (
        "-0x1.3e4b8p-52", "0x1.c266fcp-43", "-0x1.7a6ffep-34", "0x1.b80082p-25",
        "0x1.f28694p-17", "0x1.4e1bdap-11", "0x1.40b3b8p-8",
    )
)  # fmt: skip
_TANH_DENOMINATOR_F32 = tuple(
    float.fromhex(h) for h in ("0x1.41a7bp-20", "0x1.f12bacp-14", "0x1.29540ap-9", "0x1.40b3bap-8")
)
#: The clamp: the rational function is 1.0 there (correctly rounded quotient) and at most
#: 1.0 below it.
_TANH_CLAMP_F32 = float.fromhex("0x1.ffec88p+2")  # 7.9988117
#: Below it (in magnitude) tanh(x) is x (``x^2/3`` relative, under an ulp).
_TANH_TINY_F32 = 0.0004


def _tanh_f32(kit: Kit, x: Value) -> Value:
    """XLA:GPU's f32 tanh, to the operation: a clamp that keeps NaN (``llvm.minimum``/
    ``maximum``), an odd rational function (one fma per coefficient, Horner in ``x^2``)
    and a quotient within 2 ulp (``div.full``, as XLA divides); ``x`` for
    ``|x| < 4e-4`` (signed zeros and subnormals kept). No exponential. Measured against
    float64 (``math_accuracy``): 4.0 ulp with the exact quotient, 4.4 correctly
    rounded, so at most 6.1 with ``div.full``'s 2 ulp; +-1 from the clamp on."""
    clamped = kit.min(kit.max(x, kit.c(-_TANH_CLAMP_F32)), kit.c(_TANH_CLAMP_F32))
    z = kit.mul(clamped, clamped)
    numerator = kit.mul(clamped, kit.poly(z, _TANH_NUMERATOR_F32[::-1]))
    denominator = kit.poly(z, _TANH_DENOMINATOR_F32[::-1])
    rational = kit.div_approx(numerator, denominator)
    return kit.select(kit.lt(kit.abs(x), kit.c(_TANH_TINY_F32)), clamped, rational)


def tanh(kit: Kit, x: Value) -> Value:
    if not kit.is_f64:
        return _tanh_f32(kit, x)
    a = kit.abs(x)
    t = expm1(kit, kit.mul(kit.c(2.0), kit.min(a, kit.c(_HYPERBOLIC_BIG[kit.fmt.width]))))
    below = kit.div(t, kit.add(t, kit.c(2.0)))
    above = kit.sub(kit.c(1.0), kit.div(kit.c(2.0), kit.add(t, kit.c(2.0))))
    r = kit.select(kit.lt(a, kit.c(1.0)), below, above)
    return kit.pass_nan(x, kit.keep_zero(x, kit.copysign(r, x)))


def asinh(kit: Kit, x: Value) -> Value:
    """One log1p of an argument chosen by ``|x|`` (fdlibm's three identities):
    ``a + a^2/(1 + sqrt(a^2+1))`` up to 2, ``2a + 1/(sqrt(a^2+1) + a) - 1`` above,
    ``a - 1`` (plus ln2 after) above 2^28 / 2^12 where ``a^2`` is no longer needed;
    one square root and one division for all three."""
    a = kit.abs(x)
    huge = kit.gt(a, kit.c(2.0**28 if kit.is_f64 else 2.0**12))
    big = kit.gt(a, kit.c(2.0))
    a2 = kit.mul(a, a)
    root = kit.sqrt(kit.add(a2, kit.c(1.0)))
    q = kit.div(
        kit.select(big, kit.c(1.0), a2),
        kit.select(big, kit.add(root, a), kit.add(kit.c(1.0), root)),
    )
    big_arg = kit.sub(kit.add(kit.add(a, a), q), kit.c(1.0))
    arg = kit.select(huge, kit.sub(a, kit.c(1.0)), kit.select(big, big_arg, kit.add(a, q)))
    r = kit.add(log1p(kit, arg), kit.select(huge, kit.c(_LN2), kit.c(0.0)))
    return kit.pass_nan(x, kit.keep_zero(x, kit.copysign(r, x)))


def acosh(kit: Kit, x: Value) -> Value:
    """One log1p, as :func:`asinh`: ``t + sqrt(2t + t^2)`` (``t = x - 1``, exact up to
    2), ``2x - 1/(x + sqrt(x^2-1)) - 1`` above, ``x - 1`` (plus ln2) when huge;
    ``x^2 - 1`` is ``2t + t^2``, one fma, so the same root serves both."""
    huge = kit.gt(x, kit.c(2.0**28 if kit.is_f64 else 2.0**12))
    big = kit.gt(x, kit.c(2.0))
    t = kit.sub(x, kit.c(1.0))
    root = kit.sqrt(kit.fma(t, t, kit.add(t, t)))
    big_arg = kit.sub(kit.sub(kit.add(x, x), kit.div(kit.c(1.0), kit.add(x, root))), kit.c(1.0))
    arg = kit.select(huge, t, kit.select(big, big_arg, kit.add(t, root)))
    r = kit.add(log1p(kit, arg), kit.select(huge, kit.c(_LN2), kit.c(0.0)))
    r = kit.nan_if(kit.lt(x, kit.c(1.0)), r)
    return kit.pass_nan(x, r)


def atanh(kit: Kit, x: Value) -> Value:
    a = kit.abs(x)
    one_minus = kit.sub(kit.c(1.0), a)
    two_a = kit.add(a, a)
    small_arg = kit.add(two_a, kit.div(kit.mul(two_a, a), one_minus))
    large_arg = kit.div(two_a, one_minus)
    arg = kit.select(kit.lt(a, kit.c(0.5)), small_arg, large_arg)
    r = kit.mul(kit.c(0.5), log1p(kit, arg))
    r = kit.nan_if(kit.gt(a, kit.c(1.0)), r)
    return kit.pass_nan(x, kit.keep_zero(x, kit.copysign(r, x)))


def _cbrt_seed_coeffs() -> list[float]:
    nodes = 4.5 + 3.5 * np.cos(np.pi * (np.arange(16) + 0.5) / 16)
    return [float(c) for c in np.polynomial.polynomial.polyfit(nodes, np.cbrt(nodes), 3)]


_CBRT_SEED = _cbrt_seed_coeffs()


def _cbrt_f32(kit: Kit, x: Value) -> Value:
    """f32 cube root as libdevice's ``cbrtf`` computes it: ``y = 2^(-2/3 log2|x|)``
    (``|x|^(-2/3)`` from the approximate lg2 and ex2, within about 2^-21), ``s = |x| y``,
    then one correction ``s + s (1 - s^2 y) / 3``, which cancels the seed's error to
    first order (``s^2 y`` is ``(1 + d)^3`` for a seed off by ``1 + d``): what is left is
    the roundings', about 1 ulp. The sign is copied back; +-0, +-inf and NaN are ``x``
    itself (``x + x == x``: no fraction of them survives ``0 * inf``). No division,
    so no IEEE slow path (issue 29: SASS 462 -> XLA's 79)."""
    a = kit.abs(x)
    y = kit.exp2_approx(kit.mul(kit.log2_approx(a), kit.c(-2.0 / 3.0)))
    s = kit.mul(a, y)
    residual = kit.fma(s, kit.mul(y, kit.neg(s)), kit.c(1.0))
    r = kit.copysign(kit.fma(s, kit.mul(residual, kit.c(1.0 / 3.0)), s), x)
    return kit.select(kit.eq(kit.add(x, x), x), x, r)


def cbrt(kit: Kit, x: Value) -> Value:
    """Cube root: ``|x| = m*2^(3q+r)``, seed cubic on [1, 8), Newton steps, ``*2^q``
    (f64; f32: :func:`_cbrt_f32`)."""
    if not kit.is_f64:
        return _cbrt_f32(kit, x)
    a = kit.abs(x)
    ok = kit.band(kit.gt(a, kit.c(0.0)), kit.lt(a, kit.inf()))
    m, e = kit.frexp(kit.select(ok, a, kit.c(1.0)))
    three = kit.ci(3)
    q = arith.FloorDivSIOp(e, three).result
    rem = kit.isub(e, arith.MulIOp(q, three).result)
    mm = kit.mul(m, kit.pow2i(rem))  # in [1, 8)
    y = kit.poly(mm, _CBRT_SEED)
    for _ in range(4 if kit.is_f64 else 3):
        y = kit.mul(kit.add(kit.add(y, y), kit.div(mm, kit.mul(y, y))), kit.c(1.0 / 3.0))
    r = kit.copysign(kit.mul(y, kit.pow2i(q)), x)
    r = kit.select(ok, r, x)  # +-0, +-inf and NaN are their own cube roots
    return r


def _is_integer(kit: Kit, y: Value) -> tuple[Value, Value]:
    """``(y is an integer, y is an odd integer)`` for any ``y`` (false for NaN/inf)."""
    fmt = kit.fmt
    a = kit.abs(y)
    small = kit.lt(a, kit.c(2.0 ** (fmt.mantissa - 1)))
    rounded = kit.round_int(kit.select(small, y, kit.c(0.0)))
    integral = kit.bor(
        kit.band(small, kit.eq(rounded, y)), kit.bnot(kit.bor(small, kit.cmp("uge", a, kit.inf())))
    )
    fits = kit.lt(a, kit.c(2.0 ** (fmt.mantissa + 1)))
    as_int = kit.to_int(kit.select(fits, y, kit.c(0.0)))
    odd_bit = kit.icmp("ne", kit.iand(as_int, kit.ci(1)), kit.ci(0))
    return integral, kit.band(integral, kit.band(fits, odd_bit))


#: log2(e) in two f32 parts.
_LOG2E_F32 = (float(np.float32(_LOG2E)), float(np.float32(_LOG2E - float(np.float32(_LOG2E)))))


#: ``|y log2 x|`` from which f32 pow is 0 or inf (2^-150 rounds to 0, 2^128 is inf).
_POW_SATURATED_F32 = 256.0


def _pow_magnitude_f32(kit: Kit, ax: Value, y: Value) -> tuple[Value, Value]:
    """f32 ``2^(y log2 ax)`` for finite ``ax > 0``, in f32 with double-f32 steps (the
    structure of libdevice's ``powf``, heron's polynomials):

    - ``ax = m 2^k``, ``m`` in [sqrt(1/2), sqrt(2)) from the bits (subnormals scaled
      by 2^24 first), ``f = m - 1`` exact;
    - ``log m = u + lo + u^3 C(u^2)`` with ``u + lo = 2f/(m + 1)``: ``u = 2f r`` for an
      approximate ``r = 1/(m + 1)`` (``rcp.approx.f32`` on CUDA), and ``lo = r (2(f - u)
      - u f)``, the residual ``2f - u(2 + f)`` computed exactly but for one rounding
      (``f - u`` is exact), so the pair does not depend on ``r``'s error;
      ``C`` (math_coefficients.POW_LOG_C, degree 3) is the atanh series' tail,
      evaluated at ``u`` and corrected by its derivative times ``lo``;
    - ``log2 ax = k + log2e (u + lo + ...)`` as a pair ``h + l`` (the product
      ``u log2e_hi`` split exactly by an fma, then Fast2Sums), about 2^-40 relative;
    - ``p + p_lo = y (h + l)`` (the product's error by an fma), clamped to +-160
      (beyond, the result is 0 or inf), ``n = round(p)``, ``2^(p - n + p_lo)`` by
      ``1 + t E(t)`` (POW_EXP2_E, degree 6), then times ``2^n`` in two exact steps, so
      subnormal and overflowing results are rounded once.
    """
    tiny = kit.lt(ax, kit.c(2.0**-126))
    a = kit.select(tiny, kit.mul(ax, kit.c(2.0**24)), ax)
    e = kit.iand(kit.isub(kit.bits(a), kit.ci(0x3F3504F3)), kit.ci(0xFF800000))  # k << 23
    m = kit.bitcast_f(kit.isub(kit.bits(a), e))
    k = kit.fma(kit.to_float(e), kit.c(2.0**-23), kit.select(tiny, kit.c(-24.0), kit.c(0.0)))
    f = kit.sub(m, kit.c(1.0))
    r = kit.div_approx(kit.c(1.0), kit.add(m, kit.c(1.0)))
    u = kit.mul(kit.add(f, f), r)
    d = kit.sub(f, u)
    lo = kit.mul(r, kit.fma(kit.neg(u), f, kit.add(d, d)))
    z = kit.mul(u, u)
    zc = kit.mul(z, kit.poly(z, coeffs.POW_LOG_C_F32))
    # (u + lo)^3 C: u^3 C + 3 u^2 C lo (u is 2^-23 off the exact quotient, which the
    # cube would triple)
    tail = kit.fma(u, zc, kit.fma(kit.mul(lo, kit.c(3.0)), zc, lo))
    l2e_hi, l2e_lo = _LOG2E_F32
    a_hi = kit.mul(u, kit.c(l2e_hi))
    small = kit.fma(u, kit.c(l2e_lo), kit.fma(u, kit.c(l2e_hi), kit.neg(a_hi)))
    small = kit.fma(tail, kit.c(l2e_hi), small)
    s = kit.add(k, a_hi)  # |k| >= |a_hi| unless k = 0: Fast2Sum
    lo2 = kit.add(kit.sub(a_hi, kit.sub(s, k)), small)
    h = kit.add(s, lo2)
    l = kit.sub(lo2, kit.sub(h, s))  # noqa: E741
    p = kit.mul(y, h)
    p_lo = kit.fma(y, l, kit.fma(y, h, kit.neg(p)))
    pc = kit.minnum(kit.maxnum(p, kit.c(-160.0)), kit.c(160.0))  # NaN (from y) -> -160
    n = kit.round_int(pc)
    t = kit.add(kit.sub(pc, n), p_lo)
    q = kit.fma(t, kit.poly(t, coeffs.POW_EXP2_E_F32), kit.c(1.0))
    # From |p| = 2^24 on (|y| ~1e8 and more) p_lo, p's rounding error, is up to 2^(e-24)
    # (-+inf where y h overflows) and t is anything: the result is 0 or inf there
    # (from |p| >= 150), which _pow selects by this flag (one compare).
    return kit.ldexp(q, kit.to_int(n)), kit.ge(kit.abs(p), kit.c(_POW_SATURATED_F32))


def pow_f32(kit: Kit, x: Value, y: Value) -> Value:
    """f32 ``x**y`` with numpy's special cases (:func:`_pow_magnitude_f32`)."""
    return _pow(kit, x, y, lambda ax: _pow_magnitude_f32(kit, _log_argument(kit, ax), y))


#: 2/3 as f64 head and tail.
_TWO_THIRDS_HI = 2.0 / 3.0
_TWO_THIRDS_LO = float(np.float64((2 - 3 * np.longdouble(_TWO_THIRDS_HI)) / 3))
#: ``w(z) = sum_{n>=1} 2 z^n / (2n+3)``: the atanh series past 2/3, ``z = s^2 <= 0.0295``
#: (13 terms: the rest is under 2^-72 of log m).
_LOG_DOUBLE_TAIL = [2.0 / (2 * n + 5) for n in range(13)]


def _log_f64_double(kit: Kit, x: Value) -> tuple[Value, Value]:
    """f64 ``log x`` as a head and a tail (about 2^-70 relative, under 2^-66 absolute),
    for finite ``x > 0``: what ``y log x`` in pow needs, whose absolute error is the
    result's relative one (``|y log x|`` up to 745: libdevice's ``__nv_pow`` computes
    its log in double-double too).

    ``x = m 2^e``, ``m`` in [sqrt(1/2), sqrt(2)], ``f = m - 1`` exact; ``s = f/(2 + f)``
    as ``s_hi + s_lo`` (``2 + f`` as a pair by Fast2Sum, the quotient's residual by
    an fma, divided by ``2 + f`` as a product with ``(1 - s)/2``); ``log m = 2s +
    s^3 (2/3 + w(s^2))`` with ``2/3 + w`` and ``s^3`` as pairs (``w`` is at most 1.2%
    of 2/3, so its own f64 roundings are 2^-59 of the ``s^3`` term, which is at most
    1% of ``log m``); ``e ln2`` with ln2 in two parts (``e ln2_hi`` exact) added by
    Fast2Sums.
    """
    m, e = kit.frexp(x)
    big = kit.gt(m, kit.c(math.sqrt(2.0)))
    m = kit.select(big, kit.mul(m, kit.c(0.5)), m)
    ef = kit.to_float(kit.select(big, kit.iadd(e, kit.ci(1)), e))
    two = kit.c(2.0)
    f = kit.sub(m, kit.c(1.0))
    v_hi = kit.add(two, f)
    v_lo = kit.sub(f, kit.sub(v_hi, two))
    s_hi = kit.div(f, v_hi)
    residual = kit.sub(kit.fma(kit.neg(s_hi), v_hi, f), kit.mul(s_hi, v_lo))
    # residual / (2 + f), with 1/(2 + f) = (1 - s)/2: one division in all
    s_lo = kit.mul(residual, kit.fma(s_hi, kit.c(-0.5), kit.c(0.5)))
    z_hi = kit.mul(s_hi, s_hi)
    z_lo = kit.fma(s_hi, s_hi, kit.neg(z_hi))
    w = kit.mul(z_hi, kit.poly(z_hi, _LOG_DOUBLE_TAIL))
    a_hi = kit.add(kit.c(_TWO_THIRDS_HI), w)
    a_lo = kit.add(kit.add(kit.sub(kit.c(_TWO_THIRDS_HI), a_hi), w), kit.c(_TWO_THIRDS_LO))
    c_hi = kit.mul(z_hi, s_hi)  # s^3
    c_lo = kit.fma(z_hi, s_hi, kit.neg(c_hi))
    c_lo = kit.add(c_lo, kit.fma(z_lo, s_hi, kit.mul(kit.mul(z_hi, s_lo), kit.c(3.0))))
    t_hi = kit.mul(c_hi, a_hi)
    t_lo = kit.fma(c_hi, a_hi, kit.neg(t_hi))
    t_lo = kit.add(t_lo, kit.fma(c_hi, a_lo, kit.mul(c_lo, a_hi)))
    two_s = kit.add(s_hi, s_hi)
    h = kit.add(two_s, t_hi)  # |2s| > |t|: Fast2Sum
    l = kit.add(kit.add(kit.sub(two_s, h), t_hi), kit.add(kit.add(s_lo, s_lo), t_lo))  # noqa: E741
    big_part = kit.mul(ef, kit.c(_LN2_HI[64]))  # exact; |e ln2| >= ln2 > |h| unless e = 0
    head = kit.add(big_part, h)
    lo = kit.add(kit.add(kit.sub(big_part, head), h), kit.fma(ef, kit.c(_LN2_LO[64]), l))
    log_hi = kit.add(head, lo)
    return log_hi, kit.add(kit.sub(head, log_hi), lo)


def pow_f64(kit: Kit, x: Value, y: Value) -> Value:
    """``x**y`` with numpy's special cases; ``kit`` must be f64."""

    def magnitude(ax: Value) -> Value:
        log_hi, log_lo = _log_f64_double(kit, _log_argument(kit, ax))
        prod = kit.mul(y, log_hi)
        prod_lo = kit.fma(y, log_lo, kit.fma(y, log_hi, kit.neg(prod)))
        # from |prod| = 800 on (inf included) the result is 0 or inf, whatever prod_lo
        # (which may then be -+inf): _pow selects it
        saturated = kit.ge(kit.abs(prod), kit.c(800.0))
        prod_lo = kit.select(saturated, kit.c(0.0), prod_lo)
        return exp_core(kit, _finite_or_zero(kit, prod), prod_lo), saturated

    return _pow(kit, x, y, magnitude)


def _pow(kit: Kit, x: Value, y: Value, core) -> Value:
    """``x**y`` from ``core(|x|)`` and numpy's special cases. ``core`` gives ``|x|^y`` for
    finite ``|x| > 0`` and finite ``y``, and a flag: ``|y log|x||`` is so large (``y``
    infinite included) that ``|x|^y`` is 0 or inf, by the sign of ``y log|x|``."""
    ax = kit.abs(x)
    integral, odd = _is_integer(kit, y)
    magnitude, saturated = core(ax)
    # |x| = 0 or inf: the limits of exp(y*log|x|), by the signs of y and log|x|.
    zero_or_inf = kit.bor(kit.eq(ax, kit.c(0.0)), kit.eq(ax, kit.inf()))
    grows = kit.icmp("eq", kit.eq(ax, kit.inf()), kit.gt(y, kit.c(0.0)))
    magnitude = kit.select(zero_or_inf, kit.select(grows, kit.inf(), kit.c(0.0)), magnitude)
    # |y log|x|| huge (y = +-inf with |x| not 0, 1 or inf included): 0 or inf by whether
    # |x| < 1 (|x| = 1 gives 1 below; |x| = 0 or inf: y log|x| is NaN, not saturated).
    y_inf = kit.eq(kit.abs(y), kit.inf())
    inf_grows = kit.icmp("eq", kit.gt(ax, kit.c(1.0)), kit.gt(y, kit.c(0.0)))
    magnitude = kit.select(saturated, kit.select(inf_grows, kit.inf(), kit.c(0.0)), magnitude)
    magnitude = kit.select(kit.eq(ax, kit.c(1.0)), kit.c(1.0), magnitude)
    negative = kit.signbit_set(x)
    result = kit.select(kit.band(negative, odd), kit.neg(magnitude), magnitude)
    bad = kit.band(kit.band(negative, kit.bnot(integral)), kit.bnot(y_inf))
    bad = kit.band(bad, kit.gt(ax, kit.c(0.0)))
    bad = kit.band(bad, kit.lt(ax, kit.inf()))
    result = kit.nan_if(kit.bor(bad, kit.bor(kit.isnan(x), kit.isnan(y))), result)
    result = kit.select(kit.eq(x, kit.c(1.0)), kit.c(1.0), result)
    return kit.select(kit.eq(y, kit.c(0.0)), kit.c(1.0), result)
