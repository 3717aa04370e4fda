"""Executables: a module compiled into an artefact a runtime-only install loads and runs.

:func:`compile_executable` is the whole compiler after the HLO: on a copy of
the module,

1. the program pipeline for the Target (:func:`heron.compiler.fusion.program_pipeline`:
   simplification, then fusion of the entry), and the same fusion passes over
   the computations its loops and conditionals run
   (:mod:`heron.compiler.control_flow_fusion`);
2. copy insertion and the scheduler (``heron.hlo.passes``), then
   :func:`heron.hlo.buffers.assign_buffers` at the kernel ABI's buffer
   alignment (``heron.emitters.kernel_arguments.BUFFER_ALIGNMENT``: the
   alignment every kernel pointer is declared with, so every slice must keep it);
3. thunk emission (:mod:`heron.compiler.thunk_emission`), each fusion compiled
   once per backend;
4. the :class:`~heron.runtime.core.artefact.Artefact`: the program, the
   allocation table (kinds, parameter and output numbers from the
   assignment), the entry signature, one kernel image per backend per kernel,
   the constants' bytes (:func:`heron.hlo.memory_layout.to_memory`) and the
   optimized module's text.

The entry's results live in output allocations: copy insertion makes every
result leaf a value of its own (never a parameter or a constant); a result
leaf that still is one, or that shares its buffer with another result leaf,
gets an output allocation of its own here and a ``CopyThunk`` at the end of
the program. A result the module's ``input_output_alias`` donates a parameter
to has no allocation of its own: the parameter's allocation has ``output``
set, and the executor reads the result from the caller's (donated) bytes.
"""

from __future__ import annotations

import contextlib
import sys
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING

import attrs

from heron.compiler.gc_policy import fewer_collections
from heron.hlo.errors import UnsupportedError
from heron.hlo.input_output_alias import input_output_aliases, leaf_number
from heron.hlo.ir import Instruction, Module
from heron.hlo.passes.manager import PipelineReport
from heron.hlo.shapes import ArrayShape
from heron.runtime.core.artefact import (
    Allocation,
    Artefact,
    EntrySignature,
    KernelEntry,
)
from heron.runtime.core.device import KernelImage
from heron.runtime.core.thunks import BufferSlice, CopyThunk, Thunk
from heron.target import Target

if TYPE_CHECKING:
    from heron.compiler.driver import CompiledKernel
    from heron.compiler.kernel_workers import KernelWorkers
    from heron.compiler.thunk_emission import ThunkProgram
    from heron.hlo.buffers import BufferAssignment

__all__ = [
    "CompileProfile",
    "CompiledExecutable",
    "known_trip_count",
    "thunk_counts",
    "KernelCompiler",
    "compile_executable",
    "compile_program",
    "prepare_module",
]

#: ``compiler(fusion, target, backend)``: :func:`heron.compiler.compile_fusion` or a cache of it.
#: A kernel whose arguments overlap in the buffer assignment is asked for as
#: ``compiler(fusion, target, backend, shared=indices)`` (``compile_fusion``'s ``shared``;
#: a cache keys on it); ``shared`` is passed only then, so a compiler that never meets
#: overlapping arguments may take three arguments.
KernelCompiler = Callable[..., "CompiledKernel"]


@attrs.frozen
class CompiledExecutable:
    """An artefact and how it was made (for reports and tests)."""

    artefact: Artefact
    #: The optimized, scheduled module the thunks were emitted from.
    module: Module
    assignment: BufferAssignment
    program: ThunkProgram
    seconds: float
    #: Seconds spent compiling kernels (all backends).
    kernel_seconds: float
    #: Where the time went, pass by pass and stage by stage (``heron compile --timing``).
    profile: CompileProfile | None = None


