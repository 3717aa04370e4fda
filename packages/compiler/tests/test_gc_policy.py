"""A compile raises the collector's young and oldest thresholds while it runs and puts them
back."""

from __future__ import annotations

import gc

import pytest

from heron.compiler import Target
from heron.compiler.gc_policy import OLDEST_THRESHOLD, YOUNG_THRESHOLD, fewer_collections
from heron.hlo.parser import parse_module

PROGRAM = """
HloModule m, entry_computation_layout={(f32[64]{0})->f32[64]{0}}

ENTRY main {
  x = f32[64]{0} parameter(0)
  e = f32[64]{0} exponential(x)
  ROOT n = f32[64]{0} negate(e)
}
"""


RAISED = (YOUNG_THRESHOLD, 10, OLDEST_THRESHOLD)


@pytest.fixture
def default_thresholds():
    previous = gc.get_threshold()
    gc.set_threshold(700, 10, 10)
    yield
    gc.set_threshold(*previous)


def test_the_threshold_is_raised_inside_and_restored_after(default_thresholds):
    with fewer_collections():
        assert gc.get_threshold() == RAISED
        with fewer_collections():  # nested: the outer setting stands
            assert gc.get_threshold() == RAISED
        assert gc.get_threshold() == RAISED
    assert gc.get_threshold() == (700, 10, 10)


def test_the_threshold_comes_back_when_the_compile_fails(default_thresholds):
    with pytest.raises(RuntimeError), fewer_collections():
        raise RuntimeError("a failed compile")
    assert gc.get_threshold() == (700, 10, 10)


@pytest.mark.parametrize("threshold", [0, 100_000])
def test_a_process_s_own_choice_is_left_alone(threshold):
    previous = gc.get_threshold()
    gc.set_threshold(threshold, 10, 10)
    try:
        with fewer_collections():
            assert gc.get_threshold() == (threshold, 10, 10)
        assert gc.get_threshold() == (threshold, 10, 10)
    finally:
        gc.set_threshold(*previous)


def test_a_program_s_compile_runs_with_the_raised_threshold(default_thresholds, monkeypatch):
    import heron.compiler.executable as executable

    seen = []
    prepare = executable.prepare_module.__wrapped__  # undecorated: sees compile_program's

    def observed(*args, **kwargs):
        seen.append(gc.get_threshold())
        return prepare(*args, **kwargs)

    monkeypatch.setattr(executable, "prepare_module", observed)
    compiled = executable.compile_program(
        parse_module(PROGRAM), Target.preset("h100"), backends=("interpreter",)
    )
    assert compiled.program.kernels
    assert seen == [RAISED]
    assert gc.get_threshold() == (700, 10, 10)
