"""The compile driver: one fusion, for one Target, through one backend, to a KernelImage.

:func:`compile_fusion` is the only way heron compiles a fusion; ``heron
compile``, ``heron emit``, ``heron check``, ``heron run`` and the benchmarks
all call it. It runs, in order:

1. ``emit``: hero selection and emission for the Target
   (``heron.emitters.selection.emit_fusion``): the ``emitted`` stage;
2. heron's passes (``heron.emitters.pipeline.heron_passes``) through
   ``run_passes``, the one pass loop, with ``PipelineOptions`` built from the
   Target, each pass timed, verified and dumped, up to ``lower-tensors``;
3. the backend's stages, as its ``BackendSpec`` declares them (the contract is
   in ``heron.runtime.core.hookspecs``): each timed, given the dump callback,
   and checked: an artefact stage returns text, bytes or a KernelImage, and the
   last stage that runs returns the KernelImage a device loads. A stage that
   raises ``StageSkipped`` (ptxas is not installed) is reported as skipped,
   with its reason, and the compile goes on.

``stop_after`` names the last stage to run: ``emitted``, a heron pass, or one of
the backend's stages. The backend is the Target's own (``cuda``, ``rocm``)
unless another is named: the interpreter compiles for the Target it emulates.

:func:`compile_fusion_for_backends` does steps 1 and 2 once for several
backends and step 3 for each (a program's executable carries the Target's
images and the interpreter's).

Registries are loaded once per process (``default_registry`` for emitters,
``default_backends`` for backends); tests pass their own.

MLIR is imported when a compile starts, not when this module is: the CLI
imports ``heron.compiler`` for the Target alone (``heron targets``).
"""

from __future__ import annotations

import functools
import threading
import time
from collections.abc import Callable, Collection, Mapping, Sequence
from concurrent.futures import Executor, Future
from typing import TYPE_CHECKING, Any

import attrs

from heron.compiler.gc_policy import fewer_collections
from heron.compiler.summation_order import ordered_by_their_kernels
from heron.hlo.errors import HloError, UnsupportedError
from heron.hlo.plugin_loading import PluginError
from heron.hlo.shapes import ArrayShape
from heron.indexing.thread_maps import LaunchDimensions
from heron.runtime.core.device import KernelImage
from heron.runtime.core.hookspecs import BackendSpec, StageContext, StageSkipped
from heron.runtime.core.registry import BackendRegistry, default_backends
from heron.target import Target

if TYPE_CHECKING:
    from heron.compiler.kernel_workers import KernelWorkers, WorkerStages
    from heron.emitters.emitter_base import EmittedKernel, KernelArgument
    from heron.emitters.pipeline import Pass
    from heron.emitters.registry import EmitterRegistry
    from heron.hlo.ir import Instruction

__all__ = [
    "Artefact",
    "CompiledKernel",
    "Dump",
    "StageBatches",
    "tapered_group_sizes",
    "StageRecord",
    "compile_emitted",
    "compile_emitted_text",
    "compile_fusion",
    "compile_fusion_for_backends",
    "stage_names",
]

#: Receives (stage name, text) for every stage and step that makes text.
Dump = Callable[[str, str], None]

#: The stage name of emission's timing (its module is dumped as ``emitted``).
EMIT = "emit"


@attrs.frozen
class StageRecord:
    """How one stage went: its wall-clock seconds, or why it was skipped."""

    name: str
    seconds: float
    #: The stage's reason when it did not run (``StageSkipped``), else None.
    skipped: str | None = None


@attrs.frozen
class Artefact:
    """What an artefact stage made, as the bytes of the file ``heron compile`` writes."""

    stage: str
    extension: str
    data: bytes = attrs.field(repr=lambda d: f"<{len(d)} bytes>")
    #: A KernelImage: code a device loads (PTX, cubin, HSACO), not an intermediate.
    loadable: bool = False


