"""How many times a fused kernel evaluates its instructions, and the fusions refused for it.

XLA's priority fusion refuses a fusion whose "IR size" (the times each fused
instruction is emitted) would pass 10,000. heron fused the up- and down-sweep of
jaxns's 1,300-element ``associative_scan`` into one kernel counting 115 million
evaluations: the interpreter had not finished it after hours, where the same
program split as XLA splits it runs in three seconds (docs/reliability.md).
"""

from __future__ import annotations

import pytest
from heron_test_support.hlo_modules import elementwise_chain

from heron.compiler import Target
from heron.compiler.fusion import context as context_module
from heron.compiler.fusion import fusible as fusible_module
from heron.compiler.fusion import gpu_pipeline
from heron.compiler.fusion.builder import build_fusion
from heron.compiler.fusion.emissions import MAX_EMISSIONS, count_emissions, fused_emissions
from heron.compiler.fusion.fusible import FusionChecker
from heron.hlo.parser import parse_module
from heron.hlo.passes import run_pipeline

H100 = Target.preset("h100")


def _body(text: str):
    return parse_module(text).entry


def test_an_elementwise_chain_is_evaluated_once_per_element() -> None:
    body = _body(
        """HloModule m
ENTRY e {
  p = f32[64]{0} parameter(0)
  a = f32[64]{0} exponential(p)
  b = f32[64]{0} negate(a)
  ROOT c = f32[64]{0} add(a, b)
}"""
    )
    # a is read twice, both along elementwise paths from the root: computed once
    assert count_emissions(body).total == 4
    assert count_emissions(body).by_parameter == (1,)


def test_two_slices_of_one_value_evaluate_it_twice() -> None:
    body = _body(
        """HloModule m
ENTRY e {
  p = f32[64]{0} parameter(0)
  q = f32[32]{0} parameter(1)
  x = f32[64]{0} exponential(p)
  even = f32[32]{0} slice(x), slice={[0:63:2]}
  odd = f32[32]{0} slice(x), slice={[1:64:2]}
  s = f32[32]{0} add(even, odd)
  ROOT r = f32[32]{0} multiply(s, q)
}"""
    )
    emissions = count_emissions(body)
    # r, s, even, odd, q once each; x and p twice
    assert emissions.by_parameter == (2, 1)
    assert emissions.total == 5 + 2 * 2


def _tree(levels: int, width_log2: int | None = None) -> str:
    """An entry that halves an f32 array ``levels`` times, each level a logaddexp of its
    even and odd elements (jax's ``associative_scan`` up-sweep): each level's ops read
    both halves several times."""
    size = 2 ** (width_log2 if width_log2 is not None else levels)
    lines = ["HloModule tree", "ENTRY e {", f"  v0 = f32[{size}]{{0}} parameter(0)"]
    for k in range(levels):
        half = size // 2
        t = f"f32[{half}]{{0}}"
        lines += [
            f"  a{k} = {t} slice(v{k}), slice={{[0:{size - 1}:2]}}",
            f"  b{k} = {t} slice(v{k}), slice={{[1:{size}:2]}}",
            f"  d{k} = {t} subtract(a{k}, b{k})",
            f"  n{k} = pred[{half}]{{0}} compare(d{k}, d{k}), direction=NE",
            f"  s{k} = {t} add(a{k}, b{k})",
            f"  m{k} = {t} maximum(a{k}, b{k})",
            f"  e{k} = {t} exponential(d{k})",
            f"  l{k} = {t} log-plus-one(e{k})",
            f"  g{k} = {t} add(m{k}, l{k})",
            f"  v{k + 1} = {t} select(n{k}, s{k}, g{k})",
        ]
        size = half
    lines[-1] = lines[-1].replace(f"  v{levels} =", f"  ROOT v{levels} =")
    return "\n".join([*lines, "}"])


@pytest.mark.parametrize("levels", [1, 3, 6])
def test_each_level_of_a_tree_doubles_what_it_reads(levels) -> None:
    emissions = count_emissions(_body(_tree(levels)))
    # each level's 10 ops once per evaluation of its result, its input twice as often
    assert emissions.by_parameter == (2**levels,)
    assert emissions.total == 10 * (2**levels - 1) + 2**levels


def test_a_producer_fused_into_its_user_counts_what_the_formula_says() -> None:
    module = parse_module(_tree(4))
    entry = module.entry
    by_name = {inst.name: inst for inst in entry.instructions}
    producer, user = by_name["v2"], by_name["a2"]
    producer_body = build_fusion([producer], [producer])
    user_body = build_fusion([user], [user])
    pair = build_fusion([producer, user], [user])
    try:
        expected = fused_emissions(
            count_emissions(producer_body.body), count_emissions(user_body.body), [0]
        )
        assert count_emissions(pair.body).total <= expected
        assert count_emissions(pair.body).total == expected  # nothing shared here
    finally:
        for candidate in (producer_body, user_body, pair):
            candidate.discard()


def test_the_checker_refuses_a_body_over_the_limit_and_takes_one_under_it() -> None:
    checker = FusionChecker(H100)
    for levels, takes in ((9, True), (11, False)):
        module = parse_module(_tree(levels))
        entry = module.entry
        members = [inst for inst in entry.instructions if inst.opcode != "parameter"]
        candidate = build_fusion(members, [entry.root_instruction])
        try:
            over = count_emissions(candidate.body).total > MAX_EMISSIONS
            assert over is not takes
            assert (checker.check(candidate) is not None) is takes
        finally:
            candidate.discard()


@pytest.mark.parametrize("limit", [None, 16])
def test_priority_fusion_keeps_each_fusion_within_the_limit(limit, monkeypatch) -> None:
    """A chain the cost model fuses whole is split where a lower limit says so: the
    pairs priced without being built (:meth:`FusionContext._plain_pair`) and those
    built and checked both keep to it."""
    if limit is not None:
        monkeypatch.setattr(context_module, "MAX_EMISSIONS", limit)
        monkeypatch.setattr(fusible_module, "MAX_EMISSIONS", limit)
    module = parse_module(elementwise_chain(40, 4096))
    run_pipeline(module, gpu_pipeline(H100))
    fusions = [inst for inst in module.entry.instructions if inst.opcode == "fusion"]
    counts = [count_emissions(fusion.called("calls")).total for fusion in fusions]
    if limit is None:
        assert len(fusions) == 1 and counts == [41]
    else:
        assert len(fusions) >= 41 // limit
        assert max(counts) <= limit
        assert max(counts) > limit // 2  # split where the limit is, not everywhere
