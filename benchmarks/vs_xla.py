"""heron's kernels against XLA:GPU's over the corpus, from the committed reference table.

Reads tests/data/xla_reference.json (every corpus file compiled by XLA:GPU,
deviceless, and by heron for an H100, both PTX measured with one ptxas;
``nox -s xla-reference`` regenerates it) and prints issue 14's figures:

- same launch (blocks x threads per block) as XLA: % of files, overall and per hero;
- PTX and SASS instructions per kernel: geomean of heron/XLA, overall and per hero
  (SASS where the table has it: tables from 2026-11-29 on);
- registers (ptxas -v): geomean of heron/XLA, overall and per hero;
- files with ``ld.global.nc`` loads, FMAs, approximate instructions, atomics,
  spills, on each side; shuffles and shared memory where they differ; SASS
  slow paths (calls into an IEEE division's or square root's subroutine).

Run: ``python benchmarks/vs_xla.py [--table PATH] [--markdown]``. Needs no XLA.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
from collections import defaultdict
from pathlib import Path

TABLE = Path(__file__).resolve().parent.parent / "tests" / "data" / "xla_reference.json"


def geomean(values: list[float]) -> float:
    return math.exp(sum(math.log(v) for v in values) / len(values)) if values else float("nan")


def _pairs(table: dict):
    """(file, hero, heron record, XLA record) of every kernel pair both sides compiled."""
    for file, entry in table["files"].items():
        for pair in entry["kernels"]:
            heron, xla = pair["heron"], pair["xla"]
            if heron and xla and "instructions" in heron and "instructions" in xla:
                yield file, entry["hero"], heron, xla


def summary(table: dict) -> dict:
    heroes: dict[str, dict] = defaultdict(lambda: defaultdict(list))
    files_with: dict[str, dict[str, set]] = {
        measure: {"heron": set(), "xla": set()}
        for measure in (
            "nc_loads",
            "fma",
            "approx",
            "atomics",
            "spills",
            "shared memory",
            "shuffles",
            "SASS slow paths",
        )
    }
    for file, hero, heron, xla in _pairs(table):
        for group in (heroes[hero], heroes["all"]):
            group["same"].append(heron["launch"] == xla["launch"])
            group["instructions"].append(heron["instructions"] / max(xla["instructions"], 1))
            if heron.get("registers") and xla.get("registers"):
                group["registers"].append(heron["registers"] / xla["registers"])
            if heron.get("sass_instructions") and xla.get("sass_instructions"):
                group["sass"].append(heron["sass_instructions"] / xla["sass_instructions"])
            group["files"].append(file)
        for side, record in (("heron", heron), ("xla", xla)):
            for measure in ("nc_loads", "fma", "approx", "atomics"):
                if record.get(measure):
                    files_with[measure][side].add(file)
            if record.get("spill_stores") or record.get("spill_loads"):
                files_with["spills"][side].add(file)
            if record.get("shared_memory") or record.get("dynamic_shared_memory"):
                files_with["shared memory"][side].add(file)
            if record.get("shuffles"):
                files_with["shuffles"][side].add(file)
            if record.get("sass_calls"):
                files_with["SASS slow paths"][side].add(file)
    return {"heroes": heroes, "files_with": files_with}


def print_summary(table: dict, markdown: bool) -> None:
    result = summary(table)
    heroes = result["heroes"]
    xla = table["xla"]
    print(
        f"XLA:GPU {xla['plugin']} (jaxlib {xla['jaxlib']}), deviceless, target"
        f" {table['target']}, table of {table['date']}; ptxas: {xla.get('ptxas')}"
    )
    print(f"{len(heroes['all']['files'])} kernels in {len(table['files'])} corpus files")
    print()
    header = (
        "hero",
        "kernels",
        "same launch",
        "PTX instr. heron/XLA",
        "SASS instr. heron/XLA",
        "registers heron/XLA",
    )
    rows = []
    order = ["all"] + sorted(h for h in heroes if h != "all")
    for hero in order:
        group = heroes[hero]
        same = sum(group["same"])
        rows.append(
            (
                hero,
                str(len(group["same"])),
                f"{100 * same / len(group['same']):.0f}% ({same})",
                f"{geomean(group['instructions']):.2f}",
                f"{geomean(group['sass']):.2f}" if group["sass"] else "-",
                f"{geomean(group['registers']):.2f}",
            )
        )
    if markdown:
        print("| " + " | ".join(header) + " |")
        print("|---|" + "---:|" * (len(header) - 1))
        for row in rows:
            print("| " + " | ".join(row) + " |")
    else:
        widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
        for row in [header, *rows]:
            print("  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip())
    print()
    print("files with, heron vs XLA:")
    names = {"nc_loads": "ld.global.nc loads", "approx": ".approx instructions"}
    for measure, sides in result["files_with"].items():
        only_xla = len(sides["xla"] - sides["heron"])
        only_heron = len(sides["heron"] - sides["xla"])
        print(
            f"  {names.get(measure, measure)}: heron {len(sides['heron'])}, XLA"
            f" {len(sides['xla'])} (only XLA: {only_xla}, only heron: {only_heron})"
        )
    heron_seconds = [heron["seconds"] for _, _, heron, _ in _pairs(table) if "seconds" in heron]
    xla_seconds = [e["xla_seconds"] for e in table["files"].values() if e.get("xla_seconds")]
    if heron_seconds and xla_seconds:
        print()
        print(
            f"compile time per file, median: heron {statistics.median(heron_seconds):.3f} s"
            " (in process: emission, passes, LLVM, PTX),"
            f" XLA {statistics.median(xla_seconds):.3f} s (PJRT_Compile of the module)"
        )
    differ = [
        (file, heron["launch"], xla["launch"])
        for file, _, heron, xla in _pairs(table)
        if heron["launch"] != xla["launch"]
    ]
    print()
    print(f"launches that differ ({len(differ)}; reasons in docs/emitters.md):")
    for file, heron_launch, xla_launch in differ:
        print(f"  {file}: heron {heron_launch}, XLA {xla_launch}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--table", type=Path, default=TABLE)
    parser.add_argument("--markdown", action="store_true", help="the per-hero table in markdown")
    # `nox -s bench -- --runs 3` hands every script the same options: ignore others'.
    args, _ = parser.parse_known_args()
    print_summary(json.loads(args.table.read_text()), args.markdown)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
