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

A launch may be given a work limit, in lane-operations
(:class:`~.engine.WorkCounter`): ``work_limit``, else the environment variable
``HERON_INTERPRETER_MAX_WORK``; past it the launch stops with a
``WorkLimitError``, a refusal (exit status 2) that says so, rather than
running for hours. Unset, there is no limit.
"""

from __future__ import annotations

import os
from collections.abc import Sequence

import attrs
import numpy as np

from heron.hlo import memory_budget
from heron.runtime.core.device import (
    Device,
    DeviceBuffer,
    DeviceError,
    KernelImage,
    LoadedKernel,
    as_dim3,
)
from heron.runtime.interpreter import engine, memory
from heron.runtime.interpreter.program import FORMAT, Program

__all__ = ["AccessCounts", "InterpreterDevice", "POISON"]

POISON = 0xA5
#: Host bytes per byte of device memory: the data and its read and write counters (uint32).
BYTES_PER_BYTE = 9


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
    ) -> None:
        if warp_size not in (32, 64):
            raise DeviceError(f"warp size must be 32 or 64, not {warp_size}")
        self.warp_size = warp_size
        self.max_lanes = max_lanes
        #: Lane-operations one launch may do (None: no limit); see the module docstring.
        self.work_limit = work_limit if work_limit is not None else _work_limit_from_env()
        #: Host bytes held by live buffers (allocated and not freed).
        self.live_bytes = 0
        #: Hears every launch's memory accesses (``heron profile``); None: nothing recorded.
        self.observer = None

    @property
    def description(self) -> str:
        return f"heron interpreter (SIMT on the CPU with numpy, warps of {self.warp_size})"

    def allocate(self, nbytes: int, label: str = "") -> DeviceBuffer:
        if nbytes < 0:
            raise DeviceError(f"cannot allocate {nbytes} bytes")
        host_bytes = nbytes * BYTES_PER_BYTE
        held = f" and the {self.live_bytes} bytes of live buffers" if self.live_bytes else ""
        memory_budget.check(
            self.live_bytes + host_bytes,
            f"interpreter buffer '{label or 'buffer'}' of {nbytes} bytes (with its access"
            f" counters{held})",
        )
        data = np.full(nbytes, POISON, np.uint8)
        storage = _Storage(
            data,
            memory.Memory(label or "buffer", "global", data.reshape(1, -1), count_accesses=True),
        )
        self.live_bytes += host_bytes
        return DeviceBuffer(self, nbytes, storage, label)

    def free(self, buffer: DeviceBuffer) -> None:
        """Forget ``buffer`` in the budget's account (numpy frees it with its last reference)."""
        storage = self._storage(buffer)
        if not storage.freed:
            storage.freed = True
            self.live_bytes = max(0, self.live_bytes - buffer.nbytes * BYTES_PER_BYTE)

    def _storage(self, buffer: DeviceBuffer) -> _Storage:
        if buffer.device is not self:
            raise DeviceError(f"buffer '{buffer.label}' belongs to another device")
        return buffer.handle

    def copy_to_device(self, buffer: DeviceBuffer, data: np.ndarray | bytes) -> None:
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
        function = loaded.program.functions[loaded.name]
        types = function.argument_types
        if len(buffers) != len(types):
            raise DeviceError(
                f"kernel '{kernel.name}' takes {len(types)} buffers, given {len(buffers)}"
            )
        arguments = []
        for k, (buffer, type_text) in enumerate(zip(buffers, types, strict=True)):
            storage = self._storage(buffer)
            memref_type = memory.parse_type(type_text)
            arguments.append(memory.MemRef(storage.memory, memref_type))
            del k
        engine.run_kernel(
            loaded.program,
            loaded.name,
            as_dim3(grid, "grid"),
            as_dim3(block, "block"),
            arguments,
            globals_memory=loaded.globals_memory,
            max_lanes=self.max_lanes,
            warp_size=self.warp_size,
            work_limit=self.work_limit,
            observer=self.observer,
        )

    def synchronize(self) -> None:
        """Launches run synchronously: nothing to wait for."""

    # -- beyond the interface -------------------------------------------------------------
    def access_counts(self, buffer: DeviceBuffer) -> AccessCounts:
        reads, writes, bit_writes = self._storage(buffer).memory.counts()
        return AccessCounts(reads, writes, bit_writes)

    def reset_counts(self, buffer: DeviceBuffer) -> None:
        self._storage(buffer).memory.reset_counts()
