"""The corpus's dot programs run end to end on the interpreter through the GEMM emitter.

``programs/`` (attention, batched matmul, int32 matmul, MLP blocks) through the
program path: the HLO pipeline (dots made canonical), outlining (each dot a
fusion of its own), kernels compiled for the interpreter with 32- and 64-lane
warps, run as an executable (``heron.compiler.program_run``, as heron run). The
installed emitters plus this tree's gemm emitter compile them, so the check
does not depend on the environment's entry points being current. Outputs equal
XLA:CPU's: integers bitwise, floats within tests/test_programs.py's bound
(16 eps x max|XLA:CPU| for f32, 2 for bf16), which XLA:CPU's own summation
order of the dots stays well within.
"""

from __future__ import annotations

from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

import heron.plugins.gemm as gemm_plugin
from heron.compiler import compile_fusion
from heron.compiler.program_run import run_program
from heron.emitters.registry import EmitterRegistry
from heron.emitters.selection import default_registry
from heron.hlo.npz_io import load_inputs, load_outputs
from heron.hlo.parser import parse_module_file
from heron.runtime.interpreter.device import InterpreterDevice

PROGRAMS = Path(__file__).resolve().parents[3] / "programs"
NAMES = [
    "attention",
    "attention_bf16",
    "attention_causal_multihead",
    "batched_matmul",
    "matmul_int32",
    "mlp_block_prenorm",
    "mlp_gelu",
    "mlp_gelu_exact",
    "mlp_relu",
    "mlp_silu_bf16",
]
ULPS = {np.dtype(np.float32): 16, np.dtype(ml_dtypes.bfloat16): 2, np.dtype(np.float16): 2}


def _registry() -> EmitterRegistry:
    installed = [(spec, None) for spec in default_registry().specs if spec.name != "gemm"]
    return EmitterRegistry([*installed, *((s, None) for s in gemm_plugin.heron_emitter_specs())])


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("warp", [32, 64])
def test_the_dot_program_equals_xla_cpu(name, warp):
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
    assert "gemm" in [k.emitter for k in run.kernels]
    expected = load_outputs(PROGRAMS / name / "outputs.npz")
    assert len(run.outputs) == len(expected)
    for got, want in zip(run.outputs, expected, strict=True):
        got, want = np.asarray(got), np.asarray(want)
        assert got.dtype == want.dtype and got.shape == want.shape
        if want.dtype not in ULPS:
            assert np.array_equal(got, want)
            continue
        g, w = got.astype(np.float64), want.astype(np.float64)
        bound = ULPS[want.dtype] * float(ml_dtypes.finfo(want.dtype).eps) * np.abs(w).max()
        assert np.abs(g - w).max() <= bound
