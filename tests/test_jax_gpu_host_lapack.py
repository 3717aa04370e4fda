"""jax's GPU calls that are LAPACK on the host, run by heron: eig, pivoted QR, ormqr,
tridiagonal reduction and solve, Cholesky update (heron.jax.gpu_eig, gpu_householder,
gpu_tridiagonal_solve, gpu_cholesky_update).

Each function is lowered for CUDA (or ROCm) as XLA:GPU gets it, compiled by heron
for the interpreter, run by the thunk executor, and compared with ``jax.jit`` on
the CPU, batched and not, in every type jax lowers it for. (The one call still
refused, the perturbed tridiagonal solve, is tests/test_jax_gpu_solvers.py's.)

Tolerances: none where heron calls the very LAPACK routine jax's CPU calls (eig's
``?geev``, ``?geqp3``, ``?ormqr``/``?unmqr``, ``?sytrd``/``?hetrd``, ``?gtsv``):
jaxlib takes its LAPACK from scipy, heron calls it through scipy in the operand's
type with the same workspace, and the HLO around the call is the same on both
sides, so the results are equal bit for bit (eigenvectors included: both sides
normalise as LAPACK does, unit 2-norm and the largest component real). Q of a
pivoted QR is heron's own ``orgqr`` (tests/test_jax_gpu_solvers.py: 2e-4 single,
1e-10 double, relative to the largest entry). The Cholesky update is jax's
rotation loop in numpy against XLA's compiled one (FMA contraction and fusion
move the last bits: measured 2.4e-7 single, 4.4e-16 double; allowed 1e-5, 1e-12).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from heron_test_support.custom_calls import ffi_call
from heron_test_support.jax_config import jax_x64
from heron_test_support.jax_runs import run_on_heron
from jax._src.lax import linalg as jax_linalg

from heron.hlo.custom_calls.call import CustomCallError
from heron.jax.devices import open_device
from heron.jax.gpu_cholesky_update import cholesky_update
from heron.jax.gpu_eig import hybrid_eig
from heron.jax.gpu_householder import geqp3, ormqr
from heron.jax.gpu_tridiagonal_solve import gtsv2
from heron.jax.lowering import lower

DTYPES = {"f32": np.float32, "f64": np.float64, "c64": np.complex64, "c128": np.complex128}
BATCHES = {"one": (), "batched": (3,)}


@pytest.fixture(autouse=True)
def x64():
    """f64 and c128 need jax_enable_x64 (a global other suites set either way)."""
    with jax_x64(True):
        yield


@pytest.fixture(scope="module")
def device():
    return open_device("interpreter")[1]


def _random(rng, shape, dtype):
    a = rng.standard_normal(shape)
    if np.issubdtype(dtype, np.complexfloating):
        a = a + 1j * rng.standard_normal(shape)
    return a.astype(dtype)


def _leaves(tree) -> list[np.ndarray]:
    return [np.asarray(leaf) for leaf in jax.tree_util.tree_leaves(tree)]


def _equal(function, platform: str, device, *args, target: str) -> list[np.ndarray]:
    """``function`` lowered for ``platform`` (naming ``target``) and run by heron equals
    ``jax.jit(function)`` on the CPU bit for bit, in dtype and shape too; heron's leaves."""
    actual = _leaves(run_on_heron(device, platform, function, *args, expect_in_hlo=target))
    expected = _leaves(jax.jit(function)(*args))
    assert len(actual) == len(expected)
    for got, want in zip(actual, expected, strict=True):
        assert got.dtype == want.dtype and got.shape == want.shape
        np.testing.assert_array_equal(got, want)
    return actual


# --- eig: ?hybrid_eig_real / ?hybrid_eig_comp, cusolver_geev_ffi ---

#: name -> (left, right) eigenvectors asked of jax.lax.linalg.eig
EIG_VECTORS = {"values": (False, False), "right": (False, True), "both": (True, True)}


def _check_eigenpairs(a, results, left: bool, right: bool, dtype) -> None:
    """What the results mean whatever their order: ``A vr = vr w``, ``vl^H A = w vl^H``,
    unit columns whose largest component is real (LAPACK's ``?geev`` normalisation)."""
    w, *vectors = results
    tolerance = 1e-4 if np.finfo(dtype).bits <= 32 else 1e-11
    pairs = []
    if left:
        pairs.append((vectors.pop(0), True))
    if right:
        pairs.append((vectors.pop(0), False))
    for v, is_left in pairs:
        if is_left:
            residual = np.swapaxes(v.conj(), -1, -2) @ a - w[..., :, None] * np.swapaxes(
                v.conj(), -1, -2
            )
        else:
            residual = a @ v - v * w[..., None, :]
        assert np.max(np.abs(residual)) < tolerance * max(1.0, np.max(np.abs(a)))
        np.testing.assert_allclose(np.linalg.norm(v, axis=-2), 1, atol=tolerance)
        largest = np.take_along_axis(v, np.argmax(np.abs(v), axis=-2)[..., None, :], axis=-2)
        assert np.max(np.abs(largest.imag)) < tolerance


