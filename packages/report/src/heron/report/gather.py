"""Gathering a report: one compile of the module, with every decision kept as it is made.

:func:`gather` compiles the module as ``heron compile --executable`` does
(:func:`heron.compiler.executable.compile_program`: the program pipeline,
copy insertion, the scheduler, buffer assignment, thunk emission), with a
kernel compiler that keeps, for each kernel, what its compile decided:

- the fusion analysis and the partition into subgraph functions, as the
  kernel's emitter was built from and emitted them (``emit_fusion`` hands them
  on in the ``EmittedKernel``), so the hero and kind shown are the ones the
  kernel was emitted with; the kernel then goes through
  :func:`heron.compiler.compile_emitted` (heron's passes and the backend's stages);
- the IR after every stage, from the driver's ``dump`` callback, with the
  driver's timings;
- the output-to-input indexing maps of the fused computation
  (``heron.indexing.fusion_indexing``, what ``heron indexing`` prints);
- PTX statistics (``heron.runtime.cuda.ptx_statistics``) when the kernels were
  compiled for CUDA, and the SASS measures of their cubins
  (``heron.runtime.cuda.sass_statistics``) where ptxas and nvdisasm are.

The graph, the thunk lines and the memory picture are then read off the
compiled executable (its module, thunk program and buffer assignment).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Collection
from typing import TYPE_CHECKING

import attrs

from heron.hlo.ir import Instruction, Module
from heron.report.graph import build_graph
from heron.report.memory import memory_picture
from heron.report.model import KernelReport, Report, StageText
from heron.report.thunks import command_buffer_note, recorded_program, thunk_lines
from heron.target import Target

if TYPE_CHECKING:
    from heron.compiler.driver import CompiledKernel
    from heron.compiler.executable import CompiledExecutable

__all__ = ["Gathered", "XlaComparer", "gather", "kernel_backend"]

#: ``compare(module, source, target)`` -> (comparison text or None, note or None).
XlaComparer = Callable[[Module, str, Target], tuple[str | None, str | None]]

#: Stage text longer than this is cut (a page of several megabytes stays usable).
MAX_STAGE_CHARACTERS = 400_000


@attrs.frozen
class Gathered:
    """The report and the compiled executable it was read from (for checks)."""

    report: Report
    compiled: CompiledExecutable


@attrs.define
class _Kept:
    """What one kernel's compile decided, kept as the compile made it."""

    kind: str
    heroes: tuple[str, ...]
    partition: tuple[str, ...]
    indexing: tuple[str, ...]
    stages: list[tuple[str, str]]
    emit_seconds: float
    compiled: CompiledKernel | None = None


def kernel_backend(target: Target) -> tuple[str, str | None]:
    """The backend the report compiles kernels with: the Target's own when its compile
    side is installed here, else the interpreter (with the reason, shown in the page)."""
    from heron.hlo.plugin_loading import PluginError
    from heron.runtime.core.registry import default_backends

    registry = default_backends()
    if target.backend in registry.names():
        try:
            registry.load_stages(target.backend)
        except (PluginError, ImportError) as exc:
            reason = str(exc).splitlines()[0]
        else:
            return target.backend, None
    else:
        reason = f"the {target.backend} backend is not installed (heron[{target.backend}])"
    return "interpreter", (
        f"kernels compiled for the interpreter emulating {target.name}: {reason}; no PTX here"
    )


def _describe(inst: Instruction) -> str:
    return f"{inst.opcode} '{inst.name}' {inst.shape}"


def _indexing(fusion: Instruction) -> tuple[str, ...]:
    from heron.hlo.errors import HloError
    from heron.indexing.fusion_indexing import fusion_input_maps

    try:
        maps = fusion_input_maps(fusion.called("calls"))
    except (HloError, ValueError) as exc:
        return (f"(no indexing maps: {str(exc).splitlines()[0]})",)
    lines = []
    for parameter in sorted(maps, key=lambda p: p.parameter_number or 0):
        found = maps[parameter]
        if not found:
            lines.append(f"{parameter.name}: (not read by any root)")
        for indexing_map in found:
            lines.append(f"{parameter.name}: {indexing_map.format()}")
    return tuple(lines)


