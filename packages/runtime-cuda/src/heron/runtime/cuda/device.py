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
  refused).
- Loops and conditionals in command buffers (a driver for CUDA 12.4+,
  ``supports_conditional_nodes``): conditional nodes added into the capture
  (``cuStreamGetCaptureInfo``, ``cuGraphConditionalHandleCreate``,
  ``cuGraphAddNode`` of a ``CU_GRAPH_COND_TYPE_WHILE`` or ``_IF`` node,
  ``cuStreamUpdateCaptureDependencies``), their bodies captured into the
  node's graph on a second stream (``cuStreamBeginCaptureToGraph``), and the
  condition set on the device by heron's small kernels
  (:mod:`~.conditional`) from the predicate or selector. A while loop is the
  condition's commands, a kernel setting the handle from the predicate, and a
  WHILE node whose body is the body, the condition and the setting kernel
  again. A conditional sets one handle per branch first (so that a branch
  changing the selector changes nothing), then adds one IF node per branch.
- Timing: ``cuEventCreate`` / ``cuEventRecord`` on the stream /
  ``cuEventSynchronize`` / ``cuEventElapsedTime``.
- Properties: ``cuDeviceGetAttribute`` and ``cuDeviceTotalMem`` mapped onto
  ``Target`` fields (:mod:`~.properties`), for ``Target.from_device``.