@attrs.frozen(eq=False)
class CompiledKernel:
    """One fusion compiled for one Target by one backend, and what launching it needs.

    ``module`` is the MLIR module after the last heron stage that ran (the
    ``lower-tensors`` stage after a full compile). ``image`` is the last
    KernelImage a backend stage made (None when the compile stopped before
    one). ``stages`` lists emission, every heron pass and every backend stage
    that was reached, in order.
    """

    fusion_name: str
    kernel_name: str
    emitter: str
    target: Target
    backend: str
    launch: LaunchDimensions
    arguments: tuple[KernelArgument, ...]
    module: Any = attrs.field(repr=False)
    image: KernelImage | None
    artefacts: tuple[Artefact, ...]
    stages: tuple[StageRecord, ...]
    #: Output index -> input index of an in-place output (``EmittedKernel.output_aliases``).
    output_aliases: Mapping[int, int] = attrs.field(factory=dict)
    #: Argument indices compiled as overlapping another argument's buffer (neither
    #: ``noalias`` nor ``readonly``: :func:`compile_fusion`'s ``shared``).
    shared_arguments: frozenset[int] = frozenset()
    #: The emitter's promise that each output element is written once
    #: (``EmittedKernel.writes_each_element_once``).
    writes_each_element_once: bool = True
    #: Why the kernel's result may change from run to run (``EmittedKernel.order_dependence``).
    order_dependence: str | None = None
    #: The fused instructions every kernel sums in an order of its own (a dot, a
    #: convolution, ...: :func:`heron.compiler.summation_order.sums_in_its_own_order`).
    summed_in_their_own_order: tuple[str, ...] = ()
    #: Where the backend's concurrent stages still run (:func:`compile_fusion`'s
    #: ``background``): the finished kernel, which :meth:`finished` waits for.
    finishing: Future[CompiledKernel] | None = attrs.field(default=None, eq=False, repr=False)

    def finished(self) -> CompiledKernel:
        """This kernel with every backend stage run: itself, or what :attr:`finishing`
        gives (a stage's error is raised here)."""
        return self if self.finishing is None else self.finishing.result()

    @property
    def sums_in_its_own_order(self) -> bool:
        """Whether the kernel may sum in an order of its own, so that a check compares its
        float sums within the reassociation bounds: a reduction emitter's (it does not
        promise to write each element once), and any kernel of a fusion that computes
        what no kernel sums in the reference's order (a GEMM kernel's dot:
        :attr:`summed_in_their_own_order`). The one answer ``heron check`` and
        ``heron run --check`` both read."""
        return not self.writes_each_element_once or bool(self.summed_in_their_own_order)

    @property
    def grid(self) -> tuple[int, int, int]:
        return (self.launch.block_x, self.launch.block_y, 1)

    @property
    def block(self) -> tuple[int, int, int]:
        return (self.launch.thread_x, 1, 1)

    @property
    def input_shapes(self) -> tuple[ArrayShape, ...]:
        return tuple(a.shape for a in self.arguments if not a.is_output)

    @property
    def output_shapes(self) -> tuple[ArrayShape, ...]:
        return tuple(a.shape for a in self.arguments if a.is_output)

    @property
    def seconds(self) -> float:
        """The whole compile: emission, passes and backend stages."""
        return sum(record.seconds for record in self.stages)

    @property
    def timings(self) -> tuple[tuple[str, float], ...]:
        """``(stage, seconds)`` of every stage that ran, in order."""
        return tuple((r.name, r.seconds) for r in self.stages if r.skipped is None)

    @property
    def skipped(self) -> tuple[StageRecord, ...]:
        return tuple(record for record in self.stages if record.skipped is not None)

    def device_code(self) -> tuple[Artefact, ...]:
        """The artefacts a device loads (``.ptx`` and ``.cubin``, or ``.hsaco``), in order."""
        return tuple(artefact for artefact in self.artefacts if artefact.loadable)


@attrs.frozen
class _Plan:
    """What a compile will run, checked before any work: the backend and the stop."""

    backends: BackendRegistry
    backend: BackendSpec
    passes: tuple[Pass, ...]
    stop_after: str | None

    @property
    def stops_in_heron(self) -> bool:
        return self.stop_after is not None and self.stop_after in _heron_stage_names(self.passes)


def _heron_stage_names(passes: tuple[Pass, ...]) -> list[str]:
    return ["emitted", *(p.name for p in passes)]


def _plan(
    target: Target, backend: str | None, stop_after: str | None, backends: BackendRegistry | None
) -> _Plan:
    from heron.emitters.pipeline import heron_passes

    if not isinstance(target, Target):
        raise TypeError(f"target must be a heron.compiler.Target, got {type(target).__name__}")
    registry = backends if backends is not None else default_backends()
    spec = registry.get(backend or target.backend)
    passes = tuple(heron_passes())
    heron_names = _heron_stage_names(passes)
    backend_stages = [stage.name for stage in spec.stages]
    if stop_after is not None and stop_after not in (*heron_names, *backend_stages):
        backend_part = (
            f"; then the {spec.name} backend's stages: {', '.join(backend_stages)}"
            if backend_stages
            else ""
        )
        raise UnsupportedError(
            f"unknown pass {stop_after!r}; the passes are: {', '.join(heron_names)}{backend_part}"
        )
    return _Plan(registry, spec, passes, stop_after)


