"""layout-assignment, layout-normalization and reshape-decomposer: same bits, explicit moves."""

from __future__ import annotations

import numpy as np
import pytest

from heron.hlo.element_types import ElementType
from heron.hlo.evaluator import evaluate_module, random_arguments
from heron.hlo.ir import Module
from heron.hlo.parser import parse_module
from heron.hlo.passes import HloPass, Pipeline, run_pipeline, simplification_pipeline
from heron.hlo.passes.layouts import (
    assign_layouts,
    decompose_reshapes,
    is_row_major,
    normalize_layouts,
    transpose_is_bitcast,
)
from heron.hlo.printer import print_module
from heron.hlo.shapes import ArrayShape, Layout


def _after(text: str, *passes) -> tuple[Module, Module]:
    original, module = parse_module(text), parse_module(text)
    steps = tuple(HloPass(f"step-{n}", p) for n, p in enumerate(passes))
    run_pipeline(module, Pipeline("under-test", steps))
    for seed in range(3):
        arguments = random_arguments(original, np.random.default_rng(seed))
        expected = evaluate_module(original, arguments)
        assert (
            np.asarray(evaluate_module(module, arguments)).tobytes()
            == np.asarray(expected).tobytes()
        ), print_module(module)
    return original, module


def _opcodes(module: Module) -> list[str]:
    return sorted(i.opcode for i in module.entry.instructions)


@pytest.mark.parametrize(
    ("dims", "minor_to_major", "expected"),
    [
        ((2, 3), (1, 0), True),
        ((2, 3), (0, 1), False),
        ((1, 3), (0, 1), True),  # a size-1 dimension may sit anywhere
        ((2, 1, 3), (2, 0, 1), True),
        ((2, 3, 4), (1, 2, 0), False),
        ((), (), True),
    ],
)
def test_row_major(dims, minor_to_major, expected) -> None:
    shape = ArrayShape(ElementType.F32, dims, Layout(minor_to_major))
    assert is_row_major(shape) is expected


def test_assignment_gives_default_layouts_and_honours_the_entry_layout() -> None:
    text = """
HloModule m, entry_computation_layout={(f32[2,3]{0,1})->f32[3,2]{1,0}}
ENTRY main {
  p = f32[2,3] parameter(0)
  ROOT t = f32[3,2] transpose(p), dimensions={1,0}
}
"""
    _, module = _after(text, assign_layouts)
    parameter = module.entry.parameters[0]
    assert parameter.shape.layout.minor_to_major == (0, 1)
    assert module.entry.root_instruction.shape.layout.minor_to_major == (1, 0)


def test_a_layout_changing_copy_becomes_a_transpose() -> None:
    text = """
HloModule m
ENTRY main {
  p = f32[2,3,4]{2,1,0} parameter(0)
  ROOT c = f32[2,3,4]{0,2,1} copy(p)
}
"""
    _, module = _after(text, normalize_layouts)
    assert _opcodes(module) == ["bitcast", "bitcast", "parameter", "transpose"]
    transpose = next(i for i in module.entry.instructions if i.opcode == "transpose")
    assert all(is_row_major(i.shape) for i in (transpose, transpose.operands[0]))


def test_a_copy_that_keeps_memory_order_is_not_a_transpose() -> None:
    text = """
HloModule m
ENTRY main {
  p = f32[1,3]{1,0} parameter(0)
  ROOT c = f32[1,3]{0,1} copy(p)
}
"""
    module = parse_module(text)
    assert not normalize_layouts(module)


