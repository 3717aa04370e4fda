"""``heron run`` on device backends: auto selection, the interpreter, unfused modules, --check.

The interpreter is always available, so these run everywhere; CUDA and ROCm
are not usable on CI (no GPU, no driver), which the
auto-selection and --backend cuda tests rely on through the registry's own
availability reasons rather than through hard-coded text.
"""

from __future__ import annotations

from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

from heron.cli.main import main
from heron.harness.agreement import compare
from heron.harness.tolerance import OutputTolerance
from heron.hlo.evaluator import evaluate_module, flatten_literal, random_arguments
from heron.hlo.npz_io import load_outputs, save_inputs
from heron.hlo.parser import parse_module

ROOT = Path(__file__).resolve().parents[1]

#: A JAX-style module: no fusions, elementwise ops, broadcasts of a vector and a
#: scalar constant, a tuple root.
UNFUSED = """\
HloModule jit_f

ENTRY main.10 {
  Arg_0.1 = f32[4,32]{1,0} parameter(0)
  Arg_1.2 = f32[32]{0} parameter(1)
  broadcast.3 = f32[4,32]{1,0} broadcast(Arg_1.2), dimensions={1}
  add.4 = f32[4,32]{1,0} add(Arg_0.1, broadcast.3)
  constant.5 = f32[] constant(0.5)
  broadcast.6 = f32[4,32]{1,0} broadcast(constant.5), dimensions={}
  multiply.7 = f32[4,32]{1,0} multiply(add.4, broadcast.6)
  subtract.8 = f32[4,32]{1,0} subtract(multiply.7, Arg_0.1)
  maximum.9 = f32[4,32]{1,0} maximum(subtract.8, broadcast.6)
  ROOT tuple.10 = (f32[4,32]{1,0}, f32[4,32]{1,0}) tuple(maximum.9, add.4)
}
"""

WITH_CONVOLUTION = """\
HloModule jit_conv

ENTRY main {
  a = f32[2,8,2]{2,1,0} parameter(0)
  w = f32[3,2,4]{2,1,0} parameter(1)
  ROOT conv.3 = f32[1,6,4]{2,1,0} convolution(a, w), window={size=3}, dim_labels=b0f_0io->b0f,
    batch_group_count=2
}
"""

WITH_CHOLESKY = """\
HloModule jit_cholesky

ENTRY main {
  a = f32[2,4,4]{2,1,0} parameter(0)
  ROOT cholesky.3 = f32[2,4,4]{2,1,0} cholesky(a), lower=true
}
"""


