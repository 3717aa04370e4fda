"""A jax function lowered for a platform, compiled by heron, run on the interpreter.

The suites of jax's library calls (linear algebra, FFT) compare heron with jax
on the CPU for functions lowered as jax lowers them for ``cpu``, ``cuda`` or
``rocm``; this is that path once.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

__all__ = ["run_on_heron"]


def run_on_heron(
    device: Any,
    platform: str,
    function: Callable[..., Any],
    *args: Any,
    expect_in_hlo: str | None = None,
) -> Any:
    """``function(*args)`` lowered by jax for ``platform``, compiled by heron for the h100
    preset's interpreter kernels and run on ``device``, in the function's own structure;
    ``expect_in_hlo``: text the lowered module must hold (the op the test is about)."""
    from heron.compiler import Target
    from heron.compiler.executable import compile_executable
    from heron.jax.devices import load_on_device
    from heron.jax.lowering import lower

    lowered = lower(function, *args, platform=platform)
    if expect_in_hlo is not None:
        assert expect_in_hlo in lowered.hlo_text, f"jax lowered no {expect_in_hlo!r}"
    artefact = compile_executable(lowered.module, Target.preset("h100"), ("interpreter",))
    executable = load_on_device(artefact, device, "interpreter")
    return lowered.unflatten_results(executable.run(lowered.flatten_arguments(args, {})))