@pytest.mark.parametrize(
    ("source", "target", "dimensions", "moves_bytes"),
    [
        # the layouts undo the permutation: the result is the operand's bytes
        ("f32[32,48]{1,0}", "f32[48,32]{0,1}", "1,0", False),
        ("f32[4,8,16]{2,1,0}", "f32[16,4,8]{0,2,1}", "2,0,1", False),
        ("f16[2,3,4,5]{3,2,1,0}", "f16[5,4,3,2]{0,1,2,3}", "3,2,1,0", False),
        ("f32[2,16,4,8]{3,2,1,0}", "f32[2,4,16,8]{3,1,2,0}", "0,2,1,3", False),
        # size-1 dimensions go anywhere
        ("f32[1,6]{1,0}", "f32[6,1]{1,0}", "1,0", False),
        # a real transpose: row-major in and out, or a layout that keeps it one
        ("f32[32,48]{1,0}", "f32[48,32]{1,0}", "1,0", True),
        ("f32[4,8,16]{2,1,0}", "f32[16,4,8]{2,0,1}", "2,0,1", True),
    ],
)
def test_whether_a_transpose_moves_any_byte(
    source: str, target: str, dimensions: str, moves_bytes: bool
) -> None:
    text = (
        f"HloModule m\nENTRY main {{\n  p = {source} parameter(0)\n"
        f"  ROOT t = {target} transpose(p), dimensions={{{dimensions}}}\n}}\n"
    )
    assert transpose_is_bitcast(parse_module(text).entry.root_instruction) is not moves_bytes


@pytest.mark.parametrize(
    ("source", "target", "expected"),
    [
        ("f32[2,3,4]{2,1,0}", "f32[6,4]{1,0}", ["bitcast", "parameter"]),
        ("f32[2,3]{0,1}", "f32[6]{0}", ["bitcast", "copy", "parameter"]),
        ("f32[6]{0}", "f32[2,3]{0,1}", ["bitcast", "copy", "parameter"]),
    ],
)
def test_reshapes_become_bitcasts_with_copies_where_memory_order_differs(
    source: str, target: str, expected: list[str]
) -> None:
    text = (
        f"HloModule m\nENTRY main {{\n  p = {source} parameter(0)\n"
        f"  ROOT r = {target} reshape(p)\n}}\n"
    )
    _, module = _after(text, decompose_reshapes)
    assert _opcodes(module) == expected


def test_the_pipeline_leaves_no_reshape_and_no_layout_changing_copy() -> None:
    text = """
HloModule m
ENTRY main {
  p = f32[2,3,4]{1,2,0} parameter(0)
  r = f32[6,4] reshape(p)
  c = f32[6,4]{0,1} copy(r)
  ROOT n = f32[6,4]{0,1} negate(c)
}
"""
    original = parse_module(text)
    module = parse_module(text)
    run_pipeline(module, simplification_pipeline())
    opcodes = [i.opcode for i in module.entry.instructions]
    assert "reshape" not in opcodes and "copy" not in opcodes, print_module(module)
    assert opcodes.count("transpose") == 2
    arguments = random_arguments(original, np.random.default_rng(0))
    assert np.array_equal(evaluate_module(original, arguments), evaluate_module(module, arguments))


# -- shapes that name one buffer agree on its layout (issue 26) ---------------------------

#: What jax prints for a scan over a batch-major sequence: the loop is fed the batch/time
#: transpose laid out as a bitcast of its input ({2,0,1}), while the body's parameter says
#: {2,1,0}. Compiled code reading the body's layout got every step but the first wrong.
SCAN_OVER_A_TRANSPOSE = """
HloModule scan, entry_computation_layout={(f32[4,5,3]{2,1,0})->f32[4,3]{1,0}}

body {
  state = (s32[], f32[4,3]{1,0}, f32[5,4,3]{2,1,0}) parameter(0)
  i = s32[] get-tuple-element(state), index=0
  one = s32[] constant(1)
  next = s32[] add(i, one)
  carry = f32[4,3]{1,0} get-tuple-element(state), index=1
  xs = f32[5,4,3]{2,1,0} get-tuple-element(state), index=2
  zero = s32[] constant(0)
  step = f32[1,4,3]{2,1,0} dynamic-slice(xs, i, zero, zero), dynamic_slice_sizes={1,4,3}
  x = f32[4,3]{1,0} reshape(step)
  scaled = f32[4,3]{1,0} multiply(carry, carry)
  sum = f32[4,3]{1,0} add(scaled, x)
  ROOT out = (s32[], f32[4,3]{1,0}, f32[5,4,3]{2,1,0}) tuple(next, sum, xs)
}

condition {
  state = (s32[], f32[4,3]{1,0}, f32[5,4,3]{2,1,0}) parameter(0)
  i = s32[] get-tuple-element(state), index=0
  n = s32[] constant(5)
  ROOT lt = pred[] compare(i, n), direction=LT
}

ENTRY main {
  zero = s32[] constant(0)
  init = f32[] constant(0.5)
  carry = f32[4,3]{1,0} broadcast(init), dimensions={}
  xs = f32[4,5,3]{2,1,0} parameter(0)
  swapped = f32[5,4,3]{2,0,1} transpose(xs), dimensions={1,0,2}
  start = (s32[], f32[4,3]{1,0}, f32[5,4,3]{2,0,1}) tuple(zero, carry, swapped)
  loop = (s32[], f32[4,3]{1,0}, f32[5,4,3]{2,0,1}) while(start), condition=condition, body=body
  ROOT result = f32[4,3]{1,0} get-tuple-element(loop), index=1
}
"""


