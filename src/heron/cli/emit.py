"""``heron emit FILE.hlo``: the MLIR of a fusion, right after emission or after any pass.

Like XLA's ``fusion_to_mlir``: hero selection picks the emitter, which
writes the ``emitted`` stage of docs/pipeline.md. ``--after PASS`` runs
heron's passes up to PASS first; ``--print-ir-after-all`` prints every
stage, each under a ``// -----// IR after STAGE //----- //`` line (MLIR
comments, so the output stays parseable stage by stage).
"""

from __future__ import annotations

import argparse
import sys

from heron.cli.common import (
    CommandError,
    add_target_arguments,
    load_module,
    refuse_tiled_layouts,
    resolve_target,
)


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "emit",
        help="print a fusion's MLIR after emission (or after a pass)",
        description=(
            "Emit the fusions of an HLO module's entry computation with their hero emitters"
            " and print the MLIR, right after emission by default. For a corpus file without"
            " ENTRY, the fusion under test."
        ),
    )
    parser.add_argument("file", metavar="FILE.hlo", help="HLO text, as XLA or JAX dump it")
    parser.add_argument(
        "--fusion", metavar="NAME", help="only this fusion (instruction or fused computation name)"
    )
    stages = parser.add_mutually_exclusive_group()
    stages.add_argument(
        "--after",
        metavar="PASS",
        help="run heron's passes up to PASS and print the result ('emitted' runs none)",
    )
    stages.add_argument(
        "--print-ir-after-all",
        action="store_true",
        help="print the IR after emission and after every pass",
    )
    add_target_arguments(parser, "the passes prepare the kernel for")
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from heron.compiler import compile_fusion, selected_fusions
    from heron.emitters.pipeline import pass_names

    target = resolve_target(args)
    stop = args.after or ("lower-tensors" if args.print_ir_after_all else "emitted")
    if stop not in pass_names():
        raise CommandError(
            f"--after {stop}: unknown pass {stop!r}; the passes are: {', '.join(pass_names())}"
            " ('heron compile --dump-dir' shows the backend's stages too)"
        )
    module = load_module(args.file)
    refuse_tiled_layouts(module, "heron emit")
    fusions = selected_fusions(module, args.fusion)
    out = sys.stdout
    dump = None
    if args.print_ir_after_all:

        def dump(stage: str, text: str) -> None:
            out.write(f"// -----// IR after {stage} //----- //\n{text}\n")

    for fusion in fusions:
        if len(fusions) > 1:
            out.write(f"// ===== fusion {fusion.name} =====\n")
        compiled = compile_fusion(fusion, target, dump=dump, stop_after=stop)
        if not args.print_ir_after_all:
            out.write(f"{compiled.module}\n")
    return 0
