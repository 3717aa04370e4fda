"""The ROCDL backend: a ``gpu.module`` of kernels -> an AMDGPU code object (HSACO).

The steps, each reported to ``dump(stage, text)`` when one is given:

1. MLIR: math ops are expanded and made LLVM intrinsics first (see
   ``compiler_mlir.rocdl_steps``: ROCDL would call OCML, which is not
   available), then the same structural lowering as the NVVM backend with
   ``convert-gpu-to-rocdl{chipset=gfxNNN}`` nested on the gpu.module.
   Kernels with no ``rocdl.flat_work_group_size`` get ``1,max_block_size``
   (the translation's default is 1,256: a launch with more threads fails);
   ``max_block_size`` is the Target's ``threads_per_block_limit``, which the
   caller passes (no default: a device fact is the Target's to say).
2. ``translate_module_to_llvmir``: kernels get the ``amdgpu_kernel``
   calling convention. The bindings' LLVM has no AMDGPU target, so:
3. llvmlite (LLVM 22, with AMDGPU): link the OCKL shims
   (``compiler_shims``), refuse what the AMDGPU code generator cannot do
   without device libraries (``check_supported``: some of those abort the
   process inside LLVM), internalise all but the kernels, O3, and emit an
   object for ``cpu=gfxNNN``. Code generation changes the module it runs on,
   so the assembly dump runs on a copy.
4. ``ld.lld -shared`` (from ziglang) links the loadable code object, checked to
   be an AMDGPU ELF (``compiler_tools.link_hsaco``).

Sub-byte integers (s2/s4/u2/u4, ``i2``/``i4`` in LLVM) stay scalar on AMDGPU.
LLVM's vectorizers turn heron's scalar ``trunc i8 to i4`` and ``i4``
arithmetic (an s4 reduction loop, say) into ``trunc <N x i8> to <N x i4>``
feeding ``<N x i4>`` ops; the AMDGPU type legaliser keeps the ``<N x i8>``
source and promotes the ``<N x i4>`` result to a type at least as wide, so the
truncate it rebuilds does not narrow, and LLVM aborts the process in
instruction selection (SelectionDAG's assertion "Invalid truncate node, src <
dst!"). ``llvm_ir_to_object`` therefore optimises again, with the loop and SLP
vectorizers off, a module to which they gave such truncates, and refuses
(``UnsupportedError``) one that still has them: they never reach the code
generator. Other sub-byte vectors are fine and stay (``load <16 x i2>`` then
``extractelement``, which O3 makes of heron's packed s2 loads).
"""

from __future__ import annotations

import functools
import re
from typing import Any

from heron.emitters.pipeline.gpu_lowering import declared_functions, target_machine
from heron.hlo.errors import UnsupportedError
from heron.runtime.rocm.compiler_mlir import (
    COMPILE_EXTRA,
    CompilerUnavailableError,
    Dump,
    lower_gpu_module,
    rocdl_steps,
)
from heron.runtime.rocm.compiler_shims import OCKL_SHIMS, SHIMMED
from heron.runtime.rocm.compiler_tools import (
    EM_AMDGPU,
    LinkError,
    ToolNotFoundError,
    elf_machine,
    link_hsaco,
)

__all__ = [
    "EM_AMDGPU",
    "CompilerUnavailableError",
    "LinkError",
    "ToolNotFoundError",
    "check_supported",
    "compile_to_hsaco",
    "elf_machine",
    "sub_byte_vector_truncates",
    "llvm_ir_to_object",
    "lower_to_llvm_ir",
]

AMDGPU_TRIPLE = "amdgcn-amd-amdhsa"
KERNEL_ATTRS = ("rocdl.kernel", "gpu.kernel")
_ARCH = re.compile(r"gfx[0-9a-f]{3,4}")

