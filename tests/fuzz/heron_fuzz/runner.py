"""Drives a run: builds cases from (seed, index), runs each in a worker, judges, reports.

Cases run in parallel (threads, each waiting on a child of its own zygote:
:mod:`heron_fuzz.zygote`), each in its own directory; a case with a finding
is copied into the findings directory with its files, its ``case.json`` and
one-command replays.
"""

from __future__ import annotations

import collections
import contextlib
import json
import os
import queue
import select
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import TextIO

from heron_fuzz import generate, mutations, npz_cases
from heron_fuzz.cases import KINDS, Case, case_rng, hlo_commands
from heron_fuzz.findings import Finding, judge_command
from heron_fuzz.worker import WORK_LIMIT_ENV, size_in_bytes

FUZZ_ROOT = Path(__file__).resolve().parent.parent
REPO_ROOT = FUZZ_ROOT.parent.parent
DEFAULT_CORPUS = REPO_ROOT.parent / "shared" / "corpus" / "xla"


@dataclass
class Options:
    """Everything a run depends on besides the cases (the limits are part of a replay)."""

    seed: int = 0
    cases: int = 100
    first: int = 0
    kinds: tuple[str, ...] = KINDS
    jobs: int = max(1, os.cpu_count() or 1)
    timeout: float = 60.0
    budget: str = "256M"
    address_space: str = "4G"
    #: The interpreter's work limit (lane-operations per launch): about 10 s on one core.
    work_limit: str | None = "3e8"
    #: Peak RSS allowed: the budget plus what heron's libraries take before any input.
    rss_slack: str = "1G"
    corpus: Path = DEFAULT_CORPUS
    findings_dir: Path | None = None


@dataclass
class Outcome:
    """One case's result: per-command statuses and the findings."""

    case: Case
    statuses: list[int | str] = field(default_factory=list)
    findings: list[Finding] = field(default_factory=list)
    #: Disagreements on mutants: not contract breaches, but worth a look.
    notes: list[Finding] = field(default_factory=list)
    seconds: float = 0.0


def build_case(kind: str, seed: int, index: int, corpus_files: list[Path]) -> Case:
    """Case ``index`` of ``seed``: a pure function of its arguments (and the corpus)."""
    rng = case_rng(seed, index, kind)
    if kind == "mutation":
        source = rng.choice(corpus_files)
        data, done, run = mutations.mutate(source.read_bytes(), rng)
        origin = f"{source.relative_to(source.parents[2])}: {'; '.join(done)}"
        return Case(kind, seed, index, origin, {"case.hlo": data}, hlo_commands(run=run))
    if kind == "generated":
        text, origin = generate.generate(rng)
        return Case(kind, seed, index, origin, {"case.hlo": text.encode()}, hlo_commands())
    if kind == "npz":
        data, origin = npz_cases.damaged_npz(rng)
        hlo, npz = "{dir}/case.hlo", "{dir}/inputs.npz"
        commands = [
            ["run", hlo, "--backend", "interpreter", "--inputs", npz, "--check"],
            ["run", hlo, "--backend", "reference", "--inputs", npz, "--output", "{dir}/o.npz"],
        ]
        files = {"case.hlo": npz_cases.NPZ_HLO.encode(), "inputs.npz": data}
        return Case(kind, seed, index, origin, files, commands)
    raise ValueError(f"unknown kind {kind!r}")


def _worker_env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(FUZZ_ROOT), env.get("PYTHONPATH")]))
    env.pop("HERON_DEBUG", None)  # tracebacks without --debug are findings
    env.pop("HERON_MEMORY_BUDGET", None)
    return env


class Zygote:
    """One :mod:`heron_fuzz.zygote` process: runs a case in a forked child, under a timeout."""

    def __init__(self) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "heron_fuzz.zygote"],
            env=_worker_env(),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
        )
        self._buffer = b""

    def _reply(self, timeout: float | None) -> dict | None:
        """The next reply line; None if ``timeout`` passes first. EOFError if the zygote died."""
        assert self.proc.stdout is not None
        fd = self.proc.stdout.fileno()
        deadline = None if timeout is None else time.monotonic() + timeout
        while b"\n" not in self._buffer:
            remaining = None if deadline is None else max(0.0, deadline - time.monotonic())
            ready, _, _ = select.select([fd], [], [], remaining)
            if not ready:
                return None
            chunk = os.read(fd, 65536)
            if not chunk:
                raise EOFError("the fuzz zygote exited")
            self._buffer += chunk
        line, self._buffer = self._buffer.split(b"\n", 1)
        return json.loads(line)

    def run(self, request: dict, timeout: float) -> tuple[int, bool]:
        """Run one case; its exit status (``-SIGNAL`` for a signal) and whether it timed out."""
        assert self.proc.stdin is not None
        self.proc.stdin.write((json.dumps(request) + "\n").encode())
        self.proc.stdin.flush()
        started = self._reply(None)
        assert started is not None
        pid = started["pid"]
        ended = self._reply(timeout)
        if ended is not None:
            return ended["status"], False
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pid, signal.SIGKILL)  # the child's session: it and anything it started
        ended = self._reply(None)
        assert ended is not None
        return ended["status"], True

    def close(self) -> None:
        if self.proc.stdin is not None:
            self.proc.stdin.close()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


