"""jax's linear algebra through heron: its CPU LAPACK calls run on the host (heron.jax.lapack).

heron lowers with jax on the CPU, so ``jnp.linalg.cholesky``, ``solve``, ``inv``,
``det`` and ``solve_triangular`` are the custom calls ``lapack_?potrf_ffi``,
``lapack_?getrf_ffi`` and ``lapack_?trsm_ffi``; heron-jax provides those targets
in the ``heron.custom_calls`` group. ``heron.jax.jit`` on the interpreter (the
executor's host calls between device copies) is compared with ``jax.jit`` on the
CPU (LAPACK itself), and the implementations alone with numpy.
"""

from __future__ import annotations

from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from heron_test_support.custom_calls import ffi_call
from heron_test_support.jax_config import jax_x64

import heron.jax as heron_jax
from heron.hlo.custom_calls.call import CustomCall, CustomCallError
from heron.hlo.evaluator import evaluate_module
from heron.jax.lapack import cholesky_factor, getrf, lu_factor, potrf, trsm


@pytest.fixture
def x64(request):
    """Other suites in the same process turn jax_enable_x64 on or off (a global)."""
    with jax_x64(request.param) as enabled:
        yield enabled


def _spd(rng, batch, n, dtype):
    a = rng.standard_normal((*batch, n, n)).astype(dtype)
    if np.issubdtype(dtype, np.complexfloating):
        a = a + 1j * rng.standard_normal((*batch, n, n)).astype(dtype)
    return (a @ np.swapaxes(a.conj(), -1, -2) + n * np.eye(n)).astype(dtype)


@pytest.mark.parametrize("x64", [False, True], indirect=True, ids=["f32", "f64"])
@pytest.mark.parametrize("batch", [(), (3,)], ids=["one", "batched"])
def test_cholesky_equals_jax_on_the_cpu(x64, batch):
    dtype = np.float64 if x64 else np.float32
    a = _spd(np.random.default_rng(len(batch)), batch, 5, dtype)
    factor = lambda m: jnp.linalg.cholesky(m)  # noqa: E731
    expected = np.asarray(jax.jit(factor)(a))
    actual = np.asarray(heron_jax.jit(factor, backend="interpreter")(a))
    assert actual.dtype == expected.dtype
    np.testing.assert_array_equal(actual, expected)  # jax's own LAPACK: bit for bit
    assert np.allclose(np.tril(actual), actual)  # jax masks the other triangle


@pytest.mark.parametrize("x64", [False], indirect=True, ids=["f32"])
def test_a_matrix_that_is_not_positive_definite_is_nan_as_in_jax(x64):
    a = np.array([[4.0, 2.0], [2.0, -1.0]], np.float32)
    expected = np.asarray(jax.jit(jnp.linalg.cholesky)(a))
    actual = np.asarray(heron_jax.jit(jnp.linalg.cholesky, backend="interpreter")(a))
    assert np.isnan(expected[np.tril_indices(2)]).all()  # jax: NaN where info says it failed
    np.testing.assert_array_equal(actual, expected)  # NaNs in the same places


def _call(target: str, uplo: int) -> CustomCall:
    return ffi_call(target, f"{{uplo = {uplo} : ui8}}", instruction="cholesky")


@pytest.mark.parametrize("target", ["lapack_dpotrf_ffi", "lapack_zpotrf_ffi"])
@pytest.mark.parametrize("uplo", [ord("L"), ord("U")], ids=["lower", "upper"])
def test_the_factor_is_lapacks_with_the_other_triangle_kept(target, uplo):
    dtype = np.float64 if target == "lapack_dpotrf_ffi" else np.complex128
    a = _spd(np.random.default_rng(7), (2,), 6, dtype)
    factors, infos = potrf((a,), _call(target, uplo))
    assert infos.tolist() == [0, 0] and factors.dtype == dtype
    for matrix, factor in zip(a, factors, strict=True):
        if uplo == ord("L"):
            triangle = np.tril(factor)
            np.testing.assert_allclose(triangle @ triangle.conj().T, matrix, rtol=1e-12)
            np.testing.assert_array_equal(np.triu(factor, 1), np.triu(matrix, 1))
            np.testing.assert_allclose(triangle, np.linalg.cholesky(matrix), rtol=1e-12)
        else:
            triangle = np.triu(factor)
            np.testing.assert_allclose(triangle.conj().T @ triangle, matrix, rtol=1e-12)
            np.testing.assert_array_equal(np.tril(factor, -1), np.tril(matrix, -1))


