"""select-and-scatter-expander: a reduce-window picking positions and a scatter, bit for bit."""

from __future__ import annotations

import numpy as np
import pytest

from heron.hlo.evaluator import evaluate_module
from heron.hlo.parser import parse_module
from heron.hlo.passes import HloPass, run_pipeline, simplification_pipeline
from heron.hlo.passes.select_and_scatter_expander import expand_select_and_scatter
from heron.hlo.verifier import verify_module

MODULE = """
HloModule pool_gradient
select {
  a = TYPE[] parameter(0)
  b = TYPE[] parameter(1)
  ROOT c = pred[] compare(a, b), direction=DIRECTION
}
scatter {
  a = TYPE[] parameter(0)
  b = TYPE[] parameter(1)
  ROOT c = TYPE[] COMBINE(a, b)
}
ENTRY main {
  x = TYPE[OPERAND] parameter(0)
  s = TYPE[SOURCE] parameter(1)
  init = TYPE[] constant(INIT)
  ROOT r = TYPE[OPERAND] select-and-scatter(x, s, init), window={WINDOW}, select=select, scatter=scatter
}
"""  # noqa: E501

#: name -> operand dims, source dims, window, select direction, combiner, element type, init.
CASES = {
    # jax's max-pool gradient: 2x2 windows, stride 2, NHWC.
    "maxpool_nhwc": ("2,6,6,3", "2,3,3,3", "size=1x2x2x1 stride=1x2x2x1", "GE", "add", "f32", "0"),
    # Overlapping windows: several windows may pick one element (their sources add up).
    "overlapping": ("7,9", "3,4", "size=3x3 stride=2x2", "GE", "add", "f32", "0"),
    # Padding: windows at the edges hold padding, which is never selected.
    "padded": ("5,5", "3,3", "size=3x3 stride=2x2 pad=1_1x1_1", "GE", "add", "f32", "0.5"),
    # A min pool, a rank-1 operand, an integer type, another combiner.
    "minpool_rank1": ("10", "4", "size=4 stride=2 pad=0_0", "LE", "add", "f32", "0"),
    "integers_max": ("6,8", "3,4", "size=2x2 stride=2x2", "GT", "maximum", "s32", "-7"),
    # Window dilation.
    "dilated": (
        "9,9", "3,3", "size=3x3 stride=3x3 rhs_dilate=2x2 pad=1_1x1_1", "GE", "add", "f32", "0"
    ),
    # A window made of padding only selects nothing: the result keeps init there.
    "padding_only_windows": (
        "2,2", "3,3", "size=2x2 stride=2x2 pad=2_2x2_2", "GE", "add", "f32", "1"
    ),
}  # fmt: skip


def _module(name: str):
    operand, source, window, direction, combine, element, init = CASES[name]
    text = (
        MODULE.replace("OPERAND", operand)
        .replace("SOURCE", source)
        .replace("WINDOW", window)
        .replace("DIRECTION", direction)
        .replace("COMBINE", combine)
        .replace("TYPE", element)
        .replace("INIT", init)
    )
    return parse_module(text)


def _arguments(module, rng):
    arguments = []
    for parameter in sorted(module.entry.parameters, key=lambda p: p.parameter_number):
        shape = parameter.array_shape
        dtype = shape.element_type.numpy_dtype
        if np.issubdtype(dtype, np.integer):
            # Few distinct values: ties between window elements decide the pick.
            arguments.append(rng.integers(-3, 4, shape.dims).astype(dtype))
        else:
            values = rng.choice(np.array([0.0, 1.0, -1.0, 2.5, np.nan], dtype), shape.dims)
            arguments.append(values.astype(dtype))
    return arguments


@pytest.mark.parametrize("name", sorted(CASES))
def test_the_expansion_keeps_every_bit(name):
    original, module = _module(name), _module(name)
    assert run_pipeline(module, HloPass("under-test", expand_select_and_scatter)).changed
    verify_module(module)
    opcodes = {i.opcode for i in module.entry.instructions}
    assert "select-and-scatter" not in opcodes
    assert {"reduce-window", "scatter"} <= opcodes
    rng = np.random.default_rng(len(name))
    for _ in range(4):
        arguments = _arguments(original, rng)
        expected = np.asarray(evaluate_module(original, arguments))
        actual = np.asarray(evaluate_module(module, arguments))
        assert expected.tobytes() == actual.tobytes(), name


def test_the_simplification_pipeline_expands_it():
    module = _module("maxpool_nhwc")
    run_pipeline(module, simplification_pipeline())
    assert all(i.opcode != "select-and-scatter" for i in module.instructions())


def test_base_dilation_is_left_for_a_refusal_by_name():
    text = MODULE.replace("OPERAND", "5").replace("SOURCE", "5").replace("TYPE", "f32")
    text = text.replace("WINDOW", "size=2 lhs_dilate=2 pad=0_1").replace("DIRECTION", "GE")
    module = parse_module(text.replace("COMBINE", "add").replace("INIT", "0"))
    assert not expand_select_and_scatter(module)


def test_positions_are_s64_past_two_to_the_31_elements():
    # Flat positions: an operand of 2**31 elements or more (each dimension well under
    # 2**31) needs s64 positions. Only the types are checked: nothing is evaluated.
    text = MODULE.replace("OPERAND", "65536,32768").replace("SOURCE", "32768,16384")
    text = text.replace("WINDOW", "size=2x2 stride=2x2").replace("DIRECTION", "GE")
    module = parse_module(
        text.replace("COMBINE", "add").replace("INIT", "0").replace("TYPE", "f32")
    )
    assert expand_select_and_scatter(module)
    (iota,) = [i for i in module.entry.instructions if i.opcode == "iota"]
    assert str(iota.shape).startswith("s64[2147483648]")
    small = _module("maxpool_nhwc")
    expand_select_and_scatter(small)
    (iota,) = [i for i in small.entry.instructions if i.opcode == "iota"]
    assert str(iota.shape).startswith("s32[")
