"""The backend spec shared by the GPU backends (CUDA, ROCm) until their devices exist.

Each GPU backend compiles today (its compiler makes a KernelImage) but
cannot launch yet: its device comes with the runtime issue. So it reports
itself unavailable, with the driver probe's reason when there is no driver
and with "not implemented yet" when there is one, and ``auto`` falls back to
the interpreter. One function builds that spec so the two backends cannot
drift apart.
"""

from __future__ import annotations

from collections.abc import Callable

from heron.runtime.core.device import DeviceError
from heron.runtime.core.driver_probe import DriverStatus
from heron.runtime.core.hookspecs import BackendSpec


def not_launchable_yet(platform: str) -> str:
    return (
        f"heron's {platform} device (kernel launches) is not implemented yet; use the interpreter"
    )


def compile_only_backend(
    name: str,
    platform: str,
    priority: int,
    probe: Callable[[], DriverStatus],
    compiler: str,
    description: str,
) -> BackendSpec:
    """A backend that compiles but whose device is not implemented yet (see the docstring)."""
    reason = not_launchable_yet(platform)

    def available() -> tuple[bool, str]:
        status = probe()
        if not status.available:
            return False, status.reason
        return False, f"{status.reason}; but {reason}"

    def device():
        raise DeviceError(reason)

    return BackendSpec(
        name=name,
        priority=priority,
        is_available=available,
        device_factory=device,
        compiler=compiler,
        description=description,
    )
