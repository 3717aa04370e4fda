"""The thunk executor: an artefact's program run on a device.

:func:`load_executable` (or :class:`Executable`) makes an artefact ready to
run on one device, once: it loads every kernel image of the chosen backend
(one load per image key), allocates the allocation table (one device buffer per
allocation of the buffer assignment, nothing else: the peak device memory the
executor holds is exactly the allocations' sizes' sum), places the constants'
bytes, and decides the command buffers for this device
(:func:`heron.runtime.core.command_buffers.for_device`: recorded where the
device has conditional nodes, split around while and conditional thunks where
it has none; none at all with ``command_buffers=False``). Each library call
is decided first (:func:`heron.runtime.core.library_calls.resolve`): the
library where the device offers the call, else the heron kernel the artefact
carries beside it; :attr:`Executable.library_choices` says which, and every
record of a thunk the choice made names its emitter (``cublasLt``, ``gemm``).
A custom call whose target no installed ``heron.custom_calls`` plugin
provides is refused at load, naming the target and the instruction
(:mod:`heron.runtime.core.host_calls`).

:meth:`Executable.run` takes the entry's arguments as logical numpy arrays
(parameter order; each exactly its parameter's shape and element type),
writes them into their parameter allocations in heron's memory representation
(:func:`heron.hlo.memory_layout.to_memory`), runs the thunks, and returns the
results read from their allocations (``from_memory``). A parameter allocation
with ``output`` set is donated: the result is read from the same bytes.
:meth:`Executable.execute` runs on device buffers the caller holds instead
(one per parameter, bound to the parameter allocations for that run), which
is how a command buffer's recorded addresses come to change.

How each thunk runs:

- kernel: ``device.launch`` with a view of each argument slice (views are
  made once per slice and kept while the allocation's buffer stays);
- copy, memset: ``copy_on_device``, ``memset`` on views;
- library call: ``device.library_call`` with the parsed call and a view of
  each argument slice;
- sequential: its thunks in order;
- while: without a known trip count, the condition's thunks, then the 1-byte
  predicate read back from the device, then the body, until it is false;
  with one, the body that many times and the condition never (XLA's
  WhileThunk does the same);
- conditional: the selector read back, :meth:`ConditionalThunk.branch_for`;
- custom call: its operands copied to the host, the plugin's host
  implementation called, its results checked and copied back
  (:class:`~heron.runtime.core.host_calls.HostCalls`); never in a command buffer;
- command buffer: recorded on its first execution (while and conditional
  thunks inside as conditional nodes) and replayed, then replayed on every
  later one; when a slice's view changed since (an allocation bound to
  another buffer), ``CommandBuffer.update`` repoints the recorded commands
  first (``cuGraphExecUpdate``), it is not re-recorded.

Everything a run needs is prepared at load (issue 30's launch cost): each
leaf thunk's record fields and its action (a launch the device checked and
packed once: :meth:`Device.prepare_launch`, a copy, memset, library or host
call bound to its views), built on the first run and again only when an
allocation is bound to another buffer; a run then walks these nodes and calls
the actions. Per-thunk timing (``timing=True``: ``heron run`` and ``heron-run``
ask for it) wraps every thunk in a device timer, which waits for it: off by
default, so that the host only issues work.

Each run leaves a :class:`RunStats`: one :class:`ThunkRecord` per leaf thunk
executed (kernel, copy, memset, command buffer: kind, name, launch, device
seconds from the device's timer where timing is on, else 0), kernel launches
(a command buffer's as its device counts them,
:attr:`CommandBuffer.launches_last_replay`; a GPU cannot see inside its
conditional nodes, which are counted apart), command buffers recorded,
replayed and updated, the seconds of the whole run.
"""

from __future__ import annotations

import functools
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import attrs
import numpy as np

from heron.hlo.errors import HloError
from heron.hlo.memory_layout import from_memory, memory_bytes, memory_dtype, to_memory
from heron.hlo.parser import parse_shape
from heron.hlo.plugin_loading import PluginError
from heron.hlo.shapes import ArrayShape
from heron.runtime.core.artefact import Artefact
from heron.runtime.core.command_buffers import MIN_GRAPH_SIZE, for_device
from heron.runtime.core.device import (
    CommandBuffer,
    Device,
    DeviceBuffer,
    DeviceError,
    LoadedKernel,
)
from heron.runtime.core.host_calls import HostCalls
from heron.runtime.core.library_calls import LibraryChoice, resolve
from heron.runtime.core.thunks import (
    BufferSlice,
    CommandBufferThunk,
    ConditionalThunk,
    CopyThunk,
    CustomCallThunk,
    KernelThunk,
    LibraryCallThunk,
    MemsetThunk,
    SequentialThunk,
    Thunk,
    ThunkError,
    WhileThunk,
    walk,
)

