"""The compile driver: emit, heron passes, backend, with timings and dumps per fusion.

Each stage is a separate function so that callers can stop anywhere
(``heron emit --after PASS``), reuse a lowered module for several
architectures (the corpus test compiles each fusion for two of them), or time
the stages one by one (``benchmarks/compile_time.py``). Timings are wall-clock
seconds, recorded in pipeline order: ``emit``, one entry per heron pass,
then the backend's ``backend-mlir`` (MLIR to LLVM IR), ``llvm-ptx`` or
``llvm-object`` (llvmlite O3 and code generation) and ``ptxas`` or ``link``.

Dumps go through a ``dump(stage, text)`` callback (``DumpWriter`` writes files).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import attrs

from heron.compiler.dumps import DumpWriter
from heron.compiler.fusions import selected_fusions
from heron.emitters.emitter_base import EmittedKernel, KernelArgument
from heron.hlo.errors import HloError, UnsupportedError
from heron.hlo.ir import Instruction, Module
from heron.indexing.thread_maps import LaunchDimensions

__all__ = [
    "DEFAULT_ARCH",
    "TARGETS",
    "BackendResult",
    "CompiledFusion",
    "compile_backend",
    "compile_kernel",
    "compile_module",
    "emit",
    "lower",
]

Dump = Callable[[str, str], None]
Timings = dict[str, float]

TARGETS = ("cuda", "rocm")
DEFAULT_ARCH = {"cuda": "sm_90", "rocm": "gfx942"}


@attrs.frozen
class BackendResult:
    """What a backend made of one lowered module: PTX (+ cubin) or an HSACO."""

    target: str
    arch: str
    kernel_names: tuple[str, ...]
    ptx: str | None = None
    cubin: bytes | None = None
    hsaco: bytes | None = None


@attrs.frozen
class CompiledFusion:
    """One fusion compiled for one target: device code, ABI, launch, and stage timings."""

    fusion_name: str
    kernel_name: str
    emitter: str
    target: str
    arch: str
    launch: LaunchDimensions
    arguments: tuple[KernelArgument, ...]
    backend: BackendResult
    timings: tuple[tuple[str, float], ...]

    @property
    def ptx(self) -> str | None:
        return self.backend.ptx

    @property
    def cubin(self) -> bytes | None:
        return self.backend.cubin

    @property
    def hsaco(self) -> bytes | None:
        return self.backend.hsaco

    @property
    def total_seconds(self) -> float:
        return sum(seconds for _, seconds in self.timings)

    def artifacts(self) -> list[tuple[str, bytes]]:
        """``(extension, bytes)`` of every device-code file: ptx and cubin, or hsaco."""
        found: list[tuple[str, bytes]] = []
        if self.backend.ptx is not None:
            found.append(("ptx", self.backend.ptx.encode()))
        if self.backend.cubin is not None:
            found.append(("cubin", self.backend.cubin))
        if self.backend.hsaco is not None:
            found.append(("hsaco", self.backend.hsaco))
        return found


def _check_target(target: str) -> None:
    if target not in TARGETS:
        raise UnsupportedError(f"unknown target {target!r} (expected one of {', '.join(TARGETS)})")


def emit(module: Module, fusion_name: str | None = None) -> list[EmittedKernel]:
    """Emit the fusion ``fusion_name`` (default: every fusion of the entry computation)."""
    return [emit_one(fusion) for fusion in selected_fusions(module, fusion_name)]


def emit_one(fusion: Instruction) -> EmittedKernel:
    """Select the hero emitter for ``fusion`` and emit it."""
    from heron.emitters.selection import emit_fusion

    return emit_fusion(fusion)


def _passes():
    try:
        from heron.emitters.pipeline import heron_passes

        return heron_passes()
    except ImportError as exc:
        raise UnsupportedError(
            f"heron's pass pipeline is incomplete in this installation: {exc}"
        ) from exc


def pass_names() -> list[str]:
    """``emitted`` and every heron pass, in order (the names ``stop_after`` accepts)."""
    return ["emitted", *(p.name for p in _passes())]


def lower(
    kernel: EmittedKernel,
    target: str = "cuda",
    stop_after: str | None = None,
    dump: Dump | None = None,
    timings: Timings | None = None,
):
    """Run heron's passes on ``kernel.module`` in place (and return it).

    ``stop_after`` names the last stage (``emitted`` runs none); ``dump``
    receives ``emitted`` and the module after each pass; ``timings`` gets
    one entry per pass run.
    """
    from mlir import ir

    from heron.emitters.pipeline import PipelineOptions, run_passes

    _check_target(target)
    module = kernel.module
    if stop_after == "emitted":
        if dump is not None:
            dump("emitted", str(module))
        return module
    passes = _passes()
    names = [p.name for p in passes]
    if stop_after is not None and stop_after not in names:
        raise UnsupportedError(
            f"unknown pass {stop_after!r}; the passes are: emitted, {', '.join(names)}"
        )
    options = PipelineOptions(target=target)
    if dump is not None:
        dump("emitted", str(module))
    for step in passes:
        start = time.perf_counter()
        try:
            run_passes(module, [step], options)
        except HloError as exc:
            raise UnsupportedError(f"fusion '{kernel.fusion_name}': {exc.message}") from exc
        except (ir.MLIRError, ValueError, RuntimeError) as exc:
            raise UnsupportedError(
                f"fusion '{kernel.fusion_name}': pass {step.name!r} failed: {exc}"
            ) from exc
        if timings is not None:
            timings[step.name] = time.perf_counter() - start
        if dump is not None:
            dump(step.name, str(module))
        if step.name == stop_after:
            break
    return module


def _backend_dump(dump: Dump | None) -> Dump | None:
    """The backend's dump minus its ``input`` stage (the same text as ``lower-tensors``)."""
    if dump is None:
        return None

    def forward(stage: str, text: str) -> None:
        if stage != "input":
            dump(stage, text)

    return forward


