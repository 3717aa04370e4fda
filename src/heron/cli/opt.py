"""``heron opt FILE.hlo``: run HLO passes and print the optimized module.

The counterpart of XLA's ``*after_optimizations.txt`` dump: the module as the
pass pipeline leaves it. Without ``--target`` the pipeline is the
target-independent simplification; ``--target NAME`` runs the GPU pipeline for
that Target (simplification, then the fusion passes; a module already fused
keeps its fusions): the module ``heron run`` executes. ``--passes`` runs named
passes instead of the pipeline (the GPU passes made for ``--target``, or for
the default Target); ``--dump-dir`` writes the module after every pass that
changed it.
"""

from __future__ import annotations

import argparse
import sys

from heron.cli.common import CommandError, load_module


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "opt",
        help="run HLO passes on a module and print the result",
        description=(
            "Run heron's HLO pass pipeline (or the passes named by --passes) on a module,"
            " verifying after every pass, and print the optimized module."
        ),
    )
    parser.add_argument(
        "file", metavar="FILE.hlo", nargs="?", help="HLO text, as XLA or JAX dump it"
    )
    parser.add_argument(
        "--passes",
        metavar="A,B,...",
        help="run these registered passes, in this order, instead of the pipeline"
        " (--list-passes names them)",
    )
    parser.add_argument(
        "--target",
        metavar="NAME",
        help="run the GPU pipeline (simplification, then fusion) for this target preset"
        " (heron targets lists them); the GPU passes named by --passes use it too",
    )
    parser.add_argument(
        "--list-passes", action="store_true", help="list the registered passes and exit"
    )
    parser.add_argument(
        "--dump-dir",
        metavar="DIR",
        help="write the module before, after each pass that changed it, and at the end",
    )
    parser.add_argument(
        "--dump-passes",
        metavar="REGEX",
        help="with --dump-dir: dump only after passes whose path matches REGEX",
    )
    parser.add_argument(
        "--timing", action="store_true", help="print the time each pass took (to stderr)"
    )
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from heron.compiler import Target, default_target
    from heron.compiler.fusion import gpu_pass, program_pipeline, register_gpu_passes
    from heron.hlo.passes import PASSES, run_pipeline, simplification_pipeline
    from heron.hlo.passes.manager import pipeline_of
    from heron.hlo.printer import print_module

    target = Target.preset(args.target) if args.target is not None else default_target()
    register_gpu_passes(default_target())
    if args.list_passes:
        width = max(len(name) for name in PASSES)
        for name, step in PASSES.items():
            print(f"{name:<{width}}  {step.description}")
        return 0
    if args.dump_passes is not None and args.dump_dir is None:
        raise CommandError("--dump-passes needs --dump-dir")
    if args.file is None:
        raise CommandError("heron opt needs FILE.hlo (or --list-passes)")
    module = load_module(args.file)
    if args.passes:
        names = [name.strip() for name in args.passes.split(",") if name.strip()]
        pipeline = pipeline_of([gpu_pass(name, target) for name in names])
    elif args.target is not None:
        pipeline = program_pipeline(module, target)  # what heron run runs
    else:
        pipeline = simplification_pipeline()
    report = run_pipeline(module, pipeline, dump_dir=args.dump_dir, dump_passes=args.dump_passes)
    text = print_module(module)
    sys.stdout.write(text if text.endswith("\n") else text + "\n")
    for group in report.unconverged:
        print(f"note: {group} did not reach a fixed point", file=sys.stderr)
    if args.timing:
        print(report.timing_table(), file=sys.stderr)
    return 0
