"""Evaluator: reduce, reduce-window, select-and-scatter, map and sort."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest
from jax import lax

from heron.hlo.evaluator import evaluate_module
from heron.hlo.parser import parse_module


def run(text: str, *args):
    return evaluate_module(parse_module(text), list(args))


def jax_module(fn, *args):
    return parse_module(jax.jit(fn).lower(*args).as_text("hlo"))


def binary(name: str, op: str, et: str = "f32") -> str:
    return f"""
{name} {{
  a = {et}[] parameter(0)
  b = {et}[] parameter(1)
  ROOT r = {et}[] {op}(a, b)
}}
"""


RNG = np.random.default_rng(11)

# -- reduce ------------------------------------------------------------------------


def test_reduce_to_scalar():
    x = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    out = run(
        binary("add", "add")
        + """
        ENTRY e {
          p = f32[2,3,4] parameter(0)
          z = f32[] constant(0)
          ROOT r = f32[] reduce(p, z), dimensions={0,1,2}, to_apply=add
        }""",
        x,
    )
    assert out.shape == () and out == 276


def test_reduce_middle_dims_and_init_value_counted_once():
    x = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    out = run(
        binary("add", "add")
        + """
        ENTRY e {
          p = f32[2,3,4] parameter(0)
          z = f32[] constant(100)
          ROOT r = f32[3] reduce(p, z), dimensions={0,2}, to_apply=add
        }""",
        x,
    )
    np.testing.assert_array_equal(out, x.sum(axis=(0, 2)) + 100)


def test_reduce_integer_wraps_in_element_type():
    x = np.full((4, 100), 100, dtype=np.int8)
    out = run(
        binary("add", "add", "s8")
        + """
        ENTRY e {
          p = s8[4,100] parameter(0)
          z = s8[] constant(0)
          ROOT r = s8[4] reduce(p, z), dimensions={1}, to_apply=add
        }""",
        x,
    )
    assert out.dtype == np.int8
    np.testing.assert_array_equal(
        out, np.full(4, (100 * 100) % 256 - 256 * ((100 * 100) % 256 >= 128))
    )


def test_reduce_generic_reducer_runs_on_arrays():
    # max(|a|, |b|): not a single recognised op, so evaluated through the interpreter.
    x = RNG.standard_normal((5, 7)).astype(np.float32)
    out = run(
        """
        absmax {
          a = f32[] parameter(0)
          b = f32[] parameter(1)
          aa = f32[] abs(a)
          ab = f32[] abs(b)
          ROOT m = f32[] maximum(aa, ab)
        }
        ENTRY e {
          p = f32[5,7] parameter(0)
          z = f32[] constant(0)
          ROOT r = f32[7] reduce(p, z), dimensions={0}, to_apply=absmax
        }""",
        x,
    )
    np.testing.assert_array_equal(out, np.abs(x).max(axis=0))


def test_reduce_non_commutative_reducer_keeps_element_order():
    # f(a, b) = b: with the init combined on the left, the result is the last element.
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    out = run(
        """
        last {
          a = f32[] parameter(0)
          ROOT b = f32[] parameter(1)
        }
        ENTRY e {
          p = f32[3,4] parameter(0)
          z = f32[] constant(-1)
          ROOT r = f32[3] reduce(p, z), dimensions={1}, to_apply=last
        }""",
        x,
    )
    np.testing.assert_array_equal(out, [3, 7, 11])


def test_variadic_argmax_reduce():
    x = np.asarray([[1, 5, 5, 2], [-1, -3, -1, -7]], np.float32)
    text = """
    argmax {
      a = f32[] parameter(0)
      ai = s32[] parameter(1)
      b = f32[] parameter(2)
      bi = s32[] parameter(3)
      gt = pred[] compare(a, b), direction=GT
      eq = pred[] compare(a, b), direction=EQ
      lt = pred[] compare(ai, bi), direction=LT
      tie = pred[] and(eq, lt)
      pick_a = pred[] or(gt, tie)
      v = f32[] select(pick_a, a, b)
      i = s32[] select(pick_a, ai, bi)
      ROOT t = (f32[], s32[]) tuple(v, i)
    }
    ENTRY e {
      p = f32[2,4] parameter(0)
      io = s32[2,4] iota(), iota_dimension=1
      ninf = f32[] constant(-inf)
      zero = s32[] constant(0)
      ROOT r = (f32[2], s32[2]) reduce(p, io, ninf, zero), dimensions={1}, to_apply=argmax
    }"""
    values, indices = run(text, x)
    np.testing.assert_array_equal(values, [5, -1])
    np.testing.assert_array_equal(indices, [1, 0])


def test_reduce_bf16_accumulates_in_bf16():
    # 1024 ones in bf16: a sequential bf16 sum sticks at 256 (256 + 1 rounds back
    # to 256); the tree gives exactly 1024 (every partial sum is a power of two).
    x = np.ones((1024,), ml_dtypes.bfloat16)
    out = run(
        binary("add", "add", "bf16")
        + """
        ENTRY e {
          p = bf16[1024] parameter(0)
          z = bf16[] constant(0)
          ROOT r = bf16[] reduce(p, z), dimensions={0}, to_apply=add
        }""",
        x,
    )
    assert out.dtype == ml_dtypes.bfloat16 and float(out) == 1024.0


@pytest.mark.parametrize(
    ("fn", "dtype", "rtol"),
    [
        (lambda x: jnp.sum(x, axis=1), np.float32, 1e-5),
        (lambda x: jnp.max(x, axis=(0, 2)), np.float32, 0),
        (lambda x: jnp.argmax(x, axis=2), np.float32, 0),
        (lambda x: jnp.prod(x, axis=0), np.int32, 0),
        (lambda x: jnp.sum(x.astype(jnp.bfloat16), axis=1), np.float32, 1e-2),
    ],
)
def test_reduce_matches_jax(fn, dtype, rtol):
    x = (RNG.standard_normal((4, 33, 6)) * 3).astype(dtype)
    got = evaluate_module(jax_module(fn, x), [x])
    want = np.asarray(jax.jit(fn)(x))
    assert got.dtype == want.dtype
    np.testing.assert_allclose(
        got.astype(np.float64), want.astype(np.float64), rtol=rtol, atol=1e-5 if rtol else 0
    )


# -- reduce-window -------------------------------------------------------------------


def test_reduce_window_padding_is_skipped_not_combined():
    # init 1 with add: padding elements must not add 1 each.
    x = np.arange(5, dtype=np.float32)
    out = run(
        binary("add", "add")
        + """
        ENTRY e {
          p = f32[5] parameter(0)
          one = f32[] constant(1)
          ROOT r = f32[5] reduce-window(p, one), window={size=3 pad=1_1}, to_apply=add
        }""",
        x,
    )
    np.testing.assert_array_equal(out, [1 + 0 + 1, 1 + 0 + 1 + 2, 1 + 6, 1 + 9, 1 + 3 + 4])


@pytest.mark.parametrize(
    ("window", "strides", "padding", "base", "win_dil"),
    [
        ((2, 3), (1, 1), ((0, 0), (0, 0)), (1, 1), (1, 1)),
        ((3, 2), (2, 1), ((1, 1), (0, 2)), (1, 2), (1, 2)),
        ((1, 3), (1, 2), ((2, 0), (1, 1)), (2, 1), (1, 1)),
    ],
)
def test_reduce_window_matches_jax(window, strides, padding, base, win_dil):
    x = RNG.standard_normal((7, 9)).astype(np.float32)

    def fn(a):
        return lax.reduce_window(a, -jnp.inf, lax.max, window, strides, padding, base, win_dil)

    got = evaluate_module(jax_module(fn, x), [x])
    np.testing.assert_array_equal(got, np.asarray(jax.jit(fn)(x)))


def test_variadic_reduce_window():
    x = np.asarray([3, 1, 4, 1, 5, 9, 2, 6], np.float32)
    text = """
    pair {
      a = f32[] parameter(0)
      b = s32[] parameter(1)
      c = f32[] parameter(2)
      d = s32[] parameter(3)
      s = f32[] add(a, c)
      m = s32[] maximum(b, d)
      ROOT t = (f32[], s32[]) tuple(s, m)
    }
    ENTRY e {
      p = f32[8] parameter(0)
      q = s32[8] iota(), iota_dimension=0
      z = f32[] constant(0)
      n = s32[] constant(-1)
      ROOT r = (f32[4], s32[4]) reduce-window(p, q, z, n), window={size=2 stride=2}, to_apply=pair
    }"""
    sums, maxes = run(text, x)
    np.testing.assert_array_equal(sums, [4, 5, 14, 8])
    np.testing.assert_array_equal(maxes, [1, 3, 5, 7])


# -- select-and-scatter ----------------------------------------------------------------


def test_select_and_scatter_max_pool_gradient():
    text = """
    ge {
      a = f32[] parameter(0)
      b = f32[] parameter(1)
      ROOT c = pred[] compare(a, b), direction=GE
    }
    add {
      a = f32[] parameter(0)
      b = f32[] parameter(1)
      ROOT c = f32[] add(a, b)
    }
    ENTRY e {
      x = f32[4,4] parameter(0)
      s = f32[2,3] parameter(1)
      z = f32[] constant(0)
      ROOT r = f32[4,4] select-and-scatter(x, s, z), window={size=2x2 stride=2x1},
        select=ge, scatter=add
    }"""
    x = np.asarray([[1, 9, 2, 0], [3, 4, 9, 1], [7, 7, 0, 2], [1, 2, 3, 8]], np.float32)
    source = np.asarray([[1, 10, 100], [1000, 10000, 100000]], np.float32)
    out = run(text, x, source)
    expected = np.zeros((4, 4), np.float32)
    expected[0, 1] += 1 + 10  # windows (0,0) and (0,1) both pick the first 9 (GE keeps it)
    expected[1, 2] += 100
    expected[2, 0] += 1000  # 7 ties 7: GE keeps the first
    expected[2, 1] += 10000
    expected[3, 3] += 100000
    np.testing.assert_array_equal(out, expected)


def test_select_and_scatter_matches_jax_max_pool_grad():
    x = RNG.standard_normal((2, 6, 7, 3)).astype(np.float32)

    def pool(a):
        return lax.reduce_window(a, -jnp.inf, lax.max, (1, 3, 2, 1), (1, 2, 2, 1), "SAME")

    def grad(a):
        return jax.grad(lambda v: jnp.sum(pool(v) ** 2))(a)

    module = jax_module(grad, x)
    assert any(i.opcode == "select-and-scatter" for i in module.instructions())
    got = evaluate_module(module, [x])
    np.testing.assert_allclose(got, np.asarray(jax.jit(grad)(x)), rtol=1e-6)


# -- map ---------------------------------------------------------------------------------


def test_map_applies_computation_elementwise():
    text = """
    f {
      a = f32[] parameter(0)
      b = f32[] parameter(1)
      m = f32[] multiply(a, b)
      one = f32[] constant(1)
      ROOT s = f32[] add(m, one)
    }
    ENTRY e {
      x = f32[2,3] parameter(0)
      y = f32[2,3] parameter(1)
      ROOT r = f32[2,3] map(x, y), dimensions={0,1}, to_apply=f
    }"""
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    out = run(text, x, x)
    np.testing.assert_array_equal(out, x * x + 1)


# -- sort ----------------------------------------------------------------------------------


def test_sort_descending_single_operand():
    out = run(
        """
        gt {
          a = s32[] parameter(0)
          b = s32[] parameter(1)
          ROOT c = pred[] compare(a, b), direction=GT
        }
        ENTRY e {
          p = s32[2,5] parameter(0)
          ROOT s = s32[2,5] sort(p), dimensions={1}, to_apply=gt
        }""",
        np.asarray([[3, 1, 4, 1, 5], [9, 2, 6, 5, 3]], np.int32),
    )
    np.testing.assert_array_equal(out, [[5, 4, 3, 1, 1], [9, 6, 5, 3, 2]])


def test_sort_along_dimension_0():
    x = np.asarray([[3, 0], [1, 2], [2, 1]], np.float32)
    out = run(
        """
        lt {
          a = f32[] parameter(0)
          b = f32[] parameter(1)
          ROOT c = pred[] compare(a, b), direction=LT
        }
        ENTRY e {
          p = f32[3,2] parameter(0)
          ROOT s = f32[3,2] sort(p), dimensions={0}, to_apply=lt
        }""",
        x,
    )
    np.testing.assert_array_equal(out, np.sort(x, axis=0))


def test_stable_multi_operand_sort_with_custom_comparator():
    # Sort by key modulo 3 (a comparator no fast path recognises); stable, so equal
    # classes keep their original order; the payload follows its key.
    text = """
    by_mod3 {
      a = s32[] parameter(0)
      b = s32[] parameter(1)
      pa = f32[] parameter(2)
      pb = f32[] parameter(3)
      three = s32[] constant(3)
      ra = s32[] remainder(a, three)
      rb = s32[] remainder(b, three)
      ROOT lt = pred[] compare(ra, rb), direction=LT
    }
    ENTRY e {
      k = s32[9] parameter(0)
      v = f32[9] parameter(1)
      ROOT s = (s32[9], f32[9]) sort(k, v), dimensions={0}, is_stable=true, to_apply=by_mod3
    }"""
    keys = np.asarray([5, 3, 7, 0, 4, 8, 6, 1, 2], np.int32)
    payload = np.arange(9, dtype=np.float32)
    sorted_keys, sorted_payload = run(text, keys, payload)
    order = sorted(range(9), key=lambda i: keys[i] % 3)
    np.testing.assert_array_equal(sorted_keys, keys[order])
    np.testing.assert_array_equal(sorted_payload, payload[order])


def test_sort_lexicographic_two_keys_ascending_then_descending():
    text = """
    lex {
      a = s32[] parameter(0)
      b = s32[] parameter(1)
      c = s32[] parameter(2)
      d = s32[] parameter(3)
      lt0 = pred[] compare(a, b), direction=LT
      eq0 = pred[] compare(a, b), direction=EQ
      lt1 = pred[] compare(c, d), direction=GT
      both = pred[] and(eq0, lt1)
      ROOT r = pred[] or(lt0, both)
    }
    ENTRY e {
      k0 = s32[3,50] parameter(0)
      k1 = s32[3,50] parameter(1)
      ROOT s = (s32[3,50], s32[3,50]) sort(k0, k1), dimensions={1}, to_apply=lex
    }"""
    k0 = RNG.integers(0, 4, (3, 50)).astype(np.int32)
    k1 = RNG.integers(0, 100, (3, 50)).astype(np.int32)
    s0, s1 = run(text, k0, k1)
    for r in range(3):
        order = np.lexsort((-k1[r], k0[r]))
        np.testing.assert_array_equal(s0[r], k0[r][order])
        np.testing.assert_array_equal(s1[r], k1[r][order])


def test_sort_total_order_puts_negative_zero_first():
    text = """
    lt {
      a = f32[] parameter(0)
      b = f32[] parameter(1)
      ROOT c = pred[] compare(a, b), direction=LT, type=TOTALORDER
    }
    ENTRY e {
      p = f32[5] parameter(0)
      ROOT s = f32[5] sort(p), dimensions={0}, is_stable=true, to_apply=lt
    }"""
    out = run(text, np.asarray([0.0, np.nan, -0.0, -1.0, np.inf], np.float32))
    assert np.signbit(out[1]) and out[1] == 0 and not np.signbit(out[2])
    assert out[0] == -1 and out[3] == np.inf and np.isnan(out[4])


@pytest.mark.parametrize("length", [1, 2, 7, 64, 100])
def test_sort_matches_jax_with_jax_comparator(length):
    # jax's comparator canonicalises NaN and -0 with selects: the generic path.
    x = RNG.standard_normal((3, length)).astype(np.float32)
    y = RNG.standard_normal((3, length)).astype(np.float32)

    def fn(a, b):
        return lax.sort((a, b), dimension=1, num_keys=1)

    module = jax_module(fn, x, y)
    got = evaluate_module(module, [x, y])
    want = jax.jit(fn)(x, y)
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g, np.asarray(w))


def test_topk_matches_jax_with_ties_and_nan():
    x = RNG.standard_normal((4, 9)).astype(np.float32)
    x[0, 2] = np.nan
    x[1, 3] = -0.0
    x[1, 4] = 0.0
    x[2, :] = 1.0

    def fn(a):
        return lax.top_k(a, 3)

    values, indices = evaluate_module(jax_module(fn, x), [x])
    want_values, want_indices = jax.jit(fn)(x)
    np.testing.assert_array_equal(values, np.asarray(want_values))
    np.testing.assert_array_equal(indices, np.asarray(want_indices))
    assert indices.dtype == np.int32
    np.testing.assert_array_equal(indices[2], [0, 1, 2])  # ties: lowest index first


@pytest.mark.parametrize("fn", [lambda a: jnp.cumsum(a, axis=1), lambda a: jnp.cumprod(a, axis=0)])
def test_cumulative_ops_match_jax(fn):
    # jax lowers these to reduce-window with edge padding.
    x = RNG.standard_normal((5, 8)).astype(np.float32)
    got = evaluate_module(jax_module(fn, x), [x])
    np.testing.assert_allclose(got, np.asarray(jax.jit(fn)(x)), rtol=1e-6, atol=1e-6)


def test_reduce_generic_reducer_over_non_adjacent_dims():
    x = RNG.standard_normal((3, 4, 5, 2)).astype(np.float32)
    text = """
    sumsq {
      a = f32[] parameter(0)
      b = f32[] parameter(1)
      m = f32[] multiply(b, b)
      ROOT s = f32[] add(a, m)
    }
    ENTRY e {
      p = f32[3,4,5,2] parameter(0)
      z = f32[] constant(0)
      ROOT r = f32[4,2] reduce(p, z), dimensions={0,2}, to_apply=sumsq
    }"""
    # Not associative, so the result depends on the tree: with the tree's pairs
    # (a, b) -> a + b*b, check against the same tree computed in numpy.
    values = np.transpose(x, (0, 2, 1, 3)).reshape(15, 4, 2)
    level = list(values)
    while len(level) > 1:
        pairs = [level[i] + level[i + 1] * level[i + 1] for i in range(0, len(level) - 1, 2)]
        level = pairs + ([level[-1]] if len(level) % 2 else [])
    expected = np.float32(0) + level[0] * level[0]
    np.testing.assert_allclose(run(text, x), expected, rtol=1e-6)


SUM_ORDER = """
by_sum {
  a0 = s32[] parameter(0)
  b0 = s32[] parameter(1)
  a1 = s32[] parameter(2)
  b1 = s32[] parameter(3)
  sa = s32[] add(a0, a1)
  sb = s32[] add(b0, b1)
  ROOT lt = pred[] compare(sa, sb), direction=LT
}
ENTRY e {
  x = s32[2,LEN] parameter(0)
  y = s32[2,LEN] parameter(1)
  ROOT s = (s32[2,LEN], s32[2,LEN]) sort(x, y), dimensions={1}, is_stable=true, to_apply=by_sum
}"""


@pytest.mark.parametrize("length", [2, 3, 7, 16, 33, 100])
def test_stable_sort_by_a_function_of_two_operands_uses_the_merge_sort(length):
    # The key x + y mixes two operands: no per-operand key exists, so the comparator
    # itself drives a merge sort. Stability: equal sums keep their order.
    x = RNG.integers(0, 5, (2, length)).astype(np.int32)
    y = RNG.integers(0, 5, (2, length)).astype(np.int32)
    sx, sy = run(SUM_ORDER.replace("LEN", str(length)), x, y)
    for r in range(2):
        order = sorted(range(length), key=lambda i, r=r: x[r, i] + y[r, i])
        np.testing.assert_array_equal(sx[r], x[r, order])
        np.testing.assert_array_equal(sy[r], y[r, order])


def test_sort_with_a_comparator_that_is_not_an_order_still_permutes(monkeypatch):
    # "a and b differ in parity" is no strict weak order: the merge sort notices (its
    # positions collide) and Python's sort decides, one comparison at a time. The
    # result is unspecified but must be a permutation of the input.
    from heron.hlo.evaluator import reductions

    fallbacks = []
    original = reductions._sort_rows_one_by_one

    def spy(*args):
        fallbacks.append(1)
        return original(*args)

    monkeypatch.setattr(reductions, "_sort_rows_one_by_one", spy)
    text = """
    parity_differs {
      a = s32[] parameter(0)
      b = s32[] parameter(1)
      x = s32[] xor(a, b)
      one = s32[] constant(1)
      y = s32[] and(x, one)
      zero = s32[] constant(0)
      ROOT c = pred[] compare(y, zero), direction=NE
    }
    ENTRY e {
      p = s32[12] parameter(0)
      ROOT s = s32[12] sort(p), dimensions={0}, to_apply=parity_differs
    }"""
    x = np.asarray([4, 1, 5, 0, 3, 3, 2, 5, 0, 1, 4, 2], np.int32)
    out = run(text, x)
    np.testing.assert_array_equal(np.sort(out), np.sort(x))
    assert fallbacks


@pytest.mark.parametrize(
    "fn",
    [
        lambda v: jnp.max(v, axis=1),
        lambda v: jnp.min(v, axis=1),
        lambda v: jnp.max(v, axis=1, initial=-0.0),
        lambda v: lax.reduce_window(v, -jnp.inf, lax.max, (1, 2), (1, 1), "VALID"),
    ],
)
def test_max_and_min_reductions_order_negative_zero_below_positive_zero(fn):
    x = np.asarray([[-0.0, 0.0, -0.0], [-0.0, -0.0, -1.0], [0.0, 1, 0], [np.nan, 0, 1]], np.float32)
    got = evaluate_module(jax_module(fn, x), [x])
    want = np.asarray(jax.jit(fn)(x))
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(np.signbit(got), np.signbit(want))


def test_scatter_max_orders_negative_zero_below_positive_zero():
    def fn(a, i, u):
        return a.at[i[:, 0]].max(u)

    z = np.asarray([-0.0, -0.0, 0.0], np.float32)
    i = np.asarray([[0], [0], [1]], np.int32)
    u = np.asarray([0.0, -0.0, -0.0], np.float32)
    got = evaluate_module(jax_module(fn, z, i, u), [z, i, u])
    np.testing.assert_array_equal(np.signbit(got), [False, True, False])


def test_sort_with_unsigned_comparison_of_signed_values():
    text = """
    lt {
      a = s32[] parameter(0)
      b = s32[] parameter(1)
      ROOT c = pred[] compare(a, b), direction=LT, type=UNSIGNED
    }
    ENTRY e {
      p = s32[4] parameter(0)
      ROOT s = s32[4] sort(p), dimensions={0}, to_apply=lt
    }"""
    out = run(text, np.asarray([-1, 2, -5, 0], np.int32))
    np.testing.assert_array_equal(out, [0, 2, -5, -1])  # as u32: 0, 2, 2**32-5, 2**32-1


def test_sort_and_topk_of_sub_byte_integers():
    text = """
    gt {
      a = s4[] parameter(0)
      b = s4[] parameter(1)
      ROOT c = pred[] compare(a, b), direction=GT
    }
    ENTRY e {
      p = s4[6] parameter(0)
      s = s4[6] sort(p), dimensions={0}, to_apply=gt
      t = (s4[2], s32[2]) topk(p), k=2, largest=false
      v = s4[2] get-tuple-element(t), index=0
      i = s32[2] get-tuple-element(t), index=1
      ROOT r = (s4[6], s4[2], s32[2]) tuple(s, v, i)
    }"""
    x = np.asarray([3, -8, 7, 0, -8, 1], ml_dtypes.int4)
    s, v, i = run(text, x)
    np.testing.assert_array_equal(s.astype(np.int8), [7, 3, 1, 0, -8, -8])
    np.testing.assert_array_equal(v.astype(np.int8), [-8, -8])
    np.testing.assert_array_equal(i, [1, 4])
