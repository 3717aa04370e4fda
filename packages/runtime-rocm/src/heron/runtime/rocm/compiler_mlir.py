"""The ROCDL backend's MLIR passes; the shared lowering is heron.emitters.pipeline.gpu_lowering.

Kept apart from ``compiler.py`` so that the steps (one pass pipeline per
step, each dumpable) read in order, and so that nothing here is imported
until a compilation is asked for: a runtime-only install has no MLIR
bindings, and importing this module must not be what breaks it.
"""

from __future__ import annotations

import functools

from heron.emitters.pipeline.gpu_lowering import CompilerUnavailableError, Dump, backend_steps
from heron.emitters.pipeline.gpu_lowering import lower_gpu_module as _lower_gpu_module

COMPILE_EXTRA = "heron-runtime-rocm[compile]"


def rocdl_steps(chipset: str, index_bitwidth: int, bare_pointers: bool) -> list[tuple[str, str]]:
    """``(stage name, pass pipeline)`` pairs, run one at a time so each can be dumped.

    The first step is the ROCm-specific one: ``convert-gpu-to-rocdl`` turns
    most math ops into OCML calls (``__ocml_tanh_f32``), which live in the
    ROCm device libraries that heron does not ship. ``math-expand-ops``
    first rewrites tanh, sinh, cosh, powf, rsqrt, ... into arithmetic and
    ``math.exp``; the ROCDL conversion then makes f32 ``math.exp``/``log``
    LLVM intrinsics (scalarising vectors) that the AMDGPU code generator
    turns into instructions (``v_exp_f32``). Running ``convert-math-to-llvm``
    here instead would be wrong: it makes vector intrinsics, which the ROCDL
    conversion marks illegal. What is left over (an OCML call, an f64 exp)
    is reported by ``compiler.check_supported``.
    """
    bare = "true" if bare_pointers else "false"
    gpu_to_rocdl = (
        f"convert-gpu-to-rocdl{{chipset={chipset} index-bitwidth={index_bitwidth}"
        f" use-bare-ptr-memref-call-conv={bare}}}"
    )
    return [
        ("math-expand-ops", "builtin.module(gpu.module(math-expand-ops))"),
        *backend_steps("convert-gpu-to-rocdl", gpu_to_rocdl),
    ]


#: The shared lowering (``heron.emitters.pipeline.gpu_lowering``), naming this backend's extra.
lower_gpu_module = functools.partial(_lower_gpu_module, extra=COMPILE_EXTRA)


__all__ = ["COMPILE_EXTRA", "CompilerUnavailableError", "Dump", "lower_gpu_module"]
