"""The ROCm backend as a ``heron.backends`` plugin (registered in this package's pyproject).

Its compiler (``compile_kernel_image``) turns a lower-tensors module into
an HSACO. Running kernels needs heron's ROCm device, which is not implemented yet
(the runtime issue brings it): until then the backend reports itself
unavailable, saying why, and ``auto`` falls back to the interpreter.
"""

from __future__ import annotations

from heron.runtime.core.gpu_backend import compile_only_backend
from heron.runtime.core.hookspecs import BackendSpec, hookimpl


def _probe():
    from heron.runtime.rocm.driver import probe

    return probe()


@hookimpl
def heron_backend_specs() -> BackendSpec:
    return compile_only_backend(
        name="rocm",
        platform="ROCm",
        priority=20,
        probe=_probe,
        compiler="heron.runtime.rocm.backend:compile_kernel_image",
        description="ROCm GPUs (an HSACO)",
    )


def compile_kernel_image(lowered, kernel_name: str, arch: str = "gfx942"):
    """A lower-tensors module -> an HSACO image of the kernel ``kernel_name``."""
    from heron.runtime.core.device import KernelImage
    from heron.runtime.rocm.compiler import compile_to_hsaco

    return KernelImage("hsaco", kernel_name, compile_to_hsaco(lowered, arch))
