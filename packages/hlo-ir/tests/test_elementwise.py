"""Elementwise evaluator: hand-picked edge cases, then agreement with XLA:CPU.

The second half runs the same HLO ops through XLA:CPU (jax with custom
primitives that lower straight to the StableHLO op, so no jax-level dtype
checks or rewrites get in the way) and compares. Narrow types (<= 8 bits, and
<= 16 bits for unary float ops) are swept exhaustively; wider ones use
hypothesis. Tolerances are the ones documented in
heron.hlo.evaluator.elementwise; XLA:CPU's denormal flushing is masked out.
"""

from __future__ import annotations

import functools
import os

import jax
import ml_dtypes
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from jax._src.lib.mlir import ir
from jax.extend.core import Primitive
from jax.extend.mlir.dialects import chlo
from jax.extend.mlir.dialects import stablehlo as shlo
from jax.interpreters import mlir

from heron.hlo.element_types import ElementType
from heron.hlo.errors import HloEvaluationError
from heron.hlo.evaluator import elementwise as ew
from heron.hlo.evaluator.elementwise import ELEMENTWISE_OPCODES, evaluate_elementwise
from heron.hlo.evaluator.float_semantics import float_bits

E = ElementType
nan, inf = np.nan, np.inf


def ev(opcode, *operands, result=None, **attributes):
    arrays = [np.asarray(o) for o in operands]
    if result is None:
        typed = arrays[1] if opcode in ("select", "clamp") else arrays[0]
        result = ElementType.from_numpy(typed.dtype)
    return evaluate_elementwise(opcode, attributes, arrays, result)


def same_bits(actual, expected):
    """Equal values, NaN equal to NaN, and -0 distinguished from +0."""
    actual, expected = np.asarray(actual), np.asarray(expected)
    assert actual.dtype == expected.dtype, (actual.dtype, expected.dtype)
    assert actual.shape == expected.shape
    if not ElementType.from_numpy(actual.dtype).is_floating:
        np.testing.assert_array_equal(actual, expected)
        return
    a64, e64 = actual.astype(np.float64), expected.astype(np.float64)
    both_nan = np.isnan(a64) & np.isnan(e64)
    ok = both_nan | ((a64 == e64) & (np.signbit(a64) == np.signbit(e64)))
    assert ok.all(), f"got {actual}, expected {expected}"


def f32(*v):
    return np.array(v, dtype=np.float32)


def i32(*v):
    return np.array(v, dtype=np.int32)


INT_MIN = -(2**31)

# =============================================================================
# Hand-picked tables (exact expected values)
# =============================================================================

INTEGER_CASES = [
    # opcode, dtype, operands, expected
    (
        "divide",
        np.int32,
        [[7, -7, 7, -7, INT_MIN, 5], [2, 2, 0, 0, -1, -2]],
        [3, -3, -1, -1, INT_MIN, -2],
    ),
    (
        "remainder",
        np.int32,
        [[7, -7, 7, -7, INT_MIN, 5], [2, 2, 0, 0, -1, -2]],
        [1, -1, 7, -7, 0, 1],
    ),
    ("divide", np.uint8, [[7, 255, 0], [0, 2, 0]], [255, 127, 255]),
    ("remainder", np.uint8, [[7, 255, 0], [0, 2, 0]], [7, 1, 0]),
    ("divide", ml_dtypes.int4, [[-8, -8, 3, 7], [-1, 0, 2, -2]], [-8, -1, 1, -3]),
    ("remainder", ml_dtypes.int4, [[-8, -8, 3, -7], [-1, 0, 2, 2]], [0, -8, 1, -1]),
    ("add", ml_dtypes.int4, [[7, -8, 5], [1, -1, 5]], [-8, 7, -6]),
    ("add", ml_dtypes.uint2, [[3, 2], [1, 3]], [0, 1]),
    ("multiply", ml_dtypes.int2, [[-2, 1, -1], [-1, -2, -1]], [-2, -2, 1]),
    ("subtract", np.uint32, [[0], [1]], [2**32 - 1]),
    ("multiply", np.int64, [[2**62], [4]], [0]),
    ("negate", np.int32, [[INT_MIN, 5]], [INT_MIN, -5]),
    ("negate", np.uint8, [[1, 0]], [255, 0]),
    ("abs", np.int32, [[INT_MIN, -3, 3]], [INT_MIN, 3, 3]),
    ("abs", ml_dtypes.int4, [[-8, -1]], [-8, 1]),
    ("sign", np.int8, [[-128, -1, 0, 9]], [-1, -1, 0, 1]),
    ("sign", np.uint8, [[0, 200]], [0, 1]),
    ("not", np.int8, [[0, -1, 5]], [-1, 0, -6]),
    ("not", ml_dtypes.uint4, [[0, 3, 15]], [15, 12, 0]),
    ("shift-left", np.int32, [[1, 1, 1, -8], [31, 32, -1, 1]], [INT_MIN, 0, 0, -16]),
    ("shift-right-arithmetic", np.int32, [[-8, -8, 8, -1], [1, 33, 40, -1]], [-4, -1, 0, -1]),
    ("shift-right-logical", np.int32, [[-8, -8, 8], [1, 32, -1]], [2**31 - 4, 0, 0]),
    (
        "shift-right-arithmetic",
        np.uint8,
        [[0x80, 0x81, 0x7F, 0xFF], [1, 7, 8, 9]],
        [0xC0, 0xFF, 0, 0xFF],
    ),
    ("shift-right-logical", ml_dtypes.int4, [[-8, -1, 7, 5], [1, 1, 1, -1]], [4, 7, 3, 0]),
    ("shift-left", ml_dtypes.int4, [[-8, -1, 7, 5], [1, 1, 1, 3]], [0, -2, -2, -8]),
    (
        "power",
        np.int32,
        [[2, -2, 0, -1, -1, 1, 0, 3], [-1, 3, -1, -3, -4, -7, 0, 4]],
        [0, -8, 0, -1, 1, 1, 1, 81],
    ),
    # Only the exponent's low 6 bits are used (XLA's unrolled squaring loop).
    ("power", np.int32, [[3, 2, 3], [64, 64, 65]], [1, 1, 3]),
    # The exponent's top bit makes it "negative", also for unsigned types.
    ("power", np.uint8, [[3, 1, 255, 255, 3], [200, 200, 201, 200, 5]], [0, 1, 255, 1, 243]),
    ("power", ml_dtypes.uint4, [[3, 15, 3], [9, 9, 3]], [0, 15, 11]),
    ("popcnt", np.int8, [[-1, 0, 5, -128]], [8, 0, 2, 1]),
    ("popcnt", ml_dtypes.int4, [[-1, -8, 7]], [4, 1, 3]),
    ("popcnt", ml_dtypes.int2, [[-1, 1]], [-2, 1]),  # 2 does not fit in s2 and wraps
    ("popcnt", np.uint64, [[2**64 - 1]], [64]),
    ("count-leading-zeros", np.int32, [[0, 1, -1, 2**30]], [32, 31, 0, 1]),
    ("clz", ml_dtypes.int4, [[0, 1, -1, 7, 2]], [4, 3, 0, 1, 2]),
    ("clz", ml_dtypes.uint2, [[0, 1, 2, 3]], [2, 1, 0, 0]),
    ("clz", np.uint64, [[0, 1]], [64, 63]),
    ("maximum", np.uint32, [[0, 2**32 - 1], [5, 1]], [5, 2**32 - 1]),
    ("minimum", ml_dtypes.int4, [[-8, 7], [7, -8]], [-8, -8]),
    ("and", np.int8, [[-1, 12], [5, 10]], [5, 8]),
    ("or", ml_dtypes.uint4, [[8, 3], [1, 12]], [9, 15]),
    ("xor", np.int64, [[-1], [1]], [-2]),
]


@pytest.mark.parametrize(("opcode", "dtype", "operands", "expected"), INTEGER_CASES)
def test_integer_edge_cases(opcode, dtype, operands, expected):
    arrays = [np.array(o, dtype=dtype) for o in operands]
    np.testing.assert_array_equal(ev(opcode, *arrays), np.array(expected, dtype=dtype))


