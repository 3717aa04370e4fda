"""The interpreter's errors: unsupported programs, and what its sanitizer finds.

A :class:`SanitizerError` is a bug in the kernel, found while running it:
an out-of-bounds or misaligned access, a barrier or shuffle reached by part
of a block or warp, shared memory read before any write, two threads of a
block racing on a shared-memory element, two threads of a launch racing on
a global-memory element, a division by zero. Its message
names the kernel, the operation and the first thread that did it.
"""

from __future__ import annotations

from heron.runtime.core.device import DeviceError, DeviceLimitError

__all__ = ["InterpreterError", "SanitizerError", "UnsupportedOperationError", "WorkLimitError"]


class InterpreterError(DeviceError):
    """The interpreter cannot run a program (or a launch of it)."""


class WorkLimitError(InterpreterError, DeviceLimitError):
    """A launch did more work than the interpreter's work limit allows (see
    :class:`heron.runtime.interpreter.engine.WorkCounter`): a valid kernel, too long
    to interpret under the limit the user set."""


class UnsupportedOperationError(InterpreterError):
    """An operation, type or attribute the interpreter does not implement."""


class SanitizerError(InterpreterError):
    """A kernel bug found at run time. ``kind`` is one of :data:`KINDS`."""

    KINDS = (
        "out-of-bounds",
        "misaligned",
        "divergent-barrier",
        "divergent-shuffle",
        "uninitialised-shared-read",
        "shared-memory-race",
        "global-memory-race",
        "division-by-zero",
        "poison-shift",
        "unwritten-output",
        "write-to-constant",
    )

    def __init__(self, kind: str, message: str) -> None:
        if kind not in self.KINDS:
            raise ValueError(f"unknown sanitizer finding {kind!r}")
        super().__init__(f"sanitizer: {kind}: {message}")
        self.kind = kind
