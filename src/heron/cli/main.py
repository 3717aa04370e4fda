"""Entry point of the ``heron`` command: argument parsing and error reporting.

Errors about the user's input (bad HLO, a missing file, arguments that do not
fit, an unknown backend) print one message on stderr and exit with status 2,
without a traceback: a traceback is for bugs in heron, not for bad input.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

from heron.cli import __version__
from heron.cli.common import CommandError
from heron.hlo.errors import HloError
from heron.hlo.plugin_loading import PluginError

#: Subcommand modules, in the order ``heron --help`` lists them. To add one,
#: write ``heron/cli/<name>.py`` with ``register(subparsers)`` and list it here.
COMMANDS = (
    "heron.cli.parse",
    "heron.cli.run",
    "heron.cli.indexing",
    "heron.cli.emit",
    "heron.cli.compile",
    "heron.cli.check",
    "heron.cli.plugins",
    "heron.cli.targets",
)

EXIT_INPUT_ERROR = 2


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="heron",
        description="heron: XLA:GPU-style fusion code generation in Python.",
    )
    parser.add_argument("--version", action="version", version=f"heron {__version__}")
    subparsers = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name in COMMANDS:
        importlib.import_module(name).register(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.handler(args) or 0
    except HloError as err:
        print(str(err), file=sys.stderr)
    except (CommandError, PluginError) as err:
        print(f"heron {args.command}: error: {err}", file=sys.stderr)
    except BrokenPipeError:
        # `heron parse big.hlo | head`: the reader left; that is not an error.
        sys.stderr.close()
        return 0
    return EXIT_INPUT_ERROR


if __name__ == "__main__":
    sys.exit(main())
