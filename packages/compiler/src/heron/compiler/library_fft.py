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

import math
from collections.abc import Sequence

from heron.compiler.library_thunks import described_or_refused, host_backed_call
from heron.hlo.attributes import QuotedString
from heron.hlo.custom_calls.call import custom_call_of
from heron.hlo.custom_calls.fft import FFT_TYPES, TARGET, backend_config, parse_config
from heron.hlo.custom_calls.library import library_call_target
from heron.hlo.errors import UnsupportedError
from heron.hlo.ir import Instruction, Module
from heron.hlo.passes.manager import HloPass
from heron.hlo.passes.rewrite import Inserter, rewrite_each
from heron.runtime.core.fft import FftCall
from heron.runtime.core.thunks import BufferSlice, CustomCallThunk, LibraryCallThunk
from heron.target import Target

__all__ = [
    "LIBRARY",
    "fft_call",
    "fft_rewriter",
    "is_library_fft",
    "library_fft_thunk",
    "rewrite_ffts",
]

#: The library a LibraryCallThunk of an FFT names (cuFFT on CUDA).
LIBRARY = "fft"


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


def fft_call(inst: Instruction) -> FftCall | None:
    """The library call of an ``__heron$fft`` call; None where no library can take it: an
    operand or result not row-major (the contract's transforms are dense and minor), or an
    empty transform (the host gives its zeros)."""
    call = custom_call_of(inst)
    (operand,) = call.operand_shapes
    (result,) = call.result_shapes
    fft_type, fft_length = parse_config(call.backend_config)
    rank = len(fft_length)
    if not (operand.is_row_major and result.is_row_major) or operand.rank < rank:
        return None
    batch = math.prod(operand.dims[: operand.rank - rank])
    if batch == 0 or math.prod(fft_length) == 0:
        return None
    return FftCall(fft_type, fft_length, batch, str(operand.element_type))


def library_fft_thunk(
    inst: Instruction,
    operands: Sequence[BufferSlice],
    results: Sequence[BufferSlice],
    host: CustomCallThunk,
    target: Target,
) -> LibraryCallThunk | CustomCallThunk:
    """The library call of an ``__heron$fft`` call, ``host`` beside it (the host call
    alone where :func:`fft_call` finds no library call)."""
    del target  # every target's FFT library takes the same call
    call = described_or_refused(inst, TARGET, fft_call)
    if call is None:
        return host
    (result,) = results
    return host_backed_call(LIBRARY, call, (*operands, result), host)
