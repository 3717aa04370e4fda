"""``async-to-sync``: an ``async-start``/``async-done`` pair is a call of its computation.

XLA:GPU's optimized modules run a scan's per-step dynamic slices as asynchronous
fusions (``fusion-start``/``fusion-done``) and order the loop counter's update
after them with control edges; heron refused ``async-start`` ("no heron emitter
handles async-start"). The pass makes each pair a call at its done, and the
call inliner keeps the control edges pointing at what stands for the call.
"""

from __future__ import annotations

import numpy as np

from heron.hlo.attributes import InstructionRefs
from heron.hlo.evaluator import evaluate_module
from heron.hlo.parser import parse_module
from heron.hlo.passes import pass_named, run_pipeline
from heron.hlo.passes.async_to_sync import make_async_sync
from heron.hlo.passes.manager import pipeline_of

ASYNC_SLICE = """
HloModule async_slice

fused_slice {
  p0 = f32[6,4]{1,0} parameter(0)
  p1 = s32[] parameter(1)
  zero = s32[] constant(0)
  ROOT s = f32[1,4]{1,0} dynamic-slice(p0, p1, zero), dynamic_slice_sizes={1,4}
}

async_computation {
  a = f32[6,4]{1,0} parameter(0)
  b = s32[] parameter(1)
  ROOT f = f32[1,4]{1,0} fusion(a, b), kind=kLoop, calls=fused_slice
}

ENTRY main {
  x = f32[6,4]{1,0} parameter(0)
  i = s32[] parameter(1)
  start = ((f32[6,4]{1,0}, s32[]), f32[1,4]{1,0}, u32[]) async-start(x, i), calls=async_computation
  update = ((f32[6,4]{1,0}, s32[]), f32[1,4]{1,0}, u32[]) async-update(start)
  done = f32[1,4]{1,0} async-done(update)
  one = s32[] constant(1)
  next = s32[] add(i, one), control-predecessors={done, start}
  ROOT out = (f32[1,4]{1,0}, s32[]) tuple(done, next)
}
"""


def test_an_async_pair_is_a_call_at_its_done_and_keeps_its_value() -> None:
    module = parse_module(ASYNC_SLICE)
    x = np.arange(24, dtype=np.float32).reshape(6, 4)
    i = np.int32(4)
    assert make_async_sync(module)
    opcodes = [inst.opcode for inst in module.entry.instructions]
    assert "async-start" not in opcodes and "async-update" not in opcodes
    assert "async-done" not in opcodes and opcodes.count("call") == 1
    call = next(inst for inst in module.entry.instructions if inst.opcode == "call")
    assert call.name == "done" and call.called("to_apply").name == "async_computation"
    # control edges to the start (or an update) now name the call that replaced it
    nxt = next(inst for inst in module.entry.instructions if inst.name == "next")
    assert nxt.attributes["control-predecessors"] == InstructionRefs(("done",))
    sliced, counter = evaluate_module(module, [x, i])
    np.testing.assert_array_equal(sliced, x[4:5])
    assert counter == 5


def test_the_call_inliner_points_control_edges_at_the_inlined_result() -> None:
    module = parse_module(ASYNC_SLICE)
    run_pipeline(module, pipeline_of([pass_named("async-to-sync"), pass_named("call-inliner")]))
    entry = module.entry
    assert all(inst.opcode != "call" for inst in entry.instructions)
    fusion = next(inst for inst in entry.instructions if inst.opcode == "fusion")
    nxt = next(inst for inst in entry.instructions if inst.name == "next")
    assert nxt.attributes["control-predecessors"] == InstructionRefs((fusion.name,))
    x = np.arange(24, dtype=np.float32).reshape(6, 4)
    sliced, _ = evaluate_module(module, [x, np.int32(2)])
    np.testing.assert_array_equal(sliced, x[2:3])


def test_a_start_read_by_something_else_is_left_alone() -> None:
    text = ASYNC_SLICE.replace(
        "ROOT out = (f32[1,4]{1,0}, s32[]) tuple(done, next)",
        "ROOT out = (f32[1,4]{1,0}, s32[], ((f32[6,4]{1,0}, s32[]), f32[1,4]{1,0}, u32[]))"
        " tuple(done, next, start)",
    )
    module = parse_module(text)
    assert not make_async_sync(module)
    assert any(inst.opcode == "async-start" for inst in module.entry.instructions)
