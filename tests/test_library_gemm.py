"""GEMM fusions as library calls end to end: compiler, artefact, the runtime's choice, heron-run.

A fusion whose computation is a canonical dot of two parameters (with a bias
over n and a RELU at most) becomes a library call carrying heron's GEMM
kernel as its fallback; any other dot fusion stays a kernel. The interpreter
device offers no library by default (heron's kernel runs, the records say
``gemm``) and offers numpy's GEMM with ``libraries=("gemm",)`` (the library
call runs, recorded and replayed in command buffers too, the records say
``numpy``); both give XLA's numbers within the accumulation bound. heron-run
reports the choice in its text and JSON reports.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from heron.compiler import Target
from heron.compiler.executable import compile_program
from heron.hlo.npz_io import save_inputs
from heron.hlo.parser import parse_module
from heron.runtime.core.artefact import load
from heron.runtime.core.executor import load_executable
from heron.runtime.core.heron_run import main as heron_run
from heron.runtime.core.thunks import KernelThunk, LibraryCallThunk, walk
from heron.runtime.interpreter import InterpreterDevice

DENSE_RELU = """
HloModule dense
ENTRY main {
  x = f32[16,32]{1,0} parameter(0)
  w = f32[32,24]{1,0} parameter(1)
  b = f32[24]{0} parameter(2)
  d = f32[16,24]{1,0} dot(x, w), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  bb = f32[16,24]{1,0} broadcast(b), dimensions={1}
  s = f32[16,24]{1,0} add(d, bb)
  z = f32[] constant(0)
  zb = f32[16,24]{1,0} broadcast(z), dimensions={}
  ROOT r = f32[16,24]{1,0} maximum(s, zb)
}
"""

DENSE_EXP = DENSE_RELU.replace("maximum(s, zb)", "exponential(s)").replace(
    "  z = f32[] constant(0)\n  zb = f32[16,24]{1,0} broadcast(z), dimensions={}\n", ""
)


@pytest.fixture(scope="module")
def compiled():
    return compile_program(parse_module(DENSE_RELU), Target.preset("h100"), ("interpreter",))


def _inputs():
    rng = np.random.default_rng(7)
    return [
        rng.standard_normal((16, 32)).astype(np.float32),
        rng.standard_normal((32, 24)).astype(np.float32),
        rng.standard_normal(24).astype(np.float32),
    ]


def _expected(inputs):
    x, w, b = (a.astype(np.float64) for a in inputs)
    return np.maximum(x @ w + b, 0)


def test_a_dense_relu_fusion_is_a_library_call_with_heron_s_kernel_beside_it(compiled):
    (call,) = [t for t in walk(compiled.artefact.program) if isinstance(t, LibraryCallThunk)]
    assert (call.library, call.operation, call.fallback_emitter) == ("blas", "gemm", "gemm")
    attributes = dict(call.attributes)
    assert {k: attributes[k] for k in ("batch", "m", "n", "k", "bias", "activation")} == {
        "batch": 1,
        "m": 16,
        "n": 24,
        "k": 32,
        "bias": True,
        "activation": "relu",
    }
    (launch,) = call.fallback
    assert isinstance(launch, KernelThunk) and launch.arguments == call.arguments
    assert [a.size for a in call.arguments] == [16 * 32 * 4, 32 * 24 * 4, 24 * 4, 16 * 24 * 4]


def test_other_dot_fusions_stay_kernels():
    other = compile_program(parse_module(DENSE_EXP), Target.preset("h100"), ("interpreter",))
    kinds = [t.kind for t in walk(other.artefact.program)]
    assert "library_call" not in kinds and "kernel" in kinds


@pytest.mark.parametrize("libraries", [(), ("gemm",)])
@pytest.mark.parametrize("command_buffers", [False, True])
def test_the_interpreter_runs_the_kernel_or_its_numpy_library(compiled, libraries, command_buffers):
    device = InterpreterDevice(libraries=libraries)
    executable = load_executable(
        compiled.artefact, device, command_buffers=command_buffers, min_graph_size=1
    )
    (choice,) = executable.library_choices
    library = bool(libraries)
    assert (choice.chosen, choice.library) == (("numpy", True) if library else ("gemm", False))
    assert choice.call == "gemm f32[16x32] x f32[32x24] -> f32, bias, relu"
    inputs = _inputs()
    for _ in range(2):  # with command buffers: recorded, then replayed
        (out,) = executable.run(inputs)
        np.testing.assert_allclose(out, _expected(inputs), rtol=1e-5, atol=1e-5)
    assert device.library_calls == (2 if library else 0)
    assert executable.stats.kernel_launches == (0 if library else 1)
    emitters = {r.emitter for r in executable.stats.records if r.emitter}
    assert emitters == ({"numpy"} if library else {"gemm"})


def test_heron_run_says_which_it_chose(compiled, tmp_path, capsys):
    path = tmp_path / "dense.heron"
    compiled.artefact.save(path)
    assert load(path).program == compiled.artefact.program  # the fallback survives the file
    inputs = tmp_path / "inputs.npz"
    save_inputs(inputs, _inputs())
    report = tmp_path / "report.json"
    code = heron_run(
        [
            str(path),
            "--inputs",
            str(inputs),
            "--backend",
            "interpreter",
            "--report-json",
            str(report),
        ]
    )
    assert code == 0
    text = capsys.readouterr().out
    assert (
        "library call 0: gemm f32[16x32] x f32[32x24] -> f32, bias, relu: gemm (heron kernel"
        in text
    )
    assert "[gemm]" in text
    written = json.loads(report.read_text())
    assert written["library_calls"] == [
        {
            "path": "0",
            "call": "gemm f32[16x32] x f32[32x24] -> f32, bias, relu",
            "chosen": "gemm",
            "library": False,
        }
    ]
    (thunk,) = [t for t in written["runs"][0]["thunks"] if t["kind"] == "kernel"]
    assert thunk["emitter"] == "gemm"
