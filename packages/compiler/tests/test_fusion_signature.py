"""The structural signature fusion passes key their caches on: a body listed in
definition order is signed from its list, any other from its post-order, and the
two agree."""

from __future__ import annotations

from heron.compiler.fusion.fusion_cse import signature
from heron.hlo.parser import parse_module

_HLO = """
HloModule m

ENTRY e {
  p0 = f32[8,16]{1,0} parameter(0)
  p1 = f32[8,16]{1,0} parameter(1)
  a = f32[8,16]{1,0} add(p0, p1)
  t = f32[16,8]{1,0} transpose(a), dimensions={1,0}
  m = f32[16,8]{1,0} multiply(t, t)
  u = f32[8,16]{1,0} negate(a)
  ROOT n = f32[16,8]{1,0} negate(m)
}
"""


def test_a_list_out_of_definition_order_signs_as_its_post_order() -> None:
    computation = parse_module(_HLO).entry
    ordered = signature(computation)
    by_name = {inst.name: inst for inst in computation.instructions}
    assert computation.instructions[-1] is computation.root
    computation.instructions = [by_name[n] for n in ("n", "m", "u", "p1", "t", "a", "p0")]
    assert signature(computation) == ordered
    # In definition order but the root not last: the post-order puts it last.
    computation.instructions = [by_name[n] for n in ("p0", "p1", "a", "t", "m", "n", "u")]
    assert signature(computation) == ordered


def test_attribute_memo_gives_the_same_signature() -> None:
    computation = parse_module(_HLO).entry
    memo: dict[tuple[str, int], tuple[object, str]] = {}
    first = signature(computation, None, None, memo)
    assert memo  # the transpose's dimensions were formatted once
    assert signature(computation, None, None, memo) == first == signature(computation)


def test_different_attributes_sign_differently() -> None:
    a = parse_module(_HLO).entry
    b = parse_module(
        _HLO.replace("f32[16,8]{1,0} multiply(t, t)", "f32[16,8]{1,0} add(t, t)")
    ).entry
    assert signature(a) != signature(b)


def _walked_post_order(computation) -> list:
    """The post-order by a depth-first walk from each instruction, root moved last."""
    order: list = []
    done: set[int] = set()

    def visit(inst) -> None:
        if id(inst) in done:
            return
        for op in inst.operands:
            visit(op)
        done.add(id(inst))
        order.append(inst)

    for inst in computation.instructions:
        visit(inst)
    if computation.root is not None and order[-1] is not computation.root:
        order.remove(computation.root)
        order.append(computation.root)
    return order


def test_post_order_takes_the_list_only_when_it_is_one() -> None:
    """Computation.post_order returns the instruction list itself when it is a post-order
    already (one scan, no walk), and the walk's order otherwise: the same either way."""
    computation = parse_module(_HLO).entry
    by_name = {inst.name: inst for inst in computation.instructions}
    for names in (
        ("p0", "p1", "a", "t", "m", "u", "n"),
        ("n", "m", "u", "p1", "t", "a", "p0"),
        ("p0", "p1", "a", "t", "m", "n", "u"),
        ("p0", "p1", "a", "t", "m", "u", "n", "a"),  # listed twice
    ):
        computation.instructions = [by_name[n] for n in names]
        assert computation.post_order() == _walked_post_order(computation), names
