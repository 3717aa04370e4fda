"""What counts as a finding, and its signature (for grouping a thousand into a few).

The contract (docs/reliability.md): 0 success, 1 disagreement, 2 bad or
refused input with one message, 3 an internal error; no traceback without
``--debug``; nothing allocated past the budget; no signal, no hang.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from heron_fuzz.worker import WORK_LIMIT_ENV

#: `file:line:col: error: ...`, then the offending line and a caret line.
_LOCATED = re.compile(r"^\S.*:\d+:\d+: error: ")
_CARET = re.compile(r"^\s*\^[~^]*\s*$")


@dataclass
class Finding:
    """One broken promise of one command of one case."""

    kind: str  # internal-error, traceback, exit-N, signal, timeout, multi-line, memory, slow...
    command: int | None  # index into the case's commands; None: the whole process
    message: str

    @property
    def signature(self) -> str:
        return f"{self.kind}: {signature(self.message)}"


def signature(message: str) -> str:
    """The message's first line with what varies between cases masked: paths,
    quoted names, numbers. Two findings with one signature are most likely one bug."""
    lines = [line for line in message.strip().splitlines() if line.strip()]
    # A traceback's last line names the exception; a message's first line says it all.
    line = lines[-1] if lines and lines[0].startswith("Traceback") else (lines[0] if lines else "")
    line = re.sub(r"\S*/\S+", "PATH", line)
    line = re.sub(r"'[^']*'", "'…'", line)
    line = re.sub(r"\d+", "N", line)
    return line[:200]


def one_message(stderr: str) -> bool:
    """An exit-2 message is one line, or a located one with its source line and caret."""
    lines = [line for line in stderr.rstrip("\n").split("\n")]
    if len(lines) == 1:
        return bool(lines[0].strip())
    if _LOCATED.match(lines[0]) and len(lines) == 3 and _CARET.match(lines[2]):
        return True
    return False


def judge_command(
    index: int,
    status: int | str,
    stderr: str,
    stdout: str,
    peak_rss: int,
    rss_limit: int,
) -> list[Finding]:
    """The findings of one command's outcome.

    A disagreement (status 1) is returned as a finding of kind "disagreement":
    the runner decides whether it counts (a generated fusion is valid by
    construction, so it does) or is a note to triage (a mutant that happens to
    verify: a wrong kernel or a wrong reference, or a tolerance).
    ``heron check`` prints its refusals in its report on stdout: an empty
    stderr is then no silent refusal.
    """
    found: list[Finding] = []
    if status == "escaped":
        found.append(Finding("escaped-exception", index, stderr))
    elif status == 3:
        found.append(Finding("internal-error", index, stderr))
    elif status not in (0, 1, 2):
        found.append(Finding(f"exit-{status}", index, stderr))
    if "Traceback" in stderr and status not in ("escaped",):
        found.append(Finding("traceback", index, stderr))
    if status == 2:
        if not stderr.strip():
            if not stdout.strip():
                found.append(Finding("silent-refusal", index, "(no message)"))
        elif not one_message(stderr):
            found.append(Finding("multi-line-error", index, stderr))
        if "out of memory" in stderr:
            found.append(Finding("memory", index, stderr))
    if status == 1:
        found.append(Finding("disagreement", index, _disagreement(stdout, stderr)))
    if status == 2 and WORK_LIMIT_ENV in stdout + stderr:
        found.append(Finding("slow", index, _work_limit_line(stdout + "\n" + stderr)))
    if peak_rss > rss_limit:
        found.append(
            Finding("memory", index, f"peak RSS {peak_rss >> 20} MiB over {rss_limit >> 20} MiB")
        )
    return found


def _work_limit_line(text: str) -> str:
    return next(line.strip() for line in text.splitlines() if WORK_LIMIT_ENV in line)


def _disagreement(stdout: str, stderr: str) -> str:
    """The line of the report that says what disagreed (for the signature)."""
    for line in (stdout + "\n" + stderr).splitlines():
        if any(word in line for word in ("DISAGREE", "disagree", "differ", "FAIL", "outside")):
            return line.strip()
    return (stderr or stdout).strip()[:500]
