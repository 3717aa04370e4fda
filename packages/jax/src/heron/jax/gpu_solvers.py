"""jax's GPU linear-algebra custom calls (cuSOLVER, hipSOLVER) that heron runs on the host.

``heron.jax.jit(f, backend="cuda")`` lowers ``f`` with jax for the ``cuda``
platform (:func:`heron.jax.lowering.platform_for`: the HLO XLA:GPU would get),
so ``jnp.linalg`` arrives as jax's GPU custom calls rather than the CPU's LAPACK
ones (:mod:`heron.jax.lapack`). This module provides those targets in the
``heron.custom_calls`` group (host implementations: ``docs/custom-calls.md``),
under both of jax's prefixes (``cu`` for CUDA, ``hip`` for ROCm: the same FFI
contracts, ``jax/_src/lax/linalg.py``). Every operand is a batch of matrices
(``num_batch_dims`` in front), of any of f32, f64, c64, c128 (one target per
routine, not per type as LAPACK's); the host ABI hands each operand in logical
index order, so the column-major ``operand_layouts`` jax declares need nothing
here. Flags are the FFI attributes of ``backend_config`` (``{lower = true}``):

- ``?solver_potrf_ffi(a) -> (factor, info)``, ``lower``: Cholesky,
  :func:`heron.jax.lapack.cholesky_factor` (jax makes a matrix whose ``info``
  is not 0 NaN);
- ``?solver_getrf_ffi(a) -> (lu, pivots, info)``: LU with partial pivoting,
  :func:`heron.jax.lapack.lu_factor` (1-based pivots, ``info`` the first zero
  pivot: jax keeps a singular matrix's factors, as on the CPU);
- ``?_lu_pivots_to_permutation(pivots) -> permutation``: the 0-based row swaps
  applied in order to ``0..m-1`` (``m`` the result's last dimension);
- ``?solver_geqrf_ffi(a) -> (a', taus)``: Householder QR packed as LAPACK's
  ``?geqrf`` (R on and above the diagonal, the reflectors' tails below);
- ``?solver_orgqr_ffi(a, taus) -> q``: the first ``n`` columns of
  ``H_1 ... H_k`` (LAPACK's ``?orgqr``/``?ungqr``);
- ``?solver_syevd_ffi(a) -> (v, w, info)``, ``lower``, ``algorithm`` (0, 1 or
  2: cuSOLVER's choice, QR or Jacobi; the same result here): eigenvectors as
  columns, real eigenvalues ascending, only the ``lower`` (or upper) triangle read;
- ``?solver_gesvdj_ffi`` and ``?solver_gesvdp_ffi(a) -> (a', s, u, v, info)``,
  ``full_matrices``, ``compute_uv``: ``A = U diag(s) V^H`` with **V**, not V^H
  (jax transposes it); U and V are always results, zeros when ``compute_uv`` is
  false;
- ``?solver_gesvd_ffi`` and ``hipsolver_gesdd_ffi(a) -> (a', s, u, vt, info)``,
  ``full_matrices``, ``compute_uv``, ``transposed``: V^H itself; where
  ``transposed`` (jax's choice for ``m < n``, with row-major layouts so that the
  library factors A^T) the two are swapped, ``(a', s, vt, u, info)`` in
  logical terms, and 0-d placeholders when ``compute_uv`` is false.

The first result of geqrf's, syevd's and the SVDs' is the operand's buffer
(``output_to_operand_aliasing``): the library leaves its scratch there, jax
reads it only for geqrf, so the others return the operand unchanged.

Precision: Cholesky and LU are LAPACK's ``?potrf`` and ``?getrf`` in the operand's
type (:mod:`heron.jax.lapack`; equal to cuSOLVER to rounding). QR, eigh and SVD
are ``numpy.linalg`` (LAPACK's ``?geqrf``, ``?syevd``/``?heevd``, ``?gesdd``,
computed in double and rounded to the operand's type): no host code can match
cuSOLVER's Jacobi SVD or its eigensolver bit for bit, and an eigenvector or
singular vector is defined only up to a sign (a phase, complex), which
cuSOLVER and LAPACK pick differently. A call whose numpy routine does not
converge (a NaN or infinite operand) reports ``info`` 1, and jax makes its
results NaN as it does on a GPU.

jax's other GPU linear algebra is LAPACK on the host too, in modules of their
own whose targets this plugin registers with its own:
:mod:`heron.jax.gpu_eig` (``?hybrid_eig_real``, ``?hybrid_eig_comp``,
``cusolver_geev_ffi``: ``jnp.linalg.eig``), :mod:`heron.jax.gpu_householder`
(``?hybrid_geqp3``, ``?solver_ormqr_ffi``, ``?solver_sytrd_ffi``),
:mod:`heron.jax.gpu_tridiagonal_solve` (``?sparse_gtsv2_ffi``) and
:mod:`heron.jax.gpu_cholesky_update` (``cu_cholesky_update_ffi``). Only
``?_tridiagonal_solve_perturbed`` (``tridiagonal_solve(perturb_singular=True)``,
jaxlib's own perturbation) is not provided: refused by name when the program
is compiled, as any unknown target is.
"""

