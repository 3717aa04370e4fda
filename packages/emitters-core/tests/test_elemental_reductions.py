"""reduce, reduce-window and dot of the elemental emitter vs the evaluator.

reduce follows the evaluator's documented order (a pairwise tree over the
reduced elements, the init value combined last), so even float sums and
non-associative reducers match bit for bit. reduce-window folds in window
order from the init value, skipping padding and dilation holes. dot
accumulates in the evaluator's wide type: integer dots are exact; float dots
are exact for inputs whose sums are exact and within a tight tolerance
otherwise (numpy's matmul sums in its own order).
"""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
from heron_test_support.elemental_cases import check as check_against_evaluator
from heron_test_support.elemental_cases import resolution_sites
from mlir import ir

from heron.hlo.element_types import ElementType as E


def random_values(element: E, dims, rng: np.random.Generator) -> np.ndarray:
    """Random finite values (normal-ish floats with some edge values, full-range integers)."""
    dims = tuple(dims)
    if element.is_pred:
        return rng.integers(0, 2, size=dims).astype(bool)
    if element.is_integral:
        width = element.bit_width
        lo = -(1 << (width - 1)) if element.is_signed_integral else 0
        return rng.integers(lo, lo + (1 << width), size=dims).astype(element.numpy_dtype)
    values = rng.standard_normal(dims) * 4
    return values.astype(element.numpy_dtype)


def compare(actual: np.ndarray, expected: np.ndarray, rtol: float = 0.0) -> None:
    expected = np.asarray(expected)
    assert actual.shape == expected.shape and actual.dtype == expected.dtype
    element = E.from_numpy(expected.dtype)
    if element.is_integral or element.is_pred:
        np.testing.assert_array_equal(actual, expected)
        return
    wide = np.complex128 if element.is_complex else np.float64
    a = np.asarray(actual, wide)
    b = np.asarray(expected, wide)
    if rtol:
        np.testing.assert_allclose(a, b, rtol=rtol, atol=rtol, equal_nan=True)
        return
    nan = np.isnan(b)
    np.testing.assert_array_equal(np.isnan(a), nan)
    bits_a = np.ascontiguousarray(actual).view(np.uint8).reshape(actual.size, -1)
    bits_b = np.ascontiguousarray(expected).view(np.uint8).reshape(expected.size, -1)
    same = np.all(bits_a == bits_b, axis=1) | nan.reshape(-1)
    assert np.all(same), f"{a.reshape(-1)[~same][:6]} != {b.reshape(-1)[~same][:6]}"


def check(text: str, inputs, rtol: float = 0.0) -> list[np.ndarray]:
    return check_against_evaluator(text, inputs, lambda a, b: compare(a, b, rtol))


def _binary(name: str, op: str, t: str) -> str:
    return f"""
{name} {{
  a = {t}[] parameter(0)
  b = {t}[] parameter(1)
  ROOT r = {t}[] {op}(a, b)
}}
"""


# -- reduce ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("t", ["f32", "bf16", "f16", "f64"])
@pytest.mark.parametrize(
    "dims,reduced,out",
    [
        ("3,7,5", "1", "3,5"),
        ("3,4,5", "0,2", "4"),
        ("13", "0", ""),
        ("2,3,4", "0,1,2", ""),
        ("4,33", "1", "4"),
        ("6,1", "1", "6"),
    ],
)
def test_float_add_reduce_matches_the_tree_order_exactly(t, dims, reduced, out) -> None:
    text = (
        _binary("add", "add", t)
        + f"""
fusion {{
  p0 = {t}[{dims}] parameter(0)
  c = {t}[] parameter(1)
  ROOT r = {t}[{out}] reduce(p0, c), dimensions={{{reduced}}}, to_apply=add
}}"""
    )
    rng = np.random.default_rng(1)
    shape = tuple(int(d) for d in dims.split(","))
    wide = rng.standard_normal(shape) * np.exp(rng.standard_normal(shape) * 6)
    x = np.clip(wide, -6e4, 6e4).astype(E(t).numpy_dtype)
    check(text, [x, np.asarray(0.1, E(t).numpy_dtype)])


