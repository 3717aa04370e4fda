"""``heron opt``: the pass pipeline from the command line (issue 15)."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np

from heron.cli.main import main
from heron.hlo.evaluator import evaluate_module, random_arguments
from heron.hlo.parser import parse_module, parse_module_file

JAX_STYLE = """
HloModule jit_f

_where.1 {
  Arg_0.2 = pred[8]{0} parameter(0)
  Arg_1.3 = f32[8]{0} parameter(1)
  Arg_2.4 = f32[8]{0} parameter(2)
  ROOT select.5 = f32[8]{0} select(Arg_0.2, Arg_1.3, Arg_2.4)
}

ENTRY main.14 {
  Arg_0.15 = f32[8]{0} parameter(0)
  Arg_1.16 = f32[8]{0} parameter(1)
  constant.17 = f32[] constant(0)
  broadcast.18 = f32[8]{0} broadcast(constant.17), dimensions={}
  compare.19 = pred[8]{0} compare(Arg_0.15, broadcast.18), direction=GT
  call.20 = f32[8]{0} call(compare.19, Arg_0.15, Arg_1.16), to_apply=_where.1
  constant.22 = f32[] constant(0)
  broadcast.23 = f32[8]{0} broadcast(constant.22), dimensions={}
  ROOT add.28 = f32[8]{0} add(call.20, broadcast.23)
}
"""


def heron(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def _file(tmp_path: Path) -> Path:
    path = tmp_path / "jit_f.hlo"
    path.write_text(JAX_STYLE)
    return path


def test_opt_prints_a_flat_module_that_computes_the_same(tmp_path, capsys) -> None:
    path = _file(tmp_path)
    code, out, err = heron(capsys, "opt", str(path), "--timing")
    assert code == 0, err
    optimized = parse_module(out)
    assert [c.name for c in optimized.computations] == ["main.14"]
    opcodes = [i.opcode for i in optimized.entry.instructions]
    assert "call" not in opcodes and opcodes.count("broadcast") == 1
    original = parse_module_file(path)
    arguments = random_arguments(original, np.random.default_rng(0))
    assert np.array_equal(
        evaluate_module(original, arguments), evaluate_module(optimized, arguments)
    )
    assert "call-inliner" in err and "total" in err


def test_opt_runs_named_passes_and_dumps_after_each_change(tmp_path, capsys) -> None:
    path = _file(tmp_path)
    dumps = tmp_path / "dumps"
    code, out, err = heron(
        capsys, "opt", str(path), "--passes", "call-inliner,hlo-dce", "--dump-dir", str(dumps)
    )
    assert code == 0, err
    assert "_where.1" not in out and "broadcast.23" in out  # no CSE was asked for
    names = sorted(p.name for p in dumps.iterdir())
    assert names == [
        "jit_f.0000.before_optimizations.txt",
        "jit_f.0001.passes.call-inliner.txt",
        "jit_f.0002.passes.hlo-dce.txt",
        "jit_f.0003.after_optimizations.txt",
    ]


def test_opt_refuses_unknown_passes_and_lists_the_known_ones(tmp_path, capsys) -> None:
    code, out, err = heron(capsys, "opt", str(_file(tmp_path)), "--passes", "dse")
    assert code == 2 and "unknown HLO pass 'dse'" in err and "hlo-cse" in err
    code, out, err = heron(capsys, "opt", "--list-passes")
    assert code == 0 and "call-inliner" in out and "tuple-simplifier" in out
    code, out, err = heron(capsys, "opt", str(_file(tmp_path)), "--dump-passes", "x")
    assert code == 2 and "--dump-passes needs --dump-dir" in err


def test_opt_with_a_target_runs_the_gpu_pipeline(tmp_path, capsys) -> None:
    path = _file(tmp_path)
    code, out, err = heron(capsys, "opt", str(path), "--target", "a100", "--timing")
    assert code == 0, err
    optimized = parse_module(out)
    entry_opcodes = [i.opcode for i in optimized.entry.instructions]
    # compare, select (the inlined call) and add: one loop kernel.
    assert entry_opcodes.count("fusion") == 1
    assert set(entry_opcodes) == {"parameter", "fusion"}
    fusion = optimized.entry.root_instruction
    assert fusion.attr("kind") == "kLoop" and fusion.called("calls").name.startswith("fused_")
    original = parse_module_file(path)
    arguments = random_arguments(original, np.random.default_rng(0))
    assert np.array_equal(
        evaluate_module(original, arguments), evaluate_module(optimized, arguments)
    )
    assert "priority-fusion" in err and "multi-output-fusion" in err


def test_opt_runs_gpu_passes_by_name_and_lists_them(tmp_path, capsys) -> None:
    path = _file(tmp_path)
    code, out, err = heron(
        capsys, "opt", str(path), "--target", "h100", "--passes", "call-inliner,fusion-wrapper"
    )
    assert code == 0, err
    optimized = parse_module(out)
    # Wrapped one by one: no producer was fused into a consumer.
    assert sum(i.opcode == "fusion" for i in optimized.entry.instructions) >= 3
    code, out, err = heron(capsys, "opt", "--list-passes")
    assert code == 0
    for name in ("priority-fusion", "multi-output-fusion", "horizontal-fusion", "fusion-cse"):
        assert name in out
    code, out, err = heron(capsys, "opt", str(path), "--target", "h1000")
    assert code == 2 and "unknown target preset 'h1000'" in err


def test_opt_buffers_prints_the_assignment_and_peak(tmp_path, capsys) -> None:
    path = _file(tmp_path)
    code, out, err = heron(capsys, "opt", str(path), "--buffers", "32")
    assert code == 0, err
    assert out.startswith("BufferAssignment for module jit_f (alignment 32):")
    assert "allocation 0: size 32, parameter 0, shape |f32[8]{0}|" in out
    assert "maybe-live-out" in out
    peak = [line for line in out.splitlines() if line.startswith("Peak memory: ")]
    # two 32-byte parameters, a 32-byte output, a 4-byte constant, temporaries above
    assert len(peak) == 1 and int(peak[0].split()[2]) >= 32 * 3 + 4
    offsets = [int(n) for n in re.findall(r",offset=(\d+)\)", out)]
    assert offsets and all(offset % 32 == 0 for offset in offsets)


def test_opt_buffers_refuses_a_negative_alignment(tmp_path, capsys) -> None:
    code, out, err = heron(capsys, "opt", str(_file(tmp_path)), "--buffers", "-8")
    assert code != 0 and "alignment must be positive" in err
