"""The ROCm backend as a ``heron.backends`` plugin (registered in this package's pyproject).

Its stages (``heron.runtime.rocm.stages``, imported only to compile) turn a
``lower-tensors`` module into LLVM IR, an AMDGPU object and a linked HSACO.
Running kernels needs heron's ROCm device, which is not implemented yet (the
runtime issue brings it): until then the backend reports itself unavailable,
saying why, and ``auto`` falls back to the interpreter.
"""

from __future__ import annotations

from heron.runtime.core.gpu_backend import compile_only_backend
from heron.runtime.core.hookspecs import BackendSpec, Stage, hookimpl
from heron.runtime.rocm.driver import probe

STAGES = (
    Stage(
        "llvm-ir",
        "heron.runtime.rocm.stages:to_llvm_ir",
        extension="ll",
        description="MLIR to ROCDL LLVM IR (math expanded, convert-gpu-to-rocdl, translation)",
    ),
    Stage(
        "object",
        "heron.runtime.rocm.stages:to_object",
        extension="o",
        description="llvmlite O3 and the AMDGPU code generator: a relocatable object",
    ),
    Stage(
        "hsaco",
        "heron.runtime.rocm.stages:to_hsaco",
        extension="hsaco",
        description="ld.lld (ziglang): the loadable code object, checked to be AMDGPU ELF",
    ),
)


@hookimpl
def heron_backend_specs() -> BackendSpec:
    return compile_only_backend(
        name="rocm",
        platform="ROCm",
        priority=20,
        probe=probe,
        stages=STAGES,
        description="ROCm GPUs (an HSACO)",
    )
