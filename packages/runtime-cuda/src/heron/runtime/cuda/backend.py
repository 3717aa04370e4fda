"""The CUDA backend as a ``heron.backends`` plugin (registered in this package's pyproject).

Its stages (``heron.runtime.cuda.stages``, imported only to compile) turn a
``lower-tensors`` module into LLVM IR, PTX and, with ptxas, a cubin. Running
kernels needs heron's CUDA device, which is not implemented yet (the runtime
issue brings it): until then the backend reports itself unavailable, saying
why, and ``auto`` falls back to the interpreter.
"""

from __future__ import annotations

from heron.runtime.core.gpu_backend import compile_only_backend
from heron.runtime.core.hookspecs import BackendSpec, Stage, hookimpl
from heron.runtime.cuda.driver import probe

STAGES = (
    Stage(
        "llvm-ir",
        "heron.runtime.cuda.stages:to_llvm_ir",
        extension="ll",
        description="MLIR to NVVM LLVM IR (convert-gpu-to-nvvm, translation)",
    ),
    Stage(
        "ptx",
        "heron.runtime.cuda.stages:to_ptx",
        extension="ptx",
        description="llvmlite O3 (libdevice linked when used) and the NVPTX printer",
    ),
    Stage(
        "cubin",
        "heron.runtime.cuda.stages:to_cubin",
        extension="cubin",
        description="ptxas; skipped when ptxas is not installed (PTX is loadable too)",
    ),
)


@hookimpl
def heron_backend_specs() -> BackendSpec:
    return compile_only_backend(
        name="cuda",
        platform="CUDA",
        priority=30,
        probe=probe,
        stages=STAGES,
        description="CUDA GPUs (PTX and cubin)",
    )
