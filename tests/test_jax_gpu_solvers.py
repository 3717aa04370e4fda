"""jax's linear algebra lowered for a GPU, run by heron on the host (heron.jax.gpu_solvers).

``heron.jax.jit(f, backend="cuda")`` lowers with jax for CUDA, so ``jnp.linalg``
arrives as cuSOLVER custom calls (``cusolver_potrf_ffi``, ``cusolver_getrf_ffi``,
``cu_lu_pivots_to_permutation``, ``cusolver_geqrf_ffi``, ``cusolver_orgqr_ffi``,
``cusolver_syevd_ffi``, ``cusolver_gesvdj_ffi``, ...) and HLO's
``triangular-solve`` (heron's ``__heron$triangular_solve``), and for ROCm as the
``hipsolver_`` ones. Each function is lowered for the GPU platform here (no GPU
needed), compiled by heron for the interpreter and run by the thunk executor
(the host calls between device copies), and compared with ``jax.jit`` on the CPU
(LAPACK) on batched inputs of every type jax lowers them for.

Tolerances, relative to the largest entry: 2e-4 for f32 and c64, 1e-10 for f64
and c128. Cholesky and LU are LAPACK's in the operand's type (heron.jax.lapack); QR,
eigh and SVD are numpy's LAPACK in double rounded to the operand's type, while
jax's CPU calls compute single precision in single (measured: QR 5e-7 and 3e-16,
eigh 4e-6 and 1e-15, SVD 2.4e-5 and 2e-15, the largest the 40x34 economic SVD).
Eigenvectors and singular vectors are compared after aligning each column's sign
(phase, complex), which LAPACK and cuSOLVER each choose their own way.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from heron_test_support.jax_config import jax_x64
from heron_test_support.jax_runs import run_on_heron

from heron.hlo.errors import HloError
from heron.hlo.plugin_loading import PluginError
from heron.jax.devices import open_device
from heron.jax.lowering import lower

DTYPES = {"f32": np.float32, "f64": np.float64, "c64": np.complex64, "c128": np.complex128}


@pytest.fixture(autouse=True)
def x64():
    """f64 and c128 need jax_enable_x64 (a global other suites set either way)."""
    with jax_x64(True):
        yield


@pytest.fixture(scope="module")
def device():
    return open_device("interpreter")[1]


def targets_of(platform: str, function, *args) -> set[str]:
    text = lower(function, *args, platform=platform).hlo_text
    return {
        part.split('"')[1] for part in text.split("custom_call_target=")[1:] if part.startswith('"')
    }


def _random(rng, shape, dtype):
    a = rng.standard_normal(shape)
    if np.issubdtype(dtype, np.complexfloating):
        a = a + 1j * rng.standard_normal(shape)
    return a.astype(dtype)


def _hermitian(rng, batch, n, dtype):
    a = _random(rng, (*batch, n, n), dtype)
    return (a @ np.swapaxes(a.conj(), -1, -2) + n * np.eye(n)).astype(dtype)


def _tolerance(dtype) -> float:
    return 2e-4 if np.finfo(dtype).bits <= 32 else 1e-10


def _close(actual, expected, dtype, scale: float = 1.0) -> None:
    actual, expected = np.asarray(actual), np.asarray(expected)
    assert actual.shape == expected.shape and actual.dtype == expected.dtype
    atol = _tolerance(dtype) * max(scale, float(np.max(np.abs(expected), initial=1.0)))
    np.testing.assert_allclose(actual, expected, rtol=_tolerance(dtype), atol=atol)


def _aligned(vectors: np.ndarray, reference: np.ndarray) -> np.ndarray:
    """``vectors`` with each column's sign (phase) turned to ``reference``'s."""
    inner = np.sum(reference.conj() * vectors, axis=-2, keepdims=True)
    phase = np.where(np.abs(inner) > 0, inner / np.maximum(np.abs(inner), 1e-300), 1)
    return (vectors / phase).astype(vectors.dtype)


#: name -> (function, operand shape (batch of 2), expected targets for cuda)
FACTORIZATIONS = {
    "cholesky": (jnp.linalg.cholesky, "hermitian", {"cusolver_potrf_ffi"}),
    "det": (jnp.linalg.det, (2, 5, 5), {"cusolver_getrf_ffi"}),
    "slogdet": (lambda a: tuple(jnp.linalg.slogdet(a)), (2, 5, 5), {"cusolver_getrf_ffi"}),
    "lu": (
        jax.lax.linalg.lu,
        (2, 6, 4),
        {"cusolver_getrf_ffi", "cu_lu_pivots_to_permutation"},
    ),
    "qr_tall": (jnp.linalg.qr, (2, 6, 4), {"cusolver_geqrf_ffi", "cusolver_orgqr_ffi"}),
    "qr_wide": (jnp.linalg.qr, (2, 4, 6), {"cusolver_geqrf_ffi", "cusolver_orgqr_ffi"}),
    "qr_complete": (
        lambda a: jnp.linalg.qr(a, mode="complete"),
        (2, 6, 4),
        {"cusolver_geqrf_ffi", "cusolver_orgqr_ffi"},
    ),
    "qr_r": (lambda a: jnp.linalg.qr(a, mode="r"), (2, 6, 4), {"cusolver_geqrf_ffi"}),
    "eigvalsh": (jnp.linalg.eigvalsh, "hermitian", {"cusolver_syevd_ffi"}),
    "svdvals": (lambda a: jnp.linalg.svd(a, compute_uv=False), (2, 6, 4), {"cusolver_gesvdj_ffi"}),
    "pinv": (jnp.linalg.pinv, (2, 4, 6), {"cusolver_gesvdj_ffi"}),
    # LU then HLO triangular-solves (heron's __heron$triangular_solve, on the host)
    "solve": (
        lambda a: jnp.linalg.solve(a, a[..., :2] + 1),
        "well-posed",
        {"cusolver_getrf_ffi", "cu_lu_pivots_to_permutation"},
    ),
    "inv": (jnp.linalg.inv, "well-posed", {"cusolver_getrf_ffi", "cu_lu_pivots_to_permutation"}),
    "solve_triangular": (
        lambda a: jax.scipy.linalg.solve_triangular(a, a[..., :3], lower=True, trans=2),
        "well-posed",
        set(),
    ),
}


def _operand(shape, dtype, seed: int = 1):
    rng = np.random.default_rng(seed)
    if shape == "hermitian":
        return _hermitian(rng, (2,), 5, dtype)
    if shape == "well-posed":
        return (_random(rng, (2, 5, 5), dtype) + 5 * np.eye(5)).astype(dtype)
    return _random(rng, shape, dtype)


@pytest.mark.parametrize("dtype", sorted(DTYPES), ids=str)
@pytest.mark.parametrize("name", sorted(FACTORIZATIONS))
def test_a_factorization_lowered_for_cuda_equals_jax_on_the_cpu(device, name, dtype):
    function, shape, targets = FACTORIZATIONS[name]
    a = _operand(shape, DTYPES[dtype])
    assert targets_of("cuda", function, a) == targets  # what heron now runs on the host
    expected = jax.tree_util.tree_leaves(jax.jit(function)(a))
    actual = jax.tree_util.tree_leaves(run_on_heron(device, "cuda", function, a))
    assert len(actual) == len(expected)
    for got, want in zip(actual, expected, strict=True):
        if np.issubdtype(np.asarray(want).dtype, np.integer):
            np.testing.assert_array_equal(got, want)  # LU's pivots and permutation
        else:
            _close(got, want, DTYPES[dtype])


@pytest.mark.parametrize("name", sorted(FACTORIZATIONS))
def test_rocm_lowers_to_the_same_calls_as_hipsolver_ones(device, name):
    function, shape, targets = FACTORIZATIONS[name]
    a = _operand(shape, np.float32)
    assert targets_of("rocm", function, a) == {
        t.replace("cusolver_", "hipsolver_").replace("cu_", "hip_") for t in targets
    }
    expected = jax.tree_util.tree_leaves(jax.jit(function)(a))
    actual = jax.tree_util.tree_leaves(run_on_heron(device, "rocm", function, a))
    for got, want in zip(actual, expected, strict=True):
        _close(got, want, np.float32)


@pytest.mark.parametrize("platform", ["cuda", "rocm"])
@pytest.mark.parametrize("dtype", sorted(DTYPES), ids=str)
def test_eigh_equals_jax_up_to_each_eigenvectors_sign(device, platform, dtype):
    a = _hermitian(np.random.default_rng(2), (3,), 6, DTYPES[dtype])
    w_cpu, v_cpu = jax.jit(jnp.linalg.eigh)(a)
    w, v = run_on_heron(device, platform, jnp.linalg.eigh, a)
    _close(w, w_cpu, DTYPES[dtype])
    _close(_aligned(np.asarray(v), np.asarray(v_cpu)), v_cpu, DTYPES[dtype])
    reconstructed = np.asarray(v) @ (np.asarray(w)[..., None] * np.swapaxes(np.conj(v), -1, -2))
    _close(reconstructed.astype(a.dtype), a, DTYPES[dtype])


#: name -> (shape, keyword arguments of jnp.linalg.svd): gesvdj's full path (jax slices
#: U and V for full_matrices=False up to 32 columns) and its economic one beyond.
SVDS = {
    "tall_full": ((2, 6, 4), {}),
    "wide_thin": ((2, 4, 6), {"full_matrices": False}),
    "square": ((2, 5, 5), {}),
    "economic": ((2, 40, 34), {"full_matrices": False}),
}


@pytest.mark.parametrize("dtype", sorted(DTYPES), ids=str)
@pytest.mark.parametrize("name", sorted(SVDS))
def test_svd_equals_jax_up_to_each_singular_vectors_sign(device, name, dtype):
    shape, keywords = SVDS[name]
    a = _random(np.random.default_rng(4), shape, DTYPES[dtype])
    svd = lambda m: jnp.linalg.svd(m, **keywords)  # noqa: E731
    assert targets_of("cuda", svd, a) == {"cusolver_gesvdj_ffi"}
    u_cpu, s_cpu, vt_cpu = (np.asarray(x) for x in jax.jit(svd)(a))
    u, s, vt = (np.asarray(x) for x in run_on_heron(device, "cuda", svd, a))
    k = s.shape[-1]
    _close(s, s_cpu, DTYPES[dtype])
    # the first k columns of U and rows of V^H are determined up to a common phase
    aligned_u = _aligned(u[..., :k], u_cpu[..., :k])
    _close(aligned_u, u_cpu[..., :k], DTYPES[dtype])
    v = np.swapaxes(vt.conj(), -1, -2)[..., :k]
    v_cpu = np.swapaxes(vt_cpu.conj(), -1, -2)[..., :k]
    inner = np.sum(u_cpu[..., :k].conj() * u[..., :k], axis=-2, keepdims=True)
    phase = inner / np.abs(inner)  # U's phase is V's: A = U S V^H
    _close((v / phase).astype(v.dtype), v_cpu, DTYPES[dtype])
    assert u.shape == u_cpu.shape and vt.shape == vt_cpu.shape
    gram = np.swapaxes(u.conj(), -1, -2) @ u  # U's columns orthonormal, the full ones too
    _close(gram, np.broadcast_to(np.eye(gram.shape[-1]), gram.shape).astype(u.dtype), DTYPES[dtype])


#: the SVD algorithms jax takes explicitly: gesvd (its default beyond 1024 columns; for
#: m < n with transposed layouts), gesvdp, and ROCm's gesdd.
ALGORITHMS = {
    "gesvd_tall": ("cuda", jax.lax.linalg.SvdAlgorithm.QR, (2, 6, 4), "cusolver_gesvd_ffi"),
    "gesvd_wide": ("cuda", jax.lax.linalg.SvdAlgorithm.QR, (2, 4, 6), "cusolver_gesvd_ffi"),
    "gesvdp": ("cuda", jax.lax.linalg.SvdAlgorithm.POLAR, (2, 6, 4), "cusolver_gesvdp_ffi"),
    "gesdd": (
        "rocm",
        jax.lax.linalg.SvdAlgorithm.DIVIDE_AND_CONQUER,
        (2, 4, 6),
        "hipsolver_gesdd_ffi",
    ),
}


@pytest.mark.parametrize("compute_uv", [True, False], ids=["uv", "values"])
@pytest.mark.parametrize("name", sorted(ALGORITHMS))
def test_every_svd_algorithm_gives_the_factorization(device, name, compute_uv):
    platform, algorithm, shape, target = ALGORITHMS[name]
    a = _random(np.random.default_rng(5), shape, np.complex128)

    def svd(m):
        return jax.lax.linalg.svd(m, full_matrices=True, compute_uv=compute_uv, algorithm=algorithm)

    assert target in targets_of(platform, svd, a)
    expected = np.linalg.svd(a, compute_uv=False)
    if not compute_uv:
        _close(run_on_heron(device, platform, svd, a), expected, np.complex128)
        return
    u, s, vt = (np.asarray(x) for x in run_on_heron(device, platform, svd, a))
    _close(s, expected, np.complex128)
    k = s.shape[-1]
    product = (u[..., :k] * s[..., None, :]) @ vt[..., :k, :]
    _close(product, a, np.complex128)
    assert u.shape == (*shape[:-1], shape[-2]) and vt.shape == (*shape[:-2], shape[-1], shape[-1])


@pytest.mark.parametrize("platform", ["cuda", "rocm"])
def test_a_matrix_that_is_not_positive_definite_is_nan_as_in_jax(device, platform):
    a = np.array([[[4.0, 2.0], [2.0, -1.0]], [[4.0, 2.0], [2.0, 3.0]]], np.float32)
    expected = np.asarray(jax.jit(jnp.linalg.cholesky)(a))
    actual = np.asarray(run_on_heron(device, platform, jnp.linalg.cholesky, a))
    assert np.isnan(expected[0][np.tril_indices(2)]).all() and not np.isnan(expected[1]).any()
    np.testing.assert_array_equal(np.isnan(actual), np.isnan(expected))  # the failed one only
    _close(actual[1], expected[1], np.float32)


def test_a_singular_matrix_has_jax_s_determinant_lu_and_solution(device):
    a = np.array([[[1.0, 2.0], [2.0, 4.0]], [[0.0, 0.0], [0.0, 0.0]]])
    functions = (
        jnp.linalg.det,
        lambda m: tuple(jnp.linalg.slogdet(m)),
        jax.lax.linalg.lu,
        jnp.linalg.inv,
        lambda m: jnp.linalg.solve(m, np.ones((2, 2, 1))),
    )
    for function in functions:
        expected = jax.tree_util.tree_leaves(jax.jit(function)(a))
        actual = jax.tree_util.tree_leaves(run_on_heron(device, "cuda", function, a))
        for got, want in zip(actual, expected, strict=True):
            # 0, -inf, the zero pivots kept; inv and solve divide by them: inf and NaN
            np.testing.assert_array_equal(got, want)


def test_a_gpu_call_heron_does_not_provide_is_refused_by_name(device):
    # tridiagonal_solve(perturb_singular=True) is jaxlib's own kernel (not LAPACK's):
    # no installed plugin provides it, and the compile says which target.
    v, b = np.ones(4, np.float32), np.ones((4, 1), np.float32)

    def solve(*operands):
        return jax.lax.linalg.tridiagonal_solve(*operands, perturb_singular=True)

    assert targets_of("cuda", solve, v, v, v, b) == {"cu_tridiagonal_solve_perturbed"}
    with pytest.raises((HloError, PluginError), match="cu_tridiagonal_solve_perturbed"):
        run_on_heron(device, "cuda", solve, v, v, v, b)
