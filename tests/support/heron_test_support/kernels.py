"""Hand-written ``gpu.module`` kernels through a heron pass and on to both GPU backends.

Tests of the late passes (expand-math, lower-tensors) check more than the IR
they print: that the result compiles, with nothing left for the vendor's math
library, to PTX that ptxas accepts and to an AMDGPU code object. Parsing the
kernel, running the pass, and compiling with each backend's stage dump are
the same steps in each of those tests, so they live here.

The backends (heron-runtime-cuda, heron-runtime-rocm) build on this package;
they are imported only when a compile helper is called.
"""

from __future__ import annotations

from collections.abc import Callable

from mlir import ir

from heron.emitters.dialect import make_context


def kernel_after(text: str, step: Callable[[ir.Module], None]) -> str:
    """``text`` parsed in a fresh context, changed by ``step`` (a pass), verified and printed."""
    with make_context(), ir.Location.unknown():
        module = ir.Module.parse(text)
        step(module)
        module.operation.verify()
        return str(module)


def gpu_module(text: str, backend: str = "cuda") -> str:
    """``text`` (flat tensors, as simplify-indexing leaves a kernel) through the pipeline's
    last two passes, lower-heron-gpu-to-scf and lower-tensors, for ``backend``."""
    from heron.emitters.pipeline import PipelineOptions, lower_tensors, lower_to_scf

    options = PipelineOptions(backend=backend, warp_size=64 if backend == "rocm" else 32)

    def lower(module: ir.Module) -> None:
        lower_to_scf.run(module, options)
        lower_tensors.run(module, options)

    return kernel_after(text, lower)


def ptx_and_stages(text: str, arch: str) -> tuple[str, dict[str, str]]:
    """The PTX of ``text`` for ``arch`` (checked by ptxas) and every stage the compiler dumped."""
    from heron.runtime.cuda.compiler import compile_to_ptx, validate_ptx
    from heron.target import ptx_isa_version

    stages: dict[str, str] = {}
    version = ptx_isa_version(arch)
    ptx = compile_to_ptx(text, arch, ptx_version=version, dump=stages.__setitem__).ptx
    validate_ptx(ptx, arch)
    return ptx, stages


def hsaco_stages(text: str, arch: str) -> dict[str, str]:
    """Every stage dumped while compiling ``text`` for ``arch``; the result must be AMDGPU ELF."""
    from heron.runtime.rocm.compiler import EM_AMDGPU, compile_to_hsaco, elf_machine

    stages: dict[str, str] = {}
    from heron.target import Target

    block = Target.preset("mi300x").threads_per_block_limit  # the same on every ROCm preset
    hsaco = compile_to_hsaco(text, arch, max_block_size=block, dump=stages.__setitem__)
    assert elf_machine(hsaco) == EM_AMDGPU, f"{arch}: not an AMDGPU code object"
    return stages
