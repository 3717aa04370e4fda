"""The loop-state rewrites: repeated elements made one, constants sunk into the loop.

Each module is checked against the reference evaluator before and after the
simplification pipeline (bit for bit), and the loop's state is counted.
"""

from __future__ import annotations

import pytest

from heron.hlo.ir import Instruction, Module
from heron.hlo.parser import parse_module
from heron.hlo.passes.while_loop_constant_sinking import sink_while_loop_constants


def _loop(module: Module) -> Instruction:
    (loop,) = [i for c in module.computations for i in c.instructions if i.opcode == "while"]
    return loop


TWO_COUNTERS = """
HloModule counters
body {
  s = (s32[], s32[], f32[4]) parameter(0)
  i = s32[] get-tuple-element(s), index=0
  j = s32[] get-tuple-element(s), index=1
  a = f32[4] get-tuple-element(s), index=2
  one = s32[] constant(1)
  step = s32[] constant(STEP)
  i2 = s32[] add(I_FROM, one)
  j2 = s32[] add(J_FROM, step)
  c = f32[] convert(j)
  b = f32[4] broadcast(c), dimensions={}
  a2 = f32[4] add(a, b)
  ROOT t = (s32[], s32[], f32[4]) tuple(i2, j2, a2)
}
cond {
  s = (s32[], s32[], f32[4]) parameter(0)
  i = s32[] get-tuple-element(s), index=0
  n = s32[] constant(5)
  ROOT lt = pred[] compare(i, n), direction=LT
}
ENTRY main {
  x = f32[4] parameter(0)
  zero = s32[] constant(0)
  other = s32[] constant(J_START)
  init = (s32[], s32[], f32[4]) tuple(zero, other, x)
  w = (s32[], s32[], f32[4]) while(init), condition=cond, body=body
  j = s32[] get-tuple-element(w), index=1
  a = f32[4] get-tuple-element(w), index=2
  ROOT r = (s32[], f32[4]) tuple(j, a)
}
"""


def _counters(step: int = 1, j_start: int = 0, i_from: str = "i", j_from: str = "j") -> str:
    replacements = {"STEP": step, "J_START": j_start, "I_FROM": i_from, "J_FROM": j_from}
    text = TWO_COUNTERS
    for key, value in replacements.items():
        text = text.replace(key, str(value))
    return text


@pytest.mark.parametrize(
    ("kwargs", "elements"),
    [
        ({}, 2),  # fori_loop's counter and a scan's: one element
        ({"i_from": "j", "j_from": "i"}, 2),  # each from the other: equal all the same
        ({"step": 2}, 3),  # another step: two values
        ({"j_start": 1}, 3),  # another start
    ],
)
def test_two_elements_that_always_hold_the_same_value_become_one(
    simplified, kwargs: dict, elements: int
) -> None:
    module = simplified(parse_module(_counters(**kwargs)))
    assert len(_loop(module).shape.elements) == elements


SUNK = """
HloModule sunk
body {
  s = (s32[], f32[4], f32[4]) parameter(0)
  i = s32[] get-tuple-element(s), index=0
  a = f32[4] get-tuple-element(s), index=1
  c = f32[4] get-tuple-element(s), index=2
  one = s32[] constant(1)
  i2 = s32[] add(i, one)
  a2 = f32[4] multiply(a, c)
  ROOT t = (s32[], f32[4], f32[4]) tuple(i2, a2, C_NEXT)
}
cond {
  s = (s32[], f32[4], f32[4]) parameter(0)
  i = s32[] get-tuple-element(s), index=0
  n = s32[] constant(3)
  ROOT lt = pred[] compare(i, n), direction=LT
}
ENTRY main {
  x = f32[4] parameter(0)
  zero = s32[] constant(0)
  k = f32[4] constant({1.5, -2, 0.25, 3})
  init = (s32[], f32[4], f32[4]) tuple(zero, x, k)
  w = (s32[], f32[4], f32[4]) while(init), condition=cond, body=body
  a = f32[4] get-tuple-element(w), index=1
  c = f32[4] get-tuple-element(w), index=2
  ROOT r = (f32[4], f32[4]) tuple(a, c)
}
"""


def test_a_constant_carried_unchanged_is_read_as_a_constant_and_leaves_the_state(
    simplified,
) -> None:
    module = simplified(parse_module(SUNK.replace("C_NEXT", "c")))
    loop = _loop(module)
    assert len(loop.shape.elements) == 2
    assert all(o.opcode != "constant" or o.shape.rank == 0 for o in loop.operands[0].operands)
    body = loop.called("body")
    assert "constant" in [o.opcode for i in body.instructions for o in i.operands]
    # The loop's users read the constant itself.
    assert module.entry.root_instruction.operands[1].opcode == "constant"


def test_a_constant_the_body_changes_stays_in_the_state(simplified) -> None:
    module = simplified(parse_module(SUNK.replace("C_NEXT", "a")))
    assert len(_loop(module).shape.elements) == 3


def test_sinking_reports_no_change_when_nothing_reads_the_constant() -> None:
    # Only the pass-through reads it: nothing to sink (a pass reporting a change here
    # would never let the fixed point end).
    text = SUNK.replace("C_NEXT", "c").replace("multiply(a, c)", "negate(a)")
    text = text.replace("tuple(a, c)", "tuple(a, a)")
    assert not sink_while_loop_constants(parse_module(text))
