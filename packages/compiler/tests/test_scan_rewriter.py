"""The scan rewriter: cumulative reduce-windows in log depth, as XLA:GPU's (issue 29).

jax's cumsum, cumprod, cummax and their reversed forms are reduce-windows as long
as their dimension; computed as written each output reduces its own window
(O(n^2)). After the rewrite every reduce-window is at most 16 long; the results
equal the evaluator's (bit for bit for integers and max, within the reassociation
bounds for float sums and products), compiled and run on the interpreter too, and
``heron run --check`` accepts the regrouped sum.
"""

from __future__ import annotations

import copy

import numpy as np
import pytest

from heron.compiler import Target
from heron.compiler.fusion import gpu_pipeline
from heron.compiler.scan_rewriter import SCAN_BASE_LENGTH, rewrite_scans, scan_of
from heron.hlo.evaluator import evaluate_module
from heron.hlo.parser import parse_module
from heron.hlo.passes import run_pipeline
from heron.hlo.passes.pipelines import simplification_pipeline
from heron.hlo.verifier import verify_module

H100 = Target.preset("h100")
INITS = {"add": "0", "maximum": "-inf", "multiply": "1", "minimum": "2147483647"}


def _scan(op: str, element: str, shape: str, window: str, pad: str):
    return parse_module(
        f"""
HloModule scan
reducer {{
  a = {element}[] parameter(0)
  b = {element}[] parameter(1)
  ROOT r = {element}[] {op}(a, b)
}}
ENTRY main {{
  x = {element}{shape} parameter(0)
  init = {element}[] constant({INITS[op]})
  ROOT w = {element}{shape} reduce-window(x, init),
    window={{size={window} pad={pad}}}, to_apply=reducer
}}
"""
    )


def _input(element: str, shape: str, op: str, seed: int = 0) -> np.ndarray:
    dims = tuple(int(v) for v in shape.strip("[]").split(","))
    rng = np.random.default_rng(seed)
    if element == "s32":
        return rng.integers(-1000, 1000, dims).astype(np.int32)
    if op == "multiply":
        return (1 + 0.05 * rng.standard_normal(dims)).astype(np.float32)
    return rng.standard_normal(dims).astype(np.float32)


#: op, element type, shape, window, padding (a forward scan pads low, a reversed one high)
SCANS = [
    ("add", "f32", "[8,300]", "1x300", "0_0x299_0"),
    ("add", "f32", "[8,300]", "1x300", "0_0x0_299"),
    ("maximum", "f32", "[300,5]", "300x1", "299_0x0_0"),
    ("add", "s32", "[1000]", "1000", "999_0"),
    ("minimum", "s32", "[3,70,2]", "1x70x1", "0_0x0_69x0_0"),
    ("multiply", "f32", "[4,37]", "1x37", "0_0x0_36"),
]


@pytest.mark.parametrize("case", SCANS, ids=lambda case: "-".join(case[:3]) + case[4][-3:])
def test_a_long_scan_becomes_short_ones_with_the_same_result(case):
    op, element, shape, window, pad = case
    module = _scan(op, element, shape, window, pad)
    work = copy.deepcopy(module)
    run_pipeline(work, simplification_pipeline())
    assert rewrite_scans(work)
    verify_module(work)
    windows = [i for i in work.entry.instructions if i.opcode == "reduce-window"]
    assert len(windows) >= 2
    assert all(max(d.size for d in w.attr("window").dims) <= SCAN_BASE_LENGTH for w in windows)
    x = _input(element, shape, op)
    want = np.asarray(evaluate_module(module, [x]))
    got = np.asarray(evaluate_module(work, [x]))
    if element == "s32" or op in ("maximum", "minimum"):
        assert got.tobytes() == want.tobytes()
    else:
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize("case", SCANS[::2], ids=lambda case: "-".join(case[:3]))
def test_the_rewritten_scan_runs_on_the_interpreter(case):
    from heron.compiler.program_run import run_program
    from heron.runtime.core.registry import load_backends

    op, element, shape, window, pad = case
    module = _scan(op, element, shape, window, pad)
    x = _input(element, shape, op, seed=1)
    device = load_backends().create_device("interpreter")
    run = run_program(module, [x], device, "interpreter", target=H100)
    want = np.asarray(evaluate_module(module, [x]))
    np.testing.assert_allclose(run.outputs[0], want, rtol=1e-5, atol=1e-4)


def test_short_scans_and_other_windows_stay():
    assert scan_of(_scan("add", "f32", "[4,16]", "1x16", "0_0x15_0").entry.root) is None
    assert scan_of(_scan("add", "f32", "[4,64]", "1x8", "0_0x7_0").entry.root) is None  # a window
    assert scan_of(_scan("add", "f32", "[64]", "64", "32_31").entry.root) is None  # centred
    assert scan_of(_scan("add", "f32", "[64]", "64", "63_0").entry.root) == (0, False, "add")


def test_a_row_cumsum_of_4096_by_4096_is_a_few_kernels_not_a_quadratic_one():
    # issue 29: heron summed each window (4096 adds per element, 21 ms); XLA: 4 kernels
    from heron.compiler.fusion import count_kernels

    module = _scan("add", "f32", "[4096,4096]", "1x4096", "0_0x4095_0")
    run_pipeline(module, gpu_pipeline(H100))
    windows = [i for i in module.instructions() if i.opcode == "reduce-window"]
    assert all(max(d.size for d in w.attr("window").dims) <= SCAN_BASE_LENGTH for w in windows)
    assert count_kernels(module) <= 6


def test_heron_run_check_accepts_the_regrouped_cumsum(capsys):
    from pathlib import Path

    from heron.cli.main import main

    program = Path(__file__).resolve().parents[3] / "programs" / "cumsum"
    code = main(
        [
            "--quiet",
            "run",
            str(program / "module.hlo"),
            "--inputs",
            str(program / "inputs.npz"),
            "--backend",
            "interpreter",
            "--check",
        ]
    )
    out = capsys.readouterr().out
    assert code == 0 and "(allowed: reassociation bounds)" in out and "agree" in out
