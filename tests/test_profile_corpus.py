"""Corpus acceptance of ``heron profile``: ideal coalescing and no bank conflicts, or a reason.

Every corpus file of the loop, transpose and reduction folders is profiled on
the interpreter for the h100 preset (each fusion alone, its first
:data:`SAMPLE_BLOCKS` blocks: the per-request ratios of a kernel's first
blocks are those of the rest, and the test stays within a minute). Its global
requests must take the ideal number of 32-byte sectors for the bytes they
ask for, and its shared-memory requests no bank conflict
(``heron.harness.profile.deviations`` says where they do not), or the file
must be a row of the exceptions table in docs/profile.md ("Kernels short of
the ideal": file, measured, reason). A row must stay true: a file now at the
ideal, or whose measurement changed, fails until the row is removed or
corrected.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
EXCEPTIONS_DOC = ROOT / "docs" / "profile.md"
SECTION = "## Kernels short of the ideal"
FOLDERS = (
    "common/loop",
    "gpu/transpose",
    "gpu/reduce_column",
    "gpu/reduce_column_small",
    "gpu/reduce_row",
    "gpu/reduce_multirow",
)
SAMPLE_BLOCKS = 8


def _exceptions() -> dict[str, tuple[str, str]]:
    """file -> (measured, reason), from the section's markdown table."""
    text = EXCEPTIONS_DOC.read_text()
    assert SECTION in text, f"docs/profile.md has no section {SECTION!r}"
    section = text.split(SECTION, 1)[1]
    section = re.split(r"^## ", section, maxsplit=1, flags=re.MULTILINE)[0]
    rows: dict[str, tuple[str, str]] = {}
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if not line.lstrip().startswith("|") or len(cells) < 3:
            continue
        if cells[0].lower() == "file" or set(cells[0]) <= set("-: "):
            continue
        file = cells[0].strip("`")
        assert file not in rows, f"docs/profile.md lists {file} twice"
        rows[file] = (cells[1].strip("`"), " | ".join(cells[2:]))
    return rows


def _files() -> list[str]:
    """The profiled corpus files (none without a corpus: the ``corpus_dir`` fixture says why)."""
    override = os.environ.get("HERON_CORPUS")
    root = Path(override).resolve() if override else ROOT.parent / "shared" / "corpus" / "xla"
    return sorted(p.relative_to(root).as_posix() for f in FOLDERS for p in (root / f).glob("*.hlo"))


def measure(path: Path) -> str:
    """The file's deviations from the ideal, as the table's "measured" cell ('' at the ideal)."""
    from heron.harness.profile import deviations, profile_module
    from heron.hlo.errors import HloError
    from heron.hlo.parser import parse_module_file
    from heron.target import Target

    try:
        profiles = profile_module(
            parse_module_file(path),
            Target.preset("h100"),
            resources=False,
            max_blocks=SAMPLE_BLOCKS,
        )
    except HloError as exc:  # a refusal (over the memory budget, unsupported)
        return f"refused: {type(exc).__name__}"
    several = len(profiles) > 1
    parts = []
    for profile in profiles:
        for phrase in deviations(profile.recorder):
            parts.append(f"{profile.fusion}: {phrase}" if several else phrase)
    return "; ".join(parts)


def test_every_exception_names_a_profiled_file_and_a_reason(corpus_dir):
    files = _files()
    assert files, "no corpus files found"
    for file, (measured, reason) in _exceptions().items():
        assert file in files, f"docs/profile.md: {file} is not a profiled corpus file"
        assert measured, f"docs/profile.md: {file} has no measurement"
        assert len(reason) > 40, f"docs/profile.md: {file} needs a measured reason"


@pytest.mark.parametrize("file", _files())
def test_coalescing_and_banks_are_ideal_or_explained(file, corpus_dir):
    measured = measure(corpus_dir / file)
    exceptions = _exceptions()
    if not measured:
        assert file not in exceptions, (
            f"{file}: now at the ideal; remove its row from {SECTION!r} in docs/profile.md"
        )
        return
    assert file in exceptions, (
        f"{file}: {measured}: reach the ideal, or add the row"
        f" `| {file} | {measured} | reason |` to {SECTION!r} in docs/profile.md"
    )
    assert exceptions[file][0] == measured, (
        f"{file}: docs/profile.md lists {exceptions[file][0]!r}, measured now {measured!r}:"
        " correct the row"
    )
