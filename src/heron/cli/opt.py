"""``heron opt FILE.hlo``: run HLO passes and print the optimized module.

The counterpart of XLA's ``*after_optimizations.txt`` dump: the module as the
pass pipeline leaves it. Without ``--target`` the pipeline is the
target-independent simplification; ``--target NAME`` runs the GPU pipeline for
that Target (simplification, then the fusion passes; a module already fused
keeps its fusions): the module ``heron run`` executes. ``--passes`` runs named
passes instead of the pipeline (the GPU passes made for ``--target``, or for
the default Target); ``--dump-dir`` writes the module after every pass that
changed it; ``--buffers`` adds copy insertion and the scheduler and prints the
buffer assignment (docs/buffers.md) instead of the module.
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
    parser.add_argument(
        "--buffers",
        metavar="ALIGNMENT",
        nargs="?",
        type=int,
        const=0,
        help="then run copy-insertion and the scheduler and print the buffer assignment"
        " (allocations, values, peak memory) instead of the module; temporaries'"
        " offsets are multiples of ALIGNMENT (default: the kernel ABI's buffer alignment)",
    )
    parser.set_defaults(handler=run)


def _buffer_listing(module, alignment: int) -> str:
    from heron.emitters.kernel_arguments import BUFFER_ALIGNMENT
    from heron.hlo.buffers import assign_buffers

    if alignment < 0:
        raise CommandError(f"--buffers alignment must be positive, got {alignment}")
    return assign_buffers(module, alignment=alignment or BUFFER_ALIGNMENT).listing()


def run(args: argparse.Namespace) -> int:
    from heron.compiler import Target, default_target
    from heron.compiler.fusion import gpu_pass, program_pipeline, register_gpu_passes
    from heron.hlo.passes import (  # noqa: F401  (they register)
        PASSES,
        copy_insertion,
        pass_named,
        run_pipeline,
        scheduler,
        simplification_pipeline,
    )
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
    if args.buffers is not None:
        pipeline = pipeline_of(
            [pipeline, pass_named("copy-insertion"), pass_named("scheduler")], "buffers"
        )
    report = run_pipeline(module, pipeline, dump_dir=args.dump_dir, dump_passes=args.dump_passes)
    text = print_module(module) if args.buffers is None else _buffer_listing(module, args.buffers)
    sys.stdout.write(text if text.endswith("\n") else text + "\n")
    for group in report.unconverged:
        print(f"note: {group} did not reach a fixed point", file=sys.stderr)
    if args.timing:
        print(report.timing_table(), file=sys.stderr)
    return 0
