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
