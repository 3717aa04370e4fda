"""jax's ``jax_enable_x64`` for one test or one module, restored afterwards.

It is a process-wide flag: suites in the same pytest worker set it either way
(f64 and c128 need it; the corpus was lowered without it, and with it a literal
``0`` becomes s64 beside an s32 index). Every suite that depends on it says so
with :func:`jax_x64` in a fixture, instead of its own save/set/restore.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

__all__ = ["jax_x64"]


@contextlib.contextmanager
def jax_x64(enabled: bool) -> Iterator[bool]:
    """``jax_enable_x64`` is ``enabled`` inside the block, as it was after it."""
    import jax

    previous = jax.config.jax_enable_x64
    jax.config.update("jax_enable_x64", enabled)
    try:
        yield enabled
    finally:
        jax.config.update("jax_enable_x64", previous)