@pytest.mark.parametrize("vectors", sorted(EIG_VECTORS))
@pytest.mark.parametrize("batch", sorted(BATCHES))
@pytest.mark.parametrize("dtype", sorted(DTYPES), ids=str)
@pytest.mark.parametrize("platform", ["cuda", "rocm"])
def test_eig_equals_jax_on_the_cpu(device, platform, dtype, batch, vectors):
    left, right = EIG_VECTORS[vectors]
    a = _random(np.random.default_rng(7), (*BATCHES[batch], 6, 6), DTYPES[dtype])
    kind = "comp" if np.issubdtype(a.dtype, np.complexfloating) else "real"
    target = {"cuda": "cu", "rocm": "hip"}[platform] + f"hybrid_eig_{kind}"

    def eig(m):
        return jax.lax.linalg.eig(
            m, compute_left_eigenvectors=left, compute_right_eigenvectors=right
        )

    results = _equal(eig, platform, device, a, target=target)
    _check_eigenpairs(a, results, left, right, DTYPES[dtype])
    if kind == "real":  # the random real matrix has complex conjugate pairs to unpack
        assert np.any(results[0].imag != 0)


def test_jnp_eig_and_eigvals_run_and_magma_on_is_the_same_contract(device):
    a = _random(np.random.default_rng(8), (2, 5, 5), np.float32)
    _equal(jnp.linalg.eig, "cuda", device, a, target="cuhybrid_eig_real")
    _equal(jnp.linalg.eigvals, "rocm", device, a, target="hiphybrid_eig_real")

    def magma(m):
        return jax.lax.linalg.eig(m, implementation=jax.lax.linalg.EigImplementation.MAGMA)

    assert 'magma = "on"' in lower(magma, a, platform="cuda").hlo_text
    # MAGMA is a GPU-only choice (jax's CPU refuses it): heron runs LAPACK, jax's default
    actual = _leaves(run_on_heron(device, "cuda", magma, a))
    for got, want in zip(actual, _leaves(jax.jit(jax.lax.linalg.eig)(a)), strict=True):
        np.testing.assert_array_equal(got, want)


def test_eig_of_a_matrix_with_nan_is_what_jax_makes_it(device):
    a = _random(np.random.default_rng(9), (2, 4, 4), np.float64)
    a[1, 2, 1] = np.nan
    results = _equal(jnp.linalg.eig, "cuda", device, a, target="cuhybrid_eig_real")
    assert np.isnan(results[0][1]).all() and not np.isnan(results[0][0]).any()


class _CusolverGeev:
    """What jax asks of ``cuda_versions`` to pick cuSOLVER's geev (11.7.1 or newer)."""

    @staticmethod
    def cusolver_get_version() -> int:
        return 11701


@pytest.mark.parametrize("batch", sorted(BATCHES))
@pytest.mark.parametrize("dtype", sorted(DTYPES), ids=str)
def test_cusolver_geev_equals_jax_on_the_cpu(device, monkeypatch, dtype, batch):
    # jax lowers eig to cusolver_geev_ffi where it finds cuSOLVER 11.7.1 (a CUDA
    # install); without one it lowers to the hybrid call, so the version is faked.
    monkeypatch.setattr(jax_linalg, "cuda_versions", _CusolverGeev)
    a = _random(np.random.default_rng(10), (*BATCHES[batch], 6, 6), DTYPES[dtype])
    results = _equal(jnp.linalg.eig, "cuda", device, a, target="cusolver_geev_ffi")
    _check_eigenpairs(a, results, False, True, DTYPES[dtype])


# --- pivoted QR: ?hybrid_geqp3 (+ ?solver_orgqr_ffi for Q) ---

QR_SHAPES = {"tall": (6, 4), "wide": (4, 6), "square": (5, 5)}