def stage_names(backend: str, *, backends: BackendRegistry | None = None) -> list[str]:
    """Every stage a compile through ``backend`` goes through, in order (``stop_after`` values)."""
    from heron.emitters.pipeline import heron_passes

    registry = backends if backends is not None else default_backends()
    spec = registry.get(backend)
    return [*_heron_stage_names(tuple(heron_passes())), *(stage.name for stage in spec.stages)]


@fewer_collections()
def compile_fusion(
    fusion: Instruction,
    target: Target,
    backend: str | None = None,
    *,
    dump: Dump | None = None,
    stop_after: str | None = None,
    emitters: EmitterRegistry | None = None,
    backends: BackendRegistry | None = None,
    background: Executor | None = None,
    shared: Collection[int] = (),
) -> CompiledKernel:
    """Compile ``fusion`` for ``target`` through ``backend`` (default: the Target's own).

    See the module docstring for the steps. ``dump(stage, text)`` hears every
    stage's text; ``stop_after`` names the last stage; ``emitters`` and
    ``backends`` replace the installed registries. Errors about the fusion
    (what no emitter or backend can compile) are ``UnsupportedError`` naming
    the fusion and the stage; a broken plugin is a ``PluginError``.

    ``background``: the backend's stages from its first ``concurrent`` one on
    (CUDA's ptxas) run there while the caller goes on (a whole program's
    compile emits its next kernels meanwhile); the kernel returned is then
    unfinished, its image and artefacts given by :meth:`CompiledKernel.finished`.

    ``shared``: the kernel argument indices (parameter leaves, then outputs) whose
    buffer the caller's launch makes overlap another argument's, outside the
    kernel's own in-place pairs (thunk emission knows them from the buffer
    assignment); they are compiled neither ``noalias`` nor ``readonly``
    (:mod:`heron.emitters.kernel_arguments`). None by default: every argument a
    buffer of its own, as :func:`heron.compiler.device_kernels.run_on_device` hands them.
    """
    plan = _plan(target, backend, stop_after, backends)
    kernel, records = _emit_and_pass(fusion, target, plan, dump, emitters, shared)
    return _compile_for_backend(kernel, target, plan, dump, records, background)


def compile_fusion_for_backends(
    fusion: Instruction,
    target: Target,
    backends: Sequence[str],
    *,
    emitters: EmitterRegistry | None = None,
    registry: BackendRegistry | None = None,
    background: Executor | None = None,
    batches: StageBatches | None = None,
    shared: Collection[int] = (),
    workers: KernelWorkers | None = None,
) -> dict[str, CompiledKernel]:
    """:func:`compile_fusion` for each of ``backends`` (in their order), emitted and
    taken through heron's passes once.

    Emission and heron's passes depend on the Target alone, not on the backend
    (the interpreter runs the kernel the Target's GPU would run): an executable
    with CUDA and interpreter images used to make them twice, a fifth to a third
    of its compile. Every backend's first stage reads the same ``lower-tensors``
    module, which the stage contract forbids it to change
    (``heron.runtime.core.hookspecs``). Each kernel's ``stages`` start with the
    shared records, so each still tells its whole compile.

    ``batches`` (with ``background``, its executor): a backend whose last stage is
    batched (``Stage.batched``: CUDA's ptxas) leaves that stage to it, to run for
    several kernels at once; the kernels returned are unfinished until their
    group has run (:meth:`StageBatches.flush` runs the last groups).

    ``workers`` (with ``batches``, and the installed registries): the fusion is
    emitted here and the rest runs on a worker process
    (:mod:`heron.compiler.kernel_workers`), the kernels returned unfinished.
    """
    names = tuple(dict.fromkeys(backends))
    if not names:
        raise ValueError("compile_fusion_for_backends: no backend named")
    plans = {name: _plan(target, name, None, registry) for name in names}
    if workers is not None:
        if batches is None or emitters is not None or registry is not None:
            raise ValueError(
                "compile_fusion_for_backends: workers need batches and the installed registries"
            )
        from heron.compiler.kernel_workers import WorkersEnded
        from heron.emitters.selection import emit_fusion

        start = time.perf_counter()
        kernel = emit_fusion(fusion, target, shared=shared)
        records = [StageRecord(EMIT, time.perf_counter() - start)]
        try:
            return _compile_on_workers(kernel, target, plans, records, workers, batches)
        except WorkersEnded:  # a worker ended: this kernel, and the compiles after, here

            def again() -> Any:
                return emit_fusion(fusion, target, shared=shared).module

            _run_heron_passes(kernel, target, plans[names[0]], None, records, again)
    else:
        kernel, records = _emit_and_pass(fusion, target, plans[names[0]], None, emitters, shared)
    return {
        name: _compile_for_backend(kernel, target, plan, None, list(records), background, batches)
        for name, plan in plans.items()
    }


