"""Evaluator: gather and scatter, hand-computed and against jax (XLA:CPU)."""

from __future__ import annotations

import jax
import numpy as np
import pytest
from jax import lax

from heron.hlo.evaluator import evaluate_module
from heron.hlo.parser import parse_module


def run(text: str, *args):
    return evaluate_module(parse_module(text), list(args))


def jax_check(fn, *args, exact=True):
    """Evaluate jax's own HLO for ``fn`` and compare with what jax computes."""
    module = parse_module(jax.jit(fn).lower(*args).as_text("hlo"))
    got = evaluate_module(module, list(args))
    want = np.asarray(jax.jit(fn)(*args))
    if exact:
        np.testing.assert_array_equal(got, want)
    else:
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


RNG = np.random.default_rng(7)
OPERAND = np.arange(30 * 20, dtype=np.float32).reshape(30, 20)


# -- gather ------------------------------------------------------------------------


def test_gather_rows_with_collapsed_dim():
    out = run(
        """
        ENTRY e {
          x = f32[30,20] parameter(0)
          i = s32[3] parameter(1)
          ROOT g = f32[3,20] gather(x, i), offset_dims={1}, collapsed_slice_dims={0},
            start_index_map={0}, index_vector_dim=1, slice_sizes={1,20}
        }""",
        OPERAND,
        np.asarray([4, 0, 29], np.int32),
    )
    np.testing.assert_array_equal(out, OPERAND[[4, 0, 29]])


def test_gather_index_vector_dim_equal_to_rank_means_trailing_1():
    # Indices s32[2,2] with index_vector_dim=2: every element is a 1-vector.
    x = np.arange(10, dtype=np.float32) * 10
    out = run(
        """
        ENTRY e {
          x = f32[10] parameter(0)
          i = s32[2,2] parameter(1)
          ROOT g = f32[2,2,3] gather(x, i), offset_dims={2}, collapsed_slice_dims={},
            start_index_map={0}, index_vector_dim=2, slice_sizes={3}
        }""",
        x,
        np.asarray([[0, 2], [9, -4]], np.int32),
    )
    # starts clamp to [0, 7]: 9 -> 7, -4 -> 0
    np.testing.assert_array_equal(out[0, 0], [0, 10, 20])
    np.testing.assert_array_equal(out[0, 1], [20, 30, 40])
    np.testing.assert_array_equal(out[1, 0], [70, 80, 90])
    np.testing.assert_array_equal(out[1, 1], [0, 10, 20])


def test_gather_start_index_map_permuted_and_clamped():
    indices = np.asarray([[0, 0], [19, 29], [-3, 5], [17, 27], [3, 100]], np.int32)
    out = run(
        """
        ENTRY e {
          x = f32[30,20] parameter(0)
          i = s32[5,2] parameter(1)
          ROOT g = f32[5,4,8] gather(x, i), offset_dims={1,2}, collapsed_slice_dims={},
            start_index_map={1,0}, index_vector_dim=1, slice_sizes={4,8}
        }""",
        OPERAND,
        indices,
    )
    for n, (col, row) in enumerate(indices):
        r = min(max(row, 0), 26)
        c = min(max(col, 0), 12)
        np.testing.assert_array_equal(out[n], OPERAND[r : r + 4, c : c + 8])


def test_gather_offset_dims_before_batch_dims():
    out = run(
        """
        ENTRY e {
          x = f32[30,20] parameter(0)
          i = s32[2,1] parameter(1)
          ROOT g = f32[5,2] gather(x, i), offset_dims={0}, collapsed_slice_dims={0},
            start_index_map={0}, index_vector_dim=1, slice_sizes={1,5}
        }""",
        OPERAND,
        np.asarray([[3], [7]], np.int32),
    )
    np.testing.assert_array_equal(out, OPERAND[[3, 7], :5].T)


def test_gather_with_batching_dims():
    # operand f32[3,6] batched on dim 0 with indices s32[3,2] batched on dim 0:
    # result[b, k] = x[b, i[b, k]].
    x = np.arange(18, dtype=np.float32).reshape(3, 6)
    idx = np.asarray([[0, 5], [2, 2], [4, 1]], np.int32)
    out = run(
        """
        ENTRY e {
          x = f32[3,6] parameter(0)
          i = s32[3,2] parameter(1)
          ROOT g = f32[3,2] gather(x, i), offset_dims={}, collapsed_slice_dims={1},
            start_index_map={1}, operand_batching_dims={0}, start_indices_batching_dims={0},
            index_vector_dim=2, slice_sizes={1,1}
        }""",
        x,
        idx,
    )
    np.testing.assert_array_equal(out, np.take_along_axis(x, idx, axis=1))


