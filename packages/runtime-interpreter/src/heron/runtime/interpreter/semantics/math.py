"""The ``math`` dialect.

Exact (bit for bit what the GPU computes, round to nearest even, denormals
kept): ``isnan``, ``isinf``, ``isfinite``, ``absf``, ``copysign`` (sign-bit
operations, NaN payloads kept), ``fma`` (one rounding, see
:func:`fused_multiply_add`), ``sqrt`` (correctly rounded; f16/bf16 through
f32, which is exact for sqrt), ``floor``, ``ceil``, ``trunc``, ``round``
(half away from zero), ``roundeven``, ``ctlz``, ``cttz``, ``ctpop``,
``absi`` (wrapping: ``absi(INT_MIN) == INT_MIN``), ``ipowi`` (wrapping;
negative exponents give 0 except for bases 1 and -1).

Not bit-exact with a GPU: the elementary functions (exp, log, sin, ...,
``powf``, ``fpowi``, ``rsqrt``) are numpy's (libm) in float64, rounded once
to the result type: libm-accurate, typically within an ulp of the GPU's
libdevice or of heron's own expansions (``expand-math`` replaces them all
before a kernel reaches the interpreter, so they only run in hand-written
kernels).
"""

from __future__ import annotations

import functools
import math as pymath
from collections.abc import Callable
from fractions import Fraction

import ml_dtypes
import numpy as np

from heron.runtime.interpreter.engine import Frame, semantics
from heron.runtime.interpreter.program import Op
from heron.runtime.interpreter.semantics.arith import (
    element_type,
    float_to_float,
    propagate_nan,
    round_to_odd,
    sign_bit,
    signed,
    two_sum,
    unsigned,
    with_sign,
    wrap,
)
from heron.runtime.interpreter.types import FloatType

__all__ = ["count_leading_zeros", "fused_multiply_add", "population_count"]


# -- fma ------------------------------------------------------------------------------------


