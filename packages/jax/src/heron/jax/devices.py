"""The device heron.jax runs on, and its Target.

``auto`` takes the first available of cuda, rocm and the interpreter (the
registry's choice, as ``heron run`` and ``heron-run`` make it); the Target the
kernels are compiled for is the one given, else the device's
(``heron.compiler.device_kernels.target_for_device``: a GPU backend's default
preset, or for the interpreter the preset whose warps are as wide as the
device's).
"""

from __future__ import annotations

from typing import Any

from heron.runtime.core.artefact import Artefact
from heron.runtime.core.device import Device, DeviceError
from heron.runtime.core.executor import Executable, load_executable
from heron.runtime.core.registry import NoBackendError, default_backends

__all__ = ["HeronJaxError", "load_on_device", "open_device"]


class HeronJaxError(RuntimeError):
    """heron.jax cannot run here: no backend, or the device would not open."""


def open_device(requested: str, target: Any = None) -> tuple[str, Device, Any]:
    """``(backend, device, target)`` for the ``requested`` backend (``auto`` or a name)."""
    from heron.compiler.device_kernels import target_for_device

    registry = default_backends()
    try:
        choice = registry.choose(requested)
    except NoBackendError as error:
        raise HeronJaxError(f"heron.jax: {error}") from None
    try:
        device = registry.create_device(choice.name, target)
    except DeviceError as error:
        raise HeronJaxError(
            f"heron.jax: backend '{choice.name}': cannot open its device: {error}"
        ) from error
    return choice.name, device, target_for_device(device, choice.name, target)


def load_on_device(
    artefact: Artefact, device: Device, backend: str, *, command_buffers: bool = True
) -> Executable:
    """The artefact loaded on ``device``, with its ``backend``'s kernel images."""
    return load_executable(artefact, device, backend, command_buffers=command_buffers)
