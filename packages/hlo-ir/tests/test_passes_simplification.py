"""The HLO pass manager and the target-independent simplification passes.

Each pass is checked for what it must do (the rewrite happened, the text says
so) and for what it must not (the reference evaluator gives bit-identical
results before and after, on hand-written JAX-style modules and on random ones).
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from heron.hlo.builder import ModuleBuilder
from heron.hlo.errors import HloVerifyError, UnsupportedError
from heron.hlo.evaluator import evaluate_module, random_arguments
from heron.hlo.ir import Module
from heron.hlo.parser import parse_module
from heron.hlo.passes import (
    PASSES,
    FixedPoint,
    HloPass,
    PassFailure,
    Pipeline,
    pass_named,
    register_pass,
    run_pipeline,
    simplification_pipeline,
)
from heron.hlo.passes.call_inliner import inline_calls
from heron.hlo.passes.cse import eliminate_common_subexpressions
from heron.hlo.passes.dce import eliminate_dead_code
from heron.hlo.passes.tuple_simplifier import simplify_tuples
from heron.hlo.printer import print_module
from heron.hlo.shapes import array_shape
from heron.hlo.verifier import verify_module

# What jax.jit(lambda x, y: jnp.where(x > 0, x, y) + jnp.clip(y, 0, 1)) prints,
# trimmed: jnp.where and clip are jitted helpers, so they arrive as calls.
JAX_STYLE = """
HloModule jit_f, entry_computation_layout={(f32[8]{0}, f32[8]{0})->f32[8]{0}}

_where.1 {
  Arg_0.2 = pred[8]{0} parameter(0)
  Arg_1.3 = f32[8]{0} parameter(1)
  Arg_2.4 = f32[8]{0} parameter(2)
  ROOT select.5 = f32[8]{0} select(Arg_0.2, Arg_1.3, Arg_2.4)
}

clip.6 {
  Arg_0.7 = f32[8]{0} parameter(0)
  constant.8 = f32[] constant(0)
  broadcast.9 = f32[8]{0} broadcast(constant.8), dimensions={}
  maximum.10 = f32[8]{0} maximum(broadcast.9, Arg_0.7)
  constant.11 = f32[] constant(1)
  broadcast.12 = f32[8]{0} broadcast(constant.11), dimensions={}
  ROOT minimum.13 = f32[8]{0} minimum(broadcast.12, maximum.10)
}

ENTRY main.14 {
  Arg_0.15 = f32[8]{0} parameter(0)
  Arg_1.16 = f32[8]{0} parameter(1)
  constant.17 = f32[] constant(0)
  broadcast.18 = f32[8]{0} broadcast(constant.17), dimensions={}
  compare.19 = pred[8]{0} compare(Arg_0.15, broadcast.18), direction=GT
  call.20 = f32[8]{0} call(compare.19, Arg_0.15, Arg_1.16), to_apply=_where.1
  call.21 = f32[8]{0} call(Arg_1.16), to_apply=clip.6
  constant.22 = f32[] constant(0)
  broadcast.23 = f32[8]{0} broadcast(constant.22), dimensions={}
  unused.24 = f32[8]{0} add(broadcast.23, Arg_1.16)
  tuple.25 = (f32[8]{0}, f32[8]{0}) tuple(call.20, call.21)
  get-tuple-element.26 = f32[8]{0} get-tuple-element(tuple.25), index=0
  get-tuple-element.27 = f32[8]{0} get-tuple-element(tuple.25), index=1
  ROOT add.28 = f32[8]{0} add(get-tuple-element.26, get-tuple-element.27)
}
"""


def _results_equal(a: object, b: object) -> bool:
    if isinstance(a, tuple):
        return isinstance(b, tuple) and len(a) == len(b) and all(map(_results_equal, a, b))
    a, b = np.asarray(a), np.asarray(b)
    return a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()


def _check_preserves(module: Module, step, seed: int = 0) -> Module:
    """Run ``step`` on a copy of ``module``; the evaluator's result must not change a bit."""
    arguments = random_arguments(module, np.random.default_rng(seed))
    before = evaluate_module(module, arguments)
    rewritten = parse_module(print_module(module))
    run_pipeline(rewritten, step if not callable(step) else HloPass("under-test", step))
    verify_module(rewritten)
    after = evaluate_module(rewritten, arguments)
    assert _results_equal(before, after), print_module(rewritten)
    return rewritten


