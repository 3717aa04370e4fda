"""``heron report FILE.hlo -o REPORT.html [--target NAME]``: one HTML page of the compile.

Compiles the whole program as ``heron compile --executable`` does and writes
one self-contained page (:mod:`heron.report`): the optimized module as a
graph of fusions coloured by their emitter (laid out by Graphviz's dot from
the graphviz-pure wheel), per kernel its hero, launch, partition, indexing
maps, IR after every stage and PTX statistics, the thunk sequence with
command buffers, the buffer assignment as memory over time with its peak,
and the ``heron xla`` comparison when XLA:GPU is installed. Opening it
fetches nothing. The output is checked before any work and written
atomically.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from heron.cli.common import (
    CommandError,
    add_target_arguments,
    check_output_file,
    load_module,
    refuse_tiled_layouts,
    resolve_target,
    write_atomically,
)


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "report",
        help="write one self-contained HTML page of a module's compile (graph, kernels,"
        " thunks, memory)",
        description=(
            "Compile an HLO module into an executable for a target and write one HTML page"
            " that needs nothing else: the fusion graph (coloured by emitter), each kernel's"
            " hero, launch, partition, indexing maps, IR after every stage and PTX statistics,"
            " the thunk sequence with command buffers, memory over time with the peak, and"
            " the XLA:GPU comparison when heron[xla] is installed."
        ),
    )
    parser.add_argument("file", metavar="FILE.hlo", help="HLO text, as XLA or JAX dump it")
    parser.add_argument(
        "-o", "--output", metavar="OUT.html", required=True, help="the page to write"
    )
    add_target_arguments(parser, "to compile for")
    parser.add_argument(
        "--no-xla",
        action="store_true",
        help="do not compare with XLA:GPU even when it is installed (it takes a while)",
    )
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from heron.report import GraphvizError, build_report

    output = Path(args.output)
    check_output_file(output, "-o")
    target = resolve_target(args)
    module = load_module(args.file)
    refuse_tiled_layouts(module, "heron report")
    try:
        built = build_report(module, target, source=args.file, compare_with_xla=not args.no_xla)
    except GraphvizError as exc:
        raise CommandError(str(exc)) from exc
    page = built.html.encode()
    write_atomically(output, page, "-o")
    report = built.report
    print(
        f"module {report.module}: {_count(len(report.fusion_nodes), 'fusion')},"
        f" {_count(len(report.kernels), 'kernel')} ({report.backend}),"
        f" {_count(len(report.thunks), 'thunk')}, peak memory {report.memory.peak_bytes:,} bytes"
    )
    if not args.no_xla and report.xla_comparison is None:
        print(f"  no XLA comparison: {report.xla_note}")
    print(f"  wrote {output} ({len(page):,} bytes)")  # bytes, not characters
    return 0


def _count(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"
