"""DLPack: arrays handed between heron and other libraries without a copy.

jax, PyTorch, CuPy and numpy exchange device memory through DLPack: the
producer's ``__dlpack__(stream=...)`` returns a capsule named ``"dltensor"``
holding a ``DLManagedTensor`` (address, device, shape, strides, dtype, and a
deleter the consumer calls when it no longer needs the memory);
``__dlpack_device__()`` says where the memory is before anything is exchanged.
heron needs both directions without a dependency that knows its devices, so
the C structures are declared here with ctypes (DLPack 0.8's unversioned
capsule, which every producer still gives when the consumer asks for no
``max_version``):

- :func:`take` consumes a producer's capsule: it renames the capsule
  ``"used_dltensor"`` (the protocol's "consumed" mark) and returns an
  :class:`Imported` tensor, whose deleter runs when the last reference to it
  goes (a :class:`~heron.runtime.core.device.DeviceBuffer` adopting the memory
  holds it as its ``owner``);
- :func:`capsule` makes one for memory heron holds: the tensor's structures and
  ``owner`` (what keeps the memory alive: the array exported) stay referenced
  until the consumer calls the deleter, or until the capsule dies unconsumed.

Element types are named by numpy dtypes (ml_dtypes' for bfloat16 and the fp8
family), with DLPack's type codes: ``kDLInt`` 0, ``kDLUInt`` 1, ``kDLFloat``
2, ``kDLBfloat`` 4, ``kDLComplex`` 5, ``kDLBool`` 6, and the fp8 codes of
DLPack 1.1 (``kDLFloat8_e4m3fn`` 10, ``kDLFloat8_e5m2`` 12, ...), the ones jax
exports (tests/test_dlpack.py checks each against jax). Sub-byte types
(int4, float4) are not exchanged: DLPack packs them, heron's memory
representation packs them differently.
"""

from __future__ import annotations

import ctypes
import threading
import weakref
from typing import Any

import attrs
import ml_dtypes
import numpy as np

__all__ = [
    "CPU",
    "CUDA",
    "ROCM",
    "DLPackError",
    "Imported",
    "capsule",
    "dtype_code",
    "numpy_dtype",
    "take",
]

#: DLPack's device types heron's devices live on (``DLDeviceType``).
CPU, CUDA, ROCM = 1, 2, 10


class DLPackError(BufferError):
    """A DLPack exchange that cannot happen; the message says which array and why.

    A ``BufferError``, as the array API standard asks of ``__dlpack__`` when an
    array cannot be exported.
    """