def _opcodes(module: Module) -> list[str]:
    return [inst.opcode for inst in module.entry.instructions]


def test_call_inliner_removes_every_call_and_keeps_results() -> None:
    module = _check_preserves(parse_module(JAX_STYLE), inline_calls)
    assert "call" not in _opcodes(module)
    # The clones are named after the helpers' instructions (module-unique: the helpers'
    # own names are still taken while the helpers exist).
    names = {inst.name for inst in module.entry.instructions}
    assert {"select.5.1", "minimum.13.1"} <= names


def test_call_inliner_handles_nested_calls_and_a_parameter_root() -> None:
    text = """
HloModule nested
identity {
  ROOT p = f32[4] parameter(0)
}
inner {
  p0 = f32[4] parameter(0)
  c = f32[4] call(p0), to_apply=identity
  ROOT n = f32[4] negate(c)
}
ENTRY main {
  x = f32[4] parameter(0)
  a = f32[4] call(x), to_apply=inner
  b = f32[4] call(a), to_apply=inner
  ROOT s = f32[4] add(a, b)
}
"""
    module = _check_preserves(parse_module(text), inline_calls)
    for computation in module.computations:
        assert "call" not in [i.opcode for i in computation.instructions]
    names = [i.name for i in module.entry.instructions]
    assert len(names) == len(set(names))
    assert {"n.1", "n.2"} <= set(names)  # one clone per call, each with its own name


def test_tuple_simplifier_looks_through_tuples() -> None:
    module = parse_module(JAX_STYLE)
    inline_calls(module)
    assert simplify_tuples(module)
    root = module.entry.root_instruction
    assert [op.opcode for op in root.operands] == ["select", "minimum"]
    text = """
HloModule rebuilt
ENTRY main {
  p = (f32[2], s32[3]) parameter(0)
  a = f32[2] get-tuple-element(p), index=0
  b = s32[3] get-tuple-element(p), index=1
  ROOT t = (f32[2], s32[3]) tuple(a, b)
}
"""
    rebuilt = _check_preserves(parse_module(text), simplify_tuples)
    assert rebuilt.entry.root_instruction.opcode == "parameter"


def test_tuple_simplifier_keeps_a_partial_or_reordered_tuple() -> None:
    text = """
HloModule swapped
ENTRY main {
  p = (f32[2], f32[2]) parameter(0)
  a = f32[2] get-tuple-element(p), index=0
  b = f32[2] get-tuple-element(p), index=1
  ROOT t = (f32[2], f32[2]) tuple(b, a)
}
"""
    module = parse_module(text)
    assert not simplify_tuples(module)


def test_dce_removes_dead_instructions_and_computations_but_not_effects() -> None:
    module = parse_module(JAX_STYLE)
    inline_calls(module)
    assert eliminate_dead_code(module)
    assert "unused.24" not in {i.name for i in module.entry.instructions}
    assert [c.name for c in module.computations] == ["main.14"]
    text = """
HloModule effects
ENTRY main {
  p = f32[2] parameter(0)
  token = token[] after-all()
  out = token[] outfeed(p, token), outfeed_shape=f32[2]
  dead = f32[2] negate(p)
  ROOT r = f32[2] abs(p)
}
"""
    effects = parse_module(text)
    assert eliminate_dead_code(effects)
    names = {i.name for i in effects.entry.instructions}
    assert "out" in names and "token" in names and "dead" not in names


def test_cse_merges_repeated_constants_and_broadcasts_only_when_identical() -> None:
    module = parse_module(JAX_STYLE)
    inline_calls(module)
    assert eliminate_common_subexpressions(module)
    constants = [i for i in module.entry.instructions if i.opcode == "constant"]
    # Three 0.0 constants became one; 1.0 stays apart from them.
    assert sorted(float(c.literal) for c in constants) == [0.0, 1.0]
    text = """
HloModule signed_zero
ENTRY main {
  p = f32[2] parameter(0)
  z = f32[] constant(0)
  n = f32[] constant(-0)
  bz = f32[2] broadcast(z), dimensions={}
  bn = f32[2] broadcast(n), dimensions={}
  r1 = f32[2] rng(z, n), distribution=rng_uniform
  r2 = f32[2] rng(z, n), distribution=rng_uniform
  a = f32[2] add(bz, bn)
  b = f32[2] add(r1, r2)
  ROOT t = (f32[2], f32[2]) tuple(a, b)
}
"""
    zeros = parse_module(text)
    assert not eliminate_common_subexpressions(zeros)  # -0.0 != 0.0, and rng is an effect


