"""flatten-call-graph: a loop body, condition or branch reached from two call sites is cloned.

The case that found it (issue 26): a flax decoding step drawing with both
``jax.random.categorical`` and ``jax.random.gumbel`` calls jax's threefry helper
(which holds a ``while``) twice; ``call-inliner`` left two loops naming one body and
condition, and buffer assignment refused the program ("computation ... is run by more
than one instruction").
"""

from __future__ import annotations

import numpy as np

from heron.hlo.buffers.dataflow import sequential_computations
from heron.hlo.evaluator import evaluate_module, flatten_literal, random_arguments
from heron.hlo.parser import parse_module
from heron.hlo.passes import run_pipeline, simplification_pipeline
from heron.hlo.passes.flatten_call_graph import flatten_call_graph
from heron.hlo.printer import print_module
from heron.hlo.verifier import verify_module

#: A helper holding a counted loop (x <- sin(x) + x, 3 times), called twice from the entry.
SHARED_LOOP = """
HloModule shared_loop

loop_condition {
  cp = (s32[], f32[4]) parameter(0)
  ci = s32[] get-tuple-element(cp), index=0
  three = s32[] constant(3)
  ROOT lt = pred[] compare(ci, three), direction=LT
}

loop_body {
  bp = (s32[], f32[4]) parameter(0)
  bi = s32[] get-tuple-element(bp), index=0
  bx = f32[4] get-tuple-element(bp), index=1
  one = s32[] constant(1)
  next = s32[] add(bi, one)
  sin = f32[4] sine(bx)
  y = f32[4] add(sin, bx)
  ROOT bt = (s32[], f32[4]) tuple(next, y)
}

helper {
  hx = f32[4] parameter(0)
  zero = s32[] constant(0)
  init = (s32[], f32[4]) tuple(zero, hx)
  loop = (s32[], f32[4]) while(init), condition=loop_condition, body=loop_body
  ROOT hr = f32[4] get-tuple-element(loop), index=1
}

ENTRY main {
  a = f32[4] parameter(0)
  b = f32[4] parameter(1)
  ca = f32[4] call(a), to_apply=helper
  cb = f32[4] call(b), to_apply=helper
  ROOT r = (f32[4], f32[4]) tuple(ca, cb)
}
"""

#: Two whiles naming one condition and body directly, and a conditional whose two
#: branches are one computation that itself runs a while.
SHARED_DIRECTLY = """
HloModule shared_directly

c {
  cp = (s32[], f32[2]) parameter(0)
  ci = s32[] get-tuple-element(cp), index=0
  two = s32[] constant(2)
  ROOT lt = pred[] compare(ci, two), direction=LT
}

b {
  bp = (s32[], f32[2]) parameter(0)
  bi = s32[] get-tuple-element(bp), index=0
  bx = f32[2] get-tuple-element(bp), index=1
  one = s32[] constant(1)
  next = s32[] add(bi, one)
  y = f32[2] multiply(bx, bx)
  ROOT bt = (s32[], f32[2]) tuple(next, y)
}

branch {
  x = f32[2] parameter(0)
  z = s32[] constant(0)
  t = (s32[], f32[2]) tuple(z, x)
  w = (s32[], f32[2]) while(t), condition=c, body=b
  ROOT g = f32[2] get-tuple-element(w), index=1
}

ENTRY main {
  p = f32[2] parameter(0)
  k = s32[] parameter(1)
  zero = s32[] constant(0)
  init = (s32[], f32[2]) tuple(zero, p)
  w1 = (s32[], f32[2]) while(init), condition=c, body=b
  w2 = (s32[], f32[2]) while(w1), condition=c, body=b
  x2 = f32[2] get-tuple-element(w2), index=1
  ROOT cond = f32[2] conditional(k, x2, x2), branch_computations={branch, branch}
}
"""


def _sequential_callees(module) -> list[str]:
    """The names of every computation a while, conditional or call runs, one per call site."""
    names = []
    for computation in module.computations:
        for inst in computation.instructions:
            if inst.opcode in ("while", "conditional", "call"):
                names.extend(c.name for c in inst.called_computations())
    return names


def _results(module, arguments) -> list[bytes]:
    return [np.asarray(x).tobytes() for x in flatten_literal(evaluate_module(module, arguments))]


def test_a_helper_loop_called_twice_gets_a_body_per_call_after_the_pipeline() -> None:
    module = parse_module(SHARED_LOOP)
    reference = parse_module(SHARED_LOOP)
    arguments = random_arguments(reference, np.random.default_rng(0))
    run_pipeline(module, simplification_pipeline())
    whiles = [i for c in module.computations for i in c.instructions if i.opcode == "while"]
    assert len(whiles) == 2
    assert whiles[0].called("body") is not whiles[1].called("body")
    assert whiles[0].called("condition") is not whiles[1].called("condition")
    sequential_computations(module)  # refused "run by more than one instruction" before
    assert _results(module, arguments) == _results(reference, arguments)


def test_shared_bodies_conditions_and_branches_are_cloned_per_call_site() -> None:
    module = parse_module(SHARED_DIRECTLY)
    reference = parse_module(SHARED_DIRECTLY)
    assert flatten_call_graph(module) is True
    verify_module(module)
    callees = _sequential_callees(module)
    # w1, w2 and the while of each of the two branches: 4 conditions, 4 bodies, 2 branches.
    assert len(callees) == len(set(callees)) == 10, callees
    assert [c.name for c in sequential_computations(module)][0] == "main"
    # A computation is printed before its callers, and the text reads back the same.
    assert print_module(parse_module(print_module(module))) == print_module(module)
    for k in (0, 1):
        arguments = [np.array([0.5, -1.5], np.float32), np.array(k, np.int32)]
        assert _results(module, arguments) == _results(reference, arguments)
    assert flatten_call_graph(module) is False  # one run leaves a tree


def test_a_call_graph_that_is_already_a_tree_is_left_alone() -> None:
    one_call = SHARED_LOOP.replace("cb = f32[4] call(b), to_apply=helper", "cb = f32[4] negate(b)")
    module = parse_module(one_call)
    before = print_module(module)
    assert flatten_call_graph(module) is False
    assert print_module(module) == before
