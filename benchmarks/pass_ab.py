"""One of heron's MLIR passes by two source trees, on the same kernels, taking turns: the
ratio a change to the pass makes, and whether it changed what the pass makes.

A pass's share of a whole compile is a few percent of it, smaller than a shared
machine's drift (``compile_ab.py``), and the LLVM stage beside it hides part of it.
Here the kernels of the HLO files named are taken, in this tree, through emission and
the passes before the one measured (for the h100 preset); the module handed to the
pass is saved, and a process per tree (``benchlib.sides``) runs that tree's pass on
each, timed in process time, the two taking turns module by module in alternating
order. Each side also hashes the module the pass leaves, so the table says how many
of them the two trees' passes made the same.

Run, with the baseline checked out beside this tree::

    git worktree add /tmp/heron-baseline REV
    python benchmarks/pass_ab.py /tmp/heron-baseline --pass inline FILE.hlo ... [--runs 3]

With no files: the program corpus's modules. Measured so (docs/benchmarks.md, issue 32):
the inline pass on numpyro's NUTS program, 0.57x its time at 35c6472.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
from pathlib import Path

from benchlib.sides import Side

ROOT = Path(__file__).resolve().parent.parent

#: What each side runs: the pass named, on the module saved in each file named on its
#: standard input; it answers the process seconds and a hash of the module after.
_SIDE = """
import hashlib, sys, time
from mlir import ir
from heron.emitters.dialect.context import make_context
from heron.emitters.pipeline import PipelineOptions, heron_passes
from heron.target import Target
step = next(p for p in heron_passes() if p.name == {name!r})
options = PipelineOptions.for_target(Target.preset("h100"))
context = make_context()
print("ready", flush=True)
for line in sys.stdin:
    text = open(line.strip()).read()
    with context, ir.Location.unknown():
        module = ir.Module.parse(text)
        start = time.process_time()
        step.run(module, options)
        seconds = time.process_time() - start
        digest = hashlib.sha1(str(module).encode()).hexdigest()[:16]
    print(seconds, digest, flush=True)
"""


def _previous_stage(name: str) -> str:
    """The stage whose module the pass ``name`` is handed (``emitted`` for the first)."""
    from heron.emitters.pipeline import pass_names

    names = pass_names()
    if name not in names[1:]:
        raise SystemExit(f"pass_ab: no pass {name!r}; the passes: {', '.join(names[1:])}")
    return names[names.index(name) - 1]


def save_pass_inputs(paths: list[Path], name: str, into: Path) -> list[Path]:
    """The module each kernel of ``paths`` hands the pass ``name``, one file each (a
    fusion no emitter of heron's takes is left out)."""
    from heron.compiler import Target
    from heron.compiler.driver import compile_fusion
    from heron.compiler.executable import PipelineReport, prepare_module
    from heron.hlo import parse_module
    from heron.hlo.errors import HloError, UnsupportedError

    stage = _previous_stage(name)
    target = Target.preset("h100")
    saved: list[Path] = []
    for path in paths:
        try:
            module = parse_module(path.read_text())
            module, _ = prepare_module(module, target, report=PipelineReport())
        except (OSError, HloError) as exc:  # the file, named, not a traceback
            raise SystemExit(f"pass_ab: {path}: {exc}") from None
        # every kernel, in the entry and in the loops' and branches' computations
        for fusion in [inst for inst in module.instructions() if inst.opcode == "fusion"]:
            texts: dict[str, str] = {}
            try:
                compile_fusion(
                    fusion,
                    target,
                    "cuda",
                    dump=lambda at, text, texts=texts: texts.__setitem__(at, text),
                    stop_after=stage,
                )
            except UnsupportedError:
                continue  # a library call's fusion, say: no kernel of heron's to measure
            if stage in texts:
                out = into / f"{len(saved):05d}.mlir"
                out.write_text(texts[stage])
                saved.append(out)
    return saved


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("baseline", type=Path, help="the baseline tree (a heron checkout)")
    parser.add_argument("files", nargs="*", type=Path, help="HLO files (default: programs/)")
    parser.add_argument("--pass", dest="name", default="inline", help="default: inline")
    parser.add_argument("--candidate", type=Path, default=ROOT, help="default: this tree")
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args(argv)
    paths = args.files or sorted((ROOT / "programs").glob("*/module.hlo"))
    trees = {"baseline": args.baseline, "candidate": args.candidate}
    for tree in trees.values():  # before minutes of compiling, not after
        if not any((tree / "packages").glob("*/src")):
            raise SystemExit(f"pass_ab: {tree} holds no packages/*/src: not a heron checkout")
    with tempfile.TemporaryDirectory(prefix="heron-pass-ab-") as folder:
        inputs = save_pass_inputs(paths, args.name, Path(folder))
        code = _SIDE.format(name=args.name)
        sides = {side: Side(tree, code, "pass_ab") for side, tree in trees.items()}
        seconds = {side: [[] for _ in inputs] for side in sides}
        digests: dict[str, list[str]] = {side: [""] * len(inputs) for side in sides}
        try:
            for run in range(args.runs):
                for k, path in enumerate(inputs):
                    order = ("baseline", "candidate")
                    for side in order if (run + k) % 2 == 0 else reversed(order):
                        answer, digest = sides[side].ask(str(path)).split()
                        seconds[side][k].append(float(answer))
                        digests[side][k] = digest
        finally:
            for side in sides.values():
                side.close()
    totals = {side: sum(statistics.median(s) for s in seconds[side]) for side in sides}
    same = sum(a == b for a, b in zip(digests["baseline"], digests["candidate"], strict=True))
    print(
        f"pass {args.name!r} on {len(inputs)} kernels of {len(paths)} files (medians of"
        f" {args.runs} runs, process time): baseline {totals['baseline']:.3f} s, candidate"
        f" {totals['candidate']:.3f} s, ratio {totals['candidate'] / totals['baseline']:.3f};"
        f" the module after the pass the same for {same} of {len(inputs)}"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
