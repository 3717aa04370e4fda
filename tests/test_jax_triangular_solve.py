"""HLO's ``triangular-solve`` in heron's reference evaluator, against XLA:CPU through jax.

jax lowers ``jax.lax.linalg.triangular_solve`` (``solve_triangular``, ``cho_solve``,
``jnp.linalg.solve`` and ``inv`` on a GPU) to HLO's ``triangular-solve`` for CUDA
and to LAPACK's ``trsm`` custom call for the CPU. The evaluator computes the op
with the same substitution the ``__heron$triangular_solve`` host call runs (one
meaning, :func:`heron.hlo.custom_calls.triangular_solve.triangular_solve`), so
``heron run --check`` can check a GPU module that holds one (the model corpus's
Gaussian-process step). Each case is lowered for CUDA, evaluated, and compared
with ``jax.jit`` on the CPU: left and right, lower and upper, each transpose
(the adjoint for complex), a unit diagonal, a batch; f32, f64 and c64.

Tolerance: both sides substitute in the operand precision, in different orders;
with a well-conditioned ``a`` (diagonal dominant) the difference is a few ulps of
the result's magnitude, allowed ``8 * n`` eps.
"""

from __future__ import annotations

import jax
import numpy as np
import pytest
from heron_test_support.jax_config import jax_x64

from heron.hlo.evaluator import evaluate_module, flatten_literal
from heron.jax.lowering import lower

N, COLUMNS = 5, 3


@pytest.fixture(autouse=True)
def x64():
    """f64 needs jax_enable_x64 (a global other suites set either way)."""
    with jax_x64(True):
        yield


def _operands(dtype, batch: tuple[int, ...], left: bool, seed: int):
    rng = np.random.default_rng(seed)

    def draw(*shape):
        values = rng.standard_normal(shape)
        if np.dtype(dtype).kind == "c":
            values = values + 1j * rng.standard_normal(shape)
        return values.astype(dtype)

    a = draw(*batch, N, N) + (2 * N * np.eye(N)).astype(dtype)
    b = draw(*batch, N, COLUMNS) if left else draw(*batch, COLUMNS, N)
    return a, b


CASES = [
    # dtype, left_side, lower, transpose_a, conjugate_a, unit_diagonal, batch
    ("float32", True, True, False, False, False, ()),
    ("float32", True, False, True, False, False, ()),
    ("float32", False, True, False, False, True, ()),
    ("float32", False, False, True, False, False, (2,)),
    ("float64", True, True, True, False, True, (2, 2)),
    ("complex64", True, True, True, True, False, ()),
    ("complex64", False, False, False, False, False, (3,)),
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: "-".join(str(v) for v in c))
def test_the_evaluator_solves_as_xla_cpu_does(case):
    dtype, left, lower_triangle, transpose, conjugate, unit, batch = case

    def solve(a, b):
        return jax.lax.linalg.triangular_solve(
            a,
            b,
            left_side=left,
            lower=lower_triangle,
            transpose_a=transpose,
            conjugate_a=conjugate,
            unit_diagonal=unit,
        )

    a, b = _operands(dtype, batch, left, seed=len(batch) + 3 * left + 5 * lower_triangle)
    lowered = lower(solve, a, b, platform="cuda")
    assert "triangular-solve(" in lowered.hlo_text
    (got,) = [np.asarray(v) for v in flatten_literal(evaluate_module(lowered.module, [a, b]))]
    want = np.asarray(jax.jit(solve)(a, b))
    assert got.dtype == want.dtype and got.shape == want.shape
    eps = np.finfo(want.dtype).eps
    scale = float(np.max(np.abs(want)))
    error = float(np.max(np.abs(got - want))) / scale / eps
    assert error <= 8 * N, f"{error:.1f} eps"