def test_info_names_the_first_minor_that_is_not_positive_definite():
    a = np.diag([4.0, 1.0, -2.0, 3.0])
    _, info = cholesky_factor(a, lower=True)
    assert info == 3
    factor, info = cholesky_factor(np.diag([1.0, np.nan]), lower=True)
    assert info == 0 and np.isnan(factor[1, 1])  # LAPACK's: a NaN goes through, unflagged


def test_a_wrong_operand_is_refused_by_name():
    named = r"custom-call 'cholesky' in computation 'main' \(custom_call_target 'lapack_"
    with pytest.raises(CustomCallError, match=named + r"spotrf_ffi'\): takes float32 matrices"):
        potrf((np.eye(2),), _call("lapack_spotrf_ffi", ord("L")))
    with pytest.raises(CustomCallError, match="square matrices, not \\[2, 3\\]"):
        potrf((np.zeros((2, 3), np.float64),), _call("lapack_dpotrf_ffi", ord("L")))
    with pytest.raises(CustomCallError, match="uplo 1 is none of .L. \\(76\\), .U. \\(85\\)"):
        potrf((np.eye(2),), _call("lapack_dpotrf_ffi", 1))


#: name -> (function of (a, b), whether b is used)
SOLVERS = {
    "solve": lambda a, b: jnp.linalg.solve(a, b),
    "inv": lambda a, b: jnp.linalg.inv(a),
    "det": lambda a, b: jnp.linalg.det(a),
    "slogdet": lambda a, b: jnp.linalg.slogdet(a)[1],
    "lower": lambda a, b: jax.scipy.linalg.solve_triangular(a, b, lower=True),
    "upper_transposed_unit": lambda a, b: jax.scipy.linalg.solve_triangular(
        a, b, lower=False, trans=1, unit_diagonal=True
    ),
    "right_side": lambda a, b: jax.lax.linalg.triangular_solve(
        a, b.T, left_side=False, lower=True, transpose_a=True
    ),
}


@pytest.mark.parametrize("x64", [False, True], indirect=True, ids=["f32", "f64"])
@pytest.mark.parametrize("name", sorted(SOLVERS))
def test_lu_and_triangular_solves_equal_jax_on_the_cpu(x64, name):
    dtype = np.float64 if x64 else np.float32
    rng = np.random.default_rng(3)
    a = (rng.standard_normal((2, 5, 5)) + 5 * np.eye(5)).astype(dtype)
    b = rng.standard_normal((2, 5, 3)).astype(dtype)
    function = jax.vmap(SOLVERS[name])  # a batch of two: num_batch_dims 1
    expected = np.asarray(jax.jit(function)(a, b))
    actual = np.asarray(heron_jax.jit(function, backend="interpreter")(a, b))
    if name in ("det", "slogdet"):  # a product of the diagonal, in each compiler's order
        np.testing.assert_allclose(actual, expected, rtol=4 * np.finfo(dtype).eps)
    else:
        np.testing.assert_array_equal(actual, expected)  # jax's own LAPACK and BLAS


@pytest.mark.parametrize("x64", [False, True], indirect=True, ids=["f32", "f64"])
@pytest.mark.parametrize("n", [4, 6, 32])
def test_a_singular_matrix_has_the_exact_zero_pivot_lapack_leaves(x64, n):
    """heron's unblocked LU left 1.1e-16 where LAPACK's FMA leaves 0, so slogdet of a
    singular matrix was finite on heron and -inf on XLA:CPU (the eighth library sweep).
    (jax computes the determinants of 2x2 and 3x3 matrices without an LU.)"""
    dtype = np.float64 if x64 else np.float32
    singular = np.arange(1.0, n * n + 1).reshape(n, n).astype(dtype)  # rank 2
    function = lambda a: jnp.stack(jnp.linalg.slogdet(a))  # noqa: E731
    expected = np.asarray(jax.jit(function)(singular))
    actual = np.asarray(heron_jax.jit(function, backend="interpreter")(singular))
    np.testing.assert_array_equal(actual, expected)
    assert actual.tolist() == [0.0, -np.inf]
    lu = np.asarray(heron_jax.jit(jax.lax.linalg.lu, backend="interpreter")(singular)[0])
    np.testing.assert_array_equal(lu, np.asarray(jax.jit(jax.lax.linalg.lu)(singular)[0]))


