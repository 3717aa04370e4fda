"""``heron xla FILE.hlo [--fusion NAME] [--target h100|a100] [--json]``: heron beside XLA:GPU.

Compiles the module with XLA:GPU, deviceless, in a process of its own (the
optional extra ``heron[xla]``, or ``HERON_XLA_PYTHON``), and with heron for
the same target, and prints each fusion's kernels side by side
(``heron.xla_compare``; docs/xla.md). XLA not installed, or an XLA failure
(a CHECK failure aborts XLA's process): one error line, exit status 2.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from heron.cli.common import CommandError, check_output_directory, load_module

TARGETS = ("h100", "a100")


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "xla",
        help="compile a module with XLA:GPU (deviceless) and heron; compare kernel by kernel",
        description=(
            "Compile an HLO module with the real XLA:GPU compiler, without a GPU (the optional"
            " extra heron[xla]), and with heron for the same target, and print per fusion:"
            " hero/emitter, launch, shared memory, registers and spills (ptxas -v on both),"
            " PTX instructions, global loads/stores and their widths, .nc loads, atomics,"
            " shuffles, barriers and compile time."
        ),
    )
    parser.add_argument("file", metavar="FILE.hlo", help="HLO text, as XLA or JAX dump it")
    parser.add_argument("--fusion", metavar="NAME", help="only this fusion (heron's name)")
    parser.add_argument(
        "--target", choices=TARGETS, default="h100", help="the device (default h100)"
    )
    parser.add_argument("--json", action="store_true", help="print the comparison as JSON")
    parser.add_argument("--dump-dir", metavar="DIR", help="keep XLA's dump folder here")
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    try:
        from heron.xla_compare import XlaNotInstalledError, find_xla
        from heron.xla_compare.compare import compare_module
        from heron.xla_compare.report import comparison_record, format_comparison
    except ImportError as exc:
        raise CommandError(
            "XLA:GPU comparison is not installed: pip install 'heron[xla]' (from a checkout:"
            " uv pip install -e '.[xla]', or pip install -r local-packages.txt -e '.[xla]';"
            f" {exc.name or exc} is missing)"
        ) from exc
    try:
        installation = find_xla()
    except XlaNotInstalledError as exc:
        raise CommandError(str(exc)) from exc
    module = load_module(args.file)
    dump = Path(args.dump_dir) if args.dump_dir else None
    if dump is not None:
        check_output_directory(dump, f"--dump-dir {args.dump_dir}", create=True)
    comparison = compare_module(module, args.file, args.target, args.fusion, installation, dump)
    if comparison.xla_error:
        raise CommandError(f"XLA: {comparison.xla_error}")
    if args.json:
        print(json.dumps(comparison_record(comparison), indent=1))
    else:
        print(format_comparison(comparison))
    return 0
