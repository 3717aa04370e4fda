"""The backend spec shared by the GPU backends (CUDA, ROCm) until their devices exist.

Each GPU backend compiles today (its stages make a KernelImage) but cannot
launch yet: its device comes with the runtime issue. So it reports itself
unavailable, with the driver probe's reason when there is no driver and with
"not implemented yet" when there is one, and ``auto`` falls back to the
interpreter. One function builds that spec, so that a GPU backend's own module
says only what differs (its name, priority, probe and stages) and the two
cannot drift apart.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from heron.runtime.core.device import DeviceError
from heron.runtime.core.driver_probe import DriverStatus
from heron.runtime.core.hookspecs import BackendSpec, Dump, Stage, StageContext

__all__ = ["compile_only_backend", "lowering_dump", "not_launchable_yet"]


def not_launchable_yet(platform: str) -> str:
    return (
        f"heron's {platform} device (kernel launches) is not implemented yet; use the interpreter"
    )


def compile_only_backend(
    name: str,
    platform: str,
    priority: int,
    probe: Callable[[], DriverStatus],
    stages: Sequence[Stage],
    description: str,
) -> BackendSpec:
    """A backend that compiles but whose device is not implemented yet (see the docstring).

    ``probe()`` asks the driver (it must not raise when there is none: see
    ``heron.runtime.core.driver_probe``).
    """
    reason = not_launchable_yet(platform)

    def available() -> tuple[bool, str]:
        status = probe()
        if not status.available:
            return False, status.reason
        return False, f"{status.reason}; but {reason}"

    def device(target: Any = None):
        raise DeviceError(reason)

    return BackendSpec(
        name=name,
        priority=priority,
        is_available=available,
        device_factory=device,
        stages=tuple(stages),
        description=description,
    )


def lowering_dump(context: StageContext) -> Dump | None:
    """The stage's dump for the shared ``gpu.module`` lowering, minus its ``input`` step.

    The lowering (``heron.emitters.pipeline.gpu_lowering``) first dumps the
    module it was given, which the driver has just dumped as ``lower-tensors``.
    """
    dump = context.dump
    if dump is None:
        return None

    def forward(name: str, text: str) -> None:
        if name != "input":
            dump(name, text)

    return forward