class ZygotePool:
    """A zygote per job, handed to one case at a time; one that died is replaced."""

    def __init__(self) -> None:
        self._idle: queue.SimpleQueue[Zygote] = queue.SimpleQueue()
        self._all: list[Zygote] = []
        self._lock = threading.Lock()

    def run(self, request: dict, timeout: float) -> tuple[int, bool]:
        try:
            zygote = self._idle.get_nowait()
        except queue.Empty:
            zygote = Zygote()
            with self._lock:
                self._all.append(zygote)
        try:
            result = zygote.run(request, timeout)
        except (EOFError, OSError):
            zygote.close()
            raise
        self._idle.put(zygote)
        return result

    def close(self) -> None:
        for zygote in self._all:
            zygote.close()


def run_case(case: Case, options: Options, workdir: Path, pool: ZygotePool) -> Outcome:
    """Write the case's files, run it in a zygote's child under a timeout, judge every command."""
    case_dir = workdir / case.name
    case_dir.mkdir(parents=True, exist_ok=True)
    for name, data in case.files.items():
        (case_dir / name).write_bytes(data)
    (case_dir / "case.json").write_text(json.dumps(case.to_json()))
    results = case_dir / "results.jsonl"
    stderr_path = case_dir / "worker.stderr"
    request = {
        "case_dir": str(case_dir),
        "results": str(results),
        "stderr": str(stderr_path),
        "budget": options.budget,
        "address_space": options.address_space,
        "work_limit": options.work_limit,
    }
    outcome = Outcome(case)
    started = time.monotonic()
    try:
        returncode, timed_out = pool.run(request, options.timeout)
    except (EOFError, OSError) as exc:
        returncode, timed_out = 70, False
        stderr_path.write_text(f"the zygote failed: {exc}\n")
    outcome.seconds = time.monotonic() - started
    proc_err = stderr_path.read_text("utf-8", "replace") if stderr_path.exists() else ""
    rss_limit = size_in_bytes(options.budget) + size_in_bytes(options.rss_slack)
    last_started: int | None = None
    records = results.read_text().splitlines() if results.exists() else []
    for line in records:
        record = json.loads(line)
        if record["event"] == "start":
            last_started = record["i"]
            continue
        last_started = None
        outcome.statuses.append(record["status"])
        for finding in judge_command(
            record["i"],
            record["status"],
            record["stderr"],
            record["stdout"],
            record["peak_rss"],
            rss_limit,
        ):
            # A generated fusion is valid by construction: its disagreement is a wrong kernel.
            # A launch past the work limit is slow, not wrong: listed, so that a kernel
            # that should be fast but loops for long does not go unseen.
            note = finding.kind == "slow" or (
                finding.kind == "disagreement" and case.kind != "generated"
            )
            (outcome.notes if note else outcome.findings).append(finding)
    if timed_out:
        outcome.findings.append(
            Finding("timeout", last_started, f"no result after {options.timeout:g} s")
        )
    elif returncode < 0:
        name = signal.Signals(-returncode).name
        outcome.findings.append(Finding("signal", last_started, f"{name}: {_tail(proc_err)}"))
    elif returncode != 0:
        outcome.findings.append(
            Finding("worker-failed", last_started, f"exit {returncode}: {_tail(proc_err)}")
        )
    elif "Traceback" in proc_err:
        outcome.findings.append(Finding("traceback", None, proc_err))
    return outcome


def _tail(text: str, lines: int = 3) -> str:
    return " | ".join(text.strip().splitlines()[-lines:])


def replay_commands(case: Case, where: Path, options: Options) -> list[str]:
    """Shell commands replaying each command of a saved case, limits included."""
    out = []
    for template in case.commands:
        argv = [part.replace("{dir}", str(where)) for part in template]
        heron = shlex.join(["heron", "--memory-budget", options.budget, *argv])
        out.append(
            f"{WORK_LIMIT_ENV}={options.work_limit} {heron}" if options.work_limit else heron
        )
    return out


