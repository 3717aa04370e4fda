"""What a corpus file's ``// RUN:`` lines ask of ``gpu_test_correctness``.

XLA's corpus files say how they are tested in lit-style comments::

    // RUN: gpu_test_correctness %s --bijection_inputs=neg:0 \\
    // RUN:   --bijection_outputs=neg

A command may continue on the next RUN line after a trailing backslash, and
several commands are joined by pipes. Of the ``gpu_test_correctness``
commands, heron reads the flags that change what ``heron check`` verifies:

* ``--bijection_inputs=HERO:i[,j...]`` (repeatable): the hero's operands
  ``i, j`` (for a bare ``HERO`` every operand it reads element for element:
  a reduce's inputs, not its init values, ``heron.harness.check``), when
  they come from fusion parameters, are read exactly once per element;
* ``--bijection_outputs=HERO`` (repeatable): the outputs the hero produces
  are written exactly once per element;
* ``--abs_error_bound=X`` / ``--rel_error_bound=X``: extra tolerance.

Any other flag of such a command is an error naming it and the line, rather
than a check silently not done.
"""

from __future__ import annotations

import shlex
from pathlib import Path

import attrs

__all__ = ["RunLineError", "RunSpec", "parse_run_lines", "run_commands"]

RUN_PREFIX = "RUN:"
CORRECTNESS_TOOL = "gpu_test_correctness"


class RunLineError(ValueError):
    """A RUN line heron cannot read (an unknown flag, a malformed value)."""


@attrs.frozen
class RunSpec:
    """The ``gpu_test_correctness`` flags of one file (empty when it has none)."""

    #: hero name -> operand numbers, in the order the flags give them; () for every operand
    #: the hero reads element for element (a bare ``--bijection_inputs=HERO``).
    bijection_inputs: dict[str, tuple[int, ...]] = attrs.field(factory=dict)
    bijection_outputs: tuple[str, ...] = ()
    abs_error_bound: float | None = None
    rel_error_bound: float | None = None
    #: Whether any RUN line runs gpu_test_correctness.
    correctness_test: bool = False

    @property
    def heroes(self) -> set[str]:
        return set(self.bijection_inputs) | set(self.bijection_outputs)


@attrs.frozen
class _Command:
    text: str
    line: int  # 1-based number of the RUN line it starts on


def run_commands(text: str) -> list[_Command]:
    """Every command of the RUN lines (continuations joined; pipes split), with its line."""
    commands: list[_Command] = []
    pending: list[str] = []
    start = 0
    for number, raw in enumerate(text.splitlines(), start=1):
        stripped = raw.strip()
        if not stripped.startswith("//"):
            continue
        body = stripped[2:].strip()
        if not body.startswith(RUN_PREFIX):
            continue
        body = body[len(RUN_PREFIX) :].strip()
        if not pending:
            start = number
        if body.endswith("\\"):
            pending.append(body[:-1].strip())
            continue
        pending.append(body)
        joined = " ".join(part for part in pending if part)
        commands += [_Command(part.strip(), start) for part in joined.split("|") if part.strip()]
        pending = []
    if pending:
        joined = " ".join(part for part in pending if part)
        commands += [_Command(part.strip(), start) for part in joined.split("|") if part.strip()]
    return commands


def _flag(word: str, following: list[str], where: str) -> tuple[str, str]:
    """(name, value) of ``--name=value`` or ``--name value`` (consuming from ``following``)."""
    name, equals, value = word.partition("=")
    if not equals:
        if not following:
            raise RunLineError(f"{where}: flag {name} has no value")
        value = following.pop(0)
    return name, value


def _bijection_inputs(value: str, where: str) -> tuple[str, tuple[int, ...]]:
    """``HERO:i[,j...]``, or a bare ``HERO`` (every operand: an empty tuple)."""
    hero, colon, numbers = value.partition(":")
    if not hero or (colon and not numbers):
        raise RunLineError(f"{where}: --bijection_inputs={value}: expected HERO or HERO:i[,j...]")
    if not colon:
        return hero, ()
    try:
        operands = tuple(int(n) for n in numbers.split(","))
    except ValueError:
        raise RunLineError(
            f"{where}: --bijection_inputs={value}: operand numbers must be integers"
        ) from None
    if any(n < 0 for n in operands):
        raise RunLineError(f"{where}: --bijection_inputs={value}: negative operand number")
    return hero, operands


def _number(name: str, value: str, where: str) -> float:
    try:
        number = float(value)
    except ValueError:
        raise RunLineError(f"{where}: {name}={value}: not a number") from None
    if not number >= 0:
        raise RunLineError(f"{where}: {name}={value}: must be a non-negative number")
    return number


def parse_run_lines(text: str, source: str = "<text>") -> RunSpec:
    """The ``gpu_test_correctness`` flags of a file's RUN lines (see the module docstring)."""
    inputs: dict[str, list[int]] = {}
    outputs: list[str] = []
    bounds: dict[str, float] = {}
    found = False
    for command in run_commands(text):
        words = shlex.split(command.text)
        if not words or words[0] != CORRECTNESS_TOOL:
            continue
        found = True
        where = f"{source}:{command.line}: {CORRECTNESS_TOOL}"
        rest = [w for w in words[1:] if w != "%s"]
        while rest:
            word = rest.pop(0)
            if not word.startswith("--"):
                raise RunLineError(f"{where}: unexpected argument {word!r}")
            name, value = _flag(word, rest, where)
            if name == "--bijection_inputs":
                hero, operands = _bijection_inputs(value, where)
                known = inputs.setdefault(hero, [])
                known += [n for n in operands if n not in known] if operands else [-1]
            elif name == "--bijection_outputs":
                if not value:
                    raise RunLineError(f"{where}: --bijection_outputs needs a hero name")
                if value not in outputs:
                    outputs.append(value)
            elif name in ("--abs_error_bound", "--rel_error_bound"):
                bounds[name] = _number(name, value, where)
            else:
                raise RunLineError(
                    f"{where}: unknown flag {name} (heron check reads"
                    " --bijection_inputs, --bijection_outputs,"
                    " --abs_error_bound, --rel_error_bound)"
                )
    return RunSpec(
        bijection_inputs={
            hero: () if -1 in numbers else tuple(numbers) for hero, numbers in inputs.items()
        },
        bijection_outputs=tuple(outputs),
        abs_error_bound=bounds.get("--abs_error_bound"),
        rel_error_bound=bounds.get("--rel_error_bound"),
        correctness_test=found,
    )


def parse_run_lines_of(path: str | Path) -> RunSpec:
    """:func:`parse_run_lines` of the file at ``path``."""
    file = Path(path)
    return parse_run_lines(file.read_text(), file.name)
