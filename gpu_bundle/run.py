"""heron's GPU bundle: one command that uses a GPU window fully (docs/gpu.md).

    python build/gpu-bundle/run.py --out DIR [--backend auto|cuda|rocm|interpreter]
                                   [--budget SECONDS] [--only GLOB ...] [--case-timeout S]
                                   [--no-autotune]

1. Installs the bundle's wheels with ``pip install --no-index --no-deps --target
   DIR/site`` (a folder of its own, put on the worker's ``sys.path``), skipping
   every distribution the machine already has at a compatible version: nothing
   installed is replaced, nothing is fetched.
2. Starts a worker process (``bundle_worker.py``) that opens the device once,
   then sends it the cases one at a time: correctness (every corpus program, the
   small XLA-corpus fusions, the workloads at their small size), then speed
   (heron beside ``jax.jit``, with per-kernel device times: the workloads at their
   GPU size, the control-flow corpus programs on their own inputs; on CUDA each speed
   case whose artefact has GEMM library calls is then autotuned, its tuned copy
   timed the same way: ``bundle_autotune``), then ``torch.compile`` where torch
   is installed.
3. Writes ``DIR/report.json`` and ``DIR/report.md`` after every case, so a run
   cut short still reports what it did.

Each case has a watchdog: no answer within its timeout (or the budget's end)
and the worker is killed, the case reported as an error, and a fresh worker
takes the rest. The budget (install included) is shared out: correctness may
use half of it while speed cases wait, heron and jax speed cases up to 85%,
torch.compile the rest.

This file needs only the standard library (Python 3.11 to 3.13): it runs before
anything of the bundle is installed.
"""

from __future__ import annotations

import argparse
import fnmatch
import json
import os
import platform
import queue
import shutil
import signal
import subprocess
import sys
import threading
import time
import zipfile
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
#: Seconds a case may take before the watchdog stops it, per mode.
CASE_TIMEOUTS = {"correctness": 60.0, "speed": 120.0, "torch": 120.0, "autotune": 120.0}
#: A speed case's autotuning step is skipped when fewer seconds than this are left of the
#: speed phase: tuning a call shape takes a fraction of a second, timing the tuned copy
#: about as long as the untuned timing did; less than this would mostly be cut short.
AUTOTUNE_MIN_SECONDS = 10.0
#: Share of the budget (from the start, install included) each phase may run until,
#: when later phases have cases waiting.
PHASE_SHARE = {"correctness": 0.5, "speed": 0.85, "torch": 1.0}
#: Seconds the worker may take to start (imports, the device's context).
START_TIMEOUT = 90.0
#: report.md's line above the speed table when it has corpus programs' rows (issue 30).
PROGRAM_SPEED_NOTE = (
    "Rows `program/NAME` (cases `speed/program/NAME`) are corpus programs on their own small"
    " inputs: tens of microseconds each, where launch and host overhead dominate, so the single"
    " run's time matters as much as the throughput; their jax / heron cell gives both."
)


# -- installing the wheels -------------------------------------------------------------------


def _version_key(text: str) -> tuple:
    parts = []
    for piece in text.replace("-", ".").split("."):
        digits = "".join(c for c in piece if c.isdigit())
        parts.append(int(digits) if digits else 0)
        if not piece.isdigit():
            break
    return tuple(parts)


def _installed_version(dist: str) -> str | None:
    from importlib import metadata

    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