from __future__ import annotations

import re
from collections.abc import Callable

import numpy as np

from heron.hlo.custom_calls.call import CustomCall
from heron.hlo.custom_calls.hookspecs import CustomCallSpec, hookimpl
from heron.jax.ffi_attributes import boolean
from heron.jax.gpu_cholesky_update import cholesky_update_specs
from heron.jax.gpu_eig import eig_specs
from heron.jax.gpu_householder import householder_specs
from heron.jax.gpu_tridiagonal_solve import tridiagonal_solve_specs
from heron.jax.lapack import check_matrices, cholesky_factor, lu_factor

__all__ = [
    "PREFIXES",
    "geqrf",
    "gesvd",
    "gesvdj",
    "getrf",
    "orgqr",
    "permutation",
    "potrf",
    "syevd",
]

#: jax's target-name prefixes (``_platform_prefix_map``): CUDA's and ROCm's.
PREFIXES = ("cu", "hip")
#: The element types jax lowers the solvers for.
_DTYPES = (np.float32, np.float64, np.complex64, np.complex128)


def _dtype(call: CustomCall, a: np.ndarray, *, square: bool) -> None:
    """Refuse an operand that is not a batch of matrices of one of the solvers' types."""
    if a.dtype not in _DTYPES:
        names = ", ".join(np.dtype(t).name for t in _DTYPES)
        raise call.error(f"takes {names} matrices, not {a.dtype}")
    check_matrices(call, a, a.dtype, square=square)


def _batch(a: np.ndarray) -> tuple[int, ...]:
    return a.shape[:-2]


def potrf(operands: tuple[np.ndarray, ...], call: CustomCall) -> list[np.ndarray]:
    """``?solver_potrf_ffi`` (the module docstring)."""
    (a,) = operands
    _dtype(call, a, square=True)
    lower = boolean(call, "lower")
    factors = np.empty_like(a)
    infos = np.zeros(_batch(a), np.int32)
    for index in np.ndindex(*_batch(a)):
        factors[index], infos[index] = cholesky_factor(a[index], lower)
    return [factors, infos]


def getrf(operands: tuple[np.ndarray, ...], call: CustomCall) -> list[np.ndarray]:
    """``?solver_getrf_ffi`` (the module docstring)."""
    (a,) = operands
    _dtype(call, a, square=False)
    factors = np.empty_like(a)
    pivots = np.zeros((*_batch(a), min(a.shape[-2:])), np.int32)
    infos = np.zeros(_batch(a), np.int32)
    for index in np.ndindex(*_batch(a)):
        factors[index], pivots[index], infos[index] = lu_factor(a[index])
    return [factors, pivots, infos]


def permutation(operands: tuple[np.ndarray, ...], call: CustomCall) -> np.ndarray:
    """``?_lu_pivots_to_permutation`` (the module docstring)."""
    (pivots,) = operands
    (result,) = call.result_shapes
    if pivots.dtype != np.int32 or pivots.ndim < 1:
        raise call.error(f"takes int32 pivots, not {pivots.dtype}{list(pivots.shape)}")
    size = result.dims[-1]
    if pivots.shape[-1] > size or ((pivots < 0) | (pivots >= size)).any():
        raise call.error(f"pivots {pivots.tolist()} are no row swaps of {size} rows")
    out = np.broadcast_to(np.arange(size, dtype=np.int32), (*pivots.shape[:-1], size)).copy()
    for index in np.ndindex(*pivots.shape[:-1]):
        row = out[index]
        for i, j in enumerate(pivots[index]):
            row[i], row[j] = row[j], row[i]
    return out


