"""The NVVM backend's MLIR passes; the shared lowering is heron.emitters.pipeline.gpu_lowering.

Kept apart from ``compiler.py`` so that the steps (one pass pipeline per
step, each dumpable) read in order, and so that nothing here is imported
until a compilation is asked for: a runtime-only install has no MLIR
bindings, and importing this module must not be what breaks it.
"""

from __future__ import annotations

import functools

from heron.emitters.pipeline.gpu_lowering import (
    CompilerUnavailableError,
    Dump,
    Step,
    backend_steps,
)
from heron.emitters.pipeline.gpu_lowering import lower_gpu_module as _lower_gpu_module

COMPILE_EXTRA = "heron-runtime-cuda[compile]"


def nvvm_steps(index_bitwidth: int, bare_pointers: bool) -> list[Step]:
    """``(stage name, pass pipeline)`` pairs, run one at a time so each can be dumped.

    The shared steps (``heron.emitters.pipeline.gpu_lowering.backend_steps``) with
    ``convert-gpu-to-nvvm`` as the conversion, which turns math ops into
    libdevice calls (heron's expand-math leaves none), preceded by
    ``convert-nvgpu-to-nvvm`` for the MMA ops of the GEMM emitter.
    """
    bare = "true" if bare_pointers else "false"
    gpu_to_nvvm = (
        f"convert-gpu-to-nvvm{{index-bitwidth={index_bitwidth}"
        f" use-bare-ptr-memref-call-conv={bare}}}"
    )
    # nvgpu.mma.sync (the GEMM emitter's tensor-core path) becomes nvvm.mma.sync first:
    # convert-gpu-to-nvvm leaves nvgpu ops alone, convert-nvgpu-to-nvvm refuses bf16.
    # Divisions the emitters allow 2 ulp become div.full.f32, the approximate exp2
    # ex2.approx.ftz.f32 (heron.runtime.cuda.compiler_fast_math).
    # Marked runs of atomic adds become one vector reduction (compiler_vector_atomics).
    from heron.runtime.cuda.compiler_fast_math import lower_fast_math
    from heron.runtime.cuda.compiler_mma import lower_bf16_mma
    from heron.runtime.cuda.compiler_vector_atomics import lower_vector_atomics

    steps = backend_steps("convert-gpu-to-nvvm", f"convert-nvgpu-to-nvvm,{gpu_to_nvvm}")
    at = [name for name, _ in steps].index("convert-gpu-to-nvvm")
    own = [
        ("lower-bf16-mma", lower_bf16_mma),
        ("fast-math", lower_fast_math),
        (
            "vector-atomics",
            functools.partial(lower_vector_atomics, index_bitwidth=index_bitwidth),
        ),
    ]
    return [*steps[:at], *own, *steps[at:]]


#: The shared lowering (``heron.emitters.pipeline.gpu_lowering``), naming this backend's extra.
lower_gpu_module = functools.partial(_lower_gpu_module, extra=COMPILE_EXTRA)


__all__ = ["COMPILE_EXTRA", "CompilerUnavailableError", "Dump", "lower_gpu_module"]
