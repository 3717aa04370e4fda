"""``heron indexing FILE.hlo``: the indexing maps of a fusion, as the emitters would see them.

One line per (fused parameter, distinct access): ``NAME: MAP``, the simplified
map from the fusion's output index to the index it reads in that parameter.
``--threads`` adds the loop emitter's thread-to-output map (``threads: MAP``)
for the ``--target``/``--arch`` device, whose block-size limit bounds the launch.
This is the quickest way to see what the indexing analysis makes of a
fusion, e.g. whether a transpose's reads are recognised or a broadcast's
dimension dropped.
"""

from __future__ import annotations

import argparse
import sys

from heron.cli.common import CommandError, add_target_arguments, load_module, resolve_target
from heron.hlo.ir import Computation, Instruction, Module


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "indexing",
        help="print a fusion's output-to-input indexing maps",
        description=(
            "Print, for each parameter of a fusion, the distinct simplified maps from the"
            " fusion's output index to the parameter's index (one 'NAME: MAP' line each)."
            " Without --fusion the entry root's fusion is used (for a corpus file, the fusion"
            " under test); a module without a fusion at its entry root is read as one fusion"
            " of its entry computation."
        ),
    )
    parser.add_argument("file", metavar="FILE.hlo", help="HLO text, as XLA or JAX dump it")
    parser.add_argument(
        "--fusion",
        metavar="NAME",
        help="the fusion instruction (or its fused computation) to analyse",
    )
    parser.add_argument(
        "--threads",
        action="store_true",
        help="also print the loop emitter's thread-to-output map ('threads: MAP')",
    )
    add_target_arguments(parser, "whose launch limits --threads uses")
    parser.set_defaults(handler=run)


def fusion_instructions(module: Module) -> list[Instruction]:
    """Every fusion instruction of the module, in any computation, in text order.

    Not ``heron.compiler.fusions_of`` (the entry computation's fusions, the
    kernels a compile makes): any fusion can be analysed, wherever it is called.
    """
    return [inst for inst in module.instructions() if inst.opcode == "fusion"]


def select_computation(module: Module, name: str | None) -> tuple[str, Computation]:
    """The fused computation to analyse and a label for it; CommandError for an unknown name."""
    fusions = fusion_instructions(module)
    if name is None:
        root = module.entry.root_instruction
        if root.opcode == "fusion":
            return root.name, root.called("calls")
        return module.entry.name, module.entry
    for fusion in fusions:
        called = fusion.called("calls")
        if name in (fusion.name, called.name):
            return fusion.name, called
    known = ", ".join(f.name for f in fusions) or "none"
    raise CommandError(f"no fusion named '{name}' in {module.source}; fusions: {known}")


def indexing_lines(computation: Computation, threads: bool = False, target=None) -> list[str]:
    """The ``NAME: MAP`` lines for ``computation`` (and ``threads: MAP`` when asked).

    ``threads``: the loop emitter's launch and thread-to-output map for the
    computation's output, on ``target`` (a ``heron.compiler.Target``; default
    h100), as ``heron.plugins.iteration`` decides them (vector size from the
    element count and the target's resident threads).
    """
    from heron.indexing.fusion_indexing import fusion_input_maps

    maps = fusion_input_maps(computation)
    lines = []
    for parameter in sorted(maps, key=lambda p: p.parameter_number or 0):
        for indexing_map in maps[parameter]:
            lines.append(f"{parameter.name}: {indexing_map.format()}")
    if threads:
        from heron.plugins.iteration import loop_iteration
        from heron.target import Target

        target = target or Target.resolve(None, None)
        shape = computation.root_instruction.shape
        leaves = list(shape.leaves())
        if not leaves:
            raise CommandError(f"computation '{computation.name}' has no array output")
        # The loop emitter's own launch and map (one rule: heron.plugins.iteration).
        iteration = loop_iteration(leaves[0], computation, target)
        lines.append(f"threads: {iteration.thread_map.format()}")
    return lines


def run(args: argparse.Namespace) -> int:
    from heron.indexing.indexing_map import IndexingError

    target = resolve_target(args)
    module = load_module(args.file)
    _, computation = select_computation(module, args.fusion)
    try:
        lines = indexing_lines(computation, threads=args.threads, target=target)
    except IndexingError as err:
        raise CommandError(f"{args.file}: {err}") from err
    sys.stdout.write("".join(line + "\n" for line in lines))
    return 0
