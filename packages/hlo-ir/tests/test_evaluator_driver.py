"""Evaluator driver: argument checks, limits, error reporting, random inputs, flattening."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from heron.hlo.element_types import ElementType
from heron.hlo.errors import HloEvaluationError, HloInputError
from heron.hlo.evaluator import (
    TOKEN,
    EvaluatorOptions,
    evaluate_computation,
    evaluate_module,
    flatten_literal,
    random_arguments,
)
from heron.hlo.parser import parse_module

TWO_PARAMS = """
ENTRY e {
  a = f32[2,3] parameter(0)
  b = (s32[], pred[2]) parameter(1)
  ROOT t = (f32[2,3], (s32[], pred[2])) tuple(a, b)
}"""


def good_args():
    return [np.zeros((2, 3), np.float32), (np.asarray(1, np.int32), np.zeros(2, bool))]


def test_arguments_pass_through_and_flatten_depth_first():
    module = parse_module(TWO_PARAMS)
    out = evaluate_module(module, good_args())
    leaves = flatten_literal(out)
    assert [leaf.shape for leaf in leaves] == [(2, 3), (), (2,)]
    assert [leaf.dtype for leaf in leaves] == [np.float32, np.int32, np.bool_]
    assert [s.dims for s in module.entry.root_instruction.shape.leaves()] == [(2, 3), (), (2,)]


@pytest.mark.parametrize(
    ("args", "pattern"),
    [
        ([np.zeros((2, 3), np.float32)], "takes 2 argument"),
        (
            [np.zeros((2, 3), np.float64), (np.asarray(1, np.int32), np.zeros(2, bool))],
            r"parameter 0 'a'.*f32 elements",
        ),
        (
            [np.zeros((3, 2), np.float32), (np.asarray(1, np.int32), np.zeros(2, bool))],
            r"parameter 0 'a'.*dimensions \[2, 3\], got \[3, 2\]",
        ),
        (
            [np.zeros((2, 3), np.float32), (np.asarray(1, np.int64), np.zeros(2, bool))],
            r"parameter 1 'b'.*tuple element 0",
        ),
        ([np.zeros((2, 3), np.float32), np.zeros(2, bool)], r"parameter 1 'b'.*expected a tuple"),
        ([[[0.0] * 3] * 2, (np.asarray(1, np.int32), np.zeros(2, bool))], "expected an array"),
    ],
)
def test_argument_mismatches_name_the_parameter(args, pattern):
    with pytest.raises(HloInputError, match=pattern):
        evaluate_module(parse_module(TWO_PARAMS), args)


def test_evaluate_computation_checks_arguments_too():
    module = parse_module(TWO_PARAMS)
    with pytest.raises(HloInputError, match="takes 2 argument"):
        evaluate_computation(module.entry, [])
    out = evaluate_computation(module.entry, good_args())
    assert isinstance(out, tuple)


BIG = """
ENTRY e {
  p = f32[] parameter(0)
  ROOT b = f32[100000,100000,1000] broadcast(p), dimensions={}
}"""


def test_huge_results_are_refused_before_allocating():
    with pytest.raises(HloEvaluationError, match=r"broadcast 'b'.*f32\[100000,100000,1000\]"):
        evaluate_module(parse_module(BIG), [np.asarray(1, np.float32)])


def test_allocation_limit_is_configurable(monkeypatch):
    text = """
    ENTRY e {
      p = f32[] parameter(0)
      ROOT b = f32[100] broadcast(p), dimensions={}
    }"""
    module = parse_module(text)
    arg = [np.asarray(1, np.float32)]
    with pytest.raises(HloEvaluationError, match="400 bytes"):
        evaluate_module(module, arg, options=EvaluatorOptions(max_bytes=399))
    assert evaluate_module(module, arg, options=EvaluatorOptions(max_bytes=400)).shape == (100,)
    monkeypatch.setenv("HERON_EVALUATOR_MAX_BYTES", "100")
    with pytest.raises(HloEvaluationError, match="HERON_EVALUATOR_MAX_BYTES"):
        evaluate_module(module, arg)


def test_numpy_failures_inside_handlers_name_the_instruction_and_location():
    text = """
    ENTRY e {
      p = f32[5] parameter(0)
      ROOT r = f32[2,3] reshape(p)
    }"""
    with pytest.raises(HloEvaluationError) as info:
        evaluate_module(parse_module(text), [np.zeros(5, np.float32)])
    message = str(info.value)
    assert "reshape 'r'" in message and ":4:" in message
    assert "Traceback" not in message


def test_errors_in_called_computations_name_the_inner_instruction():
    text = """
    inner {
      x = f32[5] parameter(0)
      ROOT bad = f32[7] slice(x), slice={[0:7]}
    }
    ENTRY e {
      p = f32[5] parameter(0)
      ROOT f = f32[7] fusion(p), kind=kLoop, calls=inner
    }"""
    with pytest.raises(HloEvaluationError, match="slice 'bad' in computation 'inner'"):
        evaluate_module(parse_module(text), [np.zeros(5, np.float32)])


def test_computation_that_cannot_run_on_arrays_falls_back_per_element():
    # A map whose function holds a conditional: not elementwise-safe, evaluated per element.
    text = """
    neg {
      x = f32[] parameter(0)
      ROOT r = f32[] negate(x)
    }
    same {
      x = f32[] parameter(0)
      ROOT r = f32[] copy(x)
    }
    f {
      x = f32[] parameter(0)
      z = f32[] constant(0)
      lt = pred[] compare(x, z), direction=LT
      ROOT c = f32[] conditional(lt, x, x), true_computation=neg, false_computation=same
    }
    ENTRY e {
      p = f32[2,3] parameter(0)
      ROOT m = f32[2,3] map(p), dimensions={0,1}, to_apply=f
    }"""
    x = np.asarray([[-1, 2, -3], [4, -5, 0]], np.float32)
    np.testing.assert_array_equal(evaluate_module(parse_module(text), [x]), np.abs(x))


RANDOM = """
ENTRY e {
  a = f32[64] parameter(0)
  b = bf16[64] parameter(1)
  c = f16[64] parameter(2)
  d = f64[64] parameter(3)
  e = f8e4m3fn[64] parameter(4)
  f = f4e2m1fn[64] parameter(5)
  g = f8e8m0fnu[64] parameter(6)
  h = s4[64] parameter(7)
  i = u2[64] parameter(8)
  j = s2[64] parameter(9)
  k = pred[64] parameter(10)
  l = c64[64] parameter(11)
  m = (s32[3], (u64[2], token[])) parameter(12)
  ROOT t = f32[64] copy(a)
}"""


def test_random_arguments_fit_every_parameter_and_are_deterministic():
    module = parse_module(RANDOM)
    args = random_arguments(module, seed=3)
    again = random_arguments(module, seed=3)
    other = random_arguments(module, seed=4)
    params = module.entry.parameters
    assert len(args) == len(params)
    for param, arg in zip(params[:12], args[:12]):
        assert arg.dtype == param.shape.numpy_dtype and arg.shape == param.shape.dims
    for a, b in zip(flatten_literal(tuple(args)), flatten_literal(tuple(again))):
        if a is not TOKEN:
            np.testing.assert_array_equal(a, b)
    assert not np.array_equal(args[0], other[0])

    for arg in args[:7]:
        wide = arg.astype(np.float64)
        assert np.all((wide >= -1) & (wide < 1)), arg.dtype
        assert len(np.unique(wide)) > 1
    # Values are exact in their type: converting back and forth changes nothing.
    assert np.array_equal(args[1].astype(np.float32).astype(ml_dtypes.bfloat16), args[1])
    for arg, high in zip(args[7:10], (7, 3, 1)):
        wide = arg.astype(np.int64)
        assert wide.min() >= 0 and wide.max() <= high
    assert args[10].dtype == np.bool_ and args[10].any() and not args[10].all()
    assert np.all(np.abs(args[11].real) <= 1) and np.any(args[11].imag != 0)
    s, (u, token) = args[12]
    assert s.dtype == np.int32 and u.dtype == np.uint64 and token is TOKEN
    assert np.all((s >= 0) & (s < 8))
    # And they are accepted by the evaluator as they are.
    assert evaluate_module(module, args).dtype == np.float32


@pytest.mark.parametrize(
    "et", [ElementType.F8E4M3FN, ElementType.F8E5M2, ElementType.F4E2M1FN, ElementType.F8E8M0FNU]
)
def test_random_narrow_floats_come_from_the_finite_set(et):
    module = parse_module(f"ENTRY e {{ ROOT p = {et.value}[200] parameter(0) }}")
    (arg,) = random_arguments(module)
    assert np.all(np.isfinite(arg.astype(np.float64)))


def test_results_never_alias_arguments_or_constants():
    text = """
    ENTRY e {
      p = f32[3] parameter(0)
      c = f32[3] constant({1, 2, 3})
      ROOT t = (f32[3], f32[3]) tuple(p, c)
    }"""
    module = parse_module(text)
    x = np.zeros(3, np.float32)
    out_p, out_c = evaluate_module(module, [x])
    out_p[0] = 5
    out_c[0] = 5
    assert x[0] == 0
    again = evaluate_module(module, [x])
    np.testing.assert_array_equal(again[1], [1, 2, 3])
