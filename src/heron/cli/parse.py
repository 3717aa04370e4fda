"""``heron parse FILE.hlo``: parse, verify and print a module in canonical text."""

from __future__ import annotations

import argparse
import sys

from heron.cli.common import load_module


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "parse",
        help="parse, verify and print an HLO module in canonical form",
        description=(
            "Parse an HLO text file, run the verifier, and print the module in"
            " heron's canonical text form (parsing that output gives the same module)."
        ),
    )
    parser.add_argument("file", metavar="FILE.hlo", help="HLO text, as XLA or JAX dump it")
    parser.add_argument(
        "--no-verify",
        action="store_true",
        help="print what was parsed even if the verifier would reject it",
    )
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from heron.hlo.printer import print_module

    module = load_module(args.file, verify=not args.no_verify)
    text = print_module(module)
    sys.stdout.write(text if text.endswith("\n") else text + "\n")
    return 0
