"""Pair prices and checks priority fusion makes from each side's own figures.

Around every fusion it performs, priority fusion prices each operand of the new fusion
into it. A pair's reads are summed from the user's, made once per user, less the
producer's parameter plus the producer's operands (:class:`PairPrices`); a pair's
evaluation count is bounded from each side's own count, and the fused body is counted
only where the bound passes the limit. Both must give, to the last bit, what the whole
demand and the built body give, or the pass would fuse in another order.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from heron.compiler import Target
from heron.compiler.fusion import gpu_pipeline
from heron.compiler.fusion import pair_price as pair_price_module
from heron.compiler.fusion.cost_model import kernel_cost
from heron.compiler.fusion.emissions import count_emissions
from heron.compiler.fusion.fusible import FusionChecker
from heron.compiler.fusion.pair_price import PairPrices
from heron.hlo.parser import parse_module
from heron.hlo.passes import run_pipeline

H100 = Target.preset("h100")
PROGRAMS = Path(__file__).resolve().parents[3] / "programs"
#: Programs whose fusions grow by many steps, users whose operands are replaced by the
#: fusions installed around them (an optimizer's moments, a normalisation's statistics).
GROWING = ["adam_step", "layernorm", "mlp_gelu_exact", "sgd_global_norm_clip", "variance_two_pass"]


def _run(program: str) -> None:
    module = parse_module((PROGRAMS / program / "module.hlo").read_text())
    run_pipeline(module, gpu_pipeline(H100))


@pytest.mark.parametrize("program", GROWING)
def test_a_pair_priced_from_its_users_sums_is_priced_as_its_whole_demand(
    program, monkeypatch
) -> None:
    """Each pair priced from the user's summed reads costs what its whole composed demand
    costs (:meth:`PairPrices._composed_reads`, every value's reads summed afresh), after
    the user's operands were replaced by fusions installed around it as before."""
    compose = PairPrices._compose
    compared: list[str] = []

    def checked(self, producer, user, once, tiled, threads):
        cost = compose(self, producer, user, once, tiled, threads)
        composed = self._composed_reads(producer, user, once)
        assert (cost is None) == (composed is None)
        if composed is not None:
            demand, flops, consumer, _ = composed
            reads = [
                (value.shape, *read)
                for value, read in demand.items()
                if not pair_price_module.is_small_constant(value)
            ]
            whole = kernel_cost(reads, consumer.write, flops, H100, tiled=tiled, threads=threads)
            assert cost == whole, (producer.name, user.name)
            compared.append(user.name)
        return cost

    monkeypatch.setattr(PairPrices, "_compose", checked)
    _run(program)
    assert len(compared) >= 3


@pytest.mark.parametrize("program", GROWING)
def test_a_pairs_evaluations_are_never_more_than_its_sides_bound(program, monkeypatch) -> None:
    """Where the checker is handed a bound on a pair's evaluations from its two sides'
    counts, the built body counts at most the bound (so a body within the limit by the
    bound is within it), and the checker's verdict is the one it gives counting."""
    check = FusionChecker.check
    bounded: list[int] = []

    def checked(self, candidate, consumer=None, emissions_at_most=None):
        verdict = check(self, candidate, consumer, emissions_at_most)
        if emissions_at_most is not None:
            assert count_emissions(candidate.body).total <= emissions_at_most
            assert verdict == check(self, candidate, consumer)
            bounded.append(emissions_at_most)
        return verdict

    monkeypatch.setattr(FusionChecker, "check", checked)
    _run(program)
    assert bounded


@pytest.mark.parametrize("program", GROWING)
def test_an_installed_fusion_keeps_the_signature_its_candidate_was_signed_with(
    program, monkeypatch
) -> None:
    """Priority fusion hands each installed fusion the signature its candidate was signed
    with for its verdict (:meth:`PairKeys.adopt`) instead of signing the body again: it
    is the signature the body signed afresh has."""
    from heron.compiler.fusion.fusion_cse import signature
    from heron.compiler.fusion.pair_key import PairKeys

    adopt = PairKeys.adopt
    adopted: list[str] = []

    def checked(self, inst, signed):
        values: list[object] = []
        form = signature(inst.called("calls"), self.called, values, self.formatted)
        assert signed == (form, tuple(values)), inst.name
        adopted.append(inst.name)
        adopt(self, inst, signed)

    monkeypatch.setattr(PairKeys, "adopt", checked)
    _run(program)
    assert adopted