class _Device(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class _DataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class _Tensor(ctypes.Structure):
    _fields_ = [
        ("data", ctypes.c_void_p),
        ("device", _Device),
        ("ndim", ctypes.c_int32),
        ("dtype", _DataType),
        ("shape", ctypes.POINTER(ctypes.c_int64)),
        ("strides", ctypes.POINTER(ctypes.c_int64)),
        ("byte_offset", ctypes.c_uint64),
    ]


class _ManagedTensor(ctypes.Structure):
    pass


_DELETER = ctypes.CFUNCTYPE(None, ctypes.POINTER(_ManagedTensor))
_ManagedTensor._fields_ = [
    ("dl_tensor", _Tensor),
    ("manager_ctx", ctypes.c_void_p),
    ("deleter", _DELETER),
]

#: (kind, bits) of numpy -> DLPack's code; ml_dtypes' types by name.
_CODES: dict[np.dtype, int] = {
    **{np.dtype(f"int{b}"): 0 for b in (8, 16, 32, 64)},
    **{np.dtype(f"uint{b}"): 1 for b in (8, 16, 32, 64)},
    **{np.dtype(f"float{b}"): 2 for b in (16, 32, 64)},
    np.dtype(ml_dtypes.bfloat16): 4,
    np.dtype(np.complex64): 5,
    np.dtype(np.complex128): 5,
    np.dtype(np.bool_): 6,
    np.dtype(ml_dtypes.float8_e3m4): 7,
    np.dtype(ml_dtypes.float8_e4m3): 8,
    np.dtype(ml_dtypes.float8_e4m3b11fnuz): 9,
    np.dtype(ml_dtypes.float8_e4m3fn): 10,
    np.dtype(ml_dtypes.float8_e4m3fnuz): 11,
    np.dtype(ml_dtypes.float8_e5m2): 12,
    np.dtype(ml_dtypes.float8_e5m2fnuz): 13,
    np.dtype(ml_dtypes.float8_e8m0fnu): 14,
}
_DTYPES: dict[tuple[int, int], np.dtype] = {
    (code, dtype.itemsize * 8): dtype for dtype, code in _CODES.items()
}


def dtype_code(dtype: Any) -> tuple[int, int]:
    """``(code, bits)`` of a numpy dtype in DLPack, or DLPackError for one it has none for."""
    key = np.dtype(dtype)
    if key not in _CODES:
        raise DLPackError(f"DLPack has no type code for {key}")
    return _CODES[key], key.itemsize * 8


def numpy_dtype(code: int, bits: int, lanes: int = 1) -> np.dtype:
    """The numpy dtype of DLPack's ``(code, bits, lanes)``, or DLPackError."""
    if lanes != 1:
        raise DLPackError(f"DLPack vector types ({lanes} lanes) are not exchanged")
    dtype = _DTYPES.get((code, bits))
    if dtype is None:
        raise DLPackError(f"DLPack type code {code} of {bits} bits has no numpy dtype here")
    return dtype


# -- the CPython capsule API -------------------------------------------------------------
# A handle of heron's own on the interpreter's C API: ``ctypes.pythonapi``'s function objects
# are shared by the whole process, and libraries set their argtypes to suit themselves
# (``PyCapsule_New``'s name as ``c_char_p`` is common; seen on the H200, where it made every
# address heron passed "argument 2: TypeError: wrong type"). Its own objects are heron's alone.


def _own_api() -> ctypes.PyDLL:
    """A private handle on the interpreter's C API (fresh function objects)."""
    return ctypes.PyDLL(ctypes.pythonapi._name, handle=ctypes.pythonapi._handle)


_api = _own_api()
_api.PyCapsule_IsValid.restype = ctypes.c_int
_api.PyCapsule_IsValid.argtypes = [ctypes.py_object, ctypes.c_char_p]
_api.PyCapsule_GetPointer.restype = ctypes.c_void_p
_api.PyCapsule_GetPointer.argtypes = [ctypes.py_object, ctypes.c_char_p]
_api.PyCapsule_SetName.restype = ctypes.c_int
_api.PyCapsule_SetName.argtypes = [ctypes.py_object, ctypes.c_void_p]
_CAPSULE_DESTRUCTOR = ctypes.CFUNCTYPE(None, ctypes.c_void_p)
_api.PyCapsule_New.restype = ctypes.py_object
_api.PyCapsule_New.argtypes = [ctypes.c_void_p, ctypes.c_void_p, _CAPSULE_DESTRUCTOR]
# The destructor sees a dying capsule: it must not take a reference to it (py_object would).
_raw_api = _own_api()
_get_pointer_raw = _raw_api.PyCapsule_GetPointer
_get_pointer_raw.restype = ctypes.c_void_p
_get_pointer_raw.argtypes = [ctypes.c_void_p, ctypes.c_char_p]
_is_valid_address = _raw_api.PyCapsule_IsValid
_is_valid_address.restype = ctypes.c_int
_is_valid_address.argtypes = [ctypes.c_void_p, ctypes.c_char_p]

#: The names a capsule carries. CPython keeps the pointer, not a copy: they are passed
#: by address (``.value`` would pass a temporary bytes object) and live as long as heron.
_NAME = ctypes.create_string_buffer(b"dltensor")
_USED_NAME = ctypes.create_string_buffer(b"used_dltensor")
_NAME_ADDRESS = ctypes.addressof(_NAME)
_USED_NAME_ADDRESS = ctypes.addressof(_USED_NAME)


# -- export ------------------------------------------------------------------------------
@attrs.define(eq=False)
class _Export:
    """What an exported tensor's structures point at, kept until its deleter runs."""

    managed: _ManagedTensor
    shape: Any
    owner: Any


_exports: dict[int, _Export] = {}
_exports_lock = threading.Lock()


def _forget(address: int) -> None:
    with _exports_lock:
        _exports.pop(address, None)


@_DELETER
def _delete_export(pointer: Any) -> None:
    # A consumer releasing the tensor at interpreter exit (jax's arrays are freed late)
    # may find this module's names gone: nothing is left to release then.
    try:
        _forget(ctypes.cast(pointer, ctypes.c_void_p).value or 0)
    except (AttributeError, TypeError):
        pass


@_CAPSULE_DESTRUCTOR
def _destroy_capsule(capsule_address: int | None) -> None:
    # A consumer renames the capsule and calls the deleter itself; one that never took
    # it leaves the name: then the structures are released here. (At interpreter exit
    # the module's names may already be gone: nothing is left to release then.)
    try:
        if capsule_address and _is_valid_address(capsule_address, b"dltensor"):
            _forget(_get_pointer_raw(capsule_address, b"dltensor") or 0)
    except (AttributeError, TypeError):
        pass


def capsule(
    address: int, shape: tuple[int, ...], dtype: Any, device: tuple[int, int], owner: Any
) -> Any:
    """A ``"dltensor"`` capsule for the C-contiguous array of ``shape`` and ``dtype`` at
    ``address`` on DLPack device ``device``; ``owner`` (what keeps the memory alive) is
    referenced until the consumer is done with it."""
    code, bits = dtype_code(dtype)
    sizes = (ctypes.c_int64 * max(len(shape), 1))(*shape)
    managed = _ManagedTensor()
    managed.dl_tensor.data = address
    managed.dl_tensor.device = _Device(*device)
    managed.dl_tensor.ndim = len(shape)
    managed.dl_tensor.dtype = _DataType(code, bits, 1)
    managed.dl_tensor.shape = sizes
    managed.dl_tensor.strides = None  # C-contiguous
    managed.dl_tensor.byte_offset = 0
    managed.deleter = _delete_export
    pointer = ctypes.addressof(managed)
    with _exports_lock:
        _exports[pointer] = _Export(managed, sizes, owner)
    return _api.PyCapsule_New(pointer, _NAME_ADDRESS, _destroy_capsule)


def exported_count() -> int:
    """Tensors exported and not yet released by their consumer (tests watch it)."""
    with _exports_lock:
        return len(_exports)


# -- import ------------------------------------------------------------------------------
@attrs.frozen(eq=False)
class Imported:
    """A producer's tensor, consumed: where it is and what it holds.

    ``address`` includes the producer's ``byte_offset``; ``strides`` are in
    elements, None for C-contiguous. The producer's deleter runs when this
    object is collected (:meth:`release` runs it earlier).
    """

    address: int
    device: tuple[int, int]
    shape: tuple[int, ...]
    strides: tuple[int, ...] | None
    dtype: np.dtype
    _finalizer: Any = attrs.field(repr=False)

    @property
    def nbytes(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64)) * self.dtype.itemsize

    @property
    def c_contiguous(self) -> bool:
        """Whether the elements lie in C order without gaps (size-1 dimensions' strides
        are ignored, as numpy does)."""
        if self.strides is None:
            return True
        expected = 1
        for size, stride in zip(reversed(self.shape), reversed(self.strides), strict=True):
            if size != 1 and stride != expected:
                return False
            expected *= size
        return True

    def release(self) -> None:
        """Call the producer's deleter now (once)."""
        self._finalizer()