@pytest.mark.parametrize("n", [1, 2, 3, 5, 8, 13, 32, 33])
def test_non_associative_reducer_matches_the_tree_structure(n: int) -> None:
    text = f"""
f {{
  a = s32[] parameter(0)
  b = s32[] parameter(1)
  k = s32[] constant(3)
  s = s32[] shift-left(a, k)
  ROOT o = s32[] xor(s, b)
}}

fusion {{
  p0 = s32[3,{n},2] parameter(0)
  c = s32[] constant(7)
  ROOT r = s32[3] reduce(p0, c), dimensions={{1,2}}, to_apply=f
}}"""
    check(text, [np.random.default_rng(n).integers(0, 1000, (3, n, 2)).astype(np.int32)])


@pytest.mark.parametrize(
    "t,op",
    [
        ("s32", "add"),
        ("s4", "add"),
        ("u8", "multiply"),
        ("s8", "maximum"),
        ("u32", "minimum"),
        ("s16", "xor"),
        ("pred", "and"),
        ("pred", "or"),
        ("f32", "maximum"),
        ("bf16", "minimum"),
    ],
)
def test_order_independent_reducers(t: str, op: str) -> None:
    text = (
        _binary("f", op, t)
        + f"""
fusion {{
  p0 = {t}[5,6,7] parameter(0)
  c = {t}[] parameter(1)
  ROOT r = {t}[6] reduce(p0, c), dimensions={{0,2}}, to_apply=f
}}"""
    )
    rng = np.random.default_rng(2)
    element = E(t)
    x = random_values(element, (5, 6, 7), rng)
    if element.is_floating:  # NaN propagation and the order of signed zeros
        x[0, 0, 0] = np.nan
        x[:, 1, :] = 0
        x[2, 1, 3] = -0.0
        x[:, 2, :] = -0.0
    check(text, [x, random_values(element, (), rng)])


def test_variadic_reduce_corpus_form() -> None:
    text = """
add {
  scalar_lhs.0 = f32[] parameter(0)
  scalar_lhs.1 = f32[] parameter(1)
  scalar_rhs.0 = f32[] parameter(2)
  scalar_rhs.1 = f32[] parameter(3)
  add = f32[] add(scalar_lhs.0, scalar_rhs.0)
  mul = f32[] multiply(scalar_lhs.1, scalar_rhs.1)
  ROOT t = (f32[], f32[]) tuple(add, mul)
}

fusion {
  param_0 = f32[3,4,5] parameter(0)
  param_1 = f32[3,4,5] parameter(1)
  c = f32[] constant(0)
  ROOT d.1 = (f32[4], f32[4]) reduce(param_0, param_1, c, c), dimensions={0,2},
      to_apply=add
}"""
    rng = np.random.default_rng(3)
    x = rng.standard_normal((3, 4, 5)).astype(np.float32)
    y = (1 + rng.standard_normal((3, 4, 5)) / 8).astype(np.float32)
    check(text, [x, y])


def test_variadic_argmax_reduce_with_ties() -> None:
    text = """
argmax {
  v0 = f32[] parameter(0)
  i0 = s32[] parameter(1)
  v1 = f32[] parameter(2)
  i1 = s32[] parameter(3)
  gt = pred[] compare(v0, v1), direction=GT
  eq = pred[] compare(v0, v1), direction=EQ
  lt = pred[] compare(i0, i1), direction=LT
  tie = pred[] and(eq, lt)
  keep = pred[] or(gt, tie)
  v = f32[] select(keep, v0, v1)
  i = s32[] select(keep, i0, i1)
  ROOT t = (f32[], s32[]) tuple(v, i)
}

fusion {
  x = f32[4,9] parameter(0)
  idx = s32[4,9] iota(), iota_dimension=1
  lo = f32[] constant(-inf)
  zero = s32[] constant(0)
  ROOT r = (f32[4], s32[4]) reduce(x, idx, lo, zero), dimensions={1}, to_apply=argmax
}"""
    x = np.random.default_rng(4).integers(0, 3, (4, 9)).astype(np.float32)
    out = check(text, [x])
    np.testing.assert_array_equal(out[1], np.argmax(x, axis=1))


