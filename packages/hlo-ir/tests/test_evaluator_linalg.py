"""Evaluator: dot and convolution, by hand and against jax (XLA:CPU)."""

from __future__ import annotations

import jax
import ml_dtypes
import numpy as np
import pytest
from jax import lax

from heron.hlo.evaluator import evaluate_module
from heron.hlo.parser import parse_module


def run(text: str, *args):
    return evaluate_module(parse_module(text), list(args))


def jax_compare(fn, *args, rtol=1e-5, atol=1e-5):
    module = parse_module(jax.jit(fn).lower(*args).as_text("hlo"))
    got = evaluate_module(module, list(args))
    want = np.asarray(jax.jit(fn)(*args))
    assert got.dtype == want.dtype and got.shape == want.shape
    np.testing.assert_allclose(
        got.astype(np.float64), want.astype(np.float64), rtol=rtol, atol=atol
    )
    return module


RNG = np.random.default_rng(5)


# -- dot ----------------------------------------------------------------------------


def test_dot_matrix_product():
    a = np.asarray([[1, 2], [3, 4], [5, 6]], np.float32)
    b = np.asarray([[1, 0, 2], [0, 1, 3]], np.float32)
    out = run(
        """
        ENTRY e {
          a = f32[3,2] parameter(0)
          b = f32[2,3] parameter(1)
          ROOT d = f32[3,3] dot(a, b), lhs_contracting_dims={1}, rhs_contracting_dims={0}
        }""",
        a,
        b,
    )
    np.testing.assert_array_equal(out, a @ b)


def test_dot_with_batch_dims_orders_result_batch_lhs_rhs():
    a = RNG.standard_normal((2, 3, 4, 5)).astype(np.float32)
    b = RNG.standard_normal((5, 2, 6, 4)).astype(np.float32)
    out = run(
        """
        ENTRY e {
          a = f32[2,3,4,5] parameter(0)
          b = f32[5,2,6,4] parameter(1)
          ROOT d = f32[2,4,3,6] dot(a, b), lhs_batch_dims={0,2}, rhs_batch_dims={1,3},
            lhs_contracting_dims={3}, rhs_contracting_dims={0}
        }""",
        a,
        b,
    )
    np.testing.assert_allclose(out, np.einsum("abcd,dafc->acbf", a, b), rtol=1e-5, atol=1e-6)


#: A batched dot contracting nothing (jnp.einsum("i,i->i", x, 6)).
_NO_CONTRACTION = (
    "HloModule m\nENTRY main {\n  x = f32[4]{0} parameter(0)\n  c = f32[] constant(6)\n"
    "  b = f32[4]{0} broadcast(c), dimensions={}\n"
    "  ROOT d = f32[4]{0} dot(x, b), lhs_batch_dims={0}, lhs_contracting_dims={},"
    " rhs_batch_dims={0}, rhs_contracting_dims={}\n}\n"
)


def test_a_dot_contracting_nothing_keeps_a_negative_zero_as_xla_cpu_does():
    """Nothing contracted, each element is one product: XLA makes the dot a multiply (and
    so does heron's dot-strength-reduction), which keeps -0.0 where a sum from +0.0 gives
    +0.0 (the nineteenth sweep: dinosaur's vertical filters; heron's kernel and jax.jit
    gave -0.0, the reference +0.0, and the check refused the kernel)."""
    x = np.asarray([-0.0, 1.5, -2.0, 0.0], np.float32)
    got = run(_NO_CONTRACTION, x)
    six = np.full(4, 6.0, np.float32)
    want = np.asarray(jax.jit(lambda v: lax.dot_general(v, six, (([], []), ([0], [0]))))(x))
    np.testing.assert_array_equal(got, want)
    assert list(np.signbit(got)) == list(np.signbit(want)) == [True, False, True, False]
    outer = run(  # an outer product, no batch either
        """
HloModule m
ENTRY main {
  x = f32[2]{0} parameter(0)
  y = f32[3]{0} parameter(1)
  ROOT d = f32[2,3]{1,0} dot(x, y), lhs_contracting_dims={}, rhs_contracting_dims={}
}
""",
        np.asarray([-0.0, 2.0], np.float32),
        np.asarray([1.0, -1.0, 0.5], np.float32),
    )
    np.testing.assert_array_equal(outer, [[-0.0, 0.0, -0.0], [2.0, -2.0, 1.0]])
    assert list(np.signbit(outer[0])) == [True, False, True]


def test_dot_integer_is_exact_and_wraps():
    a = np.full((1, 300), 100, np.int8)
    b = np.full((300, 1), 100, np.int8)
    out = run(
        """
        ENTRY e {
          a = s8[1,300] parameter(0)
          b = s8[300,1] parameter(1)
          ROOT d = s16[1,1] dot(a, b), lhs_contracting_dims={1}, rhs_contracting_dims={0}
        }""",
        a,
        b,
    )
    assert out.dtype == np.int16
    assert out[0, 0] == np.int64(3_000_000).astype(np.int16)


def test_dot_bf16_accumulates_in_f32_and_rounds_once():
    # 512 products 1 * 1 and one 1 * 2**-8: an f32 accumulator holds the exact sum
    # 512 + 2**-8, a bf16 accumulator would have dropped the small term.
    a = np.ones((1, 513), ml_dtypes.bfloat16)
    b = np.ones((513, 1), ml_dtypes.bfloat16)
    b[0, 0] = 2.0**-8
    out = run(
        """
        ENTRY e {
          a = bf16[1,513] parameter(0)
          b = bf16[513,1] parameter(1)
          ROOT d = f32[1,1] dot(a, b), lhs_contracting_dims={1}, rhs_contracting_dims={0}
        }""",
        a,
        b,
    )
    assert out.dtype == np.float32 and out[0, 0] == 512 + 2.0**-8


