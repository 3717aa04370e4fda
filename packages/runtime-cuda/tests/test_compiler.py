"""The NVVM backend on the CPU: MLIR gpu.module -> PTX, judged by ptxas."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

from heron.hlo.errors import UnsupportedError
from heron.runtime.cuda.compiler import (
    CompiledKernels,
    PtxasError,
    assemble_cubin,
    compile_to_ptx,
    find_ptxas,
    lower_to_llvm_ir,
    validate_ptx,
)
from heron.target import ptx_isa_version

#: Test kernels shared with the other GPU backend's tests (tests/data/mlir at the repo root).
_KERNELS = Path(__file__).resolve().parents[3] / "tests" / "data" / "mlir"


def _kernel(name: str) -> str:
    return (_KERNELS / f"{name}.mlir").read_text()


VECTOR_ADD = _kernel("vector_add")

TANH_VEC4 = _kernel("tanh_vec4")


@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
def test_vector_add_becomes_ptx_that_ptxas_accepts(arch):
    compiled = compile_to_ptx(VECTOR_ADD, arch, ptx_version=ptx_isa_version(arch))
    assert isinstance(compiled, CompiledKernels)
    assert compiled.kernel_names == ("vector_add",)
    assert compiled.arch == arch
    assert f".target {arch}" in compiled.ptx
    assert ".visible .entry vector_add(" in compiled.ptx
    assert compiled.ptx.count(".param .u64") == 3  # bare pointers, one per buffer
    validate_ptx(compiled.ptx, arch)


@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
def test_tanh_links_only_the_needed_part_of_libdevice(arch):
    compiled = compile_to_ptx(TANH_VEC4, arch, ptx_version=ptx_isa_version(arch))
    ptx = compiled.ptx
    validate_ptx(ptx, arch)
    assert ".entry tanh_vec4(" in ptx
    # LLVM 22 prints untyped 32-bit vector accesses as .b32 (older LLVMs: .f32).
    assert re.search(r"ld\.global\.v4\.[bf]32", ptx)
    assert re.search(r"st\.global\.v4\.[bf]32", ptx)
    # All of libdevice would be ~21,000 lines; one tanh inlined four times is ~120.
    assert len(ptx.splitlines()) < 2000
    assert "__nv_" not in ptx
    assert ".func" not in ptx  # nothing but the kernel survives internalisation
    assert "__nvvm_reflect" not in ptx


def test_every_stage_is_dumped_in_order():
    stages: dict[str, str] = {}
    compile_to_ptx(
        TANH_VEC4, "sm_90", ptx_version=ptx_isa_version("sm_90"), dump=stages.__setitem__
    )
    assert list(stages) == [
        "input",
        "expand-strided-metadata",
        "lower-affine",
        "arith-expand",
        "convert-scf-to-cf",
        "lower-bf16-mma",
        "fast-math",
        "vector-atomics",
        "convert-gpu-to-nvvm",
        "reconcile-unrealized-casts",
        "llvm-ir",
        "llvm-ir-optimised",
        "ptx",
    ]
    assert "scf.if" in stages["input"] and "scf.if" not in stages["convert-scf-to-cf"]
    assert "llvm.call @__nv_tanhf" in stages["convert-gpu-to-nvvm"]
    assert "define ptx_kernel void @tanh_vec4(ptr" in stages["llvm-ir"]
    assert "declare float @__nv_tanhf" in stages["llvm-ir"]
    assert "__nv_tanhf" not in stages["llvm-ir-optimised"]  # inlined from libdevice


def test_the_lowering_merges_its_steps_when_nothing_is_dumped():
    """Undumped, runs of pipeline strings are one pass manager and runs of Python steps one
    step verified once (:func:`_merged`); the LLVM IR is the dumped lowering's."""
    from heron.emitters.pipeline.gpu_lowering import _merged
    from heron.runtime.cuda.compiler_mlir import nvvm_steps

    merged = [name for name, _ in _merged(nvvm_steps(64, True))]
    assert merged == [
        "expand-strided-metadata+lower-affine+arith-expand+convert-scf-to-cf",
        "lower-bf16-mma+fast-math+vector-atomics",
        "convert-gpu-to-nvvm+reconcile-unrealized-casts",
    ]
    for kernel in (TANH_VEC4, VECTOR_ADD):
        dumped: dict[str, str] = {}
        assert lower_to_llvm_ir(kernel, dump=dumped.__setitem__)[0] == lower_to_llvm_ir(kernel)[0]


def test_cubin_is_an_elf_for_the_gpu():
    compiled = compile_to_ptx(VECTOR_ADD, "sm_90", ptx_version=ptx_isa_version("sm_90"))
    cubin = assemble_cubin(compiled.ptx, "sm_90")
    assert cubin[:4] == b"\x7fELF"
    assert int.from_bytes(cubin[18:20], "little") == 190  # EM_CUDA
    assert b"vector_add" in cubin


def test_invalid_ptx_is_rejected_quoting_ptxas():
    bad = compile_to_ptx(VECTOR_ADD, "sm_90", ptx_version=ptx_isa_version("sm_90")).ptx.replace(
        "add.s64", "add.bogus64", 1
    )
    with pytest.raises(PtxasError, match="ptxas rejected the PTX for sm_90") as info:
        validate_ptx(bad, "sm_90")
    assert "error   : " in str(info.value)  # ptxas's own words, with the line number
    assert re.search(r"kernel\.ptx, line \d+; error", str(info.value))
    assert info.value.ptxas_output in str(info.value)


