"""Progress on a terminal for long work, drawn with rich; nothing anywhere else.

The packages that do the work report it through plain callbacks, which cost
nothing when unset: the interpreter device's ``progress`` (blocks of a launch),
the executor's ``Executable.on_thunk`` (thunks run), a compiler function
handed to ``compile_program`` (kernels compiled). The commands render them
here, and only here (no package imports rich).

A display is live only when both stdout and stderr are terminals and
``heron --quiet`` was not given: piped or captured output (files, CI logs,
the tests' ``capsys``) is exactly what it is without progress, byte for
byte. On a terminal the bars are transient (erased when the work ends), and
what the command prints meanwhile appears above them.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

__all__ = ["ProgressDisplay", "ProgressTask", "enabled", "set_quiet"]

_quiet = False

#: Redraws a second: rich draws from a thread of its own, which takes the GIL from the
#: work it shows; a few times a second is live enough and costs little.
REFRESH_PER_SECOND = 4


def set_quiet(quiet: bool) -> None:
    """``heron --quiet``: no progress display for the rest of the command."""
    global _quiet
    _quiet = bool(quiet)


def enabled() -> bool:
    """Whether progress is drawn: not ``--quiet``, and stdout and stderr are terminals."""
    return not _quiet and _is_terminal(sys.stdout) and _is_terminal(sys.stderr)


def _is_terminal(stream: Any) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):  # no isatty, or a closed stream
        return False


class ProgressTask:
    """One bar of a :class:`ProgressDisplay` (``total`` None: a count and a spinner)."""

    def __init__(self, progress: Any, task_id: Any) -> None:
        self._progress = progress
        self._id = task_id

    def advance(self, steps: int = 1, description: str | None = None) -> None:
        extra = {} if description is None else {"description": description}
        self._progress.update(self._id, advance=steps, **extra)

    def update(
        self, completed: int, total: int | None = None, description: str | None = None
    ) -> None:
        extra: dict[str, Any] = {}
        if total is not None:
            extra["total"] = total
        if description is not None:
            extra["description"] = description
        self._progress.update(self._id, completed=completed, **extra)

    def finish(self) -> None:
        """Remove the bar (its work is done)."""
        self._progress.remove_task(self._id)


class ProgressDisplay:
    """Bars on the terminal while a command works (a context manager).

    ``console``: draw on this rich Console whatever :func:`enabled` says
    (tests give ``Console(force_terminal=True, file=StringIO())``); without
    one, a live display exists only where :func:`enabled`. When none does,
    :meth:`task` gives None and every callback maker gives None, so the
    packages are handed no callback at all.
    """

    def __init__(self, console: Any = None) -> None:
        self.active = console is not None or enabled()
        self._console = console
        self._progress: Any = None

    def __enter__(self) -> ProgressDisplay:
        if self.active:
            from rich.console import Console
            from rich.progress import (
                BarColumn,
                MofNCompleteColumn,
                Progress,
                SpinnerColumn,
                TextColumn,
                TimeElapsedColumn,
            )

            console = self._console or Console(file=sys.stdout)
            self._progress = Progress(
                SpinnerColumn(),
                TextColumn("{task.description}"),
                BarColumn(),
                MofNCompleteColumn(),
                TimeElapsedColumn(),
                console=console,
                refresh_per_second=REFRESH_PER_SECOND,
                transient=self._console is None,
                redirect_stdout=self._console is None,
                redirect_stderr=self._console is None,
            )
            self._progress.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        if self._progress is not None:
            self._progress.stop()
            self._progress = None

    def task(self, description: str, total: int | None = None) -> ProgressTask | None:
        """A new bar, or None when nothing is drawn."""
        if self._progress is None:
            return None
        return ProgressTask(self._progress, self._progress.add_task(description, total=total))

    # -- callbacks for the packages -------------------------------------------------------

    @staticmethod
    def counting(function: Callable[..., Any], bar: ProgressTask | None) -> Callable[..., Any]:
        """``function``, advancing ``bar`` by one per call (kernels compiled); as is without."""
        if bar is None:
            return function

        def counted(*args: Any, **kwargs: Any) -> Any:
            result = function(*args, **kwargs)
            bar.advance()
            return result

        return counted

    def launches(self) -> Callable[[str, int, int], None] | None:
        """For the interpreter device's ``progress``: a bar per launch over its blocks.

        The bar of a launch is reused by the next one (a new kernel name and grid).
        """
        bar = self.task("kernel")
        if bar is None:
            return None

        def told(kernel_name: str, done: int, total: int) -> None:
            bar.update(done, total, f"kernel {kernel_name}: blocks")

        return told

    def thunks(self, total: int | None) -> Callable[[Any, Any], None] | None:
        """For ``Executable.on_thunk``: a bar over the leaf thunks run (``total`` if known)."""
        bar = self.task("thunks", total)
        if bar is None:
            return None

        def told(thunk: Any, record: Any) -> None:
            bar.advance(description=f"thunks ({record.kind} {record.path})")

        return told
