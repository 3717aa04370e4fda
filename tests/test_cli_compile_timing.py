"""``heron compile --executable OUT --timing``: where a whole compile's time went.

Issue 32 asks for a profile of the compile: each HLO pass (the pipelines of
``prepare_module``) and each kernel stage summed over the program's kernels,
emission and heron's passes counted once though every backend's kernel starts
from them (``heron.compiler.executable.CompileProfile``).
"""

from __future__ import annotations

import re

from heron.cli.main import main
from heron.compiler import Target
from heron.compiler.executable import compile_program
from heron.hlo.parser import parse_module

MLP = """
HloModule mlp
ENTRY main {
  x = f32[16,32]{1,0} parameter(0)
  w = f32[32,24]{1,0} parameter(1)
  d = f32[16,24]{1,0} dot(x, w), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  ROOT t = f32[16,24]{1,0} tanh(d)
}
"""


def test_the_profile_counts_each_stage_once_per_kernel_and_each_pass_run():
    compiled = compile_program(parse_module(MLP), Target.preset("h100"), ("interpreter",))
    profile = compiled.profile
    assert profile is not None
    stages = {name: (runs, seconds) for name, runs, seconds in profile.stages}
    kernels = len(compiled.program.kernels)
    assert kernels == 2  # the GEMM's fallback and the tanh
    assert stages["emit"][0] == stages["flatten-tensors"][0] == kernels
    assert all(seconds >= 0 for _, seconds in stages.values())
    passes = {record.path.rsplit("/", 1)[-1] for record in profile.passes.records}
    assert {"priority-fusion", "dot-strength-reduction", "scheduler"} <= passes
    assert profile.seconds <= compiled.seconds + 1e-9


LOOP = """
HloModule loop
cond {
  p = (s32[], f32[64]) parameter(0)
  i = s32[] get-tuple-element(p), index=0
  n = s32[] constant(10)
  ROOT lt = pred[] compare(i, n), direction=LT
}
body {
  p = (s32[], f32[64]) parameter(0)
  i = s32[] get-tuple-element(p), index=0
  x = f32[64] get-tuple-element(p), index=1
  one = s32[] constant(1)
  next = s32[] add(i, one)
  y = f32[64] tanh(x)
  ROOT t = (s32[], f32[64]) tuple(next, y)
}
ENTRY main {
  x = f32[64] parameter(0)
  zero = s32[] constant(0)
  init = (s32[], f32[64]) tuple(zero, x)
  w = (s32[], f32[64]) while(init), condition=cond, body=body
  ROOT out = f32[64] get-tuple-element(w), index=1
}
"""


def test_the_profile_counts_the_fusion_of_loop_bodies():
    """A loop's body and condition go through the fusion passes as if each were an entry
    (``fuse_control_flow_computations``): their passes are in the profile too."""
    compiled = compile_program(parse_module(LOOP), Target.preset("h100"), ("interpreter",))
    runs = [r for r in compiled.profile.passes.records if r.path.endswith("/priority-fusion")]
    assert len(runs) == 3  # the entry, the body and the condition


def test_the_two_backends_share_one_emission(capsys):
    compiled = compile_program(
        parse_module(MLP),
        Target.preset("h100"),
        ("cuda", "interpreter"),
        library_fallbacks=True,
    )
    stages = {name: runs for name, runs, _ in compiled.profile.stages}
    # emitted and taken through heron's passes once; each backend's own stages per backend
    assert stages["emit"] == 2 and stages["ptx"] == 2 and stages["capture"] == 2


def test_a_gemm_cuda_always_runs_has_no_cuda_kernel_beside_it():
    compiled = compile_program(parse_module(MLP), Target.preset("h100"), ("cuda", "interpreter"))
    stages = {name: runs for name, runs, _ in compiled.profile.stages}
    # the GEMM's fallback is emitted once, for the interpreter; only the tanh reaches PTX
    assert stages["emit"] == 2 and stages["ptx"] == 1 and stages["capture"] == 2


def test_heron_compile_prints_it(capsys, hlo, tmp_path):
    out_path = tmp_path / "mlp.heron"
    code = main(["compile", hlo(MLP), "--executable", str(out_path), "--timing"])
    out, err = capsys.readouterr()
    assert code == 0 and out_path.exists()
    assert re.search(r"^priority-fusion\s+\d+\s+\d+\s+\d+\.\d{3}$", err, re.M), err
    assert re.search(r"^flatten-tensors\s+2\s+\d+\.\d{3}$", err, re.M), err
    assert re.search(r"^whole compile \d+\.\d{3} s: HLO passes", err, re.M), err
    code = main(["compile", hlo(MLP), "--timing", "-o", str(tmp_path) + "/"])
    _, err = capsys.readouterr()
    assert code == 2 and err.endswith(
        "error: --timing applies to --executable only (a fusion's compile prints its stages)\n"
    )
