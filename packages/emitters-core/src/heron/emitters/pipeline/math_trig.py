"""Trigonometric functions and their inverses, as arith code (f32 and f64).

- sin, cos, tan: ``x = k*pi/2 + r`` computed in f64 with fdlibm's four-part
  ``pi/2`` (33 + 33 + 33 + 53 bits; ``k*pio2_1`` is exact for ``|k| < 2^20``), so
  the reduction is accurate for ``|x| < 2^20*pi/2`` (about 1.6e6). f32 tan
  inputs are reduced in f64 and evaluated in f32; f32 sin and cos are reduced in
  f32 below 2^17, as libdevice's ``sinf`` (``_reduce_pio2_f32``: three fmas with
  pi/2 in three f32 parts), and evaluated with near-minimax polynomials of
  degree 3 in ``r^2``. f32 arguments from 2^20 (tan) or 2^17 (sin, cos) on take
  a Payne-Hanek reduction instead (``_reduce_pio2_large_f32``, exact products of
  ``x`` with 26-bit chunks of ``2/pi``), so f32 sin/cos/tan are accurate for
  every finite argument. f64 arguments from 2^20 on take an f64 Payne-Hanek
  reduction (``_reduce_pio2_large_f64``: 2/pi in 48-bit chunks chosen by the
  exponent, exact fma products, a coarse sum mod 4 and a fine double-double one),
  in an ``scf.if`` taken only where some lane needs it, so f64 sin/cos/tan are
  accurate for every finite argument too (libdevice's ``__nv_sin`` also branches
  to a Payne-Hanek reduction for large arguments).
  Taylor polynomials on ``|r| <= pi/4`` (sin to r^9 / r^17, cos to r^10 / r^18)
  for f64 and f32 tan.
- atan: fdlibm's five intervals (reductions by 0.5, 1, 1.5 and ``1/x``, all
  exact-constant), then ``t + t*z*Q(z)`` with a fitted ``Q`` (math_coefficients).
- atan2: ``atan(min/max)`` of the magnitudes (f32: one polynomial on [0, 1], as
  libdevice's ``atan2f``), then the octant and quadrant corrections with ``pi/2``
  and ``pi`` in two parts; IEEE special cases.
- asin, acos: ``t + t*z*Q(z)`` on ``|t| <= 0.5``, and ``asin(x) = pi/2 -
  2*asin(sqrt((1-|x|)/2))`` above (``1-|x|`` is exact there).
"""

from __future__ import annotations

import math

import numpy as np
from mlir import ir
from mlir.dialects import arith, scf, vector

from heron.emitters.pipeline import math_coefficients as coeffs
from heron.emitters.pipeline.math_common import Kit

Value = ir.Value

_PIO2_1 = 1.57079632673412561417e00
_PIO2_2 = 6.07710050630396597660e-11
_PIO2_3 = 2.02226624871116645580e-21
_PIO2_3T = 8.47842766036889956997e-32
# 2/pi = sum(c * 2^(-26*(j+1))): the first 208 bits in 26-bit chunks (each fits
# 26 bits, so x (24 bits) times one is exact in f64).
_TWO_OVER_PI_26 = (42722829, 48555073, 21659401, 56087029,
                   13858563, 28715353, 38736100, 4324945)  # fmt: skip
# f32 tan arguments with |x| below this take the Cody-Waite reduction, the rest Payne-Hanek.
_LARGE_F32 = 2.0**20
_SIN_TAYLOR = {32: 9, 64: 17}
_COS_TAYLOR = {32: 10, 64: 18}

# (hi, lo) of atan(0.5), pi/4, atan(1.5), pi/2 (fdlibm's values).
_ATAN_HI = (4.63647609000806093515e-01, 7.85398163397448278999e-01,
            9.82793723247329054082e-01, 1.57079632679489655800e00)  # fmt: skip
_ATAN_LO = (2.26987774529616870924e-17, 3.06161699786838301793e-17,
            1.39033110312309984516e-17, 6.12323399573676603587e-17)  # fmt: skip
_PIO2_HI, _PIO2_LO = _ATAN_HI[3], _ATAN_LO[3]
_PI_HI, _PI_LO = 2 * _PIO2_HI, 2 * _PIO2_LO


