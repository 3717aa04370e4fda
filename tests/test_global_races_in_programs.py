"""The global-memory race sanitizer on whole programs: the compiler bug it is there for.

A while body that reverses its state writes the new state over the old one
only if copy insertion lets it (``reads_in_place``: XLA's
CanShareOperandBufferWithUser, elementwise reads at the written index only).
Made to let it, the body's kernel reads element ``63 - i`` that thread
``63 - i`` overwrites: on a GPU the result depends on which thread runs first.
The interpreter runs lanes in lockstep and would give one answer every time;
its sanitizer must say ``global-memory-race`` instead.
"""

from __future__ import annotations

import numpy as np
import pytest

from heron.compiler.program_run import run_program
from heron.hlo.evaluator import evaluate_module, flatten_literal
from heron.hlo.parser import parse_module
from heron.hlo.passes import copy_insertion
from heron.runtime.interpreter import InterpreterDevice
from heron.runtime.interpreter.errors import SanitizerError

REVERSING_LOOP = """
HloModule reversing_loop

condition {
  state = (s32[], f32[64]) parameter(0)
  i = s32[] get-tuple-element(state), index=0
  three = s32[] constant(3)
  ROOT more = pred[] compare(i, three), direction=LT
}

body {
  state = (s32[], f32[64]) parameter(0)
  i = s32[] get-tuple-element(state), index=0
  one = s32[] constant(1)
  next = s32[] add(i, one)
  x = f32[64] get-tuple-element(state), index=1
  reversed = f32[64] reverse(x), dimensions={0}
  half = f32[] constant(0.5)
  halves = f32[64] broadcast(half), dimensions={}
  y = f32[64] add(reversed, halves)
  ROOT out = (s32[], f32[64]) tuple(next, y)
}

ENTRY main {
  x = f32[64] parameter(0)
  zero = s32[] constant(0)
  init = (s32[], f32[64]) tuple(zero, x)
  loop = (s32[], f32[64]) while(init), condition=condition, body=body
  ROOT result = f32[64] get-tuple-element(loop), index=1
}
"""


def _run() -> np.ndarray:
    module = parse_module(REVERSING_LOOP, source="reversing loop")
    x = np.arange(64, dtype=np.float32)
    (out,) = run_program(module, [x], InterpreterDevice(), "interpreter").outputs
    return np.asarray(out)


def test_the_reversing_loop_copies_its_state_and_runs_clean():
    module = parse_module(REVERSING_LOOP, source="reversing loop")
    x = np.arange(64, dtype=np.float32)
    (expected,) = [np.asarray(v) for v in flatten_literal(evaluate_module(module, [x]))]
    assert np.array_equal(_run(), expected)


def test_a_state_written_over_while_read_mirrored_is_a_race(monkeypatch):
    monkeypatch.setattr(copy_insertion, "reads_in_place", lambda user, operand: True)
    with pytest.raises(SanitizerError) as info:
        _run()
    assert info.value.kind == "global-memory-race", str(info.value)
    message = str(info.value)
    assert "'memref.store'" in message and "read by block" in message, message
