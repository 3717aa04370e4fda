"""The interpreter as a ``heron.backends`` plugin (registered in runtime-core's pyproject).

Always available, lowest priority: ``auto`` takes a GPU when there is one.
Its compiler captures a lower-tensors module into the interpreter's program
(:func:`heron.runtime.interpreter.capture.compile_kernel_image`).
"""

from __future__ import annotations

from heron.runtime.core.hookspecs import BackendSpec, hookimpl


def _available() -> tuple[bool, str]:
    return True, "the interpreter device (SIMT on the CPU, always available)"


def _device():
    from heron.runtime.interpreter.device import InterpreterDevice

    return InterpreterDevice()


@hookimpl
def heron_backend_specs() -> BackendSpec:
    return BackendSpec(
        name="interpreter",
        priority=10,
        is_available=_available,
        device_factory=_device,
        compiler="heron.runtime.interpreter.capture:compile_kernel_image",
        description="runs heron's kernels on the CPU, as a GPU would, with a sanitizer",
    )
