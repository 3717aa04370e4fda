"""The HIP device: heron's kernels on an AMD GPU through hip-python (``hip.hip``).

Each call returns ``(hipError_t, *values)``; a non-zero result becomes a
:class:`DeviceError` naming the call and the error (``hipModuleLaunchKernel
failed: hipErrorInvalidValue``).

- Opening: ``hipInit``, ``hipSetDevice`` (HIP keeps the current device per
  host thread), one stream (``hipStreamCreate``) on which everything is
  ordered. Without a runtime or a device, :class:`DeviceError` with
  ``driver.probe``'s reason.
- Memory: ``hipMalloc`` / ``hipFree``; a buffer's handle is its device address
  (an int), a view that address plus an offset (no call). ``copy_to_device``:
  ``hipMemcpyHtoDAsync`` then ``hipStreamSynchronize``; ``copy_from_device``
  with ``hipMemcpyDtoHAsync``. ``copy_on_device``: ``hipMemcpyDtoDAsync``;
  ``memset``: ``hipMemsetD8Async`` / ``D16`` / ``D32``.
- Kernels: ``hipModuleLoadData`` of the HSACO, ``hipModuleGetFunction``. The
  kernel's arguments are read from the code object's metadata note
  (:func:`~.code_object.read_code_object`) and packed into the explicit
  kernarg bytes at the metadata's offsets (:func:`~.code_object.pack_arguments`),
  handed to ``hipModuleLaunchKernel`` through ``extra``
  (``HIP_LAUNCH_PARAM_BUFFER_POINTER``, ``HIP_LAUNCH_PARAM_BUFFER_SIZE``,
  ``HIP_LAUNCH_PARAM_END``); the runtime appends hidden arguments itself.
- Command buffers: recorded on the host (:mod:`~.commands`), captured at
  ``end_recording`` (``hipStreamBeginCapture`` in thread-local mode,
  ``hipStreamEndCapture``, ``hipGraphInstantiate``), replayed with
  ``hipGraphLaunch``, updated by capturing again and ``hipGraphExecUpdate``
  (instantiating anew when refused). HIP graphs have no conditional nodes.
- Timing: ``hipEventCreate`` / ``hipEventRecord`` / ``hipEventSynchronize`` /
  ``hipEventElapsedTime``.
- Properties: ``hipGetDeviceProperties`` mapped onto ``Target`` fields
  (:mod:`~.properties`), for ``Target.from_device``.
"""

from __future__ import annotations

import ctypes
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from heron.runtime.core import commands as recorded
from heron.runtime.core.device import (
    CommandBuffer,
    Device,
    DeviceBuffer,
    DeviceError,
    KernelImage,
    LoadedKernel,
    Timer,
    as_dim3,
)
from heron.runtime.rocm.code_object import KernelMetadata, pack_arguments, read_code_object
from heron.runtime.rocm.driver import probe
from heron.runtime.rocm.properties import target_properties

__all__ = ["HipDevice", "HipGraph", "HipTimer"]


class _Kernel:
    def __init__(self, module: Any, function: Any, metadata: KernelMetadata) -> None:
        self.module = module
        self.function = function
        self.metadata = metadata