@attrs.frozen
class KernelOnWorker:
    """What heron's passes and the backends' stages read of an emitted kernel on a worker
    process (:mod:`heron.compiler.kernel_workers`): its names and its module."""

    name: str
    fusion_name: str
    module: Any


def _compile_on_workers(
    kernel: EmittedKernel,
    target: Target,
    plans: Mapping[str, _Plan],
    records: list[StageRecord],
    workers: KernelWorkers,
    batches: StageBatches,
) -> dict[str, CompiledKernel]:
    """``kernel`` (emitted here) through heron's passes and each plan's backend on a
    worker; a batched last stage left to ``batches``. The kernels returned are
    unfinished: their images, artefacts and stage records come with the worker's answer
    (and the group's run)."""
    made = workers.submit(str(kernel.module), kernel.name, kernel.fusion_name, target, tuple(plans))
    compiled = {}
    for name, plan in plans.items():
        unfinished = _compiled(kernel, target, plan, None, [], records)
        stages = _then(made, functools.partial(_worker_stages_for, name))
        last = plan.backends.load_stages(name)[-1]
        if last.stage.batched is not None:
            context = StageContext(target, kernel.name, kernel.fusion_name)
            rest = _then(stages, functools.partial(_batched_rest, last, context, plan, records))
            finishing = batches.add_pending(unfinished, (name, last.name), rest)
        else:
            finishing = _then(stages, functools.partial(_worker_finished, unfinished, records))
        compiled[name] = attrs.evolve(unfinished, finishing=finishing)
    return compiled


def compile_emitted_text(
    text: str, kernel_name: str, fusion_name: str, target: Target, backends: Sequence[str]
) -> dict[str, WorkerStages]:
    """heron's passes and each backend's stages but a batched last one on an emitted
    kernel's MLIR ``text``, as :func:`compile_fusion_for_backends` runs them in process:
    what a kernel worker (:mod:`heron.compiler.kernel_worker`) answers."""
    from mlir import ir

    from heron.compiler.kernel_workers import WorkerStages
    from heron.emitters.dialect.context import make_context

    with make_context():
        module = ir.Module.parse(text)
    plans = {name: _plan(target, name, None, None) for name in backends}
    kernel = KernelOnWorker(kernel_name, fusion_name, module)
    records: list[StageRecord] = []

    def again() -> Any:
        with make_context():
            return ir.Module.parse(text)

    _run_heron_passes(kernel, target, plans[backends[0]], None, records, again)
    made = {}
    for name, plan in plans.items():
        stages = plan.backends.load_stages(name)
        batched = stages[-1].stage.batched is not None
        context = StageContext(target, kernel_name, fusion_name)
        backend_records: list[StageRecord] = list(records)
        artefacts: list[Artefact] = []
        ran = _run_stages(
            stages[:-1] if batched else stages,
            _Ran(None, module),
            context,
            plan,
            backend_records,
            artefacts,
        )
        if not batched:
            ran = ran.checked(plan)
        made[name] = WorkerStages(
            ran.image,
            ran.value if batched else None,
            ran.last_ran,
            tuple(artefacts),
            tuple(backend_records),
            batched,
        )
    return made


def _worker_stages_for(backend: str, made: Mapping[str, WorkerStages]) -> WorkerStages:
    return made[backend]


def _batched_rest(
    last: Any, context: StageContext, plan: _Plan, records: Sequence[StageRecord], ran: WorkerStages
) -> _Rest:
    """What a worker left of a kernel's backend: its batched last stage."""
    before = _Ran(ran.image, ran.value, ran.last_ran)
    return _Rest((last,), before, context, plan, (*records, *ran.records), ran.artefacts)


def _worker_finished(
    unfinished: CompiledKernel, records: Sequence[StageRecord], ran: WorkerStages
) -> CompiledKernel:
    """A kernel whose backend a worker ran to its end."""
    return attrs.evolve(
        unfinished,
        image=ran.image,
        artefacts=ran.artefacts,
        stages=(*records, *ran.records),
        finishing=None,
    )


def _then(future: Future[Any], then: Callable[[Any], Any]) -> Future[Any]:
    """A future of ``then(future's result)``, made on the thread that resolves ``future``
    (``then`` is quick: it builds records); ``future``'s error is the new one's."""
    chained: Future[Any] = Future()

    def done(resolved: Future[Any]) -> None:
        try:
            chained.set_result(then(resolved.result()))
        except BaseException as exc:  # noqa: BLE001 - handed to whoever waits
            chained.set_exception(exc)

    future.add_done_callback(done)
    return chained


