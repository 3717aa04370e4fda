"""heron.hlo.npz_io: .npz files that keep bf16/fp8/f4/sub-byte values faithfully."""

from __future__ import annotations

import io

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from heron.hlo.element_types import ElementType
from heron.hlo.errors import HloInputError
from heron.hlo.npz_io import (
    WIDENED_STORAGE,
    load_inputs,
    load_outputs,
    save_inputs,
    save_outputs,
)
from heron.hlo.shapes import TupleShape, array_shape, token_shape

ARRAY_TYPES = [t for t in ElementType if t.is_array_type]


def sample(element_type: ElementType, shape=(2, 3), seed=0) -> np.ndarray:
    """Values of every kind the type can hold, NaN and infinities included where it has them."""
    rng = np.random.default_rng(seed)
    dtype = element_type.numpy_dtype
    if element_type.is_pred:
        return rng.integers(0, 2, shape).astype(bool)
    if element_type.is_integral:
        info = ml_dtypes.iinfo(dtype)
        if dtype.itemsize == 8:
            return rng.integers(info.min, info.max, shape, dtype=dtype, endpoint=True)
        return rng.integers(int(info.min), int(info.max) + 1, shape).astype(dtype)
    if element_type.is_complex:
        return (rng.normal(size=shape) + 1j * rng.normal(size=shape)).astype(dtype)
    values = rng.normal(scale=4.0, size=shape).astype(np.float32).astype(dtype)
    flat = values.reshape(-1)
    finfo = ml_dtypes.finfo(dtype)
    flat[0] = finfo.max
    if element_type is not ElementType.F4E2M1FN:  # f4 has neither NaN nor infinity
        flat[1] = np.float32(np.nan).astype(dtype)
    return values


def same_bits(a: np.ndarray, b: np.ndarray) -> bool:
    if a.dtype != b.dtype or a.shape != b.shape:
        return False
    if a.dtype.kind in "fcV" or a.dtype.itemsize <= 2:
        nan_a = (
            np.isnan(a.astype(np.complex128)) if a.dtype.kind != "b" else np.zeros(a.shape, bool)
        )
        nan_b = (
            np.isnan(b.astype(np.complex128)) if b.dtype.kind != "b" else np.zeros(b.shape, bool)
        )
        if not np.array_equal(nan_a, nan_b):
            return False
        return bool(np.all((a == b) | nan_a))
    return np.array_equal(a, b)


# -- outputs -------------------------------------------------------------------


@pytest.mark.parametrize("element_type", ARRAY_TYPES, ids=str)
def test_every_element_type_round_trips_through_outputs(tmp_path, element_type):
    original = sample(element_type)
    path = tmp_path / "out.npz"
    save_outputs(path, [original])
    back = load_outputs(path)
    assert len(back) == 1
    assert back[0].dtype == element_type.numpy_dtype
    assert same_bits(back[0], original)


def test_widened_outputs_are_plain_numpy_with_their_hlo_type_beside(tmp_path):
    leaves = [
        np.array([1.5, -2.0, 3.0], dtype=ml_dtypes.bfloat16),
        np.array([[7, -8]], dtype=ml_dtypes.int4),
        np.array([3, 0], dtype=ml_dtypes.uint2),
        np.array([0.5, 448.0], dtype=ml_dtypes.float8_e4m3fn),
        np.arange(4, dtype=np.float16),
        np.array(True),
    ]
    path = tmp_path / "out.npz"
    save_outputs(path, leaves)
    with np.load(path, allow_pickle=False) as data:
        assert sorted(data.files) == sorted(
            ["out0", "out0.hlo_type", "out1", "out1.hlo_type", "out2", "out2.hlo_type"]
            + ["out3", "out3.hlo_type", "out4", "out5"]
        )
        assert data["out0"].dtype == np.float32
        assert data["out0"].tolist() == [1.5, -2.0, 3.0]
        assert str(data["out0.hlo_type"]) == "bf16"
        assert data["out1"].dtype == np.int8 and data["out1"].tolist() == [[7, -8]]
        assert str(data["out1.hlo_type"]) == "s4"
        assert data["out2"].dtype == np.uint8 and str(data["out2.hlo_type"]) == "u2"
        assert data["out3"].tolist() == [0.5, 448.0] and str(data["out3.hlo_type"]) == "f8e4m3fn"
        assert data["out4"].dtype == np.float16
        assert data["out5"].dtype == np.bool_ and data["out5"].shape == ()


