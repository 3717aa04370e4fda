"""Complex elementwise ops as XLA's kernels define them, for the reference evaluator.

The evaluator computes a complex op in complex128 and rounds it once: more
accurate than any kernel, which is what the check wants of a reference. But at
infinities, NaNs and overflow, XLA's kernels do not give C99's special values
(numpy's): they evaluate formulas in the component type (f32 for c64), those of
MLIR's ``convert-complex-to-standard``, which XLA:GPU runs (``complex-range=
improved``) and heron's emitters run too. ``tanh(0 + inf i)`` is ``nan + nan i``
there, C99's ``0 + nan i``; ``expm1(inf + 0i)`` is ``inf + 0i`` where numpy's
``e^x sin y`` gives NaN; ``sin(0 + 100i)`` in c64 is ``nan + inf i``, since
``cosh 100`` overflows f32 before it is multiplied by ``sin 0``.

So each op here has both: the accurate value (complex128) and XLA's formula,
evaluated in the component type with numpy's correctly rounded functions; a
part comes from the formula wherever the formula's part is not finite or the
accurate one is NaN, and from the accurate value everywhere else (an accurate
infinity the formula misses is kept: ``log1p(-1 + 0i)`` is ``-inf``). heron run --check then
compares kernels with the accurate value on finite results and with XLA's
semantics on the rest (a sweep of jax.numpy on complex64 found the checker
calling correct kernels wrong at such values).

Known differences from XLA:CPU, whose emitter has formulas of its own: its
``log`` does not overflow where ``|z|`` does (``log(3e38 + 3e38 i)`` is 88.9 +
0.79i there, ``inf + 0.79i`` on XLA:GPU and here), its ``sqrt`` ignores the
sign of a zero imaginary part, and it contracts ``ac - bd`` into a fused
multiply-add.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

__all__ = [
    "complex_divide",
    "complex_sign",
    "exp",
    "expm1",
    "log",
    "log1p",
    "logistic",
    "multiply",
    "rsqrt",
    "sin",
    "cos",
    "tan",
    "tanh",
]

Parts = tuple[np.ndarray, np.ndarray]


def _combine(accurate: np.ndarray, formula: Parts, dtype: np.dtype) -> np.ndarray:
    """``accurate`` (complex128) rounded to ``dtype``, each part replaced by the
    formula's where that is not finite (an overflow or NaN of XLA's formula) or the
    accurate one is NaN (numpy's own formula failed: ``logistic(-inf + i)`` is 0).
    An infinity of the accurate value stays: the formula loses it at
    ``log1p(-1 + 0i)``, which is ``-inf`` (XLA:CPU's too), not the formula's 0."""
    with np.errstate(all="ignore"):
        rounded = accurate.astype(dtype)
    result = np.empty(rounded.shape, dtype)
    for which, part in zip(("real", "imag"), formula):
        mine = getattr(rounded, which)
        theirs = np.broadcast_to(np.asarray(part, mine.dtype), mine.shape)
        use_formula = ~np.isfinite(theirs) | np.isnan(mine)
        setattr(result, which, np.where(use_formula, theirs, mine))
    return result


def _by_formula(
    accurate: Callable[[np.ndarray], np.ndarray], formula: Callable[..., Parts]
) -> Callable[[np.ndarray], np.ndarray]:
    """A unary op: ``accurate`` on complex128, ``formula`` on the component type's
    parts (``x``, ``y``), combined by :func:`_combine`."""

    def op(z: np.ndarray) -> np.ndarray:
        with np.errstate(all="ignore"):
            wide = accurate(z.astype(np.complex128))
            parts = formula(z.real, z.imag)
        return _combine(wide, parts, z.dtype)

    op.__doc__ = formula.__doc__
    return op


def _complex(re: np.ndarray, im: np.ndarray, dtype) -> np.ndarray:
    result = np.empty(np.broadcast(re, im).shape, dtype)
    result.real, result.imag = re, im
    return result


# -- the formulas, part by part in the component type --------------------------------


def _exp(x, y) -> Parts:
    """e^x (cos y + i sin y); where e^x overflows, e^(x/2) twice (``e^100 cos 3`` is
    finite in no f32 step, ``(e^50 cos 3) e^50`` may be); an imaginary 0 where y is 0."""
    whole, half = np.exp(x), np.exp(x * 0.5)
    cos, sin = np.cos(y), np.sin(y)
    overflows = whole == np.inf
    re = np.where(overflows, half * cos * half, whole * cos)
    im = np.where(overflows, half * sin * half, whole * sin)
    return re, np.where(y == 0, 0, im).astype(x.dtype)


def _modulus(x, y):
    """|x + iy| as max(|x|, |y|) sqrt(1 + (min/max)^2); min where that is NaN
    (``|inf + inf i|``): it overflows with max, not with the squares."""
    big, small = np.maximum(np.abs(x), np.abs(y)), np.minimum(np.abs(x), np.abs(y))
    ratio = small / big
    modulus = big * np.sqrt(ratio * ratio + 1)
    return np.where(np.isnan(modulus), small, modulus)


def _log(x, y) -> Parts:
    """log |z| + i atan2(y, x), |z| as :func:`_modulus` computes it."""
    return np.log(_modulus(x, y)), np.arctan2(y, x)


def _log1p(x, y) -> Parts:
    """log |1 + z| + i atan2(y, 1 + x), the modulus's log as log1p of what is left of
    the larger part plus half a log1p of the ratio squared."""
    one = x.dtype.type(1)
    shifted = x + one
    big = np.maximum(np.abs(shifted), np.abs(y))
    small = np.minimum(np.abs(shifted), np.abs(y))
    rest = np.where(shifted > np.abs(y), x, big - one)
    ratio = small / big
    re = x.dtype.type(0.5) * np.log1p(ratio * ratio) + np.log1p(rest)
    return np.where(np.isnan(re), small, re), np.arctan2(y, shifted)


def _sin(x, y) -> Parts:
    """sin x cosh y + i cos x sinh y, cosh and sinh from e^y and 1/e^y (``0 * inf`` is
    NaN where cosh y overflows and sin x is 0)."""
    half = x.dtype.type(0.5)
    up, down = half * np.exp(y), half / np.exp(y)
    return (up + down) * np.sin(x), (up - down) * np.cos(x)


def _cos(x, y) -> Parts:
    """cos x cosh y - i sin x sinh y, as :func:`_sin` builds cosh and sinh."""
    half = x.dtype.type(0.5)
    up, down = half * np.exp(y), half / np.exp(y)
    return (down + up) * np.cos(x), (down - up) * np.sin(x)


def _tanh(x, y) -> Parts:
    """(sinh 2x + i sin 2y) / (cosh 2x + cos 2y) written with expm1; ±1 where the
    denominator overflows, NaN where the imaginary numerator is NaN and x finite, an
    imaginary 0 where y is 0 or x infinite and that numerator NaN."""
    four = x.dtype.type(4)
    up, down = np.expm1(2 * x), np.expm1(-2 * x)
    cos, sin = np.cos(y), np.sin(y)
    denominator = up + down + four * cos * cos
    imaginary = four * cos * sin
    re = np.where(up + down == np.inf, np.copysign(x.dtype.type(1), x), (up - down) / denominator)
    im = imaginary / denominator
    undefined = np.isnan(imaginary)
    re = np.where(undefined & ~np.isinf(x), np.nan, re)
    im = np.where((y == 0) | (np.isinf(x) & undefined), 0, im)
    return re.astype(x.dtype), im.astype(x.dtype)


def _tan(x, y) -> Parts:
    """-i tanh(i z): tanh of ``-y + x i``, turned back."""
    re, im = _tanh(-y, x)
    return im, -re


def _expm1(x, y) -> Parts:
    """expm1(x) cos y + (cos y - 1) + i e^x sin y; an imaginary 0 where y is 0."""
    grown = np.expm1(x)
    half = np.sin(y * x.dtype.type(0.5))
    cos_minus_one = -2 * half * half
    re = grown * (cos_minus_one + 1) + cos_minus_one
    im = np.where(y == 0, 0, (grown + 1) * np.sin(y))
    return re.astype(x.dtype), im.astype(x.dtype)


def _rsqrt(x, y) -> Parts:
    """|z|^(-1/2) (cos + i sin)(-arg(z) / 2); a signed 0 where x is infinite (or y
    infinite beside a NaN), ``inf + nan i`` at 0."""
    big, small = np.maximum(np.abs(x), np.abs(y)), np.minimum(np.abs(x), np.abs(y))
    ratio = small / big
    one = x.dtype.type(1)
    modulus = one / np.sqrt(big) * np.sqrt(one / np.sqrt(ratio * ratio + one))
    modulus = np.where(np.isnan(modulus), one / np.sqrt(small), modulus)
    angle = x.dtype.type(-0.5) * np.arctan2(y, x)
    re, im = modulus * np.cos(angle), modulus * np.sin(angle)
    to_zero = (np.isinf(y) & np.isnan(x)) | np.isinf(x)
    zero = x.dtype.type(0)
    re = np.where(to_zero, np.copysign(zero, x), re)
    im = np.where(to_zero, -np.copysign(zero, y), im)
    at_zero = (x == 0) & (y == 0)
    return np.where(at_zero, np.inf, re).astype(x.dtype), np.where(at_zero, np.nan, im).astype(
        x.dtype
    )


exp = _by_formula(np.exp, _exp)
log = _by_formula(np.log, _log)
log1p = _by_formula(np.log1p, _log1p)
sin = _by_formula(np.sin, _sin)
cos = _by_formula(np.cos, _cos)
tanh = _by_formula(np.tanh, _tanh)
tan = _by_formula(np.tan, _tan)
expm1 = _by_formula(np.expm1, _expm1)
rsqrt = _by_formula(lambda z: 1.0 / np.sqrt(z), _rsqrt)


def logistic(z: np.ndarray) -> np.ndarray:
    """1 / (1 + e^-z), the exponential and the division as XLA's kernels compute them
    where a part is not finite (``logistic(-inf + i)`` is 0: e^inf overflows)."""
    with np.errstate(all="ignore"):
        wide = z.astype(np.complex128)
        accurate = 1.0 / (1.0 + np.exp(-wide))
        one = np.ones(z.shape, z.dtype)
        formula = complex_divide(one, one + exp(-z))
    return _combine(accurate, (formula.real, formula.imag), z.dtype)


def multiply(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """The complex128 product rounded once, but where a part of the formula in the
    component type, ``(ac - bd) + (ad + bc) i``, is not finite, that part: a c64
    product whose partial products overflow f32 is NaN there (``inf - inf``) where
    complex128 has room. Each partial product is rounded on its own (no fused
    multiply-add: a kernel that contracts one, as XLA:CPU does, can end at an
    infinity instead)."""
    a, b, c, d = x.real, x.imag, y.real, y.imag
    with np.errstate(all="ignore"):
        parts = (a * c - b * d, a * d + b * c)
        accurate = x.astype(np.complex128) * y.astype(np.complex128)
    return _combine(accurate, parts, x.dtype)


def complex_sign(z: np.ndarray) -> np.ndarray:
    """XLA's complex sign: ``z`` itself where ``|z|`` is 0 (a signed zero keeps its
    signs), else each part divided by ``|z|`` (``0 + inf i`` gives ``0 + nan i``), all in
    the component type (``|3e38 + 3e38 i|`` overflows a c64's f32 parts: the sign is 0)."""
    magnitude = np.abs(z)
    safe = np.where(magnitude == 0, 1, magnitude)
    parts = np.empty_like(z)  # part by part: 1j * nan would make the real part NaN too
    with np.errstate(invalid="ignore"):
        parts.real, parts.imag = z.real / safe, z.imag / safe
    return np.where(magnitude == 0, z, parts)


def complex_divide(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """XLA's complex division in the component type: Smith's (scale by the divisor's
    larger part), then, where both parts came out NaN, C99's recovery of infinities
    and zeros (Annex G.5.1): a number over a signed zero is an infinity of the zero's
    sign, an infinity over a finite number infinite, a finite number over an infinity
    zero. numpy ignores the zero's sign (``1 / (-0 - 0i)`` is ``+inf``), where XLA's
    kernels give ``-inf``."""
    a, b, c, d = x.real, x.imag, y.real, y.imag
    one = np.ones((), a.dtype)
    with np.errstate(all="ignore"):
        by_real = np.abs(c) >= np.abs(d)
        ratio = np.where(by_real, d / c, c / d)
        denominator = np.where(by_real, c + ratio * d, d + ratio * c)
        re = np.where(by_real, a + b * ratio, a * ratio + b) / denominator
        im = np.where(by_real, b - a * ratio, b * ratio - a) / denominator
        lost = np.isnan(re) & np.isnan(im)
        over_zero = lost & (c == 0) & (d == 0) & ~(np.isnan(a) & np.isnan(b))
        infinity = np.copysign(np.inf, c)
        re = np.where(over_zero, infinity * a, re)
        im = np.where(over_zero, infinity * b, im)
        finite_divisor = np.isfinite(c) & np.isfinite(d)
        infinite = lost & ~over_zero & (np.isinf(a) | np.isinf(b)) & finite_divisor
        a1, b1 = _unit_if_infinite(a), _unit_if_infinite(b)
        re = np.where(infinite, np.inf * one * (a1 * c + b1 * d), re)
        im = np.where(infinite, np.inf * one * (b1 * c - a1 * d), im)
        finite_dividend = np.isfinite(a) & np.isfinite(b)
        vanishing = lost & (np.isinf(c) | np.isinf(d)) & finite_dividend
        c1, d1 = _unit_if_infinite(c), _unit_if_infinite(d)
        re = np.where(vanishing, 0 * one * (a * c1 + b * d1), re)
        im = np.where(vanishing, 0 * one * (b * c1 - a * d1), im)
    return _complex(re, im, x.dtype)


def _unit_if_infinite(v):
    """A signed 1 where ``v`` is infinite, a signed 0 elsewhere (the sign ``v``'s)."""
    return np.copysign(np.where(np.isinf(v), 1, 0).astype(v.dtype), v)