@attrs.frozen
class CompileProfile:
    """Where one :func:`compile_program` spent its time: each HLO pass of
    :func:`prepare_module` (its pipelines' records), and each kernel stage summed over
    the program's kernels (emission and heron's passes, which the backends share,
    counted once; a backend's own stages per backend, ptxas's batched runs included)."""

    passes: PipelineReport
    #: (stage, runs, seconds), the slowest first.
    stages: tuple[tuple[str, int, float], ...]
    #: The whole compile's wall-clock seconds.
    seconds: float

    def table(self) -> str:
        """The passes' table (:meth:`PipelineReport.timing_table`), then the stages'."""
        width = max([len("stage"), *(len(name) for name, _, _ in self.stages)])
        lines = [self.passes.timing_table(), "", f"{'stage':<{width}}  runs  seconds"]
        lines += [f"{name:<{width}}  {n:>4}  {seconds:>7.3f}" for name, n, seconds in self.stages]
        kernels = sum(seconds for _, _, seconds in self.stages)
        lines.append(f"{'kernels':<{width}}  {'':>4}  {kernels:>7.3f}")
        lines.append(
            f"whole compile {self.seconds:.3f} s: HLO passes {self.passes.seconds:.3f} s,"
            f" kernel stages {kernels:.3f} s (ptxas on worker threads overlaps the rest)"
        )
        return "\n".join(lines)


def _stage_totals(kernels: Sequence[CompiledKernel]) -> tuple[tuple[str, int, float], ...]:
    """Each stage's runs and seconds over ``kernels``, a record shared by several of them
    (one emission for every backend) counted once."""
    unique = {id(r): r for kernel in kernels for r in kernel.stages if r.skipped is None}
    totals: dict[str, list[float]] = {}
    for record in unique.values():
        runs, seconds = totals.get(record.name, [0, 0.0])
        totals[record.name] = [runs + 1, seconds + record.seconds]
    rows = sorted(totals.items(), key=lambda item: -item[1][1])
    return tuple((name, int(runs), seconds) for name, (runs, seconds) in rows)


@fewer_collections()
def prepare_module(
    module: Module,
    target: Target,
    *,
    deterministic: bool = False,
    report: PipelineReport | None = None,
) -> tuple[Module, dict[str, int]]:
    """A copy of ``module``, fused, with copies inserted and scheduled; and known trip counts.

    ``deterministic`` compiles no kernel whose result depends on the order its
    threads run (:func:`heron.hlo.passes.simplification_pipeline`).

    Trip counts are read before the loops' conditions are fused (the counted
    form is what :func:`heron.hlo.passes.while_loop_simplifier.trip_count`
    recognises), by while instruction name; a loop XLA already analysed says
    its count in its backend config (:func:`known_trip_count`).

    ``report``: where the passes' records go (``heron compile --timing``).
    """
    from heron.compiler.control_flow_fusion import fuse_control_flow_computations
    from heron.compiler.fusion import is_fused, program_pipeline
    from heron.compiler.topk_library import topk_library
    from heron.hlo.passes import pass_named, run_pipeline
    from heron.hlo.passes.manager import pipeline_of
    from heron.hlo.passes.while_loop_simplifier import trip_count

    optimized = module.copy()
    already_fused = is_fused(optimized)  # decided on the module as given, before fusion
    fused = run_pipeline(
        optimized, program_pipeline(optimized, target, deterministic=deterministic)
    )
    trip_counts = {}
    for inst in optimized.instructions():
        if inst.opcode != "while":
            continue
        count = trip_count(inst)
        if count is None:
            count = known_trip_count(inst)
        if count is not None:
            trip_counts[inst.name] = count
    bodies = PipelineReport()
    fuse_control_flow_computations(optimized, target, already_fused, bodies)
    scheduled = run_pipeline(
        optimized,
        pipeline_of([topk_library(target), pass_named("copy-insertion"), pass_named("scheduler")]),
        verified=True,  # what the pipelines before left, verified at their ends
    )
    if report is not None:
        report.records.extend([*fused.records, *bodies.records, *scheduled.records])
    return optimized, trip_counts


