"""jax's CPU LAPACK custom calls that heron runs on the host: Cholesky, LU, triangular solve.

heron lowers a JAX function with jax *on the CPU* (:mod:`heron.jax.lowering`), so
``jnp.linalg.cholesky``, ``solve``, ``inv``, ``det`` and
``jax.scipy.linalg.solve_triangular`` arrive as jax's CPU custom calls
``lapack_?potrf_ffi``, ``lapack_?getrf_ffi`` and ``lapack_?trsm_ffi`` rather than
XLA:GPU's cuSOLVER and cuBLAS calls. This module provides those targets in the
``heron.custom_calls`` group (host implementations: ``docs/custom-calls.md``), with
LAPACK's contracts; every operand is a batch of matrices (``num_batch_dims`` in
front) and every flag a character code in ``backend_config``:

- ``potrf(a)`` -> (factor, info): ``uplo`` 76 (``'L'``) factors ``A = L L^H`` into
  the lower triangle, 85 (``'U'``) ``A = U^H U`` into the upper; the other strict
  triangle keeps the operand's values; ``info`` is 0, or ``k`` when the leading
  minor of order ``k`` is not positive definite (jax then makes that matrix NaN);
- ``getrf(a)`` -> (lu, pivots, info): ``P A = L U`` with partial pivoting (the
  first entry of largest magnitude, ``|re| + |im|`` for complex, as ``i?amax``),
  L's unit diagonal implied; ``pivots`` 1-based, row ``j`` swapped with row
  ``pivots[j]``; ``info`` the first zero pivot (1-based) or 0;
- ``trsm(a, b)`` -> x: ``op(A) X = B`` (``side`` 76 ``'L'``) or ``X op(A) = B``
  (82 ``'R'``), ``op`` from ``trans_x`` (78 ``'N'``, 84 ``'T'``, 67 ``'C'``), only
  A's ``uplo`` triangle read, its diagonal taken as ones when ``diag`` is 85
  (``'U'``).

Each matrix is the routine jax's own kernel calls, through scipy (LAPACK's
``?potrf`` and ``?getrf``, BLAS's ``?trsm``: jaxlib takes its CPU LAPACK and BLAS
from ``scipy.linalg.cython_lapack`` and ``cython_blas``, :mod:`heron.jax.scipy_lapack`)
in the operand's own type, so the results equal jax's on the CPU bit for bit: a
singular matrix's LU has the exact zero pivot LAPACK's FMA leaves (``slogdet`` is
``-inf``, as on XLA:CPU), where the unblocked numpy loops heron ran before left
``1e-16`` (``tests/test_jax_lapack.py``).

This module's hook also registers :mod:`heron.jax.cpu_lapack`'s targets (eigh, SVD,
QR, eig, Schur, Hessenberg, tridiagonal solve: scipy's LAPACK) and
:mod:`heron.jax.cpu_sparse`'s (BCSR's sparse-dense product): one entry point for
jax's CPU calls.
"""

from __future__ import annotations

import re

import numpy as np

from heron.hlo.custom_calls.call import CustomCall
from heron.hlo.custom_calls.hookspecs import CustomCallSpec, hookimpl
from heron.jax.cpu_lapack import cpu_lapack_specs
from heron.jax.cpu_sparse import cpu_sparse_specs
from heron.jax.scipy_lapack import LETTERS, check_matrices, routine

__all__ = [
    "POTRF_TARGETS",
    "check_matrices",
    "cholesky_factor",
    "getrf",
    "lu_factor",
    "potrf",
    "triangular_solve",
    "trsm",
]

#: LAPACK's type letters: s, d (real), c, z (complex).
_TYPES = {"s": np.float32, "d": np.float64, "c": np.complex64, "z": np.complex128}
#: jax's CPU targets, by routine.
POTRF_TARGETS = {f"lapack_{t}potrf_ffi": dtype for t, dtype in _TYPES.items()}
GETRF_TARGETS = {f"lapack_{t}getrf_ffi": dtype for t, dtype in _TYPES.items()}
TRSM_TARGETS = {f"lapack_{t}trsm_ffi": dtype for t, dtype in _TYPES.items()}

_LOWER, _UPPER = ord("L"), ord("U")


def _flag(call: CustomCall, name: str, default: str, allowed: str) -> str:
    """A character flag of ``backend_config`` (``uplo = 76 : ui8``), checked."""
    found = re.search(rf"\b{name}\s*=\s*(\d+)", call.backend_config)
    value = chr(int(found.group(1))) if found else default
    if value not in allowed:
        choices = ", ".join(f"'{c}' ({ord(c)})" for c in allowed)
        raise call.error(f"{name} {ord(value)} is none of {choices}")
    return value


def cholesky_factor(matrix: np.ndarray, lower: bool) -> tuple[np.ndarray, int]:
    """One matrix's ``?potrf``: the factor (the other strict triangle as given) and
    LAPACK's ``info`` (0, or the order of the first leading minor that is not
    positive definite)."""
    if matrix.size == 0:
        return np.array(matrix, copy=True), 0
    factor, info = routine("potrf", matrix.dtype)(matrix, lower=int(lower), clean=0)
    return factor, _info(info, "potrf")