class _KernelCompiler:
    """A ``KernelCompiler`` for ``compile_program`` that keeps each kernel's decisions."""

    def __init__(self) -> None:
        self.kept: dict[str, _Kept] = {}

    def __call__(
        self, fusion: Instruction, target: Target, backend: str, shared: Collection[int] = ()
    ) -> CompiledKernel:
        from heron.compiler.driver import compile_emitted
        from heron.emitters.selection import emit_fusion

        start = time.perf_counter()
        emitted = emit_fusion(fusion, target, shared=shared)
        emit_seconds = time.perf_counter() - start
        stages: list[tuple[str, str]] = []
        compiled = compile_emitted(
            emitted, target, backend, dump=lambda stage, text: stages.append((stage, text))
        )
        # The analysis the kernel's emitter was built from and the partition it emitted.
        analysis, partitioned = emitted.analysis, emitted.partitioned
        self.kept[fusion.name] = _Kept(
            kind=analysis.kind,
            heroes=tuple(
                f"{_describe(root)}  ←  hero {_describe(hero)}"
                if hero is not root
                else f"{_describe(root)} (its own hero)"
                for root, hero in zip(analysis.roots, analysis.heroes, strict=True)
            ),
            partition=tuple(sub.format() for sub in partitioned.subgraphs),
            indexing=_indexing(fusion),
            stages=stages,
            emit_seconds=emit_seconds,
            compiled=compiled,
        )
        return compiled


def _stage_texts(kept: _Kept) -> tuple[StageText, ...]:
    compiled = kept.compiled
    seconds = {record.name: record.seconds for record in compiled.stages} if compiled else {}
    seconds["emitted"] = kept.emit_seconds
    texts = []
    for name, text in kept.stages:
        if len(text) > MAX_STAGE_CHARACTERS:
            text = (
                text[:MAX_STAGE_CHARACTERS]
                + f"\n... ({len(text) - MAX_STAGE_CHARACTERS:,} more characters cut)"
            )
        texts.append(StageText(name, text, seconds.get(name)))
    return tuple(texts)


def _ptx_statistics(compiled: CompiledKernel) -> tuple[dict[str, object], str | None]:
    """PTX statistics of a CUDA kernel, ptxas's resource usage when ptxas is here, and
    the SASS measures of its cubin when nvdisasm is."""
    if compiled.backend != "cuda":
        return {}, f"compiled for {compiled.backend}: no PTX to measure"
    ptx = next((a.data.decode() for a in compiled.artefacts if a.extension == "ptx"), None)
    if ptx is None:
        return {}, "the CUDA compile made no PTX"
    try:
        from heron.runtime.cuda.ptx_statistics import (
            PtxasInfoError,
            kernel_statistics,
            ptxas_resource_usage,
        )
    except ImportError as exc:
        return {}, f"heron.runtime.cuda is not importable ({exc})"
    found = kernel_statistics(ptx).get(compiled.kernel_name)
    if found is None:
        return {}, f"no .entry {compiled.kernel_name} in the PTX"
    statistics: dict[str, object] = {k: v for k, v in found.as_dict().items() if k != "name"}
    statistics["ptx bytes"] = len(ptx)
    note = None
    try:
        from heron.runtime.cuda.compiler_tools import ToolNotFoundError, find_ptxas

        ptxas = find_ptxas()
    except (ImportError, ToolNotFoundError) as exc:
        note = f"ptxas not found ({str(exc).splitlines()[0]}): no register counts"
    else:
        try:
            usage = ptxas_resource_usage(ptx, ptxas).get(compiled.kernel_name)
        except PtxasInfoError as exc:
            note = str(exc)
        else:
            if usage is not None:
                statistics.update({f"ptxas {k}": v for k, v in usage.as_dict().items()})
    sass_note = _sass_statistics(compiled, statistics)
    return statistics, "; ".join(n for n in (note, sass_note) if n) or None


