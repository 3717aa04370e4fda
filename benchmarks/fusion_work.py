"""The work heron's fusion passes do on one module: candidate bodies built, instructions
cloned into them, and the HLO pipeline's CPU time, for this tree or another.

The fusion passes build a candidate fusion's body to ask whether an emitter takes it
and what it costs, and most candidates are refused; the instructions cloned into
them are what a change to how candidates are chosen saves, and, unlike wall time on
a shared machine, they do not drift. Each run parses the module and runs the
pipeline ``heron opt --target h100`` runs (``opt_time.heron_pipeline``), counting
every :func:`heron.compiler.fusion.builder.build_fusion` a pass makes through its
:class:`~heron.compiler.fusion.context.FusionContext`, and reads the process's CPU
time (``time.process_time``: less moved by other work on the machine than wall
time, not unmoved).

Run: ``python benchmarks/fusion_work.py MODULE.hlo [--tree DIR] [--runs N]``;
``--tree`` runs another checkout's sources (a ``git worktree`` of the baseline) in a
process of its own, so that two trees can be compared on the same module.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def measure(path: str) -> tuple[int, int, float]:
    """(bodies built, instructions cloned into them, pipeline CPU seconds) of one run."""
    from opt_time import heron_pipeline

    import heron.compiler.fusion.builder as builder
    import heron.compiler.fusion.context as context
    from heron.hlo.parser import parse_module_file
    from heron.hlo.passes import run_pipeline

    counts = [0, 0]
    build = builder.build_fusion

    def counted(members, outputs, **options):
        candidate = build(members, outputs, **options)
        counts[0] += 1
        counts[1] += len(candidate.body.instructions)
        return candidate

    context.build_fusion = counted
    try:
        module = parse_module_file(path)
        start = time.process_time()
        run_pipeline(module, heron_pipeline()[1])
        seconds = time.process_time() - start
    finally:
        context.build_fusion = build
    return counts[0], counts[1], seconds


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("module", help="an HLO module as JAX prints it")
    parser.add_argument("--tree", help="another heron checkout whose sources to run")
    parser.add_argument("--runs", type=int, default=1)
    args = parser.parse_args(argv)
    if args.tree is not None:
        tree = Path(args.tree).resolve()
        sources = [tree / "src", *sorted((tree / "packages").glob("*/src"))]
        command = [sys.executable, str(Path(__file__).resolve()), args.module]
        command += ["--runs", str(args.runs)]
        env_path = ":".join(str(s) for s in sources)
        return subprocess.run(command, env={"PYTHONPATH": env_path, **_environment()}).returncode
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import heron.compiler

    runs = [measure(args.module) for _ in range(args.runs)]
    built, cloned, _ = runs[0]
    seconds = statistics.median(run[2] for run in runs)
    print(f"tree: {Path(heron.compiler.__file__).parents[5]}")
    print(f"{args.module}: {built} bodies built, {cloned} instructions cloned,")
    print(f"  HLO pipeline {seconds:.2f} s CPU (median of {args.runs})")
    return 0


def _environment() -> dict[str, str]:
    import os

    return {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}


if __name__ == "__main__":
    raise SystemExit(main())