def heron(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def small_gelu() -> str:
    """examples/gelu.hlo (the seeds' GELU) at bf16[2,4,128]: the same module, fewer elements."""
    text = (ROOT / "examples" / "gelu.hlo").read_text()
    assert "bf16[6,512,4096] parameter(0)" in text
    return text.replace("6,512,4096", "2,4,128")


def _availability(name: str) -> str:
    from heron.runtime.core.registry import load_backends

    status = load_backends().availability(name)
    assert not status.available, f"{name} is available here; these tests expect it is not"
    return status.reason


def test_gelu_runs_on_the_interpreter_and_agrees_with_the_reference(hlo, capsys, tmp_path):
    output = tmp_path / "out.npz"
    path = hlo(small_gelu(), "gelu.hlo")
    code, out, err = heron(
        capsys, "run", path, "--backend", "interpreter", "--output", str(output), "--check"
    )
    assert (code, err) == (0, ""), out
    assert "backend interpreter" in out and "device: heron interpreter" in out
    kernel_line = next(line for line in out.splitlines() if line.startswith("  fusion  "))
    assert "emitter loop" in kernel_line and "grid " in kernel_line and "block " in kernel_line
    assert "compile " in kernel_line and "run " in kernel_line
    assert "out0  bf16[2,4,128]" in out
    assert "agree: every output within the tolerance" in out
    (y,) = load_outputs(output)
    module = parse_module(small_gelu())
    (x,) = random_arguments(module, seed=0)
    reference = (
        0.5
        * x.astype(np.float64)
        * (1 + np.tanh(0.79785 * (x.astype(np.float64) + 0.044708 * x.astype(np.float64) ** 3)))
    )
    assert y.dtype == ml_dtypes.bfloat16
    assert np.max(np.abs(y.astype(np.float64) - reference)) < 2.0**-5


def test_unfused_module_runs_fusion_by_fusion(hlo, capsys, tmp_path):
    output = tmp_path / "out.npz"
    code, out, err = heron(
        capsys, "run", hlo(UNFUSED), "--backend", "interpreter", "--seed", "4", "--output",
        str(output),
    )  # fmt: skip
    assert (code, err) == (0, ""), out
    kernels = [line.split()[0] for line in out.split("kernels:\n")[1].split("outputs:")[0]
               .splitlines()]  # fmt: skip
    # The GPU pipeline fuses the chain into one loop kernel with two outputs
    # (add.4 is an output and an operand of the rest).
    assert kernels == ["loop_add_fusion"]
    assert "ran 1 kernel(s)" in out
    module = parse_module(UNFUSED)
    expected = flatten_literal(evaluate_module(module, random_arguments(module, seed=4)))
    results = load_outputs(output)
    assert len(results) == 2
    for actual, reference in zip(results, expected, strict=True):
        assert np.array_equal(actual, reference)


def test_a_missing_inputs_file_is_named_with_the_command(hlo, capsys, tmp_path):
    # issue 31: the message lacked the "heron run:" every other error of the command has
    missing = tmp_path / "missing.npz"
    code, out, err = heron(capsys, "run", hlo(CHAIN), "--inputs", str(missing))
    assert code == 2
    assert err.strip() == (
        f"heron run: error: cannot read inputs file {missing}: No such file or directory"
    )


def test_inputs_and_outputs_round_trip_on_the_interpreter(hlo, capsys, tmp_path):
    x = np.linspace(-1, 1, 128, dtype=np.float32).reshape(4, 32)
    v = np.arange(32, dtype=np.float32) / 8
    inputs, output = tmp_path / "in.npz", tmp_path / "out.npz"
    save_inputs(inputs, [x, v])
    code, out, err = heron(
        capsys, "run", hlo(UNFUSED), "--backend", "interpreter", "--inputs", str(inputs),
        "--output", str(output),
    )  # fmt: skip
    assert (code, err) == (0, ""), out
    assert f"parameters (from {inputs}):" in out
    first, second = load_outputs(output)
    added = x + v[None, :]
    assert np.array_equal(second, added)
    assert np.array_equal(first, np.maximum(added * np.float32(0.5) - x, np.float32(0.5)))


def test_auto_says_it_chose_the_interpreter_and_why_not_the_gpus(hlo, capsys):
    code, out, err = heron(capsys, "run", hlo(UNFUSED), "--backend", "auto")
    assert (code, err) == (0, ""), out
    assert "backend interpreter" in out
    assert "auto chose interpreter; not taken:" in out
    assert f"  cuda: {_availability('cuda')}" in out
    assert f"  rocm: {_availability('rocm')}" in out
    # auto is the default, and it never picks the test fixture's 'example' backend.
    code, default_out, _ = heron(capsys, "run", hlo(UNFUSED))
    assert code == 0 and "auto chose interpreter" in default_out
    assert "example" not in default_out


def test_cuda_without_a_gpu_exits_nonzero_with_the_reason(hlo, capsys):
    code, out, err = heron(capsys, "run", hlo(UNFUSED), "--backend", "cuda")
    assert code != 0 and out == ""
    assert "backend 'cuda' is not available here" in err
    assert _availability("cuda") in err


def test_a_batch_grouped_convolution_runs_and_agrees(hlo, capsys):
    # A grouped convolution's weight gradient: lowered to im2col and one dot.
    path = hlo(WITH_CONVOLUTION)
    code, out, err = heron(capsys, "run", path, "--backend", "interpreter", "--check")
    assert (code, err) == (0, ""), out
    assert "check against the reference evaluator" in out


def test_an_unsupported_instruction_is_refused_by_name(hlo, capsys):
    code, out, err = heron(capsys, "run", hlo(WITH_CHOLESKY), "--backend", "interpreter")
    assert code == 2
    assert "'cholesky.3' (cholesky, f32[2,4,4]" in err
    assert "no heron emitter handles cholesky" in err
    assert "Traceback" not in err


def test_check_reports_agreement_per_output(hlo, capsys):
    code, out, err = heron(capsys, "run", hlo(UNFUSED), "--backend", "interpreter", "--check")
    assert (code, err) == (0, ""), out
    check = out.split("check against the reference evaluator")[1]
    assert "  out0  max 0 ulp, max |difference| 0" in check
    assert "  out1  max 0 ulp, max |difference| 0" in check


def test_check_with_the_reference_backend_is_refused(hlo, capsys):
    code, _, err = heron(capsys, "run", hlo(UNFUSED), "--backend", "reference", "--check")
    assert code == 2 and "--check compares a device backend" in err


# -- the comparison itself ------------------------------------------------------------------


def test_compare_counts_ulps_with_the_harness_and_zeros_agree():
    one = np.float32(1)
    a = np.array([one, np.float32(-0.0), np.nan, -np.float32(1e-45)], np.float32)
    b = np.array([np.nextafter(one, np.float32(2)), 0.0, np.nan, np.float32(1e-45)], np.float32)
    result = compare(a, b, OutputTolerance(ulps=2))
    assert result.agrees and result.summary.startswith("max 2 ulp,")  # across zero: 2 steps
    assert not compare(a, b).agrees  # the default is bitwise
    assert compare(np.array([-0.0]), np.array([0.0])).summary.startswith("max 0 ulp,")
    nan = compare(np.array([np.nan], np.float32), np.array([1.0], np.float32))
    assert not nan.agrees and nan.summary.startswith("max inf ulp,")


@pytest.mark.parametrize("dtype", [np.float32, ml_dtypes.bfloat16, np.float16])
def test_compare_tolerates_the_ulps_it_is_given_and_not_more(dtype):
    base = np.linspace(0.5, 4, 16).astype(dtype)
    unsigned = np.uint16 if base.dtype.itemsize == 2 else np.uint32

    def ulps_up(k: int) -> np.ndarray:
        return (base.view(unsigned) + unsigned(k)).view(base.dtype)

    four = OutputTolerance(ulps=4)
    assert compare(ulps_up(4), base, four).agrees
    assert "max 4 ulp" in compare(ulps_up(4), base, four).summary
    assert not compare(ulps_up(4), base).agrees  # bitwise by default
    bumped = ulps_up(64)  # beyond 4 ulps of the largest value too (the norm-wise bound)
    assert compare(base.copy(), base).agrees
    assert not compare(bumped, base, four).agrees
    result = compare(bumped, base, four)
    assert (
        "outside the tolerance, first at (0,)" in result.summary and "(64 ulps)" in result.summary
    )


def test_compare_is_exact_for_integers_and_preds():
    a = np.arange(10, dtype=np.int32)
    b = a.copy()
    assert compare(a, b).summary == "identical"
    b[3] += 1
    result = compare(a, b)
    assert not result.agrees and "1 of 10 elements differ" in result.summary
    assert not compare(np.array([True, False]), np.array([True, True])).agrees
    assert not compare(a.astype(np.int64), a).agrees  # a type mismatch never agrees


def test_jax_helper_calls_are_inlined_and_run(capsys, tmp_path):
    """jnp.where, clip and remainder arrive as calls; heron run inlines them (issue 15)."""
    path = Path(__file__).parent / "data" / "jax_helper_calls.hlo"
    output = tmp_path / "out.npz"
    code, out, err = heron(
        capsys, "run", str(path), "--backend", "interpreter", "--seed", "2", "--check",
        "--output", str(output),
    )  # fmt: skip
    assert (code, err) == (0, ""), out
    assert "(allowed: bitwise)" in out and "agree" in out
    module = parse_module(path.read_text())
    expected = flatten_literal(evaluate_module(module, random_arguments(module, seed=2)))
    (result,) = load_outputs(output)
    assert np.array_equal(result, expected[0])
    # The helpers were inlined (nothing runs as a call) and fused: as many
    # kernels as the GPU pipeline leaves, fewer than computing instructions.
    from heron.compiler import Target
    from heron.compiler.fusion import count_kernels, gpu_pipeline
    from heron.hlo.passes import HOST_OPCODES, run_pipeline

    computing = [i for i in module.entry.instructions if i.opcode not in HOST_OPCODES]
    run_pipeline(module, gpu_pipeline(Target.preset("h100")))
    assert all(i.opcode != "call" for i in module.entry.instructions)
    assert count_kernels(module) < len(computing)
    assert f"ran {count_kernels(module)} kernel(s)" in out


def test_an_xla_dump_folder_runs_its_pre_optimization_module(tmp_path, capsys):
    dump = tmp_path / "dump"
    dump.mkdir()
    (dump / "module_0000.jit_broadcast_in_dim.before_optimizations.txt").write_text(UNFUSED)
    (dump / "module_0004.jit__lambda.before_optimizations.txt").write_text(UNFUSED)
    (dump / "module_0004.jit__lambda.cpu_after_optimizations.txt").write_text("not read")
    code, out, err = heron(capsys, "run", str(dump), "--backend", "interpreter")
    assert code == 2 and "holds 2 modules" in err and "module_0004.jit__lambda" in err
    code, out, err = heron(
        capsys, "run", str(dump), "--backend", "interpreter", "--module", "jit__lambda"
    )
    assert (code, err) == (0, ""), err
    assert "outputs:" in out


# -- the executable path: loops, conditionals, command buffers, repeats -------------------

PROGRAMS = ROOT / "programs"

#: Five loop fusions in a chain, as XLA prints a fused module (kept as they are):
#: heron's executor records them in one command buffer (XLA's minimum graph size
#: is 5), and the first and last share a kernel (the same body and shapes).
CHAIN = """\
HloModule chain

neg1 {
  p = f32[64]{0} parameter(0)
  ROOT r = f32[64]{0} negate(p)
}

abs2 {
  p = f32[64]{0} parameter(0)
  ROOT r = f32[64]{0} abs(p)
}

twice3 {
  p = f32[64]{0} parameter(0)
  ROOT r = f32[64]{0} add(p, p)
}

square4 {
  p = f32[64]{0} parameter(0)
  ROOT r = f32[64]{0} multiply(p, p)
}

neg5 {
  p = f32[64]{0} parameter(0)
  ROOT r = f32[64]{0} negate(p)
}

ENTRY main {
  x = f32[64]{0} parameter(0)
  a = f32[64]{0} fusion(x), kind=kLoop, calls=neg1
  b = f32[64]{0} fusion(a), kind=kLoop, calls=abs2
  c = f32[64]{0} fusion(b), kind=kLoop, calls=twice3
  d = f32[64]{0} fusion(c), kind=kLoop, calls=square4
  ROOT e = f32[64]{0} fusion(d), kind=kLoop, calls=neg5
}
"""


def _kernel_lines(out: str) -> list[str]:
    return out.split("kernels:\n")[1].split("outputs:")[0].splitlines()


def _program_run(capsys, tmp_path, name: str, *extra: str) -> tuple[str, list[np.ndarray]]:
    """``heron run programs/NAME --inputs its inputs --check``: the report and the results."""
    output = tmp_path / "out.npz"
    code, out, err = heron(
        capsys, "run", str(PROGRAMS / name / "module.hlo"), "--backend", "interpreter",
        "--inputs", str(PROGRAMS / name / "inputs.npz"), "--output", str(output), "--check",
        *extra,
    )  # fmt: skip
    assert (code, err) == (0, ""), out
    assert "agree: every output within the tolerance" in out
    return out, load_outputs(output)


def test_a_while_loop_runs_as_an_executable_and_equals_xla(capsys, tmp_path):
    """Collatz steps in a while loop of unknown trip count: the sequential runner refused it.
    By default the loop is a conditional node of the program's one command buffer
    (issue 30); driven from the host, the body's kernels launch once per iteration."""
    expected = load_outputs(PROGRAMS / "while_loop_collatz" / "outputs.npz")  # XLA:CPU's
    out, results = _program_run(capsys, tmp_path, "while_loop_collatz")
    assert all(np.array_equal(a, e) for a, e in zip(results, expected, strict=True))
    assert "program: 1 top-level thunks, 1 command buffers" in out
    assert all("run in command buffer 0" in line for line in _kernel_lines(out))
    out, results = _program_run(capsys, tmp_path, "while_loop_collatz", "--no-command-buffers")
    assert all(np.array_equal(a, e) for a, e in zip(results, expected, strict=True))
    lines = _kernel_lines(out)
    looped = [line for line in lines if " launches)" in line]
    assert looped, lines  # the body's kernels ran once per iteration
    launches = int(out.split("ran ")[1].split(" kernel(s)")[0])
    assert launches > len(lines)


def test_a_conditional_runs_only_the_branch_it_takes(capsys, tmp_path):
    # switch: an s32-indexed conditional of three branches (cond's two cheap branches
    # became a select: the conditional simplifier).
    # Driven from the host (by default it is IF nodes of one command buffer: issue 30).
    out, results = _program_run(capsys, tmp_path, "switch", "--no-command-buffers")
    expected = load_outputs(PROGRAMS / "switch" / "outputs.npz")
    for actual, reference in zip(results, expected, strict=True):
        assert np.allclose(actual, reference, rtol=1e-6, atol=1e-6)
    lines = _kernel_lines(out)
    assert sum("(not launched)" in line for line in lines) == 2, lines  # the other branches


def test_kernels_in_a_command_buffer_are_timed_with_it(hlo, capsys):
    """A kernel replayed in a command buffer has no device time of its own (a GPU graph
    replays as one launch): its line says where it ran; --no-command-buffers times it."""
    path = hlo(CHAIN)
    code, out, err = heron(capsys, "run", path, "--backend", "interpreter", "--check")
    assert (code, err) == (0, ""), out
    lines = _kernel_lines(out)
    assert [line.split()[0] for line in lines] == ["a", "b", "c", "d"]  # e shares a's kernel
    assert all("run in command buffer 0" in line for line in lines)
    assert "shared by 2 fusions" in lines[0]
    assert "program: 1 top-level thunks, 1 command buffers" in out
    assert "  command buffer 0  command buffer of 5 thunks (kernel 5)  recorded, replayed" in out
    assert "ran 5 kernel(s)" in out and "agree" in out
    code, out, err = heron(capsys, "run", path, "--backend", "interpreter", "--no-command-buffers")
    assert (code, err) == (0, ""), out
    lines = _kernel_lines(out)
    assert all(" run 0." in line and "command buffer" not in line for line in lines), lines
    assert "(2 launches; shared by 2 fusions)" in lines[0]
    assert "0 command buffers (command buffers off)" in out


def test_repeat_and_report_json_on_an_hlo_file(hlo, capsys, tmp_path):
    import json

    report = tmp_path / "report.json"
    code, out, err = heron(
        capsys, "run", hlo(CHAIN), "--backend", "interpreter", "--repeat", "3",
        "--report-json", str(report),
    )  # fmt: skip
    assert (code, err) == (0, ""), out
    assert "results identical across the 3 runs: yes" in out
    document = json.loads(report.read_text())
    assert document["backend"] == "interpreter" and len(document["runs"]) == 3
    recorded = [run["command_buffers"]["recorded"] for run in document["runs"]]
    replayed = [run["command_buffers"]["replayed"] for run in document["runs"]]
    assert (recorded, replayed) == ([1, 0, 0], [1, 1, 1])  # recorded once, replayed after
    assert document["peak_device_bytes"] == document["allocation_bytes"] > 0
    code, _, err = heron(capsys, "run", hlo(CHAIN), "--backend", "interpreter", "--repeat", "0")
    assert code == 2 and "--repeat must be at least 1" in err
    code, _, err = heron(capsys, "run", hlo(CHAIN), "--backend", "reference", "--repeat", "2")
    assert code == 2 and "--repeat applies to a device backend" in err


def test_repeated_runs_that_differ_exit_1(hlo, capsys, monkeypatch):
    from heron.runtime.core.executor import Executable

    original = Executable.run
    calls = []

    def drifting(self, inputs):
        results = original(self, inputs)
        calls.append(1)
        if len(calls) == 2:  # the second run's first element one ulp off
            first = results[0].copy()
            first.reshape(-1)[0] = np.nextafter(first.reshape(-1)[0], np.float32(np.inf))
            results = (first, *results[1:])
        return results

    monkeypatch.setattr(Executable, "run", drifting)
    code, out, _ = heron(capsys, "run", hlo(CHAIN), "--backend", "interpreter", "--repeat", "2")
    assert code == 1, out
    assert "run 2: results differ from run 1's" in out and "DISAGREE" in out
