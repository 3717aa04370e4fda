"""Fusion inside loop bodies and conditions (heron.compiler.control_flow_fusion).

Each body and condition is fused as if it were the entry, on a view of the module.
A pass of that pipeline may end by removing dead computations (the layout pass of
cuBLASLt's s8 and fp8 GEMMs does): on a view whose entry is a loop body, that took the
real entry and the loop's condition out of the program ("module 't2.cond' has no
ENTRY computation", an internal error: a Pallas int8 matmul in interpret mode, whose
grid is a while loop around an s8 dot). The view's passes now touch only what its
entry reaches.
"""

from __future__ import annotations

import pytest

from heron.cli.main import main

WHILE_OF_A_DOT = """HloModule t2

body {{
  p = (s32[], {t}[8,32]{{1,0}}, {t}[32,16]{{1,0}}, {o}[8,16]{{1,0}}) parameter(0)
  i = s32[] get-tuple-element(p), index=0
  x = {t}[8,32]{{1,0}} get-tuple-element(p), index=1
  y = {t}[32,16]{{1,0}} get-tuple-element(p), index=2
  one = s32[] constant(1)
  i1 = s32[] add(i, one)
  d = {o}[8,16]{{1,0}} dot(x, y), lhs_contracting_dims={{1}}, rhs_contracting_dims={{0}}
  ROOT t = (s32[], {t}[8,32]{{1,0}}, {t}[32,16]{{1,0}}, {o}[8,16]{{1,0}}) tuple(i1, x, y, d)
}}

cond {{
  p = (s32[], {t}[8,32]{{1,0}}, {t}[32,16]{{1,0}}, {o}[8,16]{{1,0}}) parameter(0)
  i = s32[] get-tuple-element(p), index=0
  two = s32[] constant(2)
  ROOT lt = pred[] compare(i, two), direction=LT
}}

ENTRY main {{
  x = {t}[8,32]{{1,0}} parameter(0)
  y = {t}[32,16]{{1,0}} parameter(1)
  zero = s32[] constant(0)
  zo = {o}[] constant(0)
  z = {o}[8,16]{{1,0}} broadcast(zo), dimensions={{}}
  t = (s32[], {t}[8,32]{{1,0}}, {t}[32,16]{{1,0}}, {o}[8,16]{{1,0}}) tuple(zero, x, y, z)
  w = (s32[], {t}[8,32]{{1,0}}, {t}[32,16]{{1,0}}, {o}[8,16]{{1,0}}) while(t),
    condition=cond, body=body
  ROOT r = {o}[8,16]{{1,0}} get-tuple-element(w), index=3
}}
"""


@pytest.mark.parametrize(("operands", "result"), [("s8", "s32"), ("f8e4m3fn", "f32")])
def test_a_library_dot_in_a_loop_body_runs(operands, result, tmp_path, capsys):
    path = tmp_path / "while_of_a_dot.hlo"
    path.write_text(WHILE_OF_A_DOT.format(t=operands, o=result))
    assert main(["run", "--backend", "interpreter", "--check", str(path)]) == 0
    assert "agree: every output within the tolerance" in capsys.readouterr().out


SAME_CHAIN_IN_ENTRY_AND_BODY = """HloModule names

body {
  p = (s32[], f32[64]{0}) parameter(0)
  i = s32[] get-tuple-element(p), index=0
  x = f32[64]{0} get-tuple-element(p), index=1
  one = s32[] constant(1)
  i1 = s32[] add(i, one)
  n = f32[64]{0} negate(x)
  e = f32[64]{0} exponential(n)
  ROOT t = (s32[], f32[64]{0}) tuple(i1, e)
}

cond {
  p = (s32[], f32[64]{0}) parameter(0)
  i = s32[] get-tuple-element(p), index=0
  three = s32[] constant(3)
  ROOT lt = pred[] compare(i, three), direction=LT
}

ENTRY main {
  x = f32[64]{0} parameter(0)
  n = f32[64]{0} negate(x)
  e = f32[64]{0} exponential(n)
  zero = s32[] constant(0)
  t = (s32[], f32[64]{0}) tuple(zero, e)
  w = (s32[], f32[64]{0}) while(t), condition=cond, body=body
  r = f32[64]{0} get-tuple-element(w), index=1
  ROOT y = f32[64]{0} exponential(r)
}
"""


def test_a_loop_body_fused_in_its_own_view_takes_names_the_rest_does_not_hold():
    """A view lists what its entry reaches only (walking the whole module in each of a
    hundred views' passes was a seventh of a jax-cosmo compile); the names the rest
    holds stay taken: the body's kernel computing what an entry kernel computes gets a
    name of its own, HLO names being unique in the module."""
    from heron.compiler import Target
    from heron.compiler.executable import prepare_module
    from heron.hlo.parser import parse_module
    from heron.hlo.verifier import verify_module

    module, _ = prepare_module(parse_module(SAME_CHAIN_IN_ENTRY_AND_BODY), Target.preset("h100"))
    verify_module(module)
    body = next(c for c in module.computations if c.name == "body")
    entry = module.entry
    fused = [[i for i in c.instructions if i.opcode == "fusion"] for c in (entry, body)]
    assert fused[0] and fused[1]
    calls = [i.called("calls").name for f in fused for i in f]
    assert len(set(calls)) == len(calls), calls
    names = [i.name for c in module.computations for i in c.instructions if i.opcode == "fusion"]
    assert len(set(names)) == len(names), names


def test_a_views_computations_merge_back_in_the_order_a_whole_view_would_leave():
    """New computations land before the one they were put before (or at the end), the
    ones a view's passes removed leave, and what the view did not list stays put."""
    from heron.compiler.control_flow_fusion import _merged
    from heron.hlo.ir import Computation

    a, entry, body, cond, reducer = (Computation(n) for n in ("a", "main", "body", "cond", "r"))
    fused_1, fused_2, tail = (Computation(n) for n in ("fused_1", "fused_2", "tail"))
    everything = [a, reducer, body, cond, entry]
    listed = [reducer, body]  # the view of body, which calls the reducer
    after = [fused_1, fused_2, body, tail]  # the reducer inlined away, two bodies, one at the end
    assert _merged(everything, listed, after) == [a, fused_1, fused_2, body, cond, entry, tail]