def install(manifest: dict[str, Any], site: Path) -> list[dict[str, Any]]:
    """Install what this Python lacks into ``site``; a line per wheel of the bundle."""
    tag = f"cp{sys.version_info.major}{sys.version_info.minor}"
    lines: list[dict[str, Any]] = []
    chosen: list[Path] = []
    for entry in manifest.get("wheels", []):
        if entry["python"] not in (None, tag):
            continue
        have = _installed_version(entry["dist"])
        line = {"dist": entry["dist"], "bundled": entry["version"], "installed": have}
        compatible = have is not None and (
            have == entry["version"]
            if entry["exact"]
            else _version_key(have) >= _version_key(entry["minimum"])
        )
        if compatible:
            line["action"] = "kept the installed one"
        else:
            line["action"] = "installed from the bundle"
            chosen.append(HERE / entry["file"])
        lines.append(line)
    bundled = {e["dist"] for e in manifest.get("wheels", []) if e["python"] in (None, tag)}
    for entry in manifest.get("wheels", []):
        if entry["dist"] not in bundled and _installed_version(entry["dist"]) is None:
            bundled.add(entry["dist"])
            lines.append(
                {
                    "dist": entry["dist"],
                    "action": f"MISSING: not installed, and the bundle has no {tag} wheel"
                    " (left out for size: docs/gpu.md)",
                }
            )
    if site.exists():
        shutil.rmtree(site)
    site.mkdir(parents=True)
    if not chosen:
        return lines
    command = [sys.executable, "-m", "pip", "install", "--no-index", "--no-deps", "--quiet"]
    command += ["--disable-pip-version-check", "--no-compile", "--target", str(site)]
    try:
        has_pip = subprocess.run([sys.executable, "-m", "pip", "--version"], capture_output=True)
    except OSError:
        has_pip = None
    if has_pip is not None and has_pip.returncode == 0:
        done = subprocess.run(command + [str(w) for w in chosen], capture_output=True, text=True)
        if done.returncode != 0:
            raise SystemExit(f"pip install failed:\n{done.stdout}\n{done.stderr}")
    else:  # no pip in this Python: a wheel is a zip of its files (purelib/platlib layout)
        for wheel in chosen:
            _unpack(wheel, site)
        for line in lines:
            if line.get("action") == "installed from the bundle":
                line["action"] = "installed from the bundle (unpacked: no pip here)"
    return lines


def _unpack(wheel: Path, site: Path) -> None:
    with zipfile.ZipFile(wheel) as archive:
        for member in archive.namelist():
            parts = member.split("/")
            if ".." in parts or member.startswith("/"):
                raise SystemExit(f"{wheel.name}: unsafe member {member}")
            if parts[0].endswith(".data"):
                if len(parts) < 3 or parts[1] not in ("purelib", "platlib"):
                    continue  # scripts, headers: not needed to import
                parts = parts[2:]
            target = site.joinpath(*parts)
            if member.endswith("/"):
                continue
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(archive.read(member))


# -- the worker --------------------------------------------------------------------------------