def test_dot_fp8_rounds_result_to_fp8():
    a = np.asarray([[1.5, 2.0]], ml_dtypes.float8_e4m3fn)
    b = np.asarray([[1.0], [0.5]], ml_dtypes.float8_e4m3fn)
    out = run(
        """
        ENTRY e {
          a = f8e4m3fn[1,2] parameter(0)
          b = f8e4m3fn[2,1] parameter(1)
          ROOT d = f8e4m3fn[1,1] dot(a, b), lhs_contracting_dims={1}, rhs_contracting_dims={0}
        }""",
        a,
        b,
    )
    assert out.dtype == ml_dtypes.float8_e4m3fn and float(out[0, 0]) == 2.5


@pytest.mark.parametrize(
    ("dims", "lhs_shape", "rhs_shape"),
    [
        ((((1,), (0,)), ((), ())), (4, 5), (5, 3)),
        ((((2,), (1,)), ((0,), (0,))), (2, 4, 5), (2, 5, 3)),
        ((((1, 3), (2, 0)), ((), ())), (3, 4, 2, 5), (5, 6, 4)),
    ],
)
def test_dot_general_matches_jax(dims, lhs_shape, rhs_shape):
    a = RNG.standard_normal(lhs_shape).astype(np.float32)
    b = RNG.standard_normal(rhs_shape).astype(np.float32)
    jax_compare(lambda x, y: lax.dot_general(x, y, dims), a, b)


# -- convolution --------------------------------------------------------------------------


def test_convolution_1d_by_hand():
    out = run(
        """
        ENTRY e {
          x = f32[1,1,5] parameter(0)
          w = f32[1,1,2] parameter(1)
          ROOT c = f32[1,1,4] convolution(x, w), window={size=2}, dim_labels=bf0_oi0->bf0
        }""",
        np.asarray([[[1, 2, 3, 4, 5]]], np.float32),
        np.asarray([[[10, 1]]], np.float32),
    )
    np.testing.assert_array_equal(out, [[[12, 23, 34, 45]]])


def test_grouped_convolution_by_hand():
    # Two feature groups: output feature 0 sees input feature 0, output 1 sees input 1.
    x = np.asarray([[[1, 2, 3], [10, 20, 30]]], np.float32)  # b=1, f=2, w=3
    w = np.asarray([[[1, 1]], [[1, -1]]], np.float32)  # o=2, i=1, w=2
    out = run(
        """
        ENTRY e {
          x = f32[1,2,3] parameter(0)
          w = f32[2,1,2] parameter(1)
          ROOT c = f32[1,2,2] convolution(x, w), window={size=2}, dim_labels=bf0_oi0->bf0,
            feature_group_count=2
        }""",
        x,
        w,
    )
    np.testing.assert_array_equal(out, [[[3, 5], [-10, -10]]])


CONV_CASES = [
    # strides, padding, lhs_dilation, rhs_dilation, feature groups, batch groups
    ((1, 1), ((0, 0), (0, 0)), (1, 1), (1, 1), 1, 1),
    ((2, 3), ((1, 2), (-1, 2)), (2, 1), (1, 2), 1, 1),
    ((1, 2), ((1, 1), (1, 1)), (1, 1), (2, 1), 2, 1),
    ((1, 1), ((1, 1), (0, 1)), (1, 1), (1, 1), 1, 2),
    ((2, 1), ((0, 1), (2, 0)), (3, 1), (1, 1), 3, 1),
]


@pytest.mark.parametrize(("strides", "padding", "lhs_d", "rhs_d", "groups", "bgroups"), CONV_CASES)
def test_convolution_matches_jax(strides, padding, lhs_d, rhs_d, groups, bgroups):
    x = RNG.standard_normal((2 * bgroups, 3 * groups, 7, 8)).astype(np.float32)
    w = RNG.standard_normal((2 * groups * bgroups, 3, 3, 2)).astype(np.float32)

    def fn(a, b):
        return lax.conv_general_dilated(
            a,
            b,
            strides,
            padding,
            lhs_d,
            rhs_d,
            ("NCHW", "OIHW", "NCHW"),
            feature_group_count=groups,
            batch_group_count=bgroups,
        )

    jax_compare(fn, x, w, rtol=1e-4, atol=1e-4)


def test_convolution_nhwc_layout_labels_and_window_reversal_match_jax():
    x = RNG.standard_normal((2, 6, 5, 3)).astype(np.float32)
    w = RNG.standard_normal((3, 2, 3, 4)).astype(np.float32)

    def fn(a, b):
        return lax.conv_general_dilated(
            a, b, (1, 1), "SAME", dimension_numbers=("NHWC", "HWIO", "NHWC")
        )

    jax_compare(fn, x, w, rtol=1e-4, atol=1e-4)
    # The transpose of a convolution (its gradient) reverses the window.
    grad = jax.grad(lambda a, b: (fn(a, b) ** 2).sum(), argnums=1)
    jax_compare(grad, x, w, rtol=1e-4, atol=1e-3)


def test_convolution_bf16_result_rounded_once():
    x = RNG.standard_normal((1, 4, 6)).astype(ml_dtypes.bfloat16)
    w = RNG.standard_normal((2, 4, 3)).astype(ml_dtypes.bfloat16)

    def fn(a, b):
        return lax.conv_general_dilated(a, b, (1,), "VALID")

    jax_compare(fn, x, w, rtol=1e-2, atol=1e-2)
