"""jax's CPU LAPACK calls beyond Cholesky, LU and trsm: eigh, SVD, QR, eig, Schur, Hessenberg,
tridiagonal solve, on the host.

Lowered for the CPU (heron's interpreter), ``jnp.linalg`` and ``jax.scipy.linalg``
are jax's typed-FFI calls ``lapack_?<routine>_ffi`` (``?`` one of ``s``, ``d``,
``c``, ``z``: f32, f64, c64, c128), every operand a batch of matrices
(``num_batch_dims`` in front; the column-major ``operand_layouts`` jax declares
need nothing here: a host implementation sees logical index order), each flag a
character code in ``backend_config`` (``{mode = 86 : ui8, uplo = 76 : ui8}``).
The contracts, from ``jax/_src/lax/linalg.py`` (jax 0.10):

- ``?syevd``/``?heevd(a) -> (v, w, info)``, ``mode`` ``'V'``/``'N'``, ``uplo``:
  ``jnp.linalg.eigh``, ``eigvalsh``: eigenvectors as columns (with ``'N'`` the
  operand LAPACK destroyed, which jax never reads), real eigenvalues ascending;
- ``?gesdd`` and ``?gesvd(a) -> (a', s, u, vt, info)``, ``mode`` ``'A'`` (full
  U and V^H), ``'S'`` (``min(m, n)`` columns) or ``'N'`` (none: U and V^H are zeros
  of the declared full shapes, which jax drops): ``jnp.linalg.svd``, ``pinv``,
  ``lstsq``, ``norm(ord=2)``, ``matrix_rank``; ``?gesvd`` is
  ``jax.lax.linalg.svd(algorithm=SvdAlgorithm.QR)``. ``a'`` is the operand's
  buffer (LAPACK's scratch, jax ignores it): the operand is returned. jax
  has no ``subset_by_index`` on the CPU (it refuses one when lowering);
- ``?geqrf(a) -> (a', taus)`` and ``?orgqr``/``?ungqr(a, taus) -> q``:
  ``jnp.linalg.qr`` (every mode: ``"complete"`` pads ``a`` to ``m`` columns
  before orgqr, ``"r"`` calls geqrf alone) and the Q of ``hessenberg``;
- ``?geev(a) -> (wr, wi, vl, vr, info)`` (real) or ``(w, vl, vr, info)``
  (complex), ``compute_left``, ``compute_right`` ``'V'``/``'N'``:
  ``jnp.linalg.eig``, ``eigvals``: complex eigenvectors, a real matrix's conjugate
  pairs unpacked (:func:`heron.jax.gpu_eig.eig_batch`, also jax's GPU hybrid
  kernel's contract), zeros where not asked for;
- ``?gees(a) -> (t, vs, wr, wi, sdim, info)`` (real) or ``(t, vs, w, sdim,
  info)`` (complex), ``mode`` ``'V'``/``'N'`` (Schur vectors: zeros without),
  ``sort`` ``'N'``: ``jax.scipy.linalg.schur``. jax refuses ``sort_eig_vals``
  on the CPU when lowering; a call with ``sort`` ``'S'`` is refused here by name
  (it would need the select callback jax cannot pass);
- ``?gehrd(a) -> (a', taus, info)``, ``low``, ``high`` (1-based ``ilo``,
  ``ihi``; jax writes 1 and ``n``): ``jax.scipy.linalg.hessenberg``: H on and
  above the first subdiagonal, the reflectors below it, ``n - 1`` taus;
- ``?gtsv(dl, d, du, b) -> (dl', d', du', x, info)``:
  ``jax.lax.linalg.tridiagonal_solve``: ``A X = B`` with ``dl[0]`` and
  ``du[m-1]`` outside the matrix (not read), ``info`` the first zero pivot
  (jax makes that system's X NaN); ``dl'``, ``d'``, ``du'`` are what LAPACK
  leaves there (U's second superdiagonal in ``dl'[1:]``), which jax ignores;
- ``?geqp3(a, jpvt)``, ``?ormqr``/``?unmqr(a, taus, c)`` (``left``,
  ``transpose``) and ``?sytrd``/``?hetrd(a) -> (a', d, e, taus, info)`` (``uplo``):
  ``jax.scipy.linalg.qr(pivoting=True)``, ``qr_multiply``, ``jax.lax.linalg.tridiagonal``:
  the contracts of jax's GPU calls (:mod:`heron.jax.gpu_householder`).

Each matrix is the LAPACK routine jax's own kernel calls, in the operand's type,
through scipy (:mod:`heron.jax.scipy_lapack`: jaxlib takes its CPU LAPACK from
``scipy.linalg.cython_lapack``), with the workspace LAPACK's query reports (scipy's
default, LAPACK's minimum, for ``?syevd``/``?heevd``): the results are measured equal
to jax's on the CPU bit for bit (``tests/test_jax_cpu_lapack.py``).
"""

