"""examples/training_loop.py: a donated, device-resident Adam loop through heron.jax equals
jax.jit's loop step by step (the example's own check, run here on the interpreter)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

from heron_test_support.jax_config import jax_x64

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "training_loop.py"


def test_the_training_loop_example_agrees_with_jax(capsys) -> None:
    spec = importlib.util.spec_from_file_location("_training_loop_example", EXAMPLE)
    example = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = example
    spec.loader.exec_module(example)
    with jax_x64(False):
        assert example.main(["--backend", "interpreter", "--steps", "4"]) == 0
    printed = capsys.readouterr().out
    assert "step 3:" in printed and "donated" in printed  # later steps consume their state
    assert "compiled 1 time(s)" in printed
