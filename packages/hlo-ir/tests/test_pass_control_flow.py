"""conditional-simplifier and while-loop-simplifier: what they rewrite, and that results stay.

The two JAX modules in tests/data are ``lax.fori_loop(0, n, body, (x, x))``
for n = 1 and 5, as jax 0.10.2 prints them (``jax.jit(f).lower(x)
.compiler_ir("hlo").as_hlo_text()``).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from heron.hlo.evaluator import evaluate_module
from heron.hlo.ir import Module
from heron.hlo.parser import parse_module, parse_module_file
from heron.hlo.passes import run_pipeline, simplification_pipeline
from heron.hlo.passes.conditional_simplifier import simplify_conditionals
from heron.hlo.passes.while_loop_simplifier import simplify_while_loops, trip_count
from heron.hlo.printer import print_module

DATA = Path(__file__).parent / "data"


def _opcodes(module: Module) -> list[str]:
    return [i.opcode for c in module.computations for i in c.instructions]


def _flat_bytes(value: object) -> list[bytes]:
    if isinstance(value, tuple):
        return [b for element in value for b in _flat_bytes(element)]
    return [np.asarray(value).tobytes()]


BRANCHES = """
HloModule branches
double {
  a = f32[4] parameter(0)
  ROOT d = f32[4] add(a, a)
}
negate {
  b = f32[4] parameter(0)
  ROOT n = f32[4] negate(b)
}
sine {
  c = f32[4] parameter(0)
  ROOT s = f32[4] sine(c)
}
ENTRY main {
  x = f32[4] parameter(0)
  selector = SELECTOR
  ROOT r = f32[4] conditional(selector, x, x, x), branch_computations={double, negate, sine}
}
"""


@pytest.mark.parametrize(
    ("selector", "branch_root"),
    [
        ("s32[] constant(1)", "negate"),
        ("s32[] constant(7)", "sine"),  # out of range: the last branch
        ("s32[] constant(-1)", "sine"),
        ("s32[] constant(0)", "add"),
    ],
)
def test_a_constant_index_selects_its_branch_inline(
    simplified, selector: str, branch_root: str
) -> None:
    module = simplified(parse_module(BRANCHES.replace("SELECTOR", selector)))
    assert module.entry.root_instruction.opcode == branch_root
    assert [c.name for c in module.computations] == ["main"]


def test_a_constant_predicate_selects_true_or_false(simplified) -> None:
    text = """
