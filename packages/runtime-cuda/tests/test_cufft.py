"""cuFFT through nvmath's bindings, checked on a recording stand-in (no GPU needed).

The stand-in records every cuFFT and cuBLAS call (plans, streams, executions,
scal) and computes what cuFFT would on host memory: the unnormalised transform
of exactly the arguments it was given (C2R also scribbling over its input, as
cuFFT may). The library must then equal the contract's meaning
(:func:`heron.hlo.custom_calls.fft.transform`) and leave the operand as it was.
"""

from __future__ import annotations

import ctypes
import math

import numpy as np
import pytest

from heron.hlo.custom_calls.fft import transform
from heron.runtime.core.fft import FftCall
from heron.runtime.cuda.cufft import CUFFT_FORWARD, CUFFT_INVERSE, Cufft, plan

_DTYPES = {"C2C": np.complex64, "Z2Z": np.complex128, "R2C": np.float32, "D2Z": np.float64}
_DTYPES |= {"C2R": np.complex64, "Z2D": np.complex128}


class FakeCufft:
    """A stand-in for ``nvmath.bindings.cufft`` on host addresses (see the module docstring)."""

    def __init__(self, refuse: bool = False):
        from nvmath.bindings import cufft as real

        self.Type = real.Type
        self.plans: dict[int, dict] = {}
        self.calls: list[tuple] = []
        self.refuse = refuse

    def create(self):
        handle = 7 + len(self.plans)
        self.plans[handle] = {}
        self.calls.append(("create", handle))
        return handle

    def destroy(self, handle):
        self.calls.append(("destroy", handle))

    def make_plan_many(self, handle, rank, n, inembed, istride, idist, onembed, ostride, odist,
                       kind, batch):  # fmt: skip
        if self.refuse:
            raise RuntimeError("CUFFT_INVALID_SIZE")
        self.plans[handle] = dict(rank=rank, n=tuple(n), inembed=inembed, onembed=onembed,
                                  istride=istride, ostride=ostride, idist=idist, odist=odist,
                                  type=self.Type(kind).name, batch=batch)  # fmt: skip
        return 0

    def set_stream(self, handle, stream):
        self.calls.append(("set_stream", handle, stream))

    def _exec(self, name, handle, source, out, direction=None):
        self.calls.append((name, handle, source, out, direction))
        p = self.plans[handle]
        n, kind, batch = p["n"], p["type"], p["batch"]
        dtype = np.dtype(_DTYPES[kind])
        half = (*n[:-1], n[-1] // 2 + 1)
        dims = half if kind in ("C2R", "Z2D") else n
        count = batch * math.prod(dims)
        x = np.frombuffer(ctypes.string_at(source, count * dtype.itemsize), dtype)
        x = x.reshape((batch, *dims))
        axes = tuple(range(1, len(n) + 1))
        if kind in ("C2C", "Z2Z"):
            y = np.fft.fftn(x, axes=axes) if direction == CUFFT_FORWARD else np.fft.ifftn(
                x, axes=axes) * math.prod(n)  # fmt: skip
            y = y.astype(dtype)
        elif kind in ("R2C", "D2Z"):
            y = np.fft.rfftn(x, axes=axes).astype(np.result_type(dtype, np.complex64))
        else:
            y = (np.fft.irfftn(x, s=n, axes=axes) * math.prod(n)).astype(dtype.type(0).real.dtype)
            ctypes.memset(source, 0x7F, count * dtype.itemsize)  # c2r may overwrite its input
        raw = np.ascontiguousarray(y).tobytes()
        ctypes.memmove(out, raw, len(raw))

    def exec_c2c(self, h, i, o, d):
        self._exec("exec_c2c", h, i, o, d)

    def exec_z2z(self, h, i, o, d):
        self._exec("exec_z2z", h, i, o, d)

    def exec_r2c(self, h, i, o):
        self._exec("exec_r2c", h, i, o)

    def exec_d2z(self, h, i, o):
        self._exec("exec_d2z", h, i, o)

    def exec_c2r(self, h, i, o):
        self._exec("exec_c2r", h, i, o)

    def exec_z2d(self, h, i, o):
        self._exec("exec_z2d", h, i, o)


class FakeCublas:
    """cuBLAS's handle, stream and real ``?scal`` on host addresses, recorded."""

    def __init__(self):
        self.calls: list[tuple] = []

    def create(self):
        return 99

    def set_stream(self, handle, stream):
        self.calls.append(("set_stream", handle, stream))

    def _scal(self, name, dtype, handle, n, alpha, x, incx):
        self.calls.append((name, handle, n, incx))
        factor = np.frombuffer(ctypes.string_at(alpha, np.dtype(dtype).itemsize), dtype)[0]
        width = {"csscal": np.complex64, "zdscal": np.complex128}.get(name, dtype)
        size = n * np.dtype(width).itemsize
        values = np.frombuffer(ctypes.string_at(x, size), width) * factor
        ctypes.memmove(x, values.astype(width).tobytes(), size)

    def csscal(self, *a):
        self._scal("csscal", np.float32, *a)

    def zdscal(self, *a):
        self._scal("zdscal", np.float64, *a)

    def sscal(self, *a):
        self._scal("sscal", np.float32, *a)

    def dscal(self, *a):
        self._scal("dscal", np.float64, *a)


def _library(fft=None, blas=None):
    scratch: list[np.ndarray] = []

    def allocate(nbytes):
        scratch.append(np.zeros(nbytes, np.uint8))
        return scratch[-1].ctypes.data

    copies: list[tuple] = []

    def copy(destination, source, nbytes, stream):
        copies.append((destination, source, nbytes, stream))
        ctypes.memmove(destination, source, nbytes)

    library = Cufft(allocate, copy, bindings=fft or FakeCufft(), blas=blas or FakeCublas())
    library.kept = scratch  # the scratch lives as long as the library
    return library, copies


CALLS = [
    FftCall("FFT", (5,), 6, "c64"),
    FftCall("IFFT", (3, 5), 2, "c128"),
    FftCall("FFT", (2, 3, 4), 2, "c64"),
    FftCall("RFFT", (7,), 4, "f32"),
    FftCall("RFFT", (3, 6), 2, "f64"),
    FftCall("IRFFT", (7,), 4, "c64"),
    FftCall("IRFFT", (4, 6), 2, "c128"),
]


def _operand(call: FftCall) -> np.ndarray:
    from heron.hlo.element_types import ElementType

    dtype = ElementType(call.operand_type).numpy_dtype
    rng = np.random.default_rng(2)
    shape = (call.batch, *call.operand_dims)
    x = rng.standard_normal(shape)
    if np.issubdtype(dtype, np.complexfloating):
        x = x + 1j * rng.standard_normal(shape)
    return x.astype(dtype)


@pytest.mark.parametrize("call", CALLS, ids=FftCall.describe)
def test_cufft_computes_the_contract_and_keeps_the_operand(call):
    fft, blas = FakeCufft(), FakeCublas()
    library, copies = _library(fft, blas)
    assert library.offers(call)
    x = _operand(call)
    before = x.copy()
    expected = transform(x, call.fft_type, call.fft_length)
    out = np.zeros_like(expected)
    library.run(call, [x.ctypes.data, out.ctypes.data], 0x51)
    eps = np.finfo(out.dtype).eps
    np.testing.assert_allclose(out, expected, rtol=0, atol=8 * eps * np.max(np.abs(expected)))
    np.testing.assert_array_equal(x, before)  # an IRFFT transformed a copy
    chosen = plan(call)
    (handle,) = fft.plans
    assert fft.plans[handle] == dict(
        rank=len(call.fft_length), n=call.fft_length, inembed=0, onembed=0, istride=1,
        ostride=1, idist=math.prod(call.operand_dims), odist=math.prod(call.out_dims),
        type=chosen.type, batch=call.batch,
    )  # fmt: skip
    assert ("set_stream", handle, 0x51) in fft.calls
    (executed,) = [c for c in fft.calls if c[0].startswith("exec")]
    if call.fft_type == "IRFFT":
        assert len(copies) == 1 and executed[2] == copies[0][0] != x.ctypes.data
    else:
        assert not copies and executed[2] == x.ctypes.data
    if call.fft_type in ("FFT", "IFFT"):
        assert executed[4] == (CUFFT_INVERSE if call.inverse else CUFFT_FORWARD)
    scals = [c for c in blas.calls if c[0] != "set_stream"]
    if call.inverse:  # cuFFT does not normalise: cuBLAS scales on the same stream
        assert scals == [(chosen.scal, 99, call.batch * math.prod(call.out_dims), 1)]
        assert ("set_stream", 99, 0x51) in blas.calls
    else:
        assert scals == []


def test_a_plan_is_made_once_per_call_shape():
    fft = FakeCufft()
    library, _ = _library(fft)
    call = CALLS[0]
    x, out = _operand(call), np.zeros((6, 5), np.complex64)
    for _ in range(3):
        assert library.offers(call)
        library.run(call, [x.ctypes.data, out.ctypes.data], 0)
    assert len(fft.plans) == 1 and [c[0] for c in fft.calls].count("create") == 1


def test_a_plan_cufft_refuses_is_not_offered_and_says_why():
    fft = FakeCufft(refuse=True)
    library, _ = _library(fft)
    assert not library.offers(CALLS[0])
    assert "CUFFT_INVALID_SIZE" in library.refusal(CALLS[0])
    assert ("destroy", 7) in fft.calls  # the failed plan given back
    assert "FFTs only" in library.refusal(object())


def test_the_cuda_device_opens_cufft_for_fft_calls(fake_cuda):
    from heron.runtime.cuda.device import CudaDevice

    opened = []

    def maker(device):
        library, _ = _library()
        opened.append(library)
        return library

    device = CudaDevice(bindings=fake_cuda(), libraries={"fft": maker})
    assert device.library_for(CALLS[3]) == "cuFFT" and len(opened) == 1


def test_by_default_fft_calls_go_to_cufft(fake_cuda):
    from heron.runtime.cuda import device as cuda_device

    device = cuda_device.CudaDevice(bindings=fake_cuda())
    assert device._library_makers["fft"] is cuda_device._cufft