__all__ = [
    "Executable",
    "ExecutorError",
    "RunStats",
    "ThunkRecord",
    "load_executable",
]


#: Recordings of one command buffer kept for distinct bindings of its allocations.
RECORDINGS_KEPT = 4


class ExecutorError(Exception):
    """An artefact cannot run here, or its arguments do not fit it; the message says which."""


@attrs.frozen
class ThunkRecord:
    """One leaf thunk executed: where in the program (``path``), what, and its device seconds.

    ``path`` numbers thunks from 0 at each level, nested ones after their
    parent's part: ``3.body.1`` is the second thunk of the body of thunk 3,
    ``2.branch1.0`` the first of branch 1 of thunk 2.
    """

    path: str
    kind: str
    name: str
    launch: str
    seconds: float
    #: Who computes it, where a load-time choice decided: a library (``cublasLt``) for a
    #: library call, the fallback's emitter (``gemm``) for heron's kernel in its place.
    emitter: str = ""


@attrs.define
class RunStats:
    """What one run did (see the module docstring)."""

    #: Per leaf thunk run, in order, what :attr:`records` reads: (prepared node, seconds),
    #: or the record itself where it was made at once.
    entries: list[Any] = attrs.Factory(list)
    #: Kernel launches: kernel thunks run directly, and those a replayed command buffer
    #: ran (as its device counts them, else those outside its conditional nodes).
    kernel_launches: int = 0
    #: Replays of command buffers holding conditional nodes whose device cannot tell
    #: how many kernels they ran (a GPU's loop nodes decide on the device).
    conditional_node_replays: int = 0
    command_buffers_recorded: int = 0
    command_buffers_replayed: int = 0
    command_buffers_updated: int = 0
    predicate_reads: int = 0
    seconds: float = 0.0
    _made: list[ThunkRecord] = attrs.field(factory=list, init=False, repr=False)

    @property
    def records(self) -> list[ThunkRecord]:
        """One record per leaf thunk executed, in order (made when first asked: a run
        itself only notes which prepared thunk ran and its seconds)."""
        made = self._made
        if len(made) != len(self.entries):
            for entry in self.entries[len(made) :]:
                if isinstance(entry, ThunkRecord):
                    made.append(entry)
                    continue
                node, seconds = entry
                made.append(
                    ThunkRecord(
                        node.path, node.thunk.kind, node.name, node.launch, seconds, node.emitter
                    )
                )
        return made

    def to_json(self) -> dict[str, Any]:
        return {
            "seconds": self.seconds,
            "kernel_launches": self.kernel_launches,
            "conditional_node_replays": self.conditional_node_replays,
            "predicate_reads": self.predicate_reads,
            "command_buffers": {
                "recorded": self.command_buffers_recorded,
                "replayed": self.command_buffers_replayed,
                "updated": self.command_buffers_updated,
            },
            "thunks": self.by_thunk(),
        }

    def by_thunk(self) -> list[dict[str, Any]]:
        """The records summed per thunk (a loop's body runs many times): program order."""
        summed: dict[str, dict[str, Any]] = {}
        for record in self.records:
            entry = summed.get(record.path)
            if entry is None:
                entry = summed[record.path] = {
                    "path": record.path,
                    "kind": record.kind,
                    "name": record.name,
                    "launch": record.launch,
                    "emitter": record.emitter,
                    "executions": 0,
                    "seconds": 0.0,
                }
            entry["executions"] += 1
            entry["seconds"] += record.seconds
            if record.launch != entry["launch"]:  # a command buffer recorded once, then replayed
                entry["launch"] = "; ".join(
                    dict.fromkeys([*entry["launch"].split("; "), record.launch])
                )
        return list(summed.values())


@attrs.define(eq=False)
class _Recorded:
    """A command buffer as recorded on this device, and the view of each slice it holds."""

    buffer: CommandBuffer
    views: dict[BufferSlice, DeviceBuffer]
    kernels_outside_nodes: int
    has_conditional_nodes: bool


