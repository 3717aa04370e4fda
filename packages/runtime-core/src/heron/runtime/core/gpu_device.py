"""What the CUDA and HIP devices share: a device on a driver API that captures graphs.

Both GPU devices (``heron.runtime.cuda.device``, ``heron.runtime.rocm.device``)
do the same things with calls of other names: device memory that is an
address (``cuMemAlloc`` / ``hipMalloc``), views that are that address plus an
offset, stream-ordered copies and memsets, commands recorded on the host
(:mod:`~heron.runtime.core.commands`) and captured into a graph at
``end_recording`` (``cuStreamBeginCapture`` / ``hipStreamBeginCapture``),
replayed (``cuGraphLaunch``), updated by capturing again
(``cuGraphExecUpdate``, instantiating anew when refused), and event timers.
:class:`CapturingDevice` holds that logic once; a vendor's device names its
calls (:class:`DriverCalls`) and implements what differs: loading kernels,
packing and launching them, and (CUDA) conditional nodes. Library calls
(:mod:`heron.runtime.core.library_calls`) go to a vendor :class:`Library`
(cuBLASLt, hipBLAS) that the subclass opens (:meth:`CapturingDevice._open_library`),
issued on the device's stream like any command, so that they are captured
into graphs too.

Every driver call returns ``(result, *values)``; a non-zero result is a
:class:`DeviceError` naming the device, the call and the error. This module
imports no vendor bindings: the device is handed them.
"""

from __future__ import annotations

import abc
from collections.abc import Callable, Mapping, Sequence
from typing import Any, ClassVar

import attrs
import numpy as np

from heron.runtime.core import commands as recorded
from heron.runtime.core.device import (
    CommandBuffer,
    Device,
    DeviceBuffer,
    DeviceError,
    LoadedKernel,
    Timer,
    as_dim3,
)
from heron.runtime.core.driver_probe import DriverStatus

__all__ = [
    "COUNTED_LOOP_COMMANDS",
    "CapturingDevice",
    "DeviceGraph",
    "DriverCalls",
    "EventTimer",
    "Library",
    "counted_loop_unroll",
    "host_bytes",
]


@attrs.frozen
class DriverCalls:
    """A vendor's names for the calls every capturing device makes (CUDA's, HIP's)."""

    #: "CUDA" or "HIP": how messages name the device.
    vendor: str
    allocate: str
    free: str
    copy_to_device: str
    copy_from_device: str
    copy_on_device: str
    #: width in bytes (1, 2, 4) -> the memset call of that width
    memset: Mapping[int, str]
    synchronize: str
    begin_capture: str
    end_capture: str
    instantiate: str
    launch_graph: str
    destroy_graph: str
    destroy_executable: str
    create_event: str
    record_event: str
    synchronize_event: str
    elapsed_time: str
    #: Makes another stream wait for an event (``cuStreamWaitEvent`` / ``hipStreamWaitEvent``).
    stream_wait_event: str


class Library(abc.ABC):
    """A vendor library serving library calls on raw device addresses (cuBLASLt, hipBLAS)."""

    #: The library's name in reports (``cublasLt``, ``hipblas``).
    name: str = ""

    @abc.abstractmethod
    def offers(self, call: Any) -> bool:
        """Whether it can compute ``call`` exactly by its contract (asked at load time)."""

    @abc.abstractmethod
    def run(self, call: Any, addresses: Sequence[int], stream: Any) -> None:
        """Put ``call`` on ``stream`` over the device ``addresses`` (the contract's order)."""

    def refusal(self, call: Any) -> str:
        """Why it does not offer ``call`` (asked only where :meth:`offers` said no)."""
        return f"{self.name} does not compute it"

    def algorithm(self, call: Any) -> str:
        """Which of its algorithms runs ``call`` and why, for reports ("" where it has no
        choice to report; asked only where :meth:`offers` said yes)."""
        return ""


#: The most commands a counted loop's body is recorded with, unrolled (a bound on the
#: graph's size: each copy is nodes of its own).
COUNTED_LOOP_COMMANDS = 64


