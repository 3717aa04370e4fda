"""``transpose(dot(a, b))`` becomes ``dot(b, a)``, as XLA's algebraic simplifier makes it.

XLA:GPU 0.12 (deviceless, its ``algsimp`` dump) swaps the operands of a dot
whose only user transposes its two free dimensions, when the batch dimensions
lead both operands in the same order and each side has one free dimension
(cases A-M below, decided by it); it leaves a dot with another user, two free
dimensions on a side, or a transpose that also moves batch dimensions alone.
heron applies the rule to canonical dots (``dot-decomposer`` runs before the
simplifier), so a dot whose batch dimensions were not leading (G) is swapped
after canonicalisation, where XLA, deciding before, leaves it: one GEMM either
way in heron, against a dot and a transpose.
"""

from __future__ import annotations

import numpy as np
import pytest

from heron.hlo.evaluator import evaluate_module, random_arguments
from heron.hlo.ir import Module
from heron.hlo.parser import parse_module
from heron.hlo.passes import run_pipeline, simplification_pipeline
from heron.hlo.printer import print_module


def _module(params: str, dot: str, root: str, extra: str = "") -> str:
    return f"HloModule m\nENTRY main {{\n{params}\n  d = {dot}\n{extra}  ROOT {root}\n}}\n"


W_X = "  w = f32[16,8]{1,0} parameter(0)\n  x = f32[4,8]{1,0} parameter(1)"
CASES = {
    # XLA swaps these
    "A": (
        W_X,
        "f32[16,4]{1,0} dot(w, x), lhs_contracting_dims={1}, rhs_contracting_dims={1}",
        "t = f32[4,16]{1,0} transpose(d), dimensions={1,0}",
        True,
    ),
    "B": (
        "  w = f32[8,16]{1,0} parameter(0)\n  x = f32[4,8]{1,0} parameter(1)",
        "f32[16,4]{1,0} dot(w, x), lhs_contracting_dims={0}, rhs_contracting_dims={1}",
        "t = f32[4,16]{1,0} transpose(d), dimensions={1,0}",
        True,
    ),
    "C": (
        "  a = f32[2,16,8]{2,1,0} parameter(0)\n  b = f32[2,4,8]{2,1,0} parameter(1)",
        "f32[2,16,4]{2,1,0} dot(a, b), lhs_batch_dims={0}, rhs_batch_dims={0},"
        " lhs_contracting_dims={2}, rhs_contracting_dims={2}",
        "t = f32[2,4,16]{2,1,0} transpose(d), dimensions={0,2,1}",
        True,
    ),
    "M": (
        "  a = f32[2,8,16]{2,1,0} parameter(0)\n  b = f32[2,4,8]{2,1,0} parameter(1)",
        "f32[2,16,4]{2,1,0} dot(a, b), lhs_batch_dims={0}, rhs_batch_dims={0},"
        " lhs_contracting_dims={1}, rhs_contracting_dims={2}",
        "t = f32[2,4,16]{2,1,0} transpose(d), dimensions={0,2,1}",
        True,
    ),
    "H": (
        W_X,
        "f32[16,4]{1,0} dot(w, x), lhs_contracting_dims={1}, rhs_contracting_dims={1},"
        " operand_precision={highest,default}",
        "t = f32[4,16]{1,0} transpose(d), dimensions={1,0}",
        True,
    ),
    # heron swaps after canonicalisation; XLA, deciding before, does not
    "G": (
        "  a = f32[16,2,8]{2,1,0} parameter(0)\n  b = f32[2,4,8]{2,1,0} parameter(1)",
        "f32[2,16,4]{2,1,0} dot(a, b), lhs_batch_dims={1}, rhs_batch_dims={0},"
        " lhs_contracting_dims={2}, rhs_contracting_dims={2}",
        "t = f32[2,4,16]{2,1,0} transpose(d), dimensions={0,2,1}",
        True,
    ),
    # neither swaps these
    "D": (
        W_X,
        "f32[16,4]{1,0} dot(w, x), lhs_contracting_dims={1}, rhs_contracting_dims={1}",
        "r = (f32[4,16]{1,0}, f32[16,4]{1,0}) tuple(t, n)",
        False,
    ),
    "I": (
        "  a = f32[2,3,16,8]{3,2,1,0} parameter(0)\n  b = f32[2,3,4,8]{3,2,1,0} parameter(1)",
        "f32[2,3,16,4]{3,2,1,0} dot(a, b), lhs_batch_dims={0,1}, rhs_batch_dims={0,1},"
        " lhs_contracting_dims={3}, rhs_contracting_dims={3}",
        "t = f32[3,2,4,16]{3,2,1,0} transpose(d), dimensions={1,0,3,2}",
        False,
    ),
    "J": (
        "  a = f32[16,3,8]{2,1,0} parameter(0)\n  b = f32[4,8]{1,0} parameter(1)",
        "f32[16,3,4]{2,1,0} dot(a, b), lhs_contracting_dims={2}, rhs_contracting_dims={1}",
        "t = f32[4,16,3]{2,1,0} transpose(d), dimensions={2,0,1}",
        False,
    ),
    # a transpose into another layout moves nothing: heron keeps it (XLA would swap
    # and then assign the dot a row-major layout of its own choosing)
    "N": (
        W_X,
        "f32[16,4]{1,0} dot(w, x), lhs_contracting_dims={1}, rhs_contracting_dims={1}",
        "t = f32[4,16]{0,1} transpose(d), dimensions={1,0}",
        False,
    ),
}
EXTRA = {
    "D": "  t = f32[4,16]{1,0} transpose(d), dimensions={1,0}\n  n = f32[16,4]{1,0} negate(d)\n"
}


def _simplified(name: str) -> tuple[Module, Module]:
    params, dot, root, _ = CASES[name]
    text = _module(params, dot, root, EXTRA.get(name, ""))
    module = parse_module(text)
    run_pipeline(module, simplification_pipeline())
    return parse_module(text), module


def _dots_and_transposes(module: Module) -> tuple[list, list]:
    """The module's dots, and the transposes of their results (through bitcasts)."""
    instructions = list(module.entry.instructions)
    dots = [i for i in instructions if i.opcode == "dot"]
    downstream = list(dots)
    for inst in instructions:  # in order: operands first
        if inst.opcode in ("bitcast", "reshape") and inst.operands[0] in downstream:
            downstream.append(inst)
    after = [i for i in instructions if i.opcode == "transpose" and i.operands[0] in downstream]
    return dots, after


@pytest.mark.parametrize("name", sorted(CASES))
def test_a_transposed_dot_swaps_its_operands_where_the_rule_says(name):
    original, simplified = _simplified(name)
    (dot,), transposes_after = _dots_and_transposes(simplified)
    swapped = CASES[name][3]
    assert (not transposes_after) is swapped, print_module(simplified)
    # The same values (the dot's sum may run in another order: within a few ulps).
    arguments = random_arguments(original, seed=3)
    before, after = evaluate_module(original, arguments), evaluate_module(simplified, arguments)
    for b, a in zip(
        before if isinstance(before, tuple) else (before,),
        after if isinstance(after, tuple) else (after,),
        strict=True,
    ):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-5, atol=1e-6)


def test_the_precision_of_each_operand_moves_with_it():
    _, simplified = _simplified("H")
    (dot,), _ = _dots_and_transposes(simplified)
    assert dot.attributes["operand_precision"].text == "{default,highest}"