@pytest.mark.parametrize("mode", ["full", "economic"])
@pytest.mark.parametrize("shape", sorted(QR_SHAPES))
@pytest.mark.parametrize("batch", sorted(BATCHES))
@pytest.mark.parametrize("dtype", sorted(DTYPES), ids=str)
def test_pivoted_qr_equals_jax_on_the_cpu(device, dtype, batch, shape, mode):
    a = _random(np.random.default_rng(11), (*BATCHES[batch], *QR_SHAPES[shape]), DTYPES[dtype])

    def qr(m):
        return jax.scipy.linalg.qr(m, pivoting=True, mode=mode)

    platform = "rocm" if shape == "square" else "cuda"
    target = "hiphybrid_geqp3" if platform == "rocm" else "cuhybrid_geqp3"
    q, r, p = _leaves(run_on_heron(device, platform, qr, a, expect_in_hlo=target))
    q_cpu, r_cpu, p_cpu = _leaves(jax.jit(qr)(a))
    np.testing.assert_array_equal(p, p_cpu)  # LAPACK's pivots, 0-based
    np.testing.assert_array_equal(r, r_cpu)  # geqp3's R itself
    tolerance = 2e-4 if np.finfo(a.dtype).bits <= 32 else 1e-10
    np.testing.assert_allclose(q, q_cpu, rtol=tolerance, atol=tolerance)
    permuted = np.take_along_axis(a, np.broadcast_to(p[..., None, :], a.shape), axis=-1)
    k = min(QR_SHAPES[shape])
    np.testing.assert_allclose(q[..., :k] @ r[..., :k, :], permuted, atol=10 * tolerance)


@pytest.mark.parametrize("dtype", sorted(DTYPES), ids=str)
def test_geqp3_moves_fixed_columns_to_the_front_as_lapack(device, dtype):
    # jax.lax.linalg's geqp3 primitive takes jpvt: a nonzero entry fixes that column
    # (jax.scipy.linalg.qr passes zeros); tall and wide, some and all columns fixed.
    rng = np.random.default_rng(12)
    for shape, jpvt in (
        ((6, 4), [[0, 1, 0, 1], [1, 1, 1, 1]]),
        ((4, 6), [[0, 1, 0, 1, 0, 1], [1] * 5 + [0]]),
    ):
        a = _random(rng, (2, *shape), DTYPES[dtype])
        pivots = np.array(jpvt, np.int32)
        qr, columns, taus = (
            np.asarray(x) for x in run_on_heron(device, "cuda", jax_linalg.geqp3, a, pivots)
        )
        qr_cpu, columns_cpu, taus_cpu = (
            np.asarray(x) for x in jax.jit(jax_linalg.geqp3)(a, pivots)
        )
        np.testing.assert_array_equal(columns, columns_cpu)
        # LAPACK factors the fixed block inside geqp3, heron with geqrf and ormqr: the
        # same reflectors, rounded apart by a unit or two
        tolerance = 1e-5 if np.finfo(a.dtype).bits <= 32 else 1e-13
        np.testing.assert_allclose(qr, qr_cpu, rtol=tolerance, atol=tolerance)
        np.testing.assert_allclose(taus, taus_cpu, rtol=tolerance, atol=tolerance)
        assert (columns[0][:2] == [2, 4]).all()  # the fixed columns first, in order


# --- ormqr: ?solver_ormqr_ffi ---


@pytest.mark.parametrize("side", ["left", "right"])
@pytest.mark.parametrize("transpose", [False, True], ids=["q", "q_h"])
@pytest.mark.parametrize("batch", sorted(BATCHES))
@pytest.mark.parametrize("dtype", sorted(DTYPES), ids=str)
def test_ormqr_equals_jax_on_the_cpu(device, dtype, batch, transpose, side):
    rng = np.random.default_rng(13)
    batch_shape = BATCHES[batch]
    a = _random(rng, (*batch_shape, 6, 4), DTYPES[dtype])
    reflectors, taus = (
        np.asarray(x) for x in jax.jit(jnp.linalg.qr, static_argnames="mode")(a, mode="raw")
    )
    reflectors = np.swapaxes(reflectors, -1, -2)  # jnp's raw mode gives them transposed
    left = side == "left"
    c = _random(rng, (*batch_shape, 6, 3) if left else (*batch_shape, 3, 6), DTYPES[dtype])

    def multiply(h, t, m):
        return jax.lax.linalg.ormqr(h, t, m, left=left, transpose=transpose)

    _equal(multiply, "cuda", device, reflectors, taus, c, target="cusolver_ormqr_ffi")


