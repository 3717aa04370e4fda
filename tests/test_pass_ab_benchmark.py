"""benchmarks/pass_ab.py: one MLIR pass by two trees on the same kernels."""

from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "benchmarks" / "pass_ab.py"


def _benchmark():
    """The script loaded as a module (its folder importable, as when it runs)."""
    sys.path.insert(0, str(SCRIPT.parent))
    try:
        spec = importlib.util.spec_from_file_location(SCRIPT.stem, SCRIPT)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    finally:
        sys.path.remove(str(SCRIPT.parent))
    return module


def test_the_same_tree_makes_the_same_modules(capsys) -> None:
    """This tree against itself: every kernel's module after the pass is the same on
    both sides, and the figures are printed."""
    program = ROOT / "programs" / "concatenate" / "module.hlo"
    assert _benchmark().main([str(ROOT), str(program), "--pass", "inline", "--runs", "1"]) == 0
    out = capsys.readouterr().out
    found = re.search(r"on (\d+) kernels of 1 files .* the same for (\d+) of (\d+)", out)
    assert found, out
    kernels, same, total = map(int, found.groups())
    assert kernels >= 1 and same == total == kernels
    assert re.search(r"ratio \d+\.\d{3}", out)


def test_an_unknown_pass_is_named_with_the_known_ones(tmp_path) -> None:
    with pytest.raises(SystemExit, match="no pass 'inlining'.*inline"):
        _benchmark().save_pass_inputs([], "inlining", tmp_path)
