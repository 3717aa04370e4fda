"""The NVVM backend's MLIR passes; the shared lowering is heron.runtime.core.gpu_lowering.

Kept apart from ``compiler.py`` so that the steps (one pass pipeline per
step, each dumpable) read in order, and so that nothing here is imported
until a compilation is asked for: a runtime-only install has no MLIR
bindings, and importing this module must not be what breaks it.
"""

from __future__ import annotations

from typing import Any

from heron.runtime.core.gpu_lowering import CompilerUnavailableError, Dump
from heron.runtime.core.gpu_lowering import lower_gpu_module as _lower_gpu_module

COMPILE_EXTRA = "heron-runtime-cuda[compile]"


def nvvm_steps(index_bitwidth: int, bare_pointers: bool) -> list[tuple[str, str]]:
    """``(stage name, pass pipeline)`` pairs, run one at a time so each can be dumped.

    ``expand-strided-metadata`` and ``lower-affine`` come first because the
    indexing code arrives as ``affine.apply`` and memref views; structured
    control flow must be CFG before the gpu-to-nvvm conversion, which then
    turns gpu/arith/math/memref/vector ops (math into libdevice calls) into
    the LLVM and NVVM dialects; the casts it leaves between index and i64
    are reconciled last.
    """
    bare = "true" if bare_pointers else "false"
    gpu_to_nvvm = (
        f"convert-gpu-to-nvvm{{index-bitwidth={index_bitwidth}"
        f" use-bare-ptr-memref-call-conv={bare}}}"
    )
    return [
        ("expand-strided-metadata", "builtin.module(expand-strided-metadata)"),
        ("lower-affine", "builtin.module(lower-affine)"),
        ("arith-expand", "builtin.module(arith-expand)"),
        ("convert-scf-to-cf", "builtin.module(convert-scf-to-cf)"),
        ("convert-gpu-to-nvvm", f"builtin.module(gpu.module({gpu_to_nvvm}))"),
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
