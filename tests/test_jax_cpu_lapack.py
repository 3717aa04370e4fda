"""jax's CPU LAPACK calls beyond Cholesky/LU/trsm, run by heron (heron.jax.cpu_lapack).

``heron.jax.jit(f, backend="interpreter")`` lowers ``f`` for jax's CPU platform, so
``jnp.linalg.eigh``, ``svd`` (``pinv``, ``lstsq``), ``qr``, ``eig``,
``jax.scipy.linalg.schur``, ``hessenberg`` and ``jax.lax.linalg.tridiagonal_solve``
arrive as ``lapack_?syevd_ffi``/``?heevd``, ``?gesdd``, ``?geqrf`` + ``?orgqr``/``?ungqr``,
``?geev``, ``?gees``, ``?gehrd``, ``?gtsv`` (and ``?gesvd``, ``?geqp3``, ``?ormqr``,
``?sytrd`` for the rarer entry points). Each case is compared with ``jax.jit`` on
the CPU, f32, f64, c64 and c128, batched and not.

heron calls the LAPACK routine jaxlib's kernel calls (scipy's, the library jaxlib
loads) in the operand's type with the same workspace, so the results are measured
equal bit for bit. The comparisons still allow 8 ulps of the largest magnitude, and
compare eigenvectors and singular vectors after turning each column's sign (phase)
to jax's, because those are defined only up to one and a LAPACK built otherwise may
pick another; what the vectors mean (``A V = V diag(w)``, ``U S V^H = A``, ``Q R = A``,
``Z T Z^H = A``) is checked on heron's results alone. The inputs are well
conditioned (spectra and singular values spaced apart, diagonally dominant
tridiagonal systems) so that an eigenvector's or a solution's ulps are not
amplified past that bound by a small gap or a large condition number.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import jax.scipy.linalg as jsl
import numpy as np
import pytest
from heron_test_support.custom_calls import ffi_call
from heron_test_support.jax_config import jax_x64
from jax import lax

import heron.jax as heron_jax
from heron.hlo.custom_calls.call import CustomCallError
from heron.hlo.custom_calls.registry import default_custom_calls
from heron.jax.cpu_lapack import TARGETS, gees, gehrd, syevd
from heron.jax.lowering import lower

DTYPES = {"f32": np.float32, "f64": np.float64, "c64": np.complex64, "c128": np.complex128}
LETTERS = {"f32": "s", "f64": "d", "c64": "c", "c128": "z"}
BATCHES = {"one": (), "batched": (2,)}


@pytest.fixture(autouse=True)
def x64():
    """f64 and c128 need jax_enable_x64 (a global other suites set either way)."""
    with jax_x64(True):
        yield


def _random(rng, shape, dtype):
    a = rng.standard_normal(shape)
    if np.issubdtype(dtype, np.complexfloating):
        a = a + 1j * rng.standard_normal(shape)
    return a.astype(dtype)


def _unitary(rng, batch, n, dtype):
    return np.linalg.qr(_random(rng, (*batch, n, n), np.result_type(dtype, np.float64)))[0]


def _hermitian(rng, batch, n, dtype):
    """``Q diag(1, 2, .., n) Q^H``: eigenvalues spaced 1 apart, so eigenvectors are stable."""
    q = _unitary(rng, batch, n, dtype)
    a = q @ (np.arange(1.0, n + 1)[:, None] * np.swapaxes(q.conj(), -1, -2))
    return ((a + np.swapaxes(a.conj(), -1, -2)) / 2).astype(dtype)


def _well_conditioned(rng, batch, m, n, dtype):
    """``U diag(k, .., 2, 1) V^H``: singular values spaced 1 apart."""
    k = min(m, n)
    u = _unitary(rng, batch, m, dtype)[..., :, :k]
    v = _unitary(rng, batch, n, dtype)[..., :, :k]
    return (u @ (np.arange(k, 0, -1.0)[:, None] * np.swapaxes(v.conj(), -1, -2))).astype(dtype)


def _leaves(tree) -> list[np.ndarray]:
    return [np.asarray(leaf) for leaf in jax.tree_util.tree_leaves(tree)]


def _tolerance(array: np.ndarray) -> float:
    """8 ulps of the largest magnitude (and of 1, for results near 0)."""
    eps = float(np.finfo(array.dtype).eps)
    return 8 * eps * max(1.0, float(np.max(np.abs(array), initial=0.0)))


def _close(actual: np.ndarray, expected: np.ndarray) -> None:
    assert actual.dtype == expected.dtype and actual.shape == expected.shape
    np.testing.assert_allclose(actual, expected, rtol=0, atol=_tolerance(expected))


def _aligned(vectors: np.ndarray, reference: np.ndarray, axis: int = -2) -> np.ndarray:
    """``vectors`` with each column (``axis=-2``) or row (-1) turned to ``reference``'s
    sign or phase."""
    inner = np.sum(reference.conj() * vectors, axis=axis, keepdims=True)
    phase = np.where(np.abs(inner) > 0, inner / np.maximum(np.abs(inner), 1e-300), 1)
    return (vectors / phase).astype(vectors.dtype)


def _run(function, *args, targets: tuple[str, ...]):
    """heron's and jax's results (leaves), after checking jax lowers ``targets``."""
    hlo = lower(function, *args, platform="cpu").hlo_text
    for target in targets:
        assert f'custom_call_target="{target}"' in hlo, f"jax lowered no {target}"
    actual = _leaves(heron_jax.jit(function, backend="interpreter")(*args))
    expected = _leaves(jax.jit(function)(*args))
    assert len(actual) == len(expected)
    return actual, expected


def _conj_t(a: np.ndarray) -> np.ndarray:
    return np.swapaxes(a.conj(), -1, -2)


def _assert_small(residual: np.ndarray, operand: np.ndarray, factor: float = 64) -> None:
    """A residual within ``factor`` ulps (of the operand's type) of its largest magnitude
    or 1: what a backward-stable factorisation of these small matrices leaves."""
    eps = float(np.finfo(operand.dtype).eps)
    scale = max(1.0, float(np.max(np.abs(operand), initial=0.0)))
    assert np.max(np.abs(residual)) <= factor * eps * scale


parametrize_types = pytest.mark.parametrize("name", sorted(DTYPES))
parametrize_batches = pytest.mark.parametrize("batch", sorted(BATCHES))


@parametrize_batches
@parametrize_types
def test_eigh(name, batch):
    dtype, letter = DTYPES[name], LETTERS[name]
    a = _hermitian(np.random.default_rng(1), BATCHES[batch], 5, dtype)
    routine = "heevd" if letter in "cz" else "syevd"
    (w, v), (ew, ev) = _run(jnp.linalg.eigh, a, targets=(f"lapack_{letter}{routine}_ffi",))
    _close(w, ew)
    _close(_aligned(v, ev), ev)
    np.testing.assert_allclose(w, np.broadcast_to(np.arange(1.0, 6), w.shape), atol=1e-4)
    _assert_small(a @ v - v * w[..., None, :], a)
    (values,), (expected,) = _run(jnp.linalg.eigvalsh, a, targets=())
    _close(values, expected)


#: name -> (jnp.linalg.svd's keywords, operand rows, columns)
SVD_VARIANTS = {
    "full_tall": ({"full_matrices": True}, 6, 4),
    "reduced_wide": ({"full_matrices": False}, 4, 6),
    "values_only": ({"compute_uv": False}, 6, 4),
    # jax declares U and V^H at the reduced sizes when it asks for no vectors
    "values_only_wide_reduced": ({"compute_uv": False, "full_matrices": False}, 4, 6),
}


@pytest.mark.parametrize("variant", sorted(SVD_VARIANTS))
@parametrize_batches
@parametrize_types
def test_svd(name, batch, variant):
    dtype, letter = DTYPES[name], LETTERS[name]
    keywords, m, n = SVD_VARIANTS[variant]
    a = _well_conditioned(np.random.default_rng(2), BATCHES[batch], m, n, dtype)

    def svd(x):
        return jnp.linalg.svd(x, **keywords)

    actual, expected = _run(svd, a, targets=(f"lapack_{letter}gesdd_ffi",))
    if variant.startswith("values_only"):
        _close(actual[0], expected[0])
        spaced = np.broadcast_to([4.0, 3, 2, 1], actual[0].shape)
        np.testing.assert_allclose(actual[0], spaced, rtol=1e-4)
        return
    (u, s, vh), (eu, es, evh) = actual, expected
    _close(s, es)
    _close(_aligned(u, eu), eu)
    _close(_aligned(vh, evh, axis=-1), evh)
    k = min(m, n)
    _assert_small(u[..., :, :k] * s[..., None, :] @ vh[..., :k, :] - a, a)
    eye = np.eye(u.shape[-1])
    _assert_small(_conj_t(u) @ u - eye, a)


@pytest.mark.parametrize("name", ["f32", "c128"])
def test_svd_algorithm_qr_pinv_and_lstsq(name):
    dtype, letter = DTYPES[name], LETTERS[name]
    rng = np.random.default_rng(3)
    a = _well_conditioned(rng, (), 6, 4, dtype)
    b = _random(rng, (6, 2), dtype)

    def qr_svd(x):
        return lax.linalg.svd(x, algorithm=lax.linalg.SvdAlgorithm.QR)

    (u, s, vh), (eu, es, evh) = _run(qr_svd, a, targets=(f"lapack_{letter}gesvd_ffi",))
    _close(s, es)
    _close(_aligned(u, eu), eu)
    (p,), (ep,) = _run(jnp.linalg.pinv, a, targets=(f"lapack_{letter}gesdd_ffi",))
    _close(p, ep)
    actual, expected = _run(lambda x, y: jnp.linalg.lstsq(x, y), a, b, targets=())
    for got, want in zip(actual, expected, strict=True):
        if got.dtype.kind == "i":  # the rank
            np.testing.assert_array_equal(got, want)
        else:
            _close(got, want)


#: mode of jnp.linalg.qr -> (operand rows, columns, whether orgqr is called)
QR_MODES = {"reduced": (6, 4, True), "complete": (6, 4, True), "r": (4, 6, False)}


@pytest.mark.parametrize("mode", sorted(QR_MODES))
@parametrize_batches
@parametrize_types
def test_qr(name, batch, mode):
    dtype, letter = DTYPES[name], LETTERS[name]
    m, n, orgqr = QR_MODES[mode]
    a = _well_conditioned(np.random.default_rng(4), BATCHES[batch], m, n, dtype)
    targets = [f"lapack_{letter}geqrf_ffi"]
    if orgqr:
        targets.append(f"lapack_{letter}{'ungqr' if letter in 'cz' else 'orgqr'}_ffi")

    def qr(x):
        return jnp.linalg.qr(x, mode=mode)

    actual, expected = _run(qr, a, targets=tuple(targets))
    for got, want in zip(actual, expected, strict=True):
        _close(got, want)  # Householder QR fixes the signs: no alignment
    if orgqr:
        q, r = actual
        _assert_small(q @ r - a, a)
        eye = np.eye(q.shape[-1])
        _assert_small(_conj_t(q) @ q - eye, a)


@pytest.mark.parametrize("vectors", ["right", "both", "none"])
@parametrize_batches
@parametrize_types
def test_eig(name, batch, vectors):
    dtype, letter = DTYPES[name], LETTERS[name]
    # a random Gaussian matrix: its eigenvalues are well apart for this seed, and a real
    # one has complex conjugate pairs, whose packed vectors LAPACK leaves to unpack
    a = _random(np.random.default_rng(5), (*BATCHES[batch], 5, 5), dtype)
    left, right = vectors == "both", vectors != "none"

    def eig(x):
        return lax.linalg.eig(x, compute_left_eigenvectors=left, compute_right_eigenvectors=right)

    actual, expected = _run(eig, a, targets=(f"lapack_{letter}geev_ffi",))
    w, *pairs = actual
    _close(w, expected[0])
    for got, want in zip(pairs, expected[1:], strict=True):
        _close(_aligned(got, want), want)
    if right:
        vr = pairs[-1]
        _assert_small(a @ vr - vr * w[..., None, :], a, factor=256)
    if left:
        vl = pairs[0]
        _assert_small(_conj_t(vl) @ a - w[..., :, None] * _conj_t(vl), a, factor=256)
    if letter in "sd":
        assert np.any(w.imag != 0)


@parametrize_types
def test_jnp_eig_and_eigvals(name):
    dtype, letter = DTYPES[name], LETTERS[name]
    a = _random(np.random.default_rng(6), (2, 4, 4), dtype)
    (w, v), (ew, ev) = _run(jnp.linalg.eig, a, targets=(f"lapack_{letter}geev_ffi",))
    _close(w, ew)
    _close(_aligned(v, ev), ev)
    (values,), (expected,) = _run(jnp.linalg.eigvals, a, targets=(f"lapack_{letter}geev_ffi",))
    _close(values, expected)


@parametrize_batches
@parametrize_types
def test_schur(name, batch):
    dtype, letter = DTYPES[name], LETTERS[name]
    a = _random(np.random.default_rng(7), (*BATCHES[batch], 5, 5), dtype)

    def schur(x):
        return lax.linalg.schur(x)  # batched; jax.scipy.linalg.schur takes one matrix

    (t, z), (et, ez) = _run(schur, a, targets=(f"lapack_{letter}gees_ffi",))
    _close(t, et)
    _close(z, ez)
    _assert_small(z @ t @ _conj_t(z) - a, a, factor=256)
    below = 2 if letter in "sd" else 1  # real Schur form: 2x2 blocks on the diagonal
    assert np.all(np.tril(t, -below) == 0)
    if not BATCHES[batch]:  # the public function, one matrix at a time
        actual, _ = _run(jsl.schur, a, targets=(f"lapack_{letter}gees_ffi",))
        _close(actual[0], et)
        _close(actual[1], ez)
    (t_only,), _ = _run(
        lambda x: lax.linalg.schur(x, compute_schur_vectors=False)[0], a[..., :, :], targets=()
    )
    _close(t_only, et)


@parametrize_batches
@parametrize_types
def test_hessenberg(name, batch):
    dtype, letter = DTYPES[name], LETTERS[name]
    a = _random(np.random.default_rng(8), (*BATCHES[batch], 5, 5), dtype)
    orgqr = "ungqr" if letter in "cz" else "orgqr"

    def hessenberg(x):
        return jnp.vectorize(
            lambda m: jsl.hessenberg(m, calc_q=True), signature="(n,n)->(n,n),(n,n)"
        )(x)

    (h, q), (eh, eq) = _run(
        hessenberg, a, targets=(f"lapack_{letter}gehrd_ffi", f"lapack_{letter}{orgqr}_ffi")
    )
    _close(h, eh)
    _close(q, eq)
    assert np.all(np.tril(h, -2) == 0)
    _assert_small(q @ h @ _conj_t(q) - a, a, factor=256)


@parametrize_batches
@parametrize_types
def test_tridiagonal_solve(name, batch):
    dtype, letter = DTYPES[name], LETTERS[name]
    rng = np.random.default_rng(9)
    shape = (*BATCHES[batch], 6)
    # diagonally dominant: |d| >= 4 against off-diagonals of about 1
    dl, du = _random(rng, shape, dtype), _random(rng, shape, dtype)
    d = (_random(rng, shape, dtype) + 4 * np.sign(_random(rng, shape, dtype).real)).astype(dtype)
    dl[..., 0], du[..., -1] = 0, 0
    b = _random(rng, (*shape, 3), dtype)
    (x,), (ex,) = _run(
        lax.linalg.tridiagonal_solve, dl, d, du, b, targets=(f"lapack_{letter}gtsv_ffi",)
    )
    _close(x, ex)
    product = d[..., None] * x
    product[..., 1:, :] += dl[..., 1:, None] * x[..., :-1, :]
    product[..., :-1, :] += du[..., :-1, None] * x[..., 1:, :]
    _assert_small(product - b, b, factor=256)


@parametrize_types
def test_tridiagonal_solve_of_one_row_and_a_singular_one(name):
    """One row is LAPACK's division (scipy's wrapper takes two rows or more); a zero
    diagonal is ?gtsv's info 1, which jax turns into NaNs, as it does for XLA:CPU."""
    dtype, letter = DTYPES[name], LETTERS[name]
    d = np.array([[4.0], [0.0], [-2.0]], dtype)
    b = np.array([[[2.0, 8.0]], [[1.0, 2.0]], [[3.0, 5.0]]], dtype)
    zeros = np.zeros_like(d)
    (x,), (ex,) = _run(
        lax.linalg.tridiagonal_solve, zeros, d, zeros, b, targets=(f"lapack_{letter}gtsv_ffi",)
    )
    np.testing.assert_array_equal(x, ex)
    np.testing.assert_array_equal(x[0], b[0] / 4)
    assert np.isnan(x[1]).all()


