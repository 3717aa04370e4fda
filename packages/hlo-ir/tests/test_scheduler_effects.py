"""The schedule keeps side effects in program order (a host callback, a loop holding one).

Each order the scheduler builds walks dependencies; an operand-less callback has none,
so a walk from the root placed it after the loop whose callbacks it preceded in the
program (jax.debug.callback before a while_loop printed after the loop's prints)."""

from __future__ import annotations

import pytest

from heron.hlo.buffers.dataflow import analyze_dataflow
from heron.hlo.parser import parse_module
from heron.hlo.passes.scheduler import list_order, post_order

CALLBACKS_AROUND_A_LOOP = """\
HloModule callbacks

condition {
  state = (s32[], f32[]) parameter(0)
  count = s32[] get-tuple-element(state), index=0
  four = s32[] constant(4)
  ROOT more = pred[] compare(count, four), direction=LT
}

body {
  state = (s32[], f32[]) parameter(0)
  count = s32[] get-tuple-element(state), index=0
  value = f32[] get-tuple-element(state), index=1
  step = () custom-call(count), custom_call_target="step", custom_call_has_side_effect=true
  one = s32[] constant(1)
  next = s32[] add(count, one)
  half = f32[] constant(0.5)
  scaled = f32[] multiply(value, half)
  ROOT carry = (s32[], f32[]) tuple(next, scaled)
}

ENTRY main {
  x = f32[] parameter(0)
  start = () custom-call(), custom_call_target="start", custom_call_has_side_effect=true
  zero = s32[] constant(0)
  initial = (s32[], f32[]) tuple(zero, x)
  loop = (s32[], f32[]) while(initial), condition=condition, body=body
  trips = s32[] get-tuple-element(loop), index=0
  end = () custom-call(trips), custom_call_target="end", custom_call_has_side_effect=true
  ROOT result = f32[] get-tuple-element(loop), index=1
}
"""


@pytest.mark.parametrize("order", [post_order, list_order])
def test_a_callback_before_a_loop_stays_before_it(order) -> None:
    module = parse_module(CALLBACKS_AROUND_A_LOOP)
    names = [inst.name for inst in order(module.entry, analyze_dataflow(module))]
    assert names.index("start") < names.index("loop") < names.index("end")


@pytest.mark.parametrize("order", [post_order, list_order])
def test_program_order_follows_the_dependencies_where_the_list_does_not(order) -> None:
    """A rewrite that appends the loop after its user leaves a list that is no program
    order: the chain takes the dependencies' order, and no cycle."""
    text = CALLBACKS_AROUND_A_LOOP.replace(
        "  loop = (s32[], f32[]) while(initial), condition=condition, body=body\n", ""
    ).replace(
        "  ROOT result",
        "  loop = (s32[], f32[]) while(initial), condition=condition, body=body\n  ROOT result",
    )
    module = parse_module(text)
    listed = [inst.name for inst in module.entry.instructions]
    assert listed.index("end") < listed.index("loop")
    names = [inst.name for inst in order(module.entry, analyze_dataflow(module))]
    assert names.index("start") < names.index("loop") < names.index("end")