def test_widened_storage_covers_exactly_the_types_numpy_cannot_store():
    lacking = set()
    for element_type in ARRAY_TYPES:
        buffer = io.BytesIO()
        np.save(buffer, np.zeros(2, element_type.numpy_dtype))
        buffer.seek(0)
        try:
            faithful = np.load(buffer).dtype == element_type.numpy_dtype
        except ValueError:  # f8e5m2 is written as '<f1', which numpy cannot read back
            faithful = False
        if not faithful:
            lacking.add(element_type)
    assert set(WIDENED_STORAGE) == lacking
    for element_type, storage in WIDENED_STORAGE.items():
        if element_type.is_floating:
            assert storage == np.float32
        else:
            assert storage == (np.int8 if element_type.is_signed_integral else np.uint8)


def test_output_path_is_used_as_given(tmp_path):
    path = tmp_path / "result.bin"
    save_outputs(path, [np.zeros(2, np.float32)])
    assert path.exists() and not (tmp_path / "result.bin.npz").exists()


def test_non_array_output_is_refused(tmp_path):
    with pytest.raises(HloInputError, match="out1 is a tuple, not an array"):
        save_outputs(tmp_path / "o.npz", [np.zeros(1), (np.zeros(1),)])


def test_load_outputs_rejects_gaps_and_strays(tmp_path):
    path = tmp_path / "gap.npz"
    np.savez(path, out0=np.zeros(1), out2=np.zeros(1))
    with pytest.raises(HloInputError, match="not consecutive from out0: out2"):
        load_outputs(path)
    np.savez(path, out0=np.zeros(1), weights=np.zeros(1))
    with pytest.raises(HloInputError, match="unexpected array 'weights'"):
        load_outputs(path)


# -- inputs --------------------------------------------------------------------


def write_npz(path, **arrays):
    np.savez(path, **arrays)
    return path


def test_inputs_of_the_parameters_dtype_load_unchanged(tmp_path):
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    y = np.array(7, dtype=np.int32)
    path = write_npz(tmp_path / "in.npz", arg0=x, arg1=y)
    loaded = load_inputs(path, [array_shape("f32", (2, 3)), array_shape("s32", ())], ["x", "y"])
    assert loaded[0].dtype == np.float32 and np.array_equal(loaded[0], x)
    assert loaded[1].dtype == np.int32 and loaded[1].shape == () and int(loaded[1]) == 7


def test_float32_holding_bf16_values_feeds_a_bf16_parameter(tmp_path):
    values = np.array([[1.0, -2.5, 0.0078125], [np.inf, -0.0, np.nan]], dtype=np.float32)
    path = write_npz(tmp_path / "in.npz", arg0=values)
    (loaded,) = load_inputs(path, [array_shape("bf16", (2, 3))], ["p"])
    assert loaded.dtype == ml_dtypes.bfloat16
    assert same_bits(loaded.astype(np.float32), values)


def test_float32_that_is_no_bf16_is_refused_with_its_location(tmp_path):
    values = np.array([[1.0, 2.0], [1.0000001, 3.0]], dtype=np.float32)
    path = write_npz(tmp_path / "in.npz", arg0=np.zeros(3, np.int32), arg1=values)
    shapes = [array_shape("s32", (3,)), array_shape("bf16", (2, 2))]
    with pytest.raises(HloInputError) as info:
        load_inputs(path, shapes, ["a", "weights"])
    message = str(info.value)
    assert "arg1 (parameter 1 'weights', bf16[2,2])" in message
    assert "float32 value 1.0000001 at index (1, 0)" in message
    assert "not exactly representable as bf16" in message


@pytest.mark.parametrize(
    ("stored", "element_type", "accepted"),
    [
        (np.array([-8, 0, 7], np.int8), "s4", True),
        (np.array([-8, 0, 9], np.int8), "s4", False),
        (np.array([0, 3], np.int64), "u2", True),
        (np.array([0, 4], np.int64), "u2", False),
        (np.array([-1], np.int32), "u8", False),
        (np.array([2.0, -3.0], np.float64), "s32", True),
        (np.array([2.0, 1.5], np.float64), "s32", False),
        (np.array([np.nan], np.float32), "s32", False),
        (np.array([16777217], np.int32), "f32", False),
        (np.array([16777216], np.int32), "f32", True),
        (np.array([0, 1, 1], np.int8), "pred", True),
        (np.array([0, 2], np.int8), "pred", False),
        (np.array([448.0, -0.001953125], np.float32), "f8e4m3fn", True),
        (np.array([np.inf], np.float32), "f8e4m3fn", False),
        (np.array([6.0, -0.5], np.float32), "f4e2m1fn", True),
        (np.array([np.nan], np.float32), "f4e2m1fn", False),
        (np.array([1 + 0j], np.complex128), "f32", True),
        (np.array([1 + 1j], np.complex128), "f32", False),
        (np.array([0.1], np.float64), "f32", False),
        (np.array([0.1], np.float32), "f64", True),
    ],
)
def test_conversion_happens_only_when_exact(tmp_path, stored, element_type, accepted):
    path = write_npz(tmp_path / "in.npz", arg0=stored)
    shape = array_shape(element_type, stored.shape)
    if accepted:
        (loaded,) = load_inputs(path, [shape])
        assert loaded.dtype == shape.element_type.numpy_dtype
        assert same_bits(loaded.astype(stored.dtype), stored)
    else:
        with pytest.raises(HloInputError, match=f"not exactly representable as {element_type}"):
            load_inputs(path, [shape])


