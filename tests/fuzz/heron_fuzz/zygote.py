"""A process that has imported heron once and forks one child per case.

Most of a case's time used to be heron's first-use cost (MLIR's dialect
modules, llvmlite, the plugins' entry points: about 0.9 s) paid again in every
fresh worker process. The zygote pays it once: it imports those modules, then
for each request forks a child that runs :func:`heron_fuzz.worker.run_case_dir`
and exits. Each case still has a process of its own (its own address-space
limit, its own session so a timeout kills it and anything it started, its own
signal), which is what makes a crash or a hang the finding rather than the end
of the run.

Protocol, one JSON object per line. The parent writes a request::

    {"case_dir": "...", "results": "...", "stderr": "...", "budget": "256M",
     "address_space": "4G", "work_limit": "3e8"}

the zygote answers ``{"pid": N}`` once the child runs, then ``{"status": S}``
when it has ended: the child's exit status, or ``-SIGNAL`` when a signal
ended it (as ``subprocess`` reports it). The parent enforces the timeout by
killing the child's process group (``os.killpg(pid, SIGKILL)``); the zygote
then reports that signal.

    python -m heron_fuzz.zygote       # started by heron_fuzz.runner, one per job
"""

from __future__ import annotations

import importlib
import json
import os
import sys

#: Imported before any fork: what every case would otherwise import itself. Only
#: imports (no MLIR context, no compile): a fork must not copy threads or locks
#: held by them.
PRELOAD = (
    "numpy",
    "ml_dtypes",
    "heron.cli.main",
    "heron.hlo",
    "heron.hlo.evaluator",
    "heron.compiler",
    "heron.compiler.driver",
    "heron.emitters",
    "heron.emitters.emitter_base",
    "heron.emitters.pipeline.gpu_lowering",
    "heron.harness",
    "heron.harness.check",
    "heron.runtime.interpreter",
    "heron.runtime.interpreter.capture",
    "mlir.ir",
    "mlir.dialects.llvm",
    "mlir.dialects.nvvm",
    "mlir.dialects.rocdl",
    "llvmlite.binding",
)


def preload() -> list[str]:
    """Import :data:`PRELOAD`; the names that failed (a missing optional package)."""
    missing = []
    for name in PRELOAD:
        try:
            importlib.import_module(name)
        except ImportError:
            missing.append(name)
    return missing


def _child(request: dict) -> None:
    """In the forked child: a session of its own, stdio to a file, the case, exit."""
    os.setsid()
    fd = os.open(request["stderr"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    code = 70  # EX_SOFTWARE: the worker itself failed
    try:
        from heron_fuzz.worker import run_case_dir

        code = run_case_dir(
            request["case_dir"],
            request["results"],
            request["budget"],
            request["address_space"],
            request.get("work_limit"),
        )
    except BaseException:  # noqa: BLE001 - reported through the stderr file
        import traceback

        traceback.print_exc()
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


def serve(requests, replies) -> None:
    """Answer requests (see the module docstring) until the input ends."""
    for line in requests:
        if not line.strip():
            continue
        request = json.loads(line)
        pid = os.fork()
        if pid == 0:
            _child(request)
        replies.write(json.dumps({"pid": pid}) + "\n")
        replies.flush()
        _, wait_status = os.waitpid(pid, 0)
        status = os.waitstatus_to_exitcode(wait_status)
        replies.write(json.dumps({"status": status}) + "\n")
        replies.flush()


def main() -> int:
    preload()
    # The protocol owns stdout; anything printed by an import goes to stderr.
    replies = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)
    serve(sys.stdin, replies)
    return 0


if __name__ == "__main__":
    sys.exit(main())
