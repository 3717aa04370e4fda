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
