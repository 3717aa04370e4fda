"""Pairs priority fusion prices without building their bodies.

A fusion grown near :data:`MAX_FUSED_INSTRUCTIONS` is priced into each of its users
after every step; building each such pair only to have the checker refuse it was a
third of what the Fisher matrix's priority fusion cloned. And a pair of bodies that
decide nothing (elementwise ops, broadcasts, slices) into a loop user is the user's
verdict: built, most were thrown away unread. The answers without a build must be
the checker's and the cost model's on the built body.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from heron_test_support.hlo_modules import elementwise_chain

from heron.compiler import Target
from heron.compiler.fusion import context as context_module
from heron.compiler.fusion import gpu_pipeline
from heron.compiler.fusion.builder import build_fusion, install_fusion
from heron.compiler.fusion.context import FusionContext
from heron.compiler.fusion.fusible import MAX_FUSED_INSTRUCTIONS, MAX_FUSION_PARAMETERS
from heron.compiler.fusion.graph import FusionGraph
from heron.hlo.ir import Instruction, Module
from heron.hlo.parser import parse_module
from heron.hlo.passes import run_pipeline

H100 = Target.preset("h100")


def _fused_prefix(module: Module, ops: int) -> tuple[Instruction, Instruction]:
    """The chain's first ``ops`` ops installed as one fusion, and the op reading it."""
    entry = module.entry
    members = [i for i in entry.instructions if i.opcode != "parameter"][:ops]
    candidate = build_fusion(members, [members[-1]])
    graph = FusionGraph(module, entry)
    fusion = install_fusion(module, entry, candidate, "kLoop", graph)
    graph.finish()
    (user,) = [i for i in entry.instructions if fusion in i.operands]
    return fusion, user


def _counting_builds(monkeypatch) -> list[object]:
    builds: list[object] = []
    monkeypatch.setattr(
        context_module,
        "build_fusion",
        lambda *args, **kwargs: builds.append(args) or build_fusion(*args, **kwargs),
    )
    return builds


def _checked(context: FusionContext, producer: Instruction, user: Instruction) -> object:
    """The checker's verdict on the built pair: what a price of None must agree with."""
    candidate = build_fusion([producer, user], [user])
    try:
        return context.checker.check(candidate, consumer=user)
    finally:
        candidate.discard()


@pytest.mark.parametrize("ops", [MAX_FUSED_INSTRUCTIONS - 1, MAX_FUSED_INSTRUCTIONS + 10])
def test_a_fusion_at_the_size_limit_is_refused_into_its_user_unbuilt(ops, monkeypatch) -> None:
    # the pair's body: a parameter, the fusion's ops and the user's one, over the limit
    module = parse_module(elementwise_chain(ops + 2))
    fusion, user = _fused_prefix(module, ops)
    context = FusionContext(module, H100)
    builds = _counting_builds(monkeypatch)
    assert context.pair_seconds(fusion, user) is None
    assert builds == []
    assert _checked(context, fusion, user) is None


@pytest.mark.parametrize("ops", [150, MAX_FUSED_INSTRUCTIONS - 2])
def test_a_fusion_under_the_size_limit_is_priced_unbuilt(ops, monkeypatch) -> None:
    # an elementwise chain decides nothing: priced unbuilt, its exact size told
    # unbuilt too (the pair's body is the limit's size at most)
    module = parse_module(elementwise_chain(ops + 2))
    fusion, user = _fused_prefix(module, ops)
    context = FusionContext(module, H100)
    builds = _counting_builds(monkeypatch)
    seconds = context.pair_seconds(fusion, user)
    assert seconds is not None and seconds > 0
    assert builds == []
    assert _checked(context, fusion, user) is not None


def test_a_producer_over_the_budget_is_refused_into_a_narrower_user_unbuilt(monkeypatch) -> None:
    count = MAX_FUSION_PARAMETERS + 1
    lines = ["HloModule wide", "ENTRY e {"]
    lines += [f"  p{k} = f32[8]{{0}} parameter({k})" for k in range(count)]
    lines.append("  s0 = f32[8]{0} add(p0, p1)")
    lines += [f"  s{k - 1} = f32[8]{{0}} add(s{k - 2}, p{k})" for k in range(2, count)]
    lines += [f"  ROOT n = f32[8]{{0}} negate(s{count - 2})", "}"]
    module = parse_module("\n".join(lines))
    adds = [i for i in module.entry.instructions if i.opcode == "add"]
    fusion, user = _fused_prefix(module, len(adds))
    assert len(fusion.operands) == count and user.opcode == "negate"
    context = FusionContext(module, H100)
    builds = _counting_builds(monkeypatch)
    assert context.pair_seconds(fusion, user) is None
    assert builds == []
    assert _checked(context, fusion, user) is None


PROGRAMS = Path(__file__).resolve().parents[3] / "programs"


@pytest.mark.parametrize(
    "program",
    ["mlp_gelu_exact", "adam_step_bf16_params", "dropout_threefry", "sgd_global_norm_clip"],
)
def test_a_plain_pair_priced_unbuilt_is_priced_as_its_built_body(program, monkeypatch) -> None:
    """Priority fusion prices a producer whose body decides nothing fused into a loop
    user without building the pair: the user's verdict is the pair's, and the price is
    composed from the two sides' reads with it, as for a built pair. Every such pair
    of whole programs is built here too and checked: the checker gives the same
    verdict."""
    plain_pair = FusionContext._plain_pair
    compared: list[bool] = []

    def compared_with_built(self, producer, user):
        cost = plain_pair(self, producer, user)
        if cost is not None:
            candidate = build_fusion([producer, user], [user])
            verdict = self.checker.check(candidate, consumer=user)
            if verdict is not None:
                assert verdict == self.own_verdict(user), (producer.name, user.name)
            compared.append(verdict is not None)
            candidate.discard()
        return cost

    monkeypatch.setattr(FusionContext, "_plain_pair", compared_with_built)
    module = parse_module((PROGRAMS / program / "module.hlo").read_text())
    run_pipeline(module, gpu_pipeline(H100))
    assert compared and all(compared)


@pytest.mark.parametrize(
    "program", ["layernorm", "softmax_axis0", "variance_two_pass", "layernorm_bf16"]
)
def test_a_plain_producer_priced_unbuilt_into_a_reading_hero_has_the_heros_verdict(
    program, monkeypatch
) -> None:
    """A producer whose body decides nothing, fused into a reduction's (or a transpose's,
    a concatenate's) input, is priced with the user's own verdict without building the
    pair (:data:`~heron.compiler.fusion.context._READING_HEROES`): built here too, every
    such pair gets that verdict from the checker."""
    plain_pair = FusionContext._plain_pair
    heroes: list[str] = []

    def compared_with_built(self, producer, user):
        cost = plain_pair(self, producer, user)
        own = self.own_verdict(user)
        if cost is not None and own.emitter_kind in context_module._READING_HEROES:
            candidate = build_fusion([producer, user], [user])
            assert self.checker.check(candidate, consumer=user) == own, (producer.name, user.name)
            candidate.discard()
            heroes.append(own.emitter_kind)
        return cost

    monkeypatch.setattr(FusionContext, "_plain_pair", compared_with_built)
    module = parse_module((PROGRAMS / program / "module.hlo").read_text())
    run_pipeline(module, gpu_pipeline(H100))
    assert heroes
