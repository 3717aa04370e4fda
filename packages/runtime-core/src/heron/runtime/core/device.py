"""The device interface: what every backend's device implements.

A device is a place where compiled kernels run: the interpreter (a GPU
emulated on the CPU, :mod:`heron.runtime.interpreter`), a CUDA GPU, a
ROCm GPU. Everything above the device (the correctness harness, ``heron
run``, later the thunk runtime) talks to it only through this interface, so
the same code runs a fusion on any of them:

1. ``allocate(nbytes)`` device memory, ``copy_to_device`` the inputs (their
   bytes in the memory representation of :mod:`heron.hlo.memory_layout`);
2. ``load_kernel(image)`` a :class:`KernelImage` the backend's stages made;
3. ``launch(kernel, grid, block, buffers)``: one buffer per kernel argument,
   in the kernel's argument order (inputs, then outputs);
4. ``synchronize()``, then ``copy_from_device`` the outputs.

Launches may be asynchronous; ``copy_from_device`` waits for them.

The thunk executor (:mod:`heron.runtime.core.executor`) needs more, and every
device gives it (each method's docstring names the CUDA and HIP calls it
stands for):

- ``view(buffer, offset, nbytes)``: a buffer sharing ``buffer``'s bytes (a
  GPU: the pointer plus the offset). A kernel argument is a view of an
  allocation.
- ``copy_on_device(source, destination)`` and ``memset(buffer, value,
  width)``: stream-ordered, like launches.
- Command buffers with the semantics of CUDA graphs made by stream capture:
  between ``begin_recording()`` and ``end_recording()`` the device records
  ``launch``, ``copy_on_device`` and ``memset`` instead of running them (and
  refuses host transfers and ``synchronize``, as a capturing stream does);
  ``end_recording()`` gives a :class:`CommandBuffer`, which ``replay()`` runs
  and ``update(mapping)`` points at other buffers of the same sizes. Where
  ``supports_conditional_nodes`` (CUDA 12.4+ conditional graph nodes),
  ``record_while`` and ``record_conditional`` record loops and branches whose
  predicate or selector is read on the device at replay time.
- ``timer()``: a :class:`Timer` measuring device time between two points of the
  stream (events on a GPU).
- Memory shared with other libraries (DLPack, :mod:`heron.runtime.core.dlpack`):
  ``dlpack_device`` says where the device's memory is in DLPack's terms,
  ``address(buffer)`` where a buffer starts, ``adopt(address, nbytes, owner)``
  makes a buffer of memory someone else owns (never freed by heron; ``owner``
  keeps it alive), and ``dlpack_stream`` is what a producer's
  ``__dlpack__(stream=...)`` is told so that its work comes before this
  device's. A device without them exchanges nothing (``dlpack_device`` None).
- Library calls (:mod:`heron.runtime.core.library_calls`): ``library_for(call)``
  names the library that runs a call here (``"cublasLt"``) or is None;
  ``library_call(call, buffers)`` runs it, stream-ordered like a launch and
  recorded while recording.
"""

from __future__ import annotations

import abc
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import attrs
import numpy as np

__all__ = [
    "SELECTOR_TYPES",
    "CommandBuffer",
    "Device",
    "DeviceBuffer",
    "DeviceError",
    "DeviceLimitError",
    "Dim3",
    "KernelImage",
    "HostTimer",
    "LoadedKernel",
    "Timer",
    "as_dim3",
]

Dim3 = tuple[int, int, int]

#: What a conditional's selector holds: a pred (1 byte; true is branch 0) or an
#: s32 branch index (4 bytes, little-endian; out of range takes the last branch).
SELECTOR_TYPES = {"pred": 1, "s32": 4}


class DeviceError(RuntimeError):
    """A device operation failed; the message says which, on which device, and why."""


class DeviceLimitError(DeviceError):
    """A launch stopped at a limit the user set (the interpreter's work limit).

    Neither the kernel's fault nor heron's: like an input over the memory
    budget, it is a refusal (exit status 2), not a disagreement or a bug.
    """


