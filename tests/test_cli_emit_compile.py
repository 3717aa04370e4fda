"""``heron emit`` and ``heron compile``: output, files written, dumps, and errors (exit 2).

The commands run in-process through ``heron.cli.main.main``.
"""

from __future__ import annotations

from heron_test_support.hlo_modules import SCALE
from mlir import ir

from heron.cli.main import main
from heron.emitters.dialect import make_context, verify_xla_ops
from heron.emitters.elemental import core
from heron.emitters.pipeline import pass_names

TWO_FUSIONS = """\
HloModule two

neg {
  x = f32[16] parameter(0)
  ROOT n = f32[16] negate(x)
}

tanh {
  x = f32[16] parameter(0)
  ROOT t = f32[16] tanh(x)
}

ENTRY main {
  x = f32[16] parameter(0)
  a = f32[16] fusion(x), kind=kLoop, calls=neg
  ROOT b = f32[16] fusion(a), kind=kLoop, calls=tanh
}
"""


def heron(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_emit_prints_the_emitted_module(capsys, hlo):
    code, out, err = heron(capsys, "emit", hlo(SCALE))
    assert (code, err) == (0, "")
    with make_context():
        module = ir.Module.parse(out)
        verify_xla_ops(module)
    assert out.count('"heron_gpu.loop"') == 1
    assert "func.func @f(" in out
    assert "func.func private @fused_scale_m(" in out
    assert '"heron_gpu.pure_call"' in out


def test_emit_after_a_pass(capsys, hlo):
    code, out, err = heron(capsys, "emit", hlo(SCALE), "--after", "inline")
    assert (code, err) == (0, "")
    assert '"heron_gpu.loop"' in out
    assert "heron_gpu.pure_call" not in out
    assert out.count("func.func") == 1
    code, out, err = heron(capsys, "emit", hlo(SCALE), "--after", "lower-tensors")
    assert (code, err) == (0, "")
    assert "gpu.module @" in out and "tensor." not in out


def test_print_ir_after_all_shows_every_stage_in_order(capsys, hlo):
    code, out, err = heron(capsys, "emit", hlo(SCALE), "--print-ir-after-all")
    assert (code, err) == (0, "")
    headers = [line for line in out.splitlines() if line.startswith("// -----// IR after ")]
    stages = [h.removeprefix("// -----// IR after ").removesuffix(" //----- //") for h in headers]
    assert stages == pass_names()


def test_emit_selects_a_fusion_by_name(capsys, hlo):
    path = hlo(TWO_FUSIONS)
    code, out, err = heron(capsys, "emit", path, "--fusion", "b")
    assert (code, err) == (0, "")
    assert "func.func @b(" in out and "func.func @a(" not in out
    code, out, err = heron(capsys, "emit", path)
    assert (code, err) == (0, "")
    assert out.index("// ===== fusion a =====") < out.index("// ===== fusion b =====")


def test_emit_errors_exit_2_with_one_message(capsys, hlo):
    code, out, err = heron(capsys, "emit", hlo(SCALE), "--after", "no-such-pass")
    assert (code, out) == (2, "")
    assert "unknown pass 'no-such-pass'" in err and "inline" in err
    code, out, err = heron(capsys, "emit", hlo(TWO_FUSIONS), "--fusion", "zzz")
    assert code == 2
    assert "no fusion named 'zzz'" in err and "fusions: a, b" in err
    assert "Traceback" not in err


def test_unsupported_op_reports_file_line_fusion_and_op(capsys, hlo, monkeypatch):
    monkeypatch.delitem(core._LOWERINGS, "tanh", raising=False)
    path = hlo(TWO_FUSIONS)
    code, out, err = heron(capsys, "compile", path, "--target", "cuda", "-o", path + ".d/")
    assert code == 2
    first = err.splitlines()[0]
    assert first.startswith(f"{path}:10:8: error: fusion 'b': cannot emit tanh 't'")
    assert "Traceback" not in err


def test_compile_cuda_writes_ptx_cubin_and_dumps(capsys, hlo, tmp_path):
    out_dir = tmp_path / "out"
    dump_dir = tmp_path / "dump"
    code, out, err = heron(
        capsys,
        "compile",
        hlo(SCALE),
        "--target",
        "cuda",
        "--arch",
        "sm_80",
        "-o",
        f"{out_dir}/",
        "--dump-dir",
        str(dump_dir),
    )
    assert (code, err) == (0, "")
    ptx = (out_dir / "f.ptx").read_text()
    assert ".target sm_80" in ptx and ".entry f(" in ptx
    assert (out_dir / "f.cubin").read_bytes()[:4] == b"\x7fELF"
    names = sorted(p.name for p in dump_dir.iterdir())
    assert names[0] == "f.00.emitted.mlir"
    assert names[1] == "f.01.inline.mlir"
    assert "f.10.lower-tensors.mlir" in names
    assert any(n.endswith(".llvm-ir.ll") for n in names)
    assert names[-1].endswith(".ptx") and (dump_dir / names[-1]).read_text() == ptx
    assert "fusion f: loop emitter, kernel f for sm_80" in out


def test_a_missing_backend_says_what_to_install_and_writes_nothing(
    capsys, hlo, tmp_path, monkeypatch
):
    # Issue 31: the demo's environment has only the interpreter; `heron compile` for the
    # default target (h100) must say what to install, before creating any folder.
    from heron.runtime.core import registry

    installed = registry.load_backends()
    only_interpreter = registry.BackendRegistry(
        [(installed.get("interpreter"), installed.origin("interpreter"))]
    )
    monkeypatch.setattr(registry, "default_backends", lambda: only_interpreter)
    dump_dir = tmp_path / "dump"
    code, out, err = heron(capsys, "compile", hlo(SCALE), "--dump-dir", str(dump_dir))
    assert code == 2
    assert err.startswith(
        "heron compile: error: no heron.backends plugin named 'cuda' is installed (installed:"
        " interpreter): install heron-runtime-cuda[compile] (heron[cuda] where"
    )
    assert "nox -s dev" in err and "Traceback" not in err
    assert not dump_dir.exists()


def test_compile_rocm_to_a_named_file(capsys, hlo, tmp_path):
    target = tmp_path / "kernel.hsaco"
    code, out, err = heron(capsys, "compile", hlo(SCALE), "--target", "rocm", "-o", str(target))
    assert (code, err) == (0, "")
    image = target.read_bytes()
    assert image[:4] == b"\x7fELF"
    assert int.from_bytes(image[18:20], "little") == 224  # EM_AMDGPU
    assert "for gfx942" in out


def test_compile_every_fusion_one_file_each(capsys, hlo, tmp_path):
    code, out, err = heron(
        capsys,
        "compile",
        hlo(TWO_FUSIONS),
        "--target",
        "rocm",
        "--arch",
        "gfx90a",
        "-o",
        str(tmp_path),
    )
    assert (code, err) == (0, "")
    assert sorted(p.name for p in tmp_path.iterdir() if p.suffix == ".hsaco") == [
        "a.hsaco",
        "b.hsaco",
    ]


def test_compile_argument_errors(capsys, hlo, tmp_path):
    path = hlo(TWO_FUSIONS)
    code, out, err = heron(
        capsys, "compile", path, "--target", "cuda", "-o", str(tmp_path / "one.ptx")
    )
    assert code == 2
    assert "2 fusions are compiled (a, b)" in err
    code, out, err = heron(capsys, "compile", path, "--target", "cuda", "--arch", "gfx942")
    assert code == 2
    assert "not an NVIDIA architecture" in err and len(err.splitlines()) == 1
    code, out, err = heron(capsys, "compile", str(tmp_path / "missing.hlo"), "--target", "rocm")
    assert code == 2
    assert "no such file" in err


def test_compile_fusion_api_records_every_stage(tmp_path):
    from heron.compiler import DumpWriter, Target, compile_fusion, fusions_of
    from heron.hlo.parser import parse_module

    [fusion] = fusions_of(parse_module(SCALE))
    compiled = compile_fusion(
        fusion, Target.preset("h100"), dump=DumpWriter(tmp_path, "f"), stop_after="ptx"
    )
    stages = [stage for stage, _ in compiled.timings]
    assert stages == ["emit", *pass_names()[1:], "llvm-ir", "ptx"]
    assert all(seconds >= 0 for _, seconds in compiled.timings)
    assert compiled.image.format == "ptx" and ".entry f(" in compiled.image.data.decode()
    assert [(a.extension, a.loadable) for a in compiled.artefacts] == [("ll", False), ("ptx", True)]
    assert [a.extension for a in compiled.device_code()] == ["ptx"]
    assert (compiled.fusion_name, compiled.kernel_name, compiled.emitter) == ("f", "f", "loop")
    assert len(list(tmp_path.glob("f.*"))) >= len(pass_names()) + 2


def test_a_program_with_no_fusion_that_is_no_kernel_points_to_executable(capsys, hlo, tmp_path):
    """A JAX program (no fusion yet) is read as one fusion, as XLA's fusion_to_mlir
    reads such a file; where that is no kernel, the error says how to compile it as a
    program."""
    path = hlo(
        "HloModule p\nENTRY main {\n  x = f32[8,32] parameter(0)\n"
        "  t = (f32[8,4], s32[8,4]) topk(x), k=4, largest=true\n"
        "  v = f32[8,4] get-tuple-element(t), index=0\n"
        "  i = s32[8,4] get-tuple-element(t), index=1\n"
        "  ROOT r = (f32[8,4], s32[8,4]) tuple(v, i)\n}\n"
    )
    code, out, err = heron(capsys, "compile", str(path), "-o", str(tmp_path / "k"))
    assert code == 2 and out == ""
    assert "no elemental lowering" in err
    assert f"heron compile --executable OUT.heron {path}" in err
    code, out, err = heron(capsys, "compile", str(path), "--executable", str(tmp_path / "p.heron"))
    assert code == 0, err