def test_cse_ignores_metadata() -> None:
    text = """
HloModule metadata
ENTRY main {
  p = f32[2] parameter(0)
  a = f32[2] exponential(p), metadata={op_name="jit(f)/exp" source_line=3}
  b = f32[2] exponential(p), metadata={op_name="jit(f)/exp" source_line=4}
  ROOT r = f32[2] add(a, b)
}
"""
    module = _check_preserves(parse_module(text), eliminate_common_subexpressions)
    assert _opcodes(module).count("exponential") == 1


def test_the_simplification_pipeline_leaves_jax_style_code_flat_and_small() -> None:
    module = parse_module(JAX_STYLE)
    report = run_pipeline(module, simplification_pipeline())
    assert report.changed and not report.unconverged
    assert sorted(_opcodes(module)) == sorted(
        ["parameter", "parameter", "constant", "broadcast", "compare", "select", "constant"]
        + ["broadcast", "maximum", "minimum", "add"]
    )
    again = run_pipeline(module, simplification_pipeline())
    assert not again.changed  # a fixed point: a second run finds nothing to do


def test_fusion_bodies_are_left_alone() -> None:
    text = """
HloModule fused
fused_computation {
  p0 = f32[4] parameter(0)
  c0 = f32[] constant(1)
  b0 = f32[4] broadcast(c0), dimensions={}
  c1 = f32[] constant(1)
  b1 = f32[4] broadcast(c1), dimensions={}
  dead = f32[4] negate(p0)
  a = f32[4] add(p0, b0)
  ROOT m = f32[4] multiply(a, b1)
}
ENTRY main {
  x = f32[4] parameter(0)
  ROOT f = f32[4] fusion(x), kind=kLoop, calls=fused_computation
}
"""
    from heron.hlo.printer import print_computation

    module = parse_module(text)
    before = print_computation(module.computation("fused_computation"))
    run_pipeline(module, simplification_pipeline())
    assert print_computation(module.computation("fused_computation")) == before


def test_the_manager_verifies_times_and_dumps(tmp_path) -> None:
    module = parse_module(JAX_STYLE)
    seen = []
    pipeline = Pipeline(
        "simplification",
        (
            pass_named("call-inliner"),
            FixedPoint(
                "simplify",
                (pass_named("tuple-simplifier"), pass_named("hlo-dce"), pass_named("hlo-cse")),
            ),
        ),
    )
    report = run_pipeline(
        module,
        pipeline,
        dump_dir=tmp_path,
        dump_passes="call-inliner|hlo-cse",
        on_pass=seen.append,
    )
    assert seen == report.records
    assert report.records[0].path == "simplification/call-inliner"
    assert report.records[1].path == "simplification/simplify/tuple-simplifier"
    dumped = sorted(p.name for p in tmp_path.iterdir())
    assert dumped[0] == "jit_f.0000.before_optimizations.txt"
    assert dumped[-1].endswith("after_optimizations.txt")
    middle = dumped[1:-1]
    assert middle and all("call-inliner" in n or "hlo-cse" in n for n in middle)
    assert "tuple-simplifier" not in " ".join(dumped)
    table = report.timing_table()
    assert "call-inliner" in table and "total" in table


def test_a_pass_that_breaks_the_module_is_named() -> None:
    def break_root(module: Module) -> bool:
        module.entry.root = None
        return True

    module = parse_module(JAX_STYLE)
    with pytest.raises(PassFailure, match="pass 'outer/breaker' left a module that does not"):
        run_pipeline(module, Pipeline("outer", (HloPass("breaker", break_root),)))

    def crash(module: Module) -> bool:
        raise ZeroDivisionError("oops")

    with pytest.raises(PassFailure, match="pass 'crasher' failed: ZeroDivisionError: oops"):
        run_pipeline(parse_module(JAX_STYLE), HloPass("crasher", crash))

    def make_a_cycle(module: Module) -> bool:
        entry = module.entry
        first = next(i for i in entry.instructions if i.operands)
        first.operands = [entry.root_instruction, *first.operands[1:]]
        entry.post_order()  # what a pass asks when it reorders: the cycle is found here
        return True

    # A verify error raised inside a pass is the pass's bug, not the user's input: named.
    with pytest.raises(PassFailure, match="pass 'cycler' left a module .* cycle in"):
        run_pipeline(parse_module(JAX_STYLE), HloPass("cycler", make_a_cycle))

    def refuse(module: Module) -> bool:
        raise UnsupportedError("instruction 'x' (sort) is not handled")

    # A refusal is about the input, not a bug: it reaches the user unwrapped.
    with pytest.raises(UnsupportedError, match="instruction 'x' \\(sort\\)") as refused:
        run_pipeline(parse_module(JAX_STYLE), HloPass("refuser", refuse))
    assert not isinstance(refused.value, PassFailure)


