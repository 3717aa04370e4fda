"""Fixtures of hlo-ir tests: the buffer-assignment checks (both checkers, bit for bit), and
the simplification pipeline checked against the evaluator (bit for bit)."""

from __future__ import annotations

import numpy as np
import pytest

from heron.hlo.buffers import BufferAssignment, assign_buffers
from heron.hlo.buffers.check import overlapping_buffers, simulate
from heron.hlo.evaluator import evaluate_module, flatten_literal, random_arguments
from heron.hlo.ir import Literal, Module, structural_difference
from heron.hlo.parser import parse_module
from heron.hlo.passes import (
    copy_insertion,
    pass_named,
    run_pipeline,
    scheduler,
    simplification_pipeline,
)
from heron.hlo.passes.manager import pipeline_of
from heron.hlo.printer import print_module

_REGISTERING = (copy_insertion, scheduler)

#: An alignment no real device has, so tests do not pass only because sizes happen to line up.
ALIGNMENT = 48


def leaf_bytes(value: Literal) -> list[bytes]:
    return [np.ascontiguousarray(leaf).tobytes() for leaf in flatten_literal(value)]


def prepare(module: Module) -> None:
    """Copy insertion, then the scheduler, verifying after each (as the compiler runs them)."""
    run_pipeline(module, pipeline_of([pass_named("copy-insertion"), pass_named("scheduler")]))
    assert module.header["is_scheduled"] is True


def check_module(module: Module, seed: int = 0) -> BufferAssignment:
    """Assign ``module`` (already optimized as wanted) and run both checkers on it."""
    reference = parse_module(print_module(module))
    arguments = random_arguments(reference, np.random.default_rng(seed))
    expected = evaluate_module(reference, arguments)
    prepare(module)
    # What the passes leave prints and reads back (control predecessors, is_scheduled).
    # (A corpus file's synthesised entry prints as a real one: only that may differ.)
    reread = parse_module(print_module(module))
    reread.fusion_under_test = module.fusion_under_test
    assert structural_difference(reread, module) is None
    assignment = assign_buffers(module, alignment=ALIGNMENT)
    assert overlapping_buffers(assignment) == [], assignment.listing()
    for allocation in assignment.allocations:
        for chunk in allocation.chunks.values():
            assert chunk.end <= allocation.size
            if allocation.kind == "temp":
                assert chunk.offset % ALIGNMENT == 0
    # The scheduled module computes the same, through the evaluator and through the bytes.
    assert leaf_bytes(evaluate_module(module, arguments)) == leaf_bytes(expected)
    simulated = simulate(assignment, arguments)
    assert leaf_bytes(simulated) == leaf_bytes(expected), (
        print_module(module) + "\n" + assignment.listing()
    )
    return assignment


@pytest.fixture
def check_buffers():
    """``check_buffers(module, seed=0)``: prepare, assign and check ``module``."""
    return check_module


@pytest.fixture
def prepare_buffers():
    """``prepare_buffers(module)``: copy insertion and the scheduler."""
    return prepare


def simplify_checked(module: Module, seed: int = 0) -> Module:
    """``module`` after the simplification pipeline; its results on random arguments are
    the original's bit for bit."""
    original = parse_module(print_module(module))
    arguments = random_arguments(original, np.random.default_rng(seed))
    run_pipeline(module, simplification_pipeline())
    before, after = evaluate_module(original, arguments), evaluate_module(module, arguments)
    assert leaf_bytes(before) == leaf_bytes(after), print_module(module)
    return module


@pytest.fixture
def simplified():
    """``simplified(module, seed=0)``: the simplification pipeline, checked bit for bit."""
    return simplify_checked