def test_a_singular_tridiagonal_system_is_nan_as_in_jax():
    dl = np.array([0.0, 0.0, 1.0], np.float32)
    d = np.array([0.0, 1.0, 1.0], np.float32)  # the first column is zero: info 1
    du = np.array([1.0, 1.0, 0.0], np.float32)
    b = np.ones((3, 1), np.float32)
    (x,), (ex,) = _run(lax.linalg.tridiagonal_solve, dl, d, du, b, targets=("lapack_sgtsv_ffi",))
    assert np.isnan(ex).all()
    np.testing.assert_array_equal(x, ex)


@pytest.mark.parametrize("name", ["f64", "c64"])
def test_pivoted_qr_qr_multiply_and_tridiagonal(name):
    dtype, letter = DTYPES[name], LETTERS[name]
    rng = np.random.default_rng(10)
    a = _random(rng, (6, 4), dtype)
    c = _random(rng, (6,), dtype)
    actual, expected = _run(
        lambda x: jsl.qr(x, pivoting=True), a, targets=(f"lapack_{letter}geqp3_ffi",)
    )
    for got, want in zip(actual, expected, strict=True):
        _close(got, want) if got.dtype.kind != "i" else np.testing.assert_array_equal(got, want)
    routine = "unmqr" if letter in "cz" else "ormqr"
    actual, expected = _run(
        lambda x, y: jsl.qr_multiply(x, y), a, c, targets=(f"lapack_{letter}{routine}_ffi",)
    )
    for got, want in zip(actual, expected, strict=True):
        _close(got, want)
    h = _hermitian(rng, (), 5, dtype)
    routine = "hetrd" if letter in "cz" else "sytrd"
    actual, expected = _run(
        lambda x: lax.linalg.tridiagonal(x, lower=False),
        h,
        targets=(f"lapack_{letter}{routine}_ffi",),
    )
    for got, want in zip(actual, expected, strict=True):
        _close(got, want)