def compile_emitted(
    kernel: EmittedKernel,
    target: Target,
    backend: str | None = None,
    *,
    dump: Dump | None = None,
    stop_after: str | None = None,
    backends: BackendRegistry | None = None,
) -> CompiledKernel:
    """:func:`compile_fusion` from an already emitted kernel (emitted for ``target``).

    For tests and tools that build the kernel themselves (a forced emitter);
    the kernel's module is changed in place by heron's passes.
    """
    plan = _plan(target, backend, stop_after, backends)
    records: list[StageRecord] = []
    _run_heron_passes(kernel, target, plan, dump, records)
    return _compile_for_backend(kernel, target, plan, dump, records)


def _emit_and_pass(
    fusion: Instruction,
    target: Target,
    plan: _Plan,
    dump: Dump | None,
    emitters: EmitterRegistry | None,
    shared: Collection[int],
) -> tuple[EmittedKernel, list[StageRecord]]:
    """The fusion emitted for ``target`` and taken through heron's passes (in place)."""
    from heron.emitters.selection import emit_fusion

    def emit() -> EmittedKernel:
        return emit_fusion(fusion, target, registry=emitters, shared=shared)

    start = time.perf_counter()
    kernel = emit()
    records = [StageRecord(EMIT, time.perf_counter() - start)]
    _run_heron_passes(kernel, target, plan, dump, records, lambda: emit().module)
    return kernel, records


def _run_heron_passes(
    kernel: EmittedKernel | KernelOnWorker,
    target: Target,
    plan: _Plan,
    dump: Dump | None,
    records: list[StageRecord],
    again: Callable[[], Any] | None = None,
) -> None:
    """heron's passes on the kernel's module, in place, each recorded in ``records``.

    ``again`` makes the kernel's emitted module anew (emission is deterministic):
    given it, the module is verified once, after the last pass (a tenth of the
    passes' time is verification after each), and a failure runs the passes again on
    a fresh module, verifying each, for the error to name the pass at fault (an
    invalid module may also make a later pass fail: an upstream pass manager
    verifies its input). Without it (or with ``dump``) each pass is verified."""
    from heron.emitters.pipeline import PipelineOptions, run_passes

    heron_stop = plan.stop_after if plan.stops_in_heron else None
    options = PipelineOptions.for_target(target)
    verified_at_the_end = again is not None and dump is None
    try:
        try:
            run_passes(
                kernel.module,
                plan.passes,
                options,
                dump=dump,
                stop_after=heron_stop,
                verify="end" if verified_at_the_end else "each",
                on_pass=lambda name, seconds: records.append(StageRecord(name, seconds)),
            )
        except HloError:
            if not verified_at_the_end:
                raise
            assert again is not None
            run_passes(again(), plan.passes, options, stop_after=heron_stop, verify="each")
            raise  # each pass verified, the same passes ran: the first word stands
    except HloError as exc:
        raise UnsupportedError(f"fusion '{kernel.fusion_name}': {exc.message}") from exc


def _compile_for_backend(
    kernel: EmittedKernel,
    target: Target,
    plan: _Plan,
    dump: Dump | None,
    records: list[StageRecord],
    background: Executor | None = None,
    batches: StageBatches | None = None,
) -> CompiledKernel:
    """The kernel, through heron's passes, taken through ``plan``'s backend."""
    image, artefacts, rest = None, [], None
    if not plan.stops_in_heron:
        image, artefacts, rest = _run_backend(kernel, target, plan, dump, records, background)
    compiled = _compiled(kernel, target, plan, image, artefacts, records)
    if rest is None:
        return compiled
    if batches is not None and rest.stages[-1].run_batch is not None and plan.stop_after is None:
        return attrs.evolve(compiled, finishing=batches.add(compiled, rest))
    assert background is not None
    return attrs.evolve(compiled, finishing=background.submit(_finish, compiled, rest))


def _compiled(
    kernel: EmittedKernel,
    target: Target,
    plan: _Plan,
    image: KernelImage | None,
    artefacts: Sequence[Artefact],
    records: Sequence[StageRecord],
) -> CompiledKernel:
    return CompiledKernel(
        fusion_name=kernel.fusion_name,
        kernel_name=kernel.name,
        emitter=kernel.emitter,
        target=target,
        backend=plan.backend.name,
        launch=kernel.launch,
        arguments=tuple(kernel.arguments),
        module=kernel.module,
        image=image,
        artefacts=tuple(artefacts),
        stages=tuple(records),
        output_aliases=dict(kernel.output_aliases),
        shared_arguments=kernel.shared_arguments,
        writes_each_element_once=kernel.writes_each_element_once,
        order_dependence=kernel.order_dependence,
        summed_in_their_own_order=(
            ordered_by_their_kernels(kernel.analysis.computation)
            if kernel.analysis is not None
            else ()
        ),
    )