@fewer_collections()
def compile_program(
    module: Module,
    target: Target,
    backends: Sequence[str] | None = None,
    *,
    compiler: KernelCompiler | None = None,
    deterministic: bool = False,
    library_fallbacks: bool | Callable[[object], bool] = False,
) -> CompiledExecutable:
    """Compile ``module`` for ``target`` into an executable with kernels for ``backends``.

    ``backends`` default to the Target's backend and the interpreter (so that
    any artefact can be checked on a CPU). ``compiler`` replaces
    :func:`heron.compiler.compile_fusion` (tests share compiled kernels).
    ``deterministic``: every run gives the same bits (no kernel combines
    updates with atomics in arrival order; see :func:`prepare_module`).
    ``library_fallbacks``: True keeps heron's kernel beside every GEMM library call,
    for every backend; a function of the call's contract object keeps it for the
    calls it says True to (a compile for the device at hand: those the device does
    not run). Besides, a backend whose devices may not run a call keeps it
    (``BackendSpec.library_always_runs``: a CUDA device always runs a real or
    complex GEMM with cuBLASLt; XLA keeps no kernel beside its cuBLAS calls either).
    Unsupported input raises ``UnsupportedError`` naming the instruction.
    """
    from heron.compiler.driver import StageBatches, compile_fusion, compile_fusion_for_backends
    from heron.compiler.library_kernels import library_kernels_for
    from heron.compiler.stage_threads import CompileThreads
    from heron.compiler.thunk_emission import emit_thunks, expected_kernels
    from heron.emitters.kernel_arguments import BUFFER_ALIGNMENT
    from heron.hlo.buffers import assign_buffers
    from heron.hlo.printer import print_module
    from heron.runtime.core.registry import default_backends

    start = time.perf_counter()
    backends = tuple(dict.fromkeys(backends or (target.backend, "interpreter")))
    specs = {name: default_backends().get(name) for name in backends}

    def fallback_backends(call: object) -> tuple[str, ...]:
        if library_fallbacks is True or (callable(library_fallbacks) and library_fallbacks(call)):
            return backends
        return tuple(name for name, spec in specs.items() if not spec.library_always_runs(call))

    compile_one = compiler or compile_fusion
    passes = PipelineReport()
    optimized, trip_counts = prepare_module(
        module, target, deterministic=deterministic, report=passes
    )
    _check_entry_parameters(optimized)
    assignment = assign_buffers(optimized, alignment=BUFFER_ALIGNMENT)
    kernel_seconds = 0.0
    # The backends' concurrent stages (LLVM and ptxas) run on the process's stage threads
    # while the next kernels are emitted; a compiler given by the caller runs as it likes.
    workers = CompileThreads() if compiler is None else None
    # A batched last stage (CUDA's ptxas) runs for groups of kernels, smaller towards the
    # program's end: the last group is the compile's tail.
    batches = None
    if workers is not None:
        batches = StageBatches(workers, kernels=expected_kernels(optimized, target))
    # heron's passes of a program with several kernels on worker processes, when asked for.
    processes = _kernel_workers(optimized) if workers is not None else None

    def compile_all(
        fusion: Instruction, shared: frozenset[int], only: tuple[str, ...] | None
    ) -> dict[str, CompiledKernel]:
        nonlocal kernel_seconds
        begun = time.perf_counter()
        # Overlapping arguments only when there are some: the common call is unchanged.
        extra = {"shared": shared} if shared else {}
        names = backends if only is None else only
        # A fusion a library kernel computes launches it: built once, kept (the top-k's).
        library = None if shared else library_kernels_for(fusion, target, names)
        if library is not None:
            compiled = library
        elif workers is None:
            compiled = {backend: compile_one(fusion, target, backend, **extra) for backend in names}
        else:
            # One emission and one run of heron's passes for every backend.
            compiled = compile_fusion_for_backends(
                fusion,
                target,
                names,
                background=workers,
                batches=batches,
                workers=processes,
                **extra,
            )
        kernel_seconds += time.perf_counter() - begun
        return compiled

    try:
        with _prompt_handoffs() if workers is not None else contextlib.nullcontext():
            emitted_program = emit_thunks(
                assignment, compile_all, trip_counts, target, fallback_backends
            )
            if batches is not None:
                batches.flush()
            program = _finished(emitted_program)
    finally:
        if workers is not None:
            workers.shutdown(cancel_futures=True)
    allocations, result_copies = _allocations(assignment)
    thunks: tuple[Thunk, ...] = (*program.thunks, *result_copies)
    kernels = [
        KernelEntry(backend, emitted.key, _image(kernel, emitted.fusion, backend))
        for emitted in program.kernels
        for backend, kernel in emitted.compiled.items()
    ]
    artefact = Artefact(
        target=attrs.evolve(target, name=_token(target.name)),
        program=thunks,
        allocations=allocations,
        signature=_signature(optimized),
        kernels=kernels,
        constants=_constants(assignment),
        optimized_hlo=print_module(optimized),
    )
    seconds = time.perf_counter() - start
    compiled_kernels = [k for emitted in program.kernels for k in emitted.compiled.values()]
    return CompiledExecutable(
        artefact=artefact,
        module=optimized,
        assignment=assignment,
        program=program,
        seconds=seconds,
        kernel_seconds=kernel_seconds,
        profile=CompileProfile(passes, _stage_totals(compiled_kernels), seconds),
    )


