"""Progress over a benchmark's runs, files or cases: bars on a terminal, nothing elsewhere.

``for _ in tracked(range(runs), "runs"):`` iterates as the plain loop does and,
where stdout and stderr are terminals, shows a bar per loop (nested loops
share one display) through the ``heron`` command's renderer
(:mod:`heron.cli.progress`, rich). Piped or redirected (``nox -s bench >
figures.txt``), nothing is drawn, so the figures a benchmark prints are
exactly what they are without it; what a script prints while a bar is shown
appears above the bar.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import TypeVar

from heron.cli.progress import ProgressDisplay

__all__ = ["tracked"]

T = TypeVar("T")

#: The display the open loops share (rich draws one live display at a time).
_display: ProgressDisplay | None = None
_depth = 0


def tracked(items: Iterable[T], description: str, total: int | None = None) -> Iterator[T]:
    """``items``, one bar advancing per item (``total`` defaults to ``len(items)``)."""
    global _display, _depth
    if total is None and hasattr(items, "__len__"):
        total = len(items)  # type: ignore[arg-type]
    if _display is None:
        _display = ProgressDisplay().__enter__()
    _depth += 1
    bar = _display.task(description, total)
    try:
        for item in items:
            yield item
            if bar is not None:
                bar.advance()
    finally:
        if bar is not None:
            bar.finish()
        _depth -= 1
        if _depth == 0:
            _display.__exit__(None, None, None)
            _display = None