WITH_A_REDUCER = """
HloModule m

add {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}

ENTRY e {
  x = f32[4,8] parameter(0)
  z = f32[] constant(0)
  ROOT r = f32[4] reduce(x, z), dimensions={1}, to_apply=add
}
"""


def test_an_entry_only_pass_is_verified_in_its_scope_then_the_module_once(monkeypatch) -> None:
    """After a pass that promises to change the entry alone, the manager checks the
    entry and the computations the pass added, not the others (a loop body fused as a
    view's entry is a small part of the module); the whole module once at the end."""
    import heron.hlo.passes.manager as manager

    checked: list[list[str] | None] = []

    def recording(module, computations=None):
        checked.append(None if computations is None else [c.name for c in computations])
        verify_module(module, computations)

    monkeypatch.setattr(manager, "verify_module", recording)

    def add_a_computation(module: Module) -> bool:
        extra = parse_module(WITH_A_REDUCER).computation("add")
        extra.name = "added"
        module.computations.insert(0, extra)
        return True

    module = parse_module(WITH_A_REDUCER)
    report = run_pipeline(module, HloPass("adder", add_a_computation, entry_only=True))
    assert checked == [None, ["e", "added"], None]
    assert report.scoped == ["adder"]
    # A module known to verify (what an earlier pipeline left) is not checked first.
    checked.clear()
    run_pipeline(module, HloPass("nothing", lambda module: False), verified=True)
    assert checked == []
    run_pipeline(module, HloPass("nothing", lambda module: False))
    assert checked == [None]


def test_an_entry_only_pass_that_changes_another_computation_is_caught() -> None:
    def break_the_reducer(module: Module) -> bool:
        module.computation("add").instructions[1].name = "a"  # a name used twice
        return True

    module = parse_module(WITH_A_REDUCER)
    with pytest.raises(PassFailure, match="pipeline 'outer' left a module that does not verify"):
        run_pipeline(
            module,
            Pipeline("outer", (HloPass("breaker", break_the_reducer, entry_only=True),)),
        )
    with pytest.raises(UnsupportedError, match="entry_only must be True or False"):
        HloPass("p", break_the_reducer, entry_only="yes")


def test_a_scoped_verification_still_checks_the_module_as_a_whole() -> None:
    """Computations not listed are trusted; one entry and unique names are not."""
    module = parse_module(WITH_A_REDUCER)
    reducer = module.computation("add")
    reducer.instructions[1].name = "a"
    verify_module(module, [module.entry])  # the reducer is not looked at
    with pytest.raises(HloVerifyError, match="the name 'a' is used twice"):
        verify_module(module)
    reducer.instructions[1].name = "b"
    reducer.name = "e"
    with pytest.raises(HloVerifyError, match="two computations named 'e'"):
        verify_module(module, [module.entry])


def test_a_fixed_point_group_stops_at_its_bound_and_says_so() -> None:
    flips = []

    def always_changes(module: Module) -> bool:
        flips.append(1)
        return True

    report = run_pipeline(
        parse_module(JAX_STYLE),
        FixedPoint("loop", (HloPass("flip", always_changes),), max_iterations=3),
    )
    assert len(flips) == 3 and report.unconverged == ["loop"]


def test_the_registry_refuses_a_second_pass_of_a_name_and_names_unknown_ones() -> None:
    assert {
        "call-inliner",
        "tuple-simplifier",
        "hlo-dce",
        "hlo-cse",
        "algebraic-simplifier",
        "conditional-simplifier",
        "while-loop-simplifier",
    } <= set(PASSES)
    with pytest.raises(UnsupportedError, match="already registered"):
        register_pass(HloPass("hlo-dce", lambda module: False))
    with pytest.raises(UnsupportedError, match="unknown HLO pass 'dse'.*hlo-dce"):
        pass_named("dse")
    with pytest.raises(UnsupportedError, match="lower-case words"):
        HloPass("Bad Name", lambda module: False)