#: The fewest kernels a program has for its compile to use worker processes: one
#: kernel's passes gain nothing from another process, and its hand-over costs a few ms.
WORKER_KERNELS = 2


def _kernel_workers(optimized: Module) -> KernelWorkers | None:
    """The worker processes for ``optimized``'s kernels (``HERON_COMPILE_WORKERS``), or None."""
    from heron.compiler.kernel_workers import configured_workers, shared_workers

    if configured_workers() == 0:
        return None
    fusions = sum(1 for inst in optimized.instructions() if inst.opcode == "fusion")
    return shared_workers() if fusions >= WORKER_KERNELS else None


#: The interpreter's switch interval while a compile's workers run (:func:`_prompt_handoffs`).
HANDOFF_SECONDS = 0.0002


@contextlib.contextmanager
def _prompt_handoffs() -> Iterator[None]:
    """Let the compile's workers have the GIL back promptly while it lasts.

    A worker's stage (LLVM through llvmlite) leaves the GIL at each call into LLVM and
    needs it again after; with the emitting thread busy in Python it waited for the
    interpreter's switch interval (5 ms) every time, and a kernel's ptx stage makes a
    few dozen such calls: 60 ms of LLVM took 120-180 ms beside emission. At 0.2 ms the
    overlap is what two cores give. The previous interval comes back afterwards.
    """
    previous = sys.getswitchinterval()
    sys.setswitchinterval(min(previous, HANDOFF_SECONDS))
    try:
        yield
    finally:
        sys.setswitchinterval(previous)


def _finished(program: ThunkProgram) -> ThunkProgram:
    """``program`` with every kernel's backend stages run (their workers waited for)."""
    kernels = tuple(
        attrs.evolve(
            emitted,
            compiled={backend: kernel.finished() for backend, kernel in emitted.compiled.items()},
        )
        for emitted in program.kernels
    )
    return attrs.evolve(program, kernels=kernels)


def compile_executable(
    module: Module,
    target: Target,
    backends: Sequence[str] | None = None,
    *,
    compiler: KernelCompiler | None = None,
    deterministic: bool = False,
    library_fallbacks: bool | Callable[[object], bool] = False,
) -> Artefact:
    """:func:`compile_program`'s artefact."""
    return compile_program(
        module,
        target,
        backends,
        compiler=compiler,
        deterministic=deterministic,
        library_fallbacks=library_fallbacks,
    ).artefact


def known_trip_count(loop: Instruction) -> int | None:
    """XLA's ``backend_config={..."known_trip_count":{"n":"8"}}`` of a while, when present."""
    import json

    config = loop.attributes.get("backend_config")
    text = getattr(config, "text", config)
    if not isinstance(text, str):
        return None
    try:
        value = json.loads(text)
        count = int(value["known_trip_count"]["n"])
    except (ValueError, KeyError, TypeError):
        return None
    return count if count >= 0 else None


# -- the artefact's tables ---------------------------------------------------------------


def _token(name: str) -> str:
    """A Target name as an artefact name token (``device:sm_90`` -> ``device_sm_90``)."""
    return "".join(c if c.isalnum() or c in "_.-" else "_" for c in name) or "target"


def _check_entry_parameters(module: Module) -> None:
    for parameter in module.entry.parameters:
        if not isinstance(parameter.shape, ArrayShape):
            raise UnsupportedError(
                f"entry parameter '{parameter.name}' is a tuple ({parameter.shape}); an"
                " executable's entry takes arrays (JAX passes every leaf as a parameter)",
                parameter.location,
            )


def _signature(module: Module) -> EntrySignature:
    entry = module.entry
    return EntrySignature(
        parameters=[str(p.shape) for p in entry.parameters],
        results=[str(leaf) for leaf in entry.root_instruction.shape.leaves()],
    )


