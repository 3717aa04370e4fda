"""The CUDA backend's stages: ``lower-tensors`` MLIR -> LLVM IR -> PTX -> cubin.

Each function follows the stage contract of ``heron.runtime.core.hookspecs``
(``fn(previous, context)``) and is named, not imported, by the backend's spec
(``heron.runtime.cuda.backend``): this module needs the ``[compile]`` extra.
The work is done by ``heron.runtime.cuda.compiler``; a stage adds what a
compile of one fusion for one Target needs: the Target's arch and PTX ISA, the
check that the module holds exactly the fusion's kernel, and a KernelImage.

ptxas is optional: PTX is itself loadable (the driver JIT-compiles it), so
without ptxas (neither nvJitLink nor the executable:
``compiler_tools.cubin_assembler``) the ``cubin`` stage is skipped, and says
why. This is the one place that decides it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from heron.hlo.errors import UnsupportedError
from heron.runtime.core.device import KernelImage
from heron.runtime.core.gpu_backend import lowering_dump
from heron.runtime.core.hookspecs import StageContext, StageSkipped
from heron.runtime.cuda.compiler import llvm_ir_to_ptx, lower_to_llvm_ir
from heron.runtime.cuda.compiler_tools import (
    ToolNotFoundError,
    assemble_cubin,
    assemble_cubins,
    cubin_assembler,
)

__all__ = ["to_cubin", "to_cubins", "to_llvm_ir", "to_ptx"]


def to_llvm_ir(module: Any, context: StageContext) -> str:
    """The ``lower-tensors`` module -> NVVM LLVM IR holding the fusion's one kernel."""
    llvm_ir, kernels = lower_to_llvm_ir(module, dump=lowering_dump(context))
    if kernels != (context.kernel_name,):
        raise UnsupportedError(
            f"the LLVM IR holds kernels {', '.join(kernels)}; expected only {context.kernel_name}"
        )
    return llvm_ir


def to_ptx(llvm_ir: str, context: StageContext) -> KernelImage:
    """LLVM IR -> PTX for the Target's arch and PTX ISA (a loadable image)."""
    target = context.target
    ptx = llvm_ir_to_ptx(
        llvm_ir,
        (context.kernel_name,),
        target.arch,
        ptx_version=target.isa_version,
        dump=context.dump,
    )
    return KernelImage("ptx", context.kernel_name, ptx.encode())


def to_cubin(ptx: KernelImage, context: StageContext) -> KernelImage:
    """PTX -> a cubin through ptxas (nvJitLink or the executable); skipped, with the
    reason, when neither is installed."""
    try:
        cubin_assembler()
    except ToolNotFoundError as exc:
        raise StageSkipped(str(exc)) from exc
    cubin = assemble_cubin(ptx.data.decode(), context.target.arch)
    return KernelImage("cubin", context.kernel_name, cubin)


def to_cubins(items: Sequence[tuple[KernelImage, StageContext]]) -> list[KernelImage]:
    """Several kernels' PTX -> one cubin holding them all, through one ptxas (the ``cubin``
    stage batched: ``heron.runtime.core.hookspecs.Stage.batched``); each kernel's image
    is that cubin under its own kernel name. Skipped as :func:`to_cubin` is."""
    try:
        cubin_assembler()
    except ToolNotFoundError as exc:
        raise StageSkipped(str(exc)) from exc
    archs = {context.target.arch for _, context in items}
    if len(archs) != 1:
        raise ValueError(f"to_cubins: one cubin is for one arch, not {sorted(archs)}")
    names = [context.kernel_name for _, context in items]
    if len(set(names)) != len(names):
        raise ValueError(f"to_cubins: kernel names repeat in {names}")
    cubin = assemble_cubins(
        {name: ptx.data.decode() for name, (ptx, _) in zip(names, items)}, archs.pop()
    )
    return [KernelImage("cubin", name, cubin) for name in names]
