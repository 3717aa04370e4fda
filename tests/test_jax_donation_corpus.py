"""Donation over the program corpus: every argument donated (``donate_argnums`` of all of
them), each of the 41 programs where jax can alias a result with an argument compiles with
its ``input_output_alias``, gives jax's results, and leaves the caller's arrays as they were.

The corpus's programs are jax functions (programs/definitions.py); jax lowers each with
donation, so the module heron compiles holds the alias (copy insertion, buffer assignment
and the runner honour it: docs/buffers.md, docs/runtime.md). Donated numpy arguments are
copied into buffers the results then own, so the caller's arrays must be unchanged; a
second call must give the same bytes (the interpreter repeats itself; result buffers come
back from the pool).
"""

from __future__ import annotations

import importlib.util
import sys
import warnings
from pathlib import Path

import jax
import numpy as np
import pytest
from heron_test_support.jax_config import jax_x64
from heron_test_support.programs import assert_close

import heron.jax as heron_jax

ROOT = Path(__file__).resolve().parents[1]


def _definitions():
    spec = importlib.util.spec_from_file_location(
        "_heron_donation_definitions", ROOT / "programs" / "definitions.py"
    )
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def _donating(programs) -> list[str]:
    """The programs whose lowering with every argument donated has an input_output_alias
    (jax aliases a result with an argument of its shape and type)."""
    names = []
    with jax_x64(False), warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "Some donated buffers were not usable"
        for program in programs:
            arguments = program.arguments()
            traced = jax.jit(
                program.function, donate_argnums=tuple(range(len(arguments))), keep_unused=True
            ).trace(*arguments)
            text = traced.lower(lowering_platforms=("cpu",)).compiler_ir("hlo").as_hlo_text()
            if "input_output_alias" in text.splitlines()[0]:
                names.append(program.name)
    return names


BY_NAME = {program.name: program for program in _definitions().PROGRAMS}
DONATING = _donating(BY_NAME.values())


def _leaves(tree) -> list[np.ndarray]:
    return [np.asarray(leaf) for leaf in jax.tree_util.tree_leaves(tree)]


@pytest.fixture(autouse=True)
def jax_32_bit():
    """The corpus is lowered with jax's default 32-bit types."""
    with jax_x64(False):
        yield


def test_the_corpus_has_programs_to_donate():
    assert len(DONATING) >= 40, DONATING


@pytest.mark.filterwarnings("ignore:Some donated buffers were not usable")
@pytest.mark.parametrize("name", DONATING)
def test_a_program_with_every_argument_donated_equals_jax(name: str) -> None:
    program = BY_NAME[name]
    arguments = program.arguments()
    before = [leaf.copy() for leaf in _leaves(arguments)]
    jitted = heron_jax.jit(
        program.function,
        backend="interpreter",
        cache_dir=False,
        donate_argnums=tuple(range(len(arguments))),
    )
    got = _leaves(jitted(*arguments))
    expected = _leaves(jax.jit(program.function)(*arguments))
    assert len(got) == len(expected)
    for i, (g, e) in enumerate(zip(got, expected, strict=True)):
        assert_close(g, e, f"{name} leaf {i}")
    allocations = jitted.artefact(*arguments).allocations
    assert any(a.parameter is not None and a.output is not None for a in allocations)
    for k, (kept, now) in enumerate(zip(before, _leaves(arguments), strict=True)):
        assert kept.tobytes() == now.tobytes(), f"{name}: argument leaf {k} was written"
    again = _leaves(jitted(*arguments))
    assert [a.tobytes() for a in again] == [g.tobytes() for g in got]
