"""The corpus table in docs/corpus.md lists every corpus file, with all three results passing.

The table is written by ``python -m heron.harness.corpus docs/corpus.md``; the
per-file CI tests (test_corpus_compile.py, test_check_corpus.py) establish
the same results. This test keeps the document honest: a file added to the
corpus, a row dropped, or a row that records a failure makes it fail.
"""

from __future__ import annotations

from pathlib import Path

from heron.harness.corpus import corpus_files, expected_emitter

DOCUMENT = Path(__file__).resolve().parents[1] / "docs" / "corpus.md"


def _rows() -> dict[str, list[str]]:
    rows = {}
    for line in DOCUMENT.read_text().splitlines():
        if not line.startswith("| ") or line.startswith("| file "):
            continue
        cells = [c.strip() for c in line.strip("|").split(" | ")]
        rows[cells[0]] = cells
    return rows


def test_every_corpus_file_has_one_passing_row(corpus_dir):
    rows = _rows()
    names = {str(p.relative_to(corpus_dir)) for p in corpus_files(corpus_dir)}
    assert set(rows) == names, (
        f"missing rows: {sorted(names - set(rows))}; rows for no file: {sorted(set(rows) - names)}"
    )
    for name, (_, hero, device_code, check, *_times) in rows.items():
        assert hero == expected_emitter(corpus_dir / name), (name, hero)
        assert device_code == "ok: sm_80, sm_90, gfx942", (name, device_code)
        assert check == "agrees" or check.startswith("agrees on a shrunk copy"), (name, check)
