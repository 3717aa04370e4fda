"""The ROCm backend as a ``heron.backends`` plugin (registered in this package's pyproject).

Its stages (``heron.runtime.rocm.stages``, imported only to compile) turn a
``lower-tensors`` module into LLVM IR, an AMDGPU object and a linked HSACO.
Its device (:class:`heron.runtime.rocm.device.HipDevice`) runs them through
the HIP runtime. The backend is available where ``driver.probe`` finds a HIP
runtime and a device; elsewhere it says why, ``auto`` falls back to the
interpreter, and asking for its device raises ``DeviceError`` with that reason.
"""

from __future__ import annotations

from typing import Any

from heron.runtime.core.device import DeviceError
from heron.runtime.core.hookspecs import BackendSpec, Stage, hookimpl
from heron.runtime.rocm.code_object import IMAGE_FORMATS
from heron.runtime.rocm.driver import probe

STAGES = (
    Stage(
        "llvm-ir",
        "heron.runtime.rocm.stages:to_llvm_ir",
        extension="ll",
        description="MLIR to ROCDL LLVM IR (math expanded, convert-gpu-to-rocdl, translation)",
    ),
    Stage(
        "object",
        "heron.runtime.rocm.stages:to_object",
        extension="o",
        description="llvmlite O3 and the AMDGPU code generator: a relocatable object",
    ),
    Stage(
        "hsaco",
        "heron.runtime.rocm.stages:to_hsaco",
        extension="hsaco",
        description="ld.lld (ziglang): the loadable code object, checked to be AMDGPU ELF",
    ),
)


def available() -> tuple[bool, str]:
    status = probe()
    return status.available, status.reason


def create_device(target: Any = None, *, bindings: Any = None) -> Any:
    """The HIP device 0, checked to run code compiled for ``target`` (None: any).

    A target of another backend, or of another arch than the device's (a code
    object runs only on its own gfx arch), is a ``DeviceError``.
    """
    from heron.runtime.rocm.device import HipDevice

    if target is not None and getattr(target, "backend", "rocm") != "rocm":
        raise DeviceError(
            f"the HIP device cannot run kernels compiled for {target.backend} ({target.arch})"
        )
    device = HipDevice(bindings=bindings)
    arch = device.info.architecture.split(":", 1)[0]
    if target is not None and arch and target.arch != arch:
        raise DeviceError(
            f"{device.description} cannot run kernels compiled for {target.arch}: compile for"
            f" its own arch (--arch {arch})"
        )
    return device


@hookimpl
def heron_backend_specs() -> BackendSpec:
    return BackendSpec(
        name="rocm",
        priority=20,
        is_available=available,
        device_factory=create_device,
        stages=STAGES,
        description="ROCm GPUs (an HSACO), through hip-python",
        image_formats=IMAGE_FORMATS,
    )