def test_pred_logic():
    t, f = np.array([True, True, False, False]), np.array([True, False, True, False])
    np.testing.assert_array_equal(ev("and", t, f), [True, False, False, False])
    np.testing.assert_array_equal(ev("or", t, f), [True, True, True, False])
    np.testing.assert_array_equal(ev("xor", t, f), [False, True, True, False])
    np.testing.assert_array_equal(ev("not", t), [False, False, True, True])
    np.testing.assert_array_equal(ev("maximum", t, f), [True, True, True, False])
    np.testing.assert_array_equal(ev("minimum", t, f), [True, False, False, False])
    np.testing.assert_array_equal(ev("add", t, f), [True, True, True, False])
    np.testing.assert_array_equal(ev("multiply", t, f), [True, False, False, False])
    with pytest.raises(HloEvaluationError, match="subtract is not defined for element type pred"):
        ev("subtract", t, f)


FLOAT_CASES = [
    (
        "maximum",
        [[nan, 1.0, -0.0, 0.0, -0.0], [1.0, nan, 0.0, -0.0, -0.0]],
        [nan, nan, 0.0, 0.0, -0.0],
    ),
    (
        "minimum",
        [[nan, 1.0, -0.0, 0.0, 0.0], [1.0, nan, 0.0, -0.0, 0.0]],
        [nan, nan, -0.0, -0.0, 0.0],
    ),
    ("sign", [[-0.0, 0.0, nan, -3.0, inf, -inf, 1e-40]], [-0.0, 0.0, nan, -1.0, 1.0, -1.0, 1.0]),
    (
        "round-nearest-afz",
        [[0.5, 1.5, 2.5, -0.5, -2.5, 0.49999997, -0.2, 8388609.0]],
        [1, 2, 3, -1, -3, 0, -0.0, 8388609.0],
    ),
    (
        "round-nearest-even",
        [[0.5, 1.5, 2.5, -0.5, -2.5, 0.49999997, -0.2]],
        [0, 2, 2, -0.0, -2, 0, -0.0],
    ),
    ("ceil", [[-0.5, 0.5, -inf]], [-0.0, 1.0, -inf]),
    ("floor", [[-0.5, 0.5, nan]], [-1.0, 0.0, nan]),
    (
        "remainder",
        [[5.5, -5.5, 5.5, 1.0, inf, 3.0], [2.0, 2.0, -2.0, 0.0, 2.0, inf]],
        [1.5, -1.5, 1.5, nan, nan, 3.0],
    ),
    (
        "power",
        [
            [-8.0, nan, 1.0, 1.0, 0.0, 0.0, -0.0, -2.0, -1.0, -1.0],
            [1 / 3, 0.0, nan, inf, -1.0, 0.0, -3.0, 0.5, inf, -inf],
        ],
        [nan, 1.0, 1.0, 1.0, inf, 1.0, -inf, nan, 1.0, 1.0],
    ),
    (
        "atan2",
        [[0.0, -0.0, 0.0, -0.0, 1.0, -1.0], [-0.0, -0.0, 0.0, 0.0, -inf, -inf]],
        [np.pi, -np.pi, 0.0, -0.0, np.pi, -np.pi],
    ),
    ("cbrt", [[-8.0, -27.0, -0.0, inf, -inf, 1e-30]], [-2.0, -3.0, -0.0, inf, -inf, 1e-10]),
    ("divide", [[1.0, -1.0, 0.0, 1.0], [0.0, 0.0, 0.0, -0.0]], [inf, -inf, nan, -inf]),
    ("sqrt", [[-0.0, -1.0, 4.0]], [-0.0, nan, 2.0]),
    ("rsqrt", [[0.0, -0.0, 4.0, inf]], [inf, -inf, 0.5, 0.0]),
    ("logistic", [[0.0, -200.0, 200.0, nan]], [0.5, 0.0, 1.0, nan]),
    ("erf", [[0.0, -0.0, inf, -inf, 1.0]], [0.0, -0.0, 1.0, -1.0, 0.8427007929497149]),
    ("exponential", [[-inf, 0.0, 89.0]], [0.0, 1.0, inf]),
    ("exponential-minus-one", [[-0.0, -inf, 1e-30]], [-0.0, -1.0, 1e-30]),
    ("log", [[0.0, -1.0, 1.0, inf]], [-inf, nan, 0.0, inf]),
    ("log-plus-one", [[-1.0, -0.0, 1e-30]], [-inf, -0.0, 1e-30]),
    ("tanh", [[-0.0, inf, -inf, 20.0]], [-0.0, 1.0, -1.0, 1.0]),
    ("negate", [[0.0, nan, -inf]], [-0.0, nan, inf]),
    ("abs", [[-0.0, -inf]], [0.0, inf]),
    ("atanh", [[1.0, -1.0, 2.0]], [inf, -inf, nan]),
    ("acosh", [[1.0, 0.5]], [0.0, nan]),
]


@pytest.mark.parametrize(("opcode", "operands", "expected"), FLOAT_CASES)
def test_float_edge_cases(opcode, operands, expected):
    arrays = [f32(*o) for o in operands]
    same_bits(ev(opcode, *arrays), f32(*expected))


def test_power_signaling_nan_follows_ieee():
    # pow(x, 0) = 1 and pow(1, y) = 1 even for quiet NaN, but a signaling NaN gives NaN
    # where XLA's widening keeps it signaling (bf16, f32, f64; f16 widening quiets it).
    snan32 = np.array([0x7F800001, 0x7FC00000], np.uint32).view(np.float32)
    same_bits(ev("power", snan32, f32(0, 0)), f32(nan, 1))
    same_bits(ev("power", f32(1, 1), snan32), f32(nan, 1))
    snan16 = np.array([0x7C01], np.uint16).view(np.float16)
    same_bits(ev("power", snan16, np.zeros(1, np.float16)), np.ones(1, np.float16))
    snan_bf16 = np.array([0x7F81], np.uint16).view(ml_dtypes.bfloat16)
    assert np.isnan(ev("power", snan_bf16, np.zeros(1, ml_dtypes.bfloat16)).astype(np.float32))


def test_is_finite_and_complex_parts():
    np.testing.assert_array_equal(
        ev("is-finite", f32(1, inf, -inf, nan), result=E.PRED), [True, False, False, False]
    )
    z = np.array([1 + 2j, complex(-3, -0.0)], np.complex64)
    same_bits(ev("real", z, result=E.F32), f32(1, -3))
    same_bits(ev("imag", z, result=E.F32), f32(2, -0.0))
    same_bits(ev("imag", f32(1, nan), result=E.F32), f32(0, 0))
    same_bits(ev("abs", np.array([3 + 4j], np.complex64), result=E.F32), f32(5))
    made = ev("complex", f32(1, 2), f32(3, -0.0), result=E.C64)
    np.testing.assert_array_equal(made, np.array([1 + 3j, 2 - 0j], np.complex64))
    assert np.signbit(made[1].imag)


def test_low_precision_rounds_once_per_op_from_f32():
    # bf16: 1 + 2^-8 is a tie between 1 and 1 + 2^-7 and goes to the even 1.
    one = np.array([1.0], ml_dtypes.bfloat16)
    tiny = np.array([2.0**-8], ml_dtypes.bfloat16)
    same_bits(ev("add", one, tiny), np.array([1.0], ml_dtypes.bfloat16))
    # f8e4m3fn has no infinity: overflow becomes NaN; f8e5m2 overflows to inf.
    big = np.array([448.0], ml_dtypes.float8_e4m3fn)
    assert np.isnan(ev("add", big, big).astype(np.float32)).all()
    big5 = np.array([57344.0], ml_dtypes.float8_e5m2)
    assert ev("add", big5, big5).astype(np.float32)[0] == np.inf
    # exp in f8e4m3fn: exp(1)=2.718 -> 2.75, exp(2)=7.39 -> 7.5, exp(3)=20.09 -> 20.
    x = np.array([1, 2, 3], ml_dtypes.float8_e4m3fn)
    np.testing.assert_array_equal(ev("exponential", x).astype(np.float32), f32(2.75, 7.5, 20))
    # f4e2m1fn saturates instead of overflowing.
    four = np.array([4.0], ml_dtypes.float4_e2m1fn)
    assert ev("multiply", four, four).astype(np.float32)[0] == 6.0