HloModule pred
t {
  a = f32[4] parameter(0)
  ROOT e = f32[4] exponential(a)
}
f {
  b = f32[4] parameter(0)
  ROOT l = f32[4] log(b)
}
ENTRY main {
  x = f32[4] parameter(0)
  p = pred[] constant(false)
  ROOT r = f32[4] conditional(p, x, x), true_computation=t, false_computation=f
}
"""
    module = simplified(parse_module(text))
    assert module.entry.root_instruction.opcode == "log"


def test_a_conditional_on_a_parameter_stays() -> None:
    text = BRANCHES.replace("selector = SELECTOR", "selector = s32[] parameter(1)")
    module = parse_module(text)
    assert not simplify_conditionals(module)


def test_trip_counts_of_jax_fori_loops(simplified) -> None:
    five = parse_module_file(DATA / "jax_fori_loop_5.hlo")
    run_pipeline(five, simplification_pipeline())
    (loop,) = [i for i in five.entry.instructions if i.opcode == "while"]
    assert trip_count(loop) == 5
    one = simplified(parse_module_file(DATA / "jax_fori_loop_1.hlo"))
    assert "while" not in _opcodes(one) and "call" not in _opcodes(one)


COUNTED = """
HloModule counted
body {
  s = (s32[], f32[4], f32[4]) parameter(0)
  i = s32[] get-tuple-element(s), index=0
  a = f32[4] get-tuple-element(s), index=1
  b = f32[4] get-tuple-element(s), index=2
  step = s32[] constant(STEP)
  next = s32[] add(i, step)
  a2 = f32[4] multiply(a, a)
  b2 = f32[4] add(b, a)
  ROOT t = (s32[], f32[4], f32[4]) tuple(next, a2, b2)
}
cond {
  s = (s32[], f32[4], f32[4]) parameter(0)
  i = s32[] get-tuple-element(s), index=0
  n = s32[] constant(LIMIT)
  ROOT lt = pred[] compare(COMPARE), direction=DIRECTION
}
ENTRY main {
  x = f32[4] parameter(0)
  zero = s32[] constant(START)
  init = (s32[], f32[4], f32[4]) tuple(zero, x, x)
  w = (s32[], f32[4], f32[4]) while(init), condition=cond, body=body
  ROOT r = f32[4] get-tuple-element(w), index=RESULT
}
"""


def _counted(start=0, limit=4, step=1, compare="i, n", direction="LT", result=2) -> Module:
    text = COUNTED
    for key, value in {
        "START": start,
        "LIMIT": limit,
        "STEP": step,
        "COMPARE": compare,
        "DIRECTION": direction,
        "RESULT": result,
    }.items():
        text = text.replace(key, str(value))
    return parse_module(text)


@pytest.mark.parametrize(
    ("kwargs", "trips"),
    [
        ({}, 4),
        ({"start": 4}, 0),
        ({"start": 9}, 0),
        ({"start": 3}, 1),
        ({"step": 3}, 2),
        ({"direction": "LE"}, 5),
        ({"compare": "n, i", "direction": "GT"}, 4),
        ({"step": 0}, None),  # never ends: not a counted loop
        ({"step": -1}, None),
        ({"direction": "NE"}, None),
    ],
)
def test_trip_count_of_the_counted_form(kwargs: dict, trips: int | None) -> None:
    module = _counted(**kwargs)
    (loop,) = [i for i in module.entry.instructions if i.opcode == "while"]
    assert trip_count(loop) == trips


@pytest.mark.parametrize("start", [4, 3])
def test_zero_and_one_trip_loops_disappear(simplified, start: int) -> None:
    module = simplified(_counted(start=start))
    assert "while" not in _opcodes(module)


def test_a_dead_carried_value_is_dropped_and_results_stay(simplified) -> None:
    # Element 1 (a) feeds element 2 (b), which is the result: both stay. Read
    # element 1 instead and element 2 is dead: nothing reads b but its own update.
    keep = simplified(_counted(result=2))
    (loop,) = [i for i in keep.entry.instructions if i.opcode == "while"]
    assert len(loop.shape.elements) == 3
    drop = simplified(_counted(result=1))
    (loop,) = [i for i in drop.entry.instructions if i.opcode == "while"]
    assert len(loop.shape.elements) == 2
    body = loop.called("body")
    assert [i.opcode for i in body.instructions].count("add") == 1  # only the counter's


def test_a_loop_whose_state_is_used_whole_keeps_it() -> None:
    text = COUNTED.replace(
        "ROOT r = f32[4] get-tuple-element(w), index=RESULT",
        "ROOT r = (s32[], f32[4], f32[4]) copy(w)",
    )
    for key, value in {
        "START": 0,
        "LIMIT": 4,
        "STEP": 1,
        "COMPARE": "i, n",
        "DIRECTION": "LT",
    }.items():
        text = text.replace(key, str(value))
    module = parse_module(text)
    assert not simplify_while_loops(module)


def _both_ways(text: str, extra: list) -> Module:
    """Optimize ``text``; for each predicate value the results equal the original's bitwise."""
    original = parse_module(text)
    module = parse_module(text)
    run_pipeline(module, simplification_pipeline())
    for value in (True, False):
        arguments = [np.bool_(value), *extra]
        before = evaluate_module(original, arguments)
        after = evaluate_module(module, arguments)
        assert _flat_bytes(before) == _flat_bytes(after), (value, print_module(module))
    return module


X = np.linspace(-3, 3, 8, dtype=np.float32)

CHEAP = """
HloModule cheap
t {
  a = f32[8] parameter(0)
  ROOT e = f32[8] exponential(a)
}
f {
  b = f32[8] parameter(0)
  ROOT n = f32[8] negate(b)
}
ENTRY main {
  p = pred[] parameter(0)
  x = f32[8] parameter(1)
  ROOT r = f32[8] conditional(p, x, x), true_computation=t, false_computation=f
}
"""


def test_cheap_branches_of_a_pred_conditional_become_a_select() -> None:
    module = _both_ways(CHEAP, [X])
    assert "conditional" not in _opcodes(module)
    root = module.entry.root_instruction
    assert root.opcode == "select"
    assert [o.opcode for o in root.operands] == ["broadcast", "exponential", "negate"]


