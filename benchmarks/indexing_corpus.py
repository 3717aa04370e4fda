"""Indexing analysis time per fusion over the XLA corpus.

For every fusion of every corpus file (the fusion under test, any other
fusion the file holds, or the entry computation of a module without one) it
builds and simplifies the loop emitter's thread-to-output map and the
fusion's output-to-input maps (``fusion_input_maps``), five times, and keeps
the median. It prints the median and the worst of those per-fusion times and
names the worst fusion; fusions the analysis rejects are counted and listed,
not timed.

Baseline, measured in the same run: parsing the same file with
``heron.hlo.parse_module_file`` (median of five), so the figures can be read
against something whose cost is known on any machine.

Aim: median under 5 ms per fusion on a 2-core machine.

Run: ``python benchmarks/indexing_corpus.py [--corpus DIR] [--runs R]``
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

from heron.hlo import parse_module_file
from heron.hlo.errors import HloError
from heron.hlo.ir import Computation, Module
from heron.indexing.indexing_map import IndexingError
from heron.indexing.thread_maps import thread_map_for_shape

REPO_ROOT = Path(__file__).resolve().parent.parent


def default_corpus() -> Path:
    override = os.environ.get("HERON_CORPUS")
    return Path(override) if override else REPO_ROOT.parent / "shared" / "corpus" / "xla"


def fusions(module: Module) -> list[tuple[str, Computation]]:
    """(label, fused computation) for each fusion; the entry when there is none."""
    found = [
        (inst.name, inst.called("calls"))
        for inst in module.instructions()
        if inst.opcode == "fusion"
    ]
    return found or [(module.entry.name, module.entry)]


def analyse(computation: Computation) -> None:
    """The work being timed: thread map plus all operand maps, simplified."""
    from heron.indexing.fusion_indexing import fusion_input_maps

    leaves = list(computation.root_instruction.shape.leaves())
    if leaves:
        thread_map_for_shape(leaves[0])
    fusion_input_maps(computation)


def median_time(function, runs: int) -> float:
    times = []
    for _ in tracked(range(runs), "runs"):
        start = time.perf_counter()
        function()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--corpus", type=Path, default=default_corpus())
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args(argv)
    files = sorted(args.corpus.rglob("*.hlo"))
    if not files:
        print(f"no .hlo files under {args.corpus}", file=sys.stderr)
        return 2

    per_fusion: list[tuple[float, str]] = []
    parse_times: list[float] = []
    failures: list[str] = []
    for path in tracked(files, "files"):
        label_file = str(path.relative_to(args.corpus))
        try:
            module = parse_module_file(path)
        except HloError as err:
            failures.append(f"{label_file}: parse: {err}")
            continue
        parse_times.append(median_time(lambda p=path: parse_module_file(p), args.runs))
        for name, computation in fusions(module):
            label = f"{label_file}:{name}"
            try:
                analyse(computation)  # once untimed: surfaces errors, warms imports
            except (HloError, IndexingError) as err:
                failures.append(f"{label}: {type(err).__name__}: {err}")
                continue
            per_fusion.append((median_time(lambda c=computation: analyse(c), args.runs), label))

    if not per_fusion:
        print("no fusion could be analysed", file=sys.stderr)
        for failure in failures:
            print(f"  {failure}", file=sys.stderr)
        return 1
    times = [t for t, _ in per_fusion]
    worst_time, worst_label = max(per_fusion)
    print(f"corpus: {args.corpus} ({len(files)} files)")
    print(f"fusions analysed: {len(per_fusion)}, rejected: {len(failures)}")
    print(
        f"indexing per fusion (median of {args.runs} runs each): "
        f"median {statistics.median(times) * 1e3:.2f} ms, "
        f"mean {statistics.mean(times) * 1e3:.2f} ms, worst {worst_time * 1e3:.2f} ms"
    )
    print(f"worst fusion: {worst_label}")
    print(
        f"baseline, parse_module_file per file: median {statistics.median(parse_times) * 1e3:.2f}"
        f" ms, worst {max(parse_times) * 1e3:.2f} ms"
    )
    for failure in failures:
        print(f"rejected: {failure}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