COMPARE_VALUES = f32(-nan, -inf, -1, -0.0, 0.0, 1, inf, nan)


def _compare_grid(direction, kind):
    a = np.repeat(COMPARE_VALUES, 8)
    b = np.tile(COMPARE_VALUES, 8)
    attrs = {"direction": direction} if kind is None else {"direction": direction, "type": kind}
    return evaluate_elementwise("compare", attrs, [a, b], E.PRED).reshape(8, 8).astype(int)


def test_compare_float_and_totalorder():
    lt_total = _compare_grid("LT", "TOTALORDER")
    np.testing.assert_array_equal(lt_total, np.triu(np.ones((8, 8), int), 1))
    eq_total = _compare_grid("EQ", "TOTALORDER")
    np.testing.assert_array_equal(eq_total, np.eye(8, dtype=int))
    eq_float = _compare_grid("EQ", None)
    expected = np.eye(8, dtype=int)
    expected[0, 0] = expected[7, 7] = 0  # NaN == NaN is false
    expected[3, 4] = expected[4, 3] = 1  # -0 == +0
    np.testing.assert_array_equal(eq_float, expected)
    ne_float = _compare_grid("NE", "FLOAT")
    np.testing.assert_array_equal(ne_float, 1 - expected)
    assert _compare_grid("LT", "FLOAT")[2].tolist() == [0, 0, 0, 1, 1, 1, 1, 0]


def test_compare_integers_and_complex():
    a, b = i32(-1, 5, 3), i32(1, 5, -3)
    np.testing.assert_array_equal(
        ev("compare", a, b, result=E.PRED, direction="LT"), [True, False, False]
    )
    u = np.array([255, 0], np.uint8)
    np.testing.assert_array_equal(
        ev("compare", u, u[::-1].copy(), result=E.PRED, direction="GT", type="UNSIGNED"),
        [True, False],
    )
    z = np.array([1 + 2j, np.nan + 0j, 1 + 2j], np.complex64)
    w = np.array([1 + 2j, np.nan + 0j, 1 - 2j], np.complex64)
    np.testing.assert_array_equal(
        ev("compare", z, w, result=E.PRED, direction="EQ"), [True, False, False]
    )
    np.testing.assert_array_equal(
        ev("compare", z, w, result=E.PRED, direction="NE"), [False, True, True]
    )
    with pytest.raises(HloEvaluationError, match="complex"):
        ev("compare", z, w, result=E.PRED, direction="LT")
    with pytest.raises(HloEvaluationError, match="UNSIGNED"):
        ev("compare", a, b, result=E.PRED, direction="LT", type="UNSIGNED")


def test_select_and_clamp_accept_scalars():
    x = f32(nan, 0.5, -1, 5, -0.0)
    same_bits(ev("clamp", np.float32(0), x, np.float32(1)), f32(nan, 0.5, 0, 1, 0))
    same_bits(ev("clamp", np.float32(nan), x, np.float32(1)), f32(nan, nan, nan, nan, nan))
    same_bits(ev("clamp", np.float32(3), x, np.float32(1)), f32(nan, 1, 1, 1, 1))
    same_bits(ev("clamp", np.float32(-0.0), f32(0.0, -0.0), np.float32(0.0)), f32(0.0, -0.0))
    np.testing.assert_array_equal(
        ev("clamp", i32(0, 1, 2), i32(5, -3, 1), i32(3, 3, 0)), i32(3, 1, 0)
    )
    np.testing.assert_array_equal(ev("select", np.bool_(False), i32(1, 2), i32(3, 4)), i32(3, 4))
    np.testing.assert_array_equal(
        ev("select", np.array([True, False]), i32(1, 2), i32(3, 4)), i32(1, 4)
    )


REDUCE_PRECISION_CASES = [
    # dtype, (exponent_bits, mantissa_bits), inputs, expected
    (
        np.float32,
        (5, 10),
        [1.0, 3e38, 1e-40, 65520, 65519, 6e-5, 1.00048828125, 1.000732421875],
        [1.0, inf, 0.0, inf, 65504, 0.0, 1.0, 1.0009765625],
    ),
    (
        np.float32,
        (4, 3),
        [448, 240, 2**-6, 2**-7, 1.0625, 1.1875, -1e-3],
        [inf, 240, 2**-6, 0, 1, 1.25, -0.0],
    ),
    (np.float32, (1, 0), [1.0, 1.5, -1.0], [0.0, inf, -0.0]),
    (np.float32, (2, 1), [1.0, 2.5, 3.5, 0.5], [1.0, 2.0, inf, 0.0]),
    (np.float32, (8, 1), [3 * 2.0**-149, 1.75 * 2.0**-126], [0.0, 2.0**-125]),
    (np.float32, (8, 7), [1e-40], [9.183549615799121e-41]),
    (np.float64, (8, 23), [1.1, 1e-40, 1e39], [1.100000023841858, 0.0, inf]),
    # f16 is rounded in its own encoding, so its subnormals round on their own grid.
    (np.float16, (8, 3), [3 * 2.0**-24, 5 * 2.0**-20, 1.1875], [0.0, 2.0**-17, 1.25]),
    (np.float16, (5, 1), [3 * 2.0**-16, 2.0**-20], [2.0**-14, 0.0]),
    # fp8 goes through f16: f8e5m2fnuz keeps 2^-16 under (5, 2) but loses 2^-17.
    (
        ml_dtypes.float8_e5m2fnuz,
        (5, 2),
        [2.0**-16, 2.0**-17, 3 * 2.0**-16],
        [2.0**-16, 0.0, 3 * 2.0**-16],
    ),
    (ml_dtypes.float8_e4m3fn, (4, 3), [448, 2.0**-9, 0.5], [nan, 0.0, 0.5]),
    (ml_dtypes.float4_e2m1fn, (2, 0), [0.5, 1.5, 3.0, 6.0], [0.0, 2.0, 2.0, 6.0]),
]


@pytest.mark.parametrize(("dtype", "bits", "inputs", "expected"), REDUCE_PRECISION_CASES)
def test_reduce_precision(dtype, bits, inputs, expected):
    x = np.array(inputs, dtype=np.float64)
    if dtype is not np.float64:
        x = x.astype(np.float32).astype(dtype)
    got = ev("reduce-precision", x, exponent_bits=bits[0], mantissa_bits=bits[1])
    same_bits(got, np.array(expected, dtype=np.float64).astype(dtype))


def test_reduce_precision_rejects_empty_exponent():
    with pytest.raises(HloEvaluationError, match="exponent_bits >= 1"):
        ev("reduce-precision", f32(1), exponent_bits=0, mantissa_bits=3)


def test_reduce_precision_keeps_nan_payload():
    x = np.array([0x7F800001, 0xFF800001], np.uint32).view(np.float32)
    got = ev("reduce-precision", x, exponent_bits=5, mantissa_bits=2)
    np.testing.assert_array_equal(got.view(np.uint32), x.view(np.uint32))


def test_complex_ops():
    z = np.array([1 + 2j, 0j, 0j, 0j], np.complex64)
    w = np.array([2 - 1j, 1 + 1j, 0j, 2 + 0j], np.complex64)
    got = ev("power", z, w)
    np.testing.assert_allclose(got[0], (1 + 2j) ** (2 - 1j), rtol=1e-6)
    assert np.isnan(got[1].real) and np.isnan(got[1].imag)  # 0^(1+i): XLA's formula gives NaN
    assert got[2] == 1 and got[3] == 0  # 0^0 = 1, 0^2 = 0
    np.testing.assert_array_equal(
        ev("sign", np.array([0j, 3 + 4j], np.complex64)), np.array([0j, 0.6 + 0.8j], np.complex64)
    )
    np.testing.assert_allclose(
        ev("cbrt", np.array([-8 + 0j], np.complex128)), [1 + np.sqrt(3) * 1j], rtol=1e-12
    )
    np.testing.assert_allclose(
        ev("atan2", np.array([1 + 0j], np.complex128), np.array([1 + 0j], np.complex128)),
        [np.pi / 4],
        rtol=1e-12,
    )
    np.testing.assert_allclose(ev("divide", z[:1], w[:1]), [(1 + 2j) / (2 - 1j)], rtol=1e-6)


