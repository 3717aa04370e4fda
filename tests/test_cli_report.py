"""``heron report``: the page written, its errors, and the XLA comparison in it.

No XLA is needed: as in test_cli_xla.py, a fake "XLA Python" (HERON_XLA_PYTHON)
replays the dump the real XLA made for gpu/scatter/add.hlo.
"""

from __future__ import annotations

import stat
import sys
from pathlib import Path

import pytest

from heron.cli.main import main

ROOT = Path(__file__).resolve().parent.parent
PROGRAMS = ROOT / "programs"
DUMP = ROOT / "packages" / "xla-compare" / "tests" / "data" / "scatter_add_dump"


def heron(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_the_page_is_written(tmp_path, capsys):
    output = tmp_path / "softmax.html"
    code, out, err = heron(
        capsys, "report", str(PROGRAMS / "softmax" / "module.hlo"), "-o", str(output), "--no-xla"
    )
    assert code == 0, err
    page = output.read_text()
    assert page.startswith("<!DOCTYPE html>")
    assert 'id="memory-picture"' in page and 'class="node fusion' in page
    assert "module jit__lambda: 1 fusion, 1 kernel (" in out
    # the file's size in bytes (the page holds non-ASCII characters: issue 31)
    assert f"wrote {output} ({output.stat().st_size:,} bytes)" in out
    assert output.stat().st_size > len(page)


def test_an_unwritable_output_is_refused_before_any_work(tmp_path, capsys):
    code, out, err = heron(
        capsys,
        "report",
        str(PROGRAMS / "softmax" / "module.hlo"),
        "-o",
        str(tmp_path / "missing" / "r.html"),
    )
    assert code == 2 and out == ""
    assert "does not exist" in err


def test_a_missing_dot_is_one_line(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(sys, "executable", str(tmp_path / "python"))
    monkeypatch.setenv("PATH", str(tmp_path))
    code, _, err = heron(
        capsys,
        "report",
        str(PROGRAMS / "softmax" / "module.hlo"),
        "-o",
        str(tmp_path / "r.html"),
        "--no-xla",
    )
    assert code == 2
    assert err.strip().startswith("heron report: error: the 'graphviz-pure' executable")
    assert not (tmp_path / "r.html").exists()


def test_the_xla_comparison_is_in_the_page(corpus_dir, tmp_path, capsys, monkeypatch):
    pytest.importorskip("heron.xla_compare")
    script = tmp_path / "fake-xla-python"
    script.write_text(
        f"#!{sys.executable}\n"
        "import json, shutil, sys, pathlib\n"
        "request = json.loads(sys.stdin.read())\n"
        f"for f in pathlib.Path({str(DUMP)!r}).iterdir():\n"
        "    shutil.copy(f, pathlib.Path(request['dump_dir']) / f.name)\n"
        "print(json.dumps({'ok': True, 'seconds': 0.25, 'plugin_version': 'fake',"
        " 'jaxlib_version': 'fake', 'pjrt_api': '0.0'}))\n"
    )
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv("HERON_XLA_PYTHON", str(script))
    monkeypatch.delenv("HERON_XLA_PLUGIN", raising=False)
    output = tmp_path / "scatter.html"
    code, out, err = heron(
        capsys, "report", str(corpus_dir / "gpu" / "scatter" / "add.hlo"), "-o", str(output)
    )
    assert code == 0, err
    page = output.read_text()
    assert "XLA kernel &#x27;loop_scatter_fusion&#x27;" in page
    assert 'id="xla-note"' not in page
