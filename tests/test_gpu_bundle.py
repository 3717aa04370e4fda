"""The GPU bundle (gpu_bundle/, issue 27): a small bundle built and run on the interpreter.

`nox -s gpu-bundle` builds and dry-runs the whole bundle; these tests build a few
cases for the h100 Target only (seconds, not minutes) and check what run.py
reports: every correctness case passing, the scatter program's order-dependent
kernel named and its deterministic compile without one, speed cases skipped
with the reason, the watchdog stopping a case that does not answer, and the
wheel installer keeping what a machine has while installing what it lacks.
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]
BUNDLE_SOURCE = ROOT / "gpu_bundle"


def _module(name: str):
    spec = importlib.util.spec_from_file_location(name, BUNDLE_SOURCE / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def bundle(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("bundle") / "gpu-bundle"
    command = [sys.executable, str(BUNDLE_SOURCE / "build.py"), str(out), "--targets", "h100"]
    command += ["--programs", "softmax", "embedding_scatter_add_grad", "cond"]
    command += ["--fusions", "gpu/reduce_row/epilogue.hlo", "--workloads", "gelu_bf16"]
    command += ["--cudnn-attention", "backward_grouped"]
    command += ["--no-wheels", "--jobs", "2", "--cache", str(out.parent / "cache")]
    subprocess.run(command, check=True, cwd=ROOT)
    return out


def _run(bundle: Path, out: Path, *extra: str) -> tuple[int, dict]:
    command = [sys.executable, str(bundle / "run.py"), "--out", str(out)]
    command += ["--backend", "interpreter", "--no-install", *extra]
    done = subprocess.run(command, capture_output=True, text=True, cwd=out.parent)
    return done.returncode, json.loads((out / "report.json").read_text())


def test_the_bundle_runs_on_the_interpreter_and_every_correctness_case_passes(bundle, tmp_path):
    manifest = json.loads((bundle / "bundle.json").read_text())
    names = [c["name"] for c in manifest["cases"]]
    assert names == [
        "program/softmax",
        "program/embedding_scatter_add_grad",
        "program/embedding_scatter_add_grad[deterministic]",
        "program/cond",
        "speed/program/cond",
        "fusion/gpu/reduce_row/epilogue.hlo",
        "cudnn_attention/backward_grouped",
        "workload/gelu_bf16",
        "speed/gelu_bf16",
    ]
    assert all(set(c["artefacts"]) == {"h100"} for c in manifest["cases"])
    assert (
        manifest["peaks"]["h200"]["memory_bandwidth"]
        > manifest["peaks"]["h100"]["memory_bandwidth"]
    )
    code, report = _run(bundle, tmp_path / "out")
    assert code == 0, report
    cases = {c["name"]: c for c in report["cases"]}
    correctness = [c for c in report["cases"] if c["kind"] == "correctness"]
    assert len(correctness) == 7 and all(c["status"] == "pass" for c in correctness), correctness
    assert report["finished"] is True and report["device"]["backend"] == "interpreter"
    # The scatter's float atomics are named; the deterministic compile has none.
    plain = cases["program/embedding_scatter_add_grad"]["details"]
    assert plain["order_dependent_kernels"], plain
    deterministic = cases["program/embedding_scatter_add_grad[deterministic]"]["details"]
    assert deterministic["order_dependent_kernels"] == []
    assert deterministic["repeats"] == "identical"
    softmax = cases["program/softmax"]["details"]
    assert softmax["xla_cpu"]["ok"] and softmax["interpreter"]["identical_outputs"] == "1/1"
    assert softmax["command_buffers_recorded"] >= 1
    # Per-kernel times are measured (timing is opt-in in the executor: every one read 0.000
    # ms in the first H200 report).
    timed = [k for k in softmax["kernels"] if k["kind"] == "kernel"]
    assert timed and all(k["seconds"] > 0 for k in timed), softmax["kernels"]
    assert cases["fusion/gpu/reduce_row/epilogue.hlo"]["details"]["interpreter"]["identical"]
    speed = [c for c in report["cases"] if c["kind"] == "speed"]
    assert {c["name"] for c in speed} == {
        "speed/gelu_bf16",
        "speed/gelu_bf16[torch.compile]",
        "speed/program/cond",
    }
    assert all(c["status"] == "skipped" and "need a GPU" in c["reason"] for c in speed)
    markdown = (tmp_path / "out" / "report.md").read_text()
    assert "| program/softmax | pass |" in markdown
    assert "| program/cond | skipped |" in markdown  # the speed table's row
    assert "launch and host overhead dominate" in markdown


def test_a_case_that_does_not_answer_is_stopped_and_the_rest_go_on(bundle, tmp_path):
    code, report = _run(bundle, tmp_path / "out", "--only", "program/*", "--case-timeout", "0.001")
    assert code == 1
    statuses = [(c["name"], c["status"]) for c in report["cases"]]
    assert len(statuses) == 4 and all(s == "error" for _, s in statuses), statuses
    assert all("watchdog" in c["reason"] for c in report["cases"])


def test_a_cut_budget_skips_the_rest_and_still_reports(bundle, tmp_path):
    code, report = _run(bundle, tmp_path / "out", "--budget", "0")
    assert code == 0
    assert report["finished"] and all(c["status"] == "skipped" for c in report["cases"])
    assert all(c["reason"].startswith("budget") for c in report["cases"])


def _wheel(folder: Path, dist: str, version: str) -> Path:
    module = dist.replace("-", "_")
    path = folder / f"{module}-{version}-py3-none-any.whl"
    info = f"{module}-{version}.dist-info"
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr(f"{module}/__init__.py", f"VERSION = {version!r}\n")
        archive.writestr(
            f"{info}/METADATA", f"Metadata-Version: 2.1\nName: {dist}\nVersion: {version}\n"
        )
        archive.writestr(
            f"{info}/WHEEL", "Wheel-Version: 1.0\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
        )
        archive.writestr(f"{info}/RECORD", "")
    return path


def test_wheels_install_beside_what_is_installed_never_over_it(tmp_path, monkeypatch):
    run = _module("run")
    (tmp_path / "wheels").mkdir()
    _wheel(tmp_path / "wheels", "heron-bundle-probe", "1.0")
    _wheel(tmp_path / "wheels", "numpy", "1.0")
    monkeypatch.setattr(run, "HERE", tmp_path)
    tag = f"cp{sys.version_info.major}{sys.version_info.minor}"
    manifest = {
        "wheels": [
            {
                "file": "wheels/heron_bundle_probe-1.0-py3-none-any.whl",
                "dist": "heron-bundle-probe",
                "version": "1.0",
                "python": None,
                "minimum": "1.0",
                "exact": True,
            },
            {
                "file": "wheels/numpy-1.0-py3-none-any.whl",
                "dist": "numpy",
                "version": "1.0",
                "python": None,
                "minimum": "1.0",
                "exact": False,
            },
            {
                "file": "wheels/other.whl",
                "dist": "not-for-this-python",
                "version": "1",
                "python": "cp10" if tag != "cp10" else "cp9",
                "minimum": "1",
                "exact": False,
            },
        ]
    }
    lines = {line["dist"]: line for line in run.install(manifest, tmp_path / "site")}
    assert lines["heron-bundle-probe"]["action"].startswith("installed from the bundle")
    assert (tmp_path / "site" / "heron_bundle_probe" / "__init__.py").exists()
    assert lines["numpy"]["action"] == "kept the installed one"
    assert not (tmp_path / "site" / "numpy").exists()
    assert lines["not-for-this-python"]["action"].startswith("MISSING")


def test_comparisons_follow_the_corpus_rule():
    compare = _module("bundle_compare")
    import ml_dtypes

    want = np.array([1.0, 2.0, 4.0], np.float32)
    eps = float(np.finfo(np.float32).eps)
    assert compare.compare(want.copy(), want)["identical"]
    close = compare.compare(want + np.float32(8 * eps * 4), want)
    assert close["ok"] and not close["identical"] and close["identical_elements"] == 0
    assert not compare.compare(want + np.float32(32 * eps * 4), want)["ok"]
    assert compare.compare(want + np.float32(32 * eps * 4), want, ulps=64)["ok"]
    bf16 = want.astype(ml_dtypes.bfloat16)
    assert compare.compare(bf16, bf16)["ok"]
    ints = np.array([1, 2, 3], np.int32)
    assert not compare.compare(ints + np.array([0, 0, 1], np.int32), ints)["ok"]
    summary = compare.compare_all([want, ints], [want, ints + 1])
    assert summary["identical_outputs"] == "1/2" and not summary["ok"] and "out1" in summary["why"]
    assert compare.relative_error(np.array([1, 5], np.int32), np.array([1, 4], np.int32)) == 0.5
    # Complex numbers: each part a float of the component type (an FFT sums in its order).
    spectrum = (np.arange(4) - 1j * np.arange(4)).astype(np.complex64)
    nudged = spectrum + np.complex64(1j * 8 * eps * 3)
    close = compare.compare(nudged, spectrum)
    assert close["ok"] and close["identical_elements"] == 0 and close["error_eps"] == 8.0
    assert not compare.compare(spectrum + np.complex64(1), spectrum)["ok"]


def test_speed_inputs_come_from_a_seed_and_tile_one_random_block():
    workloads = _module("bundle_workloads")
    gelu = workloads.BY_NAME["gelu_bf16"]
    first = workloads.make_inputs(gelu.small, 7)
    assert [a.shape for a in first] == [(64, 256)] and str(first[0].dtype) == "bfloat16"
    assert np.array_equal(first[0], workloads.make_inputs(gelu.small, 7)[0])
    big = workloads.make_inputs((workloads.Arg((3 * workloads.BLOCK,)),), 1)[0]
    assert np.array_equal(big[: workloads.BLOCK], big[workloads.BLOCK : 2 * workloads.BLOCK])
    # Every workload has a GPU size whose roofline is >= 0.2 ms on an H200 (4.8 TB/s,
    # ~790 TFLOP/s bf16, ~67 f32), but the loop of 1000 steps (launch-bound) and sort and
    # top-k (compare-bound: bytes and multiply-adds say nothing of them).
    for w in workloads.WORKLOADS:
        peak = 790e12 if any(a.dtype == "bfloat16" for a in w.gpu) else 67e12
        seconds = max(w.bytes_moved(w.gpu) / 4.8e12, w.flops(w.gpu) / peak)
        assert seconds >= 0.2e-3 or w.name in ("fori_loop", "sort", "top_k"), w.name


# -- the speed cases' autotuning step (bundle_autotune) -----------------------------------------


def test_autotuning_is_skipped_on_the_interpreter_with_the_reason(bundle, tmp_path):
    code, report = _run(bundle, tmp_path / "out", "--only", "speed/*")
    assert code == 0, report
    cases = {c["name"]: c for c in report["cases"]}
    step = cases["speed/gelu_bf16"]["details"]["autotune"]
    assert step == {
        "status": "skipped",
        "reason": "autotuning times cuBLASLt's algorithms on a CUDA device; this run's backend"
        " is interpreter",
    }
    assert cases["speed/gelu_bf16"]["status"] == "skipped"  # the case's own reason stands
    assert "need a GPU" in cases["speed/gelu_bf16"]["reason"]
    assert "autotune" not in (cases["speed/gelu_bf16[torch.compile]"].get("details") or {})
    markdown = (tmp_path / "out" / "report.md").read_text()
    assert "## GEMM autotuning" in markdown
    assert (
        "- program/cond, gelu_bf16: autotuning times cuBLASLt's algorithms on a CUDA device"
        in markdown
    )
    code, report = _run(bundle, tmp_path / "off", "--only", "speed/gelu_bf16", "--no-autotune")
    assert code == 0
    assert report["cases"][0]["details"]["autotune"]["reason"] == "--no-autotune"


def _test_module(name: str, relative: str):
    """A module of the CUDA runtime's tests (its stand-ins), loaded by path: the bundle's
    step is checked on the very stand-ins that check ``autotune_gemms``."""
    spec = importlib.util.spec_from_file_location(name, ROOT / relative)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def stand_in_cuda():
    """A factory of CUDA devices over the timed stand-in driver (``TimedCuda``), their
    GEMMs through the stand-in cuBLASLt (``FakeCublasLt``: three candidates a call shape,
    each taking ``cost_ms(algo)`` on the driver's event clock); (device, cuBLASLt)."""
    pytest.importorskip("nvmath", reason="the cuBLASLt stand-in borrows nvmath-python's enums")
    fakes = _test_module("runtime_cuda_conftest", "packages/runtime-cuda/tests/conftest.py")
    timed = _test_module("runtime_cuda_autotune", "packages/runtime-cuda/tests/test_autotune.py")
    return lambda **stand_in: timed.stand_in_device(fakes.FakeCublasLt, **stand_in)


def _cuda_worker(device):
    """The bundle's worker on ``device`` without opening one (its handlers need no more)."""
    worker_module = _module("bundle_worker")
    worker = object.__new__(worker_module.Worker)
    worker.device, worker.backend, worker.speed_run = device, "cuda", None
    return worker_module, worker


def _speed_run(worker, artefact, name="speed/gemm"):
    """What the speed handler keeps of its untuned run: timed by the worker's own timing."""
    autotune = _module("bundle_autotune")
    rng = np.random.default_rng(1)
    inputs = [
        rng.standard_normal((2, 3, 5)).astype(np.float32),
        rng.standard_normal((2, 5, 4)).astype(np.float32),
        rng.standard_normal(4).astype(np.float32),
    ]
    outputs, times = worker._heron_times(artefact, inputs)
    return autotune.SpeedRun(name, artefact, inputs, outputs, times, 0.01)


def gemm_artefact_call():
    """The call of ``heron_test_support.gemm_artefact``'s artefact (its one GEMM)."""
    from heron_test_support.gemm_artefact import CALL

    return CALL


def test_the_step_tunes_times_and_compares_on_the_stand_ins(stand_in_cuda, tmp_path):
    from heron_test_support.gemm_artefact import gemm_artefact

    # candidate n (its first byte n + 1) takes 4 - (n + 1) ms: the heuristic's first 3 ms,
    # candidate 2 (the last) 1 ms
    device, lt = stand_in_cuda(cost_ms=lambda algo: 4.0 - algo[0])
    _, worker = _cuda_worker(device)
    worker.speed_run = _speed_run(worker, gemm_artefact())
    candidates = device.library("gemm").candidates(gemm_artefact_call())
    assert {m["algo"] for m in lt.matmuls} == {candidates[0]}  # untuned: the heuristic's
    step = worker.autotune({"name": "speed/gemm"}, 60.0)
    assert step["status"] == "measured", step
    assert worker.speed_run is None  # given up: the next case's inputs replace it
    (call,) = step["calls"]
    assert call["path"] == "0" and call["candidates"] == 3 and call["chosen"] == 2
    assert call["chosen_s"] == pytest.approx(1e-3) and call["heuristic_first_s"] == 3e-3
    assert call["untuned_algorithm"] == "heuristic's first of 3 candidates"
    assert call["tuned_algorithm"].startswith("tuned algorithm (fastest of 3")
    assert call["line"].endswith("candidate 2 of 3, 1000.0 us, heuristic's first 3000.0 us")
    # timed the same way: the stand-in clock's device time per run, 3 ms then 1 ms
    assert step["untuned"]["device_s"] == pytest.approx(3e-3)
    assert step["tuned"]["device_s"] == pytest.approx(1e-3)
    assert step["untuned_over_tuned"]["device"] == pytest.approx(3.0)
    assert step["tuned"]["throughput_s"] > 0 and step["untuned_over_tuned"]["throughput"] > 0
    assert step["outputs"]["agree"] and step["outputs"]["distances"] == [0.0]
    assert step["outputs"]["bound"] > 0 and step["autotune_s"] > 0
    assert lt.matmuls[-1]["algo"] == candidates[2]  # the tuned run ran the tuned algorithm
    # report.md: the speed table's cell and the section's row and call line
    run = _module("run")
    case = {"name": "speed/gemm", "kind": "speed", "mode": "speed", "workload": "gemm"}
    case |= {"status": "pass", "details": {"heron": step["untuned"], "autotune": step}}
    document = {"budget_s": 1, "elapsed_s": 1, "finished": True, "summary": {}, "cases": [case]}
    markdown = run.render_markdown(document)
    assert f"| {run._ms(step['tuned']['throughput_s'])} (" in markdown
    assert "(3.00x) | yes (0 / " in markdown
    assert "| 0: 2 of 3, 1000.0 us vs 3000.0 us |" in markdown
    assert "(untuned: heuristic's first of 3 candidates; tuned: tuned algorithm" in markdown


def test_the_step_says_why_it_did_not_tune(stand_in_cuda):
    from heron_test_support.fake_cuda import FakeCuda
    from heron_test_support.gemm_artefact import gemm_artefact

    from heron.runtime.core.device import DeviceError
    from heron.runtime.cuda.device import CudaDevice

    autotune = _module("bundle_autotune")
    device, _ = stand_in_cuda()
    worker_module, worker = _cuda_worker(device)
    run = _speed_run(worker, gemm_artefact())

    def time_run(tuned):
        return worker._heron_times(tuned, run.inputs)

    # no GEMM library call: nothing to tune
    plain = gemm_artefact()
    kernel_only = type(plain)(
        target=plain.target,
        program=list(plain.program[0].fallback),
        allocations=plain.allocations,
        signature=plain.signature,
        kernels=plain.kernels,
    )
    nothing = autotune.SpeedRun("x", kernel_only, run.inputs, run.outputs, run.times, 0.01)
    step = autotune.measure(nothing, device, time_run, time.monotonic() + 60, 1e-3)
    assert step == {"status": "skipped", "reason": "the artefact has no GEMM library calls"}

    # no cuBLASLt on the device: autotune_gemms's reason
    def missing(device):
        raise DeviceError("cuBLASLt needs nvmath-python (not installed)")

    bare = CudaDevice(bindings=FakeCuda(), libraries={"gemm": missing})
    step = autotune.measure(run, bare, time_run, time.monotonic() + 60, 1e-3)
    assert step["status"] == "skipped" and "(not installed)" in step["reason"]
    # the deadline passed during tuning: the tuned copy is not timed (the watchdog would
    # lose the case's answer), the calls tuned so far are reported
    step = autotune.measure(run, device, time_run, time.monotonic() - 1, 1e-3)
    assert step["status"] == "skipped" and step["reason"].startswith("budget: ")
    assert step["calls"][0]["chosen"] is not None and "tuned" not in step

    # the tuned run raising is the step's error, never the case's
    def broken(tuned):
        raise RuntimeError("launch failed")

    step = autotune.measure(run, device, broken, time.monotonic() + 60, 1e-3)
    assert step["status"] == "error" and "RuntimeError: launch failed" in step["reason"]
    # the interpreter's worker refuses the step with its reason
    worker.backend = "interpreter"
    with pytest.raises(worker_module._Skip, match="on a CUDA device; this worker's backend is"):
        worker.autotune({"name": "x"}, 60.0)


def test_tuned_outputs_beyond_the_contract_are_a_problem_not_a_failure(stand_in_cuda):
    from heron_test_support.gemm_artefact import gemm_artefact

    from heron.runtime.core.gemm import agreement_tolerance

    autotune = _module("bundle_autotune")
    device, _ = stand_in_cuda(cost_ms=lambda algo: 4.0 - algo[0])
    _, worker = _cuda_worker(device)
    run = _speed_run(worker, gemm_artefact())
    bound = agreement_tolerance(gemm_artefact_call())

    def off_by(amount):
        def time_run(tuned):
            outputs, times = worker._heron_times(tuned, run.inputs)
            return [o + np.float32(amount) for o in outputs], times

        return time_run

    scale = 1 + float(np.max(np.abs(run.outputs[0])))
    step = autotune.measure(run, device, off_by(bound * scale / 2), time.monotonic() + 60, 0)
    assert step["status"] == "measured" and step["outputs"]["agree"], step["outputs"]
    step = autotune.measure(run, device, off_by(bound * scale * 4), time.monotonic() + 60, 0)
    assert step["status"] == "measured" and not step["outputs"]["agree"]
    assert step["problem"].startswith("the tuned artefact's outputs differ from the untuned")
    assert step["outputs"]["distances"][0] == pytest.approx(4 * bound, rel=1e-3)
    # NaNs, integers, shapes
    f = np.array([1.0, np.nan], np.float32)
    assert autotune.agreement([f], [f.copy()], 0.0, 0)["agree"]
    assert not autotune.agreement([np.array([1.0, 2.0], np.float32)], [f], 1.0, 0)["agree"]
    ints = np.arange(1000, dtype=np.int32)
    one_off = ints.copy()
    one_off[0] = 7
    assert not autotune.agreement([one_off], [ints], 0.0, 1e-2)["agree"]  # integer GEMM: exact
    assert autotune.agreement([one_off], [ints], 1e-3, 1e-2)["agree"]  # ties of float top-k
    assert not autotune.agreement([ints[:3]], [ints], 1.0, 0)["agree"]
    # report.md lists the problem; the case's status is what the speed case said
    run_module = _module("run")
    case = {"name": "speed/gemm", "kind": "speed", "mode": "speed", "workload": "gemm"}
    case |= {"status": "pass", "details": {"heron": step["untuned"], "autotune": step}}
    document = {"budget_s": 1, "elapsed_s": 1, "finished": True, "summary": {}, "cases": [case]}
    markdown = run_module.render_markdown(document)
    assert "OUTPUTS DIFFER" in markdown and "| NO (" in markdown
    assert "Autotuning problems (the cases' statuses stand):" in markdown
    assert "## Failures and errors" not in markdown


class _SilentWorker:
    """A worker that never answers (a hung autotuning): what the watchdog stops."""

    def __init__(self) -> None:
        self.sent: list[dict] = []
        self.stopped = False

    def send(self, request: dict) -> None:
        self.sent.append(request)

    def answer(self, timeout: float):
        raise TimeoutError

    def stop(self) -> None:
        self.stopped = True


def test_a_hung_autotuning_step_is_its_own_error_and_the_case_stands(tmp_path):
    import argparse

    run = _module("run")
    report = run.Report(tmp_path, {"budget_s": 100, "device": {"backend": "cuda"}})
    entry = {"name": "speed/matmul_bf16", "kind": "speed", "mode": "speed"}
    entry |= {"status": "pass", "reason": "", "details": {"heron": {"throughput_s": 1e-3}}}
    report.add(entry)
    args = argparse.Namespace(no_autotune=False, case_timeout=None, backend="auto")
    worker = _SilentWorker()
    started = time.monotonic()
    after = run._autotune_step(entry, {"name": entry["name"]}, worker, report, args, 100, started)
    assert after is None and worker.stopped  # the next case starts a fresh worker
    (request,) = worker.sent
    assert request["mode"] == "autotune" and 0 < request["seconds"] < run.CASE_TIMEOUTS["autotune"]
    assert entry["status"] == "pass"
    assert entry["details"]["autotune"]["status"] == "error"
    assert entry["details"]["autotune"]["reason"].startswith("watchdog: no answer in")
    written = json.loads((tmp_path / "report.json").read_text())
    assert written["cases"][0]["details"]["autotune"]["status"] == "error"
    assert written["summary"] == {"speed": {"pass": 1}}
    # too little of the speed phase left: skipped before asking, with the reason
    worker = _SilentWorker()
    entry["details"].pop("autotune")
    assert run._autotune_step(entry, {}, worker, report, args, 5, started) is worker
    assert not worker.sent and entry["details"]["autotune"]["reason"].startswith("budget: ")
    assert run.autotune_skip({"status": "error", "reason": "watchdog"}, "cuda", 100).startswith(
        "heron's artefact was not timed (the speed case is error: watchdog)"
    )


def test_a_workload_s_flops_are_rated_against_the_unit_its_dots_run_on():
    build = _module("build")
    dot = """HloModule m
ENTRY main {{
  a = {a}[8,16]{{1,0}} parameter(0)
  b = {b}[16,4]{{1,0}} parameter(1)
  {prologue}
  ROOT d = f32[8,4]{{1,0}} dot({lhs}, {rhs}), lhs_contracting_dims={{1}},
    rhs_contracting_dims={{0}}{extra}
}}"""
    plain = {"prologue": "", "lhs": "a", "rhs": "b", "extra": ""}
    assert build._flops_unit(dot.format(a="f32", b="f32", **plain)) == "tf32"
    highest = {**plain, "extra": ", operand_precision={highest,highest}"}
    assert build._flops_unit(dot.format(a="f32", b="f32", **highest)) == "fp32"
    assert build._flops_unit(dot.format(a="bf16", b="bf16", **plain)) == "mma"
    scaled = {
        "prologue": "wa = f32[8,16]{1,0} convert(a)\n  s = f32[] parameter(2)\n"
        "  sa = f32[8,16]{1,0} broadcast(s), dimensions={}\n"
        "  xa = f32[8,16]{1,0} multiply(wa, sa)\n  wb = f32[16,4]{1,0} convert(b)",
        "lhs": "xa",
        "rhs": "wb",
        "extra": "",
    }
    assert build._flops_unit(dot.format(a="f8e4m3fn", b="f8e4m3fn", **scaled)) == "fp8"
    peaks = build._peaks()["h100"]
    assert peaks["tf32_flops"] * 2 == peaks["mma_flops"] == peaks["fp8_flops"] / 2


def test_a_bundle_for_one_python_has_room_for_the_cudnn_frontend(tmp_path, monkeypatch):
    """``--pythons 312``: binary wheels for one version only, so that the optional wheels
    (cuda-bindings, cuda-core, the cuDNN frontend) fit where three versions' would not."""
    build = _module("build")
    sizes = {"nvmath": 5.3, "cuda-python": 0.01, "cuda-pathfinder": 0.06, "cuda-bindings": 7.2}
    sizes |= {"cuda-core": 6.3, "nvidia-cudnn-frontend": 11.1}

    def fake_download(requirement, python, into):
        name = requirement.split("==")[0]
        size = sizes["nvmath" if name == "nvmath-python" else name]
        wheel = into / f"{name.replace('-', '_')}-{python or 'py3'}.whl"
        wheel.write_bytes(b"\0" * int(size * 2**20))
        return wheel

    monkeypatch.setattr(build, "_download", fake_download)
    room = 31 * 2**20  # the 1-version set takes 30 MiB; three versions need more
    (tmp_path / "w1").mkdir()
    entries, left_out = build._third_party_wheels(tmp_path / "w1", tmp_path / "c1", room, ("312",))
    assert {e["dist"] for e in entries} >= {"nvidia-cudnn-frontend", "cuda-bindings"}
    assert all(e["python"] in (None, "cp312") for e in entries)
    (tmp_path / "w3").mkdir()
    entries, left_out = build._third_party_wheels(tmp_path / "w3", tmp_path / "c3", room)
    assert "nvidia-cudnn-frontend" not in {e["dist"] for e in entries}
    assert {e["python"] for e in entries if e["dist"] == "nvmath-python"} == {
        "cp311",
        "cp312",
        "cp313",
    }
    assert any("nvidia_cudnn_frontend" in line for line in left_out)


def test_a_speed_case_times_the_artefact_as_heron_jax_runs_it_on_device_arrays(bundle):
    """Issue 30's resident figure: the artefact through a ResidentRunner over jax's arrays
    (on the interpreter: jax's CPU arrays, read in place through DLPack), timed as jax is."""
    from heron.hlo.npz_io import load_inputs
    from heron.hlo.parser import parse_shape
    from heron.runtime.core.artefact import load
    from heron.runtime.interpreter import InterpreterDevice

    manifest = json.loads((bundle / "bundle.json").read_text())
    (case,) = [c for c in manifest["cases"] if c["name"] == "program/softmax"]
    artefact = load(bundle / case["artefacts"]["h100"])
    shapes = [parse_shape(text) for text in artefact.signature.parameters]
    inputs = list(load_inputs(bundle / case["inputs"], shapes))
    worker_module = _module("bundle_worker")
    worker = object.__new__(worker_module.Worker)
    worker.device, worker.backend = InterpreterDevice(), "interpreter"
    timed = worker._resident_times(artefact, inputs)
    assert timed["library"] == "jax" and timed["ways"] == ["dlpack"], timed
    assert timed["throughput_s"] > 0 and timed["batch_runs"] >= 3
    # what a call costs the host to issue, and where that goes, for the report
    assert 0 < timed["issue_s"] < 1
    functions = [entry["function"] for entry in timed["host_profile"]]
    assert len(functions) == 10 and all(entry["own_us"] >= 0 for entry in timed["host_profile"])
    run = _module("run")
    case = {"name": "speed/program/softmax", "kind": "speed", "mode": "speed"}
    case |= {"program": "softmax", "status": "pass", "details": {"resident": timed}}
    markdown = run.render_markdown(
        {"budget_s": 1, "elapsed_s": 1, "finished": True, "summary": {}, "cases": [case]}
    )
    assert "Host time of a resident call, by function" in markdown
    assert functions[0] in markdown


# -- the corpus programs' speed cases (issue 30) ------------------------------------------------


def test_the_control_flow_programs_built_get_a_speed_case_unless_told_otherwise():
    build = _module("build")
    assert build._program_speed_names(["softmax", "cond", "switch"], None) == ["cond", "switch"]
    every = build._program_speed_names(None, None)
    assert {"cond", "while_loop_collatz", "scan_rnn", "dropout_threefry"} <= set(every)
    assert "softmax" not in every
    assert build._program_speed_names(["cond"], ["none"]) == []
    assert build._program_speed_names(["cond"], ["softmax"]) == ["softmax"]
    with pytest.raises(SystemExit, match="not corpus programs: no_such_program"):
        build._program_speed_names(None, ["no_such_program"])


def test_a_program_speed_case_is_compiled_for_the_gpu_with_the_program_s_inputs(bundle):
    manifest = json.loads((bundle / "bundle.json").read_text())
    cases = {c["name"]: c for c in manifest["cases"]}
    speed, correctness = cases["speed/program/cond"], cases["program/cond"]
    assert speed["kind"] == "speed" and speed["group"] == "speed" and speed["program"] == "cond"
    assert speed["id"] == "speed-program-cond" and speed["inputs"] == correctness["inputs"]
    assert speed["flops"] == 0 and speed["flops_unit"] == "fp32" and speed["torch"] is False
    assert speed["bytes"] == 1 + 2 * 32 * 4  # cond(pred[], f32[32]) -> f32[32]
    assert set(speed["artefacts"]) == {"h100"} and "interpreter" not in speed  # no interp images
    assert (bundle / "bundle_programs.py").read_text() == (
        ROOT / "programs" / "definitions.py"
    ).read_text()


def _bundled_worker(bundle: Path):
    """The worker module as the bundle holds it (its ``bundle_programs`` beside it)."""
    spec = importlib.util.spec_from_file_location("bundle_worker", bundle / "bundle_worker.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["bundle_worker"] = module
    spec.loader.exec_module(module)
    return module


def test_a_program_speed_case_times_jax_on_the_program_s_own_function(bundle):
    """The speed handler's pieces for a program (the worker skips speed cases on the
    interpreter): its inputs from the bundle, jax.jit of the bundle's copy of its function
    giving the corpus's outputs, its rates from bytes alone; then the handler itself."""
    pytest.importorskip("jax")
    from heron.hlo.npz_io import load_outputs
    from heron.runtime.core.artefact import load
    from heron.runtime.interpreter import InterpreterDevice

    manifest = json.loads((bundle / "bundle.json").read_text())
    (case,) = [c for c in manifest["cases"] if c["name"] == "speed/program/cond"]
    worker_module = _bundled_worker(bundle)
    worker = object.__new__(worker_module.Worker)
    worker.bundle, worker.device, worker.backend = bundle, InterpreterDevice(), "interpreter"
    worker.peak = manifest["peaks"]["h100"]
    inputs = worker._speed_inputs(case, load(bundle / case["artefacts"]["h100"]))
    assert [a.dtype for a in inputs] == [np.dtype(np.bool_), np.dtype(np.float32)]
    outputs, timed = worker_module._jax_times(worker_module.speed_function(case), inputs)
    expected = load_outputs(ROOT / "programs" / "cond" / "outputs.npz")
    versus = _module("bundle_compare").compare_all(outputs, expected)
    assert versus["ok"], versus
    assert timed["single_s"] > 0 and timed["throughput_s"] > 0 and timed["batch_runs"] >= 3
    details = {"jax": timed}
    worker._rates(case, details)
    assert details["flops_unit"] == "fp32" and details["jax"]["gb_per_s"] > 0
    assert "tflop_per_s" not in details["jax"]
    # The whole handler, the interpreter standing in for the GPU, on the correctness case's
    # artefact (the speed case's has no interpreter images): heron, jax, resident, compared.
    worker.manifest, worker.target, worker.peak_name, worker.speed_run = manifest, "h100", "", None
    (correctness,) = [c for c in manifest["cases"] if c["name"] == "program/cond"]
    answer = worker.speed({**case, "artefacts": correctness["artefacts"]})
    assert answer["status"] == "pass", answer
    details = answer["details"]
    assert details["heron"]["throughput_s"] > 0 and details["jax"]["throughput_s"] > 0
    assert details["resident"]["library"] == "jax" and details["resident"]["throughput_s"] > 0
    assert details["error_vs_jax"] == [pytest.approx(0, abs=1e-6)]


def test_a_program_row_of_the_speed_table_gives_both_ratios():
    run = _module("run")
    times = {"heron": {"single_s": 2e-5, "throughput_s": 1e-5}}
    times["jax"] = {"single_s": 3e-5, "throughput_s": 1.2e-5}
    case = {"name": "speed/program/cond", "kind": "speed", "mode": "speed", "program": "cond"}
    case |= {"status": "pass", "details": times}
    document = {"budget_s": 1, "elapsed_s": 1, "finished": True, "summary": {}, "cases": [case]}
    markdown = run.render_markdown(document)
    assert "| program/cond | pass | 0.020 | 0.010 | 0.030 | 0.012 | - | 1.20 (single 1.50) |" in (
        markdown
    )
    assert run.PROGRAM_SPEED_NOTE in markdown