# --- the host implementations alone: flags jax never writes are refused by name ---


def test_every_routine_is_registered_for_every_type():
    assert len(TARGETS) == 12 * 4
    assert {
        "lapack_ssyevd_ffi",
        "lapack_zheevd_ffi",
        "lapack_cungqr_ffi",
        "lapack_dgees_ffi",
    } <= set(TARGETS)
    assert set(TARGETS) <= set(default_custom_calls().targets())  # through the entry point


def test_a_sorted_schur_form_is_refused_by_name():
    a = np.eye(3)
    with pytest.raises(CustomCallError, match="sort 'S'"):
        gees((a,), ffi_call("lapack_dgees_ffi", "{mode = 86 : ui8, sort = 83 : ui8}"))


def test_unknown_flags_and_another_type_are_refused():
    a = np.eye(3, dtype=np.float32)
    with pytest.raises(CustomCallError, match="mode 88"):
        syevd((a,), ffi_call("lapack_ssyevd_ffi", "{mode = 88 : ui8, uplo = 76 : ui8}"))
    with pytest.raises(CustomCallError, match="has no uplo"):
        syevd((a,), ffi_call("lapack_ssyevd_ffi", "{mode = 86 : ui8}"))
    with pytest.raises(CustomCallError, match="float64"):
        syevd((a,), ffi_call("lapack_dsyevd_ffi", "{mode = 86 : ui8, uplo = 76 : ui8}"))
    with pytest.raises(CustomCallError, match="low 0"):
        gehrd((a,), ffi_call("lapack_sgehrd_ffi", "{high = 3 : i32, low = 0 : i32}"))
