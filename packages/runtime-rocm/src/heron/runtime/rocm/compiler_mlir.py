"""The ROCDL backend's MLIR passes; the shared lowering is heron.runtime.core.gpu_lowering.

Kept apart from ``compiler.py`` so that the steps (one pass pipeline per
step, each dumpable) read in order, and so that nothing here is imported
until a compilation is asked for: a runtime-only install has no MLIR
bindings, and importing this module must not be what breaks it.
"""

from __future__ import annotations

from typing import Any

from heron.runtime.core.gpu_lowering import CompilerUnavailableError, Dump
from heron.runtime.core.gpu_lowering import lower_gpu_module as _lower_gpu_module

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
        ("expand-strided-metadata", "builtin.module(expand-strided-metadata)"),
        ("lower-affine", "builtin.module(lower-affine)"),
        ("arith-expand", "builtin.module(arith-expand)"),
        ("convert-scf-to-cf", "builtin.module(convert-scf-to-cf)"),
        ("convert-gpu-to-rocdl", f"builtin.module(gpu.module({gpu_to_rocdl}))"),
        ("reconcile-unrealized-casts", "builtin.module(reconcile-unrealized-casts)"),
    ]


def lower_gpu_module(
    module: Any,
    steps: list[tuple[str, str]],
    kernel_attrs: tuple[str, ...],
    dump: Dump | None = None,
    default_kernel_attrs: dict[str, str] | None = None,
) -> tuple[str, tuple[str, ...]]:
    """The shared lowering (``heron.runtime.core.gpu_lowering``), naming this backend's extra."""
    return _lower_gpu_module(
        module,
        steps,
        kernel_attrs,
        extra=COMPILE_EXTRA,
        dump=dump,
        default_kernel_attrs=default_kernel_attrs,
    )


__all__ = ["COMPILE_EXTRA", "CompilerUnavailableError", "Dump", "lower_gpu_module"]
