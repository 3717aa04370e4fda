"""The subprocess that runs one case: every command in-process, under limits.

Running the commands through ``heron.cli.main.main`` in one process pays
heron's imports (MLIR, LLVM, numpy) once per case instead of once per command;
the case still gets a process of its own, so that a signal, a hang or a blown
address space ends this process only and is itself the finding. Each command
is recorded as a JSON line *before* it starts and again when it ends: if the
process dies, the parent knows which command killed it.

    python -m heron_fuzz.worker CASE_DIR RESULTS.jsonl --budget 256M --address-space 4G

The runner does not start this module per case: its zygote
(:mod:`heron_fuzz.zygote`), which has imported heron once, forks a child per
case that calls :func:`run_case_dir`. Running the module by hand is for
debugging one case outside the runner.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import resource
import sys
import time
from pathlib import Path

#: The interpreter's work limit (heron.runtime.interpreter.engine.WORK_LIMIT_ENV), named
#: here so that setting it needs no heron import.
WORK_LIMIT_ENV = "HERON_INTERPRETER_MAX_WORK"
#: Kept of each command's stderr: enough for a message and the start of a traceback.
STDERR_KEEP = 4000


def size_in_bytes(text: str) -> int:
    """``256M``, ``4G``, ``1GiB`` -> bytes. Not heron's ``parse_size``: the limit is
    set before heron (and the libraries it loads) is imported."""
    units = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    text = text.strip().upper().removesuffix("IB").removesuffix("B")
    suffix = text[-1] if text and text[-1] in units else ""
    return int(float(text[: len(text) - len(suffix)]) * units[suffix])


def _peak_rss() -> int:
    """Peak resident memory of this program in bytes.

    ``VmHWM`` of /proc/self/status, the high-water mark of this image's memory:
    ``ru_maxrss`` is preserved across execve, so a worker forked from a large
    process (a pytest worker that ran the whole suite) would report its
    parent's peak. ``ru_maxrss`` only where /proc is missing.
    """
    try:
        for line in open("/proc/self/status", encoding="ascii"):
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def run_command(argv: list[str]) -> tuple[int | str, str, str]:
    """One heron command in-process: its exit status and its stderr.

    stdout is kept for ``heron check``'s report (its refusals and disagreements
    are printed there); an exception that escapes
    ``main`` (it must not: main maps everything to a status) is reported with
    its traceback as the status "escaped".
    """
    from heron.cli.main import main

    err, out = io.StringIO(), io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(out):
        try:
            status: int | str = main(argv)
        except SystemExit as exc:  # argparse's usage errors, --help
            code = exc.code
            status = code if isinstance(code, int) else (0 if code is None else 2)
        except BaseException:  # noqa: BLE001 - the finding itself
            import traceback

            traceback.print_exc(file=err)
            status = "escaped"
    return status, err.getvalue(), out.getvalue()


def run_case_dir(
    case_dir: str | Path,
    results_path: str | Path,
    budget: str = "256M",
    address_space: str = "4G",
    work_limit: str | None = None,
) -> int:
    """Run every command of the case in ``case_dir``, recording each in ``results_path``.

    Sets this process's address-space limit first, and the interpreter's work
    limit (``HERON_INTERPRETER_MAX_WORK``) when given: a launch past it is a
    refusal that says so, which the runner lists as a note, where an unlimited
    one would be a timeout indistinguishable from a hang.
    """
    case_dir, results_path = Path(case_dir), Path(results_path)
    limit = size_in_bytes(address_space)
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    if work_limit:
        os.environ[WORK_LIMIT_ENV] = work_limit
    commands = json.loads((case_dir / "case.json").read_text())["commands"]
    with results_path.open("w") as results:
        for i, template in enumerate(commands):
            command = [part.replace("{dir}", str(case_dir)) for part in template]
            argv_ = ["--memory-budget", budget, *command]
            results.write(json.dumps({"event": "start", "i": i, "argv": argv_}) + "\n")
            results.flush()
            started = time.monotonic()
            status, stderr, stdout = run_command(argv_)
            record = {
                "event": "end",
                "i": i,
                "argv": argv_,
                "status": status,
                "stderr": stderr[:STDERR_KEEP],
                "stdout": stdout[-STDERR_KEEP:],
                "seconds": round(time.monotonic() - started, 3),
                "peak_rss": _peak_rss(),
            }
            results.write(json.dumps(record) + "\n")
            results.flush()
            # A file that does not parse fails every command the same way: stop there.
            if i == 0 and command[0] == "parse" and status == 2:
                break
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="heron_fuzz.worker")
    parser.add_argument("case_dir", type=Path)
    parser.add_argument("results", type=Path)
    parser.add_argument("--budget", default="256M", help="heron's --memory-budget")
    parser.add_argument("--address-space", default="4G", help="RLIMIT_AS of this process")
    parser.add_argument("--work-limit", default=None, help=f"{WORK_LIMIT_ENV} for the commands")
    args = parser.parse_args(argv)
    # Before heron is imported: its libraries' reservations count against the limit too.
    return run_case_dir(
        args.case_dir, args.results, args.budget, args.address_space, args.work_limit
    )


if __name__ == "__main__":
    sys.exit(main())