def test_reduce_of_an_empty_dimension_is_the_init_value() -> None:
    text = (
        _binary("add", "add", "f32")
        + """
fusion {
  p0 = f32[3,0] parameter(0)
  c = f32[] parameter(1)
  ROOT r = f32[3] reduce(p0, c), dimensions={1}, to_apply=add
}"""
    )
    out = check(text, [np.zeros((3, 0), np.float32), np.float32(2.5)])
    np.testing.assert_array_equal(out[0], [2.5, 2.5, 2.5])


def test_reduce_of_a_fused_producer() -> None:
    text = (
        _binary("max", "maximum", "s32")
        + """
fusion {
  p0 = s32[4,6] parameter(0)
  t = s32[6,4] transpose(p0), dimensions={1,0}
  z = s32[] constant(-2147483648)
  ROOT r = s32[6] reduce(t, z), dimensions={1}, to_apply=max
}"""
    )
    check(text, [np.random.default_rng(5).integers(-99, 99, (4, 6)).astype(np.int32)])


# -- reduce-window ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "window,out",
    [
        ("size=2x3", "6,5"),
        ("size=3x2 stride=2x3", "3,2"),
        ("size=3x3 pad=1_1x1_1", "7,7"),
        ("size=2x2 stride=2x2 pad=0_1x2_0", "4,4"),
        ("size=2x2 lhs_dilate=2x1", "12,6"),
        ("size=2x3 rhs_dilate=2x2", "5,3"),
        ("size=3x2 stride=2x3 pad=1_0x1_2 lhs_dilate=1x2 rhs_dilate=2x1", "2,5"),
        ("size=7x7", "1,1"),
    ],
)
@pytest.mark.parametrize("t", ["f32", "s32", "bf16"])
def test_reduce_window(window: str, out: str, t: str) -> None:
    text = (
        _binary("add", "add", t)
        + f"""
fusion {{
  p0 = {t}[7,7] parameter(0)
  c = {t}[] parameter(1)
  ROOT r = {t}[{out}] reduce-window(p0, c), window={{{window}}}, to_apply=add
}}"""
    )
    rng = np.random.default_rng(6)
    element = E(t)
    check(text, [random_values(element, (7, 7), rng), random_values(element, (), rng)])


def test_reduce_window_max_pool_with_padding_skips_holes() -> None:
    text = (
        _binary("max", "maximum", "f32")
        + """
fusion {
  p0 = f32[1,5,5,1] parameter(0)
  c = f32[] constant(100)
  ROOT r = f32[1,3,3,1] reduce-window(p0, c),
    window={size=1x3x3x1 stride=1x2x2x1 pad=0_0x1_1x1_1x0_0}, to_apply=max
}"""
    )
    x = np.random.default_rng(7).standard_normal((1, 5, 5, 1)).astype(np.float32)
    out = check(text, [x])
    assert np.all(out[0] == 100)  # padding is not an element: the init value wins


def test_variadic_reduce_window() -> None:
    text = """
both {
  a0 = s32[] parameter(0)
  a1 = f32[] parameter(1)
  b0 = s32[] parameter(2)
  b1 = f32[] parameter(3)
  s = s32[] add(a0, b0)
  m = f32[] maximum(a1, b1)
  ROOT t = (s32[], f32[]) tuple(s, m)
}

fusion {
  x = s32[6,4] parameter(0)
  y = f32[6,4] parameter(1)
  c0 = s32[] constant(0)
  c1 = f32[] constant(-inf)
  ROOT r = (s32[3,3], f32[3,3]) reduce-window(x, y, c0, c1), window={size=2x2 stride=2x1},
    to_apply=both
}"""
    rng = np.random.default_rng(8)
    check(text, [random_values(E.S32, (6, 4), rng), random_values(E.F32, (6, 4), rng)])