def test_ptxas_is_found_in_the_nvidia_wheel():
    assert find_ptxas().name == "ptxas"


def test_a_bad_arch_is_refused_before_any_work():
    with pytest.raises(UnsupportedError, match="NVIDIA architecture"):
        compile_to_ptx(VECTOR_ADD, "gfx942", ptx_version=80)


def test_a_processor_llvm_does_not_know_is_one_error_and_no_warnings(capfd):
    with pytest.raises(UnsupportedError, match="does not know the processor 'sm_10'"):
        compile_to_ptx(VECTOR_ADD, "sm_10", ptx_version=80)
    assert "not a recognized processor" not in capfd.readouterr().err


def test_a_processor_llvm_does_not_know_is_refused_every_time():
    """The target machines are shared once made; a refused one is never kept."""
    for _ in range(2):
        with pytest.raises(UnsupportedError, match="does not know the processor 'sm_10'"):
            compile_to_ptx(VECTOR_ADD, "sm_10", ptx_version=80)


def test_ptx_made_on_several_threads_at_once_is_what_one_thread_makes():
    """The ``ptx`` stage runs on a program's workers (a context of its own per kernel,
    one target machine shared): kernels compiled side by side, libdevice linked or not,
    come out as they do one at a time."""
    from concurrent.futures import ThreadPoolExecutor

    from heron.runtime.cuda.compiler import llvm_ir_to_ptx

    kernels = {name: lower_to_llvm_ir(_kernel(name)) for name in ("vector_add", "tanh_vec4")}

    def ptx(name: str) -> str:
        llvm_ir, names = kernels[name]
        return llvm_ir_to_ptx(llvm_ir, names, "sm_90", ptx_version=ptx_isa_version("sm_90"))

    alone = {name: ptx(name) for name in kernels}
    order = list(kernels) * 6
    with ThreadPoolExecutor(4) as workers:
        side_by_side = list(workers.map(ptx, order))
    assert side_by_side == [alone[name] for name in order]


def test_llvm_dialect_kernels_pass_through():
    source = """
    module attributes {gpu.container_module} {
      gpu.module @kernels {
        llvm.func @store_one(%p: !llvm.ptr) attributes {nvvm.kernel} {
          %one = llvm.mlir.constant(1.0 : f32) : f32
          llvm.store %one, %p : f32, !llvm.ptr
          llvm.return
        }
      }
    }
    """
    compiled = compile_to_ptx(source, "sm_80", ptx_version=ptx_isa_version("sm_80"))
    assert compiled.kernel_names == ("store_one",)
    validate_ptx(compiled.ptx, "sm_80")


def test_bad_inputs_get_clear_errors():
    with pytest.raises(UnsupportedError, match="exactly one gpu.module"):
        lower_to_llvm_ir("module {}")
    no_kernel = VECTOR_ADD.replace("kernel {", "{")
    with pytest.raises(UnsupportedError, match="no kernel"):
        lower_to_llvm_ir(no_kernel)


def test_a_missing_compile_extra_is_named(monkeypatch):
    from heron.runtime.cuda.compiler import CompilerUnavailableError

    monkeypatch.setitem(sys.modules, "mlir", None)
    with pytest.raises(CompilerUnavailableError, match=r"heron-runtime-cuda\[compile\]"):
        compile_to_ptx(VECTOR_ADD, "sm_90", ptx_version=ptx_isa_version("sm_90"))


#: A kernel calling a helper function of the module and, optionally, an external one.
_HELPER_CALL = """
module attributes {gpu.container_module} {
  gpu.module @m {
    llvm.func @twice(%x: f32) -> f32 {
      %y = llvm.fadd %x, %x : f32
      llvm.return %y : f32
    }
    llvm.func @EXTERNAL(f32) -> f32
    llvm.func @k(%p: !llvm.ptr<1>) attributes {nvvm.kernel} {
      %v = llvm.load %p : !llvm.ptr<1> -> f32
      %w = llvm.call @CALLEE(%v) : (f32) -> f32
      llvm.store %w, %p : f32, !llvm.ptr<1>
      llvm.return
    }
  }
}
"""


def test_every_definition_but_the_kernels_is_internal_before_llvm():
    """lower_gpu_module gives the module's other definitions internal linkage, so O3
    inlines and drops them without the stage walking the module through llvmlite."""
    stages: dict[str, str] = {}
    compiled = compile_to_ptx(
        _HELPER_CALL.replace("CALLEE", "twice"),
        "sm_90",
        ptx_version=ptx_isa_version("sm_90"),
        dump=stages.__setitem__,
    )
    assert "define internal float @twice(" in stages["llvm-ir"]
    assert "define ptx_kernel void @k(" in stages["llvm-ir"]
    assert compiled.kernel_names == ("k",)
    assert ".func" not in compiled.ptx and "twice" not in compiled.ptx
    validate_ptx(compiled.ptx, "sm_90")


def test_a_call_to_a_function_nobody_defines_is_refused_by_name():
    with pytest.raises(UnsupportedError, match="functions with no definition: EXTERNAL"):
        compile_to_ptx(
            _HELPER_CALL.replace("CALLEE", "EXTERNAL"),
            "sm_90",
            ptx_version=ptx_isa_version("sm_90"),
        )