@given(
    hnp.arrays(
        np.float32,
        hnp.array_shapes(min_dims=0, max_dims=2, max_side=4),
        elements=st.floats(width=32, allow_nan=False),
    )
)
@settings(max_examples=60, deadline=None)
def test_bf16_inputs_accepted_exactly_when_every_value_is_a_bf16(values):
    buffer = io.BytesIO()
    np.savez(buffer, arg0=values)
    buffer.seek(0)
    representable = np.array_equal(values.astype(ml_dtypes.bfloat16).astype(np.float32), values)
    shape = array_shape("bf16", values.shape)
    if representable:
        (loaded,) = load_inputs(buffer, [shape])
        assert np.array_equal(loaded.astype(np.float32), values)
    else:
        with pytest.raises(HloInputError, match="not exactly representable"):
            load_inputs(buffer, [shape])


def test_shape_must_match_exactly(tmp_path):
    path = write_npz(tmp_path / "in.npz", arg0=np.zeros((3, 2), np.float32))
    with pytest.raises(HloInputError, match=r"array has shape \(3, 2\), expected \(2, 3\)"):
        load_inputs(path, [array_shape("f32", (2, 3))], ["x"])
    path = write_npz(tmp_path / "in.npz", arg0=np.zeros((6,), np.float32))
    with pytest.raises(HloInputError, match=r"has shape \(6,\), expected \(2, 3\)"):
        load_inputs(path, [array_shape("f32", (2, 3))], ["x"])


def test_missing_and_extra_arrays_are_refused(tmp_path):
    shapes = [array_shape("f32", (1,)), array_shape("f32", (1,))]
    path = write_npz(tmp_path / "in.npz", arg0=np.zeros(1, np.float32))
    with pytest.raises(
        HloInputError, match=r"no array 'arg1' for arg1 \(parameter 1 'b', f32\[1\]\)"
    ):
        load_inputs(path, shapes, ["a", "b"])
    path = write_npz(tmp_path / "in.npz", arg0=np.zeros(1, np.float32), arg1=np.zeros(1), arg2=1)
    with pytest.raises(HloInputError, match="arrays arg2 match no parameter"):
        load_inputs(path, shapes)
    path = write_npz(tmp_path / "in.npz", x=np.zeros(1))
    with pytest.raises(HloInputError, match="unexpected array 'x'"):
        load_inputs(path, shapes[:1])


def test_tuple_and_token_parameters_cannot_be_fed(tmp_path):
    path = write_npz(tmp_path / "in.npz", arg0=np.zeros(1, np.float32))
    tuple_shape = TupleShape((array_shape("f32", (1,)),))
    with pytest.raises(HloInputError, match="only feed array parameters"):
        load_inputs(path, [tuple_shape], ["t"])
    with pytest.raises(HloInputError, match="only feed array parameters"):
        load_inputs(path, [token_shape()], ["tok"])


def test_raw_ml_dtypes_arrays_are_refused_with_a_hint(tmp_path):
    path = write_npz(tmp_path / "in.npz", arg0=np.ones(2, ml_dtypes.bfloat16))
    with pytest.raises(HloInputError, match="raw bytes; store the values widened"):
        load_inputs(path, [array_shape("bf16", (2,))])


def test_save_inputs_round_trips_and_its_type_tag_is_checked(tmp_path):
    values = np.array([1, -8, 7], dtype=ml_dtypes.int4)
    path = tmp_path / "in.npz"
    save_inputs(path, [values])
    (loaded,) = load_inputs(path, [array_shape("s4", (3,))])
    assert loaded.dtype == ml_dtypes.int4 and loaded.tolist() == values.tolist()
    with pytest.raises(HloInputError, match=r"arg0.hlo_type says s4, the parameter is s8"):
        load_inputs(path, [array_shape("s8", (3,))])


def test_unreadable_files_are_input_errors(tmp_path):
    with pytest.raises(HloInputError, match="cannot read inputs file .*missing.npz"):
        load_inputs(tmp_path / "missing.npz", [])
    garbage = tmp_path / "garbage.npz"
    garbage.write_bytes(b"this is not a zip archive")
    with pytest.raises(HloInputError, match="not a readable .npz archive"):
        load_inputs(garbage, [])
    single = tmp_path / "single.npy"
    np.save(single, np.zeros(2))
    with pytest.raises(HloInputError, match=r"holds one array \(.npy\)"):
        load_inputs(single, [array_shape("f64", (2,))])