"""

from __future__ import annotations

import ctypes
from collections.abc import Callable, Mapping, Sequence
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
from heron.runtime.cuda.conditional import (
    BRANCH_KERNEL,
    MINIMUM_DRIVER,
    SET_CONDITION_PTX,
    WHILE_KERNEL,
)
from heron.runtime.cuda.driver import probe
from heron.runtime.cuda.kernel_abi import (
    KernelParameter,
    KernelSignature,
    choose_image,
    cubin_arch,
    cubin_runs_on,
    pack_arguments,
    pack_values,
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
        # Commands being recorded: one list per level (a loop's or a branch's inside).
        self._recording: list[list[recorded.Command]] = []
        self._body_streams: list[Any] = []
        self._setters: dict[str, _Kernel] | None = None
        version = int(self._call("cuDriverGetVersion"))
        #: CUDA 12.4+ conditional graph nodes: while loops and conditionals recorded too.
        self.supports_conditional_nodes = version >= MINIMUM_DRIVER
        self.conditional_nodes_reason = (
            ""
            if self.supports_conditional_nodes
            else f"the driver is for CUDA {version // 1000}.{version % 1000 // 10}; they need 12.4"
        )
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
        if self._recording:
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
                    "cuMemcpyDtoDAsync",
                    self._pointer(int(destination.handle)),
                    self._pointer(int(source.handle)),
                    source.nbytes,
                    stream,
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
                    stream,
                )
        elif isinstance(command, recorded.WhileCommand):
            self._capture_while(command, stream, depth)
        elif isinstance(command, recorded.ConditionalCommand):
            self._capture_conditional(command, stream, depth)
        else:  # pragma: no cover - the union is closed
            raise DeviceError(f"unknown command {command!r}")

    def _launch_now(self, command: recorded.LaunchCommand, stream: Any) -> None:
        kernel: _Kernel = command.kernel.handle
        packed = pack_arguments(kernel.signature, [int(b.handle) for b in command.buffers])
        if command.shared_bytes > kernel.shared_limit:
            self._call(
                "cuFuncSetAttribute",
                kernel.function,
                self._cu.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                command.shared_bytes,
            )
            kernel.shared_limit = command.shared_bytes
        self._launch_packed(
            kernel, packed, command.grid, command.block, command.shared_bytes, stream
        )

    def _launch_packed(
        self,
        kernel: _Kernel,
        packed: bytes,
        grid: tuple[int, int, int],
        block: tuple[int, int, int],
        shared_bytes: int,
        stream: Any,
    ) -> None:
        """``cuLaunchKernel`` with one pointer per parameter into ``packed``."""
        parameters = kernel.signature.parameters
        # The driver copies the parameters during the call: locals are enough.
        storage = ctypes.create_string_buffer(packed, max(len(packed), 1))
        base = ctypes.addressof(storage)
        pointers = (ctypes.c_void_p * max(len(parameters), 1))(
            *(base + p.offset for p in parameters)
        )
        self._call(
            "cuLaunchKernel",
            kernel.function,
            *grid,
            *block,
            shared_bytes,
            stream,
            ctypes.addressof(pointers),
            0,
        )
        self.launches += 1

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
            executable = self._call("cuGraphInstantiate", graph, 0)
        except DeviceError:
            self._call("cuGraphDestroy", graph)
            raise
        return CudaGraph(self, commands, graph, executable)

    def capture(self, commands: Sequence[recorded.Command]) -> Any:
        """A ``CUgraph`` of ``commands``, by stream capture (thread-local mode)."""
        self._call("cuStreamBeginCapture", self._stream, self._capture_mode())
        try:
            for command in commands:
                self.run_command(command, self._stream)
        except BaseException:
            result = self._cu.cuStreamEndCapture(self._stream)
            if int(result[0]) == 0 and len(result) > 1:
                self._cu.cuGraphDestroy(result[1])
            raise
        return self._call("cuStreamEndCapture", self._stream)

    def _capture_mode(self) -> Any:
        return self._cu.CUstreamCaptureMode.CU_STREAM_CAPTURE_MODE_THREAD_LOCAL

    # -- conditional nodes (CUDA 12.4+) --------------------------------------------------
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
    ) -> None:
        self._check_conditional_nodes("while")
        recorded.check_predicate(predicate)
        self._own(predicate)
        condition_commands = self._record_nested(condition)
        body_commands = self._record_nested(body)
        self._recording[-1].append(
            recorded.WhileCommand(condition_commands, [predicate], body_commands)
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

    def _condition_kernels(self) -> dict[str, _Kernel]:
        """The kernels that set a condition (``conditional.SET_CONDITION_PTX``), loaded once."""
        if self._setters is None:
            image = KernelImage("ptx", WHILE_KERNEL, SET_CONDITION_PTX.encode())
            module = self._call("cuModuleLoadData", image.data + b"\0")
            self._setters = {}
            for name in (WHILE_KERNEL, BRANCH_KERNEL):
                function = self._call("cuModuleGetFunction", module, name.encode())
                signature = ptx_entry_signature(SET_CONDITION_PTX, name)
                self._setters[name] = _Kernel(module, function, signature)
        return self._setters

    def _set_condition(self, name: str, values: Sequence[int], stream: Any) -> None:
        kernel = self._condition_kernels()[name]
        packed = pack_values(kernel.signature, values)
        self._launch_packed(kernel, packed, (1, 1, 1), (1, 1, 1), 0, stream)

    def _capture_stream(self, depth: int) -> Any:
        """The stream that captures loop and branch bodies ``depth`` levels down."""
        while len(self._body_streams) < depth:
            self._body_streams.append(self._call("cuStreamCreate", _CU_STREAM_NON_BLOCKING))
        return self._body_streams[depth - 1]

    def _conditional_node(self, stream: Any, handle: Any, kind: str) -> Any:
        """Add a conditional node after what ``stream`` captured so far; its body graph.

        ``cuStreamGetCaptureInfo`` gives the graph and the current
        dependencies, ``cuGraphAddNode`` adds the node (one body), and
        ``cuStreamUpdateCaptureDependencies`` makes the stream's next command
        depend on it.
        """
        cu = self._cu
        info = self._call("cuStreamGetCaptureInfo", stream)
        graph, dependencies, count = info[2], info[3], info[5]
        parameters = cu.CUgraphNodeParams()
        parameters.type = cu.CUgraphNodeType.CU_GRAPH_NODE_TYPE_CONDITIONAL
        parameters.conditional.handle = handle
        parameters.conditional.type = getattr(cu.CUgraphConditionalNodeType, kind)
        parameters.conditional.size = 1
        parameters.conditional.ctx = self._context
        node = self._call("cuGraphAddNode", graph, dependencies, None, count, parameters)
        bodies = parameters.conditional.phGraph_out
        body = bodies[0] if isinstance(bodies, list | tuple) else bodies
        flags = cu.CUstreamUpdateCaptureDependencies_flags.CU_STREAM_SET_CAPTURE_DEPENDENCIES
        self._call("cuStreamUpdateCaptureDependencies", stream, [node], None, 1, flags)
        return body

    def _new_handle(self, stream: Any) -> Any:
        graph = self._call("cuStreamGetCaptureInfo", stream)[2]
        return self._call("cuGraphConditionalHandleCreate", graph, self._context, 0, 0)

    def _capture_body(
        self, graph: Any, depth: int, commands: Sequence[recorded.Command], after: Callable
    ) -> None:
        """Capture ``commands`` then ``after(stream)`` into a conditional node's body graph."""
        stream = self._capture_stream(depth)
        mode = self._capture_mode()
        self._call("cuStreamBeginCaptureToGraph", stream, graph, None, None, 0, mode)
        try:
            for command in commands:
                self.run_command(command, stream, depth)
            after(stream)
        finally:
            self._call("cuStreamEndCapture", stream)

    def _capture_while(self, command: recorded.WhileCommand, stream: Any, depth: int) -> None:
        """condition; a WHILE node on the predicate; its body: body, condition, set again."""
        predicate = int(command.buffers[0].handle)
        for inner in command.condition:
            self.run_command(inner, stream, depth)
        handle = self._new_handle(stream)
        self._set_condition(WHILE_KERNEL, [int(handle), predicate], stream)
        body = self._conditional_node(stream, handle, "CU_GRAPH_COND_TYPE_WHILE")
        self._capture_body(
            body,
            depth + 1,
            [*command.body, *command.condition],
            lambda s: self._set_condition(WHILE_KERNEL, [int(handle), predicate], s),
        )

    def _capture_conditional(
        self, command: recorded.ConditionalCommand, stream: Any, depth: int
    ) -> None:
        """One IF node per branch, every handle set from the selector before any branch runs."""
        selector = int(command.buffers[0].handle)
        count = len(command.branches)
        is_s32 = int(command.selector_type == "s32")
        handles = [self._new_handle(stream) for _ in command.branches]
        for number, handle in enumerate(handles):
            self._set_condition(
                BRANCH_KERNEL, [int(handle), selector, is_s32, number, count], stream
            )
        for handle, branch in zip(handles, command.branches, strict=True):
            body = self._conditional_node(stream, handle, "CU_GRAPH_COND_TYPE_IF")
            self._capture_body(body, depth + 1, branch, lambda s: None)

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