class _Leaf:
    """A leaf thunk prepared at load: its record's fields, and its action.

    ``make(views)`` builds the action (a zero-argument callable: a prepared launch,
    copy, memset, library or host call) from the views of ``pieces``; it is
    built on the first run and again only after one of its pieces' allocations
    is bound to another buffer (the executor then drops its action), so a run
    does no more per thunk than call it and note the record.
    """

    __slots__ = ("action", "emitter", "launch", "launches", "make", "name", "path", "pieces",
                 "thunk")  # fmt: skip

    def __init__(
        self,
        thunk: Thunk,
        path: str,
        name: str,
        launch: str,
        emitter: str,
        pieces: Sequence[BufferSlice],
        make: Callable[[list[DeviceBuffer]], Callable[[], None]],
        launches: int = 0,
    ) -> None:
        self.thunk, self.path, self.name, self.launch = thunk, path, name, launch
        self.emitter, self.pieces, self.make, self.launches = emitter, tuple(pieces), make, launches
        self.action: Callable[[], None] | None = None

    def run(self, executor: Executable) -> None:
        if self.action is None:
            self.action = self.make([executor._view(piece) for piece in self.pieces])
        stats = executor.stats
        if executor.timing:
            stats.entries.append((self, executor._timed(self.action)))  # type: ignore[arg-type]
        else:
            self.action()  # type: ignore[misc]
            stats.entries.append((self, 0.0))
        stats.kernel_launches += self.launches
        if executor.on_thunk is not None:
            executor.on_thunk(self.thunk, stats.records[-1])


class _Graph:
    """A command buffer, recorded once per binding of the allocations it uses (at most
    :data:`RECORDINGS_KEPT`; beyond, the least recently replayed is updated instead).

    A caller alternating between buffers (heron.jax's results passed back as the next
    run's arguments: two buffers trading places every run) then replays recordings as
    they are: updating a graph costs a capture of all its commands on a GPU device.
    """

    __slots__ = ("allocations", "emitter", "launch", "name", "path", "recordings", "thunk")

    def __init__(
        self, thunk: CommandBufferThunk, path: str, name: str, launch: str, emitter: str
    ) -> None:
        self.thunk, self.path, self.name, self.launch, self.emitter = (
            thunk, path, name, launch, emitter
        )  # fmt: skip
        #: The allocations its commands use: the binding of these is a recording's key.
        self.allocations = tuple(
            sorted({piece.allocation for inner in walk((thunk,)) for piece in inner.slices()})
        )
        self.recordings: OrderedDict[tuple[Any, ...], _Recorded] = OrderedDict()

    def run(self, executor: Executable) -> None:
        executor._command_buffer(self)


class _Sequence:
    __slots__ = ("nodes",)

    def __init__(self, nodes: tuple[_Node, ...]) -> None:
        self.nodes = nodes

    def run(self, executor: Executable) -> None:
        executor._run(self.nodes)


class _Loop:
    """A while loop run by the host: its trip count, or the predicate read after the
    condition each trip."""

    __slots__ = ("body", "condition", "thunk")

    def __init__(
        self, thunk: WhileThunk, condition: tuple[_Node, ...], body: tuple[_Node, ...]
    ) -> None:
        self.thunk, self.condition, self.body = thunk, condition, body

    def run(self, executor: Executable) -> None:
        if self.thunk.trip_count is not None:
            for _ in range(self.thunk.trip_count):
                executor._run(self.body)
            return
        while True:
            executor._run(self.condition)
            if not executor._read(self.thunk.predicate)[0]:
                break
            executor._run(self.body)


class _Branch:
    """A conditional run by the host: the selector read, one branch run."""

    __slots__ = ("branches", "thunk")

    def __init__(self, thunk: ConditionalThunk, branches: tuple[tuple[_Node, ...], ...]) -> None:
        self.thunk, self.branches = thunk, branches

    def run(self, executor: Executable) -> None:
        branch = self.thunk.branch_for(executor._read(self.thunk.selector))
        executor._run(self.branches[branch])


_Node = _Leaf | _Graph | _Sequence | _Loop | _Branch


