"""How a program's outputs are compared with XLA:CPU's: one rule for every test that does it.

tests/test_programs.py (the evaluator and the interpreter), tests/test_executables.py
(the thunk executor), tests/test_jax_bridge.py (heron.jax) and programs/artefacts.py
(artefacts under heron-run) all compare a program's outputs with XLA:CPU's through
:func:`assert_close`.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np

__all__ = ["FLOAT_ULPS", "assert_close"]

#: The float bound, in units of the output type's machine epsilon, on
#: max|heron - XLA:CPU| / max|XLA:CPU| over an output's finite elements. f32:
#: numpy's transcendentals are not XLA:CPU's polynomials (a few ulps each, 3.3
#: eps seen after an erf GELU and two dots) and XLA:CPU sums reductions and dots
#: in its own order (2.2 eps seen in an MLP's gradients): 16 leaves room for
#: both, relative to the output's largest magnitude because a cancelling sum
#: has no relative bound of its own. bf16 and f16 programs compute in f32 (or
#: round each op's result): one rounding of the result may differ, 0.54 eps seen.
FLOAT_ULPS = {
    np.dtype(np.float32): 16,
    np.dtype(np.float64): 16,
    np.dtype(ml_dtypes.bfloat16): 2,
    np.dtype(np.float16): 2,
}


def assert_close(got: np.ndarray, expected: np.ndarray, label: str) -> None:
    """Equal dtype and shape; bitwise for integers and pred, FLOAT_ULPS for floats."""
    assert got.dtype == expected.dtype and got.shape == expected.shape, (
        f"{label}: {got.dtype}{list(got.shape)} against XLA:CPU's"
        f" {expected.dtype}{list(expected.shape)}"
    )
    if expected.dtype not in FLOAT_ULPS:
        assert np.array_equal(got, expected), f"{label}: differs from XLA:CPU (bitwise)"
        return
    g, e = got.astype(np.float64), expected.astype(np.float64)
    finite = np.isfinite(e)
    special_equal = (g[~finite] == e[~finite]) | (np.isnan(g[~finite]) & np.isnan(e[~finite]))
    assert special_equal.all(), f"{label}: an inf or NaN of XLA:CPU's is not heron's"
    if not finite.any():
        return
    eps = float(ml_dtypes.finfo(expected.dtype).eps)
    scale = float(np.max(np.abs(e[finite])))
    error = float(np.max(np.abs(g[finite] - e[finite])))
    bound = FLOAT_ULPS[expected.dtype] * eps * scale
    assert error <= bound, (
        f"{label}: max error {error:.3g} > {FLOAT_ULPS[expected.dtype]} eps x max|XLA:CPU|"
        f" = {bound:.3g} ({error / (eps * scale) if scale else float('inf'):.1f} eps)"
    )