def compile_backend(
    lowered,
    target: str = "cuda",
    arch: str | None = None,
    *,
    assemble: bool = True,
    dump: Dump | None = None,
    timings: Timings | None = None,
    fusion_name: str = "?",
) -> BackendResult:
    """A ``lower-tensors``-stage module (or its text) -> PTX (+ cubin) or an HSACO.

    With ``assemble`` a CUDA compile also runs ptxas to a cubin when ptxas is
    installed (and skips it quietly when it is not).
    """
    _check_target(target)
    arch = arch or DEFAULT_ARCH[target]
    timings = timings if timings is not None else {}
    backend_dump = _backend_dump(dump)
    try:
        if target == "cuda":
            return _compile_cuda(lowered, arch, assemble, backend_dump, timings)
        return _compile_rocm(lowered, arch, backend_dump, timings)
    except HloError as exc:
        raise UnsupportedError(
            f"fusion '{fusion_name}': {target} backend ({arch}): {exc.message}"
        ) from exc
    except ImportError as exc:
        raise UnsupportedError(
            f"the {target} backend is not installed ({exc}); install heron[{target}]"
        ) from exc
    except (RuntimeError, OSError, ValueError) as exc:
        raise UnsupportedError(
            f"fusion '{fusion_name}': {target} backend ({arch}) failed: {exc}"
        ) from exc


def _compile_cuda(lowered, arch, assemble, dump, timings) -> BackendResult:
    from heron.runtime.cuda.compiler import (
        ToolNotFoundError,
        assemble_cubin,
        find_ptxas,
        llvm_ir_to_ptx,
        lower_to_llvm_ir,
        ptx_version_for,
    )

    ptx_version_for(arch)
    start = time.perf_counter()
    llvm_ir, kernels = lower_to_llvm_ir(lowered, dump=dump)
    middle = time.perf_counter()
    ptx = llvm_ir_to_ptx(llvm_ir, kernels, arch, dump=dump)
    end = time.perf_counter()
    timings["backend-mlir"] = middle - start
    timings["llvm-ptx"] = end - middle
    cubin = None
    if assemble:
        try:
            find_ptxas()
        except ToolNotFoundError:
            pass
        else:
            cubin = assemble_cubin(ptx, arch)
            timings["ptxas"] = time.perf_counter() - end
    return BackendResult("cuda", arch, kernels, ptx=ptx, cubin=cubin)


def _compile_rocm(lowered, arch, dump, timings) -> BackendResult:
    from heron.runtime.rocm.compiler import (
        EM_AMDGPU,
        elf_machine,
        llvm_ir_to_object,
        lower_to_llvm_ir,
    )
    from heron.runtime.rocm.compiler_tools import link_hsaco

    start = time.perf_counter()
    llvm_ir, kernels = lower_to_llvm_ir(lowered, arch, dump=dump)
    middle = time.perf_counter()
    obj = llvm_ir_to_object(llvm_ir, kernels, arch, dump=dump)
    end = time.perf_counter()
    hsaco = link_hsaco(obj)
    if elf_machine(hsaco) != EM_AMDGPU:
        raise UnsupportedError(f"the linked code object is not an AMDGPU ELF ({arch})")
    timings["backend-mlir"] = middle - start
    timings["llvm-object"] = end - middle
    timings["link"] = time.perf_counter() - end
    return BackendResult("rocm", arch, kernels, hsaco=hsaco)


def compile_kernel(
    fusion: Instruction,
    target: str = "cuda",
    arch: str | None = None,
    *,
    dump: Dump | None = None,
    assemble: bool = True,
) -> CompiledFusion:
    """One fusion through every stage (see the module docstring)."""
    _check_target(target)
    arch = arch or DEFAULT_ARCH[target]
    timings: Timings = {}
    start = time.perf_counter()
    kernel = emit_one(fusion)
    timings["emit"] = time.perf_counter() - start
    lowered = lower(kernel, target, dump=dump, timings=timings)
    backend = compile_backend(
        lowered,
        target,
        arch,
        assemble=assemble,
        dump=dump,
        timings=timings,
        fusion_name=kernel.fusion_name,
    )
    return CompiledFusion(
        fusion_name=kernel.fusion_name,
        kernel_name=kernel.name,
        emitter=kernel.emitter,
        target=target,
        arch=arch,
        launch=kernel.launch,
        arguments=kernel.arguments,
        backend=backend,
        timings=tuple(timings.items()),
    )


def compile_module(
    module: Module,
    target: str = "cuda",
    arch: str | None = None,
    dump_dir: Path | str | None = None,
    *,
    fusion_name: str | None = None,
    assemble: bool = True,
) -> list[CompiledFusion]:
    """Compile every fusion of ``module``'s entry computation (or the one named)."""
    _check_target(target)
    results = []
    for fusion in selected_fusions(module, fusion_name):
        dump = DumpWriter(dump_dir, fusion.name) if dump_dir is not None else None
        results.append(compile_kernel(fusion, target, arch, dump=dump, assemble=assemble))
    return results
