"""The interpreter device: heron's kernels run on the CPU as a GPU would run them.

It implements :class:`heron.runtime.core.device.Device` over numpy memory and
the SIMT engine (:mod:`~.engine`). Launches run synchronously. Beyond the
interface, it tells what a launch did to each buffer (:meth:`access_counts`):
how many times each byte (and, after packed sub-byte stores, each bit) was
read and written since the buffer was filled, which the correctness harness
uses to report elements never written and to check bijections exactly.

Fresh allocations hold a poison byte (0xA5), as uninitialised GPU memory
holds garbage. Each allocation is checked against heron's memory budget
(:mod:`heron.hlo.memory_budget`) first: the buffer's bytes and its two access
counters (:data:`BYTES_PER_BYTE` host bytes per device byte), plus what the
device's live buffers already hold; over it, ``MemoryBudgetError`` and nothing
is allocated.

Kernels over more than 2^31 elements (a GPU's large tensors, beyond what the
interpreter can run whole) can still be checked where their index arithmetic is
at its widest: built with ``sampled_blocks=K``, a launch of more than ``2K``
blocks runs only its first and last ``K`` blocks (:func:`~.engine.run_kernel`'s
``blocks``; the rest of the output keeps its poison), and with
``count_accesses=False`` buffers carry no access counters (one host byte per
device byte; :meth:`access_counts` then answers None for each count).
``tests/fuzz/large_indices.py`` uses both.

A launch may be given a work limit, in lane-operations
(:class:`~.engine.WorkCounter`): ``work_limit``, else the environment variable
``HERON_INTERPRETER_MAX_WORK``; past it the launch stops with a
``WorkLimitError``, a refusal (exit status 2) that says so, rather than
running for hours. Unset, there is no limit.

For the thunk executor it has everything a GPU device has, with the same
semantics: views (numpy views: the same bytes), device-side copies and
memsets, command buffers recorded and replayed (:mod:`~.commands`), with
conditional nodes unless built with ``conditional_nodes=False`` (to run the
split a device without them needs), and a host-clock timer. Launches,
copies and memsets run synchronously, whether immediate or replayed;
:attr:`launches` counts every kernel run. A view has access counters of its
own: its parent's counters do not see accesses made through the view.

Library calls: built with ``libraries=("gemm",)`` it offers the GEMM library
call, computed with numpy (:meth:`heron.runtime.core.gemm.GemmCall.reference`,
library name ``"numpy"``), and with ``"convolution"`` the convolution call
(:meth:`heron.runtime.core.convolution.ConvolutionCall.reference`), and with
``"attention"`` the fused attention call
(:meth:`heron.runtime.core.attention.AttentionCall.reference`), with ``"fft"``
the FFT call (:meth:`heron.runtime.core.fft.FftCall.reference`), so that the
executor's library-call path runs on a CPU. By default it offers none: the
executor then runs what an artefact carries beside each library call (heron's
GEMM kernel; a convolution's or an attention's host computation), which is
what the interpreter is for (it executes what heron emits).
"""

from __future__ import annotations

import ctypes
import functools
import os
from collections.abc import Callable, Sequence
from typing import Any

import attrs
import numpy as np

from heron.hlo import memory_budget
from heron.hlo.control_flow import branch_index
from heron.runtime.core import dlpack
from heron.runtime.core.commands import (
    LibraryCallCommand,
    check_predicate,
    check_selector,
    copy_command,
    memset_command,
    view_label,
)
from heron.runtime.core.device import (
    CommandBuffer,
    Device,
    DeviceBuffer,
    DeviceError,
    KernelImage,
    LoadedKernel,
    as_dim3,
)
from heron.runtime.interpreter import commands, engine, memory
from heron.runtime.interpreter.program import FORMAT, Program
from heron.runtime.interpreter.types import MemRefType

__all__ = ["AccessCounts", "InterpreterDevice", "POISON"]

POISON = 0xA5
#: Library operations the interpreter can offer (``libraries=``), computed with numpy.
_LIBRARY_OPERATIONS = ("gemm", "convolution", "attention", "attention_backward", "fft")
#: Host bytes per byte of device memory: the data and its read and write counters (uint32).
BYTES_PER_BYTE = 9
#: ... without access counters (``count_accesses=False``): the data alone.
BYTES_PER_BYTE_UNCOUNTED = 1