@pytest.mark.parametrize("seed", range(3))
def test_gather_matches_jax(seed):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((6, 7, 8)).astype(np.float32)
    idx = rng.integers(-3, 10, size=(4, 5, 2)).astype(np.int32)
    dn = lax.GatherDimensionNumbers(
        offset_dims=(2, 3), collapsed_slice_dims=(1,), start_index_map=(1, 2)
    )
    jax_check(lambda a, i: lax.gather(a, i, dn, (6, 1, 3), mode="clip"), x, idx)


# -- scatter -----------------------------------------------------------------------

ADD = """
add {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}
"""


def scatter_rows(combiner: str, root_combiner: str = "add") -> str:
    return (
        combiner
        + f"""
        ENTRY e {{
          x = f32[6,3] parameter(0)
          i = s32[4,1] parameter(1)
          u = f32[4,2,3] parameter(2)
          ROOT s = f32[6,3] scatter(x, i, u), update_window_dims={{1,2}},
            inserted_window_dims={{}}, scatter_dims_to_operand_dims={{0}}, index_vector_dim=1,
            to_apply={root_combiner}
        }}"""
    )


def test_scatter_skips_whole_window_when_any_part_is_out_of_bounds():
    x = np.zeros((6, 3), np.float32)
    updates = (
        np.ones((4, 2, 3), np.float32) * np.asarray([1, 10, 100, 1000], np.float32)[:, None, None]
    )
    # start 5 would cover rows 5..6: row 6 does not exist, so the whole window is skipped;
    # -1 likewise. Starts 0 and 4 are applied.
    out = run(scatter_rows(ADD), x, np.asarray([[0], [5], [-1], [4]], np.int32), updates)
    expected = np.zeros((6, 3), np.float32)
    expected[0:2] += 1
    expected[4:6] += 1000
    np.testing.assert_array_equal(out, expected)


def test_scatter_all_updates_to_one_index_accumulate():
    x = np.zeros((6, 3), np.float32)
    updates = np.arange(24, dtype=np.float32).reshape(4, 2, 3)
    out = run(scatter_rows(ADD), x, np.zeros((4, 1), np.int32), updates)
    expected = np.zeros((6, 3), np.float32)
    expected[0:2] = updates.sum(axis=0)
    np.testing.assert_array_equal(out, expected)


def test_scatter_generic_combiner_applies_updates_in_order():
    # A non-commutative combiner: new = 2 * old + update. In-order application
    # at one index of updates u1..u4 gives 16*x + 8*u1 + 4*u2 + 2*u3 + u4.
    combiner = """
    comb {
      a = f32[] parameter(0)
      b = f32[] parameter(1)
      two = f32[] constant(2)
      m = f32[] multiply(a, two)
      ROOT s = f32[] add(m, b)
    }
    """
    x = np.ones((6, 3), np.float32)
    updates = np.broadcast_to(np.asarray([1, 2, 3, 4], np.float32)[:, None, None], (4, 2, 3))
    out = run(
        scatter_rows(combiner, "comb"),
        x,
        np.asarray([[2], [2], [0], [2]], np.int32),
        np.ascontiguousarray(updates),
    )
    expected = np.ones((6, 3), np.float32)
    expected[0:2] = 2 * 1 + 3
    # rows 2..3 get updates 1, 2, 4 in order: ((1*2+1)*2+2)*2+4 = 20
    expected[2:4] = 20
    np.testing.assert_array_equal(out, expected)


def test_scatter_overwrite_last_update_wins():
    combiner = """
    take {
      a = f32[] parameter(0)
      ROOT b = f32[] parameter(1)
    }
    """
    x = np.zeros((6, 3), np.float32)
    updates = np.broadcast_to(np.asarray([1, 2, 3, 4], np.float32)[:, None, None], (4, 2, 3))
    out = run(
        scatter_rows(combiner, "take"),
        x,
        np.asarray([[1], [3], [1], [7]], np.int32),
        np.ascontiguousarray(updates),
    )
    expected = np.zeros((6, 3), np.float32)
    expected[1:3] = 3
    expected[3:5] = 2
    np.testing.assert_array_equal(out, expected)