class WorkerProcess:
    """``bundle_worker.py`` in its own process group, its answers read by a thread."""

    def __init__(self, backend: str, site: Path, log: Path) -> None:
        environment = dict(os.environ)
        paths = [str(site), str(HERE), environment.get("PYTHONPATH", "")]
        environment["PYTHONPATH"] = os.pathsep.join(p for p in paths if p)
        environment["PYTHONUNBUFFERED"] = "1"
        # jax shares the GPU with heron's device in the worker (speed cases, the DLPack
        # checks): it must not take 75% of the memory up front, as it does by default.
        environment.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
        self.log = open(log, "a")  # noqa: SIM115 - kept open for the process's lifetime
        self.process = subprocess.Popen(
            [sys.executable, str(HERE / "bundle_worker.py"), str(HERE), backend],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self.log,
            env=environment,
            text=True,
            start_new_session=True,
        )
        self.lines: queue.Queue[str | None] = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self.lines.put(line)
        self.lines.put(None)

    def answer(self, timeout: float) -> dict[str, Any] | None:
        """The next answer; None when the worker ended; TimeoutError past ``timeout``."""
        try:
            line = self.lines.get(timeout=max(timeout, 0.01))
        except queue.Empty:
            raise TimeoutError from None
        return None if line is None else json.loads(line)

    def send(self, request: dict[str, Any]) -> None:
        assert self.process.stdin is not None
        self.process.stdin.write(json.dumps(request) + "\n")
        self.process.stdin.flush()

    def stop(self) -> None:
        if self.process.poll() is None:
            try:
                os.killpg(self.process.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        self.process.wait()
        self.log.close()

    def exit_text(self) -> str:
        code = self.process.wait()
        if code < 0:
            return f"killed by signal {signal.Signals(-code).name}"
        return f"exit status {code}"


# -- reports --------------------------------------------------------------------------------


class Report:
    """report.json and report.md, rewritten (atomically) after every case."""

    def __init__(self, out: Path, header: dict[str, Any]) -> None:
        self.out = out
        self.header = header
        self.cases: list[dict[str, Any]] = []
        self.started = time.time()

    def add(self, case: dict[str, Any]) -> None:
        self.cases.append(case)
        self.write()

    def write(self, finished: bool = False) -> None:
        document = {
            **self.header,
            "elapsed_s": round(time.time() - self.started, 2),
            "finished": finished,
            "summary": self.summary(),
            "cases": self.cases,
        }
        _write(self.out / "report.json", json.dumps(document, indent=1))
        _write(self.out / "report.md", render_markdown(document))

    def summary(self) -> dict[str, dict[str, int]]:
        counts: dict[str, dict[str, int]] = {}
        for case in self.cases:
            kind = counts.setdefault(case["kind"], {})
            kind[case["status"]] = kind.get(case["status"], 0) + 1
        return counts


def _write(path: Path, text: str) -> None:
    temporary = path.with_name(f".{path.name}.tmp")
    temporary.write_text(text)
    os.replace(temporary, path)


def _ms(seconds: Any) -> str:
    return f"{seconds * 1e3:.3f}" if isinstance(seconds, (int, float)) else "-"


def _pct(value: Any) -> str:
    return f"{value * 100:.0f}%" if isinstance(value, (int, float)) else "-"


def render_markdown(document: dict[str, Any]) -> str:
    """The report for a reader: environment, counts, tables, then every problem."""
    device = document.get("device") or {}
    lines = [
        "# heron GPU bundle report",
        "",
        f"- device: {device.get('device', '-')} (backend {device.get('backend', '-')},"
        f" arch {device.get('arch', '-')}, artefacts for {device.get('target', '-')},"
        f" peaks of the {device.get('peak_preset', '-')} preset)",
        f"- driver (CUDA): {device.get('driver_cuda', '-')}; python {platform.python_version()};"
        f" versions: {', '.join(f'{k} {v}' for k, v in (device.get('modules') or {}).items())}",
        f"- budget {document['budget_s']} s, elapsed {document['elapsed_s']} s, finished:"
        f" {'yes' if document['finished'] else 'NO (cut short)'}",
        "- summary: "
        + "; ".join(
            f"{kind}: " + ", ".join(f"{n} {status}" for status, n in sorted(counts.items()))
            for kind, counts in document["summary"].items()
        ),
        "",
    ]
    if document.get("install"):
        lines += [
            "## Wheels",
            "",
            "| distribution | bundled | installed | action |",
            "|---|---|---|---|",
        ]
        for line in document["install"]:
            lines.append(
                f"| {line['dist']} | {line.get('bundled', '-')} | {line.get('installed') or '-'}"
                f" | {line['action']} |"
            )
        lines.append("")
    correctness = [c for c in document["cases"] if c["kind"] == "correctness"]
    if correctness:
        lines += [
            "## Correctness",
            "",
            "| case | status | vs XLA:CPU (eps) | vs interpreter: identical outputs, worst eps |"
            " command buffers | repeats | order-dependent | s |",
            "|---|---|---|---|---|---|---|---|",
        ]
        for case in correctness:
            d = case.get("details") or {}
            xla = d.get("xla_cpu") or {}
            interp = d.get("interpreter") or {}
            lines.append(
                f"| {case['name']} | {case['status']} | {xla.get('worst_error_eps', '-')} |"
                f" {interp.get('identical_outputs', '-')}, {interp.get('worst_error_eps', '-')} |"
                f" {d.get('command_buffers', '-')} | {d.get('repeats', '-')} |"
                f" {len(d.get('order_dependent_kernels') or [])} | {case.get('seconds', '-')} |"
            )
        lines.append("")
    speed = [c for c in document["cases"] if c["kind"] == "speed"]
    if speed:
        lines += [
            "## Speed (ms; throughput = median of batches of back-to-back runs, one sync each)",
            "",
        ]
        if any(c.get("program") for c in speed):
            lines += [PROGRAM_SPEED_NOTE, ""]
        lines += [
            "| workload | status | heron single | heron throughput | jax single |"
            " jax throughput | torch.compile throughput | jax / heron | heron GB/s (of peak) |"
            " heron TFLOP/s (of peak) | slowest heron kernel | heron autotuned throughput"
            " (untuned / tuned) |",
            "|---|---|---|---|---|---|---|---|---|---|---|---|",
        ]
        torch_rows = {
            _speed_row(c): (c.get("details") or {}).get("torch") or {}
            for c in speed
            if c.get("mode") == "torch"
        }
        for case in speed:
            if case.get("mode") == "torch":
                continue
            d = case.get("details") or {}
            heron, jax = d.get("heron") or {}, d.get("jax") or {}
            torch = torch_rows.get(_speed_row(case), {})
            ratio = _ratio(jax, heron, "throughput_s")
            if case.get("program"):
                ratio += f" (single {_ratio(jax, heron, 'single_s')})"
            kernels = heron.get("kernels") or []
            slowest = (
                f"{kernels[0]['name']} [{kernels[0]['emitter']}] {_ms(kernels[0]['seconds'])}"
                if kernels
                else "-"
            )
            gbs = (
                f"{heron['gb_per_s']:.0f} ({_pct(heron.get('bandwidth_of_peak'))})"
                if heron.get("gb_per_s")
                else "-"
            )
            tfs = (
                f"{heron['tflop_per_s']:.1f} ({_pct(heron.get('flops_of_peak'))})"
                if heron.get("tflop_per_s")
                else "-"
            )
            lines.append(
                f"| {_speed_row(case)} | {case['status']} |"
                f" {_ms(heron.get('single_s'))} |"
                f" {_ms(heron.get('throughput_s'))} | {_ms(jax.get('single_s'))} |"
                f" {_ms(jax.get('throughput_s'))} | {_ms(torch.get('throughput_s'))} | {ratio} |"
                f" {gbs} | {tfs} | {slowest} | {_tuned_cell(d.get('autotune'))} |"
            )
        lines.append("")
        lines += [
            "## Device-resident runs (heron.jax's runner on the library's GPU arrays)",
            "",
            "| workload | resident throughput | executor throughput | jax throughput |"
            " jax / resident | issue (host) | inputs taken |",
            "|---|---|---|---|---|---|---|",
        ]
        for case in speed:
            d = case.get("details") or {}
            resident, heron, jax = (d.get(k) or {} for k in ("resident", "heron", "jax"))
            if not resident.get("throughput_s"):
                why = resident.get("skipped") or resident.get("error")
                if why:
                    lines.append(f"| {_speed_row(case)} | {why} | | | | | |")
                continue
            ratio = _ratio(jax, resident, "throughput_s")
            lines.append(
                f"| {_speed_row(case)} | {_ms(resident['throughput_s'])} |"
                f" {_ms(heron.get('throughput_s'))} | {_ms(jax.get('throughput_s'))} | {ratio} |"
                f" {_ms(resident.get('issue_s'))} | {', '.join(resident.get('ways', []))} |"
            )
        lines.append("")
        lines += _host_profiles(speed)
        lines += ["## Per-kernel device times (heron, event timers, no command buffers)", ""]
        for case in speed:
            kernels = ((case.get("details") or {}).get("heron") or {}).get("kernels") or []
            if not kernels:
                continue
            top = ", ".join(
                f"{k['name']} [{k['emitter'] or k['kind']}] {_ms(k['seconds'])} ms" for k in kernels
            )
            lines.append(f"- {_speed_row(case)}: {top}")
        lines.append("")
    lines += _autotune_section(speed)
    problems = [c for c in document["cases"] if c["status"] in ("fail", "error")]
    skipped = [c for c in document["cases"] if c["status"] == "skipped"]
    if problems:
        lines += ["## Failures and errors", ""]
        lines += [f"- {c['name']} ({c['status']}): {c.get('reason', '')}" for c in problems]
        lines.append("")
    if skipped:
        reasons: dict[str, int] = {}
        for case in skipped:
            reasons[case.get("reason", "")] = reasons.get(case.get("reason", ""), 0) + 1
        lines += ["## Skipped", ""]
        lines += [f"- {n} case(s): {reason}" for reason, n in reasons.items()]
        lines.append("")
    return "\n".join(lines)


def _speed_row(case: dict[str, Any]) -> str:
    """A speed case's name in report.md's tables: its workload, ``program/NAME`` for a corpus
    program's (``speed/program/NAME``), else the case's name."""
    if case.get("workload"):
        return str(case["workload"])
    if case.get("program"):
        return f"program/{case['program']}"
    return str(case["name"])


def _ratio(jax: dict[str, Any], heron: dict[str, Any], key: str) -> str:
    """jax's time over heron's (above 1: heron is faster), or ``-`` where either is missing."""
    if isinstance(heron.get(key), (int, float)) and heron[key] and jax.get(key):
        return f"{jax[key] / heron[key]:.2f}"
    return "-"


def _tuned_cell(autotune: Any) -> str:
    """The speed table's autotuning cell: the tuned throughput and untuned / tuned, or
    the step's status (its reason is in the autotuning section)."""
    if not isinstance(autotune, dict):
        return "-"
    if autotune.get("status") != "measured":
        return str(autotune.get("status", "-"))
    ratio = (autotune.get("untuned_over_tuned") or {}).get("throughput")
    cell = f"{_ms((autotune.get('tuned') or {}).get('throughput_s'))}"
    cell += f" ({ratio:.2f}x)" if isinstance(ratio, (int, float)) else ""
    if not (autotune.get("outputs") or {}).get("agree", True):
        cell += " OUTPUTS DIFFER"
    return cell


def _us(seconds: Any) -> str:
    return f"{seconds * 1e6:.1f} us" if isinstance(seconds, (int, float)) else "-"


def _host_profiles(speed: list[dict[str, Any]]) -> list[str]:
    """Where a device-resident call's host time goes, per workload (the worker's
    ``host_profile``: the functions with the most time of their own, us a call)."""
    lines = []
    for case in speed:
        profile = ((case.get("details") or {}).get("resident") or {}).get("host_profile")
        if profile:
            top = ", ".join(f"{p['function']} {p['own_us']:.1f} us" for p in profile[:6])
            lines.append(f"- {_speed_row(case)}: {top}")
    if not lines:
        return []
    return ["Host time of a resident call, by function (cProfile, own time):", "", *lines, ""]


def _autotune_section(speed: list[dict[str, Any]]) -> list[str]:
    """report.md's autotuning section: a row per tuned workload (times, ratio, whether the
    outputs agree, the tuning's time, each call's chosen candidate against the heuristic's
    first), the algorithm each call ran, then the skipped and failed steps by reason."""
    steps = [
        (_speed_row(c), (c.get("details") or {}).get("autotune"))
        for c in speed
        if c.get("mode") != "torch"
    ]
    steps = [(name, step) for name, step in steps if isinstance(step, dict)]
    if not steps:
        return []
    lines = [
        "## GEMM autotuning (cuBLASLt; ms as in the speed table; untuned / tuned > 1: tuned is"
        " faster)",
        "",
    ]
    measured = [(n, s) for n, s in steps if s.get("status") == "measured"]
    if measured:
        lines += [
            "| workload | untuned throughput | tuned throughput | untuned / tuned (device) |"
            " outputs agree (distance / bound) | tuning s | calls: chosen vs heuristic's first |",
            "|---|---|---|---|---|---|---|",
        ]
        for name, step in measured:
            ratios = step.get("untuned_over_tuned") or {}
            ratio = " ".join(
                f"{ratios[k]:.2f}x" if k == "throughput" else f"({ratios[k]:.2f}x)"
                for k in ("throughput", "device")
                if isinstance(ratios.get(k), (int, float))
            )
            outputs = step.get("outputs") or {}
            distances = [d for d in outputs.get("distances") or [] if isinstance(d, float)]
            agree = "yes" if outputs.get("agree") else "NO"
            worst = f"{max(distances):.3g}" if distances else "-"
            bound = outputs.get("bound")
            agree += f" ({worst} / {bound:.3g})" if isinstance(bound, float) else ""
            calls = "; ".join(
                f"{c['path']}: "
                + (
                    "not tuned"
                    if c.get("chosen") is None
                    else f"{c['chosen']} of {c['candidates']}, {_us(c.get('chosen_s'))} vs"
                    f" {_us(c.get('heuristic_first_s'))}"
                )
                for c in step.get("calls") or []
            )
            tuning = step.get("autotune_s")
            lines.append(
                f"| {name} | {_ms((step.get('untuned') or {}).get('throughput_s'))} |"
                f" {_ms((step.get('tuned') or {}).get('throughput_s'))} | {ratio or '-'} |"
                f" {agree} | {f'{tuning:.2f}' if isinstance(tuning, (int, float)) else '-'} |"
                f" {calls or '-'} |"
            )
        lines.append("")
        lines += ["Each call: the pass's line, then the algorithm each run said it ran:", ""]
        for name, step in measured:
            for call in step.get("calls") or []:
                ran = f"untuned: {call.get('untuned_algorithm', '-')}; tuned:"
                ran += f" {call.get('tuned_algorithm', '-')}"
                lines.append(f"- {name}: {call['line']} ({ran})")
        lines.append("")
    problems = [(n, s) for n, s in measured if s.get("problem")]
    problems += [(n, s) for n, s in steps if s.get("status") == "error"]
    if problems:
        lines += ["Autotuning problems (the cases' statuses stand):", ""]
        lines += [f"- {n}: {s.get('problem') or s.get('reason', '')}" for n, s in problems]
        lines.append("")
    reasons: dict[str, list[str]] = {}
    for name, step in steps:
        if step.get("status") == "skipped":
            reasons.setdefault(str(step.get("reason", "")), []).append(name)
    if reasons:
        lines += ["Not autotuned:", ""]
        lines += [f"- {', '.join(names)}: {reason}" for reason, names in reasons.items()]
        lines.append("")
    return lines


# -- the run ---------------------------------------------------------------------------------


def ask(
    worker: WorkerProcess, request: dict[str, Any], timeout: float
) -> tuple[dict[str, Any], WorkerProcess | None]:
    """Send ``request`` and wait for the answer under the watchdog: (the answer, the worker),
    or (an error answer saying why, None) when it did not answer in time or died: the
    worker is then stopped, and the next request starts a fresh one."""
    worker.send(request)
    try:
        answer = worker.answer(timeout)
    except TimeoutError:
        worker.stop()
        reason = f"watchdog: no answer in {timeout:.0f} s; the worker was stopped"
        return {"status": "error", "reason": reason}, None
    if answer is None:
        answer = {"status": "error", "reason": f"the worker died ({worker.exit_text()})"}
        worker.stop()
        return answer, None
    return answer, worker


def autotune_skip(
    entry: dict[str, Any], backend: str | None, left: float, disabled: bool = False
) -> str | None:
    """Why a speed case gets no autotuning step (``details.autotune.reason``), or None
    when it does: autotuning times cuBLASLt on a CUDA device, tunes heron's artefact
    once it was timed, and needs :data:`AUTOTUNE_MIN_SECONDS` of the speed phase."""
    if disabled:
        return "--no-autotune"
    if backend is not None and backend != "cuda":
        return (
            "autotuning times cuBLASLt's algorithms on a CUDA device; this run's backend"
            f" is {backend}"
        )
    heron = (entry.get("details") or {}).get("heron") or {}
    if not heron.get("throughput_s"):
        why = f": {entry['reason']}" if entry.get("reason") else ""
        return f"heron's artefact was not timed (the speed case is {entry['status']}{why})"
    if left < AUTOTUNE_MIN_SECONDS:
        return (
            f"budget: {max(left, 0):.0f} s left of the speed phase, autotuning needs"
            f" {AUTOTUNE_MIN_SECONDS:.0f}"
        )
    return None


def _plan(manifest: dict[str, Any], only: list[str] | None) -> list[dict[str, Any]]:
    """(case, mode) in the order they run: correctness, speed, torch.compile."""
    plan = []
    for mode in ("correctness", "speed", "torch"):
        for case in manifest["cases"]:
            if case["kind"] != ("correctness" if mode == "correctness" else "speed"):
                continue
            if mode == "torch" and not case.get("torch"):
                continue
            name = case["name"] + ("[torch.compile]" if mode == "torch" else "")
            if only and not any(fnmatch.fnmatch(name, pattern) for pattern in only):
                continue
            plan.append({"mode": mode, "name": name, "case": case})
    return plan


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True, help="where the reports go")
    parser.add_argument(
        "--backend", choices=("auto", "cuda", "rocm", "interpreter"), default="auto"
    )
    parser.add_argument("--budget", type=float, default=330.0, help="seconds, install included")
    parser.add_argument("--only", nargs="+", metavar="GLOB", help="only cases named so")
    parser.add_argument("--case-timeout", type=float, default=None, help="seconds, every mode")
    parser.add_argument(
        "--no-install", action="store_true", help="use what this Python has (no wheels)"
    )
    parser.add_argument(
        "--no-autotune", action="store_true", help="no autotuning step after the speed cases"
    )
    parser.add_argument(
        "--site",
        type=Path,
        default=None,
        help="where the wheels go (default OUT/site; outside OUT when OUT is copied back)",
    )
    args = parser.parse_args(argv)
    started = time.monotonic()
    args.out.mkdir(parents=True, exist_ok=True)
    manifest = json.loads((HERE / "bundle.json").read_text())
    site = args.site or args.out / "site"
    lines = [] if args.no_install else install(manifest, site)
    header: dict[str, Any] = {
        "bundle": {
            "heron_version": manifest["heron_version"],
            "created_by": manifest["created_by"],
            "wheels_left_out": manifest.get("wheels_left_out", []),
        },
        "backend_requested": args.backend,
        "budget_s": args.budget,
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "install": lines,
        "install_s": round(time.monotonic() - started, 2),
        "device": None,
    }
    report = Report(args.out, header)
    report.write()
    print(f"installed in {header['install_s']} s; starting the worker", flush=True)
    plan = _plan(manifest, args.only)
    log = args.out / "worker.log"
    worker: WorkerProcess | None = None
    for index, item in enumerate(plan):
        mode = item["mode"]
        elapsed = time.monotonic() - started
        later = {p["mode"] for p in plan[index + 1 :]} - {mode}
        share = PHASE_SHARE[mode] if later else 1.0
        until = args.budget * share
        entry: dict[str, Any] = {
            "name": item["name"],
            "kind": "speed" if mode in ("speed", "torch") else "correctness",
            "mode": mode,
        }
        for key in ("workload", "program"):
            if item["case"].get(key):
                entry[key] = item["case"][key]
        if elapsed >= until:
            entry.update(status="skipped", reason=f"budget: {mode} cases stop at {until:.0f} s")
            if mode == "speed":
                _skip_autotune(entry, autotune_skip(entry, _backend(report, args), 0.0))
            report.add(entry)
            continue
        if worker is None:
            worker = WorkerProcess(args.backend, site, log)
            try:
                hello = worker.answer(min(START_TIMEOUT, args.budget - elapsed))
            except TimeoutError:
                hello = {"hello": None, "error": "the worker did not start in time"}
            if hello is None or not hello.get("hello"):
                why = (hello or {}).get("error") or f"the worker ended ({worker.exit_text()})"
                worker.stop()
                worker = None
                report.header["device_error"] = why
                for rest in plan[index:]:
                    failed = {
                        "name": rest["name"],
                        "kind": "speed" if rest["mode"] != "correctness" else "correctness",
                        "mode": rest["mode"],
                        "status": "error",
                        "reason": f"no device: {why}",
                    }
                    if rest["mode"] == "speed":
                        _skip_autotune(failed, autotune_skip(failed, None, 0.0))
                    report.cases.append(failed)
                break
            report.header["device"] = hello["hello"]
            print(f"device: {hello['hello']['device']}", flush=True)
        timeout = args.case_timeout or CASE_TIMEOUTS[mode]
        timeout = min(timeout, until - (time.monotonic() - started))
        answer, worker = ask(worker, {"mode": mode, "case": item["case"]}, timeout)
        entry.update(answer)
        report.add(entry)
        print(f"{entry['status']:>7} {entry['name']} {entry.get('reason', '')}"[:200], flush=True)
        if mode == "speed":
            worker = _autotune_step(entry, item["case"], worker, report, args, until, started)
    if worker is not None:
        assert worker.process.stdin is not None
        worker.process.stdin.close()
        try:
            worker.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            pass
        worker.stop()
    report.write(finished=True)
    counts = report.summary()
    print(f"report: {args.out / 'report.md'}; {json.dumps(counts)}")
    bad = sum(n for kind in counts.values() for s, n in kind.items() if s in ("fail", "error"))
    return 1 if bad else 0


