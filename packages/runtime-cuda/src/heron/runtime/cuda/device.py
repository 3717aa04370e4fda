"""The CUDA device: heron's kernels on an NVIDIA GPU through the driver API (cuda-python).

Everything goes through ``cuda.bindings.driver`` (cuda.core's ``Device`` and
``launch`` would hide the parameter buffer, whose layout heron checks itself,
and the stream capture the command buffers need). Each call returns
``(CUresult, *values)``; a non-zero result becomes a :class:`DeviceError`
naming the call and the error (``cuLaunchKernel failed: CUDA_ERROR_INVALID_VALUE
(invalid argument)``).

- Opening: ``cuInit``, ``cuDeviceGet``, the device's primary context
  (``cuDevicePrimaryCtxRetain``, made current with ``cuCtxSetCurrent``) and
  one non-blocking stream (``cuStreamCreate``) on which everything is ordered.
  Without a driver or device, :class:`DeviceError` with ``driver.probe``'s reason.
- Memory: ``cuMemAlloc`` / ``cuMemFree``; a buffer's handle is its device
  address (an int), a view is that address plus an offset (no call).
  ``copy_to_device``: ``cuMemcpyHtoDAsync`` then ``cuStreamSynchronize`` (the
  host array must outlive the copy); ``copy_from_device`` likewise with
  ``cuMemcpyDtoHAsync``. ``copy_on_device``: ``cuMemcpyDtoDAsync``;
  ``memset``: ``cuMemsetD8Async`` / ``D16`` / ``D32``.
- Kernels: ``cuModuleLoadData`` of a cubin assembled for a compatible arch
  (:func:`~.kernel_abi.cubin_runs_on`) or of the PTX, which the driver
  JIT-compiles (:meth:`CudaDevice.load_best` picks); ``cuModuleGetFunction``.
  The parameter layout comes from the PTX ``.entry``
  (:func:`~.kernel_abi.ptx_entry_signature`) or, for a cubin, from
  ``cuFuncGetParamInfo``. ``launch`` packs the device pointers
  (:func:`~.kernel_abi.pack_arguments`) and hands ``cuLaunchKernel`` one
  pointer into that buffer per parameter; dynamic shared memory over the
  default 48 KiB is allowed first with ``cuFuncSetAttribute``.
- Command buffers: recorded on the host (:mod:`~.commands`), captured at
  ``end_recording`` (``cuStreamBeginCapture`` in thread-local mode, the
  commands issued on the stream, ``cuStreamEndCapture``, ``cuGraphInstantiate``),
  replayed with ``cuGraphLaunch``, updated by capturing again with the new
  buffers and ``cuGraphExecUpdate`` (instantiating anew when the update is
  refused). No conditional nodes yet (see docs/devices.md): the executor
  splits command buffers at while and conditional thunks.
- Timing: ``cuEventCreate`` / ``cuEventRecord`` on the stream /
  ``cuEventSynchronize`` / ``cuEventElapsedTime``.
- Properties: ``cuDeviceGetAttribute`` and ``cuDeviceTotalMem`` mapped onto
  ``Target`` fields (:mod:`~.properties`), for ``Target.from_device``.
"""

from __future__ import annotations

import ctypes
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

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
from heron.runtime.cuda import commands as recorded
from heron.runtime.cuda.driver import probe
from heron.runtime.cuda.kernel_abi import (
    KernelParameter,
    KernelSignature,
    choose_image,
    cubin_arch,
    cubin_runs_on,
    pack_arguments,
    ptx_entry_signature,
)
from heron.runtime.cuda.properties import ATTRIBUTES, target_properties

__all__ = ["CudaDevice", "CudaGraph", "CudaTimer"]

#: Dynamic shared memory a kernel may use without opting in (cuFuncSetAttribute).
_DEFAULT_DYNAMIC_SHARED = 48 * 1024
_CU_STREAM_NON_BLOCKING = 1
_CU_EVENT_DEFAULT = 0


class _Kernel:
    """A loaded function: its module, handle, parameter layout and opted-in shared memory."""

    def __init__(self, module: Any, function: Any, signature: KernelSignature) -> None:
        self.module = module
        self.function = function
        self.signature = signature
        self.shared_limit = _DEFAULT_DYNAMIC_SHARED