def test_a_constant_in_a_branch_is_cheap() -> None:
    """XLA's ``TryRemoveConditional`` asks ``IsElementwise()`` of what its list of cheap
    ops lacks, and a constant says yes: a branch of constants is run unconditionally
    (optax's L-BFGS line search selects so in XLA's optimized module)."""
    text = CHEAP.replace(
        "ROOT n = f32[8] negate(b)", "k = f32[] constant(2)\n  ROOT n = f32[8] broadcast(k)"
    )
    module = _both_ways(text, [X])
    assert "conditional" not in _opcodes(module)
    assert module.entry.root_instruction.opcode == "select"


def test_jax_cond_converts_its_pred_and_swaps_the_branches() -> None:
    # jax.lax.cond(p, f, g, x) lowers to conditional(convert(p), g, f): index 1 is f.
    text = """
HloModule jax_cond
region_0 {
  a = f32[8] parameter(0)
  ROOT c = f32[8] cosine(a)
}
region_1 {
  b = f32[8] parameter(0)
  ROOT s = f32[8] sine(b)
}
ENTRY main {
  p = pred[] parameter(0)
  index = s32[] convert(p)
  x = f32[8] parameter(1)
  ROOT r = f32[8] conditional(index, x, x), branch_computations={region_0, region_1}
}
"""
    module = _both_ways(text, [X])
    root = module.entry.root_instruction
    assert root.opcode == "select"
    assert [o.opcode for o in root.operands[1:]] == ["sine", "cosine"]
    assert root.operands[0].operands[0].opcode == "parameter"


def test_tuple_shaped_branches_select_leaf_by_leaf() -> None:
    text = """
HloModule tuples
t {
  a = (f32[8], s32[]) parameter(0)
  a0 = f32[8] get-tuple-element(a), index=0
  a1 = s32[] get-tuple-element(a), index=1
  m = f32[8] multiply(a0, a0)
  n = s32[] negate(a1)
  ROOT r = (f32[8], s32[]) tuple(m, n)
}
f {
  b = (f32[8], s32[]) parameter(0)
  b0 = f32[8] get-tuple-element(b), index=0
  b1 = s32[] get-tuple-element(b), index=1
  s = f32[8] sine(b0)
  ROOT r = (f32[8], s32[]) tuple(s, b1)
}
ENTRY main {
  p = pred[] parameter(0)
  x = f32[8] parameter(1)
  k = s32[] parameter(2)
  both = (f32[8], s32[]) tuple(x, k)
  c = (f32[8], s32[]) conditional(p, both, both), true_computation=t, false_computation=f
  g0 = f32[8] get-tuple-element(c), index=0
  g1 = s32[] get-tuple-element(c), index=1
  ROOT out = (f32[8], s32[]) tuple(g0, g1)
}
"""
    module = _both_ways(text, [X, np.int32(5)])
    assert "conditional" not in _opcodes(module)
    assert _opcodes(module).count("select") == 2


@pytest.mark.parametrize(
    ("change", "why"),
    [
        (("ROOT e = f32[8] exponential(a)", "ROOT e = f32[8] iota(), iota_dimension=0"), "iota"),
        (
            ("ROOT n = f32[8] negate(b)", "ROOT n = f32[8] transpose(b), dimensions={0}"),
            "transpose",
        ),
        (("ROOT n = f32[8] negate(b)", "ROOT n = f32[8] parameter(0)"), "an empty branch"),
        (("p = pred[] parameter(0)", "p = s32[] parameter(0)"), "an s32 index"),
    ],
)
def test_conditionals_left_alone(change: tuple[str, str], why: str) -> None:
    text = CHEAP.replace(*change)
    if "n = f32[8] parameter(0)" in text:
        text = text.replace("b = f32[8] parameter(0)\n  ", "")
    module = parse_module(text)
    assert not simplify_conditionals(module), why
    assert "conditional" in _opcodes(module)


def test_a_side_effect_in_a_branch_keeps_the_conditional() -> None:
    text = CHEAP.replace(
        "ROOT n = f32[8] negate(b)",
        "z = f32[] constant(0)\n  o = f32[] constant(1)\n"
        "  ROOT n = f32[8] rng(z, o), distribution=rng_uniform",
    )
    module = parse_module(text)
    assert not simplify_conditionals(module)


def test_three_cheap_branches_stay_a_conditional() -> None:
    module = parse_module(BRANCHES.replace("selector = SELECTOR", "selector = s32[] parameter(1)"))
    for computation in module.computations:
        if computation.name != "main":
            assert all(
                i.opcode in ("parameter", "add", "negate", "sine") for i in computation.instructions
            )
    assert not simplify_conditionals(module)
