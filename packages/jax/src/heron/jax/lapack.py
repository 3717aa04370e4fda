"""jax's CPU LAPACK custom calls that heron runs on the host: the Cholesky factorisation.

heron lowers a JAX function with jax *on the CPU* (:mod:`heron.jax.lowering`), so
``jnp.linalg.cholesky`` arrives as jax's CPU custom call ``lapack_?potrf_ffi``
rather than XLA:GPU's cuSOLVER call. This module provides those targets in the
``heron.custom_calls`` group (a host implementation: ``docs/custom-calls.md``),
with LAPACK's contract:

- the operand is a batch of square matrices ``[..., n, n]`` (``num_batch_dims``
  of them in front), and ``backend_config`` says ``uplo``: 76 (``'L'``) factors
  ``A = L L^H`` into the lower triangle, 85 (``'U'``) ``A = U^H U`` into the upper;
  the other strict triangle keeps the operand's values, as ``?potrf`` leaves it;
- the results are the factor and ``info`` (s32 per matrix): 0, or ``k`` when the
  leading minor of order ``k`` is not positive definite (the factorisation stops
  there, as LAPACK's does; jax then replaces that matrix's result by NaNs).

The factorisation is the column-by-column algorithm of LAPACK's unblocked
``?potf2`` in the operand's own precision (f32 for ``spotrf``), so it agrees with
LAPACK to rounding, not bit for bit (LAPACK blocks large matrices).
"""

from __future__ import annotations

import re

import numpy as np

from heron.hlo.custom_calls.call import CustomCall
from heron.hlo.custom_calls.hookspecs import CustomCallSpec, hookimpl

__all__ = ["POTRF_TARGETS", "cholesky_factor", "potrf"]

#: jax's CPU targets, by LAPACK's type letter: s, d (real), c, z (complex).
POTRF_TARGETS = {
    "lapack_spotrf_ffi": np.float32,
    "lapack_dpotrf_ffi": np.float64,
    "lapack_cpotrf_ffi": np.complex64,
    "lapack_zpotrf_ffi": np.complex128,
}

_UPLO = re.compile(r"\buplo\s*=\s*(\d+)")
_LOWER, _UPPER = ord("L"), ord("U")


def cholesky_factor(matrix: np.ndarray, lower: bool) -> tuple[np.ndarray, int]:
    """One matrix's factor (the other strict triangle as given) and LAPACK's ``info``."""
    a = np.array(matrix, copy=True)
    work = a if lower else a.conj().T  # the upper factor is the lower one of A^H
    n = work.shape[0]
    for j in range(n):
        row = work[j, :j]
        diagonal = work[j, j].real - np.real(np.vdot(row, row))
        if not diagonal > 0:  # not positive, or NaN: LAPACK stops at this minor
            work[j, j] = diagonal
            result = work if lower else work.conj().T
            return result, j + 1
        root = np.sqrt(diagonal)
        work[j, j] = root
        below = work[j + 1 :, j] - work[j + 1 :, :j] @ row.conj()
        work[j + 1 :, j] = below / root
    result = work if lower else work.conj().T
    return result, 0


def potrf(operands: tuple[np.ndarray, ...], call: CustomCall) -> list[np.ndarray]:
    """``lapack_?potrf_ffi``'s host implementation (the module docstring)."""
    (a,) = operands
    expected = POTRF_TARGETS[call.target]
    if a.dtype != expected:
        raise call.error(f"takes {np.dtype(expected).name} matrices, not {a.dtype}")
    if a.ndim < 2 or a.shape[-1] != a.shape[-2]:
        raise call.error(f"takes square matrices, not {list(a.shape)}")
    found = _UPLO.search(call.backend_config)
    uplo = int(found.group(1)) if found else _LOWER
    if uplo not in (_LOWER, _UPPER):
        raise call.error(f"uplo {uplo} is neither 'L' (76) nor 'U' (85)")
    batch = a.shape[:-2]
    factors = np.empty_like(a)
    infos = np.zeros(batch, np.int32)
    for index in np.ndindex(*batch):
        factors[index], infos[index] = cholesky_factor(a[index], uplo == _LOWER)
    return [factors, infos]


@hookimpl
def heron_custom_call_specs() -> list[CustomCallSpec]:
    return [
        CustomCallSpec(
            target=target,
            host=potrf,
            description="jax's CPU LAPACK Cholesky (jnp.linalg.cholesky), on the host",
        )
        for target in POTRF_TARGETS
    ]
