"""The ROCm backend's stages: ``lower-tensors`` MLIR -> LLVM IR -> AMDGPU object -> HSACO.

Each function follows the stage contract of ``heron.runtime.core.hookspecs``
(``fn(previous, context)``) and is named, not imported, by the backend's spec
(``heron.runtime.rocm.backend``): this module needs the ``[compile]`` extra.
The work is done by ``heron.runtime.rocm.compiler``; a stage adds what a
compile of one fusion for one Target needs: the Target's arch as the chipset,
its block-size limit as the kernels' flat work-group size, the check that the
module holds exactly the fusion's kernel, and a KernelImage.
"""

from __future__ import annotations

from typing import Any

from heron.hlo.errors import UnsupportedError
from heron.runtime.core.device import KernelImage
from heron.runtime.core.gpu_backend import lowering_dump
from heron.runtime.core.hookspecs import StageContext
from heron.runtime.rocm.compiler import llvm_ir_to_object, lower_to_llvm_ir
from heron.runtime.rocm.compiler_tools import link_hsaco

__all__ = ["to_hsaco", "to_llvm_ir", "to_object"]


def to_llvm_ir(module: Any, context: StageContext) -> str:
    """The ``lower-tensors`` module -> ROCDL LLVM IR holding the fusion's one kernel."""
    target = context.target
    llvm_ir, kernels = lower_to_llvm_ir(
        module,
        target.arch,
        max_block_size=target.threads_per_block_limit,
        dump=lowering_dump(context),
    )
    if kernels != (context.kernel_name,):
        raise UnsupportedError(
            f"the LLVM IR holds kernels {', '.join(kernels)}; expected only {context.kernel_name}"
        )
    return llvm_ir


def to_object(llvm_ir: str, context: StageContext) -> bytes:
    """LLVM IR -> a relocatable AMDGPU object for the Target's arch."""
    return llvm_ir_to_object(
        llvm_ir, (context.kernel_name,), context.target.arch, dump=context.dump
    )


def to_hsaco(obj: bytes, context: StageContext) -> KernelImage:
    """The object linked into the loadable code object (``link_hsaco`` checks it is AMDGPU)."""
    return KernelImage("hsaco", context.kernel_name, link_hsaco(obj))