@pytest.mark.parametrize("dtype", sorted(DTYPES), ids=str)
def test_qr_multiply_runs_its_ormqr(device, dtype):
    rng = np.random.default_rng(14)
    a, c = _random(rng, (5, 5), DTYPES[dtype]), _random(rng, (5,), DTYPES[dtype])
    function = jax.scipy.linalg.qr_multiply
    (product, r), (product_cpu, r_cpu) = (
        _leaves(run_on_heron(device, "rocm", function, a, c, expect_in_hlo="hipsolver_ormqr_ffi")),
        _leaves(jax.jit(function)(a, c)),
    )
    # geqrf is numpy's LAPACK in double (tests/test_jax_gpu_solvers.py's tolerances)
    tolerance = 2e-4 if np.finfo(a.dtype).bits <= 32 else 1e-10
    np.testing.assert_allclose(product, product_cpu, rtol=tolerance, atol=tolerance * 5)
    np.testing.assert_allclose(r, r_cpu, rtol=tolerance, atol=tolerance * 5)


# --- tridiagonal reduction: ?solver_sytrd_ffi ---


@pytest.mark.parametrize("lower", [True, False], ids=["lower", "upper"])
@pytest.mark.parametrize("batch", sorted(BATCHES))
@pytest.mark.parametrize("dtype", sorted(DTYPES), ids=str)
@pytest.mark.parametrize("platform", ["cuda", "rocm"])
def test_tridiagonal_equals_jax_on_the_cpu(device, platform, dtype, batch, lower):
    a = _random(np.random.default_rng(15), (*BATCHES[batch], 6, 6), DTYPES[dtype])
    a = np.triu(a) if lower else np.tril(a)  # the triangle not read: kept as given
    a = (a + np.swapaxes(a.conj(), -1, -2)).astype(a.dtype)
    a[..., 0, 5] += 1  # not Hermitian outside the triangle read: must not matter

    def reduce(m):
        return jax.lax.linalg.tridiagonal(m, lower=lower)

    target = {"cuda": "cusolver_sytrd_ffi", "rocm": "hipsolver_sytrd_ffi"}[platform]
    packed, d, e, taus = _equal(reduce, platform, device, a, target=target)
    # T = tridiag(e, d, e) has A's eigenvalues (read from the lower or upper triangle)
    t = np.zeros(a.shape, np.result_type(d.dtype, taus.dtype))
    n = a.shape[-1]
    t[..., range(n), range(n)] = d
    t[..., range(1, n), range(n - 1)] = e
    t[..., range(n - 1), range(1, n)] = e
    tolerance = 1e-4 if np.finfo(a.dtype).bits <= 32 else 1e-11
    expected = np.linalg.eigvalsh(a.astype(np.complex128), UPLO="L" if lower else "U")
    np.testing.assert_allclose(
        np.linalg.eigvalsh(t.astype(np.complex128)), expected, atol=tolerance * 10
    )


# --- tridiagonal solve: ?sparse_gtsv2_ffi ---


def _diagonals(rng, batch, m, dtype):
    dl, d, du = (_random(rng, (*batch, m), dtype) for _ in range(3))
    return dl, (d + 4).astype(dtype), du  # diagonally dominant: well posed


@pytest.mark.parametrize("batch", sorted(BATCHES))
@pytest.mark.parametrize("dtype", sorted(DTYPES), ids=str)
@pytest.mark.parametrize("platform", ["cuda", "rocm"])
def test_tridiagonal_solve_equals_jax_on_the_cpu(device, platform, dtype, batch):
    rng = np.random.default_rng(16)
    dl, d, du = _diagonals(rng, BATCHES[batch], 7, DTYPES[dtype])
    b = _random(rng, (*BATCHES[batch], 7, 3), DTYPES[dtype])  # three right-hand sides
    dl[..., 0], du[..., -1] = 99, -99  # outside the matrix: never read
    target = {"cuda": "cusparse_gtsv2_ffi", "rocm": "hipsparse_gtsv2_ffi"}[platform]
    (x,) = _equal(jax.lax.linalg.tridiagonal_solve, platform, device, dl, d, du, b, target=target)
    dense = np.zeros((*BATCHES[batch], 7, 7), b.dtype)
    dense[..., range(7), range(7)] = d
    dense[..., range(1, 7), range(6)] = dl[..., 1:]
    dense[..., range(6), range(1, 7)] = du[..., :-1]
    tolerance = 1e-4 if np.finfo(b.dtype).bits <= 32 else 1e-11
    np.testing.assert_allclose(dense @ x, b, atol=tolerance)


@pytest.mark.parametrize("dtype", sorted(DTYPES), ids=str)
def test_a_tridiagonal_solve_with_shared_diagonals_folds_the_batch_into_b(device, dtype):
    # vmap over b alone: jax's batching rule solves one [m, batch * nrhs] system
    rng = np.random.default_rng(17)
    dl, d, du = _diagonals(rng, (), 5, DTYPES[dtype])
    b = _random(rng, (4, 5, 2), DTYPES[dtype])
    solve = jax.vmap(jax.lax.linalg.tridiagonal_solve, in_axes=(None, None, None, 0))
    text = lower(solve, dl, d, du, b, platform="cuda").hlo_text
    assert "custom-call(" in text and "[5,8]" in text  # the folded right-hand sides
    _equal(solve, "cuda", device, dl, d, du, b, target="cusparse_gtsv2_ffi")