@attrs.frozen
class AccessCounts:
    """Reads and writes of each byte of a buffer; ``bit_writes`` ``(bytes, 8)`` when packed.

    The arrays are read-only snapshots (copy one to change it).
    """

    reads: np.ndarray
    writes: np.ndarray
    bit_writes: np.ndarray | None


@attrs.define
class _Storage:
    data: np.ndarray
    memory: memory.Memory
    freed: bool = False
    #: A view's storage (its data a numpy view of another buffer's): never freed itself.
    is_view: bool = False


@attrs.frozen
class _Kernel:
    program: Program
    name: str
    globals_memory: dict


def _work_limit_from_env() -> int | None:
    text = os.environ.get(engine.WORK_LIMIT_ENV, "").strip()
    if not text:
        return None
    try:
        value = int(float(text))
    except ValueError:
        value = 0
    if value <= 0:
        raise DeviceError(
            f"environment variable {engine.WORK_LIMIT_ENV}={text!r}: a work limit is a"
            " positive number of lane-operations (1e10, 20000000000)"
        )
    return value


class InterpreterDevice(Device):
    """See the module docstring. ``warp_size`` 32 (NVIDIA) or 64 (AMD wavefronts)."""

    backend = "interpreter"

    def __init__(
        self,
        warp_size: int = 32,
        max_lanes: int = engine.DEFAULT_MAX_LANES,
        work_limit: int | None = None,
        conditional_nodes: bool = True,
        libraries: Sequence[str] = (),
        sampled_blocks: int | None = None,
        count_accesses: bool = True,
    ) -> None:
        if warp_size not in (32, 64):
            raise DeviceError(f"warp size must be 32 or 64, not {warp_size}")
        if sampled_blocks is not None and sampled_blocks < 1:
            raise DeviceError(f"sampled_blocks must be at least 1, not {sampled_blocks}")
        #: Run only the first and last this many blocks of a larger launch (None: all).
        self.sampled_blocks = sampled_blocks
        #: Whether buffers count each byte's reads and writes (:meth:`access_counts`).
        self.count_accesses = count_accesses
        self._bytes_per_byte = BYTES_PER_BYTE if count_accesses else BYTES_PER_BYTE_UNCOUNTED
        self.warp_size = warp_size
        self.max_lanes = max_lanes
        #: Lane-operations one launch may do (None: no limit); see the module docstring.
        self.work_limit = work_limit if work_limit is not None else _work_limit_from_env()
        #: Host bytes held by live buffers (allocated and not freed).
        self.live_bytes = 0
        #: Hears every launch's memory accesses (``heron profile``); None: nothing recorded.
        self.observer = None
        #: ``progress(kernel_name, blocks_done, blocks_total)`` after each batch of blocks
        #: of every launch (a progress bar); None: nothing is called.
        self.progress: Callable[[str, int, int], None] | None = None
        #: Whether while loops and conditionals can be recorded (CUDA 12.4+ conditional nodes).
        self.supports_conditional_nodes = conditional_nodes
        unknown = sorted(set(libraries) - set(_LIBRARY_OPERATIONS))
        if unknown:
            raise DeviceError(
                f"the interpreter has no library for {', '.join(unknown)}"
                f" (it has {', '.join(_LIBRARY_OPERATIONS)})"
            )
        #: The library operations offered (numpy), see the module docstring.
        self.libraries = frozenset(libraries)
        #: Library calls run so far, immediately or replayed.
        self.library_calls = 0
        #: Kernels run so far, immediately or replayed from a command buffer.
        self.launches = 0
        # Commands being recorded: one list per level (a loop's or a branch's inside).
        self._recording: list[list[commands.Command]] = []

    @property
    def description(self) -> str:
        return f"heron interpreter (SIMT on the CPU with numpy, warps of {self.warp_size})"

    def allocate(self, nbytes: int, label: str = "") -> DeviceBuffer:
        if nbytes < 0:
            raise DeviceError(f"cannot allocate {nbytes} bytes")
        host_bytes = nbytes * self._bytes_per_byte
        memory_budget.check(
            self.live_bytes + host_bytes,
            f"interpreter buffer '{label or 'buffer'}' of {nbytes} bytes{self._held()}",
        )
        data = np.full(nbytes, POISON, np.uint8)
        storage = _Storage(
            data,
            memory.Memory(
                label or "buffer", "global", data.reshape(1, -1), count_accesses=self.count_accesses
            ),
        )
        self.live_bytes += host_bytes
        return DeviceBuffer(self, nbytes, storage, label)

    def _held(self) -> str:
        """What an allocation's budget check counts besides its bytes, in words."""
        live = f"the {self.live_bytes} bytes of live buffers" if self.live_bytes else ""
        if self.count_accesses:
            return f" (with its access counters{' and ' + live if live else ''})"
        return f" (besides {live})" if live else ""

    def free(self, buffer: DeviceBuffer) -> None:
        """Forget ``buffer`` in the budget's account (numpy frees it with its last reference)."""
        storage = self._storage(buffer)
        if not storage.freed and not storage.is_view:
            storage.freed = True
            self.live_bytes = max(0, self.live_bytes - buffer.nbytes * self._bytes_per_byte)

    # -- memory shared with other libraries (DLPack) -------------------------------------
    @property
    def dlpack_device(self) -> tuple[int, int]:
        """The interpreter's memory is host memory (numpy arrays): kDLCPU."""
        return (dlpack.CPU, 0)

    def address(self, buffer: DeviceBuffer) -> int:
        return int(self._storage(buffer).data.ctypes.data)

    def same_memory(self, first: DeviceBuffer, second: DeviceBuffer) -> bool:
        return first.nbytes == second.nbytes and self.address(first) == self.address(second)

    def adopt(self, address: int, nbytes: int, owner: Any, label: str = "") -> DeviceBuffer:
        """Host memory another library owns (a numpy or jax CPU array's bytes), read and
        written in place by the kernels; its access counters are the interpreter's own."""
        if nbytes < 0 or (nbytes and not address):
            raise DeviceError(f"cannot adopt {nbytes} bytes at address {address:#x}")
        label = label or "adopted"
        data = (
            np.ctypeslib.as_array((ctypes.c_uint8 * nbytes).from_address(address))
            if nbytes
            else np.zeros(0, np.uint8)
        )
        storage = _Storage(
            data,
            memory.Memory(label, "global", data.reshape(1, -1), count_accesses=self.count_accesses),
            is_view=True,  # not the interpreter's: never counted in its budget nor freed
        )
        return DeviceBuffer(self, nbytes, storage, label, owner)

    def _storage(self, buffer: DeviceBuffer) -> _Storage:
        if buffer.device is not self:
            raise DeviceError(f"buffer '{buffer.label}' belongs to another device")
        return buffer.handle

    def copy_to_device(self, buffer: DeviceBuffer, data: np.ndarray | bytes) -> None:
        self._refuse_while_recording("copy_to_device")
        if isinstance(data, np.ndarray):  # its bytes, without a copy
            raw = np.ascontiguousarray(data).reshape(-1).view(np.uint8)
        else:
            raw = np.frombuffer(data, np.uint8)
        if raw.size > buffer.nbytes:
            raise DeviceError(
                f"copying {raw.size} bytes into buffer '{buffer.label}' of {buffer.nbytes}"
            )
        storage = self._storage(buffer)
        storage.data[: raw.size] = raw
        self.reset_counts(buffer)

    def copy_from_device(self, buffer: DeviceBuffer) -> np.ndarray:
        self._refuse_while_recording("copy_from_device")
        return self._storage(buffer).data.copy()

    def load_kernel(self, image: KernelImage) -> LoadedKernel:
        if image.format != FORMAT:
            raise DeviceError(
                f"the interpreter runs '{FORMAT}' images, not '{image.format}'"
                " (compile with --backend interpreter)"
            )
        program = Program.from_json(image.data)
        engine.check_supported(program)
        if image.kernel_name not in program.kernels:
            raise DeviceError(f"the image has no kernel '{image.kernel_name}'")
        kernel = _Kernel(program, image.kernel_name, memory.globals_of(program))
        return LoadedKernel(self, image.kernel_name, kernel)

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
        loaded: _Kernel = kernel.handle
        types = loaded.program.functions[loaded.name].argument_types
        if len(buffers) != len(types):
            raise DeviceError(
                f"kernel '{kernel.name}' takes {len(types)} buffers, given {len(buffers)}"
            )
        for buffer in buffers:
            self._storage(buffer)
        command = commands.LaunchCommand(
            kernel, as_dim3(grid, "grid"), as_dim3(block, "block"), list(buffers), shared_bytes
        )
        if self._recording:
            self._recording[-1].append(command)
        else:
            self._launch_now(command)

    def _launch_now(self, command: commands.LaunchCommand) -> None:
        kernel, buffers = command.kernel, command.buffers
        loaded: _Kernel = kernel.handle
        function = loaded.program.functions[loaded.name]
        arguments = []
        for buffer, type_text in zip(buffers, function.argument_types, strict=True):
            storage = self._storage(buffer)
            memref_type = memory.parse_type(type_text)
            if function.shape_generic:
                memref_type = _bound_by_buffer(memref_type, buffer, kernel.name)
            arguments.append(memory.MemRef(storage.memory, memref_type))
        engine.run_kernel(
            loaded.program,
            loaded.name,
            command.grid,
            command.block,
            arguments,
            blocks=engine.sampled_blocks(command.grid, self.sampled_blocks),
            globals_memory=loaded.globals_memory,
            max_lanes=self.max_lanes,
            warp_size=self.warp_size,
            work_limit=self.work_limit,
            observer=self.observer,
            progress=None
            if self.progress is None
            else functools.partial(self.progress, kernel.name),
        )
        self.launches += 1

    def synchronize(self) -> None:
        """Launches run synchronously: nothing to wait for (refused while recording)."""
        self._refuse_while_recording("synchronize")

    # -- device-side memory operations ---------------------------------------------------
    def view(self, buffer: DeviceBuffer, offset: int, nbytes: int) -> DeviceBuffer:
        storage = self._storage(buffer)
        data = storage.data[offset : offset + nbytes]  # a numpy view: the same bytes
        label = view_label(buffer, offset, nbytes)
        view = _Storage(
            data,
            memory.Memory(label, "global", data.reshape(1, -1), count_accesses=self.count_accesses),
            is_view=True,
        )
        return DeviceBuffer(self, nbytes, view, label)

    def copy_on_device(self, source: DeviceBuffer, destination: DeviceBuffer) -> None:
        command = copy_command(source, destination)
        self._storage(source), self._storage(destination)
        self._issue(command)

    def memset(self, buffer: DeviceBuffer, value: int, width: int = 1) -> None:
        command = memset_command(buffer, value, width)
        self._storage(buffer)
        self._issue(command)

    def _issue(self, command: commands.Command) -> None:
        if self._recording:
            self._recording[-1].append(command)
        else:
            self.run_commands([command])

    # -- command buffers -----------------------------------------------------------------
    @property
    def recording(self) -> bool:
        return bool(self._recording)

    def _refuse_while_recording(self, what: str) -> None:
        if self._recording:
            raise DeviceError(f"{what} while recording a command buffer (a capturing stream)")

    def begin_recording(self) -> None:
        if self._recording:
            raise DeviceError("begin_recording: already recording a command buffer")
        self._recording.append([])

    def end_recording(self) -> CommandBuffer:
        if len(self._recording) != 1:
            raise DeviceError("end_recording: not recording (or inside a loop or branch)")
        return commands.RecordedCommands(self, self._recording.pop())

    def push_recording(self) -> None:
        """Start a nested list of commands (a loop's or branch's, see :mod:`~.commands`)."""
        self._recording.append([])

    def pop_recording(self) -> list[commands.Command]:
        return self._recording.pop()

    def _check_conditional_nodes(self, what: str) -> None:
        if not self.supports_conditional_nodes:
            raise DeviceError(
                f"{what}: this interpreter device was made without conditional nodes"
                " (conditional_nodes=False)"
            )
        if not self._recording:
            raise DeviceError(f"{what}: only while recording a command buffer")

    def record_while(
        self,
        condition: Callable[[], None],
        predicate: DeviceBuffer,
        body: Callable[[], None],
        trip_count: int | None = None,
    ) -> None:
        self._check_conditional_nodes("record_while")
        check_predicate(predicate, trip_count)
        self._storage(predicate)
        condition_commands = commands.record_nested(self, condition)
        body_commands = commands.record_nested(self, body)
        self._recording[-1].append(
            commands.WhileCommand(condition_commands, [predicate], body_commands, trip_count)
        )

    def record_conditional(
        self,
        selector: DeviceBuffer,
        selector_type: str,
        branches: Sequence[Callable[[], None]],
    ) -> None:
        self._check_conditional_nodes("record_conditional")
        check_selector(selector, selector_type, len(branches))
        self._storage(selector)
        recorded = [commands.record_nested(self, branch) for branch in branches]
        self._recording[-1].append(commands.ConditionalCommand([selector], selector_type, recorded))

    # -- library calls -----------------------------------------------------------------
    def library_for(self, call: object) -> str | None:
        operation = getattr(call, "operation", None)
        return "numpy" if operation in self.libraries else None

    def library_refusal(self, call: object) -> str:
        operation = getattr(call, "operation", None)
        return (
            f"the interpreter runs heron's kernels; built with libraries=({operation!r},) it"
            " would compute the call with numpy"
        )

    def library_call(self, call: object, buffers: Sequence[DeviceBuffer]) -> None:
        if self.library_for(call) is None:
            raise DeviceError(f"{self.description}: no library runs {call!r}")
        for buffer in buffers:
            self._storage(buffer)
        self._issue(LibraryCallCommand(call, list(buffers)))

    def _library_call_now(self, command: LibraryCallCommand) -> None:
        data = [self._storage(b).data for b in command.buffers]
        computed = getattr(command.call, "outputs", 1)
        results = command.call.reference(data)
        if computed == 1:
            results = (results,)
        for buffer, result in zip(data[len(data) - computed :], results, strict=True):
            buffer[...] = result
        self.library_calls += 1

    def run_commands(self, recorded: Sequence[commands.Command]) -> None:
        """Run commands now (a replay, or an immediate copy or memset)."""
        for command in recorded:
            if isinstance(command, commands.LaunchCommand):
                self._launch_now(command)
            elif isinstance(command, commands.CopyCommand):
                source, destination = command.buffers
                self._storage(destination).data[...] = self._storage(source).data
            elif isinstance(command, commands.MemsetCommand):
                (destination,) = command.buffers
                word = np.frombuffer(command.value.to_bytes(command.width, "little"), np.uint8)
                self._storage(destination).data.reshape(-1, command.width)[...] = word
            elif isinstance(command, LibraryCallCommand):
                self._library_call_now(command)
            elif isinstance(command, commands.WhileCommand):
                if command.trip_count is not None:  # proved: no condition, as on CUDA
                    for _ in range(command.trip_count):
                        self.run_commands(command.body)
                    continue
                predicate = self._storage(command.buffers[0]).data
                self.run_commands(command.condition)
                while predicate[0]:
                    self.run_commands(command.body)
                    self.run_commands(command.condition)
            elif isinstance(command, commands.ConditionalCommand):
                raw = self._storage(command.buffers[0]).data
                value = raw[0] != 0 if command.selector_type == "pred" else raw.view("<i4")[0]
                self.run_commands(command.branches[branch_index(value, len(command.branches))])
            else:  # pragma: no cover - the union above is closed
                raise DeviceError(f"unknown command {command!r}")

    # -- beyond the interface -------------------------------------------------------------
    def access_counts(self, buffer: DeviceBuffer) -> AccessCounts:
        reads, writes, bit_writes = self._storage(buffer).memory.counts()
        return AccessCounts(reads, writes, bit_writes)

    def reset_counts(self, buffer: DeviceBuffer) -> None:
        self._storage(buffer).memory.reset_counts()


def _bound_by_buffer(declared: object, buffer: DeviceBuffer, kernel_name: str) -> MemRefType:
    """A shape-generic kernel's argument type at its buffer's size: the declared 1-D size
    is an upper bound (``Function.shape_generic``), the buffer the elements there are."""
    if not isinstance(declared, MemRefType) or len(declared.shape) != 1:
        raise DeviceError(
            f"kernel '{kernel_name}' is shape-generic, but its argument {declared} is not a"
            " 1-D memref"
        )
    elements = buffer.nbytes // declared.dtype.itemsize
    if elements > declared.size:
        raise DeviceError(
            f"kernel '{kernel_name}': a buffer of {buffer.nbytes} bytes exceeds its"
            f" argument's bound {declared}"
        )
    return attrs.evolve(declared, shape=(elements,))