ERROR_CASES = [
    ("frobnicate", [f32(1)], E.F32, "not an elementwise opcode"),
    ("popcnt", [f32(1)], E.F32, "popcnt is not defined for element type f32"),
    ("sine", [i32(1)], E.S32, "sine is not defined for element type s32"),
    (
        "remainder",
        [np.array([1j], np.complex64)] * 2,
        E.C64,
        "remainder is not defined for element type c64",
    ),
    ("not", [f32(1)], E.F32, "not is not defined"),
    ("add", [f32(1)], E.F32, "takes 2 operand"),
    ("add", [f32(1), i32(1)], E.F32, "operand types differ"),
    ("add", [f32(1), f32(1, 2)], E.F32, "no implicit broadcast"),
    ("add", [f32(1), f32(2)], E.F64, "result element type is f64"),
    ("compare", [f32(1), f32(2)], E.PRED, "unknown direction"),
    ("stochastic-convert", [f32(1), np.array([1], np.uint32)], E.F16, "stochastic-convert"),
]


@pytest.mark.parametrize(("opcode", "operands", "result", "message"), ERROR_CASES)
def test_errors_name_opcode_and_type(opcode, operands, result, message):
    with pytest.raises(HloEvaluationError, match=message):
        evaluate_elementwise(opcode, {}, operands, result)


def test_opcode_set_and_shapes():
    assert {
        "add",
        "count-leading-zeros",
        "clz",
        "stochastic-convert",
        "bitcast-convert",
    } <= ELEMENTWISE_OPCODES
    assert "dot" not in ELEMENTWISE_OPCODES
    scalar = ev("add", np.float32(1), np.float32(2))
    assert scalar.shape == () and scalar.dtype == np.float32 and scalar == 3
    grid = ev("multiply", np.ones((2, 3), np.int8), np.full((2, 3), 3, np.int8))
    assert grid.shape == (2, 3) and (grid == 3).all()


# =============================================================================
# Agreement with XLA:CPU
# =============================================================================

jax.config.update("jax_enable_x64", True)  # f64, s64 and u64 need it; other suites set it too
CPU = jax.devices("cpu")[0]  # XLA:CPU even where an accelerator is present


_XLA_UNARY = {
    "abs": shlo.abs, "cbrt": shlo.cbrt, "ceil": shlo.ceil, "clz": shlo.count_leading_zeros,
    "count-leading-zeros": shlo.count_leading_zeros, "cosine": shlo.cosine,
    "exponential": shlo.exponential, "exponential-minus-one": shlo.exponential_minus_one,
    "floor": shlo.floor, "imag": shlo.imag, "is-finite": shlo.is_finite, "log": shlo.log,
    "log-plus-one": shlo.log_plus_one, "logistic": shlo.logistic, "negate": shlo.negate,
    "not": shlo.not_, "popcnt": shlo.popcnt, "real": shlo.real,
    "round-nearest-afz": shlo.round_nearest_afz, "round-nearest-even": shlo.round_nearest_even,
    "rsqrt": shlo.rsqrt, "sign": shlo.sign, "sine": shlo.sine, "sqrt": shlo.sqrt, "tan": shlo.tan,
    "tanh": shlo.tanh, "acos": chlo.acos, "acosh": chlo.acosh, "asin": chlo.asin,
    "asinh": chlo.asinh, "atanh": chlo.atanh, "cosh": chlo.cosh, "sinh": chlo.sinh, "erf": chlo.erf,
}  # fmt: skip
_XLA_BINARY = {
    "add": shlo.add, "subtract": shlo.subtract, "multiply": shlo.multiply, "divide": shlo.divide,
    "remainder": shlo.remainder, "power": shlo.power, "maximum": shlo.maximum,
    "minimum": shlo.minimum, "and": shlo.and_, "or": shlo.or_, "xor": shlo.xor,
    "shift-left": shlo.shift_left, "shift-right-arithmetic": shlo.shift_right_arithmetic,
    "shift-right-logical": shlo.shift_right_logical, "atan2": shlo.atan2, "complex": shlo.complex,
    "mulhi": chlo.mulhi,
}  # fmt: skip

_oracle = Primitive("heron_test_xla_elementwise")


def _oracle_abstract(*avals, opcode, out_dtype, attrs):
    shape = avals[1].shape if opcode in ("select", "clamp") else avals[0].shape
    return jax.core.ShapedArray(shape, np.dtype(out_dtype))


def _oracle_lower(ctx, *args, opcode, out_dtype, attrs):
    a = dict(attrs)
    if opcode in _XLA_UNARY:
        return [_XLA_UNARY[opcode](*args)]
    if opcode in _XLA_BINARY:
        return [_XLA_BINARY[opcode](*args)]
    if opcode == "compare":
        direction = shlo.ComparisonDirectionAttr.get(a["direction"])
        kind = shlo.ComparisonTypeAttr.get(a["type"]) if "type" in a else None
        return [shlo.compare(*args, direction, compare_type=kind)]
    if opcode == "reduce-precision":
        return [shlo.reduce_precision(args[0], a["exponent_bits"], a["mantissa_bits"])]
    if opcode == "select":
        return [shlo.select(*args)]
    if opcode == "clamp":
        return [shlo.clamp(*args)]
    aval = ctx.avals_out[0]
    result = ir.RankedTensorType.get(aval.shape, mlir.dtype_to_ir_type(aval.dtype))
    if opcode == "convert":
        return [shlo.convert(result, args[0])]
    raise KeyError(opcode)


_oracle.def_abstract_eval(_oracle_abstract)
mlir.register_lowering(_oracle, _oracle_lower)


@functools.cache
def _xla_program(specs):
    def run(*xs):
        return tuple(
            _oracle.bind(*[xs[i] for i in idx], opcode=op, out_dtype=dt, attrs=at)
            for op, at, dt, idx in specs
        )

    return jax.jit(run)


def xla(specs, operands):
    """Run ops on XLA:CPU; a spec is (opcode, attributes, result ElementType, operand indices)."""
    key = tuple(
        (op, tuple(sorted(at.items())), et.numpy_dtype, tuple(idx)) for op, at, et, idx in specs
    )
    outs = _xla_program(key)(*[jax.device_put(np.asarray(o), CPU) for o in operands])
    return [np.asarray(o) for o in outs]


# -- tolerances (mirrors the elementwise module docstring) --------------------

# op: (max ulps in f32, in f64, in f16/bf16/fp8/f4, absolute slack in units of the type's epsilon)
FLOAT_TOLERANCE = {
    "exponential": (2, 2, 1, 0),
    # XLA:CPU's f32 expm1 is 4.6 ulps off at 0.0069321403 (hypothesis found it; the
    # evaluator is correctly rounded there: test_expm1_where_xla_cpu_is_loosest)
    "exponential-minus-one": (5, 4, 2, 0),
    "log": (2, 2, 1, 0),
    "log-plus-one": (4, 256, 1, 0),
    "logistic": (4, 4, 1, 1),
    "rsqrt": (2, 2, 1, 0),
    "cbrt": (2, 4, 1, 0),
    "cosine": (2, 2, 1, 1),
    "sine": (2, 2, 1, 1),
    "tan": (2, 2, 1, 0),
    "sinh": (32, 32, 1, 0),
    "cosh": (32, 32, 1, 0),
    "tanh": (4, 8, 1, 1),
    "erf": (4, 4, 1, 1),
    "atan2": (2, 2, 1, 1),
    "power": (2, 2, 1, 0),
    "acos": (4, 2, 2, 1),
    "asin": (4, 2, 2, 1),
    "acosh": (4, 4, 2, 0),
    "asinh": (4, 4, 2, 0),
    "atanh": (4, 256, 2, 0),
}
#: Ops not listed in FLOAT_TOLERANCE must match XLA:CPU bit for bit.
assert set(FLOAT_TOLERANCE) <= set(ew._REAL_UNARY) | set(ew._REAL_BINARY)