def _split(kit: Kit, hi: float, lo: float) -> tuple[float, float]:
    """A (hi, lo) f64 pair re-split for ``kit``'s precision."""
    if kit.is_f64:
        return hi, lo
    head = float(np.float32(hi))
    return head, float(np.float32((hi - head) + lo))


def _series(kit: Kit, first: int, last: int) -> list[float]:
    """Coefficients of z^0.. of the sin (first=1) or cos (first=2) Taylor tail."""
    return [
        (-1.0) ** (n + first - 1) / math.factorial(first + 2 * n)
        for n in range((last - first) // 2 + 1)
        if first + 2 * n <= last
    ]


def _two_sum(k64: Kit, a: Value, b: Value) -> tuple[Value, Value]:
    """``(s, e)`` with ``s = fl(a + b)`` and ``s + e = a + b`` exactly (Knuth's TwoSum)."""
    s = k64.add(a, b)
    bb = k64.sub(s, a)
    e = k64.add(k64.sub(a, k64.sub(s, bb)), k64.sub(b, bb))
    return s, e


def _mod4(k64: Kit, v: Value, huge: bool) -> Value:
    """``v - 4*n`` for the integer ``n`` nearest ``v/4``: exact, in ``[-2, 2]`` (f64).

    ``w = v/4`` is exact; for ``|w| < 2^52`` adding and subtracting
    ``copysign(2^52, w)`` rounds it to an integer (the sum has ulp 1), and from
    ``2^52`` on ``w`` is an integer already (``huge``: ``v`` may be that large;
    otherwise ``|w| < 2^51`` and the plain ``1.5*2^52`` shifter does).
    """
    w = k64.mul(v, k64.c(0.25))
    if huge:
        shifter = k64.copysign(k64.c(2.0**52), w)
        n = k64.sub(k64.add(w, shifter), shifter)
        n = k64.select(k64.lt(k64.abs(w), k64.c(2.0**52)), n, w)
    else:
        n = k64.round_int(w)
    return k64.mul(k64.sub(w, n), k64.c(4.0))


def _reduce_pio2_large_f32(k64: Kit, x: Value) -> tuple[Value, Value]:
    """Payne-Hanek ``(q, r)`` (i64 ``k mod 4``, f64 ``r``) for f32 ``x`` extended to f64.

    ``x = m*2^E`` has 24 bits and ``|x| < 2^128``; ``2/pi = sum(C_j)`` with
    ``C_j = c_j*2^(-26(j+1))``, ``c_j < 2^26``, so every ``p_j = x*C_j`` is exact
    in f64 (50 bits) and ``|p_j| < 2^(128-26j)``. Only ``x*2/pi mod 4`` matters:
    ``p_0..p_3`` (up to ``2^128, 2^102, 2^76, 2^50``) are replaced by their exact
    residues mod 4 in ``[-2, 2]``; ``|p_4| < 2^24`` is kept whole. The eight terms
    are added with TwoSum, so ``s + t`` equals their sum up to the rounding of
    ``t`` (``|s| < 2^24 + 9``: each of the 7 errors is under ``2^-28``, so
    ``|t| < 2^-25`` and its own rounding stays under ``7*2^-78``). The chunks stop
    at ``2^-208``: the dropped tail of ``x*2/pi`` is under ``2^128*2^-208 =
    2^-80``. So ``f = x*2/pi - k`` (``k = round(s)``, ``s - k`` exact) has an
    absolute error below ``2^-74``, and ``r = f*pi/2`` below ``2^-73`` (plus
    relative f64 roundings). The binary32 argument closest to a multiple of
    ``pi/2`` (``16367173*2^72``, Muller, *Elementary Functions*, ch. 11) has
    ``|r|`` about ``1.6e-9 > 2^-30``, so ``r`` keeps a relative error under
    ``2^-43``, far below the f32 rounding of ``r`` that follows: the result has
    the same bounds as the Cody-Waite path. For small ``x`` every term is small
    and finite (no inf/NaN reaches the select that drops this path).
    """
    s = t = None
    for j, chunk in enumerate(_TWO_OVER_PI_26):
        p = k64.mul(x, k64.c(chunk * 2.0 ** (-26 * (j + 1))))
        if j < 4:
            p = _mod4(k64, p, huge=j < 3)
        if s is None:
            s = p
            continue
        s, e = _two_sum(k64, s, p)
        t = e if t is None else k64.add(t, e)
    kf = k64.round_int(s)
    f = k64.add(k64.sub(s, kf), t)
    r = k64.mul(f, k64.c(math.pi / 2))
    q = k64.iand(k64.to_int(kf), k64.ci(3))
    return q, r


def _pi_fixed(bits: int) -> int:
    """pi * 2^bits to within a few thousand units, in integers (Machin's formula:
    pi = 16 atan(1/5) - 4 atan(1/239), each series term truncated once)."""

    def atan_inverse(n: int) -> int:  # atan(1/n) * 2^bits
        total, term, k, sign = 0, (1 << bits) // n, 1, 1
        while term:
            total += sign * (term // k)
            term //= n * n
            k, sign = k + 2, -sign
        return total

    return 16 * atan_inverse(5) - 4 * atan_inverse(239)


def _two_over_pi_48() -> tuple[int, ...]:
    """2/pi in 48-bit chunks, a zero first: ``2/pi = sum(d[k] * 2^(-48k))`` (1200 bits),
    from pi in 1500-bit integers: the truncation (under 2^-1480 relative) cannot move
    the 1200th bit unless 2/pi's next 280 bits were all ones or all zeros
    (``test_math_accuracy`` compares the table with mpmath's)."""
    guard = 1500
    bits = (1 << (1201 + guard)) // _pi_fixed(guard)
    return (0,) + tuple((bits >> (1200 - 48 * (k + 1))) & ((1 << 48) - 1) for k in range(25))


_TWO_OVER_PI_48 = _two_over_pi_48()
#: f64 arguments from it on (in magnitude) take :func:`_reduce_pio2_large_f64`: below,
#: ``k * _PIO2_1`` (33 bits) is exact.
_LARGE_F64 = 2.0**20
#: The coarse part's granularity in :func:`_reduce_pio2_large_f64`.
_COARSE = 2.0**-46


def _reduce_pio2_large_f64(k64: Kit, x: Value) -> tuple[Value, Value]:
    """Payne-Hanek ``(q, r)`` (i64 ``k mod 4``, f64 ``r``) for finite f64 ``|x| >= 2^6``.

    ``x = M 2^(E-52)`` (``M`` a 53-bit integer); ``2/pi = sum d_k 2^(-48k)``
    (:data:`_TWO_OVER_PI_48`, 48-bit chunks, ``d_0 = 0``). The terms of ``x 2/pi``
    with ``k < j0``, ``j0 = floor((E - 6)/48)``, are multiples of 4 and are dropped:
    ``x' = x 2^(-48 j0)`` (exact) times the chunks ``d_(j0+i) 2^(-48i)``, ``i < 5``
    (selected by comparing ``|x|`` with ``2^(6+48j)``; no table in memory). Each
    product is split exactly by an fma, ``hi + lo = M d 2^(g - 48i)`` with
    ``g = E - 52 - 48 j0`` in [-46, 2): every part is a multiple of ``2^(g - 48i)``.
    The parts are sorted into a coarse sum (multiples of 2^-46, kept mod 4 in
    [-2, 2]: exact) and a fine one (each under 2^-40, added as a double-double):
    chunk 0's parts are coarse; chunk 1's and chunk 2's ``hi`` (and chunk 1's ``lo``,
    under 4) are reduced mod 4 and split by the 1.5*2^6 shifter into a multiple of
    2^-46 and a remainder under 2^-47; the rest is fine. Chunk 4 is a plain product
    (under 2^-89, rounded by 2^-142) and what chunk 5 on would add is under 2^-137.
    So ``f = x 2/pi - k`` (``k`` the coarse sum rounded) has an absolute error of
    about 2^-130: relative 2^-68 at the closest an f64 comes to a multiple of pi/2
    (``6381956970095103 * 2^797``, about 2^-61 away: Muller, *Elementary
    Functions*). ``r = f pi/2`` in a double-double, rounded once. Any ``x`` gives
    finite values (dropped by the caller's select below 2^20).
    """
    a = k64.abs(x)
    steps = [k64.ge(a, k64.c(2.0 ** (6 + 48 * j))) for j in range(1, 22)]
    d = _TWO_OVER_PI_48

    def by_j0(values: list[float]) -> Value:
        v = k64.c(values[0])
        for j, crossed in enumerate(steps, start=1):
            v = k64.select(crossed, k64.c(values[j]), v)
        return v

    xs = k64.mul(x, by_j0([2.0 ** (-48 * j) for j in range(22)]))
    parts = []
    for i in range(5):
        chunk = by_j0([float(d[j + i]) * 2.0 ** (-48 * i) for j in range(22)])
        hi = k64.mul(xs, chunk)
        parts.append((hi, k64.fma(xs, chunk, k64.neg(hi))))
    shifter = k64.c(1.5 * 2.0**52 * _COARSE)

    def split(v: Value) -> tuple[Value, Value]:  # v in [-2, 2]: (multiple of 2^-46, rest)
        c = k64.sub(k64.add(v, shifter), shifter)
        return c, k64.sub(v, c)

    coarse = [_mod4(k64, parts[0][0], huge=True), _mod4(k64, parts[0][1], huge=False)]
    fine = []
    for v, huge in ((parts[1][0], True), (parts[1][1], False), (parts[2][0], False)):
        c, rest = split(_mod4(k64, v, huge=huge))
        coarse.append(c)
        fine.append(rest)
    fine += [parts[2][1], parts[3][0], parts[3][1], parts[4][0]]
    acc = coarse[0]
    for c in coarse[1:]:
        acc = _mod4(k64, k64.add(acc, c), huge=False)
    fine_hi, fine_lo = fine[0], k64.c(0.0)
    for v in fine[1:]:
        fine_hi, e = _two_sum(k64, fine_hi, v)
        fine_lo = k64.add(fine_lo, e)
    kf = k64.round_int(acc)
    f_hi, e = _two_sum(k64, k64.sub(acc, kf), fine_hi)
    f_lo = k64.add(e, fine_lo)
    r_hi = k64.mul(f_hi, k64.c(_PIO2_HI))
    r_lo = k64.fma(f_hi, k64.c(_PIO2_HI), k64.neg(r_hi))
    r_lo = k64.add(r_lo, k64.fma(f_hi, k64.c(_PIO2_LO), k64.mul(f_lo, k64.c(_PIO2_HI))))
    q = k64.iand(k64.to_int(kf), k64.ci(3))
    return q, k64.add(r_hi, r_lo)


def _any(cond: Value) -> Value:
    """One i1, true where any lane of ``cond`` is (``cond`` itself for scalars)."""
    if not isinstance(cond.type, ir.VectorType):
        return cond
    return vector.ReductionOp(ir.IntegerType.get_signless(1), vector.CombiningKind.OR, cond).result


def _reduce_pio2(kit: Kit, x: Value) -> tuple[Value, Value]:
    """``(q, r)``: ``x = k*pi/2 + r`` with ``q = k mod 4`` (int of kit's width), ``r`` in kit."""
    x_in = x
    if kit.is_f64:
        k64 = kit
    else:
        ftype = (
            ir.VectorType.get(list(ir.VectorType(kit.ftype).shape), ir.F64Type.get())
            if isinstance(kit.ftype, ir.VectorType)
            else ir.F64Type.get()
        )
        k64 = Kit(ftype)
        x = arith.ExtFOp(ftype, x).result
    kf = k64.round_int(k64.mul(x, k64.c(2.0 / math.pi)))
    r = k64.sub(x, k64.mul(kf, k64.c(_PIO2_1)))
    r = k64.sub(r, k64.mul(kf, k64.c(_PIO2_2)))
    r = k64.sub(r, k64.mul(kf, k64.c(_PIO2_3)))
    r = k64.sub(r, k64.mul(kf, k64.c(_PIO2_3T)))
    # k mod 4 from the low bits of k (k is an exact integer here; huge k is even-ish noise).
    small = k64.lt(k64.abs(kf), k64.c(2.0**52))
    q = k64.iand(k64.to_int(k64.select(small, kf, k64.c(0.0))), k64.ci(3))
    if not kit.is_f64:
        q_big, r_big = _reduce_pio2_large_f32(k64, x)
        large = kit.ge(kit.abs(x_in), kit.c(_LARGE_F32))
        r = arith.TruncFOp(kit.ftype, r).result
        q = arith.TruncIOp(kit.itype, q).result
        r = kit.select(large, arith.TruncFOp(kit.ftype, r_big).result, r)
        q = kit.select(large, arith.TruncIOp(kit.itype, q_big).result, q)
    else:  # Payne-Hanek behind a branch taken only where some lane needs it
        large = kit.ge(kit.abs(x), kit.c(_LARGE_F64))
        branch = scf.IfOp(_any(large), [q.type, r.type], has_else=True)
        with ir.InsertionPoint(branch.then_block):
            q_big, r_big = _reduce_pio2_large_f64(kit, x)
            scf.YieldOp([kit.select(large, q_big, q), kit.select(large, r_big, r)])
        with ir.InsertionPoint(branch.else_block):
            scf.YieldOp([q, r])
        q, r = branch.results
    return q, r


#: f32 arguments below it (in magnitude) take the f32 Cody-Waite reduction of
#: :func:`_reduce_pio2_f32`, the rest Payne-Hanek (in f64).
_CODY_WAITE_F32 = 2.0**17
#: pi/2 in three f32 parts: the first truncated (so ``x - k*C1`` is exact for every
#: ``|x| < 2^17``), the others rounded; their sum is within 1.1e-23 of pi/2.
_PIO2_F32 = (float.fromhex("0x1.921fb4p+0"), float.fromhex("0x1.4442d2p-24"),
             float.fromhex("-0x1.ee59dap-50"))  # fmt: skip
#: 1.5 * 2^23: ``fma(x, 2/pi, shifter)`` is ``x 2/pi`` rounded to an integer ``k``, with
#: ``k mod 4`` in its two lowest bits (``|x 2/pi| < 2^22``).
_SHIFTER_F32 = 12582912.0


def _reduce_pio2_f32(kit: Kit, x: Value) -> tuple[Value, Value]:
    """f32 ``(q, r)`` for finite f32 ``x``: ``x = k*pi/2 + r``, ``q = k mod 4``.

    Below 2^17 in f32, as libdevice's ``sinf``/``cosf`` reduce: ``k`` and ``k mod 4``
    from one fma with the shifter, ``r`` by three fmas with pi/2 in three f32 parts
    (:data:`_PIO2_F32`: ``x - k*C1`` is exact, each later fma rounds once, so ``r``
    is within about an ulp of its own even where it cancels). From 2^17 on, the f64
    Payne-Hanek reduction (:func:`_reduce_pio2_large_f32`). ``|r|`` may exceed pi/4 by
    2^17 * 2^-24 (``k`` from an f32 2/pi): the polynomials hold up to 0.794."""
    j = kit.fma(x, kit.c(2.0 / math.pi), kit.c(_SHIFTER_F32))
    kf = kit.sub(j, kit.c(_SHIFTER_F32))
    q = kit.iand(kit.bits(j), kit.ci(3))
    r = x
    for part in _PIO2_F32:
        r = kit.fma(kf, kit.c(-part), r)
    element = ir.F64Type.get()
    ftype = (
        ir.VectorType.get(list(ir.VectorType(kit.ftype).shape), element)
        if isinstance(kit.ftype, ir.VectorType)
        else element
    )
    q_big, r_big = _reduce_pio2_large_f32(Kit(ftype), arith.ExtFOp(ftype, x).result)
    large = kit.ge(kit.abs(x), kit.c(_CODY_WAITE_F32))
    r = kit.select(large, arith.TruncFOp(kit.ftype, r_big).result, r)
    return kit.select(large, arith.TruncIOp(kit.itype, q_big).result, q), r


def _sin_cos_poly_f32(kit: Kit, r: Value) -> tuple[Value, Value]:
    """f32 ``(sin r, cos r)``, ``|r| <= 0.794``: ``r + r z S(z)`` and ``1 + z C(z)``
    with near-minimax ``S`` and ``C`` of degree 3 (math_coefficients.SIN_S, COS_C;
    under 0.01 ulp)."""
    z = kit.mul(r, r)
    s = kit.fma(kit.mul(r, z), kit.poly(z, coeffs.SIN_S_F32), r)
    c = kit.fma(z, kit.poly(z, coeffs.COS_C_F32), kit.c(1.0))
    return s, c


def _sin_cos_poly(kit: Kit, r: Value) -> tuple[Value, Value]:
    w = kit.fmt.width
    z = kit.mul(r, r)
    sin_tail = _series(kit, 1, _SIN_TAYLOR[w])[1:]  # -1/3!, 1/5!, ...
    s = kit.add(r, kit.mul(kit.mul(r, z), kit.poly(z, sin_tail)))
    cos_tail = _series(kit, 2, _COS_TAYLOR[w])  # -1/2!, 1/4!, ...
    c = kit.add(kit.c(1.0), kit.mul(z, kit.poly(z, cos_tail)))
    return s, c


def _trig(kit: Kit, x: Value, which: str) -> Value:
    finite = kit.lt(kit.abs(x), kit.inf())
    xs = kit.select(finite, x, kit.c(0.0))
    if not kit.is_f64 and which != "tan":
        q, r = _reduce_pio2_f32(kit, xs)
        s, c = _sin_cos_poly_f32(kit, r)
    else:
        q, r = _reduce_pio2(kit, xs)
        s, c = _sin_cos_poly(kit, r)
    q_odd = kit.icmp("ne", kit.iand(q, kit.ci(1)), kit.ci(0))
    q_high = kit.icmp("ne", kit.iand(q, kit.ci(2)), kit.ci(0))
    if which == "sin":  # q: s, c, -s, -c
        v = kit.select(q_odd, c, s)
        result = kit.select(q_high, kit.neg(v), v)
    elif which == "cos":  # q: c, -s, -c, s
        v = kit.select(q_odd, s, c)
        flip = arith.XOrIOp(q_odd, q_high).result
        result = kit.select(flip, kit.neg(v), v)
    else:  # tan: s/c for even q, -c/s for odd q
        result = kit.select(q_odd, kit.neg(kit.div(c, s)), kit.div(s, c))
    if which != "cos":
        result = kit.keep_zero(x, result)
    return kit.pass_nan(x, kit.nan_if(kit.bnot(finite), result))


def sin(kit: Kit, x: Value) -> Value:
    return _trig(kit, x, "sin")


def cos(kit: Kit, x: Value) -> Value:
    return _trig(kit, x, "cos")


def tan(kit: Kit, x: Value) -> Value:
    return _trig(kit, x, "tan")


def _q_poly(kit: Kit, table_f32: tuple[float, ...], table_f64: tuple[float, ...], t: Value):
    z = kit.mul(t, t)
    q = kit.poly(z, table_f64 if kit.is_f64 else table_f32)
    return kit.mul(kit.mul(t, z), q)  # t*z*Q(z): add t to it


def atan_nonneg(kit: Kit, a: Value) -> Value:
    """atan for ``a >= 0`` (inf included)."""
    one, two = kit.c(1.0), kit.c(2.0)
    bounds = [kit.lt(a, kit.c(v)) for v in (7 / 16, 11 / 16, 19 / 16, 39 / 16)]
    # Candidates per interval (numerator, denominator), chosen from the largest down.
    num = kit.neg(one)
    den = a
    num = kit.select(bounds[3], kit.sub(a, kit.c(1.5)), num)
    den = kit.select(bounds[3], kit.add(one, kit.mul(kit.c(1.5), a)), den)
    num = kit.select(bounds[2], kit.sub(a, one), num)
    den = kit.select(bounds[2], kit.add(a, one), den)
    num = kit.select(bounds[1], kit.sub(kit.mul(two, a), one), num)
    den = kit.select(bounds[1], kit.add(two, a), den)
    num = kit.select(bounds[0], a, num)
    den = kit.select(bounds[0], one, den)
    t = kit.div(num, den)
    base_hi, base_lo = kit.c(0.0), kit.c(0.0)
    for i in (3, 2, 1, 0):
        hi, lo = _split(kit, _ATAN_HI[i], _ATAN_LO[i])
        if i == 3:
            base_hi, base_lo = kit.c(hi), kit.c(lo)
        else:
            base_hi = kit.select(bounds[i + 1], kit.c(hi), base_hi)
            base_lo = kit.select(bounds[i + 1], kit.c(lo), base_lo)
    base_hi = kit.select(bounds[0], kit.c(0.0), base_hi)
    base_lo = kit.select(bounds[0], kit.c(0.0), base_lo)
    tail = _q_poly(kit, coeffs.ATAN_Q_F32, coeffs.ATAN_Q_F64, t)
    return kit.add(base_hi, kit.add(base_lo, kit.add(t, tail)))


def _atan01_q(kit: Kit, t: Value) -> Value:
    """f32 ``Q(t^2)`` with ``atan(t) = t + t^3 Q(t^2)`` on [0, 1]: a near-minimax
    polynomial of degree 8 (math_coefficients.ATAN_Q01, 0.18 ulp), atan2's, which needs
    neither the interval reductions of :func:`atan_nonneg` nor their division."""
    return kit.poly(kit.mul(t, t), coeffs.ATAN_Q01_F32)


def atan(kit: Kit, x: Value) -> Value:
    r = atan_nonneg(kit, kit.abs(x))
    return kit.pass_nan(x, kit.keep_zero(x, kit.copysign(r, x)))


def atan2(kit: Kit, y: Value, x: Value) -> Value:
    ax, ay = kit.abs(x), kit.abs(y)
    num = kit.min(ax, ay)
    den = kit.max(ax, ay)
    both_zero = kit.eq(den, kit.c(0.0))
    both_inf = kit.eq(num, kit.inf())
    ratio = kit.div(num, kit.select(both_zero, kit.c(1.0), den))
    ratio = kit.select(both_inf, kit.c(1.0), ratio)
    if kit.is_f64:
        t = atan_nonneg(kit, ratio)
    else:  # the ratio is in [0, 1]: one polynomial there, as libdevice's atan2f, no division
        t = kit.fma(kit.mul(ratio, kit.mul(ratio, ratio)), _atan01_q(kit, ratio), ratio)
    pio2_hi, pio2_lo = _split(kit, _PIO2_HI, _PIO2_LO)
    pi_hi, pi_lo = _split(kit, _PI_HI, _PI_LO)
    t = kit.select(kit.gt(ay, ax), kit.add(kit.sub(kit.c(pio2_hi), t), kit.c(pio2_lo)), t)
    t = kit.select(kit.signbit_set(x), kit.add(kit.sub(kit.c(pi_hi), t), kit.c(pi_lo)), t)
    result = kit.copysign(t, y)
    return kit.nan_if(kit.bor(kit.isnan(x), kit.isnan(y)), result)


def _asin_small(kit: Kit, t: Value) -> Value:
    """asin(t) for ``|t| <= 0.5``: ``t + t*z*Q(z)``."""
    return kit.add(t, _q_poly(kit, coeffs.ASIN_Q_F32, coeffs.ASIN_Q_F64, t))


def asin(kit: Kit, x: Value) -> Value:
    a = kit.abs(x)
    z = kit.mul(kit.sub(kit.c(1.0), a), kit.c(0.5))
    s = kit.sqrt(z)
    pio2_hi, pio2_lo = _split(kit, _PIO2_HI, _PIO2_LO)
    p = _asin_small(kit, s)
    big = kit.sub(kit.c(pio2_hi), kit.sub(kit.add(p, p), kit.c(pio2_lo)))
    r = kit.select(kit.le(a, kit.c(0.5)), _asin_small(kit, a), big)
    r = kit.nan_if(kit.gt(a, kit.c(1.0)), r)
    return kit.pass_nan(x, kit.keep_zero(x, kit.copysign(r, x)))


def acos(kit: Kit, x: Value) -> Value:
    a = kit.abs(x)
    pio2_hi, pio2_lo = _split(kit, _PIO2_HI, _PIO2_LO)
    pi_hi, pi_lo = _split(kit, _PI_HI, _PI_LO)
    # |x| <= 0.5: pi/2 - asin(x)
    mid_tail = _q_poly(kit, coeffs.ASIN_Q_F32, coeffs.ASIN_Q_F64, x)
    mid = kit.sub(kit.c(pio2_hi), kit.add(x, kit.sub(mid_tail, kit.c(pio2_lo))))
    # |x| > 0.5: s = sqrt((1-|x|)/2); x > 0: 2*asin(s); x < 0: pi - 2*asin(s)
    z = kit.mul(kit.sub(kit.c(1.0), a), kit.c(0.5))
    s = kit.sqrt(z)
    p = _asin_small(kit, s)
    two_p = kit.add(p, p)
    negative = kit.sub(kit.c(pi_hi), kit.sub(two_p, kit.c(pi_lo)))
    r = kit.select(kit.lt(x, kit.c(0.0)), negative, two_p)
    r = kit.select(kit.le(a, kit.c(0.5)), mid, r)
    r = kit.nan_if(kit.gt(a, kit.c(1.0)), r)
    return kit.pass_nan(x, r)