def _allocations(assignment: BufferAssignment) -> tuple[list[Allocation], list[Thunk]]:
    """The artefact's allocation table, and the copies that put results in their own outputs.

    The assignment's allocations, then outputs made here.

    An output allocation holds one result leaf (its ``output``). A result leaf in a
    parameter or constant allocation, or in an output allocation an earlier
    leaf already holds, gets a new output allocation and a copy.
    """
    module = assignment.module
    root = module.entry.root_instruction
    owner: dict[int, int] = {}  # allocation index -> result leaf it holds
    extra: list[Allocation] = []
    copies: list[Thunk] = []
    next_index = len(assignment.allocations)
    donated = {
        leaf_number(root.shape, alias.output_index): alias.parameter_number
        for alias in input_output_aliases(module)
    }
    for leaf, piece in enumerate(assignment.leaf_slices(root)):
        if piece is None:
            continue
        allocation = assignment.allocations[piece.allocation]
        if allocation.kind == "output" and piece.allocation not in owner:
            owner[piece.allocation] = leaf
            continue
        if (
            allocation.kind == "parameter"
            and donated.get(leaf) == allocation.parameter_number
            and piece.allocation not in owner
        ):
            owner[piece.allocation] = leaf  # donated: the result is in the caller's buffer
            continue
        extra.append(Allocation(next_index, piece.size, "output", output=leaf))
        copies.append(
            CopyThunk(
                BufferSlice(piece.allocation, piece.offset, piece.size),
                BufferSlice(next_index, 0, piece.size),
            )
        )
        next_index += 1
    table = []
    for allocation in assignment.allocations:
        if allocation.kind == "parameter":
            if allocation.leaf not in (None, 0):
                raise UnsupportedError(
                    f"allocation {allocation.index} holds leaf {allocation.leaf} of parameter"
                    f" {allocation.parameter_number}; entry parameters are arrays"
                )
            table.append(
                Allocation(
                    allocation.index,
                    allocation.size,
                    "parameter",
                    parameter=allocation.parameter_number,
                    output=owner.get(allocation.index),
                )
            )
        elif allocation.kind == "output":
            if allocation.index not in owner:
                raise UnsupportedError(
                    f"output allocation {allocation.index} holds no result leaf of the entry"
                )
            table.append(
                Allocation(
                    allocation.index, allocation.size, "output", output=owner[allocation.index]
                )
            )
        else:
            table.append(Allocation(allocation.index, allocation.size, allocation.kind))
    return [*table, *extra], copies


def _constants(assignment: BufferAssignment) -> dict[int, bytes]:
    from heron.hlo.memory_layout import to_memory

    buffers = assignment.flow.buffers()
    constants: dict[int, bytes] = {}
    for allocation in assignment.allocations:
        if allocation.kind != "constant":
            continue
        (buffer,) = allocation.chunks
        constant = next(
            v.instruction for v in buffers[buffer] if v.instruction.opcode == "constant"
        )
        data = to_memory(constant.literal, constant.shape).tobytes()
        constants[allocation.index] = data + bytes(allocation.size - len(data))
    return constants


def _image(kernel: CompiledKernel, fusion: Instruction, backend: str) -> KernelImage:
    """The image a ``backend`` device loads: the first of the formats its BackendSpec
    declares that the compile made (without a declaration, the last stage's image)."""
    from heron.runtime.core.registry import default_backends

    formats = default_backends().get(backend).image_formats
    images = [kernel.image] if kernel.image is not None else []
    images += [
        KernelImage(artefact.extension, kernel.kernel_name, artefact.data)
        for artefact in kernel.device_code()
    ]
    for wanted in formats:
        for image in images:
            if image.format == wanted:
                return image
    if kernel.image is not None and not formats:
        return kernel.image
    made = ", ".join(sorted({i.format for i in images})) or "none"
    raise UnsupportedError(
        f"fusion '{fusion.name}': the {backend} compile made no loadable image"
        f" (expected {' or '.join(formats or ('any',))}; made: {made})"
    )


def thunk_counts(compiled: CompiledExecutable, *, fallbacks: bool = False) -> Mapping[str, int]:
    """Thunks by kind over the whole program (nested thunks included): what runs where each
    library call runs its library, or (``fallbacks``) only the thunks a library call
    carries beside it for a device without the library."""
    from heron.runtime.core.thunks import LibraryCallThunk

    counts: dict[str, int] = {}

    def visit(thunks: Sequence[Thunk], inside_fallback: bool) -> None:
        for thunk in thunks:
            if inside_fallback == fallbacks:
                counts[thunk.kind] = counts.get(thunk.kind, 0) + 1
            if isinstance(thunk, LibraryCallThunk):
                visit(thunk.fallback, True)
            else:
                visit(tuple(thunk.children()), inside_fallback)

    visit(compiled.artefact.program, False)
    return counts
