"""FFT library calls on CUDA through cuFFT (nvmath-python's ``nvmath.bindings.cufft``).

The contract is :mod:`heron.runtime.core.fft`: ``batch`` dense row-major
transforms over ``fft_length``, operand then out. XLA:GPU's ``FftThunk`` does
the same with cuFFT, and heron follows it:

- one plan per call shape (``cufftCreate`` then ``cufftMakePlanMany`` with
  ``rank = len(fft_length)``, ``n = fft_length``, no embedding: cuFFT's
  default dense strides are the contract's), made when the executable is loaded
  (:meth:`Cufft.offers`), never during a graph capture; cuFFT allocates its own
  work area then;
- the type by kind and precision: ``C2C`` / ``Z2Z`` (FFT forward, IFFT
  inverse), ``R2C`` / ``D2Z`` (RFFT), ``C2R`` / ``Z2D`` (IRFFT);
- each run sets the plan's stream to the device's (``cufftSetStream``) and
  executes there, so that it is captured into graphs like any command;
- cuFFT's inverse transforms are not normalised: after an IFFT or IRFFT the
  result is scaled by ``1 / prod(fft_length)`` with cuBLAS's ``?scal`` on the
  same stream (``csscal``, ``zdscal``, ``sscal``, ``dscal``), as XLA does;
- cuFFT's complex-to-real transforms overwrite their input, which is the
  program's operand buffer (others may read it later): an IRFFT copies the
  operand into a scratch buffer of its own first (a device-to-device copy on
  the stream) and transforms that.

What cuFFT does not take (a size past 32-bit counts, a plan cuFFT refuses) is
refused at load time with cuFFT's word, and the host call runs it.
:func:`plan` computes every argument of the plan from the call alone (what the
tests compare with the contract on a stand-in for the bindings).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import attrs
import numpy as np

from heron.runtime.core.device import DeviceError
from heron.runtime.core.fft import FFT, FftCall
from heron.runtime.core.gpu_device import Library

__all__ = ["CufftPlan", "Cufft", "plan"]

#: (fft_type, operand type) -> cufftType name (nvmath's ``cufft.Type``).
TYPES = {
    ("FFT", "c64"): "C2C",
    ("IFFT", "c64"): "C2C",
    ("FFT", "c128"): "Z2Z",
    ("IFFT", "c128"): "Z2Z",
    ("RFFT", "f32"): "R2C",
    ("RFFT", "f64"): "D2Z",
    ("IRFFT", "c64"): "C2R",
    ("IRFFT", "c128"): "Z2D",
}
#: cufftType name -> (the exec call, whether it takes a direction)
EXECS = {
    "C2C": ("exec_c2c", True),
    "Z2Z": ("exec_z2z", True),
    "R2C": ("exec_r2c", False),
    "D2Z": ("exec_d2z", False),
    "C2R": ("exec_c2r", False),
    "Z2D": ("exec_z2d", False),
}
#: the result type -> cuBLAS's scal by a real factor, and that factor's numpy type
SCALS = {
    "c64": ("csscal", np.float32),
    "c128": ("zdscal", np.float64),
    "f32": ("sscal", np.float32),
    "f64": ("dscal", np.float64),
}
CUFFT_FORWARD, CUFFT_INVERSE = -1, 1
_INT32 = 2**31 - 1


@attrs.frozen
class CufftPlan:
    """Every argument of one call's cuFFT plan and execution (see the module docstring)."""

    type: str  #: a cufftType name
    rank: int
    n: tuple[int, ...]
    idist: int
    odist: int
    batch: int
    exec: str
    direction: int | None  #: CUFFT_FORWARD or CUFFT_INVERSE for a C2C / Z2Z, else None
    #: 1 / prod(n) after an inverse transform (the cuBLAS scal and its element count), else None
    scale: float | None
    scale_elements: int
    scal: str | None
    #: bytes of the scratch copy of the operand an IRFFT transforms (0: none)
    scratch_bytes: int


def plan(call: FftCall) -> CufftPlan:
    """The cuFFT plan computing ``call``; DeviceError for what cuFFT cannot count."""
    if call.operation != FFT:
        raise DeviceError(f"cuFFT: no library call {call.operation!r}")
    kind = TYPES[(call.fft_type, call.operand_type)]
    idist, odist = math.prod(call.operand_dims), math.prod(call.out_dims)
    elements = call.batch * odist
    if max(call.batch * idist, elements) > _INT32:
        raise DeviceError(f"cuFFT: {call.describe()} has more than 2**31 - 1 elements")
    name, takes_direction = EXECS[kind]
    direction = (CUFFT_INVERSE if call.inverse else CUFFT_FORWARD) if takes_direction else None
    return CufftPlan(
        type=kind,
        rank=len(call.fft_length),
        n=call.fft_length,
        idist=idist,
        odist=odist,
        batch=call.batch,
        exec=name,
        direction=direction,
        scale=1.0 / math.prod(call.fft_length) if call.inverse else None,
        scale_elements=elements if call.inverse else 0,
        scal=SCALS[call.result_type][0] if call.inverse else None,
        scratch_bytes=call.byte_sizes()[0] if call.fft_type == "IRFFT" else 0,
    )


