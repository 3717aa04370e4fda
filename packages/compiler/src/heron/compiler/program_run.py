"""Running a whole module on a device: the one way heron does it.

A module runs as an executable: :func:`load_program` compiles it in memory
exactly as ``heron compile --executable`` does
(:func:`heron.compiler.executable.compile_program`: the GPU pipeline, the
fusion of loop and conditional computations, copy insertion, the schedule,
buffer assignment, thunks), with kernel images for the one backend that runs,
and loads it on the device through the thunk executor
(:class:`heron.runtime.core.executor.Executable`, what ``heron run OUT.heron``
and the runtime-only ``heron-run`` run); :meth:`LoadedProgram.run` runs it.
While loops and conditionals are thunks like any other, so every module the
compiler accepts runs; what it refuses (an op no emitter takes) is refused
while compiling, naming the instruction.

:func:`run_program` is both, once: ``heron run FILE.hlo``, ``heron profile``
and the tests call these and nothing else, so there is one run path to keep
right.

A :class:`ProgramRun` is what a run gives: the flattened results (logical
numpy arrays, the reference evaluator's form), one :class:`KernelRecord` per
kernel image of the executable (its emitter, launch, compile time and the
device time of its launches from the host, from the executor's thunk
records), the executor's :class:`~heron.runtime.core.executor.RunStats` and
the optimized module that ran.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import attrs
import numpy as np

if TYPE_CHECKING:
    from heron.compiler.executable import CompiledExecutable, KernelCompiler
    from heron.hlo.ir import Module
    from heron.runtime.core.executor import Executable, RunStats, ThunkRecord
    from heron.runtime.core.thunks import Thunk
    from heron.target import Target

__all__ = [
    "KernelRecord",
    "LoadedProgram",
    "ProgramRun",
    "kernel_records",
    "load_program",
    "run_program",
]

#: Told of each leaf thunk as soon as it has run (progress, per-launch profiling).
OnThunk = Callable[["Thunk", "ThunkRecord"], None]


@attrs.frozen
class KernelRecord:
    """One kernel image of the executable, and what the run did with it."""

    #: The first fusion compiled to it (fusions with the same body share one kernel).
    fusion_name: str
    emitter: str
    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    compile_seconds: float
    #: Device seconds of its launches from the host in the run (summed).
    run_seconds: float
    #: Launches from the host in the run (a replayed command buffer's are not its own).
    launches: int
    #: Paths of the command buffers holding it (its launches are timed with theirs).
    command_buffers: tuple[str, ...] = ()
    #: How many fusions share the kernel.
    fusions: int = 1
    #: Why its result may change from run to run (``CompiledKernel.order_dependence``).
    order_dependence: str | None = None


@attrs.frozen
class ProgramRun:
    """One run of a module's executable (see the module docstring)."""

    #: The entry's results, flattened (tuple leaves in order), as logical arrays.
    outputs: tuple[np.ndarray, ...]
    #: One per kernel image, in the order the program first names them.
    kernels: tuple[KernelRecord, ...]
    #: The module that ran: optimized, fused, copies inserted, scheduled.
    module: Module
    #: Wall seconds of the run (the executor's; compiling is ``compiled.seconds``).
    seconds: float
    stats: RunStats
    #: (thunk, its record) for every leaf thunk the run executed, in order.
    thunks: tuple[tuple[Thunk, ThunkRecord], ...]
    compiled: CompiledExecutable

    @property
    def kernel_launches(self) -> int:
        """Kernels launched, a command buffer's included (the executor's count)."""
        return self.stats.kernel_launches


