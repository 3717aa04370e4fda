"""jax's GPU tridiagonal solve (cuSPARSE/hipSPARSE ``gtsv2``), on the host.

``jax.lax.linalg.tridiagonal_solve(dl, d, du, b)`` lowered for CUDA or ROCm with
at least 3 rows (fewer are jax's own scan) is
``?sparse_gtsv2_ffi(dl, d, du, b) -> x`` (prefixes ``cu``, ``hip``; no
attributes): ``A X = B`` for the tridiagonal ``A`` with ``A[i, i-1] = dl[i]``,
``A[i, i] = d[i]``, ``A[i, i+1] = du[i]`` (``dl[0]`` and ``du[m-1]`` lie outside
the matrix and are not read), ``dl``, ``d``, ``du`` of shape ``[..., m]`` and
``b`` of ``[..., m, nrhs]``, one type of f32, f64, c64, c128. The result is
``b``'s buffer (``output_to_operand_aliasing``). jax batches a solve whose
diagonals are shared by folding the batch into ``b``'s columns
(``[m, batch * nrhs]``), else with batch dimensions in front of every operand.

Each system is LAPACK's ``?gtsv`` (Gaussian elimination with partial pivoting)
in the operand's type through scipy (:mod:`heron.jax.scipy_lapack`): what
jax's CPU ``lapack_?gtsv_ffi`` computes, so the two agree exactly; cuSPARSE's
``gtsv2`` (also pivoting) agrees to rounding. cuSPARSE reports no status: a
system with an exactly zero pivot is NaN here, as jax on the CPU makes it
(``gtsv``'s ``info``), where cuSPARSE leaves what its division by zero gives.

``?_tridiagonal_solve_perturbed`` (``perturb_singular=True``) is jaxlib's own
kernel, whose perturbation is not LAPACK's: it is not provided, and is refused
by name as any unknown target is.
"""

from __future__ import annotations

import numpy as np

from heron.hlo.custom_calls.call import CustomCall
from heron.hlo.custom_calls.hookspecs import CustomCallSpec
from heron.jax.scipy_lapack import check_dtype, routine

__all__ = ["gtsv2", "solve_tridiagonal", "tridiagonal_solve_specs"]


def solve_tridiagonal(dl: np.ndarray, d: np.ndarray, du: np.ndarray, b: np.ndarray) -> np.ndarray:
    """One system's ``?gtsv`` (``dl[0]``, ``du[-1]`` unread); NaN where a pivot is zero."""
    if b.size == 0:
        return np.array(b, copy=True)
    *_, x, info = routine("gtsv", b.dtype)(dl[1:], d, du[:-1], b)
    if info != 0:  # jax's CPU NaN: a complex one in both parts
        return np.full_like(b, complex(np.nan, np.nan) if b.dtype.kind == "c" else np.nan)
    return x


def gtsv2(operands: tuple[np.ndarray, ...], call: CustomCall) -> np.ndarray:
    """``?sparse_gtsv2_ffi`` (the module docstring)."""
    dl, d, du, b = operands
    check_dtype(call, b, "right-hand sides")
    if b.ndim < 2 or any(x.dtype != b.dtype or x.shape != b.shape[:-1] for x in (dl, d, du)):
        raise call.error(
            f"dl {dl.dtype}{list(dl.shape)}, d {d.dtype}{list(d.shape)}, du"
            f" {du.dtype}{list(du.shape)} are not the [..., m] diagonals of b"
            f" {b.dtype}{list(b.shape)} ([..., m, nrhs], one type)"
        )
    x = np.empty_like(b)
    for index in np.ndindex(*b.shape[:-2]):
        x[index] = solve_tridiagonal(dl[index], d[index], du[index], b[index])
    return x


def tridiagonal_solve_specs(prefixes: tuple[str, ...]) -> list[CustomCallSpec]:
    """``?sparse_gtsv2_ffi`` for jax's prefixes (``cu``: cuSPARSE, ``hip``: hipSPARSE)."""
    library = {"cu": "cuSPARSE", "hip": "hipSPARSE"}
    return [
        CustomCallSpec(
            target=f"{prefix}sparse_gtsv2_ffi",
            host=gtsv2,
            description=f"jax's {library[prefix]} tridiagonal solve"
            " (jax.lax.linalg.tridiagonal_solve), on the host",
        )
        for prefix in prefixes
    ]