from __future__ import annotations

import re
from collections.abc import Callable

import numpy as np

from heron.hlo.custom_calls.call import CustomCall
from heron.hlo.custom_calls.hookspecs import CustomCallSpec
from heron.jax.gpu_eig import eig_batch
from heron.jax.gpu_householder import geqp3, ormqr, tridiagonal_reduction
from heron.jax.scipy_lapack import check_dtype, check_matrices, routine, workspace

__all__ = [
    "cpu_lapack_specs",
    "gees",
    "geev",
    "gehrd",
    "geqrf",
    "gesdd",
    "gtsv",
    "orgqr",
    "syevd",
    "sytrd",
]

_TYPES = {"s": np.float32, "d": np.float64, "c": np.complex64, "z": np.complex128}


def _flag(call: CustomCall, name: str, allowed: str) -> str:
    """A character attribute (``mode = 86 : ui8``), which jax always writes, checked."""
    found = re.search(rf"\b{name}\s*=\s*(-?\d+)", call.backend_config)
    if found is None:
        raise call.error(f"backend_config {call.backend_config!r} has no {name}")
    value = int(found.group(1))
    if not 0 <= value < 128 or chr(value) not in allowed:
        choices = ", ".join(f"'{c}' ({ord(c)})" for c in allowed)
        raise call.error(f"{name} {value} is none of {choices}")
    return chr(value)


def _integer(call: CustomCall, name: str) -> int:
    found = re.search(rf"\b{name}\s*=\s*(-?\d+)", call.backend_config)
    if found is None:
        raise call.error(f"backend_config {call.backend_config!r} has no {name}")
    return int(found.group(1))


def _matrices(call: CustomCall, a: np.ndarray, *, square: bool) -> None:
    """Refuse an operand that is not a batch of matrices of the target's own type."""
    check_dtype(call, a, "matrices")
    expected = np.dtype(_TYPES[call.target[len("lapack_")]])
    if a.dtype != expected:
        raise call.error(f"takes {expected.name} matrices, not {a.dtype}{list(a.shape)}")
    check_matrices(call, a, a.dtype, square=square)


def _real(dtype: np.dtype) -> np.dtype:
    return np.finfo(dtype).dtype


def _check(call: CustomCall, results: list[np.ndarray]) -> list[np.ndarray]:
    """Refuse a call whose declared results are not what its operands and flags give."""
    for k, (array, shape) in enumerate(zip(results, call.result_shapes, strict=True)):
        if array.shape != tuple(shape.dims):
            raise call.error(
                f"result {k} is declared {list(shape.dims)}; the operands and backend_config"
                f" {call.backend_config!r} give {list(array.shape)}"
            )
    return results


def syevd(operands: tuple[np.ndarray, ...], call: CustomCall) -> list[np.ndarray]:
    """``lapack_?syevd_ffi``, ``lapack_?heevd_ffi`` (the module docstring)."""
    (a,) = operands
    _matrices(call, a, square=True)
    vectors = _flag(call, "mode", "VN") == "V"
    lower = _flag(call, "uplo", "LU") == "L"
    batch, n = a.shape[:-2], a.shape[-1]
    solve = routine("syevd", a.dtype, complex_name="heevd")
    v = np.empty_like(a)
    w = np.empty((*batch, n), _real(a.dtype))
    infos = np.zeros(batch, np.int32)
    for index in np.ndindex(*batch):
        if n == 0:
            continue
        w[index], v[index], infos[index] = solve(a[index], compute_v=int(vectors), lower=int(lower))
    return _check(call, [v, w, infos])


