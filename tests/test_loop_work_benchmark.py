"""benchmarks/loop_work.py: copies and kernels inside loops, heron beside XLA:GPU."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from heron_test_support.benchmarks import load_benchmark

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "benchmarks" / "loop_work.py"


def test_threefrys_loop_copies_no_more_than_xlas(capsys) -> None:
    """dropout_threefry's loop body (threefry's rounds: a multi-output fusion's new key
    words, rotation tables swapped each round) copies what XLA:GPU copies, no more."""
    benchmark = load_benchmark(SCRIPT)
    assert benchmark.main(["--only", "programs/dropout_threefry"]) == 0
    out = capsys.readouterr().out
    found = re.search(
        r"programs/dropout_threefry +d1 copies +(\d+)/(\d+) +kernels +(\d+)/(\d+)", out
    )
    assert found, out
    heron_copies, xla_copies, heron_kernels, xla_kernels = map(int, found.groups())
    assert heron_copies <= xla_copies and heron_kernels <= xla_kernels
    assert re.search(r"total in loop bodies +copies \d+/\d+ +kernels \d+/\d+ +\(1 programs\)", out)


@pytest.mark.parametrize(
    "program", ["models/flax_lstm_fori_loop", "models/flax_lstm_rnn", "models/flax_gru_scan"]
)
def test_a_recurrent_cells_step_launches_no_more_kernels_than_xlas(program, capsys) -> None:
    """The gates' products of the input and of the state, a GEMM each, are one GEMM per
    shared operand (dot-merger, as XLA's DotMerger): flax's LSTM step took 12 kernels
    where XLA's takes 7, the GRU scan 12 where XLA's takes 8."""
    benchmark = load_benchmark(SCRIPT)
    assert benchmark.main(["--only", program]) == 0
    out = capsys.readouterr().out
    found = re.search(rf"{re.escape(program)} +d1 copies +\d+/\d+ +kernels +(\d+)/(\d+)", out)
    assert found, out
    heron_kernels, xla_kernels = map(int, found.groups())
    assert heron_kernels <= xla_kernels


def test_a_file_without_xlas_module_beside_it_is_named(tmp_path) -> None:
    lone = tmp_path / "lone.hlo"
    lone.write_text("HloModule lone\nENTRY e {\n  ROOT x = f32[2] parameter(0)\n}\n")
    with pytest.raises(SystemExit):
        load_benchmark(SCRIPT).main([str(lone)])


def test_a_module_that_does_not_verify_is_named_not_a_traceback(tmp_path) -> None:
    bad = "HloModule bad\nENTRY e {\n  x = f32[2] parameter(0)\n  ROOT y = f32[3] negate(x)\n}\n"
    (tmp_path / "bad.hlo").write_text(bad)
    (tmp_path / "bad.xla.hlo").write_text(bad)
    with pytest.raises(SystemExit, match=r"loop_work: .*bad\.hlo: .*declared shape f32\[3\]"):
        load_benchmark(SCRIPT).main([str(tmp_path / "bad.hlo")])