class HipDevice(Device):
    """One AMD GPU (see the module docstring). ``bindings``: ``hip.hip``."""

    backend = "rocm"
    supports_conditional_nodes = False

    def __init__(self, ordinal: int = 0, *, bindings: Any = None) -> None:
        if bindings is None:
            try:
                from hip import hip as bindings
            except ImportError as exc:
                raise DeviceError(f"the HIP device needs hip-python ({exc})") from exc
        status = probe(bindings)
        if not status.available:
            raise DeviceError(status.reason)
        if not 0 <= ordinal < len(status.devices):
            raise DeviceError(
                f"no HIP device {ordinal}: the runtime reports {len(status.devices)}"
                f" ({status.reason})"
            )
        self._hip = bindings
        self.info = status.devices[ordinal]
        self.ordinal = ordinal
        self._call("hipSetDevice", ordinal)
        self._stream = self._call("hipStreamCreate")
        self._allocations: dict[int, int] = {}  # id(root buffer) -> device address
        self._recording: list[recorded.Command] | None = None
        self.launches = 0

    # -- the runtime ---------------------------------------------------------------------
    def _call(self, name: str, *arguments: Any) -> Any:
        result = getattr(self._hip, name)(*arguments)
        code, *values = result if isinstance(result, tuple) else (result,)
        if int(code) != 0:
            where = (
                f"HIP device {self.ordinal} ({self.info.name}): " if hasattr(self, "info") else ""
            )
            raise DeviceError(f"{where}{name} failed: {getattr(code, 'name', code)}")
        if not values:
            return None
        return values[0] if len(values) == 1 else tuple(values)

    # -- Device --------------------------------------------------------------------------
    @property
    def description(self) -> str:
        return f"HIP device {self.ordinal}: {self.info.name} ({self.info.architecture})"

    def properties(self) -> dict[str, Any]:
        """This device as ``Target`` field values (``Target.from_device`` builds the Target)."""
        return target_properties(self._call("hipGetDeviceProperties", self.ordinal))

    def allocate(self, nbytes: int, label: str = "") -> DeviceBuffer:
        if nbytes < 0:
            raise DeviceError(f"cannot allocate {nbytes} bytes")
        address = int(self._call("hipMalloc", max(nbytes, 1)))
        buffer = DeviceBuffer(self, nbytes, address, label)
        self._allocations[id(buffer)] = address
        return buffer

    def free(self, buffer: DeviceBuffer) -> None:
        """``hipFree`` an allocation (once); views and freed buffers need nothing."""
        self._own(buffer)
        address = self._allocations.pop(id(buffer), None)
        if address is not None:
            self._call("hipFree", address)

    def _own(self, buffer: DeviceBuffer) -> int:
        if buffer.device is not self:
            raise DeviceError(f"buffer '{buffer.label}' belongs to another device")
        return int(buffer.handle)

    def _refuse_while_recording(self, what: str) -> None:
        if self._recording is not None:
            raise DeviceError(f"{what} while recording a command buffer (a capturing stream)")

    def copy_to_device(self, buffer: DeviceBuffer, data: np.ndarray | bytes) -> None:
        self._refuse_while_recording("copy_to_device")
        host = _host_bytes(data)
        if host.size > buffer.nbytes:
            raise DeviceError(
                f"copying {host.size} bytes into buffer '{buffer.label}' of {buffer.nbytes}"
            )
        if host.size:
            self._call(
                "hipMemcpyHtoDAsync", self._own(buffer), host.ctypes.data, host.size, self._stream
            )
        self._call("hipStreamSynchronize", self._stream)

    def copy_from_device(self, buffer: DeviceBuffer) -> np.ndarray:
        self._refuse_while_recording("copy_from_device")
        host = np.empty(buffer.nbytes, np.uint8)
        if buffer.nbytes:
            self._call(
                "hipMemcpyDtoHAsync",
                host.ctypes.data,
                self._own(buffer),
                buffer.nbytes,
                self._stream,
            )
        self._call("hipStreamSynchronize", self._stream)
        return host

    def load_kernel(self, image: KernelImage) -> LoadedKernel:
        if image.format != "hsaco":
            raise DeviceError(
                f"the HIP device loads 'hsaco' images, not '{image.format}'"
                " (compile with --backend rocm)"
            )
        code_object = read_code_object(image.data)
        metadata = code_object.kernel(image.kernel_name)
        arch = self.info.architecture.split(":", 1)[0]
        built_for = code_object.target.split(":", 1)[0]
        if arch and built_for and not built_for.endswith(f"--{arch}"):
            raise DeviceError(
                f"{self.description}: the code object of kernel '{image.kernel_name}' is for"
                f" {built_for}, not {arch}; compile for --arch {arch}"
            )
        module = self._call("hipModuleLoadData", image.data)
        function = self._call("hipModuleGetFunction", module, image.kernel_name.encode())
        return LoadedKernel(self, image.kernel_name, _Kernel(module, function, metadata))

    def launch(
        self,
        kernel: LoadedKernel,
        grid: Sequence[int],
        block: Sequence[int],
        buffers: Sequence[DeviceBuffer],
        shared_bytes: int = 0,
    ) -> None:
        if kernel.device is not self:
            raise DeviceError(f"kernel '{kernel.name}' was loaded on another device")
        for buffer in buffers:
            self._own(buffer)
        if shared_bytes < 0:
            raise DeviceError(f"kernel '{kernel.name}': {shared_bytes} bytes of shared memory")
        pack_arguments(kernel.handle.metadata, [b.handle for b in buffers])  # checks now
        self._issue(
            recorded.LaunchCommand(
                kernel, as_dim3(grid, "grid"), as_dim3(block, "block"), list(buffers), shared_bytes
            )
        )

    def synchronize(self) -> None:
        self._refuse_while_recording("synchronize")
        self._call("hipStreamSynchronize", self._stream)

    # -- device-side memory operations ---------------------------------------------------
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

    def _issue(self, command: recorded.Command) -> None:
        if self._recording is not None:
            self._recording.append(command)
        else:
            self.run_command(command)

    def run_command(self, command: recorded.Command) -> None:
        """Put one command on the stream (immediately, or into a capture)."""
        if isinstance(command, recorded.LaunchCommand):
            self._launch_now(command)
        elif isinstance(command, recorded.CopyCommand):
            source, destination = command.buffers
            if source.nbytes:
                self._call(
                    "hipMemcpyDtoDAsync",
                    int(destination.handle),
                    int(source.handle),
                    source.nbytes,
                    self._stream,
                )
        elif isinstance(command, recorded.MemsetCommand):
            (destination,) = command.buffers
            count = destination.nbytes // command.width
            if count:
                value = command.value
                if command.width == 4 and value >= 1 << 31:
                    value -= 1 << 32  # hipMemsetD32Async takes a C int
                call = {1: "hipMemsetD8Async", 2: "hipMemsetD16Async", 4: "hipMemsetD32Async"}
                self._call(call[command.width], int(destination.handle), value, count, self._stream)
        else:  # pragma: no cover - the union is closed
            raise DeviceError(f"unknown command {command!r}")

    def _launch_now(self, command: recorded.LaunchCommand) -> None:
        kernel: _Kernel = command.kernel.handle
        packed = pack_arguments(kernel.metadata, [int(b.handle) for b in command.buffers])
        # The runtime copies the kernarg bytes during the call: locals are enough.
        storage = ctypes.create_string_buffer(packed, max(len(packed), 1))
        size = ctypes.c_size_t(len(packed))
        extra = (ctypes.c_void_p * 5)(
            self._hip.HIP_LAUNCH_PARAM_BUFFER_POINTER,
            ctypes.addressof(storage),
            self._hip.HIP_LAUNCH_PARAM_BUFFER_SIZE,
            ctypes.addressof(size),
            self._hip.HIP_LAUNCH_PARAM_END,
        )
        self._call(
            "hipModuleLaunchKernel",
            kernel.function,
            *command.grid,
            *command.block,
            command.shared_bytes,
            self._stream,
            None,
            ctypes.addressof(extra),
        )
        self.launches += 1

    # -- command buffers -----------------------------------------------------------------
    @property
    def recording(self) -> bool:
        return self._recording is not None

    def begin_recording(self) -> None:
        if self._recording is not None:
            raise DeviceError("begin_recording: already recording a command buffer")
        self._recording = []

    def end_recording(self) -> CommandBuffer:
        if self._recording is None:
            raise DeviceError("end_recording: not recording")
        commands, self._recording = self._recording, None
        graph = self.capture(commands)
        try:
            executable = self._instantiate(graph)
        except DeviceError:
            self._call("hipGraphDestroy", graph)
            raise
        return HipGraph(self, commands, graph, executable)

    def _instantiate(self, graph: Any) -> Any:
        values = self._call("hipGraphInstantiate", graph, 0)  # (exec, error node, log)
        return values[0] if isinstance(values, tuple) else values

    def capture(self, commands: Sequence[recorded.Command]) -> Any:
        """A ``hipGraph_t`` of ``commands``, by stream capture (thread-local mode)."""
        mode = self._hip.hipStreamCaptureMode.hipStreamCaptureModeThreadLocal
        self._call("hipStreamBeginCapture", self._stream, mode)
        try:
            for command in commands:
                self.run_command(command)
        except BaseException:
            result = self._hip.hipStreamEndCapture(self._stream)
            if int(result[0]) == 0 and len(result) > 1:
                self._hip.hipGraphDestroy(result[1])
            raise
        return self._call("hipStreamEndCapture", self._stream)

    def timer(self) -> Timer:
        return HipTimer(self)