def _sass_statistics(compiled: CompiledKernel, statistics: dict[str, object]) -> str | None:
    """Add the SASS measures of the kernel's cubin (what the GPU executes: issue 29) to
    ``statistics``; a note when there is no cubin or no nvdisasm."""
    cubin = next((a.data for a in compiled.artefacts if a.extension == "cubin"), None)
    if cubin is None:
        return "no cubin (ptxas not run): no SASS measures"
    try:
        from heron.runtime.cuda.compiler_tools import ToolNotFoundError, find_nvdisasm
        from heron.runtime.cuda.sass_statistics import SassError, cubin_sass_statistics
    except ImportError as exc:
        return f"heron.runtime.cuda's compile side is not importable ({exc}): no SASS"
    try:
        found = cubin_sass_statistics(cubin, find_nvdisasm()).get(compiled.kernel_name)
    except (ToolNotFoundError, SassError) as exc:
        return f"no SASS measures: {str(exc).splitlines()[0]}"
    if found is not None:
        statistics.update(found.as_dict())
    return None


def gather(
    module: Module,
    target: Target,
    *,
    source: str = "",
    xla: XlaComparer | None = None,
) -> Gathered:
    """Compile ``module`` for ``target`` once and read the report off the compile.

    ``xla`` compares with XLA:GPU (``heron xla``) when given and able to; its
    note says why not otherwise. Unsupported input raises ``UnsupportedError``
    naming the instruction, as ``heron compile --executable`` does.
    """
    from heron.compiler.executable import compile_program

    backend, backend_note = kernel_backend(target)
    compiler = _KernelCompiler()
    # Every fusion's kernel, a library call's too (heron's kernel beside it): the page
    # shows what heron compiles for each fusion.
    compiled = compile_program(
        module, target, (backend,), compiler=compiler, library_fallbacks=True
    )
    program = compiled.program
    kernels = []
    emitter_of = {}
    fusions_of: dict[str, list[str]] = {}
    for fusion, key in program.kernel_of.items():
        fusions_of.setdefault(key, []).append(fusion)
    for emitted in program.kernels:
        kept = compiler.kept[emitted.fusion.name]
        kernel = emitted.compiled[backend]
        emitter_of[emitted.key] = kernel.emitter
        statistics, ptx_note = _ptx_statistics(kernel)
        kernels.append(
            KernelReport(
                key=emitted.key,
                fusions=tuple(fusions_of.get(emitted.key, [emitted.fusion.name])),
                kernel_name=kernel.kernel_name,
                emitter=kernel.emitter,
                kind=kept.kind,
                heroes=kept.heroes,
                backend=kernel.backend,
                grid=kernel.grid,
                block=kernel.block,
                partition=kept.partition,
                indexing=kept.indexing,
                stages=_stage_texts(kept),
                compile_seconds=kept.emit_seconds + kernel.seconds,
                ptx_statistics=statistics,
                ptx_note=ptx_note,
            )
        )
    nodes, edges = build_graph(compiled.module, program.kernel_of, emitter_of)
    recorded = recorded_program(compiled.artefact.program, target.backend)
    xla_text, xla_note = (None, "no comparison asked for")
    if xla is not None:
        xla_text, xla_note = xla(module, source, target)
    report = Report(
        module=module.name,
        source=source,
        target=target.name,
        backend=backend,
        arch=target.arch,
        nodes=nodes,
        edges=edges,
        kernels=tuple(kernels),
        kernel_of=dict(program.kernel_of),
        thunks=tuple(thunk_lines(recorded, program.kernel_of)),
        command_buffer_note=command_buffer_note(target.backend),
        memory=memory_picture(compiled.assignment),
        artefact_bytes=sum(a.size for a in compiled.artefact.allocations),
        optimized_hlo=compiled.artefact.optimized_hlo,
        compile_seconds=compiled.seconds,
        xla_comparison=xla_text,
        xla_note=xla_note,
        notes=tuple(n for n in (backend_note,) if n),
    )
    return Gathered(report, compiled)
