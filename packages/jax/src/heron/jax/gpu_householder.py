"""jax's GPU Householder calls beyond plain QR: pivoted QR, applying Q, tridiagonalisation.

Lowered for CUDA or ROCm (prefixes ``cu``, ``hip``; ``jax/_src/lax/linalg.py``):

- ``?hybrid_geqp3(a, jpvt) -> (a', jpvt', taus)``, ``magma`` (``"on"``,
  ``"off"``, ``"auto"``: MAGMA or host LAPACK, one contract):
  ``jax.scipy.linalg.qr(..., pivoting=True)`` and ``jax.lax.linalg.geqp3``.
  jaxlib's hybrid kernel runs LAPACK's ``?geqp3`` on the host: R and the
  reflectors packed as ``?geqrf``'s, ``taus``, and ``jpvt'`` the 1-based column
  permutation (``a[:, jpvt' - 1] = Q R``). A nonzero ``jpvt[j]`` on entry makes
  column ``j`` a *fixed* column: the fixed ones are moved to the front in
  order and factored first without pivoting (LAPACK's contract, which jax's CPU
  call keeps too); ``jax.scipy.linalg.qr`` passes zeros.
- ``?solver_ormqr_ffi(a, taus, c) -> c'``, ``left``, ``transpose``:
  ``jax.lax.linalg.ormqr`` and ``jax.scipy.linalg.qr_multiply``: ``Q C``,
  ``Q^H C``, ``C Q`` or ``C Q^H`` with ``Q = H_1 ... H_k`` from ``a``'s
  reflectors (its first ``k = len(taus)`` columns) as LAPACK's
  ``?ormqr``/``?unmqr``.
- ``?solver_sytrd_ffi(a) -> (a', d, e, taus, info)``, ``lower``:
  ``jax.lax.linalg.tridiagonal``: ``Q^H A Q = T`` for a Hermitian ``A`` read from
  its ``lower`` (or upper) triangle, LAPACK's ``?sytrd``/``?hetrd`` packing: T's
  diagonal ``d`` and off-diagonal ``e`` (real), the reflectors below the first
  subdiagonal (above the first superdiagonal), ``taus``; the other triangle is
  the operand's. ``info`` is 0 (jax makes a matrix with another NaN).

Each matrix goes through LAPACK in the operand's type via scipy
(:mod:`heron.jax.scipy_lapack`), so the results equal jax's CPU calls
(``lapack_?geqp3_ffi``, ``?ormqr``, ``?sytrd``) exactly; cuSOLVER's own ormqr and
sytrd agree with LAPACK to rounding (the same reflector conventions).
"""

from __future__ import annotations

import numpy as np

from heron.hlo.custom_calls.call import CustomCall
from heron.hlo.custom_calls.hookspecs import CustomCallSpec
from heron.jax.ffi_attributes import boolean, check_magma
from heron.jax.scipy_lapack import check_dtype, check_matrices, routine, workspace

__all__ = ["geqp3", "householder_specs", "ormqr", "pivoted_qr", "sytrd", "tridiagonal_reduction"]


def _matrices(call: CustomCall, a: np.ndarray, *, square: bool) -> None:
    check_dtype(call, a, "matrices")
    check_matrices(call, a, a.dtype, square=square)