def _svd(operands: tuple[np.ndarray, ...], call: CustomCall, name: str) -> list[np.ndarray]:
    (a,) = operands
    _matrices(call, a, square=False)
    mode = _flag(call, "mode", "ASN")
    vectors, full = mode != "N", mode == "A"
    batch, (m, n) = a.shape[:-2], a.shape[-2:]
    k = min(m, n)
    s = np.zeros((*batch, k), _real(a.dtype))
    if vectors:
        u = np.zeros((*batch, m, m if full else k), a.dtype)
        vt = np.zeros((*batch, n if full else k, n), a.dtype)
    else:  # no vectors computed: U and V^H are placeholders of the sizes jax declares
        u, vt = (np.zeros(shape.dims, a.dtype) for shape in call.result_shapes[2:4])
    infos = np.zeros(batch, np.int32)
    if k == 0:  # jax lowers an empty SVD without the call
        raise call.error(f"takes matrices with rows and columns, not {list(a.shape)}")
    solve = routine(name, a.dtype)
    lwork = workspace(
        routine(f"{name}_lwork", a.dtype)(m, n, compute_uv=int(vectors), full_matrices=int(full))
    )
    for index in np.ndindex(*batch):
        left, s[index], right, infos[index] = solve(
            a[index], compute_uv=int(vectors), full_matrices=int(full), lwork=lwork
        )
        if vectors:
            u[index], vt[index] = left, right
    return _check(call, [a.copy(), s, u, vt, infos])


def gesdd(operands: tuple[np.ndarray, ...], call: CustomCall) -> list[np.ndarray]:
    """``lapack_?gesdd_ffi`` (the module docstring): divide and conquer."""
    return _svd(operands, call, "gesdd")


def gesvd(operands: tuple[np.ndarray, ...], call: CustomCall) -> list[np.ndarray]:
    """``lapack_?gesvd_ffi`` (the module docstring): QR iteration."""
    return _svd(operands, call, "gesvd")


def geqrf(operands: tuple[np.ndarray, ...], call: CustomCall) -> list[np.ndarray]:
    """``lapack_?geqrf_ffi`` (the module docstring)."""
    (a,) = operands
    _matrices(call, a, square=False)
    batch, (m, n) = a.shape[:-2], a.shape[-2:]
    packed = np.array(a, copy=True)
    taus = np.zeros((*batch, min(m, n)), a.dtype)
    if a.size == 0:
        return _check(call, [packed, taus])
    factor = routine("geqrf", a.dtype)
    lwork = workspace(factor(np.zeros((m, n), a.dtype), lwork=-1)[2])
    for index in np.ndindex(*batch):
        packed[index], taus[index], _, _ = factor(a[index], lwork=lwork)
    return _check(call, [packed, taus])


def orgqr(operands: tuple[np.ndarray, ...], call: CustomCall) -> np.ndarray:
    """``lapack_?orgqr_ffi``, ``lapack_?ungqr_ffi`` (the module docstring)."""
    a, taus = operands
    _matrices(call, a, square=False)
    batch, (m, n) = a.shape[:-2], a.shape[-2:]
    if taus.dtype != a.dtype or taus.shape[:-1] != batch or not taus.shape[-1] <= n <= m:
        raise call.error(
            f"taus {taus.dtype}{list(taus.shape)} do not fit a {a.dtype}{list(a.shape)}"
            " (orgqr needs m >= n >= k)"
        )
    q = np.array(a, copy=True)
    if a.size == 0:
        return q
    product = routine("orgqr", a.dtype, complex_name="ungqr")
    k = taus.shape[-1]
    lwork = workspace(product(np.zeros((m, n), a.dtype), np.zeros(k, a.dtype), lwork=-1)[1])
    for index in np.ndindex(*batch):
        q[index], _, info = product(a[index], taus[index], lwork=lwork)
        if info != 0:  # an argument LAPACK refused: the checks above missed a case
            raise call.error(f"LAPACK's orgqr refused argument {-int(info)}")
    return q


