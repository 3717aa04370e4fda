"""The device heron.jax runs on, and its Target.

``auto`` takes the first available of cuda, rocm and the interpreter (the
registry's choice, as ``heron run`` and ``heron-run`` make it), opened once per
process and shared by every jitted function; the Target the
kernels are compiled for is the one given, else the device's
(``heron.compiler.device_kernels.target_for_device``: a GPU backend's default
preset, or for the interpreter the preset whose warps are as wide as the
device's).
"""

from __future__ import annotations

import threading
from typing import Any

from heron.runtime.core.artefact import Artefact
from heron.runtime.core.device import Device, DeviceError
from heron.runtime.core.executor import Executable, load_executable
from heron.runtime.core.gemm import GEMM
from heron.runtime.core.registry import NoBackendError, default_backends
from heron.runtime.core.resident import BufferPool

__all__ = ["HeronJaxError", "gemm_library", "load_on_device", "open_device", "result_pool"]


class HeronJaxError(RuntimeError):
    """heron.jax cannot run here: no backend, or the device would not open."""


#: (backend, target) -> the device opened for it, and the pool of its result buffers: one
#: device (one stream) per backend in a process, as jax has one client, so that every
#: jitted function's arrays are ordered on the same stream and pass between them in place.
_OPENED: dict[tuple[str, Any], tuple[Device, BufferPool]] = {}
_OPENING = threading.Lock()


def open_device(requested: str, target: Any = None) -> tuple[str, Device, Any]:
    """``(backend, device, target)`` for the ``requested`` backend (``auto`` or a name); the
    device is opened once per backend and Target in a process and shared."""
    from heron.compiler.device_kernels import target_for_device

    registry = default_backends()
    try:
        choice = registry.choose(requested)
    except NoBackendError as error:
        raise HeronJaxError(f"heron.jax: {error}") from None
    key = (choice.name, target)
    with _OPENING:
        if key not in _OPENED:
            try:
                device = registry.create_device(choice.name, target)
            except DeviceError as error:
                raise HeronJaxError(
                    f"heron.jax: backend '{choice.name}': cannot open its device: {error}"
                ) from error
            _OPENED[key] = (device, BufferPool(device))
        device = _OPENED[key][0]
    return choice.name, device, target_for_device(device, choice.name, target)


def result_pool(device: Device) -> BufferPool:
    """The pool of result buffers shared by every program run on ``device``."""
    with _OPENING:
        for opened, pool in _OPENED.values():
            if opened is device:
                return pool
    raise HeronJaxError(f"heron.jax: {device.description} was not opened by open_device")


def gemm_library(device: Device) -> str | None:
    """The name of the library ``device`` runs GEMM calls with (cuBLASLt), or None."""
    library = getattr(device, "library", None)
    found = library(GEMM) if callable(library) else None
    return getattr(found, "name", None)


def load_on_device(
    artefact: Artefact, device: Device, backend: str, *, command_buffers: bool = True
) -> Executable:
    """The artefact loaded on ``device``, with its ``backend``'s kernel images."""
    return load_executable(artefact, device, backend, command_buffers=command_buffers)
