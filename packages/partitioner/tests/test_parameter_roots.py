"""A fusion output that is a fusion parameter itself: no subgraph computes it.

``ROOT t = (f32[4], f32[4]) tuple(e, p0)`` writes ``p0`` unchanged to the second
output. Parameters are function arguments, never subgraph members, so the
partitioner gives that root no subgraph (the emitter reads the element straight
from the parameter's tensor) and must not fail looking one up.
"""

from __future__ import annotations

import pytest

from heron.hlo import parse_module
from heron.partitioner import partition

TUPLE_WITH_PARAMETER = """HloModule m
fusion {
  p0 = f32[4] parameter(0)
  p1 = f32[4] parameter(1)
  e = f32[4] add(p0, p1)
  ROOT t = (f32[4], f32[4], f32[4]) tuple(e, p0, p1)
}
"""

ONLY_PARAMETER = """HloModule m
fusion {
  p0 = f32[4,8] parameter(0)
  ROOT t = (f32[4,8]) tuple(p0)
}
"""

AFTER_A_HERO = """HloModule m
fusion {
  p0 = f32[8,8] parameter(0)
  l = f32[8,8] log(p0)
  tr = f32[8,8] transpose(l), dimensions={1,0}
  a = f32[8,8] add(tr, l)
  ROOT t = (f32[8,8], f32[8,8]) tuple(a, p0)
}
"""


def _computation(text: str):
    return parse_module(text).computation("fusion")


def test_parameter_roots_have_no_subgraph():
    comp = _computation(TUPLE_WITH_PARAMETER)
    pc = partition(comp)
    e = comp.instruction("e")
    (sub,) = pc.subgraphs
    assert [i.name for i in sub.instructions] == ["e"]
    assert pc.root_subgraphs == (sub,)
    assert pc.subgraph_of(e) is sub
    for name in ("p0", "p1"):
        assert not any(comp.instruction(name) in s for s in pc.subgraphs)
        with pytest.raises(KeyError, match=f"'{name}' \\(parameter\\) is in no subgraph"):
            pc.subgraph_of(name)
    # The subgraph's signature is that of e alone: both parameters as tensors, one result.
    assert [n for n, _ in sub.signature.tensor_params] == ["p0", "p1"]
    assert [n for n, _ in sub.signature.results] == ["e"]


def test_a_fusion_of_parameters_only_has_no_subgraphs():
    pc = partition(_computation(ONLY_PARAMETER))
    assert pc.subgraphs == ()
    assert pc.root_subgraphs == ()


def test_parameter_root_next_to_an_epilogue():
    comp = _computation(AFTER_A_HERO)
    pc = partition(comp, heroes=["tr"])
    (epilogue,) = pc.epilogues
    assert [r.name for r in epilogue.roots] == ["a"]
    assert pc.root_subgraphs == (epilogue,)
    assert not any(comp.instruction("p0") in s for s in pc.subgraphs)