def geev(operands: tuple[np.ndarray, ...], call: CustomCall) -> list[np.ndarray]:
    """``lapack_?geev_ffi`` (the module docstring)."""
    (a,) = operands
    _matrices(call, a, square=True)
    left = _flag(call, "compute_left", "VN") == "V"
    right = _flag(call, "compute_right", "VN") == "V"
    return _check(call, eig_batch(a, real=a.dtype.kind == "f", left=left, right=right))


def gees(operands: tuple[np.ndarray, ...], call: CustomCall) -> list[np.ndarray]:
    """``lapack_?gees_ffi`` (the module docstring)."""
    (a,) = operands
    _matrices(call, a, square=True)
    vectors = _flag(call, "mode", "VN") == "V"
    if _flag(call, "sort", "NS") == "S":
        raise call.error(
            "sort 'S' (sorted eigenvalues) needs LAPACK's select callback, which jax's"
            " call cannot carry: not provided"
        )
    real = a.dtype.kind == "f"
    batch, n = a.shape[:-2], a.shape[-1]
    t, vs = np.array(a, copy=True), np.zeros_like(a)
    values = [np.zeros((*batch, n), a.dtype) for _ in range(2 if real else 1)]
    sdim, infos = np.zeros(batch, np.int32), np.zeros(batch, np.int32)
    if a.size > 0:
        schur = routine("gees", a.dtype)
        select = (lambda re, im: 0) if real else (lambda w: 0)  # noqa: E731  (unsorted)
        query = schur(select, np.zeros((n, n), a.dtype), compute_v=int(vectors), lwork=-1)
        lwork = workspace(query[-2])
        for index in np.ndindex(*batch):
            *out, work, infos[index] = schur(select, a[index], compute_v=int(vectors), lwork=lwork)
            t[index], sdim[index], *w, schur_vectors = out
            for part, value in zip(values, w, strict=True):
                part[index] = value
            if vectors:
                vs[index] = schur_vectors
    return _check(call, [t, vs, *values, sdim, infos])


def gehrd(operands: tuple[np.ndarray, ...], call: CustomCall) -> list[np.ndarray]:
    """``lapack_?gehrd_ffi`` (the module docstring)."""
    (a,) = operands
    _matrices(call, a, square=True)
    batch, n = a.shape[:-2], a.shape[-1]
    low, high = _integer(call, "low"), _integer(call, "high")
    if not 1 <= low <= max(1, high) <= max(1, n) or (n == 0 and high != 0):
        raise call.error(f"low {low} and high {high} are not 1 <= low <= high <= n ({n})")
    h = np.array(a, copy=True)
    taus = np.zeros((*batch, max(n - 1, 0)), a.dtype)
    infos = np.zeros(batch, np.int32)
    if n > 0:
        reduce = routine("gehrd", a.dtype)
        lo, hi = low - 1, high - 1  # scipy's are 0-based
        lwork = workspace(routine("gehrd_lwork", a.dtype)(n, lo=lo, hi=hi))
        for index in np.ndindex(*batch):
            h[index], taus[index], infos[index] = reduce(a[index], lo=lo, hi=hi, lwork=lwork)
    return _check(call, [h, taus, infos])


