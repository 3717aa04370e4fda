"""Fresh fusion names: XLA's numbering (``name``, ``name.1``, ...), the lowest free first."""

from __future__ import annotations

from heron.compiler.fusion.graph import TakenNames


def test_the_lowest_free_suffix_is_given_after_releases() -> None:
    names = TakenNames()
    assert names.first_free("loop_add_fusion") == "loop_add_fusion"
    names.take("loop_add_fusion")
    given = []
    for _ in range(5):
        given.append(names.first_free("loop_add_fusion"))
        names.take(given[-1])
    assert given == [f"loop_add_fusion.{n}" for n in range(1, 6)]
    names.release("loop_add_fusion.2")
    names.release("loop_add_fusion.4")
    assert names.first_free("loop_add_fusion") == "loop_add_fusion.2"
    names.take("loop_add_fusion.2")
    assert names.first_free("loop_add_fusion") == "loop_add_fusion.4"
    names.take("loop_add_fusion.4")
    assert names.first_free("loop_add_fusion") == "loop_add_fusion.6"


def test_a_name_held_by_the_instruction_being_renamed_is_free_for_it() -> None:
    names = TakenNames()
    names.take("fused_add")
    assert names.first_free("fused_add", itself=1) == "fused_add"
    names.take("fused_add")  # a second holder: the name is taken
    assert names.first_free("fused_add", itself=1) == "fused_add.1"


def test_a_name_taken_elsewhere_is_skipped() -> None:
    names = TakenNames()
    for name in ("x", "x.1", "x.3"):
        names.take(name)
    assert names.first_free("x") == "x.2"
    names.take("x.2")
    assert names.first_free("x") == "x.4"
    names.release("x.1")
    names.release("x.1")  # released twice: free once, never below zero
    assert names.first_free("x") == "x.1"
    names.take("x.1")
    assert names.first_free("x") == "x.4"  # given before, never taken