NARROW_FLOATS = [
    E.F16, E.BF16, E.F8E4M3FN, E.F8E5M2, E.F8E4M3FNUZ, E.F8E5M2FNUZ, E.F8E4M3B11FNUZ,
    E.F8E8M0FNU, E.F4E2M1FN,
]  # fmt: skip
WIDE_FLOATS = [E.F32, E.F64]
_UINT = {8: np.uint8, 16: np.uint16, 32: np.uint32, 64: np.uint64}


def _compute_tiny(et):
    return np.finfo(np.float64 if et is E.F64 else np.float32).tiny


def floats_from_codes(codes, et):
    """Elements with the given bit patterns, minus what XLA:CPU's denormal flushing would hit."""
    codes = np.asarray(codes, dtype=np.uint64)
    carrier = _UINT[max(8, et.bit_width)]
    x = codes.astype(carrier).view(et.numpy_dtype)
    with np.errstate(invalid="ignore"):
        f = x.astype(np.float64)
    flushed = (np.abs(f) < _compute_tiny(et)) & (f != 0)
    if flushed.any():
        x = np.where(flushed, np.array(1.0, et.numpy_dtype), x)
    return x


def all_codes(et):
    return np.arange(2**et.bit_width, dtype=np.uint64)


def encoding_rank(x, et):
    """Position of each element in its format's value order: distance = ulps."""
    bits = float_bits(x, et).astype(np.int64)
    if et is E.F8E8M0FNU:
        return bits
    sign = np.int64(1) << np.int64(et.bit_width - 1)
    magnitude = bits & (sign - 1) if et.bit_width < 64 else bits & np.int64(2**63 - 1)
    negative = (bits & sign) != 0 if et.bit_width < 64 else bits < 0
    return np.where(negative, -magnitude, magnitude)


def assert_float_close(opcode, et, ours, theirs, operands):
    ours, theirs = np.asarray(ours), np.asarray(theirs)
    assert ours.dtype == theirs.dtype == et.numpy_dtype
    u32, u64, narrow, slack = FLOAT_TOLERANCE.get(opcode, (0, 0, 0, 0))
    max_ulps = {E.F32: u32, E.F64: u64}.get(et, narrow)
    if opcode in ("sinh", "cosh") and et in (E.F32, E.F64):
        # XLA evaluates exp(|x| + log(1/2)): the rounded sum costs ~|x|/2 ulps.
        with np.errstate(invalid="ignore", over="ignore"):
            max_ulps = max_ulps + np.nan_to_num(np.abs(operands[0].astype(np.float64)))
    with np.errstate(invalid="ignore"):
        o64, t64 = ours.astype(np.float64), theirs.astype(np.float64)
    ulps = np.abs(encoding_rank(ours, et) - encoding_rank(theirs, et))
    fine = (ulps <= max_ulps) | (np.isnan(o64) & np.isnan(t64))
    # XLA:CPU flushes f32/f64 subnormal results to zero (to NaN in e8m0, which has no zero).
    # A narrow type computed in f32 flushes the f32 result before rounding it, so a
    # product just under the smallest normal, which rounds up to it, is 0 there too.
    subnormal = (np.abs(o64) <= _compute_tiny(et)) & (o64 != 0)
    flushed = np.abs(t64) < _compute_tiny(et)
    if et is E.F8E8M0FNU:
        flushed |= np.isnan(t64)
    fine |= subnormal & flushed
    if slack:
        eps = float(ml_dtypes.finfo(et.numpy_dtype).eps)
        fine |= np.abs(o64 - t64) <= slack * eps
    bad = np.flatnonzero(~fine.reshape(-1))
    if bad.size:
        show = [
            (tuple(o.reshape(-1)[i] for o in operands), ours.reshape(-1)[i], theirs.reshape(-1)[i])
            for i in bad[:5]
        ]
        pytest.fail(f"{opcode} {et}: {bad.size} elements differ from XLA:CPU, e.g. {show}")


#: Ops with no XLA opcode of their own: jax lowers them to CHLO, which XLA expands into
#: a formula evaluated in the operand's type. Compared only where that type is wide
#: enough for the expansion to mean something (in e8m0, 1 - x*x is already NaN).
CHLO_EXPANDED = {"acos", "acosh", "asin", "asinh", "atanh", "cosh", "sinh", "erf"}
CHLO_CHECKED_TYPES = {E.F16, E.BF16, E.F32, E.F64, E.F8E4M3FN}


def _check_real_ops(et, operands):
    ops = sorted(ew._REAL_UNARY if len(operands) == 1 else ew._REAL_BINARY)
    if et not in CHLO_CHECKED_TYPES:
        ops = [op for op in ops if op not in CHLO_EXPANDED]
    idx = tuple(range(len(operands)))
    specs = [(op, {}, et, idx) for op in ops]
    if len(operands) == 1:
        specs.append(("is-finite", {}, E.PRED, idx))
    outs = xla(specs, operands)
    for op, theirs in zip(ops, outs):
        assert_float_close(op, et, ev(op, *operands), theirs, operands)
    if len(operands) == 1:
        finite = ev("is-finite", operands[0], result=E.PRED)
        np.testing.assert_array_equal(finite, outs[-1], err_msg=f"is-finite {et}")


@pytest.mark.parametrize("et", NARROW_FLOATS, ids=str)
def test_float_unary_exhaustive_vs_xla(et):
    _check_real_ops(et, [floats_from_codes(all_codes(et), et)])


@pytest.mark.parametrize("et", [t for t in NARROW_FLOATS if t.bit_width <= 8], ids=str)
def test_float_binary_exhaustive_vs_xla(et):
    codes = all_codes(et)
    a = floats_from_codes(np.repeat(codes, codes.size), et)
    b = floats_from_codes(np.tile(codes, codes.size), et)
    _check_real_ops(et, [a, b])


_MODERATE = np.random.default_rng(7).standard_normal(512) * 4


