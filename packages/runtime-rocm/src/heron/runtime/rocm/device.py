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
What every capturing GPU device does (memory, views, copies, memsets, the
recording, capture, replay and update of graphs, event timers) is
:class:`heron.runtime.core.gpu_device.CapturingDevice`'s, here with HIP's call
names (:data:`HIP_CALLS`); this module adds loading and launching code objects.

- Library calls: GEMM through hipBLAS (:mod:`~.hipblas`,
  ``hipblasGemmStridedBatchedEx`` from rocm-bindings-libraries, through the
  dependency ``hip-python[libraries]``) for the calls it can express (no bias or
  activation epilogue); elsewhere heron's GEMM kernels run.
- Timing: ``hipEventCreate`` / ``hipEventRecord`` / ``hipEventSynchronize`` /
  ``hipEventElapsedTime``.
- Properties: ``hipGetDeviceProperties`` mapped onto ``Target`` fields
  (:mod:`~.properties`), for ``Target.from_device``.
"""

from __future__ import annotations

import ctypes
from collections.abc import Mapping, Sequence
from typing import Any

from heron.runtime.core import commands as recorded
from heron.runtime.core import dlpack
from heron.runtime.core.device import DeviceError, KernelImage, LoadedKernel
from heron.runtime.core.gemm import GEMM
from heron.runtime.core.gpu_device import (
    CapturingDevice,
    DeviceGraph,
    DriverCalls,
    EventTimer,
    Library,
)
from heron.runtime.rocm.code_object import (
    IMAGE_FORMATS,
    KernelMetadata,
    pack_arguments,
    read_code_object,
)
from heron.runtime.rocm.driver import probe
from heron.runtime.rocm.properties import target_properties

__all__ = ["HIP_CALLS", "HipDevice", "HipGraph", "HipTimer"]

#: HIP's names for what every capturing device does.
HIP_CALLS = DriverCalls(
    vendor="HIP",
    allocate="hipMalloc",
    free="hipFree",
    copy_to_device="hipMemcpyHtoDAsync",
    copy_from_device="hipMemcpyDtoHAsync",
    copy_on_device="hipMemcpyDtoDAsync",
    memset={1: "hipMemsetD8Async", 2: "hipMemsetD16Async", 4: "hipMemsetD32Async"},
    synchronize="hipStreamSynchronize",
    begin_capture="hipStreamBeginCapture",
    end_capture="hipStreamEndCapture",
    instantiate="hipGraphInstantiate",
    launch_graph="hipGraphLaunch",
    destroy_graph="hipGraphDestroy",
    destroy_executable="hipGraphExecDestroy",
    create_event="hipEventCreate",
    record_event="hipEventRecord",
    synchronize_event="hipEventSynchronize",
    stream_wait_event="hipStreamWaitEvent",
    elapsed_time="hipEventElapsedTime",
)
#: A HIP graph and timer are the shared ones (the names stay for readers of HIP code).
HipGraph = DeviceGraph
HipTimer = EventTimer


def _hipblas(device: HipDevice) -> Library:
    """hipBLAS for ``device`` (imported only when asked)."""
    from heron.runtime.rocm.hipblas import HipBlas

    return HipBlas(data_types=device._hip.hipDataType)


class _Kernel:
    def __init__(self, module: Any, function: Any, metadata: KernelMetadata) -> None:
        self.module = module
        self.function = function
        self.metadata = metadata


class HipDevice(CapturingDevice):
    """One AMD GPU (see the module docstring). ``bindings``: ``hip.hip``."""

    backend = "rocm"
    dlpack_device_type = dlpack.ROCM
    _default_stream = 0  # HIP's null stream (DLPack: None or 0)
    calls = HIP_CALLS
    supports_conditional_nodes = False
    conditional_nodes_reason = "HIP graphs have no conditional nodes"

    def __init__(
        self, ordinal: int = 0, *, bindings: Any = None, libraries: Mapping[str, Any] | None = None
    ) -> None:
        """``libraries``: operation -> a function making its :class:`Library` from the
        device (tests pass stand-ins); by default GEMM is hipBLAS's."""
        self._library_makers = dict(libraries) if libraries is not None else {GEMM: _hipblas}
        if bindings is None:
            try:
                from hip import hip as bindings
            except ImportError as exc:
                raise DeviceError(f"the HIP device needs hip-python ({exc})") from exc
        self._open(bindings, probe(bindings), ordinal, "runtime")
        self._hip = bindings
        self._call("hipSetDevice", ordinal)
        self._stream = self._call("hipStreamCreate")

    # -- the runtime ---------------------------------------------------------------------
    def _memset_value(self, value: int, width: int) -> int:
        if width == 4 and value >= 1 << 31:
            return value - (1 << 32)  # hipMemsetD32Async takes a C int
        return value

    def _capture_mode(self) -> Any:
        return self._hip.hipStreamCaptureMode.hipStreamCaptureModeThreadLocal

    def _update_in_place(self, executable: Any, graph: Any) -> bool:
        return int(self._hip.hipGraphExecUpdate(executable, graph, None)[0]) == 0

    def _open_library(self, operation: str) -> Library:
        maker = self._library_makers.get(operation)
        if maker is None:
            raise DeviceError(f"{self.description}: no library for {operation}")
        return maker(self)

    # -- Device --------------------------------------------------------------------------
    @property
    def description(self) -> str:
        return f"HIP device {self.ordinal}: {self.info.name} ({self.info.architecture})"

    def properties(self) -> dict[str, Any]:
        """This device as ``Target`` field values (``Target.from_device`` builds the Target)."""
        return target_properties(self._call("hipGetDeviceProperties", self.ordinal))

    def load_kernel(self, image: KernelImage) -> LoadedKernel:
        if image.format not in IMAGE_FORMATS:
            raise DeviceError(
                f"the HIP device loads {' or '.join(map(repr, IMAGE_FORMATS))} images,"
                f" not '{image.format}' (compile with --backend rocm)"
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

    def _check_arguments(self, kernel: LoadedKernel, addresses: Sequence[int]) -> None:
        pack_arguments(kernel.handle.metadata, addresses)

    def _launch_now(self, command: recorded.LaunchCommand, stream: Any) -> None:
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
            stream,
            None,
            ctypes.addressof(extra),
        )
        self.launches += 1