def _call_deleter(managed_address: int, deleter: Any) -> None:
    if deleter:
        deleter(ctypes.cast(managed_address, ctypes.POINTER(_ManagedTensor)))


def take(dlpack_capsule: Any, what: str = "array") -> Imported:
    """Consume a producer's ``"dltensor"`` capsule (see the module docstring)."""
    if not _api.PyCapsule_IsValid(dlpack_capsule, _NAME.value):
        raise DLPackError(
            f"{what}: __dlpack__ gave no unconsumed 'dltensor' capsule (a versioned capsule,"
            " or one already consumed)"
        )
    managed_address = _api.PyCapsule_GetPointer(dlpack_capsule, _NAME.value)
    managed = _ManagedTensor.from_address(managed_address)
    tensor = managed.dl_tensor
    shape = tuple(int(tensor.shape[i]) for i in range(tensor.ndim))
    strides = tuple(int(tensor.strides[i]) for i in range(tensor.ndim)) if tensor.strides else None
    try:
        dtype = numpy_dtype(tensor.dtype.code, tensor.dtype.bits, tensor.dtype.lanes)
    except DLPackError as error:
        raise DLPackError(f"{what}: {error}") from None
    _api.PyCapsule_SetName(dlpack_capsule, _USED_NAME_ADDRESS)
    deleter = managed.deleter
    imported_address = (tensor.data or 0) + int(tensor.byte_offset)
    device = (int(tensor.device.device_type), int(tensor.device.device_id))
    imported = Imported(imported_address, device, shape, strides, dtype, None)
    # The finalizer holds the deleter, not the Imported: it runs once, when collected.
    finalizer = weakref.finalize(imported, _call_deleter, managed_address, deleter)
    object.__setattr__(imported, "_finalizer", finalizer)
    return imported
