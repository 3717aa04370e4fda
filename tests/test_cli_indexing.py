"""``heron indexing``: a fusion's output-to-input maps, and the loop emitter's thread map.

Called in-process through ``heron.cli.main.main`` (as tests/test_cli.py does);
one test runs the installed console script end to end.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from heron.cli.main import main

FUSED = """\
HloModule fused

fused_computation {
  p0 = f32[2,3]{1,0} parameter(0)
  p1 = f32[3]{0} parameter(1)
  t = f32[3,2]{1,0} transpose(p0), dimensions={1,0}
  b = f32[3,2]{1,0} broadcast(p1), dimensions={0}
  ROOT s = f32[3,2]{1,0} add(t, b)
}

other_computation {
  q0 = f32[4]{0} parameter(0)
  ROOT n = f32[4]{0} negate(q0)
}

ENTRY main {
  x = f32[2,3]{1,0} parameter(0)
  y = f32[3]{0} parameter(1)
  z = f32[4]{0} parameter(2)
  other = f32[4]{0} fusion(z), kind=kLoop, calls=other_computation
  ROOT fusion = f32[3,2]{1,0} fusion(x, y), kind=kLoop, calls=fused_computation
}
"""

UNFUSED = """\
HloModule plain

ENTRY main {
  x = f32[2,3]{1,0} parameter(0)
  ROOT r = f32[3,2]{1,0} transpose(x), dimensions={1,0}
}
"""


def heron(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_entry_root_fusion_maps(hlo, capsys):
    code, out, err = heron(capsys, "indexing", hlo(FUSED))
    assert (code, err) == (0, "")
    assert out.splitlines() == [
        "p0: (d0, d1) -> (d1, d0), domain: d0 in [0, 2], d1 in [0, 1]",
        "p1: (d0, d1) -> (d0), domain: d0 in [0, 2], d1 in [0, 1]",
    ]


def test_named_fusion_by_instruction_or_computation(hlo, capsys):
    path = hlo(FUSED)
    expected = ["q0: (d0) -> (d0), domain: d0 in [0, 3]"]
    for name in ("other", "other_computation"):
        code, out, err = heron(capsys, "indexing", path, "--fusion", name)
        assert (code, err) == (0, "")
        assert out.splitlines() == expected


def test_threads_line(hlo, capsys):
    code, out, _ = heron(capsys, "indexing", hlo(FUSED), "--threads")
    assert code == 0
    assert out.splitlines()[-1] == (
        "threads: (th_x, bl_x) -> (th_x floordiv 2, th_x mod 2),"
        " domain: th_x in [0, 5], bl_x in [0, 0]"
    )


def test_unfused_module_is_one_fusion_of_its_entry(hlo, capsys):
    code, out, err = heron(capsys, "indexing", hlo(UNFUSED))
    assert (code, err) == (0, "")
    assert out.splitlines() == ["x: (d0, d1) -> (d1, d0), domain: d0 in [0, 2], d1 in [0, 1]"]


def test_unknown_fusion_lists_the_fusions_and_exits_2(hlo, capsys):
    code, out, err = heron(capsys, "indexing", hlo(FUSED), "--fusion", "nope")
    assert code == 2 and out == ""
    assert "no fusion named 'nope'" in err and "fusions: other, fusion" in err
    assert err.startswith("heron indexing: error:")


def test_parse_error_exits_2_without_traceback(hlo, capsys):
    path = hlo("HloModule broken\n\nENTRY main {\n  ROOT y = f32[2] \n}\n")
    code, out, err = heron(capsys, "indexing", path)
    assert code == 2 and out == ""
    assert err.startswith(f"{path}:") and "Traceback" not in err


def test_missing_file_exits_2(capsys, tmp_path):
    code, _, err = heron(capsys, "indexing", str(tmp_path / "nope.hlo"))
    assert code == 2 and "no such file" in err


def test_corpus_fusion_under_test(corpus_dir, capsys):
    path = corpus_dir / "common" / "loop" / "vectorize_x4.hlo"
    code, out, err = heron(capsys, "indexing", str(path), "--threads")
    assert (code, err) == (0, "")
    lines = out.splitlines()
    assert lines[0] == (
        "input: (d0, d1, d2) -> (d0, d1, d2), domain: d0 in [0, 19], d1 in [0, 39], d2 in [0, 299]"
    )
    # The loop emitter's own rule: 240,000 elements are fewer than an H100's 270,336
    # resident threads, so one element per thread in 1875 blocks (as XLA launches it)...
    assert lines[-1].startswith("threads: (th_x, bl_x) -> (")
    assert "bl_x in [0, 1874]" in lines[-1]
    # ...and more than an A100's 221,184: vectors of 4.
    code, out, err = heron(capsys, "indexing", str(path), "--threads", "--target", "a100")
    assert (code, err) == (0, "")
    last = out.splitlines()[-1]
    assert last.startswith("threads: (th_x, bl_x)[vector_index] -> (")
    assert "vector_index in [0, 3]" in last and "bl_x in [0, 468]" in last


def test_console_script(hlo):
    script = Path(sys.executable).parent / "heron"
    command = [str(script)] if script.exists() else [sys.executable, "-m", "heron.cli.main"]
    result = subprocess.run(
        [*command, "indexing", hlo(UNFUSED)],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONWARNINGS": "ignore"},
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("x: (d0, d1) -> (d1, d0)")
