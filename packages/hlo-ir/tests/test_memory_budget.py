"""heron.hlo.memory_budget: one budget, checked before every large allocation."""

from __future__ import annotations

import numpy as np
import pytest

from heron.hlo import memory_budget
from heron.hlo.evaluator import evaluate_module, random_arguments
from heron.hlo.evaluator.random_inputs import random_arguments_bytes
from heron.hlo.memory_budget import MemoryBudgetError, format_size, parse_size
from heron.hlo.parser import parse_module


@pytest.fixture(autouse=True)
def clean(monkeypatch):
    monkeypatch.delenv(memory_budget.ENV, raising=False)
    monkeypatch.delenv("HERON_EVALUATOR_MAX_BYTES", raising=False)
    yield
    memory_budget.set_budget(None)


@pytest.mark.parametrize(
    ("text", "value"),
    [("1000", 1000), ("1k", 1024), ("512M", 512 * 2**20), ("8GiB", 8 * 2**30), ("2.5G", 5 * 2**29)],
)
def test_sizes(text, value):
    assert parse_size(text) == value


@pytest.mark.parametrize("text", ["", "x", "8X", "-1", "0", "1 GB GB"])
def test_bad_sizes(text):
    with pytest.raises(ValueError):
        parse_size(text)


def test_default_is_a_fraction_of_the_available_memory():
    available = memory_budget.available_memory()
    assert available is None or available > 0
    default = memory_budget.default_budget()
    assert memory_budget.budget() == default > 0
    if available:
        # Measured once; the machine's free memory moves, so compare loosely.
        assert default <= available


def test_overrides_in_order(monkeypatch):
    monkeypatch.setenv(memory_budget.ENV, "3M")
    assert memory_budget.budget() == 3 * 2**20
    assert memory_budget.source() == memory_budget.ENV
    memory_budget.set_budget(1234)
    assert memory_budget.budget() == 1234 and memory_budget.source() == "--memory-budget"
    memory_budget.set_budget(None)
    monkeypatch.setenv(memory_budget.ENV, "lots")
    with pytest.raises(MemoryBudgetError, match="HERON_MEMORY_BUDGET: 'lots' is not a size"):
        memory_budget.budget()


def test_refusal_says_what_was_needed_and_the_budget():
    memory_budget.set_budget(2**20)
    memory_budget.check(2**20, "fits")
    with pytest.raises(MemoryBudgetError, match=r"thing would need 2.00 MiB .*budget of 1.00 MiB"):
        memory_budget.check(2**21, "thing")
    assert format_size(2473901162496) == "2.25 TiB (2473901162496 bytes)"


def test_reservations_count_against_every_check_inside_them():
    memory_budget.set_budget(2**20)
    with memory_budget.reserve(600_000, "the input sets"):
        assert memory_budget.reserved() == 600_000
        memory_budget.check(400_000, "fits beside it")
        beside = r"buffer would need .* beside .*the input sets"
        with pytest.raises(MemoryBudgetError, match=beside):
            memory_budget.check(500_000, "buffer")
        with pytest.raises(MemoryBudgetError):
            with memory_budget.reserve(500_000, "a second reservation"):
                pass
        assert memory_budget.reserved() == 600_000
    assert memory_budget.reserved() == 0
    with pytest.raises(RuntimeError), memory_budget.reserve(10, "released on an exception"):
        raise RuntimeError
    assert memory_budget.reserved() == 0
    memory_budget.check(2**20, "all of it, once released")


BIG = """
ENTRY e {
  p = f32[2147483648] parameter(0)
  ROOT n = f32[2147483648] negate(p)
}"""


def test_random_arguments_refused_before_drawing():
    # Issue 13: f32[2147483648] random inputs ended in a MemoryError (or the OOM killer).
    module = parse_module(BIG)
    assert random_arguments_bytes(module) == 2**31 * 4 + 2**31 * 16
    memory_budget.set_budget(2**30)
    with pytest.raises(MemoryBudgetError, match=r"random arguments .* would need 40.00 GiB"):
        random_arguments(module)


def test_small_random_arguments_fit():
    module = parse_module("ENTRY e {\n ROOT p = f32[8] parameter(0)\n}")
    memory_budget.set_budget(4096)
    (arg,) = random_arguments(module)
    assert arg.shape == (8,)


def test_the_evaluator_refuses_results_over_the_budget():
    module = parse_module(
        """
    ENTRY e {
      p = bf16[] parameter(0)
      ROOT b = bf16[1200000,1000000] broadcast(p), dimensions={}
    }"""
    )
    memory_budget.set_budget(2**30)
    with pytest.raises(Exception, match=r"broadcast 'b'.*needs 2.18 TiB.*--memory-budget"):
        evaluate_module(
            module, [np.asarray(1, np.float32).astype(module.entry.parameters[0].shape.numpy_dtype)]
        )