def geqrf(operands: tuple[np.ndarray, ...], call: CustomCall) -> list[np.ndarray]:
    """``?solver_geqrf_ffi`` (the module docstring): numpy's ``qr(mode="raw")`` is LAPACK's
    ``?geqrf`` output, transposed."""
    (a,) = operands
    _dtype(call, a, square=False)
    if a.size == 0:
        return [a.copy(), np.zeros((*_batch(a), min(a.shape[-2:])), a.dtype)]
    packed, taus = np.linalg.qr(a, mode="raw")
    return [np.swapaxes(packed, -1, -2).astype(a.dtype), taus.astype(a.dtype)]


def householder_product(a: np.ndarray, taus: np.ndarray) -> np.ndarray:
    """One matrix's ``?org2r``: ``H_1 ... H_k`` applied to the first ``n`` columns of I,
    ``H_i = I - tau_i v_i v_i^H`` with ``v_i = (0, .., 0, 1, a[i+1:, i])``."""
    m, n = a.shape
    q = np.eye(m, n, dtype=a.dtype)
    for i in reversed(range(len(taus))):
        v = np.concatenate([np.ones(1, a.dtype), a[i + 1 :, i]])
        q[i:, :] -= taus[i] * np.outer(v, v.conj() @ q[i:, :])
    return q


def orgqr(operands: tuple[np.ndarray, ...], call: CustomCall) -> np.ndarray:
    """``?solver_orgqr_ffi`` (the module docstring)."""
    a, taus = operands
    _dtype(call, a, square=False)
    m, n = a.shape[-2:]
    if taus.dtype != a.dtype or taus.shape[:-1] != _batch(a) or not taus.shape[-1] <= n <= m:
        raise call.error(
            f"taus {taus.dtype}{list(taus.shape)} do not fit a {a.dtype}{list(a.shape)}"
            " (orgqr needs m >= n >= k)"
        )
    q = np.empty_like(a)
    for index in np.ndindex(*_batch(a)):
        q[index] = householder_product(a[index], taus[index])
    return q


def _real(dtype: np.dtype) -> np.dtype:
    return np.finfo(dtype).dtype  # float32 for complex64, float64 for complex128


def syevd(operands: tuple[np.ndarray, ...], call: CustomCall) -> list[np.ndarray]:
    """``?solver_syevd_ffi`` (the module docstring)."""
    (a,) = operands
    _dtype(call, a, square=True)
    lower = boolean(call, "lower")
    algorithm = re.search(r"\balgorithm\s*=\s*(\d+)", call.backend_config)
    if algorithm is not None and int(algorithm.group(1)) not in (0, 1, 2):
        raise call.error(f"algorithm {algorithm.group(1)} is none of 0, 1 (QR), 2 (Jacobi)")
    n = a.shape[-1]
    vectors = np.empty_like(a)
    values = np.empty((*_batch(a), n), _real(a.dtype))
    infos = np.zeros(_batch(a), np.int32)
    for index in np.ndindex(*_batch(a)):
        try:
            w, v = np.linalg.eigh(a[index], UPLO="L" if lower else "U")
        except np.linalg.LinAlgError:  # did not converge: jax makes the results NaN
            infos[index] = 1
            vectors[index], values[index] = np.nan, np.nan
            continue
        vectors[index], values[index] = v, w
    return [vectors, values, infos]


def _svd(
    a: np.ndarray, call: CustomCall, *, full: bool, vectors: bool
) -> tuple[np.ndarray, list[np.ndarray], np.ndarray]:
    """``(s, [u, vt] or [], info)`` of a batch, with ``info`` 1 where numpy's SVD fails."""
    _dtype(call, a, square=False)
    m, n = a.shape[-2:]
    k = min(m, n)
    s = np.full((*_batch(a), k), np.nan, _real(a.dtype))
    u = np.full((*_batch(a), m, m if full else k), np.nan, a.dtype)
    vt = np.full((*_batch(a), n if full else k, n), np.nan, a.dtype)
    infos = np.zeros(_batch(a), np.int32)
    for index in np.ndindex(*_batch(a)):
        try:
            if vectors:
                u[index], s[index], vt[index] = np.linalg.svd(a[index], full_matrices=full)
            else:
                s[index] = np.linalg.svd(a[index], compute_uv=False)
        except np.linalg.LinAlgError:  # did not converge: jax makes the results NaN
            infos[index] = 1
    return s, ([u, vt] if vectors else []), infos


def _declared(call: CustomCall, k: int, dtype: np.dtype) -> np.ndarray:
    """Zeros of result ``k``'s declared dimensions (a vector result not asked for)."""
    return np.zeros(call.result_shapes[k].dims, dtype)


