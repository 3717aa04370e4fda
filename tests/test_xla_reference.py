"""heron launches each corpus kernel as XLA:GPU does, or docs/emitters.md says why not.

tests/data/xla_reference.json is XLA's own answer for every corpus file
(deviceless XLA:GPU for an H100, made by ``nox -s xla-reference``; no XLA is
needed here). Each file is emitted by heron for the h100 preset and its
launch (blocks x threads per block) compared with XLA's. A difference must be
a row of the exceptions table in docs/emitters.md ("Launches that differ from
XLA's": file, heron launch, XLA launch, reason), and a row must stay true: a
file heron now launches like XLA, or whose launches are no longer the ones
listed, fails until the row is removed or corrected.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
TABLE = ROOT / "tests" / "data" / "xla_reference.json"
EXCEPTIONS_DOC = ROOT / "docs" / "emitters.md"
SECTION = "## Launches that differ from XLA's"


def _table() -> dict:
    return json.loads(TABLE.read_text())


def _exceptions() -> dict[str, tuple[str, str, str]]:
    """file -> (heron launch, XLA launch, reason), from the section's markdown table."""
    text = EXCEPTIONS_DOC.read_text()
    assert SECTION in text, f"docs/emitters.md has no section {SECTION!r}"
    section = text.split(SECTION, 1)[1]
    section = re.split(r"^## ", section, maxsplit=1, flags=re.MULTILINE)[0]
    rows: dict[str, tuple[str, str, str]] = {}
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if not line.lstrip().startswith("|") or len(cells) < 4:
            continue
        if cells[0].lower() == "file" or set(cells[0]) <= set("-: "):
            continue
        file = cells[0].strip("`")
        assert file not in rows, f"docs/emitters.md lists {file} twice"
        rows[file] = (cells[1].strip("`"), cells[2].strip("`"), " | ".join(cells[3:]))
    return rows


TABLE_FILES = sorted(_table()["files"])


def _xla_launch(entry: dict) -> str:
    return "; ".join((pair["xla"] or {}).get("launch", "none") for pair in entry["kernels"])


def _heron_launch(path: Path) -> str:
    from heron.compiler import Target, compile_fusion, fusions_of
    from heron.hlo.parser import parse_module_file

    target = Target.preset("h100")
    launches = []
    for fusion in fusions_of(parse_module_file(path)):
        launch = compile_fusion(fusion, target, "cuda", stop_after="emitted").launch
        launches.append(f"{launch.num_blocks}x{launch.thread_x}")
    return "; ".join(launches)


def test_the_table_says_where_it_comes_from():
    table = _table()
    assert table["target"] == "h100"
    assert re.fullmatch(r"\d{4}-\d\d-\d\d", table["date"])
    assert table["xla"]["plugin"].startswith("jax-cuda13-pjrt ")
    assert table["xla"]["jaxlib"]
    for file, entry in table["files"].items():
        assert entry["xla_error"] is None, f"{file}: XLA failed: {entry['xla_error']}"
        assert entry["kernels"], file
        for pair in entry["kernels"]:
            assert pair["xla"] is not None and pair["heron"] is not None, file


def test_the_table_covers_the_corpus(corpus_dir):
    files = sorted(p.relative_to(corpus_dir).as_posix() for p in corpus_dir.glob("*/*/*.hlo"))
    assert files == TABLE_FILES, "the corpus changed: regenerate with `nox -s xla-reference`"


def test_every_exception_names_a_table_file_and_a_reason():
    for file, (heron, xla, reason) in _exceptions().items():
        assert file in TABLE_FILES, f"docs/emitters.md: {file} is not a corpus file"
        assert heron != xla, f"docs/emitters.md: {file} lists the same launch twice"
        assert len(reason) > 20, f"docs/emitters.md: {file} needs a measured reason"


@pytest.mark.parametrize("file", TABLE_FILES)
def test_launch_equals_xla_or_is_a_listed_exception(file, corpus_dir):
    entry = _table()["files"][file]
    xla = _xla_launch(entry)
    heron = _heron_launch(corpus_dir / file)
    exceptions = _exceptions()
    if heron == xla:
        assert file not in exceptions, (
            f"{file}: heron now launches {heron} like XLA; remove its row from the table"
            f" {SECTION!r} in docs/emitters.md"
        )
        return
    assert file in exceptions, (
        f"{file}: heron launches {heron}, XLA {xla}: make them equal, or add the row"
        f" `| {file} | {heron} | {xla} | reason |` to {SECTION!r} in docs/emitters.md"
    )
    listed_heron, listed_xla, _ = exceptions[file]
    assert (listed_heron, listed_xla) == (heron, xla), (
        f"{file}: docs/emitters.md lists heron {listed_heron} vs XLA {listed_xla}, but heron"
        f" now launches {heron} and XLA {xla}: correct the row"
    )