def as_dim3(sizes: Sequence[int] | int, what: str = "size") -> Dim3:
    """``(x, y, z)`` from one to three positive sizes (missing ones are 1)."""
    values = (sizes,) if isinstance(sizes, int) else tuple(sizes)
    if not 1 <= len(values) <= 3 or any(
        not isinstance(v, (int, np.integer)) or v < 1 for v in values
    ):
        raise DeviceError(f"{what} must be one to three positive integers, got {sizes!r}")
    padded = (*(int(v) for v in values), 1, 1)
    return (padded[0], padded[1], padded[2])


@attrs.frozen
class KernelImage:
    """Device code for one kernel, as a backend's stages made it.

    ``format`` says what ``data`` is: ``"heron-interpreter"`` (the program
    of :mod:`heron.runtime.interpreter.program`, JSON), ``"ptx"``,
    ``"cubin"``, ``"hsaco"``. ``kernel_name`` is the symbol to launch.
    """

    format: str
    kernel_name: str
    data: bytes = attrs.field(repr=lambda d: f"<{len(d)} bytes>")


@attrs.frozen(eq=False)
class DeviceBuffer:
    """A block of device memory: ``nbytes`` long, owned by ``device``.

    ``handle`` is the device's own reference (a numpy array for the
    interpreter, a device pointer for a GPU); only the device reads it.
    """

    device: Device
    nbytes: int
    handle: Any = attrs.field(repr=False)
    label: str = ""
    #: What keeps adopted memory alive (:meth:`Device.adopt`: a DLPack producer's
    #: tensor); None for memory the device allocated.
    owner: Any = attrs.field(default=None, repr=False)


@attrs.frozen(eq=False)
class LoadedKernel:
    """A kernel ready to launch on ``device`` (its ``handle`` is the device's own)."""

    device: Device
    name: str
    handle: Any = attrs.field(repr=False)


