"""benchmarks/model_compile.py: the GPT-style training step it times lowers and compiles."""

from __future__ import annotations

from pathlib import Path

import pytest
from heron_test_support.benchmarks import load_benchmark

pytest.importorskip("jax")

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "model_compile.py"


def test_a_small_step_is_timed_and_its_module_saved(tmp_path, capsys) -> None:
    saved = tmp_path / "step.hlo"
    small = ["--d-model", "32", "--heads", "4", "--seq", "8", "--batch", "2", "--vocab", "31"]
    benchmark = load_benchmark(SCRIPT)
    assert benchmark.main(["--layers", "1,2", "--runs", "1", "--save", str(saved), *small]) == 0
    rows = [line.split() for line in capsys.readouterr().out.splitlines()]
    timed = [row for row in rows if row and row[0] in ("1", "2")]
    assert [row[0] for row in timed] == ["1", "2"]
    # a second layer adds instructions: parameters, dots and their gradients
    assert int(timed[1][1]) > int(timed[0][1]) > 500
    text = saved.read_text()
    assert text.startswith("HloModule") and text.count(" dot(") >= 2 * 12


def test_the_flax_benchmark_names_its_models_when_asked_for_another(capsys) -> None:
    # benchmarks/flax_compile.py: its model builders import flax only when called, so the
    # script loads (and refuses an unknown name, listing the known ones) without flax.
    module = load_benchmark(SCRIPT.with_name("flax_compile.py"))
    with pytest.raises(SystemExit):
        module.main(["--only", "gpt2,alexnet"])
    error = capsys.readouterr().err
    assert "unknown model(s) alexnet" in error
    assert "gpt2, resnet50, vit_b16, convnext_t, unet" in error