def _describe(thunk: Thunk) -> tuple[str, str]:
    """The name and launch of a leaf thunk for the records."""
    if isinstance(thunk, KernelThunk):
        grid = "x".join(map(str, thunk.grid))
        block = "x".join(map(str, thunk.block))
        shared = f", {thunk.shared_bytes} B shared" if thunk.shared_bytes else ""
        return thunk.kernel_name, f"grid {grid}, block {block}{shared}"
    if isinstance(thunk, CopyThunk):
        return f"copy {thunk.source} -> {thunk.destination}", f"{thunk.source.size} B"
    if isinstance(thunk, MemsetThunk):
        return (
            f"memset {thunk.destination} = {thunk.value:#x}",
            f"{thunk.destination.size} B, width {thunk.width}",
        )
    if isinstance(thunk, CommandBufferThunk):
        kinds: dict[str, int] = {}
        for inner in walk(thunk.thunks):
            kinds[inner.kind] = kinds.get(inner.kind, 0) + 1
        summary = ", ".join(f"{k} {n}" for k, n in sorted(kinds.items()))
        return f"command buffer of {len(thunk.thunks)} thunks ({summary})", ""
    if isinstance(thunk, CustomCallThunk):
        return f"custom call {thunk.target} ('{thunk.name}')", "host"
    if isinstance(thunk, LibraryCallThunk):
        return f"{thunk.library}.{thunk.operation}", ""
    return thunk.kind, ""


def _array_shape(text: str, what: str) -> ArrayShape:
    try:
        shape = parse_shape(text)
    except HloError as error:  # the artefact checked it: only a bug reaches this
        raise ExecutorError(f"{what} {text!r}: {error}") from None
    if not isinstance(shape, ArrayShape) or shape.is_token:
        raise ExecutorError(f"{what} is {text}: the executor takes array parameters and results")
    return shape


