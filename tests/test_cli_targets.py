"""``heron targets``, ``--target/--arch`` on the commands that compile or run, and the
stages ``heron plugins`` and ``heron compile`` show.

The commands run in-process through ``heron.cli.main.main``.
"""

from __future__ import annotations

import pytest
from heron_test_support.hlo_modules import SCALE

from heron.cli.main import main
from heron.compiler import Target, presets

#: A row reduction: its kernel shuffles within a warp, so the warp width matters.
ROW_SUM = """\
HloModule row_sum

add {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}

fused_sum {
  x = f32[8,1024] parameter(0)
  z = f32[] constant(0)
  ROOT r = f32[8] reduce(x, z), dimensions={1}, to_apply=add
}

ENTRY main {
  x = f32[8,1024] parameter(0)
  ROOT f = f32[8] fusion(x), kind=kInput, calls=fused_sum
}
"""


def heron(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_targets_lists_every_preset_with_its_summary(capsys):
    code, out, err = heron(capsys, "targets")
    assert (code, err) == (0, "")
    lines = out.splitlines()
    assert len(lines) == len(presets())
    for line, target in zip(lines, presets().values(), strict=True):
        assert line.startswith(target.summary())
    assert lines[list(presets()).index("h100")].endswith("(default for cuda)")
    assert lines[list(presets()).index("mi300x")].endswith("(default for rocm)")
    assert "mi250x: rocm gfx90a, 110 CUs, warp 64" in out


def test_targets_shows_one_target_in_full(capsys):
    code, out, err = heron(capsys, "targets", "h100", "--arch", "sm_90a")
    assert (code, err) == (0, "")
    fields = dict(line.split(None, 1) for line in out.splitlines())
    assert fields["name"] == "h100@sm_90a" and fields["arch"] == "sm_90a"
    assert fields["warp_size"] == "32" and fields["core_count"] == "132"
    assert "h100_sxm" in fields["source"]
    code, out, _ = heron(capsys, "targets", "rocm")
    assert code == 0 and "name" in out and "mi300x" in out.splitlines()[0]


def test_targets_shows_the_measured_op_cycles_one_op_a_line(capsys):
    code, out, _ = heron(capsys, "targets", "h100")
    lines = out.splitlines()
    start = next(k for k, line in enumerate(lines) if line.startswith("op_cycles"))
    assert code == 0 and lines[start].split()[:2] == ["op_cycles", "add:"]
    divide = next(line for line in lines[start:] if line.split()[0] == "divide:")
    assert "c128 2280" in divide and "f32 19" in divide
    assert len(lines) - start == 16  # one line per opcode XLA measured
    code, out, _ = heron(capsys, "targets", "mi300x")
    assert code == 0 and out.splitlines()[-1].split(None, 1) == ["op_cycles", "(none measured)"]


def test_plugins_lists_each_backends_stages(capsys):
    code, out, err = heron(capsys, "plugins")
    assert (code, err) == (0, "")
    assert "      stages: llvm-ir (.ll) -> ptx (.ptx) -> cubin (.cubin)" in out
    assert "      stages: llvm-ir (.ll) -> object (.o) -> hsaco (.hsaco)" in out
    assert "      stages: capture" in out


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (("compile", "--arch", "sm_1"), "unknown GPU arch 'sm_1'"),
        (("compile", "--target", "h100", "--arch", "gfx942"), "arch 'gfx942' is a rocm arch"),
        (("compile", "--target", "v100"), "unknown target preset 'v100'"),
        (("compile", "--target", "rocm", "--arch", "sm_90"), "not an AMDGPU architecture"),
        (("emit", "--arch", "gfx1"), "unknown GPU arch 'gfx1'"),
        (("check", "--target", "h100", "--arch", "gfx942"), "arch 'gfx942' is a rocm arch"),
        (("check", "--backend", "rocm", "--target", "h100"), "'h100' is a cuda device, not rocm"),
        (("run", "--backend", "interpreter", "--arch", "sm_1"), "unknown GPU arch 'sm_1'"),
        (("targets", "--arch", "sm_1"), "unknown GPU arch 'sm_1'"),
        (("indexing", "--target", "b200"), "unknown target preset 'b200'"),
    ],
)
def test_bad_targets_and_archs_are_one_line_and_exit_2(capsys, hlo, argv, message):
    command, *options = argv
    files = [] if command == "targets" else [hlo(SCALE)]
    code, out, err = heron(capsys, command, *files, *options)
    assert code == 2 and out == ""
    assert len(err.splitlines()) == 1, err
    assert err.startswith(f"heron {command}: error: ") and message in err
    assert "Traceback" not in err