def _split(value: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Veltkamp's split: ``hi + lo == value`` with 26-bit halves (products of halves exact)."""
    scaled = value * 134217729.0  # 2**27 + 1
    hi = scaled - (scaled - value)
    return hi, value - hi


def _two_product(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Dekker's TwoProduct: ``p = fl(a * b)`` and the exact error ``a * b - p``."""
    p = a * b
    a_hi, a_lo = _split(a)
    b_hi, b_lo = _split(b)
    error = ((a_hi * b_hi - p) + a_hi * b_lo + a_lo * b_hi) + a_lo * b_lo
    return p, error


def _exact_fma_f64(a: float, b: float, c: float) -> float:
    """One lane's ``a * b + c`` rounded once, in exact rational arithmetic (finite inputs)."""
    exact = Fraction(a) * Fraction(b) + Fraction(c)
    if exact == 0:
        product_negative = (pymath.copysign(1.0, a) * pymath.copysign(1.0, b)) < 0
        both_negative = product_negative and pymath.copysign(1.0, c) < 0
        return -0.0 if both_negative and a * b == 0 else 0.0
    sign = 1.0 if exact > 0 else -1.0
    try:
        result = float(exact)  # correctly rounded (CPython divides big integers exactly)
    except OverflowError:
        return sign * pymath.inf
    return result if result != 0 else pymath.copysign(0.0, sign)


def _fma_f64(a: np.ndarray, b: np.ndarray, c: np.ndarray) -> np.ndarray:
    """Correctly rounded f64 fma (Boldo and Melquiond's emulation with rounding to odd).

    ``uh + ul == a * b`` (TwoProduct), ``th + tl == c + uh`` (TwoSum),
    ``v = RO(tl + ul)``, result ``RN(th + v)``. Its preconditions (no
    overflow, no underflow of the error terms) hold when every exponent is
    moderate; other finite lanes (rare) are computed exactly with fractions,
    and zero or non-finite operands take ``a * b + c``, which is then exact.
    """
    a, b, c = np.broadcast_arrays(*(np.asarray(x, np.float64) for x in (a, b, c)))
    naive = a * b + c
    finite = np.isfinite(a) & np.isfinite(b) & np.isfinite(c)
    nonzero = (a != 0) & (b != 0)
    ea, eb, ec = (np.frexp(x)[1] for x in (a, b, c))
    moderate = (
        (np.abs(ea) < 960) & (np.abs(eb) < 960) & (np.abs(ec) < 900) & (np.abs(ea + eb) < 900)
    )
    fast = finite & nonzero & (c != 0) & moderate
    uh, ul = _two_product(np.where(fast, a, 1.0), np.where(fast, b, 1.0))
    th, tl = two_sum(np.where(fast, c, 1.0), uh)
    v = round_to_odd(*two_sum(tl, ul))
    result = np.where(fast, th + v, naive)
    # c == 0 with a nonzero product: the rounded product (keeps the sign of a tiny one).
    result = np.where(finite & nonzero & (c == 0), a * b, result)
    slow = np.flatnonzero((finite & nonzero & (c != 0) & ~moderate).reshape(-1))
    if slow.size:
        flat = result.reshape(-1).copy()
        fa, fb, fc = a.reshape(-1), b.reshape(-1), c.reshape(-1)
        for k in slow:  # only lanes with extreme exponents
            flat[k] = _exact_fma_f64(float(fa[k]), float(fb[k]), float(fc[k]))
        result = flat.reshape(result.shape)
    return result


@functools.cache
def _narrow_midpoint_bits(dtype: np.dtype) -> tuple[np.uint64, np.uint64, float]:
    """For f32/f16/bf16: the float64 significand bits below the format's last bit (a mask),
    their pattern at a midpoint between two of its values, and its smallest normal."""
    info = ml_dtypes.finfo(dtype)
    below = 52 - int(info.nmant)  # f64 significand bits the format does not hold
    mask = np.uint64((1 << below) - 1)
    return mask, np.uint64(1 << (below - 1)), float(info.smallest_normal)


def _fma_narrow(a: np.ndarray, b: np.ndarray, c: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """f32/f16/bf16 fma: the product is exact in f64; the sum is rounded to odd, then once.

    The sum rounded to nearest in f64 is already right where it is not a midpoint of the
    narrow format: the midpoints are float64 values, so rounding to f64 cannot carry the
    exact sum across one, and the narrow rounding of both agrees. So lanes whose f64 sum is
    a normal number of the format and no midpoint (all of them, nearly always) take the
    sum as it is, and only a launch with another lane pays for TwoSum and rounding to odd
    (an FMA-heavy kernel spent two fifths of its run in them)."""
    a, b, c = (np.asarray(x).astype(np.float64) for x in (a, b, c))
    product = a * b
    total = product + c
    mask, midpoint, smallest_normal = _narrow_midpoint_bits(dtype)
    magnitude = np.abs(total)
    plain = (magnitude >= smallest_normal) & (magnitude < np.inf)
    plain &= (total.view(np.uint64) & mask) != midpoint
    if plain.all():
        return float_to_float(total, dtype)
    total, error = two_sum(product, c)
    odd = round_to_odd(total, error)
    if np.isfinite(total).all() and (c != 0).all():  # every operand finite, no zero addend
        return float_to_float(odd, dtype)  # what the lines below give then, sooner
    result = np.where(c == 0, product, odd)  # keeps the sign of zeros like a * b + c
    result = np.where((c == 0) & (product == 0), product + c, result)
    finite = np.isfinite(a) & np.isfinite(b) & np.isfinite(c)
    return float_to_float(np.where(finite, result, product + c), dtype)


def fused_multiply_add(a, b, c, dtype) -> np.ndarray:
    """``a * b + c`` with a single rounding to ``dtype``; a NaN operand is returned quieted."""
    dtype = np.dtype(dtype)
    a, b, c = (np.asarray(x, dtype) for x in (a, b, c))
    if dtype == np.float64:
        result = _fma_f64(a, b, c)
    else:
        result = _fma_narrow(a, b, c, dtype)
    return propagate_nan(np.asarray(result, dtype), a, b, c)


@semantics("math.fma")
def fma(frame: Frame, op: Op) -> None:
    a, b, c = frame.operands(op)
    frame.set_result(op, fused_multiply_add(a, b, c, element_type(op.result_types[0]).dtype))


# -- exact float ops ------------------------------------------------------------------------


def _float_dtype(frame: Frame, op: Op) -> np.dtype:
    t = element_type(op.operand_types[0])
    if not isinstance(t, FloatType):
        raise frame.unsupported(op, f"a float op on {op.operand_types[0]}")
    return t.dtype


def _classifier(test: Callable[[np.ndarray], np.ndarray]):
    def handler(frame: Frame, op: Op) -> None:
        _float_dtype(frame, op)
        value = np.asarray(frame.operand(op, 0))
        frame.set_result(op, test(value.astype(np.float32) if value.itemsize == 2 else value))

    return handler


semantics("math.isnan")(_classifier(np.isnan))
semantics("math.isinf")(_classifier(np.isinf))
semantics("math.isfinite")(_classifier(np.isfinite))


def absolute(value: np.ndarray) -> np.ndarray:
    value = np.asarray(value)
    return with_sign(value, np.zeros(value.shape, np.bool_))


def copy_sign(magnitude: np.ndarray, sign: np.ndarray) -> np.ndarray:
    magnitude, sign = np.broadcast_arrays(np.asarray(magnitude), np.asarray(sign))
    return with_sign(magnitude, sign_bit(sign))


@semantics("math.absf")
def absf(frame: Frame, op: Op) -> None:
    frame.set_result(op, absolute(frame.operand(op, 0)))


@semantics("math.copysign")
def copysign(frame: Frame, op: Op) -> None:
    frame.set_result(op, copy_sign(*frame.operands(op)))


def round_half_away(x: np.ndarray) -> np.ndarray:
    """C's round: to the nearest integer, halves away from zero (zero's sign kept)."""
    t = np.trunc(x)
    away = np.abs(x - t) >= 0.5
    return np.where(away, t + np.copysign(1.0, x).astype(x.dtype), t)


#: Unary float functions that are exact: applied in f32 for f16/bf16 (exact too).
EXACT_UNARY: dict[str, Callable[[np.ndarray], np.ndarray]] = {
    "sqrt": np.sqrt,
    "floor": np.floor,
    "ceil": np.ceil,
    "trunc": np.trunc,
    "roundeven": np.rint,
    "round": round_half_away,
}

#: Unary float functions computed with numpy in float64 (libm accuracy, not bit-exact).
LIBM_UNARY: dict[str, Callable[[np.ndarray], np.ndarray]] = {
    "exp": np.exp,
    "exp2": np.exp2,
    "expm1": np.expm1,
    "log": np.log,
    "log2": np.log2,
    "log10": np.log10,
    "log1p": np.log1p,
    "sin": np.sin,
    "cos": np.cos,
    "tan": np.tan,
    "asin": np.arcsin,
    "acos": np.arccos,
    "atan": np.arctan,
    "sinh": np.sinh,
    "cosh": np.cosh,
    "tanh": np.tanh,
    "asinh": np.arcsinh,
    "acosh": np.arccosh,
    "atanh": np.arctanh,
    "cbrt": np.cbrt,
    "rsqrt": lambda x: 1.0 / np.sqrt(x),
    "erf": lambda x: _erf(x, complement=False),
    "erfc": lambda x: _erf(x, complement=True),
}


def _erf(x: np.ndarray, complement: bool) -> np.ndarray:
    """erf/erfc in float64, always libm's through Python.

    Not scipy's, even where it happens to be installed: the interpreter's
    results must not depend on what else is in the environment.
    """
    function = pymath.erfc if complement else pymath.erf
    return np.frompyfunc(function, 1, 1)(x).astype(np.float64)


def apply_unary(name: str, value: np.ndarray) -> np.ndarray:
    """Float function ``name`` (a key of EXACT_UNARY or LIBM_UNARY) rounded to the value's type."""
    value = np.asarray(value)
    dtype = value.dtype
    if name in EXACT_UNARY:
        work = np.float32 if dtype.itemsize == 2 else dtype
        result = EXACT_UNARY[name](value.astype(work))
    else:
        result = LIBM_UNARY[name](value.astype(np.float64))
    return propagate_nan(float_to_float(np.asarray(result), dtype), value)


def _unary(name: str):
    def handler(frame: Frame, op: Op) -> None:
        _float_dtype(frame, op)
        frame.set_result(op, apply_unary(name, frame.operand(op, 0)))

    return handler


for _name in (*EXACT_UNARY, *LIBM_UNARY):
    semantics(f"math.{_name}")(_unary(_name))


def _libm_binary(function: Callable):
    def handler(frame: Frame, op: Op) -> None:
        dtype = _float_dtype(frame, op)
        a, b = (np.asarray(x) for x in frame.operands(op))
        result = function(a.astype(np.float64), b.astype(np.float64))
        frame.set_result(op, propagate_nan(float_to_float(result, dtype), a, b))

    return handler


semantics("math.atan2")(_libm_binary(np.arctan2))
semantics("math.powf")(_libm_binary(np.power))


@semantics("math.fpowi")
def fpowi(frame: Frame, op: Op) -> None:
    dtype = _float_dtype(frame, op)
    base, exponent = frame.operands(op)
    exponent = signed(exponent, element_type(op.operand_types[1])).astype(np.float64)
    base = np.asarray(base)
    result = np.power(base.astype(np.float64), exponent)
    frame.set_result(op, propagate_nan(float_to_float(result, dtype), base))


# -- integers ------------------------------------------------------------------------------


def count_leading_zeros(value, t) -> np.ndarray:
    """Leading zeros of each ``t.width``-bit value (``width`` for 0), as int64."""
    u = unsigned(value, t).astype(np.uint64)
    count = np.zeros(u.shape, np.int64)
    for step in (32, 16, 8, 4, 2, 1):
        empty = (u >> np.uint64(64 - step)) == 0
        count = count + np.where(empty, step, 0)
        u = np.where(empty, u << np.uint64(step), u)
    count = count + ((u >> np.uint64(63)) == 0)
    return count - (64 - t.width)


def count_trailing_zeros(value, t) -> np.ndarray:
    """Trailing zeros of each ``t.width``-bit value (``width`` for 0), as int64."""
    u = unsigned(value, t).astype(np.uint64)
    lowest = u & (~u + np.uint64(1))
    from heron.runtime.interpreter.types import IntegerType

    zeros = 63 - count_leading_zeros(lowest, IntegerType(64))
    return np.where(u == 0, t.width, zeros)


def population_count(value, t) -> np.ndarray:
    """Set bits of each ``t.width``-bit value, as int64."""
    u = unsigned(value, t).astype(np.uint64)
    if hasattr(np, "bitwise_count"):
        return np.bitwise_count(u).astype(np.int64)
    u = u - ((u >> np.uint64(1)) & np.uint64(0x5555555555555555))
    u = (u & np.uint64(0x3333333333333333)) + ((u >> np.uint64(2)) & np.uint64(0x3333333333333333))
    u = (u + (u >> np.uint64(4))) & np.uint64(0x0F0F0F0F0F0F0F0F)
    return ((u * np.uint64(0x0101010101010101)) >> np.uint64(56)).astype(np.int64)


def _int_unary(function: Callable):
    def handler(frame: Frame, op: Op) -> None:
        t = element_type(op.operand_types[0])
        frame.set_result(op, wrap(function(frame.operand(op, 0), t), t))

    return handler


semantics("math.ctlz")(_int_unary(count_leading_zeros))
semantics("math.cttz")(_int_unary(count_trailing_zeros))
semantics("math.ctpop")(_int_unary(population_count))
semantics("math.absi")(_int_unary(lambda v, t: np.abs(signed(v, t))))


def integer_power(base, exponent, t) -> np.ndarray:
    """``base ** exponent`` wrapping to ``t``; negative exponents: 0 except for bases +-1."""
    base = signed(base, t).astype(np.int64)
    exponent = signed(exponent, t).astype(np.int64)
    base, exponent = np.broadcast_arrays(base, exponent)
    result = np.ones(base.shape, np.uint64)
    square = base.astype(np.uint64)
    remaining = np.where(exponent < 0, 0, exponent).astype(np.uint64)
    for _ in range(t.width):
        odd = (remaining & np.uint64(1)) == 1
        result = np.where(odd, result * square, result)
        square = square * square
        remaining = remaining >> np.uint64(1)
    negative = exponent < 0
    odd_exponent = (exponent & 1) == 1
    special = np.where(base == 1, 1, np.where(odd_exponent, -1, 1))
    result = np.where(negative, np.where(np.abs(base) == 1, special, 0), result.view(np.int64))
    return wrap(result, t)


@semantics("math.ipowi")
def ipowi(frame: Frame, op: Op) -> None:
    t = element_type(op.operand_types[0])
    frame.set_result(op, integer_power(*frame.operands(op), t))
