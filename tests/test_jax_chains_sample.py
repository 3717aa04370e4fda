"""CI's fixed sample of random jax.numpy chains (tests/fuzz/jax_chains.py) through heron.jax.

Each chain runs on heron's interpreter and through jax.jit on the CPU, and the
values must agree. The full runs are ``python tests/fuzz/jax_chains.py --seed S
--cases N [--half]``; the sample keeps what they found from coming back (the
argmax over a transposed array below) and covers every step kind.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

FUZZ_ROOT = Path(__file__).resolve().parent / "fuzz"
if str(FUZZ_ROOT) not in sys.path:
    sys.path.insert(0, str(FUZZ_ROOT))

import jax_chains  # noqa: E402

#: Fixed: the same chains on every CI run (f32 and, every third, bf16 or f16).
SEEDS = range(20261202, 20261202 + 24)

#: What the first run found: argmax over a transposed array, whose values JAX lays
#: out in {0,1,2} beside an iota in the default layout (1,021 of 1,056 indices wrong).
ARGMAX_OF_A_TRANSPOSE = jax_chains.Chain(
    seed=41,
    dims=(32, 32, 33),
    dtype=np.float32,
    steps=(("transpose", (2, 1, 0)), ("reduce", 1, "argmax"), ("cumsum", 0)),
    outputs=2,
)


def test_the_sample_covers_every_step_kind() -> None:
    drawn = {step[0] for seed in SEEDS for step in jax_chains.draw(seed, half=True).steps}
    assert set(jax_chains.KINDS) <= drawn, set(jax_chains.KINDS) - drawn


@pytest.mark.parametrize("seed", SEEDS)
def test_a_random_chain_agrees_with_jax(seed: int) -> None:
    chain = jax_chains.draw(seed, half=True)
    outcome = jax_chains.check(chain)
    assert outcome.status == "agree", (chain.describe(), outcome.why)


#: Fixed chains under jax.vmap (batch axes moved) and as a lax.scan body (a while loop).
WRAPPED = [("vmap", seed) for seed in range(20261290, 20261294)] + [
    ("scan", seed) for seed in range(20261290, 20261294)
]


@pytest.mark.parametrize(("wrap", "seed"), WRAPPED)
def test_a_wrapped_chain_agrees_with_jax(wrap: str, seed: int) -> None:
    chain = jax_chains.draw(seed, wrap=wrap)
    outcome = jax_chains.check(chain)
    assert outcome.status == "agree", (chain.describe(), outcome.why)


def test_the_argmax_of_a_transpose_agrees_with_jax() -> None:
    assert jax_chains.check(ARGMAX_OF_A_TRANSPOSE).status == "agree"


def test_a_half_chain_off_by_xlas_excess_precision_is_told_apart() -> None:
    """bf16 softmax then argsort: XLA:CPU computes the softmax's steps in f32, heron
    rounds each to bf16 as the HLO says (as a numpy emulation of the HLO does), and the
    argsort orders the different ties differently."""
    chain = jax_chains.draw(5191, half=True)
    assert chain.steps[0] == ("softmax", 0) and chain.steps[2][0] == "argsort"
    outcome = jax_chains.check(chain)
    assert outcome.status == "excess", outcome


def test_the_comparison_can_fail() -> None:
    ones = np.ones((3, 4), np.float32)
    assert jax_chains.disagreement([ones], [ones], np.float32) is None
    assert "max |difference|" in jax_chains.disagreement([ones * 1.01], [ones], np.float32)
    assert jax_chains.disagreement([ones * 1.01], [ones], np.float16) is None
    assert "NaN" in jax_chains.disagreement([ones * np.nan], [ones], np.float32)
    assert "shape" in jax_chains.disagreement([ones.T], [ones], np.float32)


#: Fixed chains with a step adding two layouts of one array (``--mix``).
MIXED = range(20261300, 20261304)


@pytest.mark.parametrize("seed", MIXED)
def test_a_chain_adding_two_layouts_of_one_array_agrees_with_jax(seed: int) -> None:
    chain = jax_chains.draw(seed, mix=True)
    assert any(step[0] == "mix" for step in chain.steps)
    assert tuple(s for s in chain.steps if s[0] != "mix") == jax_chains.draw(seed).steps
    outcome = jax_chains.check(chain)
    assert outcome.status == "agree", (chain.describe(), outcome.why)


def test_an_infinity_against_a_number_is_a_disagreement() -> None:
    expected = [np.array([1.0, np.inf, 3.0], np.float32)]
    assert jax_chains.disagreement(expected, expected, np.float32) is None
    wrong = [np.array([1.0, np.inf, 300.0], np.float32)]  # once hidden by an infinite scale
    assert "max |difference|" in jax_chains.disagreement(wrong, expected, np.float32)
    flipped = [np.array([1.0, -np.inf, 3.0], np.float32)]
    assert "infinity" in jax_chains.disagreement(flipped, expected, np.float32)


def test_an_argsort_of_mathematically_tied_keys_is_told_apart() -> None:
    """Seed 92010's keys (a softmax's rows through an einsum and a cumsum) are the same
    sum for every row: which index comes first is rounding's choice, so a difference
    there is counted apart (``ties``), while an argsort of distinct keys is not."""
    tied = jax_chains.draw(92010, half=True)
    assert ("argsort", 0) in tied.steps
    assert jax_chains._argsorts_near_ties(tied, jax_chains.argument(tied))
    distinct = jax_chains.Chain(
        seed=7, dims=(64, 5), dtype=np.float32, steps=(("argsort", 0),), outputs=1
    )
    keys = np.arange(320, dtype=np.float32).reshape(64, 5) * 0.25 - 40
    assert not jax_chains._argsorts_near_ties(distinct, keys)
