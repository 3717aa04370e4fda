"""The subprocess that runs one case: every command in-process, under limits.

Running the commands through ``heron.cli.main.main`` in one process pays
heron's imports (MLIR, LLVM, numpy) once per case instead of once per command;
the case still gets a process of its own, so that a signal, a hang or a blown
address space ends this process only and is itself the finding. Each command
is recorded as a JSON line *before* it starts and again when it ends: if the
process dies, the parent knows which command killed it.

    python -m heron_fuzz.worker CASE_DIR RESULTS.jsonl --budget 256M --address-space 4G
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import resource
import sys
import time
from pathlib import Path

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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="heron_fuzz.worker")
    parser.add_argument("case_dir", type=Path)
    parser.add_argument("results", type=Path)
    parser.add_argument("--budget", default="256M", help="heron's --memory-budget")
    parser.add_argument("--address-space", default="4G", help="RLIMIT_AS of this process")
    args = parser.parse_args(argv)

    limit = size_in_bytes(args.address_space)
    # Before heron is imported: its libraries' reservations count against it too.
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    commands = json.loads((args.case_dir / "case.json").read_text())["commands"]
    with args.results.open("w") as results:
        for i, template in enumerate(commands):
            command = [part.replace("{dir}", str(args.case_dir)) for part in template]
            argv_ = ["--memory-budget", args.budget, *command]
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


if __name__ == "__main__":
    sys.exit(main())