def _free_geqp3(a: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``?geqp3`` with every column free: packed QR, 0-based column order, taus."""
    call = routine("geqp3", a.dtype)
    lwork = workspace(call(a, lwork=-1)[3])
    packed, jpvt, taus, _, _ = call(a, lwork=lwork)
    return packed, jpvt.astype(np.int64) - 1, taus


def pivoted_qr(matrix: np.ndarray, jpvt: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """One matrix's LAPACK ``?geqp3`` with ``jpvt`` on entry (nonzero: a fixed column).

    As LAPACK does it: the fixed columns moved to the front in order, their QR
    (``?geqrf``) and ``Q^H`` applied to the rest (``?ormqr``), then the trailing rows
    and columns factored with pivoting, whose column swaps move the rows above too."""
    a = np.array(matrix, copy=True)
    m, n = a.shape
    order = np.arange(n)
    fixed = 0
    for j in range(n):  # LAPACK's loop: swap each fixed column into the next front slot
        if jpvt[j] != 0:
            if j != fixed:
                a[:, [fixed, j]] = a[:, [j, fixed]]
                order[[fixed, j]] = order[[j, fixed]]
            fixed += 1
    k = min(m, n)
    taus = np.zeros(k, a.dtype)
    if fixed == 0:
        packed, columns, taus = _free_geqp3(a)
        return packed, (columns + 1).astype(np.int32), taus
    head = min(m, fixed)
    qr = routine("geqrf", a.dtype)
    packed, head_taus, _, _ = qr(a[:, :head], lwork=workspace(qr(a[:, :head], lwork=-1)[2]))
    a[:, :head], taus[:head] = packed, head_taus
    if head < n:
        a[:, head:] = _apply(a[:, :head], head_taus, a[:, head:], left=True, transpose=True)
    if fixed < k:
        packed, columns, tail_taus = _free_geqp3(a[fixed:, fixed:])
        a[:fixed, fixed:] = a[:fixed, fixed:][:, columns]
        a[fixed:, fixed:] = packed
        order[fixed:] = order[fixed:][columns]
        taus[fixed:] = tail_taus
    return a, (order + 1).astype(np.int32), taus


def geqp3(operands: tuple[np.ndarray, ...], call: CustomCall) -> list[np.ndarray]:
    """``?hybrid_geqp3`` (the module docstring)."""
    a, jpvt = operands
    _matrices(call, a, square=False)
    check_magma(call)
    m, n = a.shape[-2:]
    if jpvt.dtype != np.int32 or jpvt.shape != (*a.shape[:-2], n):
        raise call.error(
            f"jpvt {jpvt.dtype}{list(jpvt.shape)} is not the int32 column pivots of"
            f" {a.dtype}{list(a.shape)}"
        )
    factors = np.empty_like(a)
    pivots = np.empty_like(jpvt)
    taus = np.zeros((*a.shape[:-2], min(m, n)), a.dtype)
    for index in np.ndindex(*a.shape[:-2]):
        if a[index].size == 0:
            factors[index], pivots[index] = a[index], np.arange(1, n + 1, dtype=np.int32)
            continue
        factors[index], pivots[index], taus[index] = pivoted_qr(a[index], jpvt[index])
    return [factors, pivots, taus]


def _apply(
    reflectors: np.ndarray, taus: np.ndarray, c: np.ndarray, *, left: bool, transpose: bool
) -> np.ndarray:
    """LAPACK's ``?ormqr``/``?unmqr`` of one matrix: ``op(Q) C`` or ``C op(Q)``."""
    complex_ = reflectors.dtype.kind == "c"
    call = routine("ormqr", reflectors.dtype, complex_name="unmqr")
    side, trans = ("L" if left else "R"), ("N" if not transpose else ("C" if complex_ else "T"))
    if c.size == 0 or len(taus) == 0:
        return np.array(c, copy=True)
    lwork = workspace(call(side, trans, reflectors, taus, c, -1)[1])
    result, _, info = call(side, trans, reflectors, taus, c, lwork)
    if info != 0:  # an argument LAPACK refused: the checks above missed a case
        raise ValueError(f"?ormqr refused argument {-int(info)}")
    return result


def ormqr(operands: tuple[np.ndarray, ...], call: CustomCall) -> np.ndarray:
    """``?solver_ormqr_ffi`` (the module docstring)."""
    a, taus, c = operands
    _matrices(call, a, square=False)
    left, transpose = boolean(call, "left"), boolean(call, "transpose")
    m, n = a.shape[-2:]
    k = taus.shape[-1] if taus.ndim else -1
    size = c.shape[-2] if left else (c.shape[-1] if c.ndim >= 2 else -1)
    if (
        taus.dtype != a.dtype
        or c.dtype != a.dtype
        or taus.shape[:-1] != a.shape[:-2]
        or c.shape[:-2] != a.shape[:-2]
        or not 0 <= k <= min(m, n)
        or size != m
    ):
        side = "rows" if left else "columns"
        raise call.error(
            f"a {a.dtype}{list(a.shape)}, taus {taus.dtype}{list(taus.shape)} and c"
            f" {c.dtype}{list(c.shape)} do not fit (ormqr needs k <= min(m, n) and c's {side} m)"
        )
    out = np.empty_like(c)
    for index in np.ndindex(*a.shape[:-2]):
        out[index] = _apply(a[index][:, :k], taus[index], c[index], left=left, transpose=transpose)
    return out


def sytrd(operands: tuple[np.ndarray, ...], call: CustomCall) -> list[np.ndarray]:
    """``?solver_sytrd_ffi`` (the module docstring)."""
    (a,) = operands
    _matrices(call, a, square=True)
    lower = boolean(call, "lower")
    if a.shape[-1] == 0:
        raise call.error("takes matrices of at least one row (jax's tridiagonal does too)")
    return tridiagonal_reduction(a, lower)


def tridiagonal_reduction(a: np.ndarray, lower: bool) -> list[np.ndarray]:
    """LAPACK's ``?sytrd``/``?hetrd`` of each matrix of the batch ``a`` (at least 1x1): the
    packed reflectors, the diagonal, the off-diagonal, the taus and each ``info``, as
    jax's CPU and GPU calls both return them."""
    batch, n = a.shape[:-2], a.shape[-1]
    real = np.finfo(a.dtype).dtype
    reduce = routine("sytrd", a.dtype, complex_name="hetrd")
    lwork = workspace(routine("sytrd_lwork", a.dtype, complex_name="hetrd_lwork")(n, lower=lower))
    packed, d = np.empty_like(a), np.empty((*batch, n), real)
    e, taus = np.empty((*batch, n - 1), real), np.empty((*batch, n - 1), a.dtype)
    infos = np.zeros(batch, np.int32)
    for index in np.ndindex(*batch):
        packed[index], d[index], e[index], taus[index], infos[index] = reduce(
            a[index], lower=int(lower), lwork=lwork
        )
    return [packed, d, e, taus, infos]


#: routine -> (host implementation, what jax computes with it).
_ROUTINES = {
    "hybrid_geqp3": (geqp3, "hybrid (host LAPACK) pivoted QR (jax.scipy.linalg.qr pivoting)"),
    "solver_ormqr_ffi": (ormqr, "Q times a matrix (jax.lax.linalg.ormqr, qr_multiply)"),
    "solver_sytrd_ffi": (sytrd, "tridiagonal reduction (jax.lax.linalg.tridiagonal)"),
}


def householder_specs(prefixes: tuple[str, ...]) -> list[CustomCallSpec]:
    """The targets of this module, for jax's prefixes (``cu``, ``hip``)."""
    library = {"cu": "CUDA", "hip": "ROCm"}
    return [
        CustomCallSpec(
            target=f"{prefix}{name}",
            host=host,
            description=f"jax's {library[prefix]} {what}, on the host",
        )
        for prefix in prefixes
        for name, (host, what) in _ROUTINES.items()
    ]
