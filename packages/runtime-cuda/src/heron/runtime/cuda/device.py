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
What every capturing GPU device does (memory, views, copies, memsets, the
recording, capture, replay and update of graphs, event timers) is
:class:`heron.runtime.core.gpu_device.CapturingDevice`'s, here with CUDA's call
names (:data:`CUDA_CALLS`); this module adds what is CUDA's own.

- Library calls: GEMM through cuBLASLt (:mod:`~.cublaslt`, nvmath-python's
  bindings, a dependency), on the device's
  stream, captured into graphs like the rest; opened on the first call the
  executor asks about, with a workspace from ``cuMemAlloc``. Without
  nvmath-python or ``libcublasLt`` the device offers no library and the
  executor runs heron's GEMM kernels (``library_reasons`` says why).
  Convolutions and fused attention through cuDNN (:mod:`~.cudnn`, the cuDNN
  frontend: the ``cudnn`` extra; one library object serves both); without it
  a convolution or an attention the compiler gave cuDNN runs on the host,
  correct and slow, and the executor's report says why.
- Timing: ``cuEventCreate`` / ``cuEventRecord`` on the stream /
  ``cuEventSynchronize`` / ``cuEventElapsedTime``.
- Properties: ``cuDeviceGetAttribute`` and ``cuDeviceTotalMem`` mapped onto
  ``Target`` fields (:mod:`~.properties`), for ``Target.from_device``.