#: How many kernels one batched stage run takes at most (one ptxas for 16 kernels: its
#: set-up paid once, and a large program's groups still run side by side).
BATCH_KERNELS = 16


def tapered_group_sizes(kernels: int, largest: int = BATCH_KERNELS) -> list[int]:
    """How a program's ``kernels`` are grouped for a batched stage, in program order:
    groups halving towards the end (..., 8, 4, 2, 1), none over ``largest``.

    A group is run once its last kernel has been through the stages before it, so the
    program's last group is left to run after everything else: the compile's tail.
    A group of sixteen there cost a small program 15-25 ms of ptxas after its last
    kernel's LLVM; a kernel alone costs 5-12 (nvJitLink sets ptxas up per call, with
    cold caches). Each group before the last has the emission of every later kernel
    to hide behind, and each twice the previous one's: the set-up is paid about
    log2(kernels) times, and the tail is one kernel's.
    """
    if largest < 1:
        raise ValueError(f"tapered_group_sizes: a group holds at least one kernel, not {largest}")
    sizes: list[int] = []
    size, left = 1, kernels
    while left > 0:
        take = min(size, largest, left)
        sizes.append(take)
        left -= take
        size *= 2
    return sizes[::-1]


class StageBatches:
    """Kernels whose last backend stage is batched (``Stage.batched``), grouped per
    backend and stage, each group run on ``executor`` when it is complete or at
    :meth:`flush`.

    A program's compile (:func:`heron.compiler.executable.compile_program`) emits
    kernels one after another; CUDA's ``cubin`` stage used to start a ptxas for
    each, a process costing about 20 ms against a few ms of assembling. Grouped,
    a 15-kernel training step sets ptxas up four times. Groups are ``size``
    kernels each, or, where the program's number of ``kernels`` is known, the
    tapered sizes of :func:`tapered_group_sizes` (then one kernel a group past
    that number): either way they depend on the program alone, so the images are
    the same bytes from one compile to the next. Each kernel's future
    (``CompiledKernel.finishing``) is resolved when its group has run; a group
    the batched function fails on runs the stage kernel by kernel instead, so
    that an error names its kernel. Used from one thread (the compile's).
    """

    def __init__(
        self, executor: Executor, size: int = BATCH_KERNELS, kernels: int | None = None
    ) -> None:
        if size < 1:
            raise ValueError(f"StageBatches: a group holds at least one kernel, not {size}")
        self._executor = executor
        self._size = size
        self._plan = tuple(tapered_group_sizes(kernels, size)) if kernels is not None else None
        self._waiting: dict[tuple[str, str], list[_Waiting]] = {}
        self._groups_run: dict[tuple[str, str], int] = {}

    def add(self, compiled: CompiledKernel, rest: _Rest) -> Future[CompiledKernel]:
        """Leave ``compiled``'s stages ``rest`` to a group (the batched one last); the
        finished kernel's future. The stages before the batched one start now, on the
        executor (CUDA's ``ptx``: LLVM while the next kernels are emitted); the group
        waits for them. It cannot wait forever: they were queued before it."""
        key = (rest.plan.backend.name, rest.stages[-1].name)
        before = rest if len(rest.stages) == 1 else self._executor.submit(_run_all_but_last, rest)
        return self.add_pending(compiled, key, before)

    def add_pending(
        self,
        compiled: CompiledKernel,
        key: tuple[str, str],
        rest: _Rest | Future[_Rest],
    ) -> Future[CompiledKernel]:
        """Leave ``compiled``'s batched stage (``key``: its backend and stage) to a group,
        once ``rest`` (what is left to run, the batched stage alone) is known: a kernel
        whose stages before it run elsewhere (a worker process,
        :mod:`heron.compiler.kernel_workers`). The finished kernel's future."""
        future: Future[CompiledKernel] = Future()
        group = self._waiting.setdefault(key, [])
        group.append(_Waiting(compiled, rest, future))
        if len(group) >= self._group_size(key):
            self._run(key)
        return future

    def flush(self) -> None:
        """Run every group not yet full (call it before waiting for the kernels)."""
        for key in list(self._waiting):
            self._run(key)

    def _group_size(self, key: tuple[str, str]) -> int:
        if self._plan is None:
            return self._size
        index = self._groups_run.get(key, 0)
        return self._plan[index] if index < len(self._plan) else 1

    def _run(self, key: tuple[str, str]) -> None:
        """Run the group once the stages before the batched one have run for each of its
        kernels: queued earlier, it would hold a worker thread waiting for them, and the
        kernels' LLVM, queued after it, could wait for a second worker to be free."""
        self._groups_run[key] = self._groups_run.get(key, 0) + 1
        group = self._waiting.pop(key)
        _when_done(
            [w.rest for w in group if isinstance(w.rest, Future)],
            functools.partial(self._executor.submit, _finish_group, group),
        )


