"""``heron-run``: the runtime-only command that loads an executable artefact.

It lives in runtime-core so that a machine with the runtime packages alone (no
MLIR, no llvmlite, no jax) has it. Today it verifies an artefact and describes
it (``--describe``); running one (``--inputs``, ``--output``, ``--backend``)
needs the thunk executor, which is not built yet: asked to run, it says so and
exits 2 rather than pretend. Any refused artefact exits 2 with the reason.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from heron.runtime.core.artefact import ArtefactError, load

__all__ = ["NOT_BUILT_YET", "main"]

NOT_BUILT_YET = (
    "running an artefact (--inputs/--output/--backend) needs heron's thunk executor,"
    " which is not built yet; use --describe to verify and describe the artefact"
)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="heron-run",
        description=(
            "Verify a heron executable artefact (sizes, sha256 of every member, format"
            " version, member names) and describe it. Running it (--inputs, --output,"
            " --backend) is not built yet: it needs the thunk executor, and asking for"
            " it exits 2 with that message. Exit status 2 also for any refused artefact."
        ),
    )
    parser.add_argument("artefact", metavar="ARTEFACT", help="an executable artefact file")
    parser.add_argument(
        "--describe", action="store_true", help="print the verified artefact's manifest summary"
    )
    parser.add_argument("--inputs", metavar="IN.npz", help="(not built yet) the entry's inputs")
    parser.add_argument("--output", metavar="OUT.npz", help="(not built yet) where results go")
    parser.add_argument(
        "--backend", metavar="NAME", help="(not built yet) the device backend to run on"
    )
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        artefact = load(args.artefact)
    except ArtefactError as error:
        print(f"heron-run: refused: {error}", file=sys.stderr)
        return 2
    if args.inputs is not None or args.output is not None or args.backend is not None:
        print(f"heron-run: {NOT_BUILT_YET}", file=sys.stderr)
        return 2
    if args.describe:
        print(artefact.describe())
    else:
        print(f"{args.artefact}: verified ({len(artefact.members()) + 2} members)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