# -- random modules: every pass preserves the evaluator's result bit for bit ----------

_UNARY = ("negate", "abs", "exponential", "tanh", "copy")
_BINARY = ("add", "multiply", "maximum", "subtract")


@st.composite
def _random_modules(draw) -> Module:
    """A random unfused module: elementwise ops, repeated broadcasts and constants,
    tuples taken apart again, dead values, and calls into a helper computation."""
    shape = array_shape("f32", (draw(st.integers(1, 3)), draw(st.integers(1, 4))))
    mb = ModuleBuilder("random")
    helper = mb.computation("helper")
    hx = helper.parameter(shape)
    hy = helper.parameter(shape)
    helper.binary(draw(st.sampled_from(_BINARY)), helper.unary("negate", hx), hy)
    helper_fn = helper.build()
    main = mb.computation("main")
    values = [main.parameter(shape), main.parameter(shape)]
    for _ in range(draw(st.integers(1, 14))):
        kind = draw(st.sampled_from(["unary", "binary", "constant", "tuple", "call"]))
        pick = st.sampled_from(values)
        if kind == "unary":
            values.append(main.unary(draw(st.sampled_from(_UNARY)), draw(pick)))
        elif kind == "binary":
            values.append(main.binary(draw(st.sampled_from(_BINARY)), draw(pick), draw(pick)))
        elif kind == "constant":
            value = np.float32(draw(st.sampled_from([0.0, -0.0, 1.0, 0.5])))
            values.append(main.broadcast(main.constant(value), shape.dims, ()))
        elif kind == "tuple":
            a, b = draw(pick), draw(pick)
            pair = main.tuple([a, b])
            values.append(main.get_tuple_element(pair, draw(st.integers(0, 1))))
        else:
            values.append(main.call([draw(pick), draw(pick)], helper_fn))
    roots = draw(st.lists(st.sampled_from(values), min_size=1, max_size=3))
    main.build(main.tuple(roots) if len(roots) > 1 else roots[0])
    return mb.build(entry=main)


@pytest.mark.parametrize("name", ["call-inliner", "tuple-simplifier", "hlo-dce", "hlo-cse"])
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_every_pass_preserves_results_on_random_modules(name: str, data) -> None:
    module = data.draw(_random_modules())
    _check_preserves(module, pass_named(name), seed=data.draw(st.integers(0, 3)))


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(module=_random_modules(), seed=st.integers(0, 3))
def test_the_pipeline_preserves_results_and_removes_calls_on_random_modules(
    module: Module, seed: int
) -> None:
    rewritten = _check_preserves(module, simplification_pipeline(), seed)
    assert all(
        inst.opcode != "call"
        for computation in rewritten.computations
        for inst in computation.instructions
    )


def test_rewrite_each_keeps_one_uses_table_per_computation(monkeypatch):
    """A pass that rewrites many instructions of one opcode (the tree-reduction
    rewriter, the scan rewriter) builds the computation's uses once and keeps them
    current: rebuilding them for each instruction made it quadratic (15 s of a
    10,000-instruction module). A replaced instruction is no user of anything."""
    from heron.hlo.parser import parse_module
    from heron.hlo.passes import rewrite as rewriting
    from heron.hlo.shapes import array_shape

    lines = ["  x0 = f32[4] parameter(0)"]
    for i in range(1, 40):
        lines.append(f"  x{i} = f32[4] negate(x{i - 1})")
    module = parse_module(
        "HloModule m\n\nENTRY e {\n" + "\n".join(lines) + "\n  ROOT r = f32[4] copy(x39)\n}\n"
    )
    built = []
    original = rewriting.Uses.__init__

    def counting(self, computation):
        built.append(computation.name)
        original(self, computation)

    monkeypatch.setattr(rewriting.Uses, "__init__", counting)
    seen_users = []

    def as_subtraction(inserter, inst):
        (x,) = inst.operands
        seen_users.append(len(inserter.uses.users(x)))
        zero = inserter.add(
            "constant", array_shape("f32", ()), like=inst, suffix="zero", literal=np.float32(0)
        )
        zeros = inserter.add("broadcast", x.shape, [zero], {"dimensions": ()}, like=inst)
        return inserter.add("subtract", x.shape, [zeros, x], like=inst)

    assert rewriting.rewrite_each(module, "negate", as_subtraction)
    assert built == [module.entry.name]
    assert not any(i.opcode == "negate" for i in module.entry.instructions)
    assert seen_users == [1] * 39  # each operand's one live user, never a replaced one
    x = np.arange(4, dtype=np.float32)
    assert np.array_equal(evaluate_module(module, [x]), x * (1 if 39 % 2 == 0 else -1))


