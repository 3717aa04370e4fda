"""``optimization-barrier-expander``: ``opt-barrier(x)`` is ``x``, whatever reads it.

jax.checkpoint (remat) lowers its recomputed forward behind an ``opt-barrier``
of a tuple; before this pass heron's thunk emission refused it ("no heron
emitter handles opt-barrier"). The rewrite must keep the evaluator's result
bit for bit and leave no barrier, as the root or inside a loop body.
"""

from __future__ import annotations

import numpy as np
import pytest

from heron.hlo.evaluator import evaluate_module
from heron.hlo.parser import parse_module
from heron.hlo.passes.optimization_barrier_expander import BARRIERS, expand_optimization_barriers

BARRIER_IN_THE_MIDDLE = """
HloModule remat_like

ENTRY main {
  x = f32[4] parameter(0)
  y = f32[4] parameter(1)
  pair = (f32[4], f32[4]) tuple(x, y)
  kept = (f32[4], f32[4]) opt-barrier(pair)
  a = f32[4] get-tuple-element(kept), index=0
  b = f32[4] get-tuple-element(kept), index=1
  ROOT s = f32[4] multiply(a, b)
}
"""

BARRIER_AS_ROOT = """
HloModule root_barrier

ENTRY main {
  x = f32[3] parameter(0)
  e = f32[3] exponential(x)
  pair = (f32[3], f32[3]) tuple(x, e)
  ROOT kept = (f32[3], f32[3]) optimization-barrier(pair)
}
"""

BARRIER_IN_A_LOOP = """
HloModule loop_barrier

condition {
  state = (s32[], f32[2]) parameter(0)
  i = s32[] get-tuple-element(state), index=0
  three = s32[] constant(3)
  ROOT less = pred[] compare(i, three), direction=LT
}

body {
  state = (s32[], f32[2]) parameter(0)
  kept = (s32[], f32[2]) opt-barrier(state)
  i = s32[] get-tuple-element(kept), index=0
  v = f32[2] get-tuple-element(kept), index=1
  one = s32[] constant(1)
  next = s32[] add(i, one)
  doubled = f32[2] add(v, v)
  ROOT out = (s32[], f32[2]) tuple(next, doubled)
}

ENTRY main {
  v = f32[2] parameter(0)
  zero = s32[] constant(0)
  init = (s32[], f32[2]) tuple(zero, v)
  loop = (s32[], f32[2]) while(init), condition=condition, body=body
  ROOT result = f32[2] get-tuple-element(loop), index=1
}
"""


def _flat(value):
    if isinstance(value, (tuple, list)):
        return [x for v in value for x in _flat(v)]
    return [np.asarray(value)]


@pytest.mark.parametrize("text", [BARRIER_IN_THE_MIDDLE, BARRIER_AS_ROOT, BARRIER_IN_A_LOOP])
def test_a_barrier_is_its_operand_bit_for_bit(text):
    rng = np.random.default_rng(0)
    module = parse_module(text)
    inputs = [
        rng.standard_normal(p.array_shape.dims).astype(np.float32) for p in module.entry.parameters
    ]
    before = _flat(evaluate_module(module, inputs))
    assert expand_optimization_barriers(module)
    assert not any(inst.opcode in BARRIERS for inst in module.instructions())
    after = _flat(evaluate_module(module, inputs))
    assert all(np.array_equal(a, b) for a, b in zip(before, after, strict=True))
    assert not expand_optimization_barriers(module)  # nothing left to do


def test_jax_checkpoint_compiles_and_agrees(tmp_path, capsys):
    jax = pytest.importorskip("jax")
    jnp = jax.numpy
    from heron.cli.main import main as heron

    def loss(w, x):
        layer = jax.checkpoint(lambda w, x: jnp.tanh(x @ w))
        return jnp.sum(layer(w, layer(w, x)) ** 2)

    shapes = (jax.ShapeDtypeStruct((8, 8), jnp.float32), jax.ShapeDtypeStruct((4, 8), jnp.float32))
    text = jax.jit(jax.grad(loss)).lower(*shapes).as_text(dialect="hlo")
    assert "opt-barrier" in text
    path = tmp_path / "remat.hlo"
    path.write_text(text)
    assert heron(["run", str(path), "--backend", "interpreter", "--check"]) == 0
    assert "agree: every output within the tolerance" in capsys.readouterr().out
