"""Evaluator: data movement ops on small hand-computed cases, edge cases included."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from heron.hlo.errors import HloEvaluationError, UnsupportedError
from heron.hlo.evaluator import evaluate_module
from heron.hlo.parser import parse_module


def run(text: str, *args):
    return evaluate_module(parse_module(text), list(args))


def f32(values) -> np.ndarray:
    return np.asarray(values, dtype=np.float32)


def s32(values) -> np.ndarray:
    return np.asarray(values, dtype=np.int32)


X23 = f32([[1, 2, 3], [4, 5, 6]])


def test_broadcast_maps_operand_dims_to_result_dims():
    out = run(
        """
        ENTRY e {
          p = f32[3] parameter(0)
          ROOT b = f32[2,3,4] broadcast(p), dimensions={1}
        }""",
        f32([1, 2, 3]),
    )
    assert out.shape == (2, 3, 4)
    np.testing.assert_array_equal(out[1, :, 2], [1, 2, 3])
    np.testing.assert_array_equal(out[0, 2, :], [3, 3, 3, 3])


def test_broadcast_scalar_and_transposing_dimensions():
    out = run(
        """
        ENTRY e {
          p = f32[2,3] parameter(0)
          ROOT b = f32[3,5,2] broadcast(p), dimensions={2,0}
        }""",
        X23,
    )
    np.testing.assert_array_equal(out[:, 0, :], X23.T)
    np.testing.assert_array_equal(out[:, 4, :], X23.T)


def test_reshape_is_row_major():
    out = run(
        """
        ENTRY e {
          p = f32[2,3] parameter(0)
          ROOT r = f32[3,2] reshape(p)
        }""",
        X23,
    )
    np.testing.assert_array_equal(out, [[1, 2], [3, 4], [5, 6]])


def test_bitcast_between_layouts_is_a_transpose():
    # Physical order of f32[2,3]{0,1} is column-major: 1 4 2 5 3 6. Read back as
    # row-major f32[3,2]{1,0} that is [[1,4],[2,5],[3,6]].
    out = run(
        """
        ENTRY e {
          p = f32[2,3]{0,1} parameter(0)
          ROOT b = f32[3,2]{1,0} bitcast(p)
        }""",
        X23,
    )
    np.testing.assert_array_equal(out, [[1, 4], [2, 5], [3, 6]])


def test_bitcast_same_layout_is_a_reshape():
    out = run(
        """
        ENTRY e {
          p = f32[2,3]{1,0} parameter(0)
          ROOT b = f32[6]{0} bitcast(p)
        }""",
        X23,
    )
    np.testing.assert_array_equal(out, [1, 2, 3, 4, 5, 6])


def test_bitcast_rank3_layouts():
    x = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    # Operand layout {1,2,0}: dim 1 minor, then 2, then 0: physical index order (0, 2, 1).
    # Result layout {2,0,1}: physical order (1, 0, 2) of dims [3, 2, 4].
    out = run(
        """
        ENTRY e {
          p = f32[2,3,4]{1,2,0} parameter(0)
          ROOT b = f32[4,2,3]{2,0,1} bitcast(p)
        }""",
        x,
    )
    physical = np.transpose(x, (0, 2, 1)).reshape(-1)
    expected = np.transpose(physical.reshape(2, 4, 3), (1, 0, 2))
    np.testing.assert_array_equal(out, expected)


def test_bitcast_changes_element_type_by_reinterpreting_bits():
    out = run(
        """
        ENTRY e {
          p = f32[2] parameter(0)
          ROOT b = s32[2] bitcast(p)
        }""",
        f32([1.0, -2.0]),
    )
    np.testing.assert_array_equal(out, f32([1.0, -2.0]).view(np.int32))


def test_transpose():
    x = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    out = run(
        """
        ENTRY e {
          p = f32[2,3,4] parameter(0)
          ROOT t = f32[4,2,3] transpose(p), dimensions={2,0,1}
        }""",
        x,
    )
    np.testing.assert_array_equal(out, np.transpose(x, (2, 0, 1)))


def test_copy_keeps_logical_values_across_layouts():
    out = run(
        """
        ENTRY e {
          p = f32[2,3]{1,0} parameter(0)
          ROOT c = f32[2,3]{0,1} copy(p)
        }""",
        X23,
    )
    np.testing.assert_array_equal(out, X23)


def test_slice_with_strides():
    x = np.arange(30, dtype=np.float32).reshape(5, 6)
    out = run(
        """
        ENTRY e {
          p = f32[5,6] parameter(0)
          ROOT s = f32[2,2] slice(p), slice={[1:5:2], [0:6:4]}
        }""",
        x,
    )
    np.testing.assert_array_equal(out, [[6, 10], [18, 22]])


DYNAMIC_SLICE = """
ENTRY e {
  p = f32[5,6] parameter(0)
  i = s32[] parameter(1)
  j = s32[] parameter(2)
  ROOT d = f32[2,3] dynamic-slice(p, i, j), dynamic_slice_sizes={2,3}
}"""


@pytest.mark.parametrize(
    ("i", "j", "start"),
    [(1, 2, (1, 2)), (-7, 1, (0, 1)), (4, 5, (3, 3)), (2**31 - 1, -(2**31), (3, 0))],
)
def test_dynamic_slice_clamps_starts(i, j, start):
    x = np.arange(30, dtype=np.float32).reshape(5, 6)
    out = run(DYNAMIC_SLICE, x, s32(i), s32(j))
    np.testing.assert_array_equal(out, x[start[0] : start[0] + 2, start[1] : start[1] + 3])


def test_dynamic_slice_unsigned_huge_index_clamps_to_the_end():
    x = np.arange(10, dtype=np.float32)
    out = run(
        """
        ENTRY e {
          p = f32[10] parameter(0)
          i = u64[] parameter(1)
          ROOT d = f32[4] dynamic-slice(p, i), dynamic_slice_sizes={4}
        }""",
        x,
        np.asarray(2**64 - 1, dtype=np.uint64),
    )
    np.testing.assert_array_equal(out, [6, 7, 8, 9])


def test_dynamic_update_slice_clamps_and_does_not_touch_the_input():
    x = np.zeros((4, 4), dtype=np.float32)
    update = np.ones((2, 3), dtype=np.float32)
    out = run(
        """
        ENTRY e {
          p = f32[4,4] parameter(0)
          u = f32[2,3] parameter(1)
          i = s8[] parameter(2)
          j = s8[] parameter(3)
          ROOT d = f32[4,4] dynamic-update-slice(p, u, i, j)
        }""",
        x,
        update,
        np.asarray(100, np.int8),
        np.asarray(-3, np.int8),
    )
    expected = np.zeros((4, 4), np.float32)
    expected[2:4, 0:3] = 1
    np.testing.assert_array_equal(out, expected)
    assert not x.any()


def test_pad_interior_and_edges():
    out = run(
        """
        ENTRY e {
          p = f32[3] parameter(0)
          z = f32[] constant(0)
          ROOT q = f32[8] pad(p, z), padding=1_2_1
        }""",
        f32([1, 2, 3]),
    )
    np.testing.assert_array_equal(out, [0, 1, 0, 2, 0, 3, 0, 0])


def test_pad_negative_edges_crop():
    out = run(
        """
        ENTRY e {
          p = f32[2,3] parameter(0)
          z = f32[] constant(-1)
          ROOT q = f32[3,4] pad(p, z), padding=1_0x-1_0_1
        }""",
        X23,
    )
    # dim 1: [1,_,2,_,3] with low -1 -> [_,2,_,3] (the interior pad survives)
    np.testing.assert_array_equal(out, [[-1, -1, -1, -1], [-1, 2, -1, 3], [-1, 5, -1, 6]])


def test_pad_negative_both_sides_with_interior():
    out = run(
        """
        ENTRY e {
          p = s32[4] parameter(0)
          z = s32[] constant(9)
          ROOT q = s32[5] pad(p, z), padding=-1_-1_1
        }""",
        s32([1, 2, 3, 4]),
    )
    np.testing.assert_array_equal(out, [9, 2, 9, 3, 9])


def test_concatenate():
    out = run(
        """
        ENTRY e {
          a = f32[2,3] parameter(0)
          b = f32[2,1] parameter(1)
          ROOT c = f32[2,4] concatenate(a, b), dimensions={1}
        }""",
        X23,
        f32([[7], [8]]),
    )
    np.testing.assert_array_equal(out, [[1, 2, 3, 7], [4, 5, 6, 8]])


def test_reverse():
    out = run(
        """
        ENTRY e {
          p = f32[2,3] parameter(0)
          ROOT r = f32[2,3] reverse(p), dimensions={0,1}
        }""",
        X23,
    )
    np.testing.assert_array_equal(out, [[6, 5, 4], [3, 2, 1]])


def test_iota_integer_and_float_types():
    out = run(
        """
        ENTRY e {
          ROOT i = s32[2,3] iota(), iota_dimension=1
        }"""
    )
    np.testing.assert_array_equal(out, [[0, 1, 2], [0, 1, 2]])
    out = run(
        """
        ENTRY e {
          ROOT i = bf16[3,2] iota(), iota_dimension=0
        }"""
    )
    assert out.dtype == ml_dtypes.bfloat16
    np.testing.assert_array_equal(out.astype(np.float32), [[0, 0], [1, 1], [2, 2]])


def test_iota_bf16_rounds_large_values():
    out = run(
        """
        ENTRY e {
          ROOT i = bf16[260] iota(), iota_dimension=0
        }"""
    )
    # 257 is not a bf16 value: round to nearest even gives 256.
    assert float(out[257]) == 256.0
    assert float(out[259]) == 260.0


def test_iota_s4_wraps():
    out = run(
        """
        ENTRY e {
          ROOT i = s4[10] iota(), iota_dimension=0
        }"""
    )
    assert out.dtype == ml_dtypes.int4
    np.testing.assert_array_equal(out.astype(np.int8), [0, 1, 2, 3, 4, 5, 6, 7, -8, -7])


def test_tuple_and_get_tuple_element():
    out = run(
        """
        ENTRY e {
          a = f32[2,3] parameter(0)
          b = s32[] parameter(1)
          t = (f32[2,3], s32[]) tuple(a, b)
          n = ((f32[2,3], s32[]), s32[]) tuple(t, b)
          g = (f32[2,3], s32[]) get-tuple-element(n), index=0
          ROOT r = (s32[], f32[2,3]) tuple(b, a)
        }""",
        X23,
        s32(7),
    )
    assert isinstance(out, tuple) and len(out) == 2
    assert out[0] == 7
    np.testing.assert_array_equal(out[1], X23)


def test_constant_and_get_dimension_size():
    out = run(
        """
        ENTRY e {
          p = f32[5,7] parameter(0)
          c = s32[2] constant({3, 4})
          d = s32[] get-dimension-size(p), dimensions={1}
          ROOT t = (s32[2], s32[]) tuple(c, d)
        }""",
        np.zeros((5, 7), np.float32),
    )
    np.testing.assert_array_equal(out[0], [3, 4])
    assert out[1].dtype == np.int32 and out[1] == 7


def test_result_is_a_writable_contiguous_array():
    out = run(
        """
        ENTRY e {
          p = f32[] parameter(0)
          ROOT b = f32[3,4] broadcast(p), dimensions={}
        }""",
        f32(2.0),
    )
    assert out.flags.writeable and out.flags.c_contiguous
    out[0, 0] = 5  # a broadcast view would refuse this


def test_wrong_shape_from_inconsistent_hlo_is_reported():
    with pytest.raises(HloEvaluationError, match="slice"):
        run(
            """
            ENTRY e {
              p = f32[5] parameter(0)
              ROOT s = f32[3] slice(p), slice={[0:2]}
            }""",
            np.zeros(5, np.float32),
        )


def test_bitcast_to_narrower_type_splits_elements_little_endian():
    out = run(
        """
        ENTRY e {
          p = u16[2,2]{0,1} parameter(0)
          ROOT b = u8[4,2]{1,0} bitcast(p)
        }""",
        np.asarray([[0x0102, 0x0304], [0x0506, 0x0708]], np.uint16),
    )
    # Physical u16 order (column-major) 0x0102 0x0506 0x0304 0x0708, each low byte first.
    np.testing.assert_array_equal(out, [[2, 1], [6, 5], [4, 3], [8, 7]])


def test_bitcast_between_sub_byte_types_of_one_width():
    out = run(
        """
        ENTRY e {
          p = s4[4] parameter(0)
          ROOT b = u4[4] bitcast(p)
        }""",
        np.asarray([-1, 2, -8, 7], ml_dtypes.int4),
    )
    assert out.dtype == ml_dtypes.uint4
    np.testing.assert_array_equal(out.astype(np.int32), [15, 2, 8, 7])


BITCAST_WITH_LAYOUT = """
ENTRY e {{
  p = f32[2,3]{{1,0{suffix}}} parameter(0)
  ROOT b = f32[6]{{0}} bitcast(p)
}}"""


def test_bitcast_of_a_memory_space_reads_the_order_and_of_a_tile_is_refused():
    out = run(BITCAST_WITH_LAYOUT.format(suffix=":S(1)"), X23)
    np.testing.assert_array_equal(out, [1, 2, 3, 4, 5, 6])
    with pytest.raises(UnsupportedError, match="tiled layout"):
        run(BITCAST_WITH_LAYOUT.format(suffix=":T(8,128)"), X23)


def test_bitcast_asks_layout_is_tiled(monkeypatch):
    """The evaluator's refusal is Layout.is_tiled's answer, not a second test of the suffix."""
    from heron.hlo.shapes import Layout

    monkeypatch.setattr(Layout, "is_tiled", property(lambda layout: True))
    with pytest.raises(UnsupportedError, match="tiled layout"):
        run(BITCAST_WITH_LAYOUT.format(suffix=""), X23)
