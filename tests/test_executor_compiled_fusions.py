"""The thunk executor runs kernels heron's compiler emitted, on views of shared allocations.

Two fusions compiled for the interpreter (the compiler is used here, in the
tests, only to make the images); the program, allocations and signature are
written by hand: the intermediate lives at a nonzero offset of a temp
allocation, so the second kernel reads a view, not a whole buffer. The
artefact goes through a file and heron-run, with and without command buffers.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from heron.compiler import Target, compile_fusion, fusions_of
from heron.hlo import parse_module
from heron.hlo.npz_io import load_outputs, save_inputs
from heron.runtime.core.artefact import (
    Allocation,
    Artefact,
    EntrySignature,
    KernelEntry,
)
from heron.runtime.core.executor import Executable
from heron.runtime.core.heron_run import main as heron_run
from heron.runtime.core.thunks import BufferSlice as S
from heron.runtime.core.thunks import KernelThunk
from heron.runtime.interpreter import InterpreterDevice

MODULE = """
HloModule chain

fused_add {
  a = f32[64]{0} parameter(0)
  b = f32[64]{0} parameter(1)
  ROOT r = f32[64]{0} add(a, b)
}

fused_square {
  a = f32[64]{0} parameter(0)
  ROOT r = f32[64]{0} multiply(a, a)
}

ENTRY main {
  p0 = f32[64]{0} parameter(0)
  p1 = f32[64]{0} parameter(1)
  sum = f32[64]{0} fusion(p0, p1), kind=kLoop, calls=fused_add
  ROOT square = f32[64]{0} fusion(sum), kind=kLoop, calls=fused_square
}
"""


@pytest.fixture(scope="module")
def chain() -> Artefact:
    target = Target.preset("h100")
    add, square = (
        compile_fusion(f, target, "interpreter") for f in fusions_of(parse_module(MODULE))
    )
    thunks = [
        KernelThunk(
            add.image.kernel_name,
            "sum",
            [S(0, 0, 256), S(1, 0, 256), S(2, 256, 256)],
            add.grid,
            add.block,
        ),
        KernelThunk(
            square.image.kernel_name,
            "square",
            [S(2, 256, 256), S(3, 0, 256)],
            square.grid,
            square.block,
        ),
    ]
    return Artefact(
        target=Target.preset("h100"),
        program=thunks,
        allocations=[
            Allocation(0, 256, "parameter", parameter=0),
            Allocation(1, 256, "parameter", parameter=1),
            Allocation(2, 512, "temp"),
            Allocation(3, 256, "output", output=0),
        ],
        signature=EntrySignature(["f32[64]{0}", "f32[64]{0}"], ["f32[64]{0}"]),
        kernels=[
            KernelEntry("interpreter", "sum", add.image),
            KernelEntry("interpreter", "square", square.image),
        ],
    )


def arguments() -> list[np.ndarray]:
    rng = np.random.default_rng(7)
    return [rng.standard_normal(64).astype(np.float32) for _ in range(2)]


@pytest.mark.parametrize("command_buffers", [False, True])
def test_compiled_kernels_on_views(chain, command_buffers):
    device = InterpreterDevice()
    executable = Executable(chain, device, command_buffers=command_buffers, min_graph_size=2)
    x, y = arguments()
    (result,) = executable.run([x, y])
    np.testing.assert_array_equal(result, (x + y) * (x + y))
    assert device.launches == executable.stats.kernel_launches == 2
    assert executable.peak_device_bytes == 256 * 3 + 512


def test_heron_run_on_the_saved_artefact(chain, tmp_path: Path, capsys):
    path, inputs = tmp_path / "chain.heron", tmp_path / "in.npz"
    chain.save(path)
    x, y = arguments()
    save_inputs(inputs, [x, y])
    outputs = {}
    for flag in ([], ["--no-command-buffers"]):
        output, report = tmp_path / f"out{len(flag)}.npz", tmp_path / f"r{len(flag)}.json"
        args = [str(path), "--inputs", str(inputs), "--output", str(output), "--repeat", "3"]
        assert heron_run([*args, "--report-json", str(report), *flag]) == 0
        outputs[len(flag)] = load_outputs(output)[0]
        data = json.loads(report.read_text())
        assert data["identical"] and data["totals"]["kernel_launches"] == 6
        assert data["peak_device_bytes"] == 1280
    capsys.readouterr()
    # Two kernels are fewer than XLA's five: no command buffer either way.
    assert outputs[0].tobytes() == outputs[1].tobytes()
    np.testing.assert_array_equal(outputs[0], (x + y) * (x + y))
