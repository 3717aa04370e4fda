"""Entry point of the ``heron`` command: argument parsing and error reporting.

The exit-status contract (docs/reliability.md, "The contract"):

- 0: success;
- 1: a disagreement (``heron check``, ``heron run --check``), and nothing else;
- 2: bad or refused input (bad HLO, a verifier error, an unsupported op, a
  missing file, arguments that do not fit, an unwritable output, an
  allocation over the memory budget): one message on stderr,
  ``file:line:col: error: ...`` where a location is known, no traceback;
- 3: an internal error, an exception heron did not expect (a bug in heron):
  one line naming it as such; ``heron --debug`` (or ``HERON_DEBUG=1``) prints
  the traceback too.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
import traceback
from collections.abc import Sequence

from heron.cli import __version__, progress
from heron.cli.common import CommandError
from heron.hlo.errors import HloError
from heron.hlo.plugin_loading import PluginError
from heron.target import TargetError

#: Subcommand modules, in the order ``heron --help`` lists them. To add one,
#: write ``heron/cli/<name>.py`` with ``register(subparsers)`` and list it here.
COMMANDS = (
    "heron.cli.parse",
    "heron.cli.opt",
    "heron.cli.run",
    "heron.cli.indexing",
    "heron.cli.emit",
    "heron.cli.compile",
    "heron.cli.check",
    "heron.cli.plugins",
    "heron.cli.targets",
    "heron.cli.xla",
    "heron.cli.profile",
    "heron.cli.report",
)

EXIT_DISAGREEMENT = 1
EXIT_INPUT_ERROR = 2
EXIT_INTERNAL_ERROR = 3
#: Set to 1 for ``--debug``'s tracebacks without the option.
DEBUG_ENV = "HERON_DEBUG"


def _memory_budget(text: str) -> int:
    from heron.hlo.memory_budget import parse_size

    try:
        return parse_size(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="heron",
        description="heron: XLA:GPU-style fusion code generation in Python.",
    )
    parser.add_argument("--version", action="version", version=f"heron {__version__}")
    _add_global_options(parser, default=None)
    subparsers = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name in COMMANDS:
        importlib.import_module(name).register(subparsers)
    # Accepted after the command too (`heron run x.hlo --memory-budget 1G`); given
    # there, they override the ones before it.
    for command in subparsers.choices.values():
        _add_global_options(command, default=argparse.SUPPRESS)
    return parser


def _add_global_options(parser: argparse.ArgumentParser, default: object) -> None:
    parser.add_argument(
        "--debug",
        action="store_true",
        default=default if default is argparse.SUPPRESS else False,
        help=f"print the traceback of an internal error (exit status 3); also {DEBUG_ENV}=1",
    )
    parser.add_argument(
        "--quiet",
        action="store_true",
        default=default if default is argparse.SUPPRESS else False,
        help="no progress display (drawn only when stdout and stderr are terminals anyway)",
    )
    parser.add_argument(
        "--memory-budget",
        type=_memory_budget,
        default=default,
        metavar="SIZE",
        help="refuse (exit 2) any allocation that would take the host past SIZE bytes"
        " (512M, 8G, ...); default HERON_MEMORY_BUDGET, else half the available memory",
    )


def main(argv: Sequence[str] | None = None) -> int:
    from heron.hlo import memory_budget

    args = build_parser().parse_args(argv)
    debug = args.debug or os.environ.get(DEBUG_ENV, "").strip() not in ("", "0")
    memory_budget.set_budget(args.memory_budget)
    progress.set_quiet(args.quiet)
    try:
        return args.handler(args) or 0
    except HloError as err:
        # An error at a place in the input names the place; any other names the command.
        prefix = "" if err.location is not None else f"heron {args.command}: "
        print(f"{prefix}{err}", file=sys.stderr)
    except TargetError as err:  # a device that cannot be described: the user's words
        print(f"heron {args.command}: {err}", file=sys.stderr)
    except (CommandError, PluginError) as err:
        print(f"heron {args.command}: error: {err}", file=sys.stderr)
    except BrokenPipeError:
        # `heron parse big.hlo | head`: the reader left; that is not an error.
        sys.stderr.close()
        return 0
    except KeyboardInterrupt:
        print(f"heron {args.command}: interrupted", file=sys.stderr)
        return 130
    except MemoryError as err:
        # An allocation the budget did not foresee: still the input's size, not a bug.
        detail = f": {err}" if str(err) else ""
        print(
            f"heron {args.command}: error: out of memory{detail}; the input is too large for"
            f" this machine (memory budget {memory_budget.format_size(memory_budget.budget())})",
            file=sys.stderr,
        )
    except Exception as err:  # noqa: BLE001 - the internal-error path
        return _internal_error(args.command, err, debug)
    finally:
        memory_budget.set_budget(None)
        progress.set_quiet(False)
    return EXIT_INPUT_ERROR


def _internal_error(command: str, err: BaseException, debug: bool) -> int:
    """One line naming a bug in heron (exit 3); the traceback only with ``--debug``."""
    if debug:
        traceback.print_exception(err, file=sys.stderr)
    detail = str(err).splitlines()[0] if str(err) else ""
    how = "" if debug else f"; run 'heron --debug {command} ...' for the traceback"
    print(
        f"heron {command}: internal error (a bug in heron, please report it):"
        f" {type(err).__name__}{': ' + detail if detail else ''}{how}",
        file=sys.stderr,
    )
    return EXIT_INTERNAL_ERROR


if __name__ == "__main__":
    sys.exit(main())