def test_compile_for_a_preset_or_an_arch(capsys, hlo, tmp_path):
    code, out, err = heron(capsys, "compile", hlo(SCALE), "--arch", "sm_80", "-o", f"{tmp_path}/")
    assert (code, err) == (0, "")
    assert "kernel f for sm_80 (a100)" in out
    assert ".target sm_80" in (tmp_path / "f.ptx").read_text()
    code, out, err = heron(
        capsys, "compile", hlo(SCALE), "--target", "mi250x", "-o", str(tmp_path / "k.hsaco")
    )
    assert (code, err) == (0, "")
    assert "for gfx90a (mi250x)" in out and b"gfx90a" in (tmp_path / "k.hsaco").read_bytes()
    code, out, err = heron(capsys, "compile", hlo(SCALE), "-o", f"{tmp_path}/default/")
    assert (code, err) == (0, "") and "for sm_90 (h100)" in out


def test_compile_says_when_the_cubin_stage_is_skipped(capsys, hlo, tmp_path, monkeypatch):
    from heron.runtime.cuda import stages
    from heron.runtime.cuda.compiler_tools import ToolNotFoundError

    def missing():
        raise ToolNotFoundError("ptxas not found: install the 'nvidia-cuda-nvcc' wheel")

    monkeypatch.setattr(stages, "cubin_assembler", missing)
    out_dir = tmp_path / "out"
    code, out, err = heron(capsys, "compile", hlo(SCALE), "--target", "h100", "-o", f"{out_dir}/")
    assert (code, err) == (0, "")
    assert "  skipped cubin: ptxas not found: install the 'nvidia-cuda-nvcc' wheel" in out
    assert sorted(p.name for p in out_dir.iterdir()) == ["f.ptx"]


def test_run_on_the_interpreter_emulating_a_rocm_target(capsys, hlo):
    code, out, err = heron(
        capsys, "run", hlo(ROW_SUM), "--backend", "interpreter", "--target", "mi300x", "--check"
    )
    assert (code, err) == (0, ""), out
    assert "device: heron interpreter (SIMT on the CPU with numpy, warps of 64)" in out
    assert f"target: {Target.preset('mi300x').summary()}" in out
    assert "agree: every output within the tolerance" in out
    code, out, err = heron(capsys, "run", hlo(ROW_SUM), "--backend", "interpreter")
    assert (code, err) == (0, "") and "warps of 32" in out and "target: h100:" in out


def test_auto_with_a_target_takes_its_gpu_or_the_interpreter(capsys, hlo):
    code, out, err = heron(capsys, "run", hlo(ROW_SUM), "--target", "mi250x")
    assert (code, err) == (0, ""), out
    assert "backend interpreter" in out and "warps of 64" in out
    assert "rocm: " in out and "cuda: " not in out  # only the target's own GPU was considered


@pytest.mark.parametrize("target", ["h100", "mi300x"])
def test_check_on_the_interpreter_for_each_warp_width(capsys, hlo, target):
    code, out, err = heron(capsys, "check", hlo(ROW_SUM), "--target", target)
    assert (code, err) == (0, ""), out
    assert "check: 1 fusion, all agree" in out