# Intrinsics the AMDGPU code generator expands to instructions for f16/f32
# but not for f64 (it has no libcalls: "no libcall available", or an abort
# in instruction selection for llvm.sin.f64).
_F32_ONLY = frozenset({"exp", "exp2", "exp10", "log", "log2", "log10", "sin", "cos", "pow"})
# Intrinsics it does not expand at all.
_NEVER = frozenset({"tan", "tanh", "asin", "acos", "atan", "atan2", "sinh", "cosh", "powi"})
_OCML = re.compile(r"__ocml_([a-z0-9]+)_(f16|f32|f64)")
_INTRINSIC = re.compile(r"llvm\.([a-z0-9]+)\.(.+)")
# A truncate to a vector of sub-byte integers (`trunc <4 x i8> %v to <4 x i4>`; i1
# masks are fine), which the AMDGPU code generator cannot legalise (module docstring).
# `%r = atomicrmw or ptr addrspace(1) %p, i8 0 syncscope("agent") acq_rel, align 1`: an
# 8/16-bit read-modify-write that changes nothing (see idempotent_sub_word_atomics_as_loads).
_IDEMPOTENT_SUB_WORD_ATOMIC = re.compile(
    r"(?P<result>%[\w.$-]+) = atomicrmw (?:volatile )?"
    r"(?:(?:or|xor|add|sub|umax) (?P<pointer>ptr(?: addrspace\(\d+\))? %[\w.$-]+),"
    r" (?P<type>i8|i16) 0"
    r"|and (?P<pointer2>ptr(?: addrspace\(\d+\))? %[\w.$-]+), (?P<type2>i8|i16) -1)"
    r"(?: (?P<scope>syncscope\(\"[^\"]*\"\)))? (?P<ordering>\w+), align (?P<align>\d+)"
)
#: The ordering of an atomic load standing for a read-modify-write of that ordering.
_LOAD_ORDERING = {
    "monotonic": "monotonic",
    "acquire": "acquire",
    "release": "monotonic",
    "acq_rel": "acquire",
    "seq_cst": "seq_cst",
}
_SUB_BYTE_VECTOR_TRUNCATE = re.compile(
    r"=\s*trunc\s+<[^>]*>\s+\S+\s+to\s+(<\s*(?:vscale\s+x\s+)?\d+\s+x\s+i[2-7]\s*>)"
)


def lower_to_llvm_ir(
    module: Any,
    arch: str,
    *,
    index_bitwidth: int = 64,
    bare_pointers: bool = True,
    max_block_size: int,
    dump: Dump | None = None,
) -> tuple[str, tuple[str, ...]]:
    """MLIR (text or ``mlir.ir.Module``) -> (LLVM IR text, kernel names)."""
    _check_arch(arch)
    return lower_gpu_module(
        module,
        rocdl_steps(arch, index_bitwidth, bare_pointers),
        KERNEL_ATTRS,
        dump=dump,
        default_kernel_attrs={"rocdl.flat_work_group_size": f"1,{max_block_size}"},
    )


def _check_arch(arch: str) -> None:
    if _ARCH.fullmatch(arch) is None:
        raise UnsupportedError(f"not an AMDGPU architecture name: {arch!r} (expected e.g. gfx942)")


@functools.cache
def _llvmlite() -> Any:
    try:
        import llvmlite.binding as llvm
    except ImportError as exc:
        raise CompilerUnavailableError(
            f"generating AMDGPU code needs llvmlite ({exc}); install {COMPILE_EXTRA!r}"
        ) from exc
    llvm.initialize_all_targets()
    llvm.initialize_all_asmprinters()
    return llvm


def check_supported(module: Any) -> None:
    """Raise ``UnsupportedError`` for calls the code object could not resolve.

    ``module`` is an llvmlite module after the shims are linked: any other
    function it declares would be an undefined symbol (OCML/OCKL routines
    come from ROCm's device libraries, which heron does not use), and some
    math intrinsics have no AMDGPU expansion.
    """
    problems: list[str] = []
    for function in module.functions:
        if not function.is_declaration:
            continue
        name = function.name
        match = _INTRINSIC.fullmatch(name)
        if match is None:
            if not name.startswith("llvm."):
                problems.append(f"call to {name}{_device_lib_hint(name)}")
            continue
        base, types = match.groups()
        if base in _NEVER or (base in _F32_ONLY and "f64" in types):
            problems.append(f"{name} (no AMDGPU expansion without the ROCm device libraries)")
    if problems:
        raise UnsupportedError(
            "the ROCm backend cannot compile these kernels: " + "; ".join(sorted(problems))
        )


def _device_lib_hint(name: str) -> str:
    """Name the math op behind an OCML call: ``__ocml_sin_f32`` came from math.sin on f32."""
    match = _OCML.fullmatch(name)
    if match is None:
        return " (not defined anywhere heron links)"
    return (
        f" (math.{match.group(1)} on {match.group(2)}: an OCML routine from the ROCm device"
        " libraries, which heron does not link)"
    )