def test_a_group_verified_at_its_end_checks_the_module_once(monkeypatch) -> None:
    """``verify_each_pass=False`` (XLA's debug-only invariant checker, which its GPU
    compiler puts on the simplification and fusion groups): the module is verified
    when the group ends and changed it, not after each of its passes; with
    ``HERON_VERIFY_EACH_PASS=1`` (or the argument) after each again."""
    import heron.hlo.passes.manager as manager

    checked: list[int] = []  # how many passes had reported when each check ran

    def recording(module, computations=None):
        checked.append(len(record))
        verify_module(module, computations)

    record: list = []
    monkeypatch.setattr(manager, "verify_module", recording)
    monkeypatch.delenv(manager.VERIFY_EACH_PASS_ENV, raising=False)
    group = FixedPoint(
        "simplify",
        (pass_named("tuple-simplifier"), pass_named("hlo-dce"), pass_named("hlo-cse")),
        verify_each_pass=False,
    )
    pipeline = Pipeline("simplification", (pass_named("call-inliner"), group))
    report = run_pipeline(parse_module(JAX_STYLE), pipeline, on_pass=record.append)
    changed = [r.path for r in report.records if r.changed]
    assert "simplification/call-inliner" in changed
    assert any(path.startswith("simplification/simplify/") for path in changed)
    # Once before the pipeline, once after the inliner (before it reports), once when
    # the group ended, after all its passes.
    assert checked == [0, 0, len(report.records)]

    for each in (True, None):
        checked.clear()
        record.clear()
        if each is None:
            monkeypatch.setenv(manager.VERIFY_EACH_PASS_ENV, "1")
        report = run_pipeline(
            parse_module(JAX_STYLE), pipeline, on_pass=record.append, verify_each_pass=each
        )
        assert len(checked) == 1 + sum(r.changed for r in report.records)


def test_a_group_verified_at_its_end_names_its_passes_when_the_module_breaks() -> None:
    def break_root(module: Module) -> bool:
        module.entry.root = None
        return True

    group = Pipeline(
        "fusion",
        (HloPass("fine", lambda module: False), HloPass("breaker", break_root)),
        verify_each_pass=False,
    )
    with pytest.raises(PassFailure) as failure:
        run_pipeline(parse_module(JAX_STYLE), Pipeline("outer", (group,)), verify_each_pass=False)
    message = str(failure.value)
    assert "'outer/fusion' left a module that does not verify" in message
    assert "outer/fusion/breaker" in message and "outer/fusion/fine" not in message
    assert "HERON_VERIFY_EACH_PASS=1" in message
    with pytest.raises(PassFailure, match="pass 'outer/fusion/breaker' left a module"):
        run_pipeline(parse_module(JAX_STYLE), Pipeline("outer", (group,)), verify_each_pass=True)
    with pytest.raises(UnsupportedError, match="verify_each_pass must be True or False"):
        Pipeline("p", (), verify_each_pass="no")


def test_a_view_verifies_only_what_its_entry_reaches(monkeypatch) -> None:
    """``reached_only``: a loop body fused as a view's entry verifies what that entry
    reaches, not the whole module it is a view of (a jax-cosmo program verified its 538
    computations in each of 104 views, a fifth of its compile)."""
    import heron.hlo.passes.manager as manager

    checked: list[list[str] | None] = []

    def recording(module, computations=None):
        checked.append(None if computations is None else [c.name for c in computations])
        verify_module(module, computations)

    monkeypatch.setattr(manager, "verify_module", recording)
    module = parse_module(WITH_A_REDUCER)
    unreached = parse_module(WITH_A_REDUCER).computation("add")
    unreached.name = "unreached"
    module.computations.insert(0, unreached)
    run_pipeline(module, HloPass("nothing", lambda module: False), reached_only=True)
    assert [sorted(names) for names in checked] == [["add", "e"]]  # not "unreached"
    checked.clear()
    run_pipeline(module, HloPass("nothing", lambda module: False))
    assert checked == [None]
