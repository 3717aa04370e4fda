"""The CUDA backend as a ``heron.backends`` plugin (registered in this package's pyproject).

Its stages (``heron.runtime.cuda.stages``, imported only to compile) turn a
``lower-tensors`` module into LLVM IR, PTX and, with ptxas, a cubin. Its
device (:class:`heron.runtime.cuda.device.CudaDevice`) runs them through the
CUDA driver. The backend is available where ``driver.probe`` finds a driver
and a device; elsewhere it says why, ``auto`` falls back to the interpreter,
and asking for its device raises ``DeviceError`` with that reason.
"""

from __future__ import annotations

from typing import Any

from heron.runtime.core.device import DeviceError
from heron.runtime.core.hookspecs import BackendSpec, Stage, hookimpl
from heron.runtime.cuda.driver import probe
from heron.runtime.cuda.kernel_abi import IMAGE_FORMATS

STAGES = (
    Stage(
        "llvm-ir",
        "heron.runtime.cuda.stages:to_llvm_ir",
        extension="ll",
        description="MLIR to NVVM LLVM IR (convert-gpu-to-nvvm, translation)",
    ),
    Stage(
        "ptx",
        "heron.runtime.cuda.stages:to_ptx",
        extension="ptx",
        description="llvmlite O3 (libdevice linked when used) and the NVPTX printer",
        # in LLVM with the GIL released, in a context of its own: a program's next
        # kernels are emitted meanwhile
        concurrent=True,
    ),
    Stage(
        "cubin",
        "heron.runtime.cuda.stages:to_cubin",
        extension="cubin",
        description="ptxas; skipped when ptxas is not installed (PTX is loadable too)",
        concurrent=True,  # a subprocess: a program's kernels are emitted meanwhile
        batched="heron.runtime.cuda.stages:to_cubins",  # one ptxas for several kernels
    ),
)


def available() -> tuple[bool, str]:
    status = probe()
    return status.available, status.reason


def create_device(target: Any = None, *, bindings: Any = None) -> Any:
    """The CUDA device 0, checked to run code compiled for ``target`` (None: any).

    A target of another backend, or of a newer compute capability than the
    device's (its PTX would not JIT-compile there), is a ``DeviceError``.
    """
    from heron.runtime.cuda.device import CudaDevice

    if target is not None and getattr(target, "backend", "cuda") != "cuda":
        raise DeviceError(
            f"the CUDA device cannot run kernels compiled for {target.backend} ({target.arch})"
        )
    device = CudaDevice(bindings=bindings)
    wanted = getattr(target, "compute_capability", None)
    if wanted is not None and tuple(wanted) > device.compute_capability:
        major, minor = device.compute_capability
        raise DeviceError(
            f"{device.description} cannot run kernels compiled for {target.arch}: compile for"
            f" its own arch (--arch sm_{major}{minor})"
        )
    return device


def library_always_runs(call: Any) -> bool:
    """cuBLASLt's promise (:func:`heron.runtime.cuda.cublaslt.always_runs`), imported
    when a compile asks (nvmath-python is loaded only to run a call)."""
    from heron.runtime.cuda.cublaslt import always_runs

    return always_runs(call)


@hookimpl
def heron_backend_specs() -> BackendSpec:
    return BackendSpec(
        name="cuda",
        priority=30,
        is_available=available,
        device_factory=create_device,
        stages=STAGES,
        description="CUDA GPUs (PTX and cubin), through cuda-python's driver API",
        image_formats=IMAGE_FORMATS,
        library_always_runs=library_always_runs,
    )