def _when_done(futures: Sequence[Future[Any]], then: Callable[[], object]) -> None:
    """Call ``then()`` once every one of ``futures`` is done (now, if they are), on the
    thread that finishes the last of them."""
    if not futures:
        then()
        return
    left = [len(futures)]
    lock = threading.Lock()

    def one_done(_: Future[Any]) -> None:
        with lock:
            left[0] -= 1
            last = left[0] == 0
        if last:
            then()

    for future in futures:
        future.add_done_callback(one_done)


@attrs.frozen
class _Waiting:
    compiled: CompiledKernel
    #: The batched stage alone, or the future of the stages before it (then it alone).
    rest: _Rest | Future[_Rest] = attrs.field(eq=False)
    future: Future[CompiledKernel] = attrs.field(eq=False)


def _run_all_but_last(rest: _Rest) -> _Rest:
    """``rest`` with its stages but the last run (on a worker): what is left is the batched one."""
    records, artefacts = list(rest.records), list(rest.artefacts)
    ran = _run_stages(rest.stages[:-1], rest.ran, rest.context, rest.plan, records, artefacts)
    return attrs.evolve(
        rest, stages=rest.stages[-1:], ran=ran, records=tuple(records), artefacts=tuple(artefacts)
    )


def _ready(group: list[_Waiting]) -> list[_Waiting]:
    """The kernels of ``group`` whose stages before the batched one ran, each with what is
    left to run; a kernel whose stages failed gets the error as its result instead."""
    ready = []
    for waiting in group:
        if not isinstance(waiting.rest, Future):
            ready.append(waiting)
            continue
        try:
            ready.append(attrs.evolve(waiting, rest=waiting.rest.result()))
        except BaseException as exc:  # noqa: BLE001 - handed to the waiting caller
            waiting.future.set_exception(exc)
    return ready


def _finish_group(group: list[_Waiting]) -> None:
    """Run a group's batched stage once and resolve each kernel's future; where that
    fails, the stage kernel by kernel (each error then names its kernel)."""
    group = _ready(group)
    if not group:
        return
    try:
        _finish_batched(group)
    except PluginError as exc:  # the backend broke the batched stage's contract: say so
        for waiting in group:
            if not waiting.future.done():
                waiting.future.set_exception(exc)
    except BaseException:  # noqa: BLE001 - retried one by one below
        for waiting in group:
            if waiting.future.done():
                continue
            try:
                waiting.future.set_result(_finish(waiting.compiled, waiting.rest))
            except BaseException as exc:  # noqa: BLE001 - handed to the waiting caller
                waiting.future.set_exception(exc)


def _finish_batched(group: list[_Waiting]) -> None:
    stage = group[0].rest.stages[0]
    start = time.perf_counter()
    skipped: str | None = None
    try:
        images = list(stage.run_batch([(w.rest.ran.value, w.rest.context) for w in group]))
    except StageSkipped as exc:  # each kernel keeps what the stage before made, as unbatched
        images = [w.rest.ran.checked(w.rest.plan).image for w in group]
        skipped = str(exc) or "skipped by the backend"
    share = (time.perf_counter() - start) / len(group)
    if len(images) != len(group) or (
        skipped is None and not all(isinstance(image, KernelImage) for image in images)
    ):
        plan = group[0].rest.plan
        raise PluginError(
            f"{plan.backends.describe(plan.backend.name)}: batched stage '{stage.name}' returned"
            f" {len(images)} values for {len(group)} kernels, not one KernelImage each"
        )
    for waiting, image in zip(group, images, strict=True):
        rest = waiting.rest
        records = [*rest.records, StageRecord(stage.name, share, skipped)]
        artefacts = list(rest.artefacts)
        if skipped is None and stage.stage.extension is not None:
            artefacts.append(_artefact(rest.plan, stage.name, stage.stage.extension, image))
        waiting.future.set_result(
            attrs.evolve(
                waiting.compiled,
                image=image,
                artefacts=tuple(artefacts),
                stages=tuple(records),
                finishing=None,
            )
        )


@attrs.frozen
class _Rest:
    """The backend stages a compile left to a worker: from the first concurrent one on."""

    stages: tuple[Any, ...]
    ran: _Ran  #: where the stages before them got to
    context: StageContext
    plan: _Plan
    records: tuple[StageRecord, ...]
    artefacts: tuple[Artefact, ...]