def test_a_singular_tridiagonal_system_is_nan_as_jax_makes_it_on_the_cpu(device):
    dl = np.array([[0, 1, 1, 1], [0, 1, 1, 1]], np.complex64)
    d = np.array([[0, 0, 0, 0], [4, 4, 4, 4]], np.complex64)
    du = np.array([[0, 0, 0, 0], [1, 1, 1, 0]], np.complex64)
    b = np.ones((2, 4, 2), np.complex64)
    (x,) = _equal(
        jax.lax.linalg.tridiagonal_solve, "cuda", device, dl, d, du, b, target="cusparse_gtsv2_ffi"
    )
    assert np.isnan(x[0].real).all() and np.isnan(x[0].imag).all() and np.isfinite(x[1]).all()


# --- rank-1 Cholesky update: cu_cholesky_update_ffi ---


@pytest.mark.parametrize("dtype", ["f32", "f64"])
def test_cholesky_update_equals_jax_on_the_cpu(device, dtype):
    # jax does not batch the update (and has it for f32 and f64 only)
    rng = np.random.default_rng(18)
    m = _random(rng, (6, 6), DTYPES[dtype])
    r = np.linalg.cholesky(m @ m.T + 6 * np.eye(6)).T.astype(m.dtype)
    w = _random(rng, (6,), DTYPES[dtype])
    w[2] = 0  # a row the rotation leaves alone
    update = jax.lax.linalg.cholesky_update
    actual = np.asarray(
        run_on_heron(device, "cuda", update, r, w, expect_in_hlo="cu_cholesky_update_ffi")
    )
    expected = np.asarray(jax.jit(update)(r, w))
    tolerance = 1e-5 if dtype == "f32" else 1e-12
    assert actual.dtype == expected.dtype
    np.testing.assert_allclose(actual, expected, rtol=tolerance, atol=tolerance)
    assert np.allclose(np.triu(actual), actual)
    np.testing.assert_allclose(actual.T @ actual, r.T @ r + np.outer(w, w), rtol=10 * tolerance)


# --- the host implementations refuse what jax never lowers, naming the call ---


def test_unsupported_operands_are_refused_naming_the_call():
    f16 = np.eye(3, dtype=np.float16)
    flags = '{left = false, magma = "auto", right = true}'
    with pytest.raises(CustomCallError, match="cuhybrid_eig_real.*float16"):
        hybrid_eig((f16,), ffi_call("cuhybrid_eig_real", flags))
    with pytest.raises(CustomCallError, match="cuhybrid_eig_real.*real matrices"):
        hybrid_eig((np.eye(3, dtype=np.complex64),), ffi_call("cuhybrid_eig_real", flags))
    with pytest.raises(CustomCallError, match='magma "gpu"'):
        hybrid_eig((np.eye(3),), ffi_call("cuhybrid_eig_real", flags.replace("auto", "gpu")))
    with pytest.raises(CustomCallError, match="cuhybrid_geqp3.*jpvt int64"):
        geqp3((np.eye(3), np.zeros(3, np.int64)), ffi_call("cuhybrid_geqp3", '{magma = "off"}'))
    with pytest.raises(CustomCallError, match="cusolver_ormqr_ffi.*do not fit"):
        ormqr(
            (np.eye(4), np.zeros(4), np.eye(3)),
            ffi_call("cusolver_ormqr_ffi", "{left = true, transpose = false}"),
        )
    with pytest.raises(CustomCallError, match=r"cusparse_gtsv2_ffi.*\[4\].*\[5, 2\]"):
        gtsv2((np.ones(4),) * 3 + (np.ones((5, 2)),), ffi_call("cusparse_gtsv2_ffi"))
    with pytest.raises(CustomCallError, match="cu_cholesky_update_ffi.*complex64"):
        cholesky_update(
            (np.eye(2, dtype=np.complex64), np.ones(2, np.complex64)),
            ffi_call("cu_cholesky_update_ffi"),
        )
    with pytest.raises(CustomCallError, match=r"cu_cholesky_update_ffi.*\[2, 3, 3\]"):
        cholesky_update((np.ones((2, 3, 3)), np.ones((2, 3))), ffi_call("cu_cholesky_update_ffi"))
