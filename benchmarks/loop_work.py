"""What heron and XLA:GPU run inside loops, per iteration, on the corpora (issue 30).

    python benchmarks/loop_work.py [--corpus programs,models] [--only NAME,...] [FILE.hlo ...]

A loop's body runs once an iteration: a copy or a kernel there costs its launch (or
its node in a graph) every time, and a copy is work XLA may not do at all. For each
program of the corpora with a ``while`` (or each FILE.hlo given, beside which
``FILE.xla.hlo`` holds XLA:GPU's optimized module, as ``heron xla --dump-dir``
writes it), this counts the ``copy`` instructions and the kernels (fusions and
library calls) of heron's prepared module (the GPU pipeline for the h100 preset,
copy insertion and the scheduler: :func:`heron.compiler.executable.prepare_module`)
and of XLA's optimized module stored beside the program (``xla_gpu_optimized.hlo``),
by loop depth: depth 1 is a loop body's, depth 2 a body's inside a body's. Totals
over the programs close the table; nothing is timed and no GPU or XLA is needed.

Differences that are not heron's to close show as such: XLA wraps some slices in
kernels of their own (``wrapped_slice``) that heron reads in place, and fuses
broadcasts into each reader where heron shares one kernel's result.
"""

from __future__ import annotations

import argparse
import sys
from collections import Counter
from pathlib import Path

REPOSITORY = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(Path(__file__).resolve().parent))

from benchlib.selection import selected  # noqa: E402

#: What runs on the device for an instruction of a scheduled module.
_KERNEL_OPCODES = frozenset({"fusion", "custom-call"})


def work_by_depth(module) -> dict[int, Counter[str]]:
    """Copies and kernels of ``module``'s entry and the computations it runs, by the
    depth of loops they run inside (conditionals and calls count as their caller)."""
    work: dict[int, Counter[str]] = {}

    def walk(computation, depth: int) -> None:
        counts = work.setdefault(depth, Counter())
        for inst in computation.instructions:
            if inst.opcode == "copy":
                counts["copies"] += 1
            elif inst.opcode in _KERNEL_OPCODES:
                counts["kernels"] += 1
            if inst.opcode == "while":
                walk(inst.called("condition"), depth + 1)
                walk(inst.called("body"), depth + 1)
            elif inst.opcode in ("conditional", "call"):
                for callee in inst.called_computations():
                    walk(callee, depth)

    walk(module.entry, 0)
    return work


def _corpus_programs(corpora: list[str]) -> dict[str, tuple[Path, Path]]:
    found: dict[str, tuple[Path, Path]] = {}
    for corpus in corpora:
        for directory in sorted((REPOSITORY / corpus).iterdir()):
            module, optimized = directory / "module.hlo", directory / "xla_gpu_optimized.hlo"
            if module.is_file() and optimized.is_file() and " while(" in module.read_text():
                found[f"{corpus}/{directory.name}"] = (module, optimized)
    return found


def _row(name: str, heron: dict[int, Counter[str]], xla: dict[int, Counter[str]]) -> str:
    depths = sorted(set(heron) | set(xla) - {0})
    cells = []
    for depth in depths:
        if depth == 0:
            continue
        h, x = heron.get(depth, Counter()), xla.get(depth, Counter())
        copies = f"{h['copies']:3d}/{x['copies']:<3d}"
        kernels = f"{h['kernels']:3d}/{x['kernels']:<3d}"
        cells.append(f"d{depth} copies {copies} kernels {kernels}")
    return f"{name:58s} " + "  ".join(cells)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("files", nargs="*", type=Path, metavar="FILE.hlo")
    parser.add_argument("--corpus", default="programs,models")
    parser.add_argument("--only", help="comma-separated program names (corpus/name)")
    args = parser.parse_args(argv)

    from heron.compiler.executable import prepare_module
    from heron.hlo.errors import HloError
    from heron.hlo.parser import parse_module_file
    from heron.target import presets

    if args.files:
        programs = {}
        for path in args.files:
            beside = path.with_suffix(".xla.hlo")
            if not beside.is_file():
                parser.error(f"{path}: no XLA module beside it ({beside})")
            programs[str(path)] = (path, beside)
    else:
        programs = _corpus_programs(args.corpus.split(","))
        names = selected(parser, args.only, programs, "program")
        programs = {name: programs[name] for name in names}

    target = presets()["h100"]
    totals = {"heron": Counter(), "xla": Counter()}
    print(f"{'program':58s} in loop bodies at depth d: heron/XLA")
    for name, (module_path, xla_path) in programs.items():
        try:
            prepared, _ = prepare_module(parse_module_file(module_path), target)
            xla = work_by_depth(parse_module_file(xla_path))
        except (OSError, HloError) as exc:  # the file, named, not a traceback
            raise SystemExit(f"loop_work: {name}: {exc}") from None
        heron = work_by_depth(prepared)
        print(_row(name, heron, xla), flush=True)
        for side, work in (("heron", heron), ("xla", xla)):
            for depth, counts in work.items():
                if depth > 0:
                    totals[side].update(counts)
    h, x = totals["heron"], totals["xla"]
    print(
        f"{'total in loop bodies':58s} copies {h['copies']}/{x['copies']}"
        f"  kernels {h['kernels']}/{x['kernels']}  ({len(programs)} programs)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
