"""Did-you-mean hints: the nearest name counts a swap of two letters as one mistake."""

from __future__ import annotations

import pytest

from heron.hlo.errors import HloError
from heron.hlo.opcodes import closest_opcode
from heron.hlo.parser import parse_module
from heron.hlo.spelling import closest, edit_distance


@pytest.mark.parametrize(
    ("typed", "meant"),
    [("tahn", "tanh"), ("multipy", "multiply"), ("exponental", "exponential"), ("tna", "tan")],
)
def test_a_misspelt_opcode_is_matched_to_what_was_meant(typed, meant):
    # difflib alone proposed 'tan' for 'tahn' (issue 31)
    assert closest_opcode(typed) == meant


def test_the_edit_distance_counts_a_swap_once():
    assert edit_distance("tahn", "tanh") == 1
    assert edit_distance("tahn", "tan") == 1
    assert edit_distance("abc", "abc") == 0
    assert edit_distance("", "ab") == 2
    assert closest("zzzz", ["add", "tanh"]) is None


def test_the_parser_s_hint_names_the_swapped_opcode():
    text = "HloModule m\nENTRY e {\n  p = f32[2] parameter(0)\n  ROOT t = f32[2] tahn(p)\n}\n"
    with pytest.raises(HloError, match=r"unknown opcode 'tahn' \(did you mean 'tanh'\?\)"):
        parse_module(text)
