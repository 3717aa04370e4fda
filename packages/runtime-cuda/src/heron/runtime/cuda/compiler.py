"""The NVVM backend: a ``gpu.module`` of kernels -> PTX (and, with ptxas, cubin).

The steps, each reported to ``dump(stage, text)`` when one is given:

1. MLIR: ``expand-strided-metadata``, ``lower-affine``, ``arith-expand``,
   ``convert-scf-to-cf``, ``convert-gpu-to-nvvm`` nested on the gpu.module
   (bare-pointer memref arguments by default: a kernel takes one pointer per
   buffer, as XLA's do), ``reconcile-unrealized-casts``.
2. ``mlir.dialects.llvm.translate_module_to_llvmir`` on the gpu.module's
   contents: kernels come out with LLVM's ``ptx_kernel`` calling convention
   (from the ``nvvm.kernel`` attribute the conversion sets).
3. llvmlite (LLVM 22, like the bindings): libdevice is linked in only when the
   IR calls ``__nv_*`` functions, then every symbol but the kernels is made
   internal so that the O3 pipeline (which includes NVVMReflect, through the
   target machine) drops the unused part of libdevice; without that the PTX
   carries all of it (about 21,000 lines for one tanh).
4. The NVPTX target machine (``cpu=sm_XX``, ``+ptxNN``) prints PTX.

MLIR and llvmlite are imported inside the functions: a runtime-only install
(no ``[compile]`` extra) can still import this package and run cubins/PTX.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable
from typing import Any

import attrs

from heron.emitters.pipeline.gpu_lowering import declared_functions, target_machine
from heron.hlo.errors import UnsupportedError
from heron.runtime.cuda.compiler_mlir import (
    COMPILE_EXTRA,
    CompilerUnavailableError,
    Dump,
    lower_gpu_module,
    nvvm_steps,
)
from heron.runtime.cuda.compiler_tools import (
    PtxasError,
    ToolNotFoundError,
    assemble_cubin,
    cubin_assembler,
    find_libdevice,
    find_ptxas,
    validate_ptx,
)

__all__ = [
    "CompiledKernels",
    "CompilerUnavailableError",
    "PtxasError",
    "ToolNotFoundError",
    "assemble_cubin",
    "check_arch",
    "cubin_assembler",
    "compile_to_ptx",
    "find_libdevice",
    "find_ptxas",
    "llvm_ir_to_ptx",
    "lower_to_llvm_ir",
    "validate_ptx",
]

NVPTX_TRIPLE = "nvptx64-nvidia-cuda"
KERNEL_ATTRS = ("nvvm.kernel", "gpu.kernel")
_ARCH = re.compile(r"sm_(\d+)[af]?")


@attrs.frozen
class CompiledKernels:
    """PTX for one gpu.module, the names of its ``.entry`` kernels, and the target."""

    ptx: str
    kernel_names: tuple[str, ...]
    arch: str


def check_arch(arch: str) -> None:
    """Refuse a name that is not an NVIDIA architecture (``sm_80``, ``sm_90a``, ...)."""
    if _ARCH.fullmatch(arch) is None:
        raise UnsupportedError(f"not an NVIDIA architecture name: {arch!r} (expected e.g. sm_90)")


def lower_to_llvm_ir(
    module: Any,
    *,
    index_bitwidth: int = 64,
    bare_pointers: bool = True,
    dump: Dump | None = None,
) -> tuple[str, tuple[str, ...]]:
    """MLIR (text or ``mlir.ir.Module``) -> (LLVM IR text, kernel names)."""
    return lower_gpu_module(
        module, nvvm_steps(index_bitwidth, bare_pointers), KERNEL_ATTRS, dump=dump
    )


@functools.cache
def _llvmlite() -> Any:
    try:
        import llvmlite.binding as llvm
    except ImportError as exc:
        raise CompilerUnavailableError(
            f"generating PTX needs llvmlite ({exc}); install {COMPILE_EXTRA!r}"
        ) from exc
    llvm.initialize_all_targets()
    llvm.initialize_all_asmprinters()
    return llvm


@functools.cache
def _libdevice_bitcode() -> bytes:
    return find_libdevice().read_bytes()


def llvm_ir_to_ptx(
    llvm_ir: str,
    kernel_names: tuple[str, ...],
    arch: str,
    *,
    ptx_version: int,
    opt_level: int = 3,
    dump: Dump | None = None,
) -> str:
    """LLVM IR (NVPTX flavour) -> PTX, linking the part of libdevice it uses.

    ``ptx_version`` (times ten) is the PTX ISA to declare: the Target's
    ``isa_version`` (``heron.compiler.Target``, the one table of which PTX
    an architecture needs).
    """
    check_arch(arch)
    llvm = _llvmlite()
    version = ptx_version
    machine = target_machine(llvm, NVPTX_TRIPLE, arch, features=f"+ptx{version}", opt=opt_level)
    # A context of its own: the stage runs on worker threads beside other kernels' (a
    # program's compile), and what a module interns in a context is freed with it.
    context = llvm.create_context()
    try:
        layout = _data_layout(arch, version, opt_level)
        return _optimised_ptx(
            llvm, context, machine, layout, llvm_ir, kernel_names, opt_level, dump
        )
    finally:
        context.close()


def _optimised_ptx(
    llvm: Any,
    context: Any,
    machine: Any,
    data_layout: str,
    llvm_ir: str,
    kernel_names: tuple[str, ...],
    opt_level: int,
    dump: Dump | None,
) -> str:
    """Parse, link libdevice where called, O3, print PTX.

    Every call into llvmlite leaves the GIL and takes it back, which costs up to a
    switch interval (5 ms) while the compiling thread runs Python (this stage runs on a
    worker beside the emission of the next kernels). So what can be read from the text
    is: the functions it declares (:func:`declared_functions`); every definition but the
    kernels is internal already (``lower_gpu_module``), and only a module that linked
    libdevice is walked function by function.
    """
    declared = declared_functions(llvm_ir)
    libdevice_calls = any(name.startswith("__nv_") for name in declared)
    _refuse_undefined(name for name in declared if not name.startswith("__nv_"))
    try:
        module = llvm.parse_assembly(llvm_ir, context=context)
    except RuntimeError as exc:
        raise UnsupportedError(f"llvmlite could not parse the LLVM IR: {exc}") from exc
    try:
        module.triple = NVPTX_TRIPLE
        module.data_layout = data_layout
        if libdevice_calls:
            libdevice = llvm.parse_bitcode(_libdevice_bitcode(), context=context)
            libdevice.triple = module.triple
            libdevice.data_layout = module.data_layout
            module.link_in(libdevice)
            _internalise_all_but(module, set(kernel_names))
        module.verify()
        tuning = llvm.create_pipeline_tuning_options(speed_level=opt_level)
        # No loop vectorizer: NVPTX has no vector registers for it to fill (heron's
        # vectorize-loads-stores makes the v2/v4 accesses), and it changed none of the
        # 1,154 kernels of both corpora while it costs the O3 pipeline a few percent
        # of a program's compile (docs/benchmarks.md).
        tuning.loop_vectorization = False
        tuning.loop_interleaving = False
        builder = llvm.create_pass_builder(machine, tuning)
        builder.getModulePassManager().run(module, builder)
        if dump is not None:
            dump("llvm-ir-optimised", str(module))
        if libdevice_calls:
            _check_libdevice_resolved(module)
        ptx = machine.emit_assembly(module)
    finally:
        module.close()  # before its context
    if dump is not None:
        dump("ptx", ptx)
    return ptx


#: Functions a kernel may declare that the CUDA driver provides (``printf``'s).
_RUNTIME_FUNCTIONS = frozenset({"vprintf"})


@functools.cache
def _data_layout(arch: str, ptx_version: int, opt_level: int) -> str:
    """The NVPTX target machine's data layout for these options (asked of LLVM once)."""
    machine = target_machine(
        _llvmlite(), NVPTX_TRIPLE, arch, features=f"+ptx{ptx_version}", opt=opt_level
    )
    return str(machine.target_data)


