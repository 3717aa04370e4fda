"""``heron xla``: heron beside XLA:GPU, and the one-line errors when XLA is missing or aborts.

No XLA is needed: a fake "XLA Python" (HERON_XLA_PYTHON) replays a dump the real
XLA made for gpu/scatter/add.hlo (packages/xla-compare/tests/data/scatter_add_dump),
and another aborts the way an XLA CHECK failure does. When XLA itself is
installed (HERON_XLA_PYTHON set to a real one), one more test runs it.
"""

from __future__ import annotations

import json
import os
import signal
import stat
import sys
from pathlib import Path

import pytest

from heron.cli.main import main

ROOT = Path(__file__).resolve().parent.parent
DUMP = ROOT / "packages" / "xla-compare" / "tests" / "data" / "scatter_add_dump"


def heron(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def _executable(path: Path, text: str) -> Path:
    path.write_text(text)
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


@pytest.fixture
def fake_xla(tmp_path, monkeypatch):
    script = _executable(
        tmp_path / "fake-xla-python",
        f"#!{sys.executable}\n"
        "import json, shutil, sys, pathlib\n"
        "request = json.loads(sys.stdin.read())\n"
        f"for f in pathlib.Path({str(DUMP)!r}).iterdir():\n"
        "    shutil.copy(f, pathlib.Path(request['dump_dir']) / f.name)\n"
        "print(json.dumps({'ok': True, 'seconds': 0.25, 'plugin_version': 'fake',"
        " 'jaxlib_version': 'fake', 'pjrt_api': '0.0'}))\n",
    )
    monkeypatch.setenv("HERON_XLA_PYTHON", str(script))
    monkeypatch.delenv("HERON_XLA_PLUGIN", raising=False)


def test_side_by_side(corpus_dir, fake_xla, capsys):
    pytest.importorskip("mlir")
    code, out, err = heron(capsys, "xla", str(corpus_dir / "gpu" / "scatter" / "add.hlo"))
    assert code == 0, err
    assert "heron fusion 'fusion'  <->  XLA kernel 'loop_scatter_fusion'" in out
    launch = next(line for line in out.splitlines() if "launch (blocks x threads)" in line)
    assert launch.split()[-1] == "same" and launch.count("2x128") == 2
    for row in ("registers", "PTX instructions", ".nc loads", "atomics", "compile time"):
        assert row in out
    assert "no autotuning" in out


def test_json(corpus_dir, fake_xla, capsys, tmp_path):
    pytest.importorskip("mlir")
    dump = tmp_path / "dump"
    code, out, _ = heron(
        capsys,
        "xla",
        str(corpus_dir / "gpu" / "scatter" / "add.hlo"),
        "--json",
        "--dump-dir",
        str(dump),
    )
    assert code == 0
    record = json.loads(out)
    (pair,) = record["pairs"]
    assert pair["same_launch"] is True
    assert pair["heron"]["emitter"] == "scatter"
    assert pair["xla"]["kernel"] == "loop_scatter_fusion"
    assert any(dump.glob("*thunk_sequence.txt"))


def test_xla_not_installed_is_one_line(monkeypatch, capsys, tmp_path):
    monkeypatch.setenv("HERON_XLA_PYTHON", str(tmp_path / "no-python"))
    code, out, err = heron(capsys, "xla", "whatever.hlo")
    assert code == 2 and out == ""
    assert len(err.strip().splitlines()) == 1
    assert "pip install 'heron[xla]'" in err
    assert "from a checkout: uv pip install -e '.[xla]'" in err  # issue 31


def test_xla_not_importable_is_one_line(monkeypatch, capsys):
    import heron.xla_compare.install as install

    monkeypatch.delenv("HERON_XLA_PYTHON", raising=False)
    monkeypatch.delenv("HERON_XLA_PLUGIN", raising=False)
    monkeypatch.setattr(install, "_importable_here", lambda: False)
    code, _, err = heron(capsys, "xla", "whatever.hlo")
    assert code == 2
    assert err.strip() == f"heron xla: error: {install.INSTALL_HINT}"


def test_an_xla_check_failure_is_one_line(corpus_dir, monkeypatch, capsys, tmp_path):
    script = _executable(
        tmp_path / "aborting-python",
        "#!/bin/sh\necho 'F1124 08:00:00.1 7 shape.cc:99] Check failed: has_layout()' >&2\n"
        "kill -ABRT $$\n",
    )
    monkeypatch.setenv("HERON_XLA_PYTHON", str(script))
    code, out, err = heron(capsys, "xla", str(corpus_dir / "gpu" / "scatter" / "add.hlo"))
    assert code == 2 and out == ""
    assert err.strip() == (
        f"heron xla: error: XLA: XLA aborted (killed by signal {int(signal.SIGABRT)}):"
        " F1124 08:00:00.1 7 shape.cc:99] Check failed: has_layout()"
    )


def test_unknown_target_is_refused(capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["xla", "x.hlo", "--target", "mi300x"])
    assert exit_info.value.code == 2


@pytest.mark.skipif(
    not os.environ.get("HERON_XLA_PYTHON"), reason="XLA:GPU not installed (HERON_XLA_PYTHON)"
)
def test_real_xla(corpus_dir, capsys):
    code, out, err = heron(
        capsys, "xla", str(corpus_dir / "gpu" / "transpose" / "transpose_10.hlo"), "--json"
    )
    assert code == 0, err
    (pair,) = json.loads(out)["pairs"]
    assert pair["xla"]["launch"] == pair["heron"]["launch"]


LARGE_CONSTANT = """HloModule large_constant

ENTRY main {
  p = f32[4,4] parameter(0)
  c = f32[4,4] constant({{1, 2, 3, 4}, {5, 6, 7, 8}, {9, 10, 11, 12}, {13, 14, 15, 16}})
  ROOT r = f32[4,4] multiply(p, c)
}
"""


@pytest.mark.skipif(
    not os.environ.get("HERON_XLA_PYTHON"), reason="XLA:GPU not installed (HERON_XLA_PYTHON)"
)
def test_xla_s_dumped_module_holds_its_large_constants_so_heron_runs_it(tmp_path, capsys):
    """XLA dumps a constant of more than 10 elements as ``{...}`` unless asked not to;
    ``heron run`` on such a dump then has nothing to run (diffrax's Tsit5 tableau)."""
    module = tmp_path / "m.hlo"
    module.write_text(LARGE_CONSTANT)
    code, _, err = heron(capsys, "xla", str(module), "--dump-dir", str(tmp_path / "dump"))
    assert code == 0, err
    (optimized,) = (tmp_path / "dump").glob("*after_optimizations.txt")
    text = optimized.read_text()
    assert "{...}" not in text and "13, 14, 15, 16" in text
    code, out, err = heron(capsys, "run", str(optimized), "--backend", "interpreter", "--check")
    assert code == 0, err + out
