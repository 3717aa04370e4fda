"""heron's DLPack structures (heron.runtime.core.dlpack) against the libraries that speak it:
jax and numpy on the CPU read what heron exports, heron reads what they export, with the
same element types, and every exported tensor is released once its consumer is done."""

from __future__ import annotations

import gc

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest

from heron.runtime.core import dlpack

#: Every element type heron and jax both exchange (complex128 and float64 need x64 in jax).
JAX_TYPES = [
    jnp.bool_, jnp.int8, jnp.int16, jnp.int32, jnp.uint8, jnp.uint16, jnp.uint32,
    jnp.float16, jnp.bfloat16, jnp.float32, jnp.complex64,
    jnp.float8_e4m3fn, jnp.float8_e5m2, jnp.float8_e4m3fnuz, jnp.float8_e5m2fnuz,
    jnp.float8_e4m3b11fnuz, jnp.float8_e4m3, jnp.float8_e3m4,
]  # fmt: skip


class _Exporter:
    """A numpy array exported by heron's own capsule (what a heron DeviceArray does)."""

    def __init__(self, array):
        self.array = np.ascontiguousarray(array)

    def __dlpack_device__(self):
        return (dlpack.CPU, 0)

    def __dlpack__(self, *, stream=None, max_version=None, dl_device=None, copy=None):
        a = self.array
        return dlpack.capsule(a.ctypes.data, a.shape, a.dtype, (dlpack.CPU, 0), self)


@pytest.mark.parametrize("dtype", JAX_TYPES, ids=lambda t: np.dtype(t).name)
def test_heron_reads_jax_s_tensors_with_jax_s_type_codes(dtype):
    x = jnp.zeros((2, 3), dtype)
    tensor = dlpack.take(x.__dlpack__(), "x")
    assert tensor.dtype == np.dtype(dtype)
    assert (tensor.address, tensor.shape, tensor.device) == (
        x.unsafe_buffer_pointer(),
        (2, 3),
        (dlpack.CPU, 0),
    )
    assert tensor.c_contiguous


@pytest.mark.parametrize("dtype", JAX_TYPES, ids=lambda t: np.dtype(t).name)
def test_jax_reads_heron_s_tensors_in_place(dtype):
    values = np.arange(6).reshape(2, 3).astype(dtype)
    exporter = _Exporter(values)
    imported = jax.dlpack.from_dlpack(exporter)
    assert imported.dtype == np.dtype(dtype)
    np.testing.assert_array_equal(np.asarray(imported), values)


def test_every_exported_tensor_is_released():
    gc.collect()
    before = dlpack.exported_count()
    values = np.arange(12, dtype=np.float32).reshape(3, 4)
    shared = np.from_dlpack(_Exporter(values))
    as_jax = jax.dlpack.from_dlpack(_Exporter(values))
    assert shared.ctypes.data == values.ctypes.data  # numpy took it in place
    np.testing.assert_array_equal(np.asarray(as_jax), values)
    unconsumed = _Exporter(values).__dlpack__()
    assert dlpack.exported_count() > before
    del shared, as_jax, unconsumed  # consumers call the deleter; the capsule's destructor
    gc.collect()
    assert dlpack.exported_count() == before


def test_a_capsule_is_consumed_once():
    capsule = np.arange(3, dtype=np.float32).__dlpack__()
    dlpack.take(capsule)
    with pytest.raises(dlpack.DLPackError, match="already consumed"):
        dlpack.take(capsule)


def test_strides_are_read_and_judged():
    base = np.arange(24, dtype=np.float32).reshape(4, 6)
    strided = dlpack.take(base[:, ::2].__dlpack__())
    assert strided.shape == (4, 3) and strided.strides == (6, 2)
    assert not strided.c_contiguous
    assert not dlpack.take(base[:, :1].__dlpack__()).c_contiguous  # rows 6 apart
    # A size-1 dimension's stride says nothing: four consecutive floats are contiguous.
    column = np.lib.stride_tricks.as_strided(base, shape=(4, 1), strides=(4, 400))
    tensor = dlpack.take(column.__dlpack__())
    assert tensor.strides == (1, 100) and tensor.c_contiguous and tensor.nbytes == 16


def test_the_producer_s_deleter_runs_when_heron_lets_go():
    gc.collect()
    before = dlpack.exported_count()
    tensor = dlpack.take(_Exporter(np.ones(4, np.float32)).__dlpack__())
    assert dlpack.exported_count() == before + 1
    del tensor
    gc.collect()
    assert dlpack.exported_count() == before


def test_types_dlpack_cannot_carry_are_refused():
    with pytest.raises(dlpack.DLPackError, match="no type code for int4"):
        dlpack.dtype_code(ml_dtypes.int4)
    with pytest.raises(dlpack.DLPackError, match="4 lanes"):
        dlpack.numpy_dtype(2, 32, 4)


@pytest.fixture
def foreign_capsule_signatures():
    """``ctypes.pythonapi`` as many libraries leave it (numba-jax bridges, DLPack helpers):
    ``PyCapsule_New``'s and ``PyCapsule_SetName``'s name declared ``c_char_p``, process-wide.
    Found on the H200, where an image's library did this before heron exported a result."""
    import ctypes

    api = ctypes.pythonapi
    saved = {
        name: (getattr(api, name).argtypes, getattr(api, name).restype)
        for name in ("PyCapsule_New", "PyCapsule_SetName", "PyCapsule_GetPointer")
    }
    api.PyCapsule_New.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]
    api.PyCapsule_New.restype = ctypes.py_object
    api.PyCapsule_SetName.argtypes = [ctypes.py_object, ctypes.c_char_p]
    api.PyCapsule_GetPointer.argtypes = [ctypes.c_void_p, ctypes.c_char_p]
    yield
    for name, (argtypes, restype) in saved.items():
        getattr(api, name).argtypes = argtypes
        getattr(api, name).restype = restype


def test_other_libraries_signatures_on_ctypes_pythonapi_do_not_reach_heron(
    foreign_capsule_signatures,
):
    values = np.arange(6, dtype=np.float32).reshape(2, 3)
    imported = jax.dlpack.from_dlpack(_Exporter(values))  # heron's PyCapsule_New
    np.testing.assert_array_equal(np.asarray(imported), values)
    x = jnp.arange(4, dtype=jnp.int32)
    tensor = dlpack.take(x.__dlpack__(), "x")  # heron's IsValid, GetPointer and SetName
    assert tensor.address == x.unsafe_buffer_pointer()


def test_a_deleter_called_at_interpreter_exit_finds_nothing_to_release(monkeypatch, capfd):
    """jax frees its arrays late at exit, when this module's names may already be None:
    the deleter then releases nothing, quietly (it printed "Exception ignored on calling
    ctypes callback function" with an AttributeError after a sweep's jax.grad runs)."""
    import sys

    raised = []
    monkeypatch.setattr(sys, "unraisablehook", raised.append)
    monkeypatch.setattr(dlpack, "ctypes", None)
    monkeypatch.setattr(dlpack, "_exports_lock", None)
    dlpack._delete_export(None)
    assert not raised
    assert "Exception ignored" not in capfd.readouterr().err
