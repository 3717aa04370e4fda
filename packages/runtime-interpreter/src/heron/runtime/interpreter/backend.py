"""The interpreter as a ``heron.backends`` plugin (registered in this package's pyproject).

Always available, lowest priority: ``auto`` takes a GPU when there is one.
Its one stage captures a ``lower-tensors`` module into the interpreter's
program (:func:`heron.runtime.interpreter.capture.capture_stage`, imported only
to compile: it needs MLIR). The interpreter emulates the GPU of the Target the
kernels are compiled for: its device runs warps of that Target's width (32 for
a CUDA preset, 64 for a ROCm one), as the kernels' shuffles expect.
"""

from __future__ import annotations

from typing import Any

from heron.runtime.core.hookspecs import BackendSpec, Stage, hookimpl
from heron.runtime.interpreter.program import FORMAT

STAGES = (
    Stage(
        "capture",
        "heron.runtime.interpreter.capture:capture_stage",
        description="the gpu.module as the interpreter's program (plain data, JSON)",
    ),
)


def _available() -> tuple[bool, str]:
    return True, "the interpreter device (SIMT on the CPU, always available)"


def _device(target: Any = None):
    from heron.runtime.interpreter.device import InterpreterDevice

    if target is None:
        return InterpreterDevice()
    return InterpreterDevice(warp_size=target.warp_size)


@hookimpl
def heron_backend_specs() -> BackendSpec:
    return BackendSpec(
        name="interpreter",
        priority=10,
        is_available=_available,
        device_factory=_device,
        stages=STAGES,
        description="runs heron's kernels on the CPU, as a GPU would, with a sanitizer",
        image_formats=(FORMAT,),
    )
