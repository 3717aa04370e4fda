"""heron's whole compile of a corpus by two source trees, each compile of one beside the same
compile of the other: the ratio a change makes, measured under the same load.

A change to the compiler that saves a few percent is smaller than the drift of one
corpus run to the next on a shared machine (XLA's own summed time moved 4.2-4.6 s
over one afternoon, docs/benchmarks.md), so two ``opt_time.py`` tables taken apart
do not show it. Here a baseline tree and a candidate tree each compile in a process
of their own (warm, as ``opt_time.py --full`` compiles: the h100 preset, CUDA
kernels, memoised indexing maps forgotten before each compile), and the two
processes take turns module by module, in alternating order, so that both see the
same moments of the machine. The two trees are compared against the same
corpus files (this checkout's ``programs/`` or ``models/``).

Run, with the baseline checked out beside this tree::

    git worktree add /tmp/heron-baseline REV
    python benchmarks/compile_ab.py /tmp/heron-baseline [--candidate DIR] [--runs 5]
        [--models] [--each]

It prints the summed medians, their ratio and the geometric mean of the modules'
ratios (``--each``: every module's). The same tree against itself gives 0.99-1.01
on the program corpus with five runs.
"""

from __future__ import annotations

import argparse
import math
import statistics
from pathlib import Path

from benchlib.sides import Side

ROOT = Path(__file__).resolve().parent.parent

#: What each side's process runs: compile the module named on each line of its standard
#: input, answer the seconds; ``ready`` once warm.
_SIDE = """
import sys, time
sys.path.insert(0, {benchmarks!r})
from opt_time import compile_for_h100, warm_up_heron
from heron.hlo.parser import parse_module
warm_up_heron(True)
texts = {{}}
print("ready", flush=True)
for line in sys.stdin:
    path = line.strip()
    if path not in texts:
        texts[path] = open(path).read()
    module = parse_module(texts[path])
    start = time.perf_counter()
    compile_for_h100(module)
    print(time.perf_counter() - start, flush=True)
"""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("baseline", type=Path, help="the baseline tree (a heron checkout)")
    parser.add_argument("--candidate", type=Path, default=ROOT, help="default: this tree")
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--models", action="store_true", help="the model corpus")
    parser.add_argument("--each", action="store_true", help="every module's medians")
    args = parser.parse_args(argv)
    corpus = ROOT / ("models" if args.models else "programs")
    trees = {"baseline": args.baseline, "candidate": args.candidate}
    paths = sorted(corpus.glob("*/module.hlo"))
    code = _SIDE.format(benchmarks=str(ROOT / "benchmarks"))
    sides = {name: Side(tree, code, "compile_ab") for name, tree in trees.items()}
    seconds: dict[Path, dict[str, list[float]]] = {
        p: {"baseline": [], "candidate": []} for p in paths
    }
    try:
        for run in range(args.runs):
            for k, path in enumerate(paths):
                order = (
                    ("baseline", "candidate") if (run + k) % 2 == 0 else ("candidate", "baseline")
                )
                for name in order:
                    seconds[path][name].append(float(sides[name].ask(str(path))))
    finally:
        for side in sides.values():
            side.close()
    ratios, baseline_sum, candidate_sum = [], 0.0, 0.0
    print(f"{'module':40s} {'baseline s':>10s} {'candidate s':>11s} {'ratio':>6s}")
    for path in paths:
        base = statistics.median(seconds[path]["baseline"])
        cand = statistics.median(seconds[path]["candidate"])
        baseline_sum, candidate_sum = baseline_sum + base, candidate_sum + cand
        ratios.append(cand / base)
        if args.each:
            print(f"{path.parent.name:40s} {base:10.4f} {cand:11.4f} {cand / base:6.2f}")
    geomean = math.exp(statistics.mean(math.log(r) for r in ratios))
    print(
        f"summed over {len(paths)} modules (medians of {args.runs} runs): baseline"
        f" {baseline_sum:.3f} s, candidate {candidate_sum:.3f} s, ratio"
        f" {candidate_sum / baseline_sum:.3f}; geometric mean of the ratios {geomean:.3f}"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