class LoadedProgram:
    """A module compiled into an executable and loaded on a device (a context manager:
    leaving it gives the executor's buffers back)."""

    def __init__(self, compiled: CompiledExecutable, executable: Executable, backend: str):
        self.compiled = compiled
        self.executable = executable
        self.backend = backend

    def run(
        self, arguments: Sequence[np.ndarray], *, on_thunk: OnThunk | None = None
    ) -> ProgramRun:
        """Run on ``arguments`` (logical arrays in parameter order, each exactly its
        parameter's shape and type, else :class:`~heron.runtime.core.executor.ExecutorError`);
        a device failure is the device's :class:`~heron.runtime.core.device.DeviceError`."""
        ran: list[tuple[Thunk, ThunkRecord]] = []

        def heard(thunk: Thunk, record: ThunkRecord) -> None:
            ran.append((thunk, record))
            if on_thunk is not None:
                on_thunk(thunk, record)

        executable = self.executable
        executable.on_thunk = heard
        try:
            outputs = executable.run(arguments)
        finally:
            executable.on_thunk = None
        stats = executable.stats
        return ProgramRun(
            outputs=tuple(outputs),
            kernels=tuple(kernel_records(self.compiled, self.backend, ran)),
            module=self.compiled.module,
            seconds=stats.seconds,
            stats=stats,
            thunks=tuple(ran),
            compiled=self.compiled,
        )

    def close(self) -> None:
        self.executable.close()

    def __enter__(self) -> LoadedProgram:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def load_program(
    module: Module,
    device: Any,
    backend: str,
    *,
    target: Target | None = None,
    compiler: KernelCompiler | None = None,
    command_buffers: bool = True,
    deterministic: bool = False,
) -> LoadedProgram:
    """Compile ``module`` into an executable in memory and load it on ``device``.

    ``device`` is a :class:`heron.runtime.core.device.Device` of ``backend``
    (``interpreter``, ``cuda``, ``rocm``), whose kernel images are the only
    ones compiled; ``target`` the device they are compiled for (default:
    :func:`~heron.compiler.device_kernels.target_for_device`); ``compiler``
    replaces :func:`heron.compiler.compile_fusion` (tests share compiled
    kernels; progress counts them); ``command_buffers=False`` runs every
    thunk from the host; ``deterministic`` compiles no kernel whose result
    depends on the order its threads run (:func:`~heron.compiler.executable.compile_program`).
    The caller's module is not changed. An op no
    emitter takes raises ``UnsupportedError`` naming it; an executable the
    device cannot run, :class:`~heron.runtime.core.executor.ExecutorError`.
    """
    from heron.compiler.device_kernels import target_for_device
    from heron.compiler.executable import compile_program
    from heron.runtime.core.executor import Executable

    target = target_for_device(device, backend, target)
    compiled = compile_program(
        module,
        target,
        (backend,),
        compiler=compiler,
        deterministic=deterministic,
        # heron's kernel beside a library call exactly where this device will run it.
        library_fallbacks=lambda call: device.library_for(call) is None,
    )
    executable = Executable(
        compiled.artefact, device, backend, command_buffers=command_buffers, timing=True
    )
    return LoadedProgram(compiled, executable, backend)


def run_program(
    module: Module,
    arguments: Sequence[np.ndarray],
    device: Any,
    backend: str,
    *,
    target: Target | None = None,
    compiler: KernelCompiler | None = None,
    command_buffers: bool = True,
    on_thunk: OnThunk | None = None,
    deterministic: bool = False,
) -> ProgramRun:
    """Run ``module``'s entry on ``device`` once: :func:`load_program`, then
    :meth:`LoadedProgram.run` (the arguments as there)."""
    with load_program(
        module,
        device,
        backend,
        target=target,
        compiler=compiler,
        command_buffers=command_buffers,
        deterministic=deterministic,
    ) as loaded:
        return loaded.run(arguments, on_thunk=on_thunk)


def kernel_records(
    compiled: CompiledExecutable, backend: str, ran: Sequence[tuple[Thunk, ThunkRecord]]
) -> list[KernelRecord]:
    """One :class:`KernelRecord` per kernel image of ``compiled``, from a run's thunk records."""
    from heron.runtime.core.thunks import CommandBufferThunk, KernelThunk, walk

    seconds: dict[str, float] = {}
    launches: dict[str, int] = {}
    buffers: dict[str, list[str]] = {}
    for thunk, record in ran:
        if isinstance(thunk, KernelThunk):
            seconds[thunk.image_key] = seconds.get(thunk.image_key, 0.0) + record.seconds
            launches[thunk.image_key] = launches.get(thunk.image_key, 0) + 1
        elif isinstance(thunk, CommandBufferThunk):
            for inner in walk(thunk.thunks):
                if isinstance(inner, KernelThunk):
                    held = buffers.setdefault(inner.image_key, [])
                    if record.path not in held:
                        held.append(record.path)
    sharing: dict[str, int] = {}
    for key in compiled.program.kernel_of.values():
        sharing[key] = sharing.get(key, 0) + 1
    records = []
    for emitted in compiled.program.kernels:
        kernel = emitted.compiled[backend]
        records.append(
            KernelRecord(
                fusion_name=emitted.fusion.name,
                emitter=kernel.emitter,
                grid=tuple(kernel.grid),
                block=tuple(kernel.block),
                compile_seconds=kernel.seconds,
                run_seconds=seconds.get(emitted.key, 0.0),
                launches=launches.get(emitted.key, 0),
                command_buffers=tuple(buffers.get(emitted.key, ())),
                fusions=sharing.get(emitted.key, 1),
                order_dependence=kernel.order_dependence,
            )
        )
    return records