def _backend(report: Report, args: argparse.Namespace) -> str | None:
    """The backend the worker opened, else the one asked for (None: auto, not yet known)."""
    device = report.header.get("device") or {}
    if device.get("backend"):
        return str(device["backend"])
    return None if args.backend == "auto" else str(args.backend)


def _skip_autotune(entry: dict[str, Any], reason: str | None) -> None:
    """Record in the speed case ``entry`` why it gets no autotuning step."""
    if reason is not None:
        entry.setdefault("details", {})["autotune"] = {"status": "skipped", "reason": reason}


def _autotune_step(
    entry: dict[str, Any],
    case: dict[str, Any],
    worker: WorkerProcess | None,
    report: Report,
    args: argparse.Namespace,
    until: float,
    started: float,
) -> WorkerProcess | None:
    """The speed case's autotuning step, its result put in ``entry['details']['autotune']``
    (the report rewritten); the worker to use next (None when it was stopped). The case's
    status never changes: a hang, a crash or an error of the step is the step's result."""
    left = until - (time.monotonic() - started)
    reason = autotune_skip(entry, _backend(report, args), left, args.no_autotune)
    if reason is None and worker is None:
        reason = "the speed case's worker was stopped"
    if reason is not None:
        _skip_autotune(entry, reason)
        report.write()
        return worker
    assert worker is not None
    timeout = min(args.case_timeout or CASE_TIMEOUTS["autotune"], left)
    # the worker's own deadline a little before the watchdog's: it answers with what it has
    request = {"mode": "autotune", "case": case, "seconds": max(timeout - 5.0, timeout * 0.8)}
    answer, worker = ask(worker, request, timeout)
    entry.setdefault("details", {})["autotune"] = answer
    report.write()
    line = f"{'':>7} {entry['name']} autotuning: {answer['status']} {answer.get('reason', '')}"
    print(line[:200], flush=True)
    return worker


if __name__ == "__main__":
    sys.exit(main())
