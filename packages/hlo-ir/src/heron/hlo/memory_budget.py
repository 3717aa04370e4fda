"""One memory budget for everything heron allocates on the host.

Random arguments, npz inputs, the reference evaluator's results and the
interpreter device's buffers all call :func:`check` with the number of bytes
they are about to allocate, *before* allocating it. A request over the budget
raises :class:`MemoryBudgetError` (an ``HloInputError``: the CLI prints one
line and exits 2) saying how much would have been needed and what the budget
is, instead of a ``MemoryError`` or the kernel's OOM killer.

Work that holds several allocations at once (``heron check``: two input sets,
their temporaries, the kernel's and the reference's results, and the
interpreter's buffers beside them) takes a :func:`reserve` for what it will
hold before making any of it; every :func:`check` inside counts the
reservations already held, so the budget bounds what is alive together, not
each allocation alone.

The budget, in order of precedence:

1. :func:`set_budget` (the ``heron --memory-budget SIZE`` option);
2. the environment variable ``HERON_MEMORY_BUDGET``;
3. the default, :data:`DEFAULT_FRACTION` of the memory available when it is
   first asked for (``MemAvailable`` in ``/proc/meminfo``, else
   ``os.sysconf``'s available pages), or :data:`FALLBACK_BYTES` where neither
   says.

A SIZE is a number of bytes with an optional binary suffix: ``512M``,
``8GiB``, ``2.5G``, ``1T``, ``1000000``.
"""

from __future__ import annotations

import contextlib
import os
import re
from collections.abc import Iterator

from heron.hlo.errors import HloInputError

ENV = "HERON_MEMORY_BUDGET"
#: The default budget's share of the memory available at start.
DEFAULT_FRACTION = 0.5
#: The default budget where the available memory cannot be read.
FALLBACK_BYTES = 4 * 2**30

_UNITS = {"": 1, "K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40, "P": 2**50}
_SIZE = re.compile(r"\s*([0-9]+(?:\.[0-9]*)?(?:[eE][0-9]+)?)\s*([KMGTP]?)(?:I?B)?\s*\Z", re.I)

_override: int | None = None
_default: int | None = None
#: Reservations held now (see :func:`reserve`): what each is for and its bytes.
_reservations: list[tuple[str, int]] = []


class MemoryBudgetError(HloInputError):
    """An allocation was refused because it would exceed the memory budget."""


def parse_size(text: str) -> int:
    """Bytes from ``512M``, ``8GiB``, ``2.5G``, ``1e9``...; ValueError if not a positive size."""
    match = _SIZE.match(text)
    if match is None:
        raise ValueError(
            f"{text!r} is not a size (a number of bytes, optionally with K, M, G, T: 8G, 512MiB)"
        )
    value = int(float(match.group(1)) * _UNITS[match.group(2).upper()])
    if value <= 0:
        raise ValueError(f"{text!r}: a memory budget must be positive")
    return value


def format_size(nbytes: int) -> str:
    """``2.25 TiB (2473901162496 bytes)``: a readable size with the exact count."""
    for unit, scale in (("PiB", 2**50), ("TiB", 2**40), ("GiB", 2**30), ("MiB", 2**20)):
        if nbytes >= scale:
            return f"{nbytes / scale:.2f} {unit} ({nbytes} bytes)"
    return f"{nbytes} bytes"


def available_memory() -> int | None:
    """Bytes of memory available now (``MemAvailable``, else sysconf), None if unknown."""
    try:
        with open("/proc/meminfo", encoding="ascii", errors="replace") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (AttributeError, ValueError, OSError):
        return None


def default_budget() -> int:
    """:data:`DEFAULT_FRACTION` of the available memory (measured once), or the fallback."""
    global _default
    if _default is None:
        available = available_memory()
        _default = int(available * DEFAULT_FRACTION) if available else FALLBACK_BYTES
    return _default


def set_budget(nbytes: int | None) -> None:
    """Override the budget for this process (None: back to the environment or the default)."""
    global _override
    if nbytes is not None and nbytes <= 0:
        raise ValueError(f"a memory budget must be positive, not {nbytes}")
    _override = nbytes


def budget() -> int:
    """The budget in bytes (see the module docstring for where it comes from)."""
    if _override is not None:
        return _override
    text = os.environ.get(ENV, "").strip()
    if text:
        try:
            return parse_size(text)
        except ValueError as exc:
            raise MemoryBudgetError(f"environment variable {ENV}: {exc}") from None
    return default_budget()


def source() -> str:
    """Where the budget comes from, for messages."""
    if _override is not None:
        return "--memory-budget"
    if os.environ.get(ENV, "").strip():
        return ENV
    return f"the default, {DEFAULT_FRACTION:.0%} of the available memory"


def reserved() -> int:
    """Bytes held by the reservations open now."""
    return sum(nbytes for _, nbytes in _reservations)


def check(nbytes: int, what: str) -> None:
    """Refuse (MemoryBudgetError) to allocate ``nbytes`` for ``what`` over the budget.

    The reservations held now count against the budget too: the message names
    them, since they, not ``what`` alone, may be what does not fit.
    """
    limit = budget()
    held = reserved()
    if nbytes + held > limit:
        beside = ""
        if held:
            names = "; ".join(f"{name}: {format_size(size)}" for name, size in _reservations)
            beside = f" beside {format_size(held)} already reserved ({names})"
        raise MemoryBudgetError(
            f"{what} would need {format_size(nbytes)}{beside}, over the memory budget of"
            f" {format_size(limit)} ({source()}; set it with --memory-budget or {ENV})"
        )


@contextlib.contextmanager
def reserve(nbytes: int, what: str) -> Iterator[None]:
    """Hold ``nbytes`` of the budget for ``what`` while the block runs.

    Checked on entry like an allocation (MemoryBudgetError before anything is
    made); every :func:`check` inside sees it as already in use. Released on
    exit, however the block ends.
    """
    check(nbytes, what)
    entry = (what, nbytes)
    _reservations.append(entry)
    try:
        yield
    finally:
        _reservations.remove(entry)
