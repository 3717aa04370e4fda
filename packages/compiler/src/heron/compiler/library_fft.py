"""The ``fft-rewriter`` pass: HLO's ``fft`` becomes a library call.

No heron emitter computes an FFT (a butterfly network over whole axes, not an
elementwise kernel). XLA:GPU runs each as a cuFFT plan (its ``FftThunk``);
heron makes it its own custom call ``__heron$fft``
(:mod:`heron.hlo.custom_calls.fft`), carrying ``fft_type`` and ``fft_length``,
which thunk emission makes a library call (``operation "fft"``,
:mod:`heron.runtime.core.fft`) with the host call beside it: cuFFT computes it
on a CUDA device that has it, the host everywhere else. jax emits the op for
every ``jnp.fft`` function, on every platform.
"""

from __future__ import annotations

from collections.abc import Sequence

from heron.hlo.attributes import QuotedString
from heron.hlo.custom_calls.fft import FFT_TYPES, TARGET, backend_config
from heron.hlo.custom_calls.library import library_call_target
from heron.hlo.errors import UnsupportedError
from heron.hlo.ir import Instruction, Module
from heron.hlo.passes.manager import HloPass
from heron.hlo.passes.rewrite import Inserter, rewrite_each
from heron.target import Target

__all__ = ["fft_rewriter", "is_library_fft", "rewrite_ffts"]


def _call(inserter: Inserter, fft: Instruction) -> Instruction:
    kind = fft.attributes.get("fft_type")
    length = fft.attributes.get("fft_length")
    if kind not in FFT_TYPES:
        raise UnsupportedError(
            f"fft '{fft.name}': fft_type={kind} is none of {', '.join(FFT_TYPES)}", fft.location
        )
    if not isinstance(length, Sequence) or not 1 <= len(length) <= 3:
        raise UnsupportedError(
            f"fft '{fft.name}': fft_length={length} is not 1 to 3 lengths", fft.location
        )
    return inserter.add(
        "custom-call",
        fft.shape,
        fft.operands,
        {
            "custom_call_target": QuotedString(TARGET),
            "backend_config": QuotedString(backend_config(str(kind), length)),
        },
        like=fft,
    )


def rewrite_ffts(module: Module) -> bool:
    """Every ``fft`` of ``module`` becomes ``__heron$fft``."""
    return rewrite_each(module, "fft", _call)


def fft_rewriter(target: Target) -> HloPass:
    """The ``fft-rewriter`` pass (the same for every target: the load-time choice between
    cuFFT and the host is the device's)."""
    del target
    return HloPass(
        "fft-rewriter",
        rewrite_ffts,
        "an fft becomes heron's library call __heron$fft (XLA:GPU's FftThunk runs cuFFT)",
    )


def is_library_fft(inst: Instruction) -> bool:
    """Whether ``inst`` is an ``__heron$fft`` call (one of heron's library calls)."""
    return library_call_target(inst) == TARGET
