"""heron's side: each fusion of the module compiled for the target, measured like XLA's.

Every fusion goes through ``heron.compiler.compile_fusion`` for the CUDA
Target of the same name (h100, a100): emission, heron's passes, LLVM IR,
PTX. Its PTX is measured with ``heron.runtime.cuda.ptx_statistics``; its
resource usage and SASS come from the same ptxas and nvdisasm that measure
XLA's PTX.
"""

from __future__ import annotations

from dataclasses import dataclass

from heron.hlo.ir import Instruction, Module
from heron.runtime.cuda.ptx_statistics import KernelStatistics, ResourceUsage, kernel_statistics
from heron.runtime.cuda.sass_statistics import SassStatistics
from heron.xla_compare.launch import LaunchShape


@dataclass
class HeronKernel(LaunchShape):
    """One fusion as heron compiled it (``error`` set when heron refused it)."""

    fusion: str
    kernel: str = ""
    emitter: str = ""
    grid: tuple[int, int, int] = (0, 0, 0)
    block: tuple[int, int, int] = (0, 0, 0)
    fused_names: frozenset[str] = frozenset()
    stats: KernelStatistics | None = None
    resources: ResourceUsage | None = None
    sass: SassStatistics | None = None
    ptx: str = ""
    seconds: float = 0.0
    error: str | None = None
    #: The library that computes this fusion instead of a kernel (``cublaslt``), or None.
    library: str | None = None

    @property
    def shared_memory(self) -> int | None:
        return self.resources.shared_memory if self.resources is not None else None


def fused_names(fusion: Instruction) -> frozenset[str]:
    """The names of the instructions ``fusion`` calls (parameters left out)."""
    names: set[str] = set()
    for computation in fusion.called_computations():
        names.update(i.name for i in computation.instructions if i.opcode != "parameter")
    return frozenset(names)


def heron_target(name: str):
    """heron's Target preset ``name`` (a CUDA device)."""
    from heron.compiler import Target

    return Target.preset(name)


def program_fusions(module: Module, target_name: str) -> list[Instruction]:
    """The kernels heron's whole pipeline makes of an unfused ``module`` (as JAX prints a
    program): ``heron.compiler.executable.prepare_module``'s fusions, in every computation."""
    from heron.compiler.executable import prepare_module

    optimized, _ = prepare_module(module, heron_target(target_name))
    return [inst for inst in optimized.instructions() if inst.opcode == "fusion"]


def compile_with_heron(
    module: Module,
    target_name: str,
    fusion: str | None = None,
    *,
    full: bool = True,
    program: bool = False,
) -> list[HeronKernel]:
    """Each fusion of ``module`` (or only ``fusion``) compiled for ``target_name``.

    ``full=False`` stops after emission (the launch only, no PTX). ``program``: the
    module is a whole unfused program; heron's pipeline fuses it first
    (:func:`program_fusions`), a fusion a library computes (a cuBLASLt GEMM) is
    listed as that library, not compiled, and one that launches a library kernel (a
    top-k: :mod:`heron.compiler.library_kernels`) is that kernel.
    """
    from heron.compiler import compile_fusion, selected_fusions
    from heron.compiler.library_gemm import gemm_fusion
    from heron.compiler.library_kernels import library_kernels_for
    from heron.hlo.errors import HloError

    target = heron_target(target_name)
    fusions = program_fusions(module, target_name) if program else None
    if fusions is None:
        fusions = selected_fusions(module, fusion)
    elif fusion is not None:
        fusions = [f for f in fusions if fusion in (f.name, f.called("calls").name)]
    kernels = []
    for instruction in fusions:
        kernel = HeronKernel(instruction.name, fused_names=fused_names(instruction))
        if program and target.gemm_library and gemm_fusion(instruction, target) is not None:
            kernel.library = target.gemm_library
            kernels.append(kernel)
            continue
        try:
            # A program's top-k launches the library kernel (built once), not its own.
            library = library_kernels_for(instruction, target, ("cuda",)) if program else None
            compiled = (library or {}).get("cuda") or compile_fusion(
                instruction, target, "cuda", stop_after=None if full else "emitted"
            )
        except HloError as exc:
            kernel.error = str(exc).splitlines()[0]
            kernels.append(kernel)
            continue
        kernel.seconds = compiled.seconds
        kernel.kernel = compiled.kernel_name
        kernel.emitter = compiled.emitter
        kernel.grid = compiled.grid
        kernel.block = compiled.block
        for artefact in compiled.artefacts:
            if artefact.extension == "ptx":
                kernel.ptx = artefact.data.decode()
        if kernel.ptx:
            kernel.stats = kernel_statistics(kernel.ptx).get(compiled.kernel_name)
        kernels.append(kernel)
    return kernels
