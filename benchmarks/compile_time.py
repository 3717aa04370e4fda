"""Compile time per fusion over the loop corpus: HLO text to PTX, split by stage.

For every fusion of every loop-hero corpus file (``common/loop``,
``gpu/convert``) it times, ``--runs`` times (default 3, after one untimed
warm-up compile that pays the imports): parsing the file, then
:func:`heron.compiler.compile_fusion`'s own per-stage timings: emission (hero
selection, partitioning, elemental emission, verification), each heron pass,
and the backend's stages for the h100 preset (sm_90): the MLIR lowering to
LLVM IR (``llvm-ir``) and llvmlite O3 + PTX generation (``ptx``). ptxas is not
part of it (the compile stops after the ``ptx`` stage: the PTX is the product;
cubins are an option). With a ROCm target every stage runs (LLVM IR, object,
linked HSACO). Each stage keeps its median over the runs; a fusion's time is
the sum of its stage medians (parse split evenly over the fusions of its file).

It prints one table: per stage, the median and the worst over the fusions
(and which fusion is the worst), then the total, with its median and worst.
Files that fail to compile are listed, not timed.

Aim: median under 150 ms per fusion.

Run: ``python benchmarks/compile_time.py [--corpus DIR] [--runs R] [--target NAME] [--arch A]``
(the corpus is ``$HERON_CORPUS``, else ``../shared/corpus/xla`` beside the repository).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

from benchlib.progress import tracked

from heron.compiler import Target, compile_fusion, fusions_of
from heron.hlo import parse_module_file
from heron.hlo.errors import HloError

REPO_ROOT = Path(__file__).resolve().parent.parent
LOOP_FOLDERS = ("common/loop", "gpu/convert")


def default_corpus() -> Path:
    override = os.environ.get("HERON_CORPUS")
    return Path(override) if override else REPO_ROOT.parent / "shared" / "corpus" / "xla"


#: Where a compile for each backend stops: PTX is CUDA's product (ptxas is optional).
STOP_AFTER = {"cuda": "ptx"}


def compile_file(path: Path, target: Target) -> dict[str, dict[str, float]]:
    """{fusion: {stage: seconds}} for one compile of ``path``."""
    start = time.perf_counter()
    module = parse_module_file(path)
    parse = time.perf_counter() - start
    fusions = fusions_of(module)
    result: dict[str, dict[str, float]] = {}
    for fusion in fusions:
        compiled = compile_fusion(fusion, target, stop_after=STOP_AFTER.get(target.backend))
        stages = {"parse": parse / len(fusions), **dict(compiled.timings)}
        result[f"{path.parent.name}/{path.stem}:{fusion.name}"] = stages
    return result


def measure(files: list[Path], runs: int, target: Target):
    """Median seconds per (fusion, stage), and the files that failed."""
    samples: dict[str, dict[str, list[float]]] = {}
    failures: list[tuple[Path, str]] = []
    for path in tracked(files, "files"):
        try:
            for _ in tracked(range(runs), "runs"):
                for fusion, stages in compile_file(path, target).items():
                    per_stage = samples.setdefault(fusion, {})
                    for stage, seconds in stages.items():
                        per_stage.setdefault(stage, []).append(seconds)
        except HloError as exc:
            failures.append((path, str(exc).splitlines()[0]))
            samples = {k: v for k, v in samples.items() if not k.startswith(path.stem)}
    medians = {
        fusion: {stage: statistics.median(values) for stage, values in stages.items()}
        for fusion, stages in samples.items()
    }
    return medians, failures


def print_table(medians: dict[str, dict[str, float]]) -> None:
    stages: list[str] = []
    for per_stage in medians.values():
        for stage in per_stage:
            if stage not in stages:
                stages.append(stage)
    totals = {fusion: sum(per_stage.values()) for fusion, per_stage in medians.items()}
    width = max(len(s) for s in [*stages, "total"])
    print(f"{'stage':<{width}}  {'median ms':>9}  {'worst ms':>9}  worst fusion")
    for stage in stages:
        values = {f: s[stage] for f, s in medians.items() if stage in s}
        worst = max(values, key=values.get)
        print(
            f"{stage:<{width}}  {statistics.median(values.values()) * 1000:9.1f}"
            f"  {values[worst] * 1000:9.1f}  {worst}"
        )
    worst = max(totals, key=totals.get)
    print(
        f"{'total':<{width}}  {statistics.median(totals.values()) * 1000:9.1f}"
        f"  {totals[worst] * 1000:9.1f}  {worst}"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--corpus", type=Path, default=default_corpus())
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--target", default=None, help="a preset, or cuda/rocm (default h100)")
    parser.add_argument("--arch", default=None, help="the arch (sm_90, gfx942, ...)")
    args = parser.parse_args(argv)
    target = Target.resolve(args.target, args.arch)
    files = [p for folder in LOOP_FOLDERS for p in sorted((args.corpus / folder).glob("*.hlo"))]
    if not files:
        print(f"no loop corpus files under {args.corpus}", file=sys.stderr)
        return 1
    compile_file(files[0], target)  # warm-up: imports, first contexts
    medians, failures = measure(files, args.runs, target)
    product = "PTX" if target.backend == "cuda" else "HSACO"
    product = f"{product} ({target.name}, {target.arch})"
    print(
        f"compile time per fusion, HLO text to {product}:"
        f" {len(medians)} fusions from {len(files)} files, median of {args.runs} runs"
    )
    print_table(medians)
    for path, message in failures:
        print(f"FAILED {path.relative_to(args.corpus)}: {message}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
