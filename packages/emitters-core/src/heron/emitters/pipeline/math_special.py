"""erf, erfc and the rounding functions, as arith code (f32 and f64).

- f32 erf: XLA:GPU's own rational function (:func:`_erf_f32`), clamped.
- f64 erf on ``|x| < 0.5``, and erfc there: its Taylor series ``x*P(x^2)`` (7 terms
  f32, 13 f64).
- erfc on ``x >= 0.5``: ``exp(-x^2) * G(x)`` with ``G`` fitted piecewise
  (math_coefficients: [0.5, 1.5), [1.5, 3), then in ``1/x`` up to the
  underflow point); ``exp(-x^2)`` is evaluated as ``exp(-hi*hi - lo)`` with
  ``hi*hi`` exact, so the error of squaring ``x`` does not grow with ``x``.
  f64 erf elsewhere is ``1 - erfc``, erfc elsewhere ``1 - erf`` or ``2 - erfc(-x)``.
- floor, ceil, trunc, round, roundeven: through the integer of the same width
  (``|x| < 2^mantissa``; larger values are integers already), signs of zero kept.
"""

from __future__ import annotations

import math

from mlir import ir

from heron.emitters.pipeline import math_coefficients as coeffs
from heron.emitters.pipeline.math_common import Kit
from heron.emitters.pipeline.math_exp_log import exp_core

Value = ir.Value

_ERF_TERMS = {32: 7, 64: 13}
# erfc(x) is 0 (after rounding) above these.
_ERFC_LIMIT = {32: 10.1, 64: 27.5}


def _erf_small(kit: Kit, x: Value) -> Value:
    n_terms = _ERF_TERMS[kit.fmt.width]
    series = [
        2.0 / math.sqrt(math.pi) * (-1.0) ** n / (math.factorial(n) * (2 * n + 1))
        for n in range(n_terms)
    ]
    return kit.mul(x, kit.poly(kit.mul(x, x), series))


def _erfc_large(kit: Kit, a: Value) -> Value:
    """erfc(a) for ``a >= 0.5`` (finite; 0 above the underflow limit)."""
    limit = _ERFC_LIMIT[kit.fmt.width]
    ac = kit.min(a, kit.c(limit))
    if kit.is_f64:
        g1, g2 = coeffs.ERFC_G1_F64, coeffs.ERFC_G2_F64
    else:
        g1, g2 = coeffs.ERFC_G1_F32, coeffs.ERFC_G2_F32
    p1 = kit.poly(kit.sub(ac, kit.c(coeffs.ERFC_G1_CENTRE)), g1)
    p2 = kit.poly(kit.sub(ac, kit.c(coeffs.ERFC_G2_CENTRE)), g2)
    u = kit.div(kit.c(1.0), ac)
    if kit.is_f64:
        ha = kit.poly(kit.sub(u, kit.c(coeffs.ERFC_H3A_CENTRE)), coeffs.ERFC_H3A_F64)
        hb = kit.poly(kit.sub(u, kit.c(coeffs.ERFC_H3B_CENTRE)), coeffs.ERFC_H3B_F64)
        h = kit.select(kit.lt(ac, kit.c(6.0)), ha, hb)
    else:
        h = kit.poly(kit.sub(u, kit.c(coeffs.ERFC_H3_CENTRE)), coeffs.ERFC_H3_F32)
    p3 = kit.mul(h, u)
    g = kit.select(kit.lt(ac, kit.c(1.5)), p1, kit.select(kit.lt(ac, kit.c(3.0)), p2, p3))
    hi = kit.split_high(ac)
    lo = kit.mul(kit.sub(ac, hi), kit.add(ac, hi))
    e = exp_core(kit, kit.neg(kit.mul(hi, hi)), kit.neg(lo))
    return kit.select(kit.gt(a, kit.c(limit)), kit.c(0.0), kit.mul(e, g))


#: XLA:GPU's f32 erf (its elemental emitter's, Eigen's ``erf`` for float): ``x`` clamped
#: to [-c, c], ``x P(x^2) / Q(x^2)`` with ``P`` of degree 4 and ``Q`` of degree 6 in
#: ``x^2``, and +-1 from ``c`` on. The f32 values, highest degree first, as XLA's
#: kernels carry them (read from its LLVM IR for an erf fusion).
_ERF_NUMERATOR_F32 = tuple(
    float.fromhex(h)
    for h in ("0x1.e05aa2p-13", "0x1.bebb44p-9", "0x1.a16dd6p-5", "0x1.7b4e8p-3", "0x1.20dd74p+0")
)
_ERF_DENOMINATOR_F32 = tuple(
    float.fromhex(h)
    for h in (
        "-0x1.fa720cp-24", "0x1.8b11bep-16", "0x1.0ada5p-10", "0x1.cd0fa8p-7",
        "0x1.c69842p-4", "0x1.fd6894p-2", "0x1p+0",
    )
)  # fmt: skip
#: From it on (in magnitude) erf is +-1 (the rational function is within an ulp of 1).
_ERF_CLAMP_F32 = float.fromhex("0x1.df38dp+1")  # 3.7439