class CudaDevice(Device):
    """One CUDA GPU (see the module docstring). ``bindings``: ``cuda.bindings.driver``."""

    backend = "cuda"
    supports_conditional_nodes = False

    def __init__(self, ordinal: int = 0, *, bindings: Any = None) -> None:
        if bindings is None:
            try:
                from cuda.bindings import driver as bindings
            except ImportError as exc:
                raise DeviceError(f"the CUDA device needs cuda-python ({exc})") from exc
        status = probe(bindings)
        if not status.available:
            raise DeviceError(status.reason)
        if not 0 <= ordinal < len(status.devices):
            raise DeviceError(
                f"no CUDA device {ordinal}: the driver reports {len(status.devices)}"
                f" ({status.reason})"
            )
        self._cu = bindings
        self.info = status.devices[ordinal]
        self.ordinal = ordinal
        self.compute_capability: tuple[int, int] = self.info.compute_capability
        self._device = self._call("cuDeviceGet", ordinal)
        self._context = self._call("cuDevicePrimaryCtxRetain", self._device)
        self._call("cuCtxSetCurrent", self._context)
        self._stream = self._call("cuStreamCreate", _CU_STREAM_NON_BLOCKING)
        self._allocations: dict[int, int] = {}  # id(root buffer) -> device address
        self._recording: list[recorded.Command] | None = None
        #: Kernels launched so far (immediately; a replayed graph counts its own).
        self.launches = 0

    # -- the driver ----------------------------------------------------------------------
    def _call(self, name: str, *arguments: Any) -> Any:
        """``bindings.name(*arguments)``; its values, or DeviceError naming the error."""
        result = getattr(self._cu, name)(*arguments)
        code, *values = result if isinstance(result, tuple) else (result,)
        if int(code) != 0:
            raise DeviceError(f"{self._where()}{name} failed: {self._error_text(code)}")
        if not values:
            return None
        return values[0] if len(values) == 1 else tuple(values)

    def _where(self) -> str:
        info = getattr(self, "info", None)
        return f"CUDA device {self.ordinal} ({info.name}): " if info else "CUDA: "

    def _error_text(self, code: Any) -> str:
        name = getattr(code, "name", None) or str(code)
        try:
            text = self._cu.cuGetErrorString(code)
            if int(text[0]) == 0 and text[1]:
                raw = text[1]
                detail = raw.decode() if isinstance(raw, bytes) else str(raw)
                return f"{name} ({detail})"
        except Exception:  # noqa: BLE001 - the name alone still says what failed
            pass
        return name

    def _pointer(self, address: int) -> Any:
        return self._cu.CUdeviceptr(address)

    # -- Device --------------------------------------------------------------------------
    @property
    def description(self) -> str:
        major, minor = self.compute_capability
        return f"CUDA device {self.ordinal}: {self.info.name} (sm_{major}{minor})"

    def properties(self) -> dict[str, Any]:
        """This device as ``Target`` field values (``Target.from_device`` builds the Target)."""
        attribute = self._cu.CUdevice_attribute
        values: dict[str, int] = {}
        for name in ATTRIBUTES:
            try:
                values[name] = int(
                    self._call(
                        "cuDeviceGetAttribute",
                        getattr(attribute, f"CU_DEVICE_ATTRIBUTE_{name}"),
                        self._device,
                    )
                )
            except (DeviceError, AttributeError):
                continue  # not known to this driver: the Target borrows it from a preset
        return target_properties(values, self.info.total_memory)

    def allocate(self, nbytes: int, label: str = "") -> DeviceBuffer:
        if nbytes < 0:
            raise DeviceError(f"cannot allocate {nbytes} bytes")
        address = int(self._call("cuMemAlloc", max(nbytes, 1)))
        buffer = DeviceBuffer(self, nbytes, address, label)
        self._allocations[id(buffer)] = address
        return buffer

    def free(self, buffer: DeviceBuffer) -> None:
        """``cuMemFree`` an allocation (once); views and freed buffers need nothing."""
        self._own(buffer)
        address = self._allocations.pop(id(buffer), None)
        if address is not None:
            self._call("cuMemFree", self._pointer(address))

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
            address = self._own(buffer)
            self._call(
                "cuMemcpyHtoDAsync",
                self._pointer(address),
                host.ctypes.data,
                host.size,
                self._stream,
            )
        self._call("cuStreamSynchronize", self._stream)  # ``host`` may go now

    def copy_from_device(self, buffer: DeviceBuffer) -> np.ndarray:
        self._refuse_while_recording("copy_from_device")
        host = np.empty(buffer.nbytes, np.uint8)
        if buffer.nbytes:
            address = self._own(buffer)
            self._call(
                "cuMemcpyDtoHAsync",
                host.ctypes.data,
                self._pointer(address),
                buffer.nbytes,
                self._stream,
            )
        self._call("cuStreamSynchronize", self._stream)
        return host

    def load_kernel(self, image: KernelImage) -> LoadedKernel:
        """Load a ``cubin`` (for a compatible arch) or ``ptx`` (JIT-compiled by the driver)."""
        if image.format == "cubin":
            arch = cubin_arch(image.data)
            if not cubin_runs_on(arch, self.compute_capability):
                major, minor = self.compute_capability
                raise DeviceError(
                    f"{self.description}: the cubin of kernel '{image.kernel_name}' is for"
                    f" sm_{arch[0]}{arch[1]}, which does not run on sm_{major}{minor}; load the"
                    " PTX instead (the driver JIT-compiles it)"
                )
            data = image.data
        elif image.format == "ptx":
            data = image.data if image.data.endswith(b"\0") else image.data + b"\0"
        else:
            raise DeviceError(
                f"the CUDA device loads 'cubin' or 'ptx' images, not '{image.format}'"
                " (compile with --backend cuda)"
            )
        module = self._call("cuModuleLoadData", data)
        function = self._call("cuModuleGetFunction", module, image.kernel_name.encode())
        if image.format == "ptx":
            signature = ptx_entry_signature(image.data, image.kernel_name)
        else:
            signature = self._queried_signature(function, image.kernel_name)
        return LoadedKernel(self, image.kernel_name, _Kernel(module, function, signature))

    def load_best(self, images: Sequence[KernelImage]) -> LoadedKernel:
        """Load the best of one kernel's images here (:func:`~.kernel_abi.choose_image`)."""
        return self.load_kernel(choose_image(images, self.compute_capability))

    def _queried_signature(self, function: Any, kernel_name: str) -> KernelSignature:
        """A cubin's parameter layout from the driver (``cuFuncGetParamInfo``, CUDA 12.4+)."""
        parameters = []
        for index in range(4096):
            result = self._cu.cuFuncGetParamInfo(function, index)
            if int(result[0]) != 0:
                break  # CUDA_ERROR_INVALID_VALUE past the last parameter
            offset, size = int(result[1]), int(result[2])
            parameters.append(
                KernelParameter(f"param_{index}", f"b{8 * size}", size, size, offset, size == 8)
            )
        return KernelSignature(kernel_name, tuple(parameters))

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
        pack_arguments(kernel.handle.signature, [b.handle for b in buffers])  # checks now
        command = recorded.LaunchCommand(
            kernel, as_dim3(grid, "grid"), as_dim3(block, "block"), list(buffers), shared_bytes
        )
        self._issue(command)

    def synchronize(self) -> None:
        self._refuse_while_recording("synchronize")
        self._call("cuStreamSynchronize", self._stream)

    # -- device-side memory operations ---------------------------------------------------
    def view(self, buffer: DeviceBuffer, offset: int, nbytes: int) -> DeviceBuffer:
        address = self._own(buffer)
        if not (0 <= offset and 0 <= nbytes and offset + nbytes <= buffer.nbytes):
            raise DeviceError(
                f"view [{offset}:{offset + nbytes}] of buffer '{buffer.label}' lies outside its"
                f" {buffer.nbytes} bytes"
            )
        label = f"{buffer.label or 'buffer'}[{offset}:{offset + nbytes}]"
        return DeviceBuffer(self, nbytes, address + offset, label)

    def copy_on_device(self, source: DeviceBuffer, destination: DeviceBuffer) -> None:
        if source.nbytes != destination.nbytes:
            raise DeviceError(
                f"device copy from '{source.label}' ({source.nbytes} bytes) to"
                f" '{destination.label}' ({destination.nbytes} bytes): sizes differ"
            )
        self._own(source), self._own(destination)
        self._issue(recorded.CopyCommand([source, destination]))

    def memset(self, buffer: DeviceBuffer, value: int, width: int = 1) -> None:
        if width not in (1, 2, 4) or not 0 <= value < 1 << (8 * width):
            raise DeviceError(f"memset: value {value} with width {width} (1, 2 or 4 bytes)")
        if buffer.nbytes % width:
            raise DeviceError(
                f"memset of '{buffer.label}': {buffer.nbytes} bytes is no multiple of {width}"
            )
        self._own(buffer)
        self._issue(recorded.MemsetCommand([buffer], value, width))

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
                    "cuMemcpyDtoDAsync",
                    self._pointer(int(destination.handle)),
                    self._pointer(int(source.handle)),
                    source.nbytes,
                    self._stream,
                )
        elif isinstance(command, recorded.MemsetCommand):
            (destination,) = command.buffers
            count = destination.nbytes // command.width
            if count:
                call = {1: "cuMemsetD8Async", 2: "cuMemsetD16Async", 4: "cuMemsetD32Async"}
                self._call(
                    call[command.width],
                    self._pointer(int(destination.handle)),
                    command.value,
                    count,
                    self._stream,
                )
        else:  # pragma: no cover - the union is closed
            raise DeviceError(f"unknown command {command!r}")

    def _launch_now(self, command: recorded.LaunchCommand) -> None:
        kernel: _Kernel = command.kernel.handle
        signature = kernel.signature
        packed = pack_arguments(signature, [int(b.handle) for b in command.buffers])
        if command.shared_bytes > kernel.shared_limit:
            self._call(
                "cuFuncSetAttribute",
                kernel.function,
                self._cu.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                command.shared_bytes,
            )
            kernel.shared_limit = command.shared_bytes
        # The driver copies the parameters during the call: locals are enough.
        storage = ctypes.create_string_buffer(packed, max(len(packed), 1))
        base = ctypes.addressof(storage)
        pointers = (ctypes.c_void_p * max(len(signature.parameters), 1))(
            *(base + p.offset for p in signature.parameters)
        )
        self._call(
            "cuLaunchKernel",
            kernel.function,
            *command.grid,
            *command.block,
            command.shared_bytes,
            self._stream,
            ctypes.addressof(pointers),
            0,
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
            executable = self._call("cuGraphInstantiate", graph, 0)
        except DeviceError:
            self._call("cuGraphDestroy", graph)
            raise
        return CudaGraph(self, commands, graph, executable)

    def capture(self, commands: Sequence[recorded.Command]) -> Any:
        """A ``CUgraph`` of ``commands``, by stream capture (thread-local mode)."""
        mode = self._cu.CUstreamCaptureMode.CU_STREAM_CAPTURE_MODE_THREAD_LOCAL
        self._call("cuStreamBeginCapture", self._stream, mode)
        try:
            for command in commands:
                self.run_command(command)
        except BaseException:
            result = self._cu.cuStreamEndCapture(self._stream)
            if int(result[0]) == 0 and len(result) > 1:
                self._cu.cuGraphDestroy(result[1])
            raise
        return self._call("cuStreamEndCapture", self._stream)

    # -- timing --------------------------------------------------------------------------
    def timer(self) -> Timer:
        return CudaTimer(self)


class CudaGraph(CommandBuffer):
    """An instantiated CUDA graph of recorded commands (``CUgraphExec``)."""

    def __init__(
        self, device: CudaDevice, commands: list[recorded.Command], graph: Any, executable: Any
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
        self.device._call("cuGraphLaunch", self._executable, self.device._stream)
        self.replays += 1

    def update(self, mapping: Mapping[DeviceBuffer, DeviceBuffer]) -> None:
        """Capture the commands again with the new buffers; ``cuGraphExecUpdate`` the graph.

        Same commands, so the same topology: the driver takes it in place. Should
        it refuse (a driver limitation), the new graph is instantiated instead.
        """
        recorded.remap(self.commands, mapping, self.device)
        device = self.device
        graph = device.capture(self.commands)
        result = device._cu.cuGraphExecUpdate(self._executable, graph)
        device._call("cuGraphDestroy", self._graph)
        self._graph = graph
        if int(result[0]) == 0:
            self.updates += 1
            return
        device._call("cuGraphExecDestroy", self._executable)
        self._executable = device._call("cuGraphInstantiate", graph, 0)
        self.instantiations += 1

    def destroy(self) -> None:
        """Give the graph back to the driver (``cuGraphExecDestroy``, ``cuGraphDestroy``)."""
        if self._executable is not None:
            self.device._call("cuGraphExecDestroy", self._executable)
            self.device._call("cuGraphDestroy", self._graph)
            self._executable = self._graph = None


class CudaTimer(Timer):
    """Two events on the device's stream; ``seconds`` waits for the second."""

    def __init__(self, device: CudaDevice) -> None:
        self.device = device
        self._start = device._call("cuEventCreate", _CU_EVENT_DEFAULT)
        self._stop = device._call("cuEventCreate", _CU_EVENT_DEFAULT)
        self._marks = 0

    def start(self) -> None:
        self.device._call("cuEventRecord", self._start, self.device._stream)
        self._marks = 1

    def stop(self) -> None:
        if self._marks < 1:
            raise DeviceError("timer: stop() before start()")
        self.device._call("cuEventRecord", self._stop, self.device._stream)
        self._marks = 2

    def seconds(self) -> float:
        if self._marks < 2:
            raise DeviceError("timer: seconds() needs start() and stop() first")
        self.device._call("cuEventSynchronize", self._stop)
        milliseconds = self.device._call("cuEventElapsedTime", self._start, self._stop)
        return float(milliseconds) / 1000.0


def _host_bytes(data: np.ndarray | bytes) -> np.ndarray:
    """``data``'s bytes as a contiguous uint8 array (ml_dtypes' types included)."""
    if isinstance(data, np.ndarray):
        return np.ascontiguousarray(data).reshape(-1).view(np.uint8)
    return np.frombuffer(bytes(data), np.uint8)