"""

from __future__ import annotations

import ctypes
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from heron.runtime.core import commands as recorded
from heron.runtime.core import dlpack
from heron.runtime.core.attention import ATTENTION
from heron.runtime.core.attention_backward import ATTENTION_BACKWARD
from heron.runtime.core.convolution import CONVOLUTION
from heron.runtime.core.device import DeviceBuffer, DeviceError, KernelImage, LoadedKernel
from heron.runtime.core.fft import FFT
from heron.runtime.core.gemm import GEMM
from heron.runtime.core.gpu_device import (
    CapturingDevice,
    DeviceGraph,
    DriverCalls,
    EventTimer,
    Library,
    counted_loop_unroll,
)
from heron.runtime.cuda.conditional import (
    BRANCH_KERNEL,
    COUNT_KERNEL,
    COUNTDOWN_KERNEL,
    MINIMUM_DRIVER,
    SET_CONDITION_PTX,
    WHILE_KERNEL,
)
from heron.runtime.cuda.driver import probe
from heron.runtime.cuda.kernel_abi import (
    IMAGE_FORMATS,
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

__all__ = ["CUDA_CALLS", "CudaDevice", "CudaGraph", "CudaTimer"]

#: Loops nested deeper than this inside a graph run their condition (a counter each).
COUNTED_LOOP_DEPTH = 16
_CU_STREAM_NON_BLOCKING = 1
_CU_EVENT_DEFAULT = 0

#: The driver API's names for what every capturing device does.
CUDA_CALLS = DriverCalls(
    vendor="CUDA",
    allocate="cuMemAlloc",
    free="cuMemFree",
    copy_to_device="cuMemcpyHtoDAsync",
    copy_from_device="cuMemcpyDtoHAsync",
    copy_on_device="cuMemcpyDtoDAsync",
    memset={1: "cuMemsetD8Async", 2: "cuMemsetD16Async", 4: "cuMemsetD32Async"},
    synchronize="cuStreamSynchronize",
    begin_capture="cuStreamBeginCapture",
    end_capture="cuStreamEndCapture",
    instantiate="cuGraphInstantiate",
    launch_graph="cuGraphLaunch",
    destroy_graph="cuGraphDestroy",
    destroy_executable="cuGraphExecDestroy",
    create_event="cuEventCreate",
    record_event="cuEventRecord",
    synchronize_event="cuEventSynchronize",
    stream_wait_event="cuStreamWaitEvent",
    elapsed_time="cuEventElapsedTime",
)
#: A CUDA graph and timer are the shared ones (the names stay for readers of CUDA code).
CudaGraph = DeviceGraph
CudaTimer = EventTimer


def _cublaslt(device: CudaDevice) -> Library:
    """cuBLASLt for ``device``, its workspace allocated on it (imported only when asked)."""
    from heron.runtime.cuda.cublaslt import CublasLt

    return CublasLt(
        lambda nbytes: int(device.allocate(nbytes, "cublasLt workspace").handle),
        device_name=device.info.name,
        compute_capability=device.compute_capability,
    )


def _cufft(device: CudaDevice) -> Library:
    """cuFFT for ``device``: scratch allocated on it, copies on its stream (imported only
    when asked)."""
    from heron.runtime.cuda.cufft import Cufft

    def copy(destination: int, source: int, nbytes: int, stream: Any) -> None:
        device._call(
            device.calls.copy_on_device,
            device._pointer(destination),
            device._pointer(source),
            nbytes,
            stream,
        )

    return Cufft(lambda nbytes: int(device.allocate(nbytes, "cuFFT scratch").handle), copy)


def _cudnn(device: CudaDevice) -> Library:
    """cuDNN for ``device``, its workspace allocated on it (imported only when asked)."""
    from heron.runtime.cuda.cudnn import Cudnn

    return Cudnn(lambda nbytes: int(device.allocate(nbytes, "cuDNN workspace").handle))


def _parameter_pointers(kernel: _Kernel, packed: bytes) -> tuple[Any, Any]:
    """``packed`` in a C buffer, and the array of one pointer per parameter into it that
    ``cuLaunchKernel`` takes as ``kernelParams`` (keep both alive while it may read them)."""
    parameters = kernel.signature.parameters
    storage = ctypes.create_string_buffer(packed, max(len(packed), 1))
    base = ctypes.addressof(storage)
    pointers = (ctypes.c_void_p * max(len(parameters), 1))(*(base + p.offset for p in parameters))
    return storage, pointers


class _Kernel:
    """A loaded function: its module, handle, parameter layout and opted-in shared memory."""

    def __init__(
        self, module: Any, function: Any, signature: KernelSignature, shared_limit: int
    ) -> None:
        self.module = module
        self.function = function
        self.signature = signature
        #: Dynamic shared memory it may use now: the device's limit without opting in,
        #: raised (cuFuncSetAttribute) the first time a launch needs more.
        self.shared_limit = shared_limit


class CudaDevice(CapturingDevice):
    """One CUDA GPU (see the module docstring). ``bindings``: ``cuda.bindings.driver``."""

    backend = "cuda"
    dlpack_device_type = dlpack.CUDA
    calls = CUDA_CALLS

    def __init__(
        self, ordinal: int = 0, *, bindings: Any = None, libraries: Mapping[str, Any] | None = None
    ) -> None:
        """``libraries``: operation -> a function making its :class:`Library` from the
        device (tests pass stand-ins); by default GEMM is cuBLASLt's, convolution and
        attention cuDNN's (one library serving both: one maker opens one library), FFT
        cuFFT's."""
        if bindings is None:
            try:
                from cuda.bindings import driver as bindings
            except ImportError as exc:
                raise DeviceError(f"the CUDA device needs cuda-python ({exc})") from exc
        self._library_makers = (
            dict(libraries)
            if libraries is not None
            else {
                GEMM: _cublaslt,
                CONVOLUTION: _cudnn,
                ATTENTION: _cudnn,
                ATTENTION_BACKWARD: _cudnn,
                FFT: _cufft,
            }
        )
        self._opened: dict[Any, Library] = {}
        self._open(bindings, probe(bindings), ordinal, "driver")
        self._cu = bindings
        self.compute_capability: tuple[int, int] = self.info.compute_capability
        self._device = self._call("cuDeviceGet", ordinal)
        self._context = self._call("cuDevicePrimaryCtxRetain", self._device)
        self._call("cuCtxSetCurrent", self._context)
        self._stream = self._call("cuStreamCreate", _CU_STREAM_NON_BLOCKING)
        #: Shared memory a block may use without opting in (48 KiB on every CUDA GPU so
        #: far): the device says it, nothing here restates it.
        self._shared_without_opt_in = int(
            self._call(
                "cuDeviceGetAttribute",
                self._cu.CUdevice_attribute.CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK,
                self._device,
            )
        )
        self._body_streams: list[Any] = []
        self._setters: dict[str, _Kernel] | None = None
        self._counters: DeviceBuffer | None = None
        version = int(self._call("cuDriverGetVersion"))
        #: CUDA 12.4+ conditional graph nodes: while loops and conditionals recorded too.
        self.supports_conditional_nodes = version >= MINIMUM_DRIVER
        self.conditional_nodes_reason = (
            ""
            if self.supports_conditional_nodes
            else f"the driver is for CUDA {version // 1000}.{version % 1000 // 10}; they need 12.4"
        )

    # -- the driver ----------------------------------------------------------------------
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

    def _consumer_stream(self, value: int) -> Any:
        wrap = getattr(self._cu, "CUstream", None)  # the stand-in takes the int itself
        return wrap(value) if wrap is not None else value

    def _pointer(self, address: int) -> Any:
        return self._cu.CUdeviceptr(address)

    def _capture_mode(self) -> Any:
        return self._cu.CUstreamCaptureMode.CU_STREAM_CAPTURE_MODE_THREAD_LOCAL

    def _update_in_place(self, executable: Any, graph: Any) -> bool:
        return int(self._cu.cuGraphExecUpdate(executable, graph)[0]) == 0

    def _create_event(self) -> Any:
        return self._call("cuEventCreate", _CU_EVENT_DEFAULT)

    def _open_library(self, operation: str) -> Library:
        maker = self._library_makers.get(operation)
        if maker is None:
            raise DeviceError(f"{self.description}: no library for {operation}")
        if maker not in self._opened:
            self._opened[maker] = maker(self)
        return self._opened[maker]

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

    def load_kernel(self, image: KernelImage) -> LoadedKernel:
        """Load a ``cubin`` (for a compatible arch) or ``ptx`` (JIT-compiled by the driver):
        the backend's ``IMAGE_FORMATS``, and no other."""
        if image.format not in IMAGE_FORMATS:
            raise DeviceError(
                f"the CUDA device loads {' or '.join(map(repr, IMAGE_FORMATS))} images,"
                f" not '{image.format}' (compile with --backend cuda)"
            )
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
        else:  # "ptx"
            data = image.data if image.data.endswith(b"\0") else image.data + b"\0"
        module = self._call("cuModuleLoadData", data)
        function = self._call("cuModuleGetFunction", module, image.kernel_name.encode())
        if image.format == "ptx":
            signature = ptx_entry_signature(image.data, image.kernel_name)
        else:
            signature = self._queried_signature(function, image.kernel_name)
        kernel = _Kernel(module, function, signature, self._shared_without_opt_in)
        return LoadedKernel(self, image.kernel_name, kernel)

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

    def _check_arguments(self, kernel: LoadedKernel, addresses: Sequence[int]) -> None:
        pack_arguments(kernel.handle.signature, addresses)

    def _launch_now(self, command: recorded.LaunchCommand, stream: Any) -> None:
        launch = self._packed_launch(command)
        assert launch is not None  # this device always packs
        launch(stream)

    def _packed_launch(self, command: recorded.LaunchCommand) -> Callable[[Any], None] | None:
        """The parameter buffer and pointer array built once; ``cuLaunchKernel`` per call."""
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
        storage, pointers = _parameter_pointers(kernel, packed)
        head = (kernel.function, *command.grid, *command.block, command.shared_bytes)
        tail = (ctypes.addressof(pointers), 0)
        driver_launch = self._cu.cuLaunchKernel

        def launch(stream: Any, _alive: tuple = (storage, pointers)) -> None:
            # _alive: the parameter bytes the pointers address live as long as the launch
            result = driver_launch(*head, stream, *tail)
            code = result[0] if isinstance(result, tuple) else result
            if int(code) != 0:
                raise DeviceError(f"{self._where()}cuLaunchKernel failed: {self._error_text(code)}")
            self.launches += 1

        return launch

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
        # The driver copies the parameters during the call: locals are enough.
        storage, pointers = _parameter_pointers(kernel, packed)
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

    # -- conditional nodes (CUDA 12.4+) --------------------------------------------------
    def _condition_kernels(self) -> dict[str, _Kernel]:
        """The kernels that set a condition (``conditional.SET_CONDITION_PTX``), loaded once."""
        if self._setters is None:
            image = KernelImage("ptx", WHILE_KERNEL, SET_CONDITION_PTX.encode())
            module = self._call("cuModuleLoadData", image.data + b"\0")
            self._setters = {}
            for name in (WHILE_KERNEL, BRANCH_KERNEL, COUNT_KERNEL, COUNTDOWN_KERNEL):
                function = self._call("cuModuleGetFunction", module, name.encode())
                signature = ptx_entry_signature(SET_CONDITION_PTX, name)
                self._setters[name] = _Kernel(
                    module, function, signature, self._shared_without_opt_in
                )
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

    def record_while(
        self,
        condition: Callable[[], None],
        predicate: DeviceBuffer,
        body: Callable[[], None],
        trip_count: int | None = None,
    ) -> None:
        if trip_count is not None:
            self._loop_counters()  # allocated now: never while a stream captures
        super().record_while(condition, predicate, body, trip_count)

    def _loop_counters(self) -> DeviceBuffer:
        """One s32 counter per loop depth for counted loops (``_capture_counted``), made once."""
        if self._counters is None:
            self._counters = self.allocate(4 * COUNTED_LOOP_DEPTH, "counted-loop counters")
        return self._counters

    def _capture_counted(self, command: recorded.WhileCommand, stream: Any, depth: int) -> bool:
        """A loop whose trip count the compiler proved, without its condition: a kernel stores
        the passes left in this depth's counter and sets the WHILE node's handle; the node's
        body is the loop body ``counted_loop_unroll`` times, then a kernel that counts down
        (issue 30: a 1000-step fori_loop ran four kernels a step, the condition's two among
        them). False where it does not apply (then the condition runs as usual)."""
        trips = command.trip_count
        if trips is None or self._counters is None or depth >= COUNTED_LOOP_DEPTH:
            return False
        unroll = counted_loop_unroll(trips, len(command.body))
        passes = trips // unroll
        if passes >= 2**31:
            return False
        if passes == 0:
            return True  # the body never runs, and the condition writes only the predicate
        counter = int(self._counters.handle) + 4 * depth
        handle = self._new_handle(stream)
        self._set_condition(COUNT_KERNEL, [int(handle), counter, passes], stream)
        body = self._conditional_node(stream, handle, "CU_GRAPH_COND_TYPE_WHILE")
        self._capture_body(
            body,
            depth + 1,
            list(command.body) * unroll,
            lambda s: self._set_condition(COUNTDOWN_KERNEL, [int(handle), counter], s),
        )
        return True

    def _capture_while(self, command: recorded.WhileCommand, stream: Any, depth: int) -> None:
        """condition; a WHILE node on the predicate; its body: body, condition, set again.
        A loop of a proved trip count runs no condition (``_capture_counted``)."""
        if self._capture_counted(command, stream, depth):
            return
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