def _check_dims(call: CustomCall, results: list[np.ndarray]) -> list[np.ndarray]:
    """Refuse, by its flags, a call whose declared results the flags do not give."""
    for k, (array, shape) in enumerate(zip(results, call.result_shapes, strict=True)):
        if array.shape != shape.dims:
            raise call.error(
                f"result {k} is declared {list(shape.dims)}; backend_config"
                f" {call.backend_config!r} gives {list(array.shape)}"
            )
    return results


def gesvdj(operands: tuple[np.ndarray, ...], call: CustomCall) -> list[np.ndarray]:
    """``?solver_gesvdj_ffi`` and ``?solver_gesvdp_ffi`` (the module docstring): U and V."""
    (a,) = operands
    full, vectors = boolean(call, "full_matrices"), boolean(call, "compute_uv")
    s, uv, infos = _svd(a, call, full=full, vectors=vectors)
    if vectors:
        u, vt = uv
        v = np.swapaxes(vt, -1, -2).conj()
    else:
        u, v = _declared(call, 2, a.dtype), _declared(call, 3, a.dtype)
    return _check_dims(call, [a.copy(), s, u, v, infos])


def gesvd(operands: tuple[np.ndarray, ...], call: CustomCall) -> list[np.ndarray]:
    """``?solver_gesvd_ffi`` and ``hipsolver_gesdd_ffi`` (the module docstring): U and V^H,
    swapped where ``transposed``."""
    (a,) = operands
    full, vectors = boolean(call, "full_matrices"), boolean(call, "compute_uv")
    transposed = boolean(call, "transposed")
    s, uv, infos = _svd(a, call, full=full, vectors=vectors)
    if vectors:
        u, vt = uv
        pair = [vt, u] if transposed else [u, vt]
    else:
        pair = [_declared(call, 2, a.dtype), _declared(call, 3, a.dtype)]
    return _check_dims(call, [a.copy(), s, *pair, infos])


#: routine -> (host implementation, what jax computes with it).
_SOLVERS: dict[str, tuple[Callable[..., object], str]] = {
    "solver_potrf_ffi": (potrf, "Cholesky (jnp.linalg.cholesky)"),
    "solver_getrf_ffi": (getrf, "LU (jnp.linalg.solve, inv, det, slogdet, jax.scipy.linalg.lu)"),
    "_lu_pivots_to_permutation": (permutation, "LU pivots to a permutation"),
    "solver_geqrf_ffi": (geqrf, "Householder QR (jnp.linalg.qr)"),
    "solver_orgqr_ffi": (orgqr, "Q from Householder reflectors (jnp.linalg.qr)"),
    "solver_syevd_ffi": (syevd, "Hermitian eigensolver (jnp.linalg.eigh, eigvalsh)"),
    "solver_gesvdj_ffi": (gesvdj, "Jacobi SVD (jnp.linalg.svd, pinv, lstsq, norm, up to 1024)"),
    "solver_gesvdp_ffi": (gesvdj, "polar SVD (jax.lax.linalg.svd, algorithm POLAR)"),
    "solver_gesvd_ffi": (gesvd, "QR SVD (jnp.linalg.svd beyond 1024, algorithm QR)"),
}
#: ROCm's divide-and-conquer SVD (``SvdAlgorithm.DIVIDE_AND_CONQUER``), gesvd's contract.
_ROCM_ONLY = {
    "hipsolver_gesdd_ffi": (gesvd, "divide-and-conquer SVD (algorithm DIVIDE_AND_CONQUER)")
}

#: Every target this module provides -> its host implementation.
TARGETS: dict[str, Callable[..., object]] = {
    **{f"{p}{routine}": host for p in PREFIXES for routine, (host, _) in _SOLVERS.items()},
    **{target: host for target, (host, _) in _ROCM_ONLY.items()},
}


@hookimpl
def heron_custom_call_specs() -> list[CustomCallSpec]:
    library = {"cu": "cuSOLVER", "hip": "hipSOLVER"}
    specs = [
        CustomCallSpec(
            target=f"{prefix}{routine}",
            host=host,
            description=f"jax's {library[prefix]} {what}, on the host",
        )
        for prefix in PREFIXES
        for routine, (host, what) in _SOLVERS.items()
    ]
    specs += [
        CustomCallSpec(target=target, host=host, description=f"jax's hipSOLVER {what}, on the host")
        for target, (host, what) in _ROCM_ONLY.items()
    ]
    return [
        *specs,
        *eig_specs(PREFIXES),
        *householder_specs(PREFIXES),
        *tridiagonal_solve_specs(PREFIXES),
        *cholesky_update_specs(),
    ]
