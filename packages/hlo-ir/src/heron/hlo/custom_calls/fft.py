"""``__heron$fft``: HLO's ``fft``, as a host custom call (and the op's one meaning).

XLA:GPU runs an ``fft`` as a cuFFT plan (its ``FftThunk``); no heron emitter
computes one (a transform is a butterfly network over a whole axis, not an
elementwise kernel), so the compiler's ``fft-rewriter`` makes every ``fft``
this call, which a device's FFT library computes where it has one and the host
computes otherwise. jax emits the op for every ``jnp.fft`` function, on every
platform.

The call has the instruction's one operand, its result shape, and the op's
attributes as JSON in ``backend_config``: ``{"fft_type": "RFFT",
"fft_length": [6, 5]}``. :func:`transform` is the op's meaning, also what the
reference evaluator runs:

- over the operand's last ``len(fft_length)`` dimensions (1 to 3), every
  leading dimension a batch;
- ``FFT`` and ``IFFT``: complex to complex of the same type, those dimensions
  equal to ``fft_length``; ``IFFT`` is normalised by ``1 / prod(fft_length)``
  (numpy's ``ifftn``, jax's ``jnp.fft.ifft``);
- ``RFFT``: f32 (f64) to c64 (c128), the last dimension ``fft_length[-1] // 2
  + 1`` long (the non-negative frequencies);
- ``IRFFT``: c64 (c128) to f32 (f64), the operand's last dimension
  ``fft_length[-1] // 2 + 1``, the result's ``fft_length[-1]``, normalised by
  ``1 / prod(fft_length)``; the imaginary parts of the frequencies a real
  signal has only real values at (zero, and the Nyquist one of an even length)
  are ignored, as by ``c2r`` transforms everywhere.

The transform is computed in double precision (numpy's pocketfft) and rounded
once to the result's type: within an ulp or two of the exact transform, where
an f32 library transform (cuFFT, XLA:CPU's ducc) is a few ulps times
``log2 N`` off.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence

import numpy as np

from heron.hlo.custom_calls.call import CustomCall
from heron.hlo.custom_calls.hookspecs import CustomCallSpec, hookimpl

__all__ = [
    "FFT_TYPES",
    "TARGET",
    "backend_config",
    "host",
    "parse_config",
    "result_type",
    "transform",
]

TARGET = "__heron$fft"
#: HLO's fft_type values.
FFT_TYPES = ("FFT", "IFFT", "RFFT", "IRFFT")
#: The real kinds' operand (RFFT) or result (IRFFT) type -> its complex type.
_COMPLEX_OF = {
    np.dtype(np.float32): np.dtype(np.complex64),
    np.dtype(np.float64): np.dtype(np.complex128),
}
_REAL_OF = {complex_: real for real, complex_ in _COMPLEX_OF.items()}


def backend_config(fft_type: str, fft_length: Sequence[int]) -> str:
    """The call's ``backend_config``: the op's attributes, as JSON."""
    return json.dumps({"fft_length": [int(n) for n in fft_length], "fft_type": fft_type})


def parse_config(text: str) -> tuple[str, tuple[int, ...]]:
    """``(fft_type, fft_length)`` of a ``backend_config``; ValueError saying what is wrong."""
    try:
        config = json.loads(text)
    except json.JSONDecodeError as error:
        raise ValueError(f"backend_config is not JSON: {error}") from None
    kind = config.get("fft_type") if isinstance(config, dict) else None
    length = config.get("fft_length") if isinstance(config, dict) else None
    if (
        kind not in FFT_TYPES
        or not isinstance(length, list)
        or not 1 <= len(length) <= 3
        or any(not isinstance(n, int) or isinstance(n, bool) or n < 0 for n in length)
    ):
        raise ValueError(
            f"backend_config {text!r} is not {{fft_type: one of {', '.join(FFT_TYPES)},"
            " fft_length: 1 to 3 non-negative integers}"
        )
    return kind, tuple(length)


def result_type(fft_type: str, operand: np.dtype) -> np.dtype:
    """The result's element type for an ``fft_type`` of an ``operand`` type; ValueError
    for a type the op does not take."""
    operand = np.dtype(operand)
    if fft_type == "RFFT":
        if operand not in _COMPLEX_OF:
            raise ValueError(f"RFFT takes f32 or f64, not {operand}")
        return _COMPLEX_OF[operand]
    if operand not in _REAL_OF:
        raise ValueError(f"{fft_type} takes c64 or c128, not {operand}")
    return _REAL_OF[operand] if fft_type == "IRFFT" else operand


def transform(x: np.ndarray, fft_type: str, fft_length: Sequence[int]) -> np.ndarray:
    """HLO's ``fft`` of ``x`` (the module docstring); ValueError where ``x`` does not fit."""
    length = tuple(int(n) for n in fft_length)
    rank = len(length)
    if fft_type not in FFT_TYPES:
        raise ValueError(f"fft_type={fft_type} is not one of {', '.join(FFT_TYPES)}")
    out_type = result_type(fft_type, x.dtype)
    if not 1 <= rank <= 3 or x.ndim < rank:
        raise ValueError(f"fft_length={list(length)} needs 1 to 3 entries and rank >= that")
    inner = x.shape[x.ndim - rank :]
    half = length[-1] // 2 + 1 if length[-1] else 0
    expected = (*length[:-1], half) if fft_type == "IRFFT" else length
    if tuple(inner) != expected:
        raise ValueError(
            f"{fft_type} of fft_length={list(length)} takes minor dimensions {list(expected)},"
            f" not {list(inner)}"
        )
    out_last = {"RFFT": half, "IRFFT": length[-1]}.get(fft_type, length[-1])
    out_shape = (*x.shape[:-1], out_last)
    if math.prod(length) == 0 or math.prod(x.shape) == 0:
        return np.zeros(out_shape, out_type)  # nothing to transform (numpy refuses n=0)
    axes = tuple(range(x.ndim - rank, x.ndim))
    if fft_type == "FFT":
        y = np.fft.fftn(x.astype(np.complex128), axes=axes)
    elif fft_type == "IFFT":
        y = np.fft.ifftn(x.astype(np.complex128), axes=axes)
    elif fft_type == "RFFT":
        y = np.fft.rfftn(x.astype(np.float64), axes=axes)
    else:
        y = np.fft.irfftn(x.astype(np.complex128), s=length, axes=axes)
    assert y.shape == out_shape, (y.shape, out_shape)
    return y.astype(out_type)


def host(operands: tuple[np.ndarray, ...], call: CustomCall) -> np.ndarray:
    """The call's host implementation: :func:`transform` of its one operand."""
    if len(operands) != 1:
        raise call.error(f"takes one operand, given {len(operands)}")
    try:
        fft_type, fft_length = parse_config(call.backend_config)
        return transform(operands[0], fft_type, fft_length)
    except ValueError as error:
        raise call.error(str(error)) from None


@hookimpl
def heron_custom_call_specs() -> list[CustomCallSpec]:
    return [
        CustomCallSpec(
            target=TARGET,
            host=host,
            description="HLO's fft, which cuFFT computes (heron's own custom call)",
        )
    ]