def test_a_while_operand_is_copied_into_its_body_parameters_layout() -> None:
    from heron.hlo.forwarded_layouts import layout_disagreement

    _, module = _after(SCAN_OVER_A_TRANSPOSE, assign_layouts)
    loop = next(i for i in module.entry.instructions if i.opcode == "while")
    body_layout = loop.called("body").parameters[0].shape
    assert loop.shape == body_layout
    assert loop.operands[0].shape == body_layout
    assert loop.called("condition").parameters[0].shape == body_layout
    copies = [i for i in module.entry.instructions if i.opcode == "copy"]
    assert [c.shape.layout.minor_to_major for c in copies] == [(2, 1, 0)]
    assert copies[0].operands[0].shape.layout.minor_to_major == (2, 0, 1)
    assert module.layouts_assigned
    assert all(layout_disagreement(i) is None for i in module.instructions())


def test_the_verifier_refuses_a_while_fed_another_layout_once_layouts_are_assigned() -> None:
    from heron.hlo.errors import HloVerifyError
    from heron.hlo.verifier import verify_module

    module = parse_module(SCAN_OVER_A_TRANSPOSE)
    verify_module(module)  # as jax prints it: layouts are not yet the compiler's
    module.layouts_assigned = True
    with pytest.raises(HloVerifyError, match=r"the operand is .*\{2,0,1\}.* but the body's"):
        verify_module(module)


def test_a_get_tuple_element_takes_the_forwarded_layout_and_a_bitcast_keeps_its_own() -> None:
    text = """
HloModule m
ENTRY main {
  p = f32[2,3]{1,0} parameter(0)
  t = (f32[2,3]{1,0}) tuple(p)
  g = f32[2,3]{0,1} get-tuple-element(t), index=0
  b = f32[6]{0} bitcast(g)
  n = f32[2,3]{1,0} negate(g)
  m = f32[6]{0} bitcast(n)
  ROOT r = f32[6]{0} add(b, m)
}
"""
    _, module = _after(text, assign_layouts)
    entry = module.entry
    g = entry.instruction("g")
    assert g.shape.layout.minor_to_major == (1, 0)
    bitcast = entry.instruction("b")
    assert bitcast.operands[0].opcode == "copy"
    assert bitcast.operands[0].shape.layout.minor_to_major == (0, 1)
    assert entry.instruction("n").operands[0] is g


def test_a_conditional_hands_each_branch_its_parameters_layout_and_takes_back_its_own() -> None:
    text = """
HloModule m

left {
  x = f32[2,3]{1,0} parameter(0)
  ROOT y = f32[2,3]{0,1} negate(x)
}

right {
  x = f32[2,3]{0,1} parameter(0)
  ROOT y = f32[2,3]{1,0} exponential(x)
}

ENTRY main {
  p = pred[] parameter(0)
  a = f32[3,2]{1,0} parameter(1)
  t = f32[2,3]{0,1} transpose(a), dimensions={1,0}
  ROOT c = f32[2,3]{1,0} conditional(p, t, t), true_computation=left, false_computation=right
}
"""
    from heron.hlo.forwarded_layouts import layout_disagreement

    _, module = _after(text, assign_layouts)
    conditional = module.entry.root_instruction
    assert conditional.operands[1].opcode == "copy"
    assert conditional.operands[2] is module.entry.instruction("t")
    assert all(layout_disagreement(i) is None for i in module.instructions())
