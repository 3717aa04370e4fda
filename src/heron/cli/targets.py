"""``heron targets [NAME] [--arch ARCH]``: the devices heron compiles for.

Without a name, one line per preset (``Target.summary``), marking the default
of each backend, which ``--target cuda``/``--target rocm`` (and no ``--target``
at all: cuda's) stand for. With a name (or ``--arch``), every field of the
Target that ``--target NAME --arch ARCH`` builds on the other commands, and
where its numbers come from.
"""

from __future__ import annotations

import argparse

import attrs

from heron.cli.common import resolve_target


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "targets",
        help="list the target device presets (--target NAME on other commands)",
        description=(
            "List the target presets heron compiles for, one line each; with a name (or"
            " --arch), every field of that Target and its source."
        ),
    )
    parser.add_argument(
        "name",
        nargs="?",
        metavar="NAME",
        help="show this target in full: a preset, or cuda/rocm for that backend's default",
    )
    parser.add_argument(
        "--arch", metavar="ARCH", help="with NAME, that preset for another arch; alone, its preset"
    )
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from heron.target import BACKENDS, default_target, presets

    if args.name is None and args.arch is None:
        defaults = {default_target(backend).name: backend for backend in BACKENDS}
        for name, target in presets().items():
            mark = f"  (default for {defaults[name]})" if name in defaults else ""
            print(f"{target.summary()}{mark}")
        return 0
    target = resolve_target(argparse.Namespace(target=args.name, arch=args.arch))
    width = max(len(field.name) for field in attrs.fields(type(target)))
    for field in attrs.fields(type(target)):
        value = getattr(target, field.name)
        if field.name == "op_cycles":  # a hundred pairs: one op per line, its types beside
            _print_op_cycles(value, width)
            continue
        print(f"{field.name:<{width}}  {value}")
    return 0


def _print_op_cycles(pairs: tuple[tuple[str, int], ...], width: int) -> None:
    """``op_cycles`` as ``divide: f32 19, f64 526, c128 2280`` lines, one per opcode."""
    if not pairs:
        print(f"{'op_cycles':<{width}}  (none measured)")
        return
    by_opcode: dict[str, list[str]] = {}
    for key, cycles in sorted(pairs, key=lambda pair: pair[0].partition(".")[::2]):
        opcode, _, element_type = key.partition(".")
        by_opcode.setdefault(opcode, []).append(f"{element_type} {cycles}")
    label = "op_cycles"
    for opcode, entries in by_opcode.items():
        print(f"{label:<{width}}  {opcode}: {', '.join(entries)}")
        label = ""
