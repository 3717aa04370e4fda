"""jax's CPU sparse call, run by heron (heron.jax.cpu_sparse): ``BCSR @ x``.

``jax.experimental.sparse.BCSR`` lowered for the CPU makes a two-dimensional
``A @ x`` jax's typed-FFI call ``cpu_csr_sparse_dense_ffi``; heron ran every other
sparse product (BCOO's and batched BCSR's lower to plain HLO) but refused this one
by name (blackjax/numpyro hunts, issue 26's code nobody here wrote). Each case is
compared with ``jax.jit`` on the CPU: matrix-vector and matrix-matrix, every value
type jax sends (s32, f32, f64, c64; s64 and c128 the same code), rows without
entries, and the gradient through it (jax's transpose of a BCSR product is BCSR
too).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from heron_test_support.jax_config import jax_x64
from jax.experimental import sparse

import heron.jax as heron_jax
from heron.hlo.custom_calls.call import CustomCall, CustomCallError
from heron.hlo.element_types import ElementType
from heron.hlo.shapes import ArrayShape
from heron.jax.cpu_sparse import CSR_SPARSE_DENSE, csr_sparse_dense
from heron.jax.lowering import lower


def _matrix(rng, dtype, rows=6, cols=5):
    dense = rng.standard_normal((rows, cols)) * (rng.random((rows, cols)) < 0.4)
    dense[2] = 0  # a row without entries
    if np.issubdtype(dtype, np.complexfloating):
        dense = dense + 1j * dense[::-1]
    if np.issubdtype(dtype, np.integer):
        dense = np.round(dense * 7)
    return dense.astype(dtype)


def _operand(rng, shape, dtype):
    x = rng.standard_normal(shape)
    if np.issubdtype(dtype, np.integer):
        x = np.round(x * 5)
    return x.astype(dtype)


@pytest.mark.parametrize("dtype", ["int32", "float32", "float64", "complex64"])
@pytest.mark.parametrize("rhs", [(5,), (5, 3)], ids=["matvec", "matmat"])
def test_a_bcsr_product_equals_jax_s(dtype, rhs):
    rng = np.random.default_rng(3)
    with jax_x64(dtype == "float64"):
        a = sparse.BCSR.fromdense(_matrix(rng, np.dtype(dtype)))
        x = _operand(rng, rhs, np.dtype(a.dtype) if dtype != "complex64" else np.complex64)

        def product(data, indices, indptr, x):
            return sparse.BCSR((data, indices, indptr), shape=a.shape) @ x

        arguments = (a.data, a.indices, a.indptr, x)
        assert CSR_SPARSE_DENSE in lower(product, *arguments).hlo_text
        want = np.asarray(jax.jit(product)(*arguments))
        got = np.asarray(heron_jax.jit(product, backend="interpreter")(*arguments))
    assert got.dtype == want.dtype and got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)


def test_the_gradient_through_a_bcsr_product():
    rng = np.random.default_rng(4)
    a = sparse.BCSR.fromdense(_matrix(rng, np.float32))
    x = _operand(rng, (5,), np.float32)

    def loss(data, x):
        y = sparse.BCSR((data, a.indices, a.indptr), shape=a.shape) @ x
        return jnp.sum(jnp.tanh(y) ** 2)

    want = jax.jit(jax.grad(loss, argnums=(0, 1)))(a.data, x)
    got = heron_jax.jit(jax.grad(loss, argnums=(0, 1)), backend="interpreter")(a.data, x)
    for g, w in zip(got, want, strict=True):
        np.testing.assert_allclose(np.asarray(g), np.asarray(w), rtol=1e-5, atol=1e-6)


def _call(rows: int) -> CustomCall:
    return CustomCall(
        target=CSR_SPARSE_DENSE,
        instruction="product",
        computation="main",
        operand_shapes=(),
        result_shape=ArrayShape(ElementType.F32, (rows,)),
        backend_config="",
        api_version="API_VERSION_TYPED_FFI",
    )


def test_indices_outside_the_matrix_are_refused_naming_the_call():
    data = np.ones(3, np.float32)
    x = np.ones(4, np.float32)
    indptr = np.array([0, 2, 3], np.int32)
    with pytest.raises(CustomCallError, match=r"'product'.*outside the matrix's 4 columns"):
        csr_sparse_dense((data, indptr, np.array([0, 4, 1], np.int32), x), _call(2))
    with pytest.raises(CustomCallError, match="is no run of row starts over 3 entries"):
        csr_sparse_dense((data, np.array([0, 3, 2], np.int32), np.zeros(3, np.int32), x), _call(2))
    got = csr_sparse_dense((data, indptr, np.array([0, 3, 1], np.int32), x), _call(2))
    np.testing.assert_array_equal(got, np.array([2, 1], np.float32))
