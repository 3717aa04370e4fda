"""Computation.post_order: a depth-first walk from each instruction in list order."""

from __future__ import annotations

import random

import pytest

from heron.hlo.errors import HloVerifyError
from heron.hlo.ir import Computation
from heron.hlo.parser import parse_module

TEXT = """HloModule m

ENTRY main {
  p = f32[4]{0} parameter(0)
  q = f32[4]{0} parameter(1)
  a = f32[4]{0} add(p, q)
  b = f32[4]{0} multiply(a, p)
  c = f32[4]{0} subtract(q, a)
  d = f32[4]{0} negate(c)
  ROOT r = f32[4]{0} add(b, d)
}
"""


def _reference(computation: Computation) -> list[str]:
    """The walk spelled out recursively: each instruction in list order, after its
    operands in operand order, the root last."""
    order: list[str] = []
    placed: set[int] = set()

    def place(inst) -> None:
        if id(inst) in placed:
            return
        for operand in inst.operands:
            place(operand)
        placed.add(id(inst))
        order.append(inst.name)

    for inst in computation.instructions:
        place(inst)
    order.remove(computation.root.name)
    return [*order, computation.root.name]


def test_a_definition_order_comes_back_as_it_is() -> None:
    entry = parse_module(TEXT).entry
    assert [i.name for i in entry.post_order()] == [i.name for i in entry.instructions]


@pytest.mark.parametrize("seed", range(20))
def test_a_disturbed_order_is_walked_from_each_instruction_in_turn(seed: int) -> None:
    # What a fusion pass leaves (a fusion's get-tuple-elements appended at the end, an
    # instruction moved before its operands): each instruction whose operands are
    # placed keeps its place, the others pull their operands in before them.
    entry = parse_module(TEXT).entry
    instructions = list(entry.instructions)
    random.Random(seed).shuffle(instructions)
    entry.instructions = instructions
    assert [i.name for i in entry.post_order()] == _reference(entry)


def test_a_cycle_is_named() -> None:
    entry = parse_module(TEXT).entry
    by_name = {i.name: i for i in entry.instructions}
    by_name["a"].operands = [by_name["p"], by_name["d"]]
    with pytest.raises(HloVerifyError, match="cycle in computation 'main'"):
        entry.post_order()


def test_an_unused_instruction_reading_the_root_follows_it() -> None:
    """JAX leaves dead code after a root constant (dynamax's parallel smoother: a call of
    ``_lu_solve`` on the zero-sized root, listed after it); the root goes last but for
    what reads it, so every instruction still follows its operands (the check's loop
    unrolling read the call's operand before it was made: an internal error)."""
    module = parse_module(
        """HloModule m

ENTRY main {
  p = f32[4]{0} parameter(0)
  ROOT c = f32[4]{0} constant({1, 2, 3, 4})
  n = f32[4]{0} negate(p)
  dead = f32[4]{0} add(c, n)
  deader = f32[4]{0} multiply(dead, dead)
  other = f32[4]{0} exponential(p)
}
"""
    )
    order = [inst.name for inst in module.entry.post_order()]
    assert order == ["p", "n", "other", "c", "dead", "deader"]