class Executable:
    """An artefact loaded on a device, ready to run (see the module docstring)."""

    #: Told of each leaf thunk as soon as it has run, with its record (progress bars,
    #: per-kernel reports); set on an instance. None (the default): nothing is called.
    on_thunk: Callable[[Thunk, ThunkRecord], None] | None = None

    def __init__(
        self,
        artefact: Artefact,
        device: Device,
        backend: str | None = None,
        *,
        command_buffers: bool = True,
        min_graph_size: int = MIN_GRAPH_SIZE,
        timing: bool = False,
    ) -> None:
        self.artefact = artefact
        self.device = device
        self.backend = backend or device.backend
        self.timing = timing
        try:
            resolved = resolve(
                artefact.program,
                device.library_for,
                device.library_refusal,
                device.library_algorithm,
                runs_fallback=lambda call: artefact.runs_fallback(call, self.backend),
            )
        except ThunkError as error:
            raise ExecutorError(str(error)) from None
        #: One per library call of the artefact: the library or heron kernel chosen here.
        self.library_choices: tuple[LibraryChoice, ...] = resolved.choices
        self._library_calls = resolved.calls
        self._emitters = resolved.emitters
        try:
            self.host_calls = HostCalls(artefact.program)
        except PluginError as error:  # an unknown target, or a plugin that fails to load
            raise ExecutorError(str(error)) from None
        self.parameter_shapes = tuple(
            _array_shape(text, f"parameter {i}")
            for i, text in enumerate(artefact.signature.parameters)
        )
        self.result_shapes = tuple(
            _array_shape(text, f"result {i}") for i, text in enumerate(artefact.signature.results)
        )
        self._parameter_allocations = self._allocations_by("parameter")
        self._result_allocations = self._allocations_by("output")
        for r in range(len(self.result_shapes)):
            if r not in self._result_allocations:
                raise ExecutorError(
                    f"result {r} ({artefact.signature.results[r]}) has no allocation"
                )
        for role, table, shapes in (
            ("parameter", self._parameter_allocations, self.parameter_shapes),
            ("result", self._result_allocations, self.result_shapes),
        ):
            for number, index in table.items():
                needed = memory_bytes(shapes[number])
                if artefact.allocations[index].size < needed:
                    raise ExecutorError(
                        f"{role} {number} ({shapes[number]}) needs {needed} bytes; its allocation"
                        f" {index} has {artefact.allocations[index].size}"
                    )
        self.program = for_device(
            resolved.program,
            enabled=command_buffers,
            conditional_nodes=device.supports_conditional_nodes,
            min_size=min_graph_size,
        )
        self.kernels = self._load_kernels()
        #: The executor's own device buffers, one per allocation (what it holds).
        self.own: list[DeviceBuffer] = []
        self.peak_device_bytes = 0
        held = 0
        for allocation in artefact.allocations:
            buffer = device.allocate(allocation.size, f"allocation {allocation.index}")
            self.own.append(buffer)
            held += allocation.size
            self.peak_device_bytes = max(self.peak_device_bytes, held)
        for index, data in artefact.constants.items():
            device.copy_to_device(self.own[index], data)
        #: The buffer each allocation is now (its own, or a caller's parameter buffer).
        self.table: list[DeviceBuffer] = list(self.own)
        self._views: list[dict[tuple[int, int], DeviceBuffer]] = [{} for _ in self.own]
        #: Allocation index -> the prepared leaves using it: their actions are rebuilt
        #: when it is bound to another buffer, the other leaves' are kept.
        self._leaves_of: list[list[_Leaf]] = [[] for _ in self.own]
        #: Allocation index -> what its buffer's memory is (its address where the device
        #: shares one): the key of a command buffer's recording (see :class:`_Graph`).
        self._memory_keys: list[Any] = [self._memory_key(buffer) for buffer in self.own]
        self._nodes = self._prepare(self.program, "")
        self.stats = RunStats()
        self.runs: list[RunStats] = []

    # -- loading -----------------------------------------------------------------------

    def _allocations_by(self, field: str) -> dict[int, int]:
        table: dict[int, int] = {}
        for allocation in self.artefact.allocations:
            number = getattr(allocation, field)
            if number is None:
                continue
            if number in table:
                raise ExecutorError(
                    f"{field} {number} is held by allocations {table[number]} and"
                    f" {allocation.index}; an executable gives each one allocation"
                )
            table[number] = allocation.index
        return table

    def _load_kernels(self) -> dict[str, LoadedKernel]:
        keys = sorted({t.image_key for t in walk(self.program) if isinstance(t, KernelThunk)})
        if keys and self.backend not in self.artefact.backends:
            held = ", ".join(self.artefact.backends) or "no backend"
            raise ExecutorError(
                f"the artefact holds kernel images for {held}, not for backend {self.backend!r}"
                f" (compile it for {self.backend})"
            )
        return {
            key: self.device.load_kernel(self.artefact.kernel_image(self.backend, key))
            for key in keys
        }

    # -- running -----------------------------------------------------------------------

    def run(self, inputs: Sequence[np.ndarray]) -> tuple[np.ndarray, ...]:
        """Run on logical ``inputs`` (parameter order); the results, logical arrays."""
        arrays = self.check_inputs(inputs)
        for number, array in enumerate(arrays):
            self.write_parameter(number, array)
        self.execute([None] * len(arrays))
        return self.results()

    def write_parameter(self, number: int, array: np.ndarray) -> None:
        """Copy logical ``array`` (checked by :meth:`check_inputs`) into parameter
        ``number``'s own allocation, in heron's memory representation: what an
        :meth:`execute` given None for that parameter reads."""
        index = self._parameter_allocations.get(number)
        if index is not None:  # an unused parameter has no allocation
            raw = to_memory(array, self.parameter_shapes[number])
            self.device.copy_to_device(self.own[index], raw)

    def execute(
        self,
        parameters: Sequence[DeviceBuffer | None],
        *,
        results: Mapping[int, DeviceBuffer] | None = None,
        synchronize: bool = True,
    ) -> None:
        """Run with each parameter allocation bound to the caller's buffer (``to_memory`` bytes),
        or to its own where the caller gives None (filled by :meth:`write_parameter`).

        ``results`` (result number -> buffer, each at least its allocation's
        :meth:`result_size`) binds those results' allocations to the caller's
        buffers for this run, so that the results are written there and nothing
        is copied out: the caller owns them afterwards (heron.jax's device-resident
        results). A donated parameter's result (its allocation is the
        parameter's: :meth:`donated_parameter`) is written into the parameter's
        buffer and cannot be given one. :meth:`results` reads the results afterwards.

        ``synchronize=False`` returns once the work is issued, without waiting for
        the device: N runs back to back then one ``device.synchronize()`` measure
        the device's throughput rather than the host's round trips (the GPU
        bundle's speed cases), and a caller that reads results later overlaps its
        own work with the device's. The run's ``seconds`` are then the host's issue
        time; with ``timing`` on, each thunk's event timer still waits for it.

        Binding another buffer than the last run's to an allocation repoints the
        prepared launches and updates the recorded command buffers (no re-recording):
        callers that run often keep handing the same buffers (heron.jax reuses the
        result buffers of arrays that are gone).
        """
        if len(parameters) != len(self.parameter_shapes):
            raise ExecutorError(
                f"the entry takes {len(self.parameter_shapes)} parameters, given"
                f" {len(parameters)} buffers"
            )
        bindings: dict[int, DeviceBuffer] = {}
        for number, index in self._parameter_allocations.items():
            buffer = parameters[number]
            if buffer is None:
                continue
            needed = memory_bytes(self.parameter_shapes[number])
            if buffer.nbytes < needed:
                raise ExecutorError(
                    f"parameter {number} ({self.parameter_shapes[number]}) needs {needed}"
                    f" bytes; its buffer has {buffer.nbytes}"
                )
            bindings[index] = buffer
        for number, buffer in (results or {}).items():
            index = self._result_allocations.get(number)
            if index is None:
                raise ExecutorError(f"the entry has no result {number}")
            if self.donated_parameter(number) is not None:
                raise ExecutorError(
                    f"result {number} is written into donated parameter"
                    f" {self.donated_parameter(number)}'s buffer; it takes no buffer of its own"
                )
            if index in self.artefact.constants:
                raise ExecutorError(
                    f"result {number}'s allocation {index} holds constants; it takes no buffer"
                )
            if buffer.nbytes < self.result_size(number):
                raise ExecutorError(
                    f"result {number} ({self.result_shapes[number]}) needs a buffer of"
                    f" {self.result_size(number)} bytes (its allocation's); given {buffer.nbytes}"
                )
            bindings[index] = buffer
        self._bind(bindings)
        self._execute_program(synchronize=synchronize)

    def result_size(self, number: int) -> int:
        """Bytes a buffer given for result ``number`` must have: its whole allocation (the
        program may keep other values in it before the result is written)."""
        return self.artefact.allocations[self._result_allocations[number]].size

    def parameter_size(self, number: int) -> int:
        """Bytes of parameter ``number``'s allocation (a donated parameter's buffer holds
        its result too)."""
        index = self._parameter_allocations.get(number)
        if index is None:
            return memory_bytes(self.parameter_shapes[number])
        return self.artefact.allocations[index].size

    def donated_parameter(self, number: int) -> int | None:
        """The parameter whose buffer result ``number`` is written into (input-output
        aliasing: the two share an allocation), or None."""
        return self.artefact.allocations[self._result_allocations[number]].parameter

    def results(self) -> tuple[np.ndarray, ...]:
        """The results of the last run, read from their allocations (``from_memory``)."""
        results = []
        for number, shape in enumerate(self.result_shapes):
            index = self._result_allocations[number]
            nbytes = memory_bytes(shape)
            raw = self.device.copy_from_device(self._view(BufferSlice(index, 0, nbytes)))
            try:
                results.append(from_memory(raw.view(memory_dtype(shape.element_type)), shape))
            except ValueError as error:  # a pred byte the kernels never stored as 0 or 1
                raise DeviceError(f"result {number} ({shape}): {error}") from None
        return tuple(results)

    def check_inputs(self, inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
        """``inputs`` as arrays, each exactly its parameter's shape and type, or ExecutorError."""
        signature = self.artefact.signature.parameters
        if len(inputs) != len(signature):
            raise ExecutorError(
                f"the entry takes {len(signature)} parameters ({', '.join(signature)}),"
                f" given {len(inputs)} inputs"
            )
        return [self.check_input(number, value) for number, value in enumerate(inputs)]

    def check_input(self, number: int, value: Any) -> np.ndarray:
        """``value`` as an array of parameter ``number``'s shape and type, or ExecutorError."""
        shape = self.parameter_shapes[number]
        array = np.asarray(value)
        expected = np.dtype(shape.element_type.numpy_dtype)
        if tuple(array.shape) != tuple(shape.dims) or array.dtype != expected:
            raise ExecutorError(
                f"parameter {number} is {self.artefact.signature.parameters[number]} (numpy"
                f" shape {tuple(shape.dims)}, {expected}); given shape {tuple(array.shape)},"
                f" {array.dtype}"
            )
        return array

    def _bind(self, bindings: Mapping[int, DeviceBuffer]) -> None:
        """Allocation index -> the buffer it is for this run; every other allocation its own."""
        for index, own in enumerate(self.own):
            buffer = bindings.get(index, own)
            old = self.table[index]
            if buffer is not old:
                self.table[index] = buffer  # it keeps adopted memory's owner alive
                if self.device.same_memory(buffer, old):
                    continue  # the same bytes: views, actions and recordings stay as they are
                self._memory_keys[index] = self._memory_key(buffer)
                self._views[index] = {}
                for leaf in self._leaves_of[index]:
                    leaf.action = None

    def _memory_key(self, buffer: DeviceBuffer) -> Any:
        """What identifies ``buffer``'s memory: its address, or on a device that shares
        none the buffer itself."""
        try:
            return (self.device.address(buffer), buffer.nbytes)
        except DeviceError:
            return buffer

    def _view(self, piece: BufferSlice) -> DeviceBuffer:
        views = self._views[piece.allocation]
        key = (piece.offset, piece.size)
        view = views.get(key)
        if view is None:
            view = self.device.view(self.table[piece.allocation], piece.offset, piece.size)
            views[key] = view
        return view

    def _execute_program(self, synchronize: bool = True) -> None:
        self.stats = RunStats()
        start = time.perf_counter()
        self._run(self._nodes)
        if synchronize:
            self.device.synchronize()
        self.stats.seconds = time.perf_counter() - start
        self.runs.append(self.stats)

    def _run(self, nodes: Sequence[_Node]) -> None:
        for node in nodes:
            node.run(self)

    def _finish(self, node: _Leaf | _Graph, seconds: float) -> None:
        """The record of a leaf or command buffer that has just run."""
        record = ThunkRecord(
            node.path, node.thunk.kind, node.name, node.launch, seconds, node.emitter
        )
        self.stats.entries.append(record)  # made now: a command buffer's launch changes
        if self.on_thunk is not None:
            self.on_thunk(node.thunk, record)

    def _read(self, piece: BufferSlice) -> bytes:
        """A loop's predicate or a conditional's selector, read back (a synchronising copy)."""
        self.stats.predicate_reads += 1
        return self.device.copy_from_device(self._view(piece)).tobytes()

    def _timed(self, action: Callable[[], None]) -> float:
        """Run ``action``; its device seconds where per-thunk timing is on, else 0."""
        if not self.timing:
            action()
            return 0.0
        timer = self.device.timer()
        timer.start()
        action()
        timer.stop()
        return timer.seconds()

    # -- preparing -----------------------------------------------------------------------

    def _prepare(self, thunks: Sequence[Thunk], prefix: str) -> tuple[_Node, ...]:
        """The program's thunks as nodes whose actions are built once per binding (see
        :class:`_Leaf`): the run walks nodes, never formats a path or describes a thunk."""
        nodes = tuple(self._node(thunk, f"{prefix}{i}") for i, thunk in enumerate(thunks))
        for node in nodes:
            if isinstance(node, _Leaf):
                for allocation in {piece.allocation for piece in node.pieces}:
                    self._leaves_of[allocation].append(node)
        return nodes

    def _node(self, thunk: Thunk, path: str) -> _Node:
        if isinstance(thunk, SequentialThunk):
            return _Sequence(self._prepare(thunk.thunks, f"{path}."))
        if isinstance(thunk, WhileThunk):
            return _Loop(
                thunk,
                self._prepare(thunk.condition, f"{path}.condition."),
                self._prepare(thunk.body, f"{path}.body."),
            )
        if isinstance(thunk, ConditionalThunk):
            return _Branch(
                thunk,
                tuple(
                    self._prepare(branch, f"{path}.branch{b}.")
                    for b, branch in enumerate(thunk.branches)
                ),
            )
        name, launch = _describe(thunk)
        emitter = ", ".join(
            dict.fromkeys(self._emitters[t] for t in walk((thunk,)) if t in self._emitters)
        )
        if isinstance(thunk, CommandBufferThunk):
            return _Graph(thunk, path, name, launch, emitter)
        device = self.device
        if isinstance(thunk, KernelThunk):
            kernel = self.kernels[thunk.image_key]

            def make(views: list[DeviceBuffer], t: KernelThunk = thunk) -> Callable[[], None]:
                return device.prepare_launch(kernel, t.grid, t.block, views, t.shared_bytes)

            return _Leaf(thunk, path, name, launch, emitter, thunk.arguments, make, 1)
        if isinstance(thunk, CopyThunk):
            pieces = (thunk.source, thunk.destination)
            return _Leaf(
                thunk, path, name, launch, emitter, pieces,
                lambda v: functools.partial(device.copy_on_device, v[0], v[1]),
            )  # fmt: skip
        if isinstance(thunk, MemsetThunk):
            value, width = thunk.value, thunk.width
            return _Leaf(
                thunk, path, name, launch, emitter, (thunk.destination,),
                lambda v: functools.partial(device.memset, v[0], value, width),
            )  # fmt: skip
        if isinstance(thunk, LibraryCallThunk):
            call = self._library_calls[thunk]
            return _Leaf(
                thunk, path, call.describe(), launch, emitter, thunk.arguments,
                lambda v: functools.partial(device.library_call, call, v),
            )  # fmt: skip
        if isinstance(thunk, CustomCallThunk):
            host = functools.partial(self.host_calls.run, thunk, device, self._view)
            return _Leaf(thunk, path, name, launch, emitter, (), lambda v: host)
        raise ExecutorError(f"{thunk.kind} thunk at {path} cannot be executed")

    # -- command buffers ---------------------------------------------------------------

    def _command_buffer(self, node: _Graph) -> None:
        key = tuple(self._memory_keys[index] for index in node.allocations)
        recorded = node.recordings.get(key)
        launch = "replayed"
        if recorded is not None:
            node.recordings.move_to_end(key)
        elif len(node.recordings) < RECORDINGS_KEPT:
            recorded = node.recordings[key] = self._record(node.thunk)
            self.stats.command_buffers_recorded += 1
            launch = "recorded, replayed"
        else:
            _, recorded = node.recordings.popitem(last=False)
            node.recordings[key] = recorded
            changed = {}
            for piece, old in recorded.views.items():
                new = self._view(piece)
                if new is not old:
                    changed[old] = new
                    recorded.views[piece] = new
            if changed:
                recorded.buffer.update(changed)
                self.stats.command_buffers_updated += 1
                launch = "updated, replayed"
        node.launch = launch
        self._finish(node, self._timed(recorded.buffer.replay))
        self.stats.command_buffers_replayed += 1
        counted = recorded.buffer.launches_last_replay
        if counted is not None:
            self.stats.kernel_launches += counted
        else:
            self.stats.kernel_launches += recorded.kernels_outside_nodes
            if recorded.has_conditional_nodes:
                self.stats.conditional_node_replays += 1

    def _record(self, thunk: CommandBufferThunk) -> _Recorded:
        views: dict[BufferSlice, DeviceBuffer] = {}

        def view(piece: BufferSlice) -> DeviceBuffer:
            views[piece] = self._view(piece)
            return views[piece]

        def record(thunks: Sequence[Thunk]) -> None:
            device = self.device
            for inner in thunks:
                if isinstance(inner, KernelThunk):
                    device.launch(
                        self.kernels[inner.image_key],
                        inner.grid,
                        inner.block,
                        [view(a) for a in inner.arguments],
                        inner.shared_bytes,
                    )
                elif isinstance(inner, CopyThunk):
                    device.copy_on_device(view(inner.source), view(inner.destination))
                elif isinstance(inner, MemsetThunk):
                    device.memset(view(inner.destination), inner.value, inner.width)
                elif isinstance(inner, LibraryCallThunk):
                    device.library_call(
                        self._library_calls[inner], [view(a) for a in inner.arguments]
                    )
                elif isinstance(inner, WhileThunk):
                    device.record_while(
                        lambda inner=inner: record(inner.condition),
                        view(inner.predicate),
                        lambda inner=inner: record(inner.body),
                        trip_count=inner.trip_count,
                    )
                elif isinstance(inner, ConditionalThunk):
                    device.record_conditional(
                        view(inner.selector),
                        inner.selector_type,
                        [lambda b=b: record(b) for b in inner.branches],
                    )
                else:
                    raise ExecutorError(f"a {inner.kind} thunk cannot be recorded")

        self.device.begin_recording()
        try:
            record(thunk.thunks)
        except BaseException:
            self.device.end_recording()
            raise
        buffer = self.device.end_recording()
        return _Recorded(
            buffer,
            views,
            sum(isinstance(t, KernelThunk) for t in thunk.thunks),
            any(isinstance(t, (WhileThunk, ConditionalThunk)) for t in thunk.thunks),
        )

    # -- reports -----------------------------------------------------------------------

    @property
    def allocation_bytes(self) -> int:
        """The artefact's allocations' sizes' sum (what the executor allocates)."""
        return sum(a.size for a in self.artefact.allocations)

    def close(self) -> None:
        """Give the executor's buffers back to the device."""
        for buffer in self.own:
            self.device.free(buffer)
        self.own = []


def load_executable(
    artefact: Artefact,
    device: Device,
    backend: str | None = None,
    *,
    command_buffers: bool = True,
    min_graph_size: int = MIN_GRAPH_SIZE,
    timing: bool = False,
) -> Executable:
    """``artefact`` loaded on ``device`` (kernel images of ``backend``, default the device's)."""
    return Executable(
        artefact,
        device,
        backend,
        command_buffers=command_buffers,
        min_graph_size=min_graph_size,
        timing=timing,
    )
