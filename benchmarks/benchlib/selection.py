"""``--only NAME,...``: which of a script's programs or models to run."""

from __future__ import annotations

import argparse
from collections.abc import Iterable


def selected(
    parser: argparse.ArgumentParser, only: str | None, known: Iterable[str], what: str
) -> list[str]:
    """The names ``only`` lists (comma-separated; every one of ``known`` without it), in
    the order given; a name not among ``known`` is the parser's error (exit 2), naming
    the known ``what`` ("model", "program")."""
    known = list(known)
    names = only.split(",") if only else known
    unknown = sorted(set(names) - set(known))
    if unknown:
        parser.error(f"unknown {what}(s) {', '.join(unknown)}; known: {', '.join(known)}")
    return names