def save_finding(outcome: Outcome, options: Options, stream: TextIO) -> None:
    """Copy the case into the findings directory; one JSON line per finding."""
    assert options.findings_dir is not None
    where = options.findings_dir / outcome.case.name
    where.mkdir(parents=True, exist_ok=True)
    for name, data in outcome.case.files.items():
        (where / name).write_bytes(data)
    (where / "case.json").write_text(json.dumps(outcome.case.to_json()))
    replays = replay_commands(outcome.case, where, options)
    # From the repository root; the worker's limits are part of the case's conditions.
    case_replay = "PYTHONPATH=tests/fuzz " + shlex.join(
        ["python", "-m", "heron_fuzz", "--replay", str(where.resolve() / "case.json")]
        + ["--budget", options.budget, "--address-space", options.address_space]
        + ["--work-limit", options.work_limit or "0"]
    )
    for finding in outcome.findings + outcome.notes:
        stream.write(
            json.dumps(
                {
                    "case": outcome.case.name,
                    "kind": outcome.case.kind,
                    "seed": outcome.case.seed,
                    "index": outcome.case.index,
                    "origin": outcome.case.origin,
                    "finding": finding.kind,
                    "note": finding in outcome.notes,
                    "signature": finding.signature,
                    "command": None
                    if finding.command is None
                    else outcome.case.commands[finding.command],
                    "message": finding.message[:2000],
                    "replay": replays[finding.command]
                    if finding.command is not None
                    else case_replay,
                    "replay_case": case_replay,
                }
            )
            + "\n"
        )
        stream.flush()


def run(
    options: Options,
    cases: list[Case] | None = None,
    log: TextIO | None = sys.stderr,
    progress: Callable[[int, int, Outcome], None] | None = None,
) -> list[Outcome]:
    """Run ``options.cases`` cases (or the given ones); return their outcomes.

    ``progress(done, total, outcome)`` is told of each case as its outcome is
    collected, in case order (a progress bar); None: nothing is called.
    """
    if cases is None:
        files = mutations.corpus_files(options.corpus) if "mutation" in options.kinds else []
        if "mutation" in options.kinds and not files:
            raise SystemExit(f"heron_fuzz: no .hlo files in the corpus {options.corpus}")
        cases = [
            build_case(options.kinds[i % len(options.kinds)], options.seed, i, files)
            for i in range(options.first, options.first + options.cases)
        ]
    outcomes: list[Outcome] = []
    stream = None
    if options.findings_dir is not None:
        options.findings_dir.mkdir(parents=True, exist_ok=True)
        stream = (options.findings_dir / "findings.jsonl").open("a")
    workdir = Path(tempfile.mkdtemp(prefix="heron-fuzz-"))
    zygotes = ZygotePool()
    try:
        with ThreadPoolExecutor(max_workers=options.jobs) as pool:
            futures = [pool.submit(run_case, case, options, workdir, zygotes) for case in cases]
            for n, future in enumerate(futures, 1):
                outcome = future.result()
                outcomes.append(outcome)
                if progress is not None:
                    progress(n, len(cases), outcome)
                shutil.rmtree(workdir / outcome.case.name, ignore_errors=True)
                if (outcome.findings or outcome.notes) and stream is not None:
                    save_finding(outcome, options, stream)
                if log is not None and (outcome.findings or n % 50 == 0 or n == len(cases)):
                    flag = f"  FINDING {outcome.findings[0].signature}" if outcome.findings else ""
                    print(
                        f"[{n}/{len(cases)}] {outcome.case.name} {outcome.statuses}{flag}", file=log
                    )
    finally:
        zygotes.close()
        shutil.rmtree(workdir, ignore_errors=True)
        if stream is not None:
            stream.close()
    return outcomes


def summary(outcomes: list[Outcome], seconds: float) -> str:
    """Cases per kind, statuses per kind, findings grouped by signature."""
    lines = [f"heron_fuzz: {len(outcomes)} cases in {seconds:.0f} s"]
    per_kind = collections.Counter(o.case.kind for o in outcomes)
    for kind, count in sorted(per_kind.items()):
        statuses = collections.Counter(
            str(s) for o in outcomes if o.case.kind == kind for s in o.statuses
        )
        with_findings = sum(1 for o in outcomes if o.case.kind == kind and o.findings)
        shown = ", ".join(f"{s}: {n}" for s, n in sorted(statuses.items()))
        lines.append(
            f"  {kind}: {count} cases, {with_findings} with findings; command statuses {{{shown}}}"
        )
    groups: dict[str, list[Outcome]] = collections.defaultdict(list)
    for outcome in outcomes:
        for signature in sorted({f.signature for f in outcome.findings}):
            groups[signature].append(outcome)
    total = sum(len(o.findings) for o in outcomes)
    lines.append(f"findings: {total} in {len(groups)} group(s)")
    for signature, group in sorted(groups.items(), key=lambda kv: -len(kv[1])):
        names = ", ".join(o.case.name for o in group[:5]) + (" ..." if len(group) > 5 else "")
        lines.append(f"  [{len(group)}] {signature}\n      {names}")
    notes: dict[str, list[Outcome]] = collections.defaultdict(list)
    for outcome in outcomes:
        for signature in sorted({f.signature for f in outcome.notes}):
            notes[signature].append(outcome)
    if notes:
        lines.append(
            "notes (disagreements on mutants that verify, launches past the work limit;"
            " not contract breaches):"
        )
        for signature, group in sorted(notes.items(), key=lambda kv: -len(kv[1])):
            names = ", ".join(o.case.name for o in group[:5]) + (" ..." if len(group) > 5 else "")
            lines.append(f"  [{len(group)}] {signature}\n      {names}")
    return "\n".join(lines)