def llvm_ir_to_object(
    llvm_ir: str,
    kernel_names: tuple[str, ...],
    arch: str,
    *,
    opt_level: int = 3,
    dump: Dump | None = None,
) -> bytes:
    """LLVM IR (AMDGPU flavour) -> a relocatable AMDGPU ELF object."""
    llvm = _llvmlite()
    _check_arch(arch)
    machine = target_machine(llvm, AMDGPU_TRIPLE, arch, opt=opt_level, reloc="pic")
    module = _optimised_module(llvm, machine, llvm_ir, kernel_names, opt_level, vectorize=True)
    if sub_byte_vector_truncates(str(module)):
        # The vectorizers truncated to <N x i4> (or i2...) vectors: again without them.
        module = _optimised_module(llvm, machine, llvm_ir, kernel_names, opt_level, vectorize=False)
        found = sub_byte_vector_truncates(str(module))
        if found:
            raise UnsupportedError(
                "the ROCm backend cannot compile these kernels: truncates to vectors of"
                f" sub-byte integers ({', '.join(found)}), which the AMDGPU code generator"
                " cannot legalise"
            )
    text = str(module)
    loads = idempotent_sub_word_atomics_as_loads(text)
    if loads != text:
        module = llvm.parse_assembly(loads)
        module.triple, module.data_layout = AMDGPU_TRIPLE, str(machine.target_data)
        module.verify()
    if dump is not None:
        dump("llvm-ir-optimised", str(module))
        copy = llvm.parse_assembly(str(module))
        copy.triple, copy.data_layout = module.triple, module.data_layout
        dump("amdgcn-asm", machine.emit_assembly(copy))
    return machine.emit_object(module)


def idempotent_sub_word_atomics_as_loads(llvm_ir: str) -> str:
    """``llvm_ir`` with each 8- or 16-bit ``atomicrmw`` that cannot change memory
    (``or``/``xor``/``add``/``sub``/``umax`` of 0, ``and`` of -1) replaced by the atomic
    load it amounts to (same value, same scope, the ordering's acquire half).

    The AMDGPU code generator cannot select these: LLVM turns them into an
    idempotent ``atomicrmw add`` of a byte, which it neither widens nor lowers
    ("LLVM ERROR: Cannot select: AtomicLoadAdd", a process abort). heron emits
    them for a packed s4/s2 store of a value LLVM proves is 0 (the ``or`` half
    of the clear-then-set pair): fuzz finding generated-s1-3058.
    """

    def load(match: re.Match) -> str:
        ordering = _LOAD_ORDERING[match["ordering"]]
        scope = f" {match['scope']}" if match["scope"] else ""
        return (
            f"{match['result']} = load atomic {match['type'] or match['type2']},"
            f" {match['pointer'] or match['pointer2']}"
            f"{scope} {ordering}, align {match['align']}"
        )

    return _IDEMPOTENT_SUB_WORD_ATOMIC.sub(load, llvm_ir)


def sub_byte_vector_truncates(llvm_ir: str) -> list[str]:
    """The sub-byte vector types (``<4 x i4>``) ``llvm_ir`` truncates to, sorted; [] if none."""
    found = _SUB_BYTE_VECTOR_TRUNCATE.finditer(llvm_ir)
    return sorted({" ".join(m.group(1).split()) for m in found})


def _optimised_module(
    llvm: Any,
    machine: Any,
    llvm_ir: str,
    kernel_names: tuple[str, ...],
    opt_level: int,
    *,
    vectorize: bool,
) -> Any:
    """``llvm_ir`` parsed, shims linked, checked, non-kernels internalised, and optimised.

    ``vectorize=False`` turns LLVM's loop and SLP vectorizers off (the rest of
    the ``opt_level`` pipeline is unchanged).
    """
    try:
        module = llvm.parse_assembly(llvm_ir)
    except RuntimeError as exc:
        raise UnsupportedError(f"llvmlite could not parse the LLVM IR: {exc}") from exc
    module.triple = AMDGPU_TRIPLE
    module.data_layout = str(machine.target_data)
    if declared_functions(llvm_ir) & SHIMMED:
        shims = llvm.parse_assembly(OCKL_SHIMS)
        shims.triple = module.triple
        shims.data_layout = module.data_layout
        module.link_in(shims)
        # The rest of the module is internal already (lower_gpu_module); the shims are not.
        keep = set(kernel_names)
        for function in module.functions:
            if not function.is_declaration and function.name not in keep:
                function.linkage = "internal"
    check_supported(module)
    module.verify()
    tuning = llvm.create_pipeline_tuning_options(speed_level=opt_level)
    if not vectorize:
        tuning.loop_vectorization = False
        tuning.slp_vectorization = False
    builder = llvm.create_pass_builder(machine, tuning)
    builder.getModulePassManager().run(module, builder)
    return module


def compile_to_hsaco(
    module: Any,
    arch: str,
    *,
    opt_level: int = 3,
    index_bitwidth: int = 64,
    bare_pointers: bool = True,
    max_block_size: int,
    dump: Dump | None = None,
) -> bytes:
    """MLIR holding one ``gpu.module`` -> a loadable AMDGPU code object for ``arch``."""
    llvm_ir, kernels = lower_to_llvm_ir(
        module,
        arch,
        index_bitwidth=index_bitwidth,
        bare_pointers=bare_pointers,
        max_block_size=max_block_size,
        dump=dump,
    )
    obj = llvm_ir_to_object(llvm_ir, kernels, arch, opt_level=opt_level, dump=dump)
    return link_hsaco(obj)
