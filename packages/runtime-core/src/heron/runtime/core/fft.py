"""The FFT library call's contract: what an ``fft`` call computes, on which bytes.

HLO's ``fft`` becomes heron's ``__heron$fft`` custom call
(:mod:`heron.compiler.library_fft`), which thunk emission makes a library call
(``operation "fft"``) with the host call beside it: cuFFT computes it on a CUDA
device (:mod:`heron.runtime.cuda.cufft`), as XLA:GPU's ``FftThunk`` does; the
host call runs it everywhere else. The contract:

- two arguments, ``operand`` then ``out``, each dense and row-major (the
  transformed dimensions are the minor ones): ``batch`` transforms one after
  another, ``prod(operand dims)`` (``prod(out dims)``) elements apart, where the
  dims are ``fft_length`` but for the last one of an IRFFT operand or an RFFT
  result, ``fft_length[-1] // 2 + 1``;
- ``fft_type`` ``FFT`` / ``IFFT`` (c64 or c128 to the same), ``RFFT`` (f32 to
  c64, f64 to c128), ``IRFFT`` (back); the inverse kinds normalised by
  ``1 / prod(fft_length)`` (cuFFT's are not: the library scales), and ``out``
  never overlaps ``operand`` (cuFFT's c2r may overwrite its input: the library
  transforms a copy);
- its meaning is :func:`heron.hlo.custom_calls.fft.transform`, which
  :meth:`FftCall.reference` computes on the raw bytes (the interpreter's numpy
  library); a library sums in its own order, within a few ulps times
  ``log2 N`` of it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import ClassVar

import attrs
import numpy as np

from heron.hlo.custom_calls.fft import FFT_TYPES, transform
from heron.hlo.element_types import ElementType
from heron.runtime.core.library_contract import LibraryContract
from heron.runtime.core.thunks import ThunkError

__all__ = ["FFT", "FftCall"]

FFT = "fft"
#: fft_type -> (operand types, the result type of each)
_TYPES = {
    "FFT": {"c64": "c64", "c128": "c128"},
    "IFFT": {"c64": "c64", "c128": "c128"},
    "RFFT": {"f32": "c64", "f64": "c128"},
    "IRFFT": {"c64": "f32", "c128": "f64"},
}


def _lengths(value: Sequence[int]) -> tuple[int, ...]:
    return tuple(int(n) for n in value)


@attrs.frozen
class FftCall(LibraryContract):
    """One batched FFT (see the module docstring); every field a thunk attribute."""

    operation: ClassVar[str] = FFT

    fft_type: str = attrs.field(validator=attrs.validators.in_(FFT_TYPES))
    fft_length: tuple[int, ...] = attrs.field(converter=_lengths)
    batch: int
    operand_type: str

    def __attrs_post_init__(self) -> None:
        if not 1 <= len(self.fft_length) <= 3 or any(n < 1 for n in self.fft_length):
            raise ThunkError(f"fft: fft_length={list(self.fft_length)} is not 1 to 3 lengths >= 1")
        if self.operand_type not in _TYPES[self.fft_type]:
            raise ThunkError(
                f"fft: {self.fft_type} takes {' or '.join(_TYPES[self.fft_type])},"
                f" not {self.operand_type}"
            )
        if self.batch < 1:
            raise ThunkError(f"fft: a batch of {self.batch} transforms")

    @property
    def result_type(self) -> str:
        return _TYPES[self.fft_type][self.operand_type]

    @property
    def half(self) -> int:
        """The last dimension of the complex side of a real transform."""
        return self.fft_length[-1] // 2 + 1

    @property
    def operand_dims(self) -> tuple[int, ...]:
        """One transform's operand dimensions."""
        if self.fft_type == "IRFFT":
            return (*self.fft_length[:-1], self.half)
        return self.fft_length

    @property
    def out_dims(self) -> tuple[int, ...]:
        """One transform's result dimensions."""
        if self.fft_type == "RFFT":
            return (*self.fft_length[:-1], self.half)
        return self.fft_length

    @property
    def inverse(self) -> bool:
        return self.fft_type in ("IFFT", "IRFFT")

    @property
    def operand_names(self) -> tuple[str, ...]:
        return ("operand", "out")

    def byte_sizes(self) -> tuple[int, ...]:
        def size(dims: tuple[int, ...], kind: str) -> int:
            return self.batch * math.prod(dims) * ElementType(kind).byte_width

        return (size(self.operand_dims, self.operand_type), size(self.out_dims, self.result_type))

    def describe(self) -> str:
        lengths = "x".join(map(str, self.fft_length))
        return (
            f"fft {self.fft_type} [{lengths}] x {self.batch} {self.operand_type} ->"
            f" {self.result_type}"
        )

    def reference(self, arguments: Sequence[np.ndarray]) -> np.ndarray:
        """The contract computed with numpy from the arguments' raw bytes (uint8 arrays,
        operand then out); returns out's bytes."""
        if len(arguments) != 2:
            raise ThunkError(f"{self.describe()}: takes 2 arguments, given {len(arguments)}")
        dtype = ElementType(self.operand_type).numpy_dtype
        operand = np.ascontiguousarray(arguments[0]).view(dtype)
        x = operand.reshape((self.batch, *self.operand_dims))
        y = transform(x, self.fft_type, self.fft_length)
        return np.ascontiguousarray(y).reshape(-1).view(np.uint8)
