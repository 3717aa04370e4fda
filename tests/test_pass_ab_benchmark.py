"""benchmarks/pass_ab.py: one MLIR pass by two trees on the same kernels."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from heron_test_support.benchmarks import load_benchmark

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "benchmarks" / "pass_ab.py"


def test_the_same_tree_makes_the_same_modules(capsys) -> None:
    """This tree against itself: every kernel's module after the pass is the same on
    both sides, and the figures are printed."""
    program = ROOT / "programs" / "concatenate" / "module.hlo"
    benchmark = load_benchmark(SCRIPT)
    assert benchmark.main([str(ROOT), str(program), "--pass", "inline", "--runs", "1"]) == 0
    out = capsys.readouterr().out
    found = re.search(r"on (\d+) kernels of 1 files .* the same for (\d+) of (\d+)", out)
    assert found, out
    kernels, same, total = map(int, found.groups())
    assert kernels >= 1 and same == total == kernels
    assert re.search(r"ratio \d+\.\d{3}", out)


def test_an_unknown_pass_is_named_with_the_known_ones(tmp_path) -> None:
    with pytest.raises(SystemExit, match="no pass 'inlining'.*inline"):
        load_benchmark(SCRIPT).save_pass_inputs([], "inlining", tmp_path)


def test_a_module_that_does_not_verify_is_named_not_a_traceback(tmp_path) -> None:
    bad = tmp_path / "bad.hlo"
    bad.write_text(
        "HloModule bad\nENTRY e {\n  x = f32[2] parameter(0)\n  ROOT y = f32[3] negate(x)\n}\n"
    )
    with pytest.raises(SystemExit, match=r"pass_ab: .*bad\.hlo: .*declared shape f32\[3\]"):
        load_benchmark(SCRIPT).save_pass_inputs([bad], "inline", tmp_path)
    with pytest.raises(SystemExit, match="not a heron checkout"):
        load_benchmark(SCRIPT).main([str(tmp_path), str(bad)])