def gtsv(operands: tuple[np.ndarray, ...], call: CustomCall) -> list[np.ndarray]:
    """``lapack_?gtsv_ffi`` (the module docstring)."""
    dl, d, du, b = operands
    check_dtype(call, b, "right-hand sides")
    expected = np.dtype(_TYPES[call.target[len("lapack_")]])
    if (
        b.dtype != expected
        or b.ndim < 2
        or any(x.dtype != b.dtype or x.shape != b.shape[:-1] for x in (dl, d, du))
    ):
        raise call.error(
            f"dl {dl.dtype}{list(dl.shape)}, d {d.dtype}{list(d.shape)}, du"
            f" {du.dtype}{list(du.shape)} are not the [..., m] diagonals of b"
            f" {b.dtype}{list(b.shape)} ([..., m, nrhs], all {expected.name})"
        )
    dl_out, d_out, du_out, x = (np.array(v, copy=True) for v in (dl, d, du, b))
    infos = np.zeros(b.shape[:-2], np.int32)
    if b.shape[-2] == 1:  # LAPACK's own arithmetic for one row (its wrapper wants m >= 2)
        singular = d[..., 0] == 0
        infos[singular] = 1  # ?gtsv: U(1,1) is zero; b is left as it was
        solved = b / np.where(singular, 1, d[..., 0])[..., None, None]
        x[...] = np.where(singular[..., None, None], b, solved)
    elif b.shape[-2] > 1:
        solve = routine("gtsv", b.dtype)
        for index in np.ndindex(*b.shape[:-2]):
            second, d_out[index], upper, x[index], infos[index] = solve(
                dl[index][1:], d[index], du[index][:-1], b[index]
            )
            dl_out[index][1:], du_out[index][:-1] = second, upper
    return _check(call, [dl_out, d_out, du_out, x, infos])


def sytrd(operands: tuple[np.ndarray, ...], call: CustomCall) -> list[np.ndarray]:
    """``lapack_?sytrd_ffi``, ``lapack_?hetrd_ffi`` (the module docstring)."""
    (a,) = operands
    _matrices(call, a, square=True)
    lower = _flag(call, "uplo", "LU") == "L"
    if a.shape[-1] == 0:
        raise call.error("takes matrices of at least one row (jax's tridiagonal does too)")
    return _check(call, tridiagonal_reduction(a, lower))


#: routine (as jax names it for real, complex types) -> (host, what jax computes with it).
_ROUTINES: dict[tuple[str, str], tuple[Callable[..., object], str]] = {
    ("syevd", "heevd"): (syevd, "Hermitian eigensolver (jnp.linalg.eigh, eigvalsh)"),
    ("gesdd", "gesdd"): (gesdd, "divide-and-conquer SVD (jnp.linalg.svd, pinv, lstsq)"),
    ("gesvd", "gesvd"): (gesvd, "QR SVD (jax.lax.linalg.svd, algorithm QR)"),
    ("geqrf", "geqrf"): (geqrf, "Householder QR (jnp.linalg.qr)"),
    ("orgqr", "ungqr"): (orgqr, "Q from Householder reflectors (jnp.linalg.qr)"),
    ("geev", "geev"): (geev, "eigendecomposition (jnp.linalg.eig, eigvals)"),
    ("gees", "gees"): (gees, "Schur decomposition (jax.scipy.linalg.schur)"),
    ("gehrd", "gehrd"): (gehrd, "Hessenberg reduction (jax.scipy.linalg.hessenberg)"),
    ("gtsv", "gtsv"): (gtsv, "tridiagonal solve (jax.lax.linalg.tridiagonal_solve)"),
    ("geqp3", "geqp3"): (geqp3, "pivoted QR (jax.scipy.linalg.qr, pivoting)"),
    ("ormqr", "unmqr"): (ormqr, "Q times a matrix (jax.lax.linalg.ormqr, qr_multiply)"),
    ("sytrd", "hetrd"): (sytrd, "tridiagonal reduction (jax.lax.linalg.tridiagonal)"),
}

#: Every target this module provides -> its host implementation.
TARGETS: dict[str, Callable[..., object]] = {
    f"lapack_{letter}{names[letter in 'cz']}_ffi": host
    for names, (host, _) in _ROUTINES.items()
    for letter in _TYPES
}


def cpu_lapack_specs() -> list[CustomCallSpec]:
    """The targets of this module (registered by :mod:`heron.jax.lapack`'s hook)."""
    return [
        CustomCallSpec(
            target=f"lapack_{letter}{names[letter in 'cz']}_ffi",
            host=host,
            description=f"jax's CPU LAPACK {what}, on the host",
        )
        for names, (host, what) in _ROUTINES.items()
        for letter in _TYPES
    ]
