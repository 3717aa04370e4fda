"""The corpus's sort programs run end to end on the interpreter and equal XLA:CPU bitwise.

``programs/`` (sort, argsort, sort_int32_axis0, and top_k, which heron's passes
decompose into a sort and slices) through the program path: the HLO pipeline,
outlining (a sort becomes a fusion of its own), kernels compiled for the
interpreter and run as an executable (``heron.compiler.program_run``, as heron run).
The installed emitters plus this tree's sort emitter compile them, so the
check does not depend on the environment's entry points being current.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import heron.plugins.sort as sort_plugin
from heron.compiler import compile_fusion
from heron.compiler.program_run import run_program
from heron.emitters.registry import EmitterRegistry
from heron.emitters.selection import default_registry
from heron.hlo.npz_io import load_inputs, load_outputs
from heron.hlo.parser import parse_module_file
from heron.runtime.interpreter.device import InterpreterDevice

PROGRAMS = Path(__file__).resolve().parents[3] / "programs"


def _registry() -> EmitterRegistry:
    installed = [(spec, None) for spec in default_registry().specs if spec.name != "sort"]
    return EmitterRegistry([*installed, *((s, None) for s in sort_plugin.heron_emitter_specs())])


@pytest.mark.parametrize("name", ["sort", "argsort", "sort_int32_axis0", "top_k"])
@pytest.mark.parametrize("warp", [32, 64])
def test_the_sort_program_equals_xla_cpu(name, warp):
    registry = _registry()
    module = parse_module_file(PROGRAMS / name / "module.hlo")
    parameters = module.entry.parameters
    arguments = load_inputs(
        PROGRAMS / name / "inputs.npz", [p.shape for p in parameters], [p.name for p in parameters]
    )
    run = run_program(
        module,
        arguments,
        InterpreterDevice(warp_size=warp),
        "interpreter",
        compiler=lambda fusion, target, backend: compile_fusion(
            fusion, target, backend, emitters=registry
        ),
    )
    assert "sort" in [k.emitter for k in run.kernels]
    expected = load_outputs(PROGRAMS / name / "outputs.npz")
    assert len(run.outputs) == len(expected)
    for got, want in zip(run.outputs, expected, strict=True):
        got, want = np.asarray(got), np.asarray(want)
        assert got.dtype == want.dtype and got.shape == want.shape
        assert np.array_equal(got.view(np.uint8), want.view(np.uint8))