@pytest.mark.parametrize("target", ["lapack_cgetrf_ffi", "lapack_zgetrf_ffi"])
def test_complex_lu_equals_lapack_bit_for_bit(target):
    import scipy.linalg.lapack as lapack

    dtype = np.complex64 if target == "lapack_cgetrf_ffi" else np.complex128
    rng = np.random.default_rng(5)
    a = (rng.standard_normal((2, 7, 5)) + 1j * rng.standard_normal((2, 7, 5))).astype(dtype)
    factors, pivots, infos = getrf((a,), ffi_call(target, "{}", instruction="lu"))
    for index in range(2):
        lu, piv, info = getattr(lapack, target[7] + "getrf")(a[index])
        np.testing.assert_array_equal(factors[index], lu)
        assert pivots[index].tolist() == (piv + 1).tolist() and infos[index] == info


def test_cho_solve_on_a_runtime_is_the_evaluator_s_bit_for_bit():
    """The factor reaches the solves transposed ({0,1} buffers on a runtime, row-major
    arrays in the evaluator); numpy's products inside the host implementations summed
    in other orders by stride, and heron run --check found 3 of 8 elements 3 ulps off."""
    function = lambda a, b: jax.scipy.linalg.cho_solve(jax.scipy.linalg.cho_factor(a), b)  # noqa: E731
    rng = np.random.default_rng(7)
    differing = []
    with jax_x64(False):
        compiled = heron_jax.jit(function, backend="interpreter")
        for draw in range(4):  # (each of 8 such draws differed)
            a = _spd(rng, (), 16, np.float32)
            b = rng.standard_normal((16, 4)).astype(np.float32)
            expected = evaluate_module(heron_jax.lower(function, a, b).module, [a, b])
            if np.asarray(compiled(a, b)).tobytes() != np.asarray(expected).tobytes():
                differing.append(draw)
    assert differing == []


def test_lu_pivots_on_the_first_largest_entry_and_reports_a_zero_pivot():
    a = np.array([[1.0, 2.0, 3.0], [-4.0, 1.0, 0.0], [4.0, 0.0, 1.0]])
    lu, pivots, info = lu_factor(a)
    assert pivots.tolist()[0] == 2 and info == 0  # |-4| first, though |4| ties it
    lower, upper = np.tril(lu, -1) + np.eye(3), np.triu(lu)
    permuted = a.copy()
    for j, p in enumerate(pivots - 1):
        permuted[[j, p]] = permuted[[p, j]]
    np.testing.assert_allclose(lower @ upper, permuted, rtol=1e-12, atol=1e-12)
    _, _, info = lu_factor(np.array([[1.0, 2.0], [2.0, 4.0]]))
    assert info == 2
    complex_column = np.array([[1 + 0j, 0], [3 - 3j, 1], [4 + 1j, 2]])  # |re|+|im|: 6 > 5
    assert lu_factor(complex_column)[1][0] == 2


def test_a_triangular_solve_reads_only_its_triangle():
    a = np.array([[2.0, 99.0], [1.0, 4.0]])  # 99 lies outside the lower triangle
    b = np.array([[2.0], [9.0]])
    call = _call("lapack_dtrsm_ffi", ord("L"))
    np.testing.assert_allclose(trsm((a, b), call), [[1.0], [2.0]])


def test_the_test_command_keeps_heron_jax_s_cache_out_of_the_home_directory():
    # issue 31: the LAPACK tests' heron.jax.jit wrote into ~/.cache/heron/jax
    from heron.jax.cache import default_cache_dir

    home = Path.home().resolve()
    assert not default_cache_dir().resolve().is_relative_to(home / ".cache")