def _check_libdevice_resolved(module: Any) -> None:
    """Refuse a call libdevice did not define (an ``__nv_`` name it lacks)."""
    _refuse_undefined(f.name for f in module.functions if f.is_declaration)


def _refuse_undefined(declared: Iterable[str]) -> None:
    """Refuse the kernels' calls to functions neither LLVM (intrinsics) nor the driver
    (:data:`_RUNTIME_FUNCTIONS`) provides, naming them."""
    unresolved = sorted(
        name for name in declared if not name.startswith("llvm.") and name not in _RUNTIME_FUNCTIONS
    )
    if unresolved:
        raise UnsupportedError(
            f"the kernels call functions with no definition: {', '.join(unresolved)}"
        )


def _internalise_all_but(module: Any, keep: set[str]) -> None:
    """Give internal linkage to every defined symbol not in ``keep``.

    That is what lets global DCE remove the libdevice functions nobody calls
    (and inline the ones that are called).
    """
    for function in module.functions:
        if not function.is_declaration and function.name not in keep:
            function.linkage = "internal"
    for variable in module.global_variables:
        if not variable.is_declaration and variable.name not in keep:
            variable.linkage = "internal"


def compile_to_ptx(
    module: Any,
    arch: str,
    *,
    ptx_version: int,
    opt_level: int = 3,
    index_bitwidth: int = 64,
    bare_pointers: bool = True,
    dump: Dump | None = None,
) -> CompiledKernels:
    """MLIR holding one ``gpu.module`` -> PTX for ``arch`` (e.g. ``sm_80``, ``sm_90``).

    ``ptx_version`` is the PTX ISA (times ten) to declare, e.g. a Target's
    ``isa_version``.
    """
    check_arch(arch)  # reject a bad name before any work
    llvm_ir, kernels = lower_to_llvm_ir(
        module, index_bitwidth=index_bitwidth, bare_pointers=bare_pointers, dump=dump
    )
    ptx = llvm_ir_to_ptx(
        llvm_ir, kernels, arch, ptx_version=ptx_version, opt_level=opt_level, dump=dump
    )
    return CompiledKernels(ptx=ptx, kernel_names=kernels, arch=arch)