def code_arrays(width, size, pool):
    """Hypothesis strategy for ``size`` codes of ``width`` bits: raw bytes, and where a
    selector byte says so, an entry of ``pool`` (edge values) instead.

    Drawing whole byte strings keeps generation cheap; shrinking still works (towards
    all-zero codes and the first pool entry).
    """
    nbytes = max(1, width // 8)
    pool = np.array(pool, dtype=np.uint64)

    def build(raw, selector, picks):
        codes = np.frombuffer(raw, dtype=_UINT[nbytes * 8]).astype(np.uint64)
        codes &= np.uint64((1 << width) - 1) if width < 64 else np.uint64(2**64 - 1)
        use_pool = np.frombuffer(selector, dtype=np.uint8) < 96
        chosen = pool[np.frombuffer(picks, dtype=np.uint16).astype(np.int64) % pool.size]
        return np.where(use_pool, chosen, codes)

    raw = st.binary(min_size=size * nbytes, max_size=size * nbytes)
    selector = st.binary(min_size=size, max_size=size)
    picks = st.binary(min_size=2 * size, max_size=2 * size)
    return st.builds(build, raw, selector, picks)


def float_arrays(et, size):
    """Bit patterns over the whole encoding space mixed with moderate values and specials."""
    width = et.bit_width
    moderate = _MODERATE.astype(np.float32).astype(et.numpy_dtype)
    specials = np.array([0.0, -0.0, 1.0, -1.0, 0.5, 2.0, inf, -inf, nan], np.float32)
    pool = np.concatenate([specials.astype(et.numpy_dtype), moderate])
    pool_codes = pool.view(_UINT[max(8, width)]).astype(np.uint64)
    return code_arrays(width, size, pool_codes).map(lambda codes: floats_from_codes(codes, et))


#: Examples per hypothesis test; raise HERON_XLA_EXAMPLES for a deeper (slower) sweep.
XLA_EXAMPLES = int(os.environ.get("HERON_XLA_EXAMPLES", "8"))
WIDE_SETTINGS = settings(
    max_examples=XLA_EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)


@pytest.mark.parametrize("et", WIDE_FLOATS, ids=str)
@WIDE_SETTINGS
@given(data=st.data())
def test_float_unary_vs_xla(et, data):
    _check_real_ops(et, [data.draw(float_arrays(et, 64))])


def test_expm1_where_xla_cpu_is_loosest():
    """At f32 0.0069321403 XLA:CPU's expm1 is 4.6 ulps from the exact value, the
    evaluator's correctly rounded: the f32 tolerance is 5 ulps (a hypothesis draw found
    it, over the 4 allowed before)."""
    import mpmath

    x = np.array([1004742402], np.uint32).view(np.float32)
    with mpmath.workprec(200):
        exact = np.float32(float(mpmath.expm1(mpmath.mpf(float(x[0])))))
    (ours,) = np.asarray(ev("exponential-minus-one", x))
    assert ours == exact
    _check_real_ops(E.F32, [x])


@pytest.mark.parametrize("et", [E.F16, E.BF16, *WIDE_FLOATS], ids=str)
@WIDE_SETTINGS
@given(data=st.data())
def test_float_binary_vs_xla(et, data):
    _check_real_ops(et, [data.draw(float_arrays(et, 64)), data.draw(float_arrays(et, 64))])


# -- integers -----------------------------------------------------------------

INTEGER_TYPES = [t for t in ElementType if t.is_integral]
INT_UNARY = ["abs", "count-leading-zeros", "negate", "not", "popcnt", "sign"]
INT_BINARY = sorted(set(ew._INT_BINARY) | {"and", "or", "xor"})


def ints_from_codes(codes, et):
    from heron.hlo.evaluator.integer_semantics import from_codes

    return from_codes(np.asarray(codes, dtype=np.uint64), et)


def _xla_cpu_widening_artifact(opcode, et, operands):
    """Elements where XLA:CPU works on a sub-byte int widened to 8 bits (documented)."""
    if not et.is_sub_byte:
        return np.zeros(operands[0].shape, bool)
    if opcode == "popcnt" and et.is_signed_integral:
        return operands[0].astype(np.int64) < 0
    if opcode == "power" and et.is_unsigned_integral:
        return operands[1].astype(np.int64) >= 2 ** (et.bit_width - 1)
    if opcode == "mulhi" and et.bit_width == 4:
        # XLA:CPU shifts a 4-bit product by 8, its byte's half (s2/u2 get their own);
        # heron gives every width its own half (integer_semantics.mulhi)
        product = operands[0].astype(np.int64) * operands[1].astype(np.int64)
        return ((product >> 4) & 15) != ((product >> 8) & 15)
    return np.zeros(operands[0].shape, bool)


def _check_int_ops(et, operands, ops):
    if et.is_unsigned_integral:
        # StableHLO (unlike HLO) has no abs/sign on unsigned types; the tables cover them.
        ops = [op for op in ops if op not in ("abs", "sign")]
    idx = tuple(range(len(operands)))
    outs = xla([(op, {}, et, idx) for op in ops], operands)
    for op, theirs in zip(ops, outs):
        ours = ev(op, *operands)
        assert ours.dtype == theirs.dtype
        differ = (
            (ours.astype(np.int64) != theirs.astype(np.int64))
            if et.bit_width < 64
            else (ours != theirs)
        )
        differ &= ~_xla_cpu_widening_artifact(op, et, operands)
        bad = np.flatnonzero(differ)
        if bad.size:
            show = [(tuple(o[i] for o in operands), ours[i], theirs[i]) for i in bad[:5]]
            pytest.fail(f"{op} {et}: {bad.size} elements differ from XLA:CPU, e.g. {show}")


@pytest.mark.parametrize("et", [t for t in INTEGER_TYPES if t.bit_width <= 8], ids=str)
def test_integer_ops_exhaustive_vs_xla(et):
    codes = all_codes(et)
    _check_int_ops(et, [ints_from_codes(codes, et)], INT_UNARY)
    a = ints_from_codes(np.repeat(codes, codes.size), et)
    b = ints_from_codes(np.tile(codes, codes.size), et)
    _check_int_ops(et, [a, b], INT_BINARY)


def int_arrays(et, size):
    width = et.bit_width
    edges = [0, 1, 2, 3, width - 1, width, width + 1, 2 ** (width - 1) - 1, 2 ** (width - 1)]
    edges += [2 ** (width - 1) + 1, 2**width - 1, 2**width - 2]
    return code_arrays(width, size, edges).map(lambda codes: ints_from_codes(codes, et))


@pytest.mark.parametrize("et", [t for t in INTEGER_TYPES if t.bit_width > 8], ids=str)
@WIDE_SETTINGS
@given(data=st.data())
def test_integer_ops_vs_xla(et, data):
    a, b = data.draw(int_arrays(et, 64)), data.draw(int_arrays(et, 64))
    _check_int_ops(et, [a], INT_UNARY)
    _check_int_ops(et, [a, b], INT_BINARY)


def test_pred_ops_vs_xla():
    a = np.array([True, True, False, False])
    b = np.array([True, False, True, False])
    ops = ["and", "or", "xor", "maximum", "minimum", "add", "multiply"]
    for op, theirs in zip(ops, xla([(op, {}, E.PRED, (0, 1)) for op in ops], [a, b])):
        np.testing.assert_array_equal(ev(op, a, b), theirs, err_msg=op)
    np.testing.assert_array_equal(ev("not", a), xla([("not", {}, E.PRED, (0,))], [a])[0])


# -- compare, select, clamp, reduce-precision, complex --------------------------

DIRECTIONS = ["EQ", "NE", "LT", "LE", "GT", "GE"]


def _check_compare(et, a, b, kinds):
    specs = [
        ("compare", {"direction": d} | ({"type": k} if k else {}), E.PRED, (0, 1))
        for d in DIRECTIONS
        for k in kinds
    ]
    for spec, theirs in zip(specs, xla(specs, [a, b])):
        ours = evaluate_elementwise("compare", spec[1], [a, b], E.PRED)
        bad = np.flatnonzero(ours != theirs)
        if bad.size:
            show = [(a[i], b[i], ours[i], theirs[i]) for i in bad[:5]]
            pytest.fail(f"compare {spec[1]} {et}: {bad.size} differ from XLA:CPU, e.g. {show}")


@pytest.mark.parametrize("et", [t for t in NARROW_FLOATS if t.bit_width <= 8], ids=str)
def test_compare_floats_exhaustive_vs_xla(et):
    codes = all_codes(et)
    a = floats_from_codes(np.repeat(codes, codes.size), et)
    b = floats_from_codes(np.tile(codes, codes.size), et)
    _check_compare(et, a, b, [None, "TOTALORDER"])


@pytest.mark.parametrize("et", [E.F16, E.BF16, *WIDE_FLOATS], ids=str)
@WIDE_SETTINGS
@given(data=st.data())
def test_compare_floats_vs_xla(et, data):
    a = data.draw(float_arrays(et, 64))
    # Half of the pairs compare an element with itself (equal values, same NaN payload).
    same = np.frombuffer(data.draw(st.binary(min_size=64, max_size=64)), np.uint8) < 128
    b = np.where(same, a, data.draw(float_arrays(et, 64)))
    _check_compare(et, a, b, [None, "TOTALORDER"])


@pytest.mark.parametrize("et", [E.PRED, *INTEGER_TYPES], ids=str)
def test_compare_integers_vs_xla(et):
    if et.is_pred:
        a = np.array([True, True, False, False])
        b = np.array([True, False, True, False])
    else:
        codes = np.array(
            sorted(
                {0, 1, 2**et.bit_width - 1, 2 ** (et.bit_width - 1), 2 ** (et.bit_width - 1) - 1}
            ),
            np.uint64,
        )
        a = ints_from_codes(np.repeat(codes, codes.size), et)
        b = ints_from_codes(np.tile(codes, codes.size), et)
    _check_compare(et, a, b, [None])


@pytest.mark.parametrize("et", [E.F32, E.BF16, E.F8E4M3FN, E.S32, E.U8, E.S4, E.PRED], ids=str)
def test_select_and_clamp_vs_xla(et):
    rng = np.random.default_rng(3)
    codes = rng.integers(0, 2**et.bit_width if et.bit_width < 64 else 2**63, 256, dtype=np.uint64)
    if et.is_floating:
        pool = floats_from_codes(codes, et)
    elif et.is_pred:
        pool = codes % 2 == 1
    else:
        pool = ints_from_codes(codes, et)
    x, lo, hi = pool[:64], pool[64:128], pool[128:192]
    pred = codes[192:] % 2 == 1
    ours = [
        ev("select", pred, x, lo),
        ev("clamp", lo, x, hi),
        ev("clamp", lo[:1].reshape(()), x, hi[:1].reshape(())),
    ]
    theirs = xla(
        [("select", {}, et, (0, 1, 2)), ("clamp", {}, et, (2, 1, 3)), ("clamp", {}, et, (4, 1, 5))],
        [pred, x, lo, hi, lo[:1].reshape(()), hi[:1].reshape(())],
    )
    for name, o, t in zip(["select", "clamp", "clamp-scalar"], ours, theirs):
        if et.is_floating:
            assert_float_close(name, et, o, t, [x])
        else:
            np.testing.assert_array_equal(o, t, err_msg=name)


REDUCE_PRECISION_BITS = [
    (1, 0),
    (2, 1),
    (4, 3),
    (5, 2),
    (5, 10),
    (8, 7),
    (8, 1),
    (8, 23),
    (11, 52),
    (3, 30),
]


@pytest.mark.parametrize("et", [*NARROW_FLOATS, *WIDE_FLOATS], ids=str)
def test_reduce_precision_vs_xla(et):
    if et.bit_width <= 16:
        x = floats_from_codes(all_codes(et), et)
    else:
        rng = np.random.default_rng(5)
        codes = rng.integers(0, 2**63, 4096, dtype=np.uint64) * np.uint64(2)
        if et.bit_width == 32:
            codes &= np.uint64(0xFFFFFFFF)
        x = np.concatenate([floats_from_codes(codes, et), _MODERATE.astype(et.numpy_dtype)])
    specs = [
        ("reduce-precision", {"exponent_bits": e, "mantissa_bits": m}, et, (0,))
        for e, m in REDUCE_PRECISION_BITS
    ]
    for spec, theirs in zip(specs, xla(specs, [x])):
        ours = evaluate_elementwise("reduce-precision", spec[1], [x], et)
        assert_float_close("reduce-precision", et, ours, theirs, [x])


COMPLEX_RTOL = {E.C64: 2.0**-17, E.C128: 2.0**-45}
COMPLEX_ATAN2_RTOL = {E.C64: 2.0**-13, E.C128: 2.0**-43}


def _complex_condition(op: str, z: np.ndarray) -> np.ndarray:
    """``|z f'(z) / f(z)|`` of a unary complex op at each ``z``, by a central difference
    of the evaluator in c128: how much the op magnifies a relative error of its input
    (or of any intermediate as close to it). Near a pole (logistic where ``1 + e^-z``
    cancels, tan, tanh) any two correct implementations differ by that many ulps."""
    wide = z.astype(np.complex128)
    step = 2.0**-26
    with np.errstate(all="ignore"):
        up = evaluate_elementwise(op, {}, [wide * (1 + step)], E.C128).astype(np.complex128)
        down = evaluate_elementwise(op, {}, [wide * (1 - step)], E.C128).astype(np.complex128)
        at = evaluate_elementwise(op, {}, [wide], E.C128).astype(np.complex128)
        condition = np.abs(up - down) / (2 * step * np.abs(at))
    return np.where(np.isfinite(condition), np.maximum(condition, 1.0), 1.0)


@pytest.mark.parametrize("et", [E.C64, E.C128], ids=str)
@settings(max_examples=max(2, XLA_EXAMPLES // 2), deadline=None)
@given(data=st.data())
def test_complex_ops_vs_xla(et, data):
    # Components in [1e-3, 5] in magnitude: no exact zeros, so no point lies on a branch
    # cut, where C99 (numpy) and XLA disagree on what the sign of a zero selects.
    part = st.floats(2.0**-10, 5, width=32).flatmap(lambda m: st.sampled_from([m, -m]))
    values = st.lists(st.tuples(part, part), min_size=32, max_size=32).map(
        lambda pairs: np.array([complex(a, b) for a, b in pairs], dtype=et.numpy_dtype)
    )
    z, w = data.draw(values), data.draw(values)
    unary = sorted(set(ew._COMPLEX_UNARY) - {"cbrt"})  # StableHLO's cbrt is real-only
    binary = sorted(ew._COMPLEX_BINARY)
    component = et.component_type
    specs = [(op, {}, et, (0,)) for op in unary] + [(op, {}, et, (0, 1)) for op in binary]
    specs += [(op, {}, component, (0,)) for op in ("abs", "real", "imag")]
    for (op, _, rt, idx), theirs in zip(specs, xla(specs, [z, w])):
        ours = evaluate_elementwise(op, {}, [[z, w][i] for i in idx], rt)
        rtol = (COMPLEX_ATAN2_RTOL if op == "atan2" else COMPLEX_RTOL)[et]
        if op == "power":
            rtol *= 16  # XLA composes pow, exp, atan2, log and cos/sin in the component type
        o, t = ours.astype(np.complex128), theirs.astype(np.complex128)
        scale = np.maximum(np.abs(o), 1.0)
        if idx == (0,) and rt == et:  # an ill-conditioned point allows its condition number
            scale = scale * _complex_condition(op, z)
        with np.errstate(invalid="ignore"):
            close = np.abs(o - t) <= rtol * scale
        close |= (o == t) | (np.isnan(o) & np.isnan(t))
        bad = np.flatnonzero(~close)
        if bad.size:
            show = [(z[i], w[i], ours[i], theirs[i]) for i in bad[:3]]
            pytest.fail(f"{op} {et}: {bad.size} elements differ from XLA:CPU, e.g. {show}")


def test_a_bf16_product_rounding_up_to_the_smallest_normal_is_flushed_by_xla():
    # Hypothesis found it: 1.97e-36 * 0.00595 in f32 is just under the smallest normal;
    # XLA:CPU flushes it to 0 before rounding to bf16, heron rounds it up to 2**-126.
    codes = np.zeros(64, np.uint64)
    lhs, rhs = codes.copy(), codes.copy()
    lhs[47], rhs[47] = 1064, 15299
    _check_real_ops(E.BF16, [floats_from_codes(lhs, E.BF16), floats_from_codes(rhs, E.BF16)])


def test_complex_sign_at_signed_zeros_and_infinities_is_xla_s_bit_for_bit():
    """A sweep of jnp.sign found heron's kernel and XLA:CPU at (-0, -0) and (0, nan) where
    the evaluator said (0, 0) and (nan, nan): heron run --check called them wrong."""
    z = np.array(
        [complex(-0.0, -0.0), complex(0, np.inf), complex(np.inf, 0), 3 - 4j, 0j, complex(-0.0, 0)],
        np.complex64,
    )
    (theirs,) = xla([("sign", {}, E.C64, (0,))], [z, z])
    ours = evaluate_elementwise("sign", {}, [z], E.C64)
    assert ours.view(np.uint32).tolist() == np.asarray(theirs).view(np.uint32).tolist()


def test_complex_division_by_zeros_and_infinities_is_xla_s_bit_for_bit():
    """numpy's division ignores a zero divisor's sign and C99's recovery of infinities:
    a sweep found ``1 / (-0 - 0i)`` +inf in the evaluator, -inf in heron's kernel and in
    XLA:CPU. Every pair of parts from signed zeros, 1, -2.5, infinities and NaN (2,401
    divisions): a result with an infinite or NaN part bit for bit (NaNs of either sign
    count as one), the finite ones within an ulp (XLA:CPU's (1 - 2.5i) / (1 - 2.5i) is
    1 - 5e-9i)."""
    values = [0.0, -0.0, 1.0, -2.5, np.inf, -np.inf, np.nan]
    parts = [complex(r, i) for r in values for i in values]
    z = np.array([p for p in parts for _ in parts], np.complex64)
    w = np.array([q for _ in parts for q in parts], np.complex64)
    (theirs,) = xla([("divide", {}, E.C64, (0, 1))], [z, w])
    ours = evaluate_elementwise("divide", {}, [z, w], E.C64)
    o, t = ours.view(np.float32).reshape(-1, 2), np.asarray(theirs).view(np.float32).reshape(-1, 2)
    special = ~np.isfinite(o).all(axis=1) | ~np.isfinite(t).all(axis=1)
    same = (o.view(np.uint32) == t.view(np.uint32)) | (np.isnan(o) & np.isnan(t))
    wrong = np.flatnonzero(special & ~same.all(axis=1))
    assert special.sum() > 1500 and wrong.size == 0, [(z[i], w[i], ours[i]) for i in wrong[:4]]
    np.testing.assert_allclose(ours[~special], np.asarray(theirs)[~special], rtol=2**-23)


def test_complex_logistic_near_its_pole_is_held_to_its_condition_number():
    """CI found it (2026-11-29): at z = 0.00195 + 3.1387i, 1 + e^-z cancels to 0.0035 of its
    terms, so f32 logistic magnifies rounding errors ~900 times and the evaluator and
    XLA:CPU differ by 1e-5 relative; the comparison allows the condition number."""
    z = np.array([0.001953125 + 3.138671875j, 1 + 1j], dtype=np.complex64)
    (theirs,) = xla([("logistic", {}, E.C64, (0,))], [z, z])
    ours = evaluate_elementwise("logistic", {}, [z], E.C64)
    condition = _complex_condition("logistic", z)
    assert condition[0] > 500 and condition[1] < 2
    o, t = ours.astype(np.complex128), theirs.astype(np.complex128)
    assert np.all(np.abs(o - t) <= COMPLEX_RTOL[E.C64] * np.maximum(np.abs(o), 1.0) * condition)


def _same_class(ours: np.ndarray, theirs: np.ndarray) -> np.ndarray:
    """Per element of two c64 arrays: each part the same infinity or zero (signs too)
    or both NaN, and finite parts within 1e-5 of the larger finite part (or 1)."""
    o, t = ours.astype(np.complex128), np.asarray(theirs).astype(np.complex128)
    finite_parts = [np.where(np.isfinite(p), np.abs(p), 0) for p in (o.real, o.imag)]
    scale = np.maximum(np.maximum(*finite_parts), 1.0)
    same = np.ones(o.shape, np.bool_)
    for p, q in ((o.real, t.real), (o.imag, t.imag)):
        with np.errstate(invalid="ignore"):
            close = np.isfinite(p) & np.isfinite(q) & (np.abs(p - q) <= 1e-5 * scale)
        same &= (p == q) | (np.isnan(p) & np.isnan(q)) | close
    return same


SPECIAL_PARTS = [0.0, -0.0, 1.0, -1.0, -2.5, 0.3, 50.0, 89.0, -100.0, 3e38, 1e-30]
SPECIAL_PARTS += [np.inf, -np.inf, np.nan]


def _xla_cpu_s_own_formula(op: str, z: np.ndarray) -> np.ndarray:
    """Where XLA:CPU's emitter has a formula of its own, not XLA:GPU's (which heron's
    kernels and the evaluator follow: :mod:`heron.hlo.evaluator.complex_semantics`):
    its sqrt ignores the sign of a zero imaginary part and has other NaN rules, and its
    log does not overflow where |z| does."""
    if op == "sqrt":
        return np.ones(z.shape, np.bool_)
    if op == "log":
        with np.errstate(over="ignore"):
            return ~np.isfinite(np.abs(z))
    return np.zeros(z.shape, np.bool_)


def test_complex_unary_special_values_are_xla_s():
    """A sweep found ``tanh(0 + inf i)`` and ``expm1(inf + 0i)`` reported wrong by heron
    run --check: the evaluator gave C99's (numpy's) special values, heron's kernels and
    XLA:CPU those of XLA's formulas (``nan + nan i``, ``inf + 0i``). Every unary op on
    every pair of parts from signed zeros, units, values whose exponentials or squares
    overflow f32, a tiny one, infinities and NaN: the same NaNs, infinities and zeros as
    XLA:CPU (before: 11 ops differed), but where XLA:CPU has formulas of its own. The
    ops XLA expands from CHLO are left out: jax hands heron their expansion."""
    z = np.array([complex(r, i) for r in SPECIAL_PARTS for i in SPECIAL_PARTS], np.complex64)
    unary = sorted(set(ew._COMPLEX_UNARY) - {"cbrt"} - CHLO_EXPANDED)
    specs = [(op, {}, E.C64, (0,)) for op in unary] + [("abs", {}, E.F32, (0,))]
    wrong = {}
    for (op, _, rt, _), theirs in zip(specs, xla(specs, [z, z])):
        with np.errstate(all="ignore"):
            ours = evaluate_elementwise(op, {}, [z], rt)
        same = _same_class(ours.astype(np.complex64), np.asarray(theirs).astype(np.complex64))
        same |= _xla_cpu_s_own_formula(op, z)
        if not same.all():
            wrong[op] = [(z[i], ours[i], theirs[i]) for i in np.flatnonzero(~same)[:3]]
    assert not wrong, wrong


def test_complex_products_past_the_component_range_are_xla_s():
    """A c64 product whose partial products overflow f32 is NaN where complex128 has room
    ((inf + 3e38 i)^2 is nan + inf i in heron's kernels and XLA:CPU, inf + inf i in
    complex128). On all products of pairs of parts from the special values, the evaluator
    matches XLA:CPU but where XLA:CPU contracts ``ac - bd`` into a fused multiply-add
    (``fma(a, c, -bd)`` reaches an infinity where the rounded ``ac`` is one too and the
    difference NaN)."""
    parts = [complex(r, i) for r in SPECIAL_PARTS for i in SPECIAL_PARTS]
    z = np.array([p for p in parts for _ in parts], np.complex64)
    w = np.array([q for _ in parts for q in parts], np.complex64)
    (theirs,) = xla([("multiply", {}, E.C64, (0, 1))], [z, w])
    with np.errstate(all="ignore"):
        ours = evaluate_elementwise("multiply", {}, [z, w], E.C64)
        a, b, c, d = (v.astype(np.float64) for v in (z.real, z.imag, w.real, w.imag))
        fused = np.empty(z.shape, np.complex64)  # each product exact in f64, one rounding
        fused.real = (a * c - (b * d).astype(np.float32)).astype(np.float32)
        fused.imag = (a * d + (b * c).astype(np.float32)).astype(np.float32)
        fused_other = np.empty(z.shape, np.complex64)  # the other product fused
        fused_other.real = ((a * c).astype(np.float32) - b * d).astype(np.float32)
        fused_other.imag = ((a * d).astype(np.float32) + b * c).astype(np.float32)
    explained = _same_class(fused, theirs) | _same_class(fused_other, theirs)
    same = _same_class(ours, theirs)
    wrong = np.flatnonzero(~same & ~explained)
    assert wrong.size == 0, [(z[i], w[i], ours[i], theirs[i]) for i in wrong[:4]]
    assert same.sum() > 0.97 * z.size


def test_complex128_power_of_a_base_whose_square_overflows():
    # a * a + b * b overflowed f64 from |x| of 1e154: z ** 0.5 at 1e300 + 1e300i was
    # NaN in the evaluator, where heron's kernels and XLA:CPU give 1.1e150 + 4.6e149i
    # (a helper's sweep 9). The square root of 1 + i, scaled.
    from heron.hlo.evaluator.elementwise import _complex_power

    base = np.array([1e300 + 1e300j, 1e308, 1e-300 + 1e-300j], np.complex128)
    got = _complex_power(base, np.full(3, 0.5 + 0j))
    root = 1.0986841134678099 + 0.45508986056222733j
    expected = np.array([1e150 * root, 1e154, 1e-150 * root], np.complex128)
    np.testing.assert_allclose(got, expected, rtol=4e-16)