def counted_loop_unroll(trips: int, body_commands: int) -> int:
    """How many times a loop of a proved trip count records its body in one pass of its
    WHILE node: the largest of 8, 4, 2 dividing ``trips`` within
    :data:`COUNTED_LOOP_COMMANDS`, else 1. Each pass ends in one kernel that counts down
    (no condition runs), so a loop of small bodies pays that kernel once per 8 trips."""
    for unroll in (8, 4, 2):
        if trips % unroll == 0 and unroll * max(body_commands, 1) <= COUNTED_LOOP_COMMANDS:
            return unroll
    return 1


class CapturingDevice(Device):
    """A GPU device on a driver API whose streams capture into graphs (see the module docstring).

    A subclass sets :attr:`calls`, opens its context and stream in
    ``__init__`` after :meth:`_open`, and implements :meth:`load_kernel`,
    :meth:`_check_arguments` and :meth:`_launch_now`; where it has
    conditional graph nodes, :meth:`_capture_while` and
    :meth:`_capture_conditional` too.
    """

    calls: ClassVar[DriverCalls]
    #: DLPack's device type of the vendor's memory (kDLCUDA 2, kDLROCM 10).
    dlpack_device_type: ClassVar[int]
    #: Why ``record_while`` / ``record_conditional`` are refused (when they are).
    conditional_nodes_reason: str = "its graphs have no conditional nodes"

    def _open(self, bindings: Any, status: DriverStatus, ordinal: int, runtime: str) -> None:
        """Take the bindings and device ``ordinal`` of a probe; DeviceError when there is none."""
        if not status.available:
            raise DeviceError(status.reason)
        if not 0 <= ordinal < len(status.devices):
            raise DeviceError(
                f"no {self.calls.vendor} device {ordinal}: the {runtime} reports"
                f" {len(status.devices)} ({status.reason})"
            )
        self._bindings = bindings
        self.info = status.devices[ordinal]
        self.ordinal = ordinal
        self._stream: Any = None
        self._export_event: Any = None  # made on the first order_before
        self._allocations: dict[int, int] = {}  # id(root buffer) -> device address
        # Commands being recorded: one list per level (a loop's or a branch's inside).
        self._recording: list[list[recorded.Command]] = []
        #: Kernels launched so far (immediately; a replayed graph counts its own).
        self.launches = 0
        #: operation -> its library here, once opened (None: none; see library_reasons).
        self._libraries: dict[str, Library | None] = {}
        #: operation -> why no library serves it here (for reports).
        self.library_reasons: dict[str, str] = {}

    # -- the driver ----------------------------------------------------------------------
    def _call(self, name: str, *arguments: Any) -> Any:
        """``bindings.name(*arguments)``; its values, or DeviceError naming the error."""
        result = getattr(self._bindings, name)(*arguments)
        code, *values = result if isinstance(result, tuple) else (result,)
        if int(code) != 0:
            raise DeviceError(f"{self._where()}{name} failed: {self._error_text(code)}")
        if not values:
            return None
        return values[0] if len(values) == 1 else tuple(values)

    def _where(self) -> str:
        info = getattr(self, "info", None)
        vendor = self.calls.vendor
        return f"{vendor} device {self.ordinal} ({info.name}): " if info else f"{vendor}: "

    def _error_text(self, code: Any) -> str:
        """How an error code reads in a message (its name; CUDA adds the driver's text)."""
        return str(getattr(code, "name", None) or code)

    def _pointer(self, address: int) -> Any:
        """A device address as the bindings take it (an int; CUDA wraps it in CUdeviceptr)."""
        return address

    def _memset_value(self, value: int, width: int) -> int:
        """The pattern as the memset call takes it (HIP's D32 takes a C int)."""
        return value

    # -- memory --------------------------------------------------------------------------
    def allocate(self, nbytes: int, label: str = "") -> DeviceBuffer:
        if nbytes < 0:
            raise DeviceError(f"cannot allocate {nbytes} bytes")
        address = int(self._call(self.calls.allocate, max(nbytes, 1)))
        buffer = DeviceBuffer(self, nbytes, address, label)
        self._allocations[id(buffer)] = address
        return buffer

    def free(self, buffer: DeviceBuffer) -> None:
        """Free an allocation (once); views and freed buffers need nothing."""
        self._own(buffer)
        address = self._allocations.pop(id(buffer), None)
        if address is not None:
            self._call(self.calls.free, self._pointer(address))

    def _own(self, buffer: DeviceBuffer) -> int:
        if buffer.device is not self:
            raise DeviceError(f"buffer '{buffer.label}' belongs to another device")
        return int(buffer.handle)

    def _refuse_while_recording(self, what: str) -> None:
        if self._recording:
            raise DeviceError(f"{what} while recording a command buffer (a capturing stream)")

    # -- memory shared with other libraries (DLPack) -------------------------------------
    @property
    def dlpack_device(self) -> tuple[int, int]:
        return (self.dlpack_device_type, self.ordinal)

    @property
    def dlpack_stream(self) -> int:
        """The device's stream as DLPack names a stream: its handle's value (``CUstream`` and
        ``hipStream_t`` convert to it)."""
        return int(self._stream)

    def address(self, buffer: DeviceBuffer) -> int:
        return self._own(buffer)

    def order_before(self, consumer: int | None) -> None:
        """An event recorded on the device's stream that ``consumer`` waits for
        (``cuEventRecord`` + ``cuStreamWaitEvent``): the consumer's later work sees every
        command issued so far, and the host does not wait. ``consumer`` as DLPack names a
        stream (None: the default stream). One event serves every export: a wait takes
        the event as recorded when it is enqueued."""
        self._refuse_while_recording("order_before")
        if self._export_event is None:
            self._export_event = self._create_event()
        self._call(self.calls.record_event, self._export_event, self._stream)
        stream = self._consumer_stream(self._default_stream if consumer is None else consumer)
        self._call(self.calls.stream_wait_event, stream, self._export_event, 0)

    #: DLPack's ``stream=None`` for this vendor: the legacy default stream.
    _default_stream: ClassVar[int] = 1

    def _consumer_stream(self, value: int) -> Any:
        """Another library's stream handle as the bindings take it (CUDA wraps it)."""
        return value

    def same_memory(self, first: DeviceBuffer, second: DeviceBuffer) -> bool:
        return (
            first.device is second.device
            and first.nbytes == second.nbytes
            and int(first.handle) == int(second.handle)
        )

    def adopt(self, address: int, nbytes: int, owner: Any, label: str = "") -> DeviceBuffer:
        """Memory another library allocated on this GPU (see :meth:`Device.adopt`): not in
        the device's allocation table, so :meth:`free` leaves it alone."""
        if nbytes < 0 or (nbytes and not address):
            raise DeviceError(f"cannot adopt {nbytes} bytes at address {address:#x}")
        return DeviceBuffer(self, nbytes, int(address), label or "adopted", owner)

    def copy_to_device(self, buffer: DeviceBuffer, data: np.ndarray | bytes) -> None:
        self._refuse_while_recording("copy_to_device")
        host = host_bytes(data)
        if host.size > buffer.nbytes:
            raise DeviceError(
                f"copying {host.size} bytes into buffer '{buffer.label}' of {buffer.nbytes}"
            )
        if host.size:
            address = self._own(buffer)
            self._call(
                self.calls.copy_to_device,
                self._pointer(address),
                host.ctypes.data,
                host.size,
                self._stream,
            )
        self._call(self.calls.synchronize, self._stream)  # ``host`` may go now

    def copy_from_device(self, buffer: DeviceBuffer) -> np.ndarray:
        self._refuse_while_recording("copy_from_device")
        host = np.empty(buffer.nbytes, np.uint8)
        if buffer.nbytes:
            address = self._own(buffer)
            self._call(
                self.calls.copy_from_device,
                host.ctypes.data,
                self._pointer(address),
                buffer.nbytes,
                self._stream,
            )
        self._call(self.calls.synchronize, self._stream)
        return host

    def synchronize(self) -> None:
        self._refuse_while_recording("synchronize")
        self._call(self.calls.synchronize, self._stream)

    def view(self, buffer: DeviceBuffer, offset: int, nbytes: int) -> DeviceBuffer:
        address = self._own(buffer)
        label = recorded.view_label(buffer, offset, nbytes)
        return DeviceBuffer(self, nbytes, address + offset, label)

    def copy_on_device(self, source: DeviceBuffer, destination: DeviceBuffer) -> None:
        command = recorded.copy_command(source, destination)
        self._own(source), self._own(destination)
        self._issue(command)

    def memset(self, buffer: DeviceBuffer, value: int, width: int = 1) -> None:
        command = recorded.memset_command(buffer, value, width)
        self._own(buffer)
        self._issue(command)

    # -- kernels -------------------------------------------------------------------------
    @abc.abstractmethod
    def _check_arguments(self, kernel: LoadedKernel, addresses: Sequence[int]) -> None:
        """Refuse buffers that do not fit the kernel's parameters (now, not at replay)."""

    @abc.abstractmethod
    def _launch_now(self, command: recorded.LaunchCommand, stream: Any) -> None:
        """Put one launch on ``stream`` (and count it in :attr:`launches`)."""

    def launch(
        self,
        kernel: LoadedKernel,
        grid: Sequence[int],
        block: Sequence[int],
        buffers: Sequence[DeviceBuffer],
        shared_bytes: int = 0,
    ) -> None:
        self._issue(self._launch_command(kernel, grid, block, buffers, shared_bytes))

    def _launch_command(
        self,
        kernel: LoadedKernel,
        grid: Sequence[int],
        block: Sequence[int],
        buffers: Sequence[DeviceBuffer],
        shared_bytes: int,
    ) -> recorded.LaunchCommand:
        """The launch as a command, checked (the kernel and buffers this device's, the
        arguments the kernel's parameters)."""
        if kernel.device is not self:
            raise DeviceError(f"kernel '{kernel.name}' was loaded on another device")
        for buffer in buffers:
            self._own(buffer)
        if shared_bytes < 0:
            raise DeviceError(f"kernel '{kernel.name}': {shared_bytes} bytes of shared memory")
        self._check_arguments(kernel, [int(b.handle) for b in buffers])
        return recorded.LaunchCommand(
            kernel, as_dim3(grid, "grid"), as_dim3(block, "block"), list(buffers), shared_bytes
        )

    def prepare_launch(
        self,
        kernel: LoadedKernel,
        grid: Sequence[int],
        block: Sequence[int],
        buffers: Sequence[DeviceBuffer],
        shared_bytes: int = 0,
    ) -> Callable[[], None]:
        """Checked and packed once (:meth:`_packed_launch`); each call issues the launch on the
        device's stream, or appends it to the recording."""
        command = self._launch_command(kernel, grid, block, buffers, shared_bytes)
        packed = self._packed_launch(command)

        def issue() -> None:
            recording = self._recording  # begin_recording makes a new list
            if recording:
                recording[-1].append(command)
            elif packed is not None:
                packed(self._stream)
            else:
                self.run_command(command, self._stream)

        return issue

    def _packed_launch(self, command: recorded.LaunchCommand) -> Callable[[Any], None] | None:
        """``launch(stream)`` for ``command`` with everything but the stream decided now, or
        None where this device packs nothing ahead (each launch then goes through
        :meth:`run_command`)."""
        return None

    # -- library calls -------------------------------------------------------------------
    def _open_library(self, operation: str) -> Library:
        """The vendor library for ``operation``; DeviceError saying why there is none."""
        raise DeviceError(f"{self.description}: no library for {operation}")

    def library(self, operation: str) -> Library | None:
        """The vendor library serving ``operation`` here, opened on the first ask; None
        where there is none (:attr:`library_reasons` says why). What a pass that works
        with the library itself (the GEMM autotuner) asks for."""
        return self._library(operation)

    def _library(self, operation: str) -> Library | None:
        if operation not in self._libraries:
            try:
                self._libraries[operation] = self._open_library(operation)
            except DeviceError as error:
                self._libraries[operation] = None
                self.library_reasons[operation] = str(error)
        return self._libraries[operation]

    def library_for(self, call: Any) -> str | None:
        library = self._library(getattr(call, "operation", ""))
        return library.name if library is not None and library.offers(call) else None

    def library_algorithm(self, call: Any) -> str:
        library = self._library(getattr(call, "operation", ""))
        return library.algorithm(call) if library is not None else ""

    def library_refusal(self, call: Any) -> str:
        operation = getattr(call, "operation", "")
        library = self._library(operation)
        if library is None:
            return self.library_reasons.get(operation, f"no library for {operation!r} here")
        return library.refusal(call)

    def library_call(self, call: Any, buffers: Sequence[DeviceBuffer]) -> None:
        if self.library_for(call) is None:
            raise DeviceError(f"{self.description}: no library runs {call!r}")
        for buffer in buffers:
            self._own(buffer)
        self._issue(recorded.LibraryCallCommand(call, list(buffers)))

    # -- commands ------------------------------------------------------------------------
    def _issue(self, command: recorded.Command) -> None:
        if self._recording:
            self._recording[-1].append(command)
        else:
            self.run_command(command, self._stream)

    def run_command(self, command: recorded.Command, stream: Any, depth: int = 0) -> None:
        """Put one command on ``stream`` (immediately, or into a capture at ``depth``)."""
        if isinstance(command, recorded.LaunchCommand):
            self._launch_now(command, stream)
        elif isinstance(command, recorded.CopyCommand):
            source, destination = command.buffers
            if source.nbytes:
                self._call(
                    self.calls.copy_on_device,
                    self._pointer(int(destination.handle)),
                    self._pointer(int(source.handle)),
                    source.nbytes,
                    stream,
                )
        elif isinstance(command, recorded.MemsetCommand):
            (destination,) = command.buffers
            count = destination.nbytes // command.width
            if count:
                self._call(
                    self.calls.memset[command.width],
                    self._pointer(int(destination.handle)),
                    self._memset_value(command.value, command.width),
                    count,
                    stream,
                )
        elif isinstance(command, recorded.LibraryCallCommand):
            library = self._libraries[command.call.operation]
            assert library is not None  # library_call checked it
            library.run(command.call, [int(b.handle) for b in command.buffers], stream)
        elif isinstance(command, recorded.WhileCommand):
            self._capture_while(command, stream, depth)
        elif isinstance(command, recorded.ConditionalCommand):
            self._capture_conditional(command, stream, depth)
        else:  # pragma: no cover - the union is closed
            raise DeviceError(f"unknown command {command!r}")

    # -- command buffers -----------------------------------------------------------------
    @property
    def recording(self) -> bool:
        return bool(self._recording)

    def begin_recording(self) -> None:
        if self._recording:
            raise DeviceError("begin_recording: already recording a command buffer")
        self._recording = [[]]

    def end_recording(self) -> CommandBuffer:
        if len(self._recording) != 1:
            raise DeviceError("end_recording: not recording (or inside a loop or branch)")
        commands = self._recording.pop()
        graph = self.capture(commands)
        try:
            executable = self._instantiate(graph)
        except DeviceError:
            self._call(self.calls.destroy_graph, graph)
            raise
        return DeviceGraph(self, commands, graph, executable)

    def capture(self, commands: Sequence[recorded.Command]) -> Any:
        """A graph of ``commands``, by stream capture (thread-local mode)."""
        self._call(self.calls.begin_capture, self._stream, self._capture_mode())
        try:
            for command in commands:
                self.run_command(command, self._stream)
        except BaseException:
            result = getattr(self._bindings, self.calls.end_capture)(self._stream)
            if int(result[0]) == 0 and len(result) > 1:
                getattr(self._bindings, self.calls.destroy_graph)(result[1])
            raise
        return self._call(self.calls.end_capture, self._stream)

    @abc.abstractmethod
    def _capture_mode(self) -> Any:
        """The thread-local stream-capture mode, as the bindings spell it."""

    def _instantiate(self, graph: Any) -> Any:
        """An executable graph (HIP's call also returns the error node and a log)."""
        values = self._call(self.calls.instantiate, graph, 0)
        return values[0] if isinstance(values, tuple) else values

    @abc.abstractmethod
    def _update_in_place(self, executable: Any, graph: Any) -> bool:
        """Whether the driver took ``graph`` as an update of ``executable`` (same topology)."""

    # -- loops and conditionals (where the graphs have conditional nodes) ------------------
    def _check_conditional_nodes(self, what: str) -> None:
        if not self.supports_conditional_nodes:
            raise DeviceError(
                f"{self.description}: no conditional command-buffer nodes ({what}):"
                f" {self.conditional_nodes_reason}"
            )
        if not self._recording:
            raise DeviceError(f"{what}: only while recording a command buffer")

    def _record_nested(self, build: Callable[[], None]) -> list[recorded.Command]:
        self._recording.append([])
        try:
            build()
        finally:
            commands = self._recording.pop()
        return commands

    def record_while(
        self,
        condition: Callable[[], None],
        predicate: DeviceBuffer,
        body: Callable[[], None],
        trip_count: int | None = None,
    ) -> None:
        self._check_conditional_nodes("while")
        recorded.check_predicate(predicate, trip_count)
        self._own(predicate)
        condition_commands = self._record_nested(condition)
        body_commands = self._record_nested(body)
        self._recording[-1].append(
            recorded.WhileCommand(condition_commands, [predicate], body_commands, trip_count)
        )

    def record_conditional(
        self,
        selector: DeviceBuffer,
        selector_type: str,
        branches: Sequence[Callable[[], None]],
    ) -> None:
        self._check_conditional_nodes("conditional")
        recorded.check_selector(selector, selector_type, len(branches))
        self._own(selector)
        recorded_branches = [self._record_nested(branch) for branch in branches]
        self._recording[-1].append(
            recorded.ConditionalCommand([selector], selector_type, recorded_branches)
        )

    def _capture_while(self, command: recorded.WhileCommand, stream: Any, depth: int) -> None:
        raise DeviceError(f"{self.description}: no conditional graph nodes (while)")

    def _capture_conditional(
        self, command: recorded.ConditionalCommand, stream: Any, depth: int
    ) -> None:
        raise DeviceError(f"{self.description}: no conditional graph nodes (conditional)")

    # -- timing --------------------------------------------------------------------------
    def _create_event(self) -> Any:
        return self._call(self.calls.create_event)

    def timer(self) -> Timer:
        return EventTimer(self)