def potrf(operands: tuple[np.ndarray, ...], call: CustomCall) -> list[np.ndarray]:
    """``lapack_?potrf_ffi``'s host implementation (the module docstring)."""
    (a,) = operands
    check_matrices(call, a, POTRF_TARGETS[call.target], square=True)
    lower = _flag(call, "uplo", "L", "LU") == "L"
    batch = a.shape[:-2]
    factors = np.empty_like(a)
    infos = np.zeros(batch, np.int32)
    for index in np.ndindex(*batch):
        factors[index], infos[index] = cholesky_factor(a[index], lower)
    return [factors, infos]


def lu_factor(matrix: np.ndarray) -> tuple[np.ndarray, np.ndarray, int]:
    """One matrix's ``?getrf``: the packed L\\U, the 1-based pivots and ``info`` (the
    first zero pivot, 1-based, or 0)."""
    if matrix.size == 0:
        return np.array(matrix, copy=True), np.zeros(min(matrix.shape), np.int32), 0
    lu, pivots, info = routine("getrf", matrix.dtype)(matrix)
    return lu, pivots.astype(np.int32) + 1, _info(info, "getrf")  # scipy's are 0-based


def _info(info: int, name: str) -> int:
    """LAPACK's ``info`` of a call that must not be malformed (a negative one names
    the argument LAPACK refused: a bug here, not a user's input)."""
    if info < 0:
        raise AssertionError(f"?{name} refused its argument {-info}")
    return int(info)


def getrf(operands: tuple[np.ndarray, ...], call: CustomCall) -> list[np.ndarray]:
    """``lapack_?getrf_ffi``'s host implementation (the module docstring)."""
    (a,) = operands
    check_matrices(call, a, GETRF_TARGETS[call.target], square=False)
    batch = a.shape[:-2]
    factors = np.empty_like(a)
    pivots = np.zeros((*batch, min(a.shape[-2:])), np.int32)
    infos = np.zeros(batch, np.int32)
    for index in np.ndindex(*batch):
        factors[index], pivots[index], infos[index] = lu_factor(a[index])
    return [factors, pivots, infos]


def trsm(operands: tuple[np.ndarray, ...], call: CustomCall) -> np.ndarray:
    """``lapack_?trsm_ffi``'s host implementation (the module docstring)."""
    a, b = operands
    dtype = TRSM_TARGETS[call.target]
    check_matrices(call, a, dtype, square=True)
    check_matrices(call, b, dtype, square=False)
    left = _flag(call, "side", "L", "LR") == "L"
    size = b.shape[-2] if left else b.shape[-1]
    if a.shape[-1] != size or a.shape[:-2] != b.shape[:-2]:
        raise call.error(f"a {list(a.shape)} does not fit b {list(b.shape)}")
    flags = {
        "lower": _flag(call, "uplo", "L", "LU") == "L",
        "trans": _flag(call, "trans_x", "N", "NTC"),
        "unit": _flag(call, "diag", "N", "NU") == "U",
    }
    x = np.empty_like(b)
    for index in np.ndindex(*b.shape[:-2]):
        x[index] = triangular_solve(a[index], b[index], left=left, **flags)
    return x


def triangular_solve(
    a: np.ndarray, b: np.ndarray, *, left: bool, lower: bool, trans: str, unit: bool
) -> np.ndarray:
    """One BLAS ``?trsm`` with alpha 1 (jax's kernel's call): X with ``op(A) X = B``
    (``left``) or ``X op(A) = B``; only A's ``lower`` (or upper) triangle is read."""
    if b.size == 0:
        return np.array(b, copy=True)
    from scipy.linalg import blas  # as scipy_lapack.routine: imported when a call runs

    solve = getattr(blas, LETTERS[b.dtype] + "trsm")
    with np.errstate(divide="ignore", invalid="ignore"):  # singular: inf and NaN, as trsm
        return solve(
            b.dtype.type(1),
            a,
            b,
            side=0 if left else 1,
            lower=int(lower),
            trans_a="NTC".index(trans),
            diag=int(unit),
        )


@hookimpl
def heron_custom_call_specs() -> list[CustomCallSpec]:
    routines = (
        (POTRF_TARGETS, potrf, "Cholesky (jnp.linalg.cholesky)"),
        (GETRF_TARGETS, getrf, "LU with partial pivoting (jnp.linalg.solve, inv, det)"),
        (TRSM_TARGETS, trsm, "triangular solve (jax.scipy.linalg.solve_triangular)"),
    )
    return [
        *(
            CustomCallSpec(
                target=target, host=host, description=f"jax's CPU LAPACK {what}, on the host"
            )
            for targets, host, what in routines
            for target in targets
        ),
        *cpu_lapack_specs(),
        *cpu_sparse_specs(),
    ]
