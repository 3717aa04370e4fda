"""The ROCDL backend on the CPU: MLIR gpu.module -> HSACO, checked as an ELF file."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from heron.hlo.errors import UnsupportedError
from heron.runtime.rocm.compiler import (
    EM_AMDGPU,
    check_supported,
    compile_to_hsaco,
    elf_machine,
    lower_to_llvm_ir,
)
from heron.target import Target

#: The largest block a ROCm kernel may have: the device's fact, from its Target.
BLOCK = Target.preset("mi300x").threads_per_block_limit

#: Test kernels shared with the other GPU backend's tests (tests/data/mlir at the repo root).
_KERNELS = Path(__file__).resolve().parents[3] / "tests" / "data" / "mlir"


def _kernel(name: str) -> str:
    return (_KERNELS / f"{name}.mlir").read_text()


VECTOR_ADD = _kernel("vector_add")

TANH_VEC4 = _kernel("tanh_vec4")

UNARY = """
module attributes {gpu.container_module} {
  gpu.module @kernels {
    gpu.func @unary(%a: memref<256xTYPE>) kernel {
      %tid = gpu.thread_id x
      %x = memref.load %a[%tid] : memref<256xTYPE>
      %y = OP %x : TYPE
      memref.store %y, %a[%tid] : memref<256xTYPE>
      gpu.return
    }
  }
}
"""


@pytest.mark.parametrize("arch", ["gfx90a", "gfx942"])
@pytest.mark.parametrize("source, kernel", [(VECTOR_ADD, "vector_add"), (TANH_VEC4, "tanh_vec4")])
def test_hsaco_is_an_amdgpu_shared_object_with_the_kernel(source, kernel, arch):
    image = compile_to_hsaco(source, arch, max_block_size=BLOCK)
    assert image[:4] == b"\x7fELF"
    assert elf_machine(image) == EM_AMDGPU == 224
    assert image[16] == 3  # e_type ET_DYN: a loadable shared object, not a .o
    assert kernel.encode() + b"\x00" in image  # in the symbol string table
    assert f"{kernel}.kd".encode() in image  # the kernel descriptor symbol
    assert arch.encode() in image  # the target id in the code object's metadata


def test_every_stage_is_dumped_and_the_vector_load_stays_wide():
    stages: dict[str, str] = {}
    compile_to_hsaco(TANH_VEC4, "gfx942", max_block_size=BLOCK, dump=stages.__setitem__)
    assert list(stages)[0] == "input"
    for name in ("math-expand-ops", "convert-gpu-to-rocdl", "llvm-ir", "amdgcn-asm"):
        assert name in stages
    assert "math.tanh" not in stages["math-expand-ops"]
    assert "amdgpu_kernel void @tanh_vec4" in stages["llvm-ir"]
    asm = stages["amdgcn-asm"]
    assert "global_load_dwordx4" in asm
    assert "v_exp_f32" in asm  # tanh expanded to exp, which the hardware does
    assert "__ocml" not in asm
    # The translation's default would be 256; launches of up to 1024 threads must work.
    assert ".max_flat_workgroup_size: 1024" in asm


def test_block_and_grid_dims_use_the_dispatch_packet_not_ockl():
    source = VECTOR_ADD.replace("gpu.block_dim x", "gpu.grid_dim x")
    stages: dict[str, str] = {}
    image = compile_to_hsaco(source, "gfx942", max_block_size=BLOCK, dump=stages.__setitem__)
    assert "__ockl_get_num_groups" in stages["llvm-ir"]
    assert "__ockl" not in stages["llvm-ir-optimised"]  # inlined and gone
    assert b"__ockl" not in image


def test_max_block_size_is_respected_and_an_explicit_one_kept():
    stages: dict[str, str] = {}
    compile_to_hsaco(VECTOR_ADD, "gfx942", max_block_size=128, dump=stages.__setitem__)
    assert ".max_flat_workgroup_size: 128" in stages["amdgcn-asm"]


@pytest.mark.parametrize(
    "op, element, reported",
    [
        ("math.erf", "f32", "math.erf on f32"),
        ("math.sin", "f32", "math.sin on f32"),
        ("math.exp", "f64", "math.exp on f64"),
        ("math.atan", "f32", "llvm.atan.f32"),
    ],
)
def test_math_that_needs_the_device_libraries_is_refused_by_name(op, element, reported):
    source = UNARY.replace("TYPE", element).replace("OP", op)
    with pytest.raises(UnsupportedError, match="ROCm backend cannot compile") as info:
        compile_to_hsaco(source, "gfx942", max_block_size=BLOCK)
    assert reported in str(info.value)


@pytest.mark.parametrize("op", ["math.exp", "math.log", "math.sqrt", "math.tanh", "math.rsqrt"])
def test_math_the_hardware_does_compiles(op):
    source = UNARY.replace("TYPE", "f32").replace("OP", op)
    image = compile_to_hsaco(source, "gfx90a", max_block_size=BLOCK)
    assert elf_machine(image) == EM_AMDGPU


def test_check_supported_accepts_f32_intrinsics_and_rejects_f64_sin():
    import llvmlite.binding as llvm

    ok = llvm.parse_assembly("declare float @llvm.sin.f32(float)\n")
    check_supported(ok)
    bad = llvm.parse_assembly("declare double @llvm.sin.f64(double)\n")
    with pytest.raises(UnsupportedError, match=r"llvm\.sin\.f64"):
        check_supported(bad)


def test_bad_inputs_get_clear_errors():
    with pytest.raises(UnsupportedError, match="AMDGPU architecture"):
        lower_to_llvm_ir(VECTOR_ADD, "sm_90", max_block_size=BLOCK)
    with pytest.raises(UnsupportedError, match="exactly one gpu.module"):
        lower_to_llvm_ir("module {}", "gfx942", max_block_size=BLOCK)
    no_kernel = VECTOR_ADD.replace(") \n        kernel {", ") {").replace("kernel {", "{")
    with pytest.raises(UnsupportedError, match="no kernel"):
        lower_to_llvm_ir(no_kernel, "gfx942", max_block_size=BLOCK)


def test_an_mlir_module_object_is_accepted_and_left_unchanged():
    from mlir import ir

    with ir.Context():
        module = ir.Module.parse(VECTOR_ADD)
        before = str(module)
        llvm_ir, kernels = lower_to_llvm_ir(module, "gfx942", max_block_size=BLOCK)
        assert str(module) == before
    assert kernels == ("vector_add",)
    assert "define amdgpu_kernel void @vector_add(ptr" in llvm_ir  # bare pointers


def test_a_missing_compile_extra_is_named(monkeypatch):
    from heron.runtime.rocm.compiler import CompilerUnavailableError

    monkeypatch.setitem(sys.modules, "mlir", None)
    with pytest.raises(CompilerUnavailableError, match=r"heron-runtime-rocm\[compile\]"):
        compile_to_hsaco(VECTOR_ADD, "gfx942", max_block_size=BLOCK)


def test_the_runtime_package_imports_without_mlir(monkeypatch):
    import importlib

    monkeypatch.setitem(sys.modules, "mlir", None)
    monkeypatch.setitem(sys.modules, "llvmlite", None)
    for name in ["heron.runtime.rocm.compiler", "heron.runtime.rocm.compiler_mlir"]:
        monkeypatch.delitem(sys.modules, name, raising=False)
    module = importlib.import_module("heron.runtime.rocm.compiler")
    assert callable(module.compile_to_hsaco)


def test_a_processor_llvm_does_not_know_is_one_error_and_no_warnings(capfd):
    with pytest.raises(UnsupportedError, match="does not know the processor 'gfx999'"):
        compile_to_hsaco(_kernel("vector_add"), "gfx999", max_block_size=BLOCK)
    assert "not a recognized processor" not in capfd.readouterr().err