def _erf_f32(kit: Kit, x: Value) -> Value:
    """XLA:GPU's f32 erf, to the operation: the clamp keeps NaN (``llvm.minimum``/
    ``maximum``), one rational function (fmas, Horner in ``x^2``) and a quotient within
    2 ulp (``div.full``, as XLA divides), +-1 (copysign) from the clamp on. No
    exponential, no piece per range: one path (``math_accuracy.XLA_FORMS``)."""
    clamped = kit.min(kit.max(x, kit.c(-_ERF_CLAMP_F32)), kit.c(_ERF_CLAMP_F32))
    z = kit.mul(clamped, clamped)
    numerator = kit.mul(clamped, kit.poly(z, _ERF_NUMERATOR_F32[::-1]))
    rational = kit.div_approx(numerator, kit.poly(z, _ERF_DENOMINATOR_F32[::-1]))
    one = kit.copysign(kit.c(1.0), x)
    return kit.select(kit.ge(kit.abs(x), kit.c(_ERF_CLAMP_F32)), one, rational)


def erf(kit: Kit, x: Value) -> Value:
    if not kit.is_f64:
        return _erf_f32(kit, x)
    a = kit.abs(x)
    finite_a = kit.select(kit.isnan(a), kit.c(0.0), a)
    tail = _erfc_large(kit, kit.max(finite_a, kit.c(0.5)))
    large = kit.sub(kit.c(1.0), tail)
    r = kit.select(kit.lt(a, kit.c(0.5)), _erf_small(kit, x), kit.copysign(large, x))
    return kit.pass_nan(x, r)


def erfc(kit: Kit, x: Value) -> Value:
    a = kit.abs(x)
    finite_a = kit.select(kit.isnan(a), kit.c(0.0), a)
    tail = _erfc_large(kit, kit.max(finite_a, kit.c(0.5)))
    middle = kit.sub(kit.c(1.0), _erf_small(kit, x))
    r = kit.select(kit.lt(x, kit.c(0.0)), kit.sub(kit.c(2.0), tail), tail)
    r = kit.select(kit.lt(a, kit.c(0.5)), middle, r)
    return kit.pass_nan(x, r)


def _truncated(kit: Kit, x: Value) -> tuple[Value, Value, Value]:
    """``(big, t, ti)``: ``big`` where ``x`` is integral already (or NaN/inf); else
    ``t = trunc(x)`` as float and ``ti`` as integer."""
    big = kit.cmp("uge", kit.abs(x), kit.c(2.0**kit.fmt.mantissa))
    ti = kit.to_int(kit.select(big, kit.c(0.0), x))
    return big, kit.to_float(ti), ti


def _finish(kit: Kit, x: Value, big: Value, result: Value) -> Value:
    """``x`` where it is integral already, else ``result`` with a zero signed as ``x``.

    The sign only matters for a zero result (a nonzero one has ``x``'s sign
    already): ``x * 0`` is that zero, exactly, for finite ``x``. Not a bitwise
    copysign: LLVM recognises one as ``llvm.copysign`` and, on f16 computed in
    f32, folds the final truncation into an f16 ``fcopysign`` with an f32 sign
    that the AMDGPU code generator cannot select (a process abort, fuzz finding
    generated-s1-6949).
    """
    signed_zero = kit.mul(x, kit.c(0.0))
    return kit.select(big, x, kit.select(kit.eq(result, kit.c(0.0)), signed_zero, result))


def _unit_step(kit: Kit, x: Value) -> Value:
    """1 or -1, as ``x``'s sign (see :func:`_finish` for why not ``copysign``)."""
    return kit.select(kit.signbit_set(x), kit.c(-1.0), kit.c(1.0))


def trunc(kit: Kit, x: Value) -> Value:
    big, t, _ = _truncated(kit, x)
    return _finish(kit, x, big, t)


def floor(kit: Kit, x: Value) -> Value:
    big, t, _ = _truncated(kit, x)
    r = kit.select(kit.gt(t, x), kit.sub(t, kit.c(1.0)), t)
    return _finish(kit, x, big, r)


def ceil(kit: Kit, x: Value) -> Value:
    big, t, _ = _truncated(kit, x)
    r = kit.select(kit.lt(t, x), kit.add(t, kit.c(1.0)), t)
    return _finish(kit, x, big, r)


def round_half_away(kit: Kit, x: Value) -> Value:
    big, t, _ = _truncated(kit, x)
    frac = kit.abs(kit.sub(x, t))
    step = _unit_step(kit, x)
    r = kit.select(kit.ge(frac, kit.c(0.5)), kit.add(t, step), t)
    return _finish(kit, x, big, r)


def round_even(kit: Kit, x: Value) -> Value:
    big, t, ti = _truncated(kit, x)
    frac = kit.abs(kit.sub(x, t))
    odd = kit.icmp("ne", kit.iand(ti, kit.ci(1)), kit.ci(0))
    up = kit.bor(kit.gt(frac, kit.c(0.5)), kit.band(kit.eq(frac, kit.c(0.5)), odd))
    r = kit.select(up, kit.add(t, _unit_step(kit, x)), t)
    return _finish(kit, x, big, r)