class Device(abc.ABC):
    """One device of one backend (see the module docstring for the protocol)."""

    #: The backend's name (``interpreter``, ``cuda``, ``rocm``).
    backend: str = ""

    @property
    @abc.abstractmethod
    def description(self) -> str:
        """A line for reports: which device this is."""

    @abc.abstractmethod
    def allocate(self, nbytes: int, label: str = "") -> DeviceBuffer:
        """``nbytes`` of device memory (contents unspecified)."""

    @abc.abstractmethod
    def copy_to_device(self, buffer: DeviceBuffer, data: np.ndarray | bytes) -> None:
        """Copy host bytes (any array: its raw bytes) into ``buffer`` from its start."""

    @abc.abstractmethod
    def copy_from_device(self, buffer: DeviceBuffer) -> np.ndarray:
        """The bytes of ``buffer`` (a ``uint8`` array), after every launch before it."""

    @abc.abstractmethod
    def load_kernel(self, image: KernelImage) -> LoadedKernel:
        """Make ``image`` launchable; raises :class:`DeviceError` for a format it cannot run."""

    @abc.abstractmethod
    def launch(
        self,
        kernel: LoadedKernel,
        grid: Sequence[int],
        block: Sequence[int],
        buffers: Sequence[DeviceBuffer],
        shared_bytes: int = 0,
    ) -> None:
        """Run ``kernel`` over ``grid`` blocks of ``block`` threads on ``buffers``."""

    def prepare_launch(
        self,
        kernel: LoadedKernel,
        grid: Sequence[int],
        block: Sequence[int],
        buffers: Sequence[DeviceBuffer],
        shared_bytes: int = 0,
    ) -> Callable[[], None]:
        """A launch checked and packed once: calling the result issues it (as :meth:`launch`
        would, recorded while recording), as often as wanted.

        The executor prepares each kernel thunk at load time and again only when its
        buffers change, so that a launch costs the host only the driver call. This
        default checks nothing ahead and calls :meth:`launch`; a GPU device packs the
        kernel's parameters once.
        """
        arguments = (kernel, tuple(grid), tuple(block), list(buffers), shared_bytes)
        return lambda: self.launch(*arguments)

    @abc.abstractmethod
    def synchronize(self) -> None:
        """Wait until every launch so far has finished (and report its errors)."""

    # -- device-side memory operations (the thunk executor's) ----------------------------

    @abc.abstractmethod
    def view(self, buffer: DeviceBuffer, offset: int, nbytes: int) -> DeviceBuffer:
        """``nbytes`` of ``buffer`` from byte ``offset``, sharing its memory (no copy).

        A GPU's view is the device pointer plus ``offset`` (``CUdeviceptr`` /
        ``hipDeviceptr_t`` arithmetic, no driver call); writes through the view
        are writes to ``buffer``. Raises :class:`DeviceError` when the range
        does not lie inside ``buffer``. A view of a view is a view of the
        first buffer.
        """

    @abc.abstractmethod
    def copy_on_device(self, source: DeviceBuffer, destination: DeviceBuffer) -> None:
        """Copy ``source`` into ``destination`` (the same size), device to device.

        Ordered after every launch before it, like a launch: ``cuMemcpyDtoDAsync``
        / ``hipMemcpyDtoDAsync`` on the device's stream. Recorded while recording.
        """

    @abc.abstractmethod
    def memset(self, buffer: DeviceBuffer, value: int, width: int = 1) -> None:
        """Fill ``buffer`` with the unsigned ``width``-byte pattern ``value`` (width 1, 2, 4).

        ``cuMemsetD8Async`` / ``cuMemsetD16Async`` / ``cuMemsetD32Async`` (and
        ``hipMemsetD8Async`` / ``D16`` / ``D32``): ``buffer.nbytes`` is a
        multiple of ``width``, the pattern little-endian. Recorded while recording.
        """

    # -- command buffers ---------------------------------------------------------------

    #: Whether ``record_while`` / ``record_conditional`` work: CUDA 12.4+ conditional
    #: graph nodes (``cudaGraphConditionalHandle``); HIP graphs have none.
    supports_conditional_nodes: bool = False

    @abc.abstractmethod
    def begin_recording(self) -> None:
        """Record ``launch``, ``copy_on_device``, ``memset`` until ``end_recording``.

        ``cuStreamBeginCapture`` (``CU_STREAM_CAPTURE_MODE_THREAD_LOCAL``) /
        ``hipStreamBeginCapture``. While recording, ``copy_to_device``,
        ``copy_from_device`` and ``synchronize`` raise :class:`DeviceError` (a
        capturing stream refuses them); recording twice at once too.
        """

    @abc.abstractmethod
    def end_recording(self) -> CommandBuffer:
        """Stop recording; the commands recorded since ``begin_recording``, ready to replay.

        ``cuStreamEndCapture`` then ``cuGraphInstantiate`` (``hipStreamEndCapture``,
        ``hipGraphInstantiate``). An empty recording is a command buffer that does
        nothing.
        """

    def record_while(  # noqa: B027 - a device without conditional nodes keeps this refusal
        self,
        condition: Callable[[], None],
        predicate: DeviceBuffer,
        body: Callable[[], None],
        trip_count: int | None = None,
    ) -> None:
        """Record a loop: ``condition()``; while the 1-byte ``predicate`` is nonzero: ``body()``,
        ``condition()``. ``trip_count``, where the compiler proved it (the condition holds
        exactly that many times and writes nothing but the predicate), lets the device
        run ``body()`` that many times without the condition (the CUDA device: a counter
        on the device, the body recorded several times in one node).

        ``condition`` and ``body`` are called once, now, to record their
        commands (launches, copies, memsets, nested loops and conditionals)
        through this device; the predicate is read on the device each time the
        loop runs at replay. CUDA 12.4+: a ``CU_GRAPH_COND_TYPE_WHILE``
        conditional node whose handle a small kernel sets from ``predicate``
        after the condition's commands (``cuGraphConditionalHandleCreate``,
        ``cudaGraphSetConditional``). Only while recording, and only where
        ``supports_conditional_nodes``; elsewhere :class:`DeviceError`.
        """
        raise DeviceError(f"{self.description}: no conditional command-buffer nodes (while)")

    def record_conditional(  # noqa: B027 - a device without conditional nodes keeps this refusal
        self,
        selector: DeviceBuffer,
        selector_type: str,
        branches: Sequence[Callable[[], None]],
    ) -> None:
        """Record a branch: at replay, run the commands of the branch ``selector`` picks.

        ``selector_type`` is a key of :data:`SELECTOR_TYPES`: ``pred`` (true is
        branch 0, false branch 1; exactly two branches) or ``s32`` (an index; out
        of range, negative too, takes the last branch, as XLA's conditional).
        Each branch is called once, now, to record its commands. CUDA 12.4+: a
        ``CU_GRAPH_COND_TYPE_SWITCH`` node (12.8+) or one ``CU_GRAPH_COND_TYPE_IF``
        node per branch, the handle set by a kernel from ``selector``. Only while
        recording, and only where ``supports_conditional_nodes``; elsewhere
        :class:`DeviceError`.
        """
        raise DeviceError(f"{self.description}: no conditional command-buffer nodes (conditional)")

    # -- library calls -----------------------------------------------------------------

    def library_for(self, call: Any) -> str | None:
        """The library that runs ``call`` (a :class:`~heron.runtime.core.gemm.GemmCall`, ...)
        on this device, by name (``"cublasLt"``, ``"hipblas"``); None where none does.

        Asked once per call when an executable is loaded; the executor runs
        heron's own kernel instead where this is None. This default offers none.
        """
        return None

    def library_refusal(self, call: Any) -> str:
        """Why no library runs ``call`` here (where :meth:`library_for` is None), for the
        executor's report of its choice."""
        return f"{self.description} offers no library calls"

    def library_algorithm(self, call: Any) -> str:
        """Which algorithm the library :meth:`library_for` names runs ``call`` with, and
        why (cuBLASLt's heuristic, or an autotuned one stored with the call, or why that
        one does not apply here), for the executor's report; "" where it says nothing."""
        return ""

    def library_call(self, call: Any, buffers: Sequence[DeviceBuffer]) -> None:
        """Run ``call`` on ``buffers`` (its contract's argument order), stream-ordered.

        Only for calls :meth:`library_for` names a library for; recorded while
        recording (the library's kernels are captured into the graph).
        """
        raise DeviceError(f"{self.description}: no library runs {call!r}")

    # -- timing ------------------------------------------------------------------------

    def timer(self) -> Timer:
        """A timer of the device's stream: ``start()``, work, ``stop()``, then ``seconds()``.

        GPUs override it with events (``cuEventRecord`` on the stream at start
        and stop, ``cuEventSynchronize`` and ``cuEventElapsedTime`` for
        seconds; ``hipEventRecord`` / ``hipEventElapsedTime``). This default,
        for synchronous devices, is the host's clock around ``synchronize``.
        """
        return HostTimer(self)

    def free(self, buffer: DeviceBuffer) -> None:  # noqa: B027 - optional for a device
        """Give ``buffer`` back (devices with garbage-collected memory need do nothing).

        An adopted buffer (:meth:`adopt`) is not the device's to free: nothing happens.
        """

    # -- memory shared with other libraries (DLPack) -------------------------------------

    @property
    def dlpack_device(self) -> tuple[int, int] | None:
        """``(DLPack device type, device id)`` of this device's memory: ``(1, 0)`` (kDLCPU)
        for memory the host addresses, ``(2, ordinal)`` a CUDA GPU's, ``(10, ordinal)`` a
        ROCm GPU's; None (this default) where buffers are not shared."""
        return None

    @property
    def dlpack_stream(self) -> int | None:
        """What ``__dlpack__(stream=...)`` is told when this device consumes an array: its
        stream's handle on a GPU (the producer orders its pending work before it), None
        on the host (the protocol's value there)."""
        return None

    def address(self, buffer: DeviceBuffer) -> int:
        """Where ``buffer``'s bytes start, as other libraries address this device's memory
        (a device pointer; a host address on the CPU)."""
        raise DeviceError(f"{self.description}: buffers have no address to share")

    def order_before(self, consumer: int | None) -> None:
        """Make another library's stream ``consumer`` (as DLPack names streams; None: its
        default) see every command issued so far before its own later work: what a
        DLPack export owes its consumer. A GPU records an event the consumer's stream
        waits for, the host not waiting; this default, for synchronous devices and those
        without events, waits for the device."""
        self.synchronize()

    def same_memory(self, first: DeviceBuffer, second: DeviceBuffer) -> bool:
        """Whether two buffers are the same bytes (the same memory adopted twice, say), so
        that commands recorded on one serve the other unchanged. This default: the same
        buffer object."""
        return first is second

    def adopt(self, address: int, nbytes: int, owner: Any, label: str = "") -> DeviceBuffer:
        """A buffer of ``nbytes`` of this device's memory at ``address`` that another
        library owns: kernels read and write it in place, :meth:`free` leaves it alone,
        and the buffer keeps ``owner`` (what keeps the memory alive) referenced."""
        raise DeviceError(f"{self.description}: cannot adopt memory it did not allocate")

    def upload(self, data: np.ndarray | bytes, label: str = "") -> DeviceBuffer:
        """A new buffer holding ``data``'s bytes."""
        if isinstance(data, np.ndarray):  # as bytes: memoryview refuses ml_dtypes' types
            data = np.ascontiguousarray(data).reshape(-1).view(np.uint8)
        buffer = self.allocate(memoryview(data).nbytes, label)
        self.copy_to_device(buffer, data)
        return buffer


