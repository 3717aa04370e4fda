"""The CUDA backend as a ``heron.backends`` plugin (registered in this package's pyproject).

Its compiler (``compile_kernel_image``) turns a lower-tensors module into
PTX and cubin. Running kernels needs heron's CUDA device, which is not implemented yet
(the runtime issue brings it): until then the backend reports itself
unavailable, saying why, and ``auto`` falls back to the interpreter.
"""

from __future__ import annotations

from heron.runtime.core.gpu_backend import compile_only_backend
from heron.runtime.core.hookspecs import BackendSpec, hookimpl


def _probe():
    from heron.runtime.cuda.driver import probe

    return probe()


@hookimpl
def heron_backend_specs() -> BackendSpec:
    return compile_only_backend(
        name="cuda",
        platform="CUDA",
        priority=30,
        probe=_probe,
        compiler="heron.runtime.cuda.backend:compile_kernel_image",
        description="CUDA GPUs (PTX and cubin)",
    )


def compile_kernel_image(lowered, kernel_name: str | None = None, arch: str = "sm_90"):
    """A lower-tensors module -> a cubin image (PTX when ptxas is not installed)."""
    from heron.runtime.core.device import KernelImage
    from heron.runtime.cuda.compiler import compile_to_ptx
    from heron.runtime.cuda.compiler_tools import ToolNotFoundError, assemble_cubin, find_ptxas

    compiled = compile_to_ptx(lowered, arch)
    name = _pick(kernel_name, compiled.kernel_names)
    try:
        find_ptxas()
    except ToolNotFoundError:
        return KernelImage("ptx", name, compiled.ptx.encode())
    return KernelImage("cubin", name, assemble_cubin(compiled.ptx, arch))


def _pick(kernel_name: str | None, names) -> str:
    if kernel_name is None:
        if len(names) != 1:
            raise ValueError(f"the module has {len(names)} kernels ({list(names)}); name one")
        return names[0]
    if kernel_name not in names:
        raise ValueError(f"the module has no kernel '{kernel_name}' (it has {list(names)})")
    return kernel_name