class DeviceGraph(CommandBuffer):
    """An instantiated graph of recorded commands (``CUgraphExec`` / ``hipGraphExec_t``)."""

    def __init__(
        self,
        device: CapturingDevice,
        commands: list[recorded.Command],
        graph: Any,
        executable: Any,
    ) -> None:
        self.device = device
        self.commands = commands
        self._graph = graph
        self._executable = executable
        #: How many times it was replayed, updated in place, and instantiated anew.
        self.replays = 0
        self.updates = 0
        self.instantiations = 1

    @property
    def buffers(self) -> tuple[DeviceBuffer, ...]:
        return recorded.buffers_of(self.commands)

    def replay(self) -> None:
        if self.device.recording:
            raise DeviceError("replaying a command buffer while recording another is not supported")
        self.device._call(self.device.calls.launch_graph, self._executable, self.device._stream)
        self.replays += 1

    def update(self, mapping: Mapping[DeviceBuffer, DeviceBuffer]) -> None:
        """Capture the commands again with the new buffers; update the graph in place.

        Same commands, so the same topology: the driver takes it in place. Should
        it refuse (a driver limitation), the new graph is instantiated instead.
        """
        recorded.remap(self.commands, mapping, self.device)
        device = self.device
        graph = device.capture(self.commands)
        updated = device._update_in_place(self._executable, graph)
        device._call(device.calls.destroy_graph, self._graph)
        self._graph = graph
        if updated:
            self.updates += 1
            return
        device._call(device.calls.destroy_executable, self._executable)
        self._executable = device._instantiate(graph)
        self.instantiations += 1

    def destroy(self) -> None:
        """Give the graph back to the driver (the executable, then the graph)."""
        if self._executable is not None:
            self.device._call(self.device.calls.destroy_executable, self._executable)
            self.device._call(self.device.calls.destroy_graph, self._graph)
            self._executable = self._graph = None


class EventTimer(Timer):
    """Two events on the device's stream; ``seconds`` waits for the second."""

    def __init__(self, device: CapturingDevice) -> None:
        self.device = device
        self._start = device._create_event()
        self._stop = device._create_event()
        self._marks = 0

    def start(self) -> None:
        self.device._call(self.device.calls.record_event, self._start, self.device._stream)
        self._marks = 1

    def stop(self) -> None:
        if self._marks < 1:
            raise DeviceError("timer: stop() before start()")
        self.device._call(self.device.calls.record_event, self._stop, self.device._stream)
        self._marks = 2

    def seconds(self) -> float:
        if self._marks < 2:
            raise DeviceError("timer: seconds() needs start() and stop() first")
        calls = self.device.calls
        self.device._call(calls.synchronize_event, self._stop)
        milliseconds = self.device._call(calls.elapsed_time, self._start, self._stop)
        return float(milliseconds) / 1000.0


def host_bytes(data: np.ndarray | bytes) -> np.ndarray:
    """``data``'s bytes as a contiguous uint8 array (ml_dtypes' types included)."""
    if isinstance(data, np.ndarray):
        return np.ascontiguousarray(data).reshape(-1).view(np.uint8)
    return np.frombuffer(bytes(data), np.uint8)