class HipGraph(CommandBuffer):
    """An instantiated HIP graph of recorded commands (``hipGraphExec_t``)."""

    def __init__(
        self, device: HipDevice, commands: list[recorded.Command], graph: Any, executable: Any
    ) -> None:
        self.device = device
        self.commands = commands
        self._graph = graph
        self._executable = executable
        self.replays = 0
        self.updates = 0
        self.instantiations = 1

    @property
    def buffers(self) -> tuple[DeviceBuffer, ...]:
        return recorded.buffers_of(self.commands)

    def replay(self) -> None:
        if self.device.recording:
            raise DeviceError("replaying a command buffer while recording another is not supported")
        self.device._call("hipGraphLaunch", self._executable, self.device._stream)
        self.replays += 1

    def update(self, mapping: Mapping[DeviceBuffer, DeviceBuffer]) -> None:
        """Capture again with the new buffers; ``hipGraphExecUpdate``, else instantiate anew."""
        recorded.remap(self.commands, mapping, self.device)
        device = self.device
        graph = device.capture(self.commands)
        result = device._hip.hipGraphExecUpdate(self._executable, graph, None)
        device._call("hipGraphDestroy", self._graph)
        self._graph = graph
        if int(result[0]) == 0:
            self.updates += 1
            return
        device._call("hipGraphExecDestroy", self._executable)
        self._executable = device._instantiate(graph)
        self.instantiations += 1

    def destroy(self) -> None:
        """Give the graph back (``hipGraphExecDestroy``, ``hipGraphDestroy``)."""
        if self._executable is not None:
            self.device._call("hipGraphExecDestroy", self._executable)
            self.device._call("hipGraphDestroy", self._graph)
            self._executable = self._graph = None


class HipTimer(Timer):
    """Two events on the device's stream; ``seconds`` waits for the second."""

    def __init__(self, device: HipDevice) -> None:
        self.device = device
        self._start = device._call("hipEventCreate")
        self._stop = device._call("hipEventCreate")
        self._marks = 0

    def start(self) -> None:
        self.device._call("hipEventRecord", self._start, self.device._stream)
        self._marks = 1

    def stop(self) -> None:
        if self._marks < 1:
            raise DeviceError("timer: stop() before start()")
        self.device._call("hipEventRecord", self._stop, self.device._stream)
        self._marks = 2

    def seconds(self) -> float:
        if self._marks < 2:
            raise DeviceError("timer: seconds() needs start() and stop() first")
        self.device._call("hipEventSynchronize", self._stop)
        return float(self.device._call("hipEventElapsedTime", self._start, self._stop)) / 1000.0


def _host_bytes(data: np.ndarray | bytes) -> np.ndarray:
    if isinstance(data, np.ndarray):
        return np.ascontiguousarray(data).reshape(-1).view(np.uint8)
    return np.frombuffer(bytes(data), np.uint8)