class CommandBuffer(abc.ABC):
    """Commands a device recorded (``Device.begin_recording`` ... ``end_recording``).

    An executable CUDA graph (``CUgraphExec``) or HIP graph: ``replay()`` runs
    every command in the order recorded, on the buffers it was recorded with
    (:attr:`buffers`) unless ``update`` changed them. Its launches, copies and
    memsets see the memory as it is at replay time, not at recording time.
    """

    #: The device that recorded it.
    device: Device

    @property
    @abc.abstractmethod
    def buffers(self) -> tuple[DeviceBuffer, ...]:
        """Every buffer a command uses, each once, in order of first use (after updates)."""

    @abc.abstractmethod
    def replay(self) -> None:
        """Run the recorded commands (``cuGraphLaunch`` / ``hipGraphLaunch`` on the stream)."""

    @property
    def launches_last_replay(self) -> int | None:
        """Kernels the last ``replay`` ran, where the device can tell; None where it cannot.

        A GPU graph's conditional nodes decide on the device how often a loop
        body runs, which the host does not see (None, this default); the
        interpreter counts.
        """
        return None

    @abc.abstractmethod
    def update(self, mapping: Mapping[DeviceBuffer, DeviceBuffer]) -> None:
        """Point every command using a key of ``mapping`` at its value instead, in place.

        Only buffers change, never the commands, their order, kernels, grids or
        patterns (``cuGraphExecUpdate`` of a re-captured graph with the same
        topology, or ``cuGraphExecKernelNodeSetParams`` / ``cuGraphExecMemcpyNodeSetParams``
        / ``cuGraphExecMemsetNodeSetParams`` per node; ``hipGraphExecUpdate``).
        Each key must be one of :attr:`buffers`, each value a buffer of the
        same device and size; otherwise :class:`DeviceError` and nothing changes.
        Commands whose structure changes must be re-recorded instead.
        """


