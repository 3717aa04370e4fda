"""Unit tests of heron.harness: inputs, tolerances, RUN lines, per-element access counts."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from heron.harness import (
    ErrorBounds,
    RunLineError,
    edge_array,
    element_counts,
    input_sets,
    mismatches,
    ordered,
    parse_run_lines,
    ulp_bound,
    ulp_distance,
)
from heron.harness.tolerance import NAN_DISTANCE
from heron.hlo import ElementType, parse_module
from heron.hlo.shapes import ArrayShape, Layout


def _shape(element: ElementType, *dims: int, layout: tuple[int, ...] | None = None):
    return ArrayShape(element, dims, Layout(layout) if layout else None)


# -- inputs ------------------------------------------------------------------------------


def test_edge_floats_hold_the_edges():
    values = edge_array(_shape(ElementType.F32, 4000), np.random.default_rng(0))
    assert values.dtype == np.float32
    assert np.isnan(values).any() and np.isposinf(values).any() and np.isneginf(values).any()
    zeros = values[values == 0]
    assert np.signbit(zeros).any() and (~np.signbit(zeros)).any()
    finite = np.abs(values[np.isfinite(values) & (values != 0)])
    assert finite.min() < np.finfo(np.float32).tiny  # subnormals
    assert finite.max() == np.finfo(np.float32).max


def test_edge_integers_hold_the_extremes_and_small_indices():
    rng = np.random.default_rng(1)
    s8 = edge_array(_shape(ElementType.S8, 2000), rng)
    assert s8.min() == -128 and s8.max() == 127 and ((s8 >= 0) & (s8 < 8)).sum() > 500
    u64 = edge_array(_shape(ElementType.U64, 2000), rng)
    assert u64.dtype == np.uint64 and u64.max() == np.iinfo(np.uint64).max
    assert (u64 >= np.uint64(1 << 63)).sum() > 100  # the top half of the range is drawn too


def test_narrow_floats_and_sub_byte_types_take_their_own_dtype():
    rng = np.random.default_rng(2)
    fp8 = edge_array(_shape(ElementType.F8E4M3FN, 3000), rng)
    assert fp8.dtype == ml_dtypes.float8_e4m3fn
    assert len(np.unique(fp8.view(np.uint8))) == 256  # every bit pattern
    s4 = edge_array(_shape(ElementType.S4, 300), rng)
    assert s4.dtype == ml_dtypes.int4 and int(s4.min()) == -8 and int(s4.max()) == 7
    pred = edge_array(_shape(ElementType.PRED, 100), rng)
    assert pred.dtype == np.bool_ and pred.any() and not pred.all()


def test_input_sets_are_edge_then_moderate_and_repeatable():
    shapes = [_shape(ElementType.F32, 50), _shape(ElementType.S32, 3, 4)]
    first = input_sets(shapes, np.random.default_rng(7))
    again = input_sets(shapes, np.random.default_rng(7))
    assert list(first) == ["edge inputs", "moderate inputs"]
    for name in first:
        for a, b in zip(first[name], again[name], strict=True):
            np.testing.assert_array_equal(a, b)
    moderate = first["moderate inputs"]
    assert np.all(np.abs(moderate[0]) <= 1) and moderate[1].shape == (3, 4)
    assert np.all((moderate[1] >= 0) & (moderate[1] < 8))


# -- tolerance ---------------------------------------------------------------------------


def test_ordered_counts_ulps_across_zero():
    values = np.array([-np.float32(1e-45), -0.0, 0.0, 1e-45, 1.0], np.float32)
    keys = ordered(values)
    assert list(np.diff(keys)) == [1, 0, 1, int(keys[4] - keys[3])]  # -0 and +0: one value
    assert keys[4] - keys[3] > 1000


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.float16, ml_dtypes.bfloat16])
def test_ulp_distance_of_the_zeros_is_0_and_across_zero_counts_every_step(dtype):
    tiny = np.finfo(dtype).smallest_subnormal if dtype != ml_dtypes.bfloat16 else None
    if tiny is None:
        tiny = np.array([1], np.uint16).view(ml_dtypes.bfloat16)[0]
    a = np.array([0.0, -0.0, -0.0, tiny, -tiny, np.nan, np.nan], dtype)
    b = np.array([-0.0, 0.0, -0.0, -tiny, 0.0, np.nan, 1.0], dtype)
    assert [int(d) for d in ulp_distance(a, b)] == [0, 0, 0, 2, 1, 0, NAN_DISTANCE]


def test_bitwise_comparison_tells_zeros_apart_and_lets_nans_match():
    kernel = np.array([0.0, np.nan, 1.0, 2.0], np.float32)
    reference = np.array([-0.0, -np.nan, 1.0, np.nextafter(np.float32(2), 3)], np.float32)
    found = mismatches(kernel, reference, ulps=0)
    # +0 and -0 are 0 ulps apart, but a bitwise comparison sees the sign.
    assert list(found.indices) == [0, 3] and list(found.distances) == [0, 1]
    assert mismatches(kernel, reference, ulps=1).count == 0
    complex_zeros = mismatches(np.array([0j]), np.array([complex(0.0, -0.0)]), ulps=0)
    assert list(complex_zeros.indices) == [0]


def test_nan_against_a_number_fails_any_ulp_bound():
    found = mismatches(np.array([np.nan]), np.array([1.0]), ulps=1000)
    assert found.count == 1


def test_integers_fp8_and_complex_compare():
    assert list(mismatches(np.array([1, 2, 3]), np.array([1, 5, 3]), 4).indices) == [1]
    fp8 = np.array([1.0, 2.0], ml_dtypes.float8_e5m2)
    other = np.array([1.0, 2.5], ml_dtypes.float8_e5m2)
    assert list(mismatches(fp8, other, 0).indices) == [1]
    c = np.array([1 + 1j, 2 + 2j], np.complex64)
    d = np.array([1 + 1j, 2 + np.nextafter(np.float32(2), 3) * 1j], np.complex64)
    assert mismatches(c, d, 0).count == 1 and mismatches(c, d, 1).count == 0
    with pytest.raises(ValueError, match="the kernel gave int64"):
        mismatches(np.array([1]), np.array([1.0]), 0)


def test_error_bounds_accept_absolute_or_relative_errors():
    kernel = np.array([1.001, 100.5, 5.0], np.float32)
    reference = np.array([1.0, 100.0, 6.0], np.float32)
    assert mismatches(kernel, reference, 0, ErrorBounds(absolute=0.01)).count == 2
    found = mismatches(kernel, reference, 0, ErrorBounds(absolute=0.01, relative=0.01))
    assert list(found.indices) == [2]


def _root(text: str):
    return parse_module(text, source="test").entry.root_instruction


def test_ulp_bounds_follow_the_transcendental_ops_an_output_depends_on():
    chain = _root(
        "HloModule m\nENTRY e {\n  p = f64[4] parameter(0)\n  l = f64[4] log(p)\n"
        "  ROOT x = f64[4] exponential(l)\n}\n"
    )
    assert ulp_bound(chain, ElementType.F64) == (2 + 1) + (2 + 1)
    assert ulp_bound(chain, ElementType.F32) == 1 + 3  # f32 exp: ex2.approx's 2 ulp counted
    assert ulp_bound(chain, ElementType.BF16) == 2
    plain = _root(
        "HloModule m\nENTRY e {\n  p = f32[4] parameter(0)\n  ROOT n = f32[4] negate(p)\n}\n"
    )
    assert ulp_bound(plain, ElementType.F32) == 0
    assert ulp_bound(chain, ElementType.S32) == 0


# -- RUN lines ---------------------------------------------------------------------------


def test_run_lines_join_continuations_and_repeat_flags():
    spec = parse_run_lines(
        "// RUN: gpu_fusion_to_mlir %s | emitters_opt \\\n"
        "// RUN:   -xla-test-optimize | FileCheck %s\n"
        "// RUN: gpu_test_correctness %s --bijection_inputs=reduce:0 \\\n"
        "// RUN:   --bijection_inputs=reduce:1,2 --bijection_outputs=reduce \\\n"
        "// RUN:   --bijection_outputs=other --abs_error_bound=0.5\n"
        "// RUN: gpu_test_correctness %s --rel_error_bound 1e-3 --bijection_inputs=t\n"
        "fusion {\n}\n"
    )
    assert spec.correctness_test
    assert spec.bijection_inputs == {"reduce": (0, 1, 2), "t": ()}
    assert spec.bijection_outputs == ("reduce", "other")
    assert (spec.abs_error_bound, spec.rel_error_bound) == (0.5, 1e-3)


def test_run_lines_without_a_correctness_command_ask_nothing():
    spec = parse_run_lines("// RUN: cpu_test_correctness %s --bijection_outputs=x\n")
    assert not spec.correctness_test and not spec.heroes


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("--bijection_inputs=neg:x", "operand numbers must be integers"),
        ("--bijection_inputs=neg:", "expected HERO or HERO:i"),
        ("--speed=fast", "unknown flag --speed"),
        ("--abs_error_bound=-1", "non-negative"),
        ("--bijection_outputs", "has no value"),
    ],
)
def test_bad_run_lines_are_errors_naming_the_flag_and_line(line, message):
    with pytest.raises(RunLineError, match=message) as caught:
        parse_run_lines(f"// comment\n// RUN: gpu_test_correctness %s {line}\n", "f.hlo")
    assert "f.hlo:2: gpu_test_correctness" in str(caught.value)


# -- counts per element --------------------------------------------------------------------


def test_element_counts_take_the_minimum_over_bytes_in_logical_order():
    shape = _shape(ElementType.F32, 2, 3, layout=(0, 1))  # column-major: memory is [j][i]
    writes = np.ones(6 * 4, np.uint32)
    writes[1 * 4 + 2] = 0  # memory element 1 (logical (1, 0)) misses one byte
    writes[4 * 4 : 5 * 4] = 2  # memory element 4 (logical (0, 2)) written twice
    counts = element_counts(writes, None, shape)
    assert counts.shape == (2, 3)
    assert counts[1, 0] == 0 and counts[0, 2] == 2 and counts.sum() == 4 + 2


def test_element_counts_of_sub_byte_types_use_bits_where_written_bitwise():
    shape = _shape(ElementType.S4, 5)  # 3 bytes: (0,1), (2,3), (4, padding)
    writes = np.array([2, 1, 1], np.uint32)  # byte writes (a packed store reads-modifies-writes)
    bits = np.zeros((3, 8), np.uint32)
    bits[0, :4] = 1  # element 0 written by a packed store, element 1 never
    counts = element_counts(writes, bits, shape)
    assert list(counts) == [1, 0, 1, 1, 1]  # bytes 1 and 2 were whole-byte stores
    s2 = element_counts(np.array([1, 0], np.uint32), None, _shape(ElementType.S2, 6))
    assert list(s2) == [1, 1, 1, 1, 0, 0]


def test_transcendental_bounds_are_also_met_normwise():
    """exp(x) + p near 0 keeps exp's absolute error: measured against the output's largest value."""
    from heron.harness.tolerance import mismatches

    reference = np.array([10.0, 1e-3], np.float32)
    step = float(np.spacing(np.float32(10.0)))
    close = np.array([10.0, 1e-3 + 2 * step], np.float32)
    far = np.array([10.0, 1e-3 + 4 * step], np.float32)
    assert mismatches(close, reference, 2).count == 0
    assert mismatches(far, reference, 2).indices.tolist() == [1]
    assert mismatches(close, reference, 0).indices.tolist() == [1]  # bitwise stays bitwise


def test_logistic_has_an_ulp_bound():
    """logistic is 1/(1 + exp(-x)) in the kernel: exp's error reaches it (it was compared
    bitwise, and an f32 logistic differed by an ulp on a quarter of the elements)."""
    root = _root(
        "HloModule m\nENTRY e {\n  p = f32[4] parameter(0)\n  ROOT l = f32[4] logistic(p)\n}\n"
    )
    assert ulp_bound(root, ElementType.F32) == 6  # exp 3, the add 1, the division 2 (div.full)
    assert ulp_bound(root, ElementType.F64) == 3 + 1