# -- dot ------------------------------------------------------------------------------------------


DOT_CASES = [
    # lhs, rhs, out, dimension numbers
    ("3,4", "4,5", "3,5", "lhs_contracting_dims={1}, rhs_contracting_dims={0}"),
    (
        "2,3,4",
        "2,4,5",
        "2,3,5",
        "lhs_batch_dims={0}, rhs_batch_dims={0},"
        " lhs_contracting_dims={2}, rhs_contracting_dims={1}",
    ),
    (
        "4,2,3,6",
        "6,5,2,4",
        "2,4,3,5",
        "lhs_batch_dims={1,0}, rhs_batch_dims={2,3},"
        " lhs_contracting_dims={3}, rhs_contracting_dims={0}",
    ),
    (
        "3,4,2",
        "2,4,5",
        "3,5",
        "lhs_contracting_dims={1,2}, rhs_contracting_dims={1,0}",
    ),
    ("3", "4", "3,4", ""),
    ("7", "7", "", "lhs_contracting_dims={0}, rhs_contracting_dims={0}"),
]


@pytest.mark.parametrize("lhs,rhs,out,numbers", DOT_CASES)
@pytest.mark.parametrize("types", [("s8", "s8", "s32"), ("u8", "s8", "s16"), ("s32", "s32", "s32")])
def test_integer_dot_is_exact(lhs, rhs, out, numbers, types) -> None:
    a, b, c = types
    sep = ", " if numbers else ""
    text = f"""
fusion {{
  p0 = {a}[{lhs}] parameter(0)
  p1 = {b}[{rhs}] parameter(1)
  ROOT d = {c}[{out}] dot(p0, p1){sep}{numbers}
}}"""
    rng = np.random.default_rng(9)
    shape = lambda s: tuple(int(d) for d in s.split(","))  # noqa: E731
    check(text, [random_values(E(a), shape(lhs), rng), random_values(E(b), shape(rhs), rng)])


@pytest.mark.parametrize("lhs,rhs,out,numbers", DOT_CASES)
@pytest.mark.parametrize("t", ["f32", "bf16", "f16", "f64"])
def test_float_dot_with_exact_sums(lhs, rhs, out, numbers, t) -> None:
    sep = ", " if numbers else ""
    text = f"""
fusion {{
  p0 = {t}[{lhs}] parameter(0)
  p1 = {t}[{rhs}] parameter(1)
  ROOT d = {t}[{out}] dot(p0, p1){sep}{numbers}
}}"""
    rng = np.random.default_rng(10)
    shape = lambda s: tuple(int(d) for d in s.split(","))  # noqa: E731
    dtype = E(t).numpy_dtype
    x = rng.integers(-8, 8, shape(lhs)).astype(dtype)
    y = rng.integers(-8, 8, shape(rhs)).astype(dtype)
    check(text, [x, y])


@pytest.mark.parametrize("t,rtol", [("f32", 1e-5), ("f64", 1e-12), ("bf16", 1e-2), ("c64", 1e-5)])
def test_float_dot_random_values(t: str, rtol: float) -> None:
    text = f"""
fusion {{
  p0 = {t}[2,5,16] parameter(0)
  p1 = {t}[2,16,3] parameter(1)
  ROOT d = {t}[2,5,3] dot(p0, p1), lhs_batch_dims={{0}}, rhs_batch_dims={{0}},
    lhs_contracting_dims={{2}}, rhs_contracting_dims={{1}}
}}"""
    rng = np.random.default_rng(11)
    element = E(t)
    if element.is_complex:
        x = (rng.standard_normal((2, 5, 16)) + 1j * rng.standard_normal((2, 5, 16))).astype(
            np.complex64
        )
        y = (rng.standard_normal((2, 16, 3)) + 1j * rng.standard_normal((2, 16, 3))).astype(
            np.complex64
        )
    else:
        x = random_values(element, (2, 5, 16), rng)
        y = random_values(element, (2, 16, 3), rng)
    check(text, [x, y], rtol=rtol)


