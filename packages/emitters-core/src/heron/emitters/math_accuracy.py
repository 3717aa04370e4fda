"""How far expand-math's approximations may be from the exact result: the one table.

``expand-math`` (:mod:`heron.emitters.pipeline.expand_math`) rewrites every
math op into arithmetic heron owns; its docstring's accuracy table says, per
op, the largest error of an f32 and an f64 result on the GPU in ulps of the
result type, as ``tests/test_math_accuracy.py`` measures it. This module is
that table as data, with no dependency, so that the check's tolerance
(``heron.harness.tolerance``) reads the bounds from here instead of keeping a
copy, and a test holds the docstring to it.

Where XLA:GPU computes a function with an approximation of its own rather than
libdevice's, heron computes XLA's, to the operation, and its bound here is that
approximation's, measured: heron adopts XLA's own numerics, so that a kernel
costs what XLA's costs (issue 29, ``benchmarks/sass_vs_xla.py``) and its
results are XLA:GPU's. Such ops are :data:`XLA_FORMS`, each with where its
bound comes from.
"""

from __future__ import annotations

__all__ = [
    "ACCURACY",
    "APPROXIMATE_DIVISION",
    "APPROXIMATE_EXP2",
    "DIVISION_ULPS",
    "FAST_MATH",
    "XLA_FORMS",
]

#: math op -> (max ulps of an f32 result, of an f64 result) on the GPU.
ACCURACY: dict[str, tuple[int, int]] = {
    "exp": (3, 2),
    "exp2": (3, 2),
    "expm1": (2, 2),
    "log": (1, 2),
    "log2": (3, 3),
    "log10": (3, 3),
    "log1p": (2, 3),
    "sin": (2, 2),
    "cos": (2, 2),
    "tan": (4, 3),
    "atan": (1, 1),
    "atan2": (2, 2),
    "asin": (3, 3),
    "acos": (3, 3),
    "sinh": (4, 3),
    "cosh": (4, 3),
    "tanh": (7, 3),
    "asinh": (3, 3),
    "acosh": (3, 3),
    "atanh": (3, 3),
    "erf": (8, 2),
    "erfc": (6, 4),
    "cbrt": (2, 2),
    "powf": (4, 2),
    "rsqrt": (1, 1),
}
#: Ops whose f32 bound includes the 2 ulp of the GPU's approximate ``2^r``
#: (``ex2.approx.f32``), which the interpreter computes correctly rounded.
APPROXIMATE_EXP2 = frozenset({"exp", "exp2", "sinh", "cosh", "erfc"})
#: Math ops whose f32 bound includes a division within 2 ulp (``div.full.f32`` on CUDA,
#: :mod:`heron.emitters.fast_math`), which the interpreter divides correctly rounded.
APPROXIMATE_DIVISION = frozenset({"tanh", "cosh", "erf"})
#: The f32 ops computed as XLA:GPU computes them (its elemental emitter's own
#: approximations), and how their f32 bound was measured.
XLA_FORMS: dict[str, str] = {
    "tanh": (
        "XLA's fast tanh (clamp to +-7.9988117, x P(x^2) / Q(x^2) of degrees 13 and 6, x "
        "below 4e-4), against float64 numpy on every positive f32 from 4e-4 to the clamp "
        "(odd, so the negatives too): 4.83 ulp with the exact quotient of the rounded P and Q "
        "(4.90 correctly rounded), plus div.full's 2 ulp: 6.83, bound 7; 0.73 below 4e-4 "
        "(x itself), 3.79 above the clamp (+-1). XLA:CPU's f32 tanh: about 4.55"
    ),
    "erf": (
        "XLA's f32 erf (clamp to +-3.7439213, x P(x^2) / Q(x^2) of degrees 9 and 12, +-1 "
        "from the clamp on), against float64 scipy on every f32 from 0.5 to the clamp and "
        "every third below: 5.49 ulp with the exact quotient (5.92 correctly rounded), plus "
        "div.full's 2: 7.49, bound 8; under 1 above the clamp"
    ),
}
#: HLO opcode -> max ulps (f32, f64) on the GPU of the fast forms
#: :mod:`heron.emitters.fast_math` gives it, XLA:GPU's: f32 division by ``div.full.f32``
#: (2 ulp from the exact quotient), square root by ``sqrt.approx.f32`` (relative error
#: 2^-23) and reciprocal square root by ``rsqrt.approx.f32`` (2^-22.9); f64 division and
#: square root are correctly rounded, f64 rsqrt is expand-math's (:data:`ACCURACY`).
FAST_MATH: dict[str, tuple[int, int]] = {
    "divide": (2, 0),
    "sqrt": (2, 0),
    "rsqrt": (3, ACCURACY["rsqrt"][1]),
}
#: A quotient heron allows to be approximate (HLO ``divide``, and inside ``logistic``
#: and the ops of :data:`APPROXIMATE_DIVISION`).
DIVISION_ULPS: tuple[int, int] = FAST_MATH["divide"]
