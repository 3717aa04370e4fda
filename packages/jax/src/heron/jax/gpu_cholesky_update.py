"""jax's CUDA rank-1 Cholesky update (``cu_cholesky_update_ffi``), on the host.

``jax.lax.linalg.cholesky_update(r, w)`` lowered for CUDA is
``cu_cholesky_update_ffi(r, w) -> (r', w')`` (jaxlib's own CUDA kernel; no
attributes; ROCm and the CPU get jax's own loop instead): for an upper
triangular ``R`` with ``A = R^T R`` and a vector ``w``, ``R'`` with
``A + w w^T = R'^T R'``. f32 and f64 only, one matrix (jax does not batch
the primitive), ``r`` row-major (``{1,0}``: logical order here as always).
Both results alias the operands; jax keeps only ``r'``, ``w'`` is what the
rotations leave of ``w`` (zeros up to rounding).

The algorithm is jax's reference one (``_cholesky_update_jax_fn``, what the
other platforms run), in the operand's precision: for each row ``k`` a Givens
rotation ``(c, s)`` from ``(R[k, k], w[k])`` (scaled by the larger magnitude
to avoid overflow; ``(1, 0)`` where ``w[k]`` is 0) turns ``w[k]`` to zero and
rotates row ``k`` of ``R`` with ``w``.
"""

from __future__ import annotations

import numpy as np

from heron.hlo.custom_calls.call import CustomCall
from heron.hlo.custom_calls.hookspecs import CustomCallSpec
from heron.jax.scipy_lapack import check_dtype

__all__ = ["cholesky_update", "cholesky_update_specs", "rank_one_update"]


def rank_one_update(r: np.ndarray, w: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(R', w')``: ``R`` updated by ``w w^T`` with one Givens rotation a row."""
    r, z = np.array(r, copy=True), np.array(w, copy=True)
    for k in range(len(z)):
        x, y = r[k, k], z[k]
        if y == 0:
            c, s = r.dtype.type(1), r.dtype.type(0)
        else:
            scale = max(abs(x), abs(y))
            x, y = x / scale, y / scale
            root = r.dtype.type(1) / np.sqrt(x * x + y * y)
            c, s = x * root, -y * root
        row = r[k, :].copy()
        r[k, :] = c * row - s * z
        z = c * z + s * row
    return r, z


def cholesky_update(operands: tuple[np.ndarray, ...], call: CustomCall) -> list[np.ndarray]:
    """``cu_cholesky_update_ffi`` (the module docstring)."""
    r, w = operands
    check_dtype(call, r, "matrices", real_only=True)
    n = r.shape[-1] if r.ndim == 2 else -1
    if r.shape != (n, n) or w.dtype != r.dtype or w.shape != (n,):
        raise call.error(
            f"r {r.dtype}{list(r.shape)} and w {w.dtype}{list(w.shape)} are not one square"
            " matrix and a vector of its size, of one type (jax does not batch the update)"
        )
    return list(rank_one_update(r, w))


def cholesky_update_specs() -> list[CustomCallSpec]:
    """``cu_cholesky_update_ffi`` (CUDA only: jax lowers the update so for CUDA alone)."""
    return [
        CustomCallSpec(
            target="cu_cholesky_update_ffi",
            host=cholesky_update,
            description="jax's CUDA rank-1 Cholesky update (jax.lax.linalg.cholesky_update),"
            " on the host",
        )
    ]
