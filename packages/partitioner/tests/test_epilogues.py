"""Heroes, injected values and duplicated prologue/epilogue instructions."""

from __future__ import annotations

from heron.hlo import parse_module
from heron.partitioner import partition

REDUCE_BROADCAST_REDUCE = """HloModule rbr

add {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}

fused_computation {
  p = f32[16,32] parameter(0)
  zero = f32[] constant(0)
  r1 = f32[16] reduce(p, zero), dimensions={1}, to_apply=add
  bcast = f32[16,32] broadcast(r1), dimensions={0}
  centered = f32[16,32] subtract(p, bcast)
  r2 = f32[16] reduce(centered, zero), dimensions={1}, to_apply=add
  neg = f32[16,32] negate(centered)
  ROOT t = (f32[16], f32[16], f32[16,32]) tuple(r1, r2, neg)
}
"""


def test_instructions_before_one_hero_and_after_another_are_duplicated(check):
    comp = parse_module(REDUCE_BROADCAST_REDUCE).computation("fused_computation")
    pc = partition(comp, heroes=["r1", "r2"])
    print(pc.describe())
    check(pc)
    # bcast and centered feed r2 (prologue) and neg (epilogue of r1): computed in both.
    assert {i.name for i in pc.duplicated} == {"bcast", "centered"}
    epilogue = pc.epilogue_of("neg")
    assert epilogue is not None and epilogue.is_epilogue
    assert {i.name for i in epilogue.instructions} == {"bcast", "centered", "neg"}
    assert [h.name for h in epilogue.injected] == ["r1"]
    assert [n for n, _ in epilogue.signature.injected] == ["r1"]
    assert epilogue.signature.index_ranges == (16, 32)
    # The main copies of bcast/centered are what r2 calls.
    assert pc.subgraph_of("centered") is not epilogue
    assert not pc.subgraph_of("centered").is_epilogue
    assert pc.epilogue_of("centered") is epilogue
    # Heroes and their operands are roots; each hero is alone in its main function.
    assert [i.name for i in pc.subgraph_of("r1").instructions] == ["r1"]
    assert pc.subgraph_of("r2").roots[0].name == "r2"
    assert [s.name for s in pc.root_subgraphs] == [
        "fused_computation_r1",
        "fused_computation_r2",
        "fused_computation__epilogue__neg",
    ]
    assert "duplicated in epilogues: bcast, centered" in pc.describe()


def test_epilogue_keeps_hero_independent_helpers_and_calls_the_prologue(check):
    text = """HloModule m
fused_computation {
  p = f32[8,16] parameter(0)
  e = f32[8,16] exponential(p)
  t = f32[16,8] transpose(e), dimensions={1,0}
  one = f32[] constant(1)
  ones = f32[16,8] broadcast(one), dimensions={}
  et = f32[16,8] transpose(e), dimensions={1,0}
  s = f32[16,8] add(t, ones)
  ROOT m = f32[16,8] multiply(s, et)
}
"""
    comp = parse_module(text).computation("fused_computation")
    pc = partition(comp, heroes=["t"])
    print(pc.describe())
    check(pc)
    epilogue = pc.epilogue_of("m")
    assert epilogue is not None
    # ones only feeds the epilogue: it is computed there. et reads e (a hero operand, so a
    # prologue root) and nothing hero-dependent: it is in the epilogue too, calling e.
    assert {i.name for i in epilogue.instructions} == {"one", "ones", "et", "s", "m"}
    assert pc.callees(epilogue) == (pc.subgraph_of("e"),)
    assert not pc.duplicated


def test_two_heroes_feeding_one_root_share_an_epilogue(check):
    text = """HloModule m
fused_computation {
  p = f32[8,16] parameter(0)
  q = f32[16,8] parameter(1)
  t = f32[16,8] transpose(p), dimensions={1,0}
  ROOT a = f32[16,8] add(t, q)
}
"""
    comp = parse_module(text).computation("fused_computation")
    pc = partition(comp, heroes=["t"])
    check(pc)
    (epilogue,) = pc.epilogues
    assert [i.name for i in epilogue.instructions] == ["a"]
    assert [n for n, _ in epilogue.signature.tensor_params] == ["p", "q"]

    text2 = text.replace(
        "ROOT a = f32[16,8] add(t, q)",
        "u = f32[16,8] transpose(q), "
        "dimensions={1,0}\n  t2 = f32[8,16] transpose(u), dimensions={1,0}\n"
        "  t3 = f32[16,8] transpose(t2), dimensions={1,0}\n"
        "  ROOT a = f32[16,8] add(t, t3)",
    )
    comp2 = parse_module(text2).computation("fused_computation")
    pc2 = partition(comp2, heroes=["t", "t3"])
    check(pc2)
    (epilogue2,) = pc2.epilogues
    assert [h.name for h in epilogue2.injected] == ["t", "t3"]
    assert len(epilogue2.signature.injected) == 2


def test_a_hero_that_is_the_root_has_no_epilogue(check):
    text = """HloModule m
fused_computation {
  p = f32[8,16] parameter(0)
  e = f32[8,16] exponential(p)
  ROOT t = f32[16,8] transpose(e), dimensions={1,0}
}
"""
    pc = partition(parse_module(text).computation("fused_computation"), heroes=["t"])
    check(pc)
    assert not pc.epilogues
    assert [[i.name for i in s.instructions] for s in pc.subgraphs] == [["t"], ["e"]]


def test_unconnected_roots_after_one_hero_get_one_epilogue_each(check):
    text = """HloModule m
fused_computation {
  p = f32[8,16] parameter(0)
  t = f32[16,8] transpose(p), dimensions={1,0}
  a = f32[16,8] negate(t)
  b = f32[16,8] abs(t)
  ROOT r = (f32[16,8], f32[16,8]) tuple(a, b)
}
"""
    comp = parse_module(text).computation("fused_computation")
    pc = partition(comp, heroes=["t"])
    check(pc)
    assert [s.name for s in pc.epilogues_of_hero("t")] == [
        "fused_computation__epilogue__a",
        "fused_computation__epilogue__b",
    ]
    assert pc.root_subgraphs == pc.epilogues


def test_two_reductions_of_one_value_do_not_share_its_evaluation(check):
    # Both reduces read x at (d0, s0), but s0 is a different loop in each: x is evaluated
    # inside two loops, so it must be a function of its own, not inlined into the root's.
    text = """HloModule m
add {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}
max {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] maximum(a, b)
}
fused_computation {
  p = f32[4,8] parameter(0)
  x = f32[4,8] exponential(p)
  zero = f32[] constant(0)
  r1 = f32[4] reduce(x, zero), dimensions={1}, to_apply=add
  r2 = f32[4] reduce(x, zero), dimensions={1}, to_apply=max
  ROOT out = f32[4] add(r1, r2)
}
"""
    comp = parse_module(text).computation("fused_computation")
    pc = partition(comp)
    check(pc)
    assert [i.name for i in pc.subgraph_of("x").instructions] == ["x"]
    assert pc.subgraph_of("r1") is pc.subgraph_of("r2") is pc.subgraph_of("out")
    # zero is read as a scalar by both: the same (empty) indexing, so it joins them.
    assert pc.subgraph_of("zero") is pc.subgraph_of("out")
