"""The ROCm backend as a ``heron.backends`` plugin (registered in this package's pyproject).

Its compiler (``compile_kernel_image``) turns a lower-tensors module into
an HSACO. Running kernels needs heron's ROCm device, which is not implemented yet
(the runtime issue brings it): until then the backend reports itself
unavailable, saying why, and ``auto`` falls back to the interpreter.
"""

from __future__ import annotations

from heron.runtime.core.device import DeviceError
from heron.runtime.core.hookspecs import BackendSpec, hookimpl

NOT_YET = "heron's ROCm device (kernel launches) is not implemented yet; use the interpreter"


def _available() -> tuple[bool, str]:
    from heron.runtime.rocm.driver import probe

    status = probe()
    if not status.available:
        return False, status.reason
    return False, f"{status.reason}; but {NOT_YET}"


def _device():
    raise DeviceError(NOT_YET)


@hookimpl
def heron_backend_specs() -> BackendSpec:
    return BackendSpec(
        name="rocm",
        priority=20,
        is_available=_available,
        device_factory=_device,
        compiler="heron.runtime.rocm.backend:compile_kernel_image",
        description="ROCm GPUs (an HSACO)",
    )


def compile_kernel_image(lowered, kernel_name: str, arch: str = "gfx942"):
    """A lower-tensors module -> an HSACO image of the kernel ``kernel_name``."""
    from heron.runtime.core.device import KernelImage
    from heron.runtime.rocm.compiler import compile_to_hsaco

    return KernelImage("hsaco", kernel_name, compile_to_hsaco(lowered, arch))