def test_variadic_scatter_with_tuple_combiner_argmax():
    text = """
    argmax {
      s0 = f32[] parameter(0)
      i0 = s32[] parameter(1)
      s1 = f32[] parameter(2)
      i1 = s32[] parameter(3)
      gt = pred[] compare(s1, s0), direction=GT
      s = f32[] select(gt, s1, s0)
      i = s32[] select(gt, i1, i0)
      ROOT t = (f32[], s32[]) tuple(s, i)
    }
    ENTRY e {
      scores = f32[4] parameter(0)
      ids = s32[4] parameter(1)
      idx = s32[5,1] parameter(2)
      us = f32[5] parameter(3)
      ui = s32[5] parameter(4)
      ROOT r = (f32[4], s32[4]) scatter(scores, ids, idx, us, ui), update_window_dims={},
        inserted_window_dims={0}, scatter_dims_to_operand_dims={0}, index_vector_dim=1,
        to_apply=argmax
    }"""
    scores, ids = run(
        text,
        np.zeros(4, np.float32),
        np.full(4, -1, np.int32),
        np.asarray([[1], [1], [3], [1], [9]], np.int32),
        np.asarray([0.5, 2.0, -1.0, 1.0, 7.0], np.float32),
        np.asarray([10, 11, 12, 13, 14], np.int32),
    )
    np.testing.assert_array_equal(scores, [0, 2.0, 0, 0])
    np.testing.assert_array_equal(ids, [-1, 11, -1, -1])


def test_scatter_unsigned_indices_and_integer_add_wraps():
    text = """
    add {
      a = s8[] parameter(0)
      b = s8[] parameter(1)
      ROOT s = s8[] add(a, b)
    }
    ENTRY e {
      x = s8[3] parameter(0)
      i = u8[2] parameter(1)
      u = s8[2] parameter(2)
      ROOT s = s8[3] scatter(x, i, u), update_window_dims={}, inserted_window_dims={0},
        scatter_dims_to_operand_dims={0}, index_vector_dim=1, to_apply=add
    }"""
    out = run(
        text,
        np.asarray([120, 0, 0], np.int8),
        np.asarray([0, 255], np.uint8),
        np.asarray([10, 1], np.int8),
    )
    np.testing.assert_array_equal(out, np.asarray([-126, 0, 0], np.int8))


@pytest.mark.parametrize("mode", ["add", "max", "set"])
def test_scatter_matches_jax(mode):
    rng = np.random.default_rng(3)
    x = rng.standard_normal((7, 5, 4)).astype(np.float32)
    idx = rng.integers(-2, 8, size=(6, 2)).astype(np.int32)
    upd = rng.standard_normal((6, 2, 4)).astype(np.float32)
    dn = lax.ScatterDimensionNumbers(
        update_window_dims=(1, 2), inserted_window_dims=(1,), scatter_dims_to_operand_dims=(0, 1)
    )
    op = {"add": lax.scatter_add, "max": lax.scatter_max, "set": lax.scatter}[mode]
    jax_check(
        lambda a, i, u: op(a, i, u, dn, mode=lax.GatherScatterMode.FILL_OR_DROP),
        x,
        idx,
        upd,
        exact=mode != "add",
    )


def test_jax_indexed_add_with_negative_indices():
    x = np.zeros((5, 3), np.float32)
    i = np.asarray([[-1], [0], [-1]], np.int32)
    jax_check(lambda a, i: a.at[i[:, 0]].add(1.0), x, i)


def test_gather_and_scatter_with_batching_dims_match_jax():
    rng = np.random.default_rng(9)
    x = rng.standard_normal((3, 5, 6)).astype(np.float32)
    # Indices batch dimension 1 (size 3) pairs with operand dimension 0.
    idx = rng.integers(-1, 6, (4, 3, 1)).astype(np.int32)
    gdn = lax.GatherDimensionNumbers(
        offset_dims=(2,),
        collapsed_slice_dims=(1,),
        start_index_map=(1,),
        operand_batching_dims=(0,),
        start_indices_batching_dims=(1,),
    )
    jax_check(lambda a, i: lax.gather(a, i, gdn, (1, 1, 4), mode="clip"), x, idx)
    upd = rng.standard_normal((4, 3, 4)).astype(np.float32)
    sdn = lax.ScatterDimensionNumbers(
        update_window_dims=(2,),
        inserted_window_dims=(1,),
        scatter_dims_to_operand_dims=(1,),
        operand_batching_dims=(0,),
        scatter_indices_batching_dims=(1,),
    )
    jax_check(lambda a, i, u: lax.scatter_add(a, i, u, sdn, mode="drop"), x, idx, upd, exact=False)