class _Prepared:
    """One call's plan handle, scratch and host scale factor (kept for the library's life)."""

    def __init__(self, chosen: CufftPlan, handle: int, scratch: int, scale: np.ndarray) -> None:
        self.plan = chosen
        self.handle = handle
        self.scratch = scratch
        self.scale = scale


class Cufft(Library):
    """cuFFT on one device: a plan per call shape, a cuBLAS handle for the inverse's scaling.

    ``bindings`` is ``nvmath.bindings.cufft``, ``blas`` ``nvmath.bindings.cublas``
    (the tests pass stand-ins); ``allocate(nbytes)`` gives a device address (an
    IRFFT's scratch), ``copy(destination, source, nbytes, stream)`` copies device
    memory on a stream.
    """

    name = "cuFFT"

    def __init__(
        self,
        allocate: Callable[[int], int],
        copy: Callable[[int, int, int, Any], None],
        *,
        bindings: Any = None,
        blas: Any = None,
    ) -> None:
        if bindings is None or blas is None:
            try:
                from nvmath.bindings import cublas, cufft
            except ImportError as exc:
                raise DeviceError(
                    f"cuFFT needs nvmath-python (a dependency of heron-runtime-cuda): {exc}"
                ) from exc
            bindings = cufft if bindings is None else bindings
            blas = cublas if blas is None else blas
        self._fft = bindings
        self._blas = blas
        self._allocate = allocate
        self._copy = copy
        self._blas_handle: int | None = None
        self._prepared: dict[FftCall, _Prepared | None] = {}
        self._refusals: dict[FftCall, str] = {}

    def _call(self, module: Any, library: str, name: str, *arguments: Any) -> Any:
        try:
            return getattr(module, name)(*arguments)
        except Exception as exc:  # nvmath raises cuFFTError / cuBLASError
            raise DeviceError(f"cuFFT: {library} {name} failed: {exc}") from exc

    def prepare(self, call: FftCall) -> _Prepared | None:
        """The plan for ``call`` (made once), or None where cuFFT refuses it (why: refusal)."""
        if call in self._prepared:
            return self._prepared[call]
        try:
            chosen = plan(call)
            handle = self._call(self._fft, "cufft", "create")
            try:
                self._call(
                    self._fft,
                    "cufft",
                    "make_plan_many",
                    handle,
                    chosen.rank,
                    list(chosen.n),
                    0,  # inembed NULL: the default dense strides
                    1,
                    chosen.idist,
                    0,
                    1,
                    chosen.odist,
                    int(getattr(self._fft.Type, chosen.type)),
                    chosen.batch,
                )
            except DeviceError:
                self._call(self._fft, "cufft", "destroy", handle)
                raise
            if chosen.scale is not None and self._blas_handle is None:
                self._blas_handle = self._call(self._blas, "cublas", "create")
        except DeviceError as error:
            self._prepared[call] = None
            self._refusals[call] = str(error)
            return None
        scratch = self._allocate(chosen.scratch_bytes) if chosen.scratch_bytes else 0
        dtype = SCALS[call.result_type][1]
        prepared = _Prepared(chosen, handle, scratch, np.array([chosen.scale or 1.0], dtype))
        self._prepared[call] = prepared
        return prepared

    def offers(self, call: Any) -> bool:
        return isinstance(call, FftCall) and self.prepare(call) is not None

    def refusal(self, call: Any) -> str:
        if not isinstance(call, FftCall):
            return f"cuFFT computes FFTs only, not {call!r}"
        self.prepare(call)
        return self._refusals.get(call, "cuFFT made no plan for it")

    def run(self, call: Any, addresses: Sequence[int], stream: Any) -> None:
        prepared = self.prepare(call)
        if prepared is None:
            raise DeviceError(f"cuFFT has no plan for {call.describe()}")
        chosen = prepared.plan
        operand, out = addresses
        stream_handle = int(stream)  # a CUstream is its handle's int
        source = operand
        if chosen.scratch_bytes:  # c2r overwrites its input: transform a copy
            self._copy(prepared.scratch, operand, chosen.scratch_bytes, stream)
            source = prepared.scratch
        self._call(self._fft, "cufft", "set_stream", prepared.handle, stream_handle)
        arguments: tuple[Any, ...] = (prepared.handle, source, out)
        if chosen.direction is not None:
            arguments += (chosen.direction,)
        self._call(self._fft, "cufft", chosen.exec, *arguments)
        if chosen.scal is not None:
            self._call(self._blas, "cublas", "set_stream", self._blas_handle, stream_handle)
            self._call(
                self._blas,
                "cublas",
                chosen.scal,
                self._blas_handle,
                chosen.scale_elements,
                prepared.scale.ctypes.data,
                out,
                1,
            )
