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
    command += ["--programs", "softmax", "embedding_scatter_add_grad"]
    command += ["--fusions", "gpu/reduce_row/epilogue.hlo", "--workloads", "gelu_bf16"]
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
        "fusion/gpu/reduce_row/epilogue.hlo",
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
    assert len(correctness) == 5 and all(c["status"] == "pass" for c in correctness), correctness
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
    assert cases["fusion/gpu/reduce_row/epilogue.hlo"]["details"]["interpreter"]["identical"]
    speed = [c for c in report["cases"] if c["kind"] == "speed"]
    assert {c["name"] for c in speed} == {"speed/gelu_bf16", "speed/gelu_bf16[torch.compile]"}
    assert all(c["status"] == "skipped" and "need a GPU" in c["reason"] for c in speed)
    markdown = (tmp_path / "out" / "report.md").read_text()
    assert "| program/softmax | pass |" in markdown


def test_a_case_that_does_not_answer_is_stopped_and_the_rest_go_on(bundle, tmp_path):
    code, report = _run(bundle, tmp_path / "out", "--only", "program/*", "--case-timeout", "0.001")
    assert code == 1
    statuses = [(c["name"], c["status"]) for c in report["cases"]]
    assert len(statuses) == 3 and all(s == "error" for _, s in statuses), statuses
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
