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
"""

from __future__ import annotations

import abc
from collections.abc import Sequence
from typing import Any

import attrs
import numpy as np

__all__ = [
    "Device",
    "DeviceBuffer",
    "DeviceError",
    "DeviceLimitError",
    "Dim3",
    "KernelImage",
    "LoadedKernel",
    "as_dim3",
]

Dim3 = tuple[int, int, int]


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

    @abc.abstractmethod
    def synchronize(self) -> None:
        """Wait until every launch so far has finished (and report its errors)."""

    def free(self, buffer: DeviceBuffer) -> None:  # noqa: B027 - optional for a device
        """Give ``buffer`` back (devices with garbage-collected memory need do nothing)."""

    def upload(self, data: np.ndarray | bytes, label: str = "") -> DeviceBuffer:
        """A new buffer holding ``data``'s bytes."""
        if isinstance(data, np.ndarray):  # as bytes: memoryview refuses ml_dtypes' types
            data = np.ascontiguousarray(data).reshape(-1).view(np.uint8)
        buffer = self.allocate(memoryview(data).nbytes, label)
        self.copy_to_device(buffer, data)
        return buffer