def _finish(kernel: CompiledKernel, rest: _Rest) -> CompiledKernel:
    """``kernel`` with the stages of ``rest`` run (on a worker thread)."""
    records, artefacts = list(rest.records), list(rest.artefacts)
    ran = _run_stages(rest.stages, rest.ran, rest.context, rest.plan, records, artefacts)
    return attrs.evolve(
        kernel,
        image=ran.checked(rest.plan).image,
        artefacts=tuple(artefacts),
        stages=tuple(records),
        finishing=None,
    )


def _run_backend(
    kernel: EmittedKernel,
    target: Target,
    plan: _Plan,
    dump: Dump | None,
    records: list[StageRecord],
    background: Executor | None = None,
) -> tuple[KernelImage | None, list[Artefact], _Rest | None]:
    """The backend's stages on the ``lower-tensors`` module: the image and the artefacts,
    and, with ``background``, the stages from the first concurrent one on, not run."""
    stages = tuple(plan.backends.load_stages(plan.backend.name))
    context = StageContext(target, kernel.name, kernel.fusion_name, dump)
    artefacts: list[Artefact] = []
    split = len(stages)
    if background is not None:
        split = next((i for i, s in enumerate(stages) if s.stage.concurrent), split)
    ran = _run_stages(stages[:split], _Ran(None, kernel.module), context, plan, records, artefacts)
    if ran.stopped or split == len(stages):
        return ran.checked(plan).image, artefacts, None
    rest = _Rest(stages[split:], ran, context, plan, tuple(records), tuple(artefacts))
    return ran.image, artefacts, rest


@attrs.frozen
class _Ran:
    """Where a run of backend stages got to."""

    image: KernelImage | None  #: the last KernelImage a stage made
    value: Any  #: the last stage's output (the next one's input)
    last_ran: str = "lower-tensors"
    stopped: bool = False  #: it reached the plan's ``stop_after``

    def checked(self, plan: _Plan) -> _Ran:
        """Itself, where the compile ended as a backend must end it: at ``stop_after``,
        or with a KernelImage."""
        if not self.stopped and not isinstance(self.value, KernelImage):
            raise PluginError(
                f"{plan.backends.describe(plan.backend.name)}: its last stage that ran,"
                f" '{self.last_ran}', returned a {type(self.value).__name__}, not a KernelImage"
            )
        return self


def _run_stages(
    stages: tuple[Any, ...],
    ran: _Ran,
    context: StageContext,
    plan: _Plan,
    records: list[StageRecord],
    artefacts: list[Artefact],
) -> _Ran:
    """Run ``stages`` on from ``ran``, recording each, until the plan's ``stop_after``."""
    name = plan.backend.name
    for stage in stages:
        start = time.perf_counter()
        try:
            output = stage.run(ran.value, context)
        except StageSkipped as skipped:
            reason = str(skipped) or "skipped by the backend"
            records.append(StageRecord(stage.name, time.perf_counter() - start, reason))
            continue
        except Exception as exc:
            error = _stage_error(exc, context.fusion_name, name, stage.name, context.target)
            if error is exc:
                raise
            raise error from exc
        records.append(StageRecord(stage.name, time.perf_counter() - start))
        if stage.stage.extension is not None:
            artefacts.append(_artefact(plan, stage.name, stage.stage.extension, output))
        image = output if isinstance(output, KernelImage) else ran.image
        ran = _Ran(image, output, stage.name, stage.name == plan.stop_after)
        if ran.stopped:
            break
    return ran


def _stage_error(
    exc: Exception, fusion: str, backend: str, stage: str, target: Target
) -> Exception:
    """A stage's failure as one line naming the fusion, the backend, the stage and the arch.

    Anything that is not a known kind of failure (a bug in a stage) is kept.
    """
    where = f"fusion '{fusion}': {backend} stage '{stage}' ({target.arch})"
    if isinstance(exc, HloError):
        return UnsupportedError(f"{where}: {exc.message}")
    if isinstance(exc, ImportError):
        return UnsupportedError(f"the {backend} backend cannot compile here: {exc}")
    if isinstance(exc, RuntimeError | OSError | ValueError):
        return UnsupportedError(f"{where} failed: {exc}")
    return exc


def _artefact(plan: _Plan, stage: str, extension: str, output: object) -> Artefact:
    if isinstance(output, KernelImage):
        return Artefact(stage, extension, output.data, loadable=True)
    if isinstance(output, str):
        return Artefact(stage, extension, output.encode())
    if isinstance(output, bytes | bytearray):
        return Artefact(stage, extension, bytes(output))
    raise PluginError(
        f"{plan.backends.describe(plan.backend.name)}: stage '{stage}' declares the artefact"
        f" extension '{extension}' but returned a {type(output).__name__} (expected str, bytes"
        " or a KernelImage)"
    )