def test_fp8_dot_corpus_form() -> None:
    text = """
fusion {
  p0 = f8e4m3fn[23,42]{1,0} parameter(0)
  p1 = f8e4m3fn[42,1]{1,0} parameter(1)
  ROOT %dot = f8e4m3fn[23,1]{1,0} dot(p0, p1),
   lhs_contracting_dims={1}, rhs_contracting_dims={0}
}"""
    rng = np.random.default_rng(12)
    x = rng.integers(-4, 5, (23, 42)).astype(ml_dtypes.float8_e4m3fn)
    y = rng.integers(-1, 2, (42, 1)).astype(ml_dtypes.float8_e4m3fn)
    check(text, [x, y])  # small integers: every partial sum is exact in f32


def test_mixed_dot_bf16_times_f32_and_pred_dot() -> None:
    text = """
fusion {
  p0 = bf16[3,4] parameter(0)
  p1 = f32[4,2] parameter(1)
  ROOT d = f32[3,2] dot(p0, p1), lhs_contracting_dims={1}, rhs_contracting_dims={0}
}"""
    rng = np.random.default_rng(13)
    check(
        text,
        [
            rng.integers(-8, 8, (3, 4)).astype(ml_dtypes.bfloat16),
            rng.integers(-8, 8, (4, 2)).astype(np.float32),
        ],
    )
    text = """
fusion {
  p0 = pred[3,4] parameter(0)
  p1 = pred[4,2] parameter(1)
  ROOT d = pred[3,2] dot(p0, p1), lhs_contracting_dims={1}, rhs_contracting_dims={0}
}"""
    check(text, [rng.integers(0, 2, (3, 4)).astype(bool), rng.integers(0, 2, (4, 2)).astype(bool)])


# -- where operands are resolved --------------------------------------------------------------


def _resolution_sites(text: str, rank: int) -> dict[str, list[str]]:
    """Where the root's operands are resolved; they are f32, a reducer returns its first half."""

    def call(computation, scalars):
        return scalars[: len(scalars) // 2]

    return resolution_sites(text, rank, ir.F32Type.get, call)


def test_reduce_and_dot_operands_are_resolved_inside_the_loops() -> None:
    sites = _resolution_sites(
        _binary("add", "add", "f32")
        + """
fusion {
  p0 = f32[4,5] parameter(0)
  c = f32[] parameter(1)
  ROOT r = f32[4] reduce(p0, c), dimensions={1}, to_apply=add
}""",
        1,
    )
    assert sites == {"p0": ["scf.for"], "c": ["func.func"]}
    sites = _resolution_sites(
        """
fusion {
  p0 = f32[3,4] parameter(0)
  p1 = f32[4,5] parameter(1)
  ROOT d = f32[3,5] dot(p0, p1), lhs_contracting_dims={1}, rhs_contracting_dims={0}
}""",
        2,
    )
    assert sites == {"p0": ["scf.for"], "p1": ["scf.for"]}
    sites = _resolution_sites(
        _binary("add", "add", "f32")
        + """
fusion {
  p0 = f32[5] parameter(0)
  c = f32[] parameter(1)
  ROOT r = f32[3] reduce-window(p0, c), window={size=3 pad=1_1 stride=2}, to_apply=add
}""",
        1,
    )
    assert sites == {"p0": ["scf.if"], "c": ["func.func"]}