class Timer(abc.ABC):
    """Device time between ``start()`` and ``stop()`` (on the device's stream)."""

    @abc.abstractmethod
    def start(self) -> None:
        """Mark the start (``cuEventRecord`` / ``hipEventRecord`` of the start event)."""

    @abc.abstractmethod
    def stop(self) -> None:
        """Mark the end (``cuEventRecord`` / ``hipEventRecord`` of the stop event)."""

    @abc.abstractmethod
    def seconds(self) -> float:
        """Seconds from start to stop; waits for the stop (``cuEventSynchronize``,
        ``cuEventElapsedTime``; ``hipEventSynchronize``, ``hipEventElapsedTime``)."""


class HostTimer(Timer):
    """The host's clock (``time.perf_counter``) after ``synchronize``: for synchronous devices."""

    def __init__(self, device: Device) -> None:
        self.device = device
        self._start: float | None = None
        self._stop: float | None = None

    def start(self) -> None:
        self.device.synchronize()
        self._start = time.perf_counter()
        self._stop = None

    def stop(self) -> None:
        self.device.synchronize()
        self._stop = time.perf_counter()

    def seconds(self) -> float:
        if self._start is None or self._stop is None:
            raise DeviceError("timer: seconds() needs start() and stop() first")
        return self._stop - self._start
