"""Errors that point at the HLO text they are about.

Every error heron raises for bad input derives from ``HloError`` and, where
the input came from text, carries a ``SourceLocation`` so the message reads
``file:line:col: error: ...`` followed by the offending line and a caret, the
way compilers report. The CLI prints ``str(error)`` and exits 2.
"""

from __future__ import annotations

import attrs


@attrs.frozen
class SourceLocation:
    """A 1-based line and column in a named source, with the line's text."""

    file: str
    line: int
    column: int
    line_text: str = ""

    def __str__(self) -> str:
        return f"{self.file}:{self.line}:{self.column}"

    def excerpt(self) -> str:
        """The offending line and a caret under the column."""
        if not self.line_text:
            return ""
        text = self.line_text.rstrip("\n")
        caret = " " * max(0, self.column - 1) + "^"
        return f"  {text}\n  {caret}"


class HloError(Exception):
    """Base class for errors about HLO input."""

    def __init__(self, message: str, location: SourceLocation | None = None):
        super().__init__(message)
        self.message = message
        self.location = location

    def __str__(self) -> str:
        if self.location is None:
            return f"error: {self.message}"
        text = f"{self.location}: error: {self.message}"
        excerpt = self.location.excerpt()
        return f"{text}\n{excerpt}" if excerpt else text


class HloParseError(HloError):
    """The text is not well-formed HLO."""


class HloVerifyError(HloError):
    """The module is well-formed but inconsistent (shapes, operands, cycles...)."""


class HloEvaluationError(HloError):
    """The reference evaluator could not evaluate an instruction."""


class UnsupportedError(HloError):
    """A valid construct that this part of heron does not handle (yet)."""


class HloInputError(HloError):
    """Arguments given for a computation do not match its parameters."""
