"""The memory representation of an HLO array: what a kernel's buffer holds.

Every device (a GPU, the interpreter, the host harness) sees a buffer as
bytes in one convention, docs/pipeline.md's "memory after lower-tensors":
the array in the physical order of its layout (``minor_to_major``, most
major dimension first); ``pred`` one byte, 0 or 1; the fp8 family as its
bits in ``uint8``; sub-byte types (s4, u4, s2, u2, f4e2m1fn) packed,
element k in bits ``(k*w) % 8`` of byte ``k*w // 8``, low bits first;
complex as numpy complex. ``to_memory`` and ``from_memory`` convert between
that and logical numpy arrays; they live here, with the shapes, because the
compiler's test aids and the runtime both need them.
"""

from __future__ import annotations

import numpy as np

from heron.hlo.element_types import ElementType
from heron.hlo.errors import UnsupportedError
from heron.hlo.shapes import ArrayShape

__all__ = [
    "from_memory",
    "is_c_order",
    "memory_bytes",
    "memory_dtype",
    "memory_size",
    "poisoned",
    "to_memory",
]


def _check_layout(shape: ArrayShape) -> None:
    if shape.layout is not None and shape.layout.is_tiled:
        raise UnsupportedError(
            f"layout {shape.layout} of {shape.element_type.name.lower()}"
            f"{list(shape.dims)} has tiling; only minor_to_major orders are supported"
        )


def physical_elements(values: np.ndarray, shape: ArrayShape) -> np.ndarray:
    """A logical array of ``shape`` -> its elements in memory order (1-D, same dtype).

    The element order of the layout, before any encoding (sub-byte packing,
    pred bytes): what a bitcast reinterprets and a buffer holds.
    """
    _check_layout(shape)
    array = np.asarray(values).reshape(shape.dims)
    return np.ascontiguousarray(np.transpose(array, shape.major_to_minor)).reshape(-1)


def logical_elements(flat: np.ndarray, shape: ArrayShape) -> np.ndarray:
    """Inverse of :func:`physical_elements`: elements in memory order -> a logical array."""
    _check_layout(shape)
    order = shape.major_to_minor
    physical = np.asarray(flat)[: shape.num_elements].reshape([shape.dims[d] for d in order])
    return np.transpose(physical, np.argsort(order)).copy()  # not ascontiguousarray: 0-d stays 0-d


def memory_size(shape: ArrayShape) -> int:
    """The buffer's memref length: elements, or bytes for packed sub-byte types."""
    count = max(shape.num_elements, 1)
    if shape.element_type.is_sub_byte:
        return (count * shape.element_type.bit_width + 7) // 8
    return count


def memory_dtype(element: ElementType) -> np.dtype:
    if element.is_complex:
        return np.dtype(element.numpy_dtype)
    if element is ElementType.PRED or element.is_sub_byte or element.bit_width == 8:
        return np.dtype(np.uint8)
    return np.dtype(element.numpy_dtype)


def to_memory(values: np.ndarray, shape: ArrayShape) -> np.ndarray:
    """Logical numpy ``values`` of ``shape`` -> the flat buffer the kernel reads.

    A shape with zero elements still has a one-element buffer (``memory_size``:
    the kernel's ``memref<1xT>``, never read): it is returned zero-filled, so
    an upload always matches the memref the kernel was compiled for.
    """
    element = shape.element_type
    if shape.num_elements == 0:
        return np.zeros(memory_size(shape), memory_dtype(element))
    flat = physical_elements(np.asarray(values, dtype=element.numpy_dtype), shape)
    if element is ElementType.PRED:
        return flat.astype(np.uint8)
    if element.is_sub_byte:
        width = element.bit_width
        bits = flat.view(np.uint8).astype(np.uint32) & ((1 << width) - 1)
        per_byte = 8 // width
        padded = np.zeros(memory_size(shape) * per_byte, np.uint32)
        padded[: bits.size] = bits
        lanes = padded.reshape(-1, per_byte) << (np.arange(per_byte, dtype=np.uint32) * width)
        return np.bitwise_or.reduce(lanes, axis=1).astype(np.uint8)
    if element.is_complex:
        return flat.copy()
    return flat.view(memory_dtype(element)).copy()


def from_memory(buffer: np.ndarray, shape: ArrayShape) -> np.ndarray:
    """The kernel's flat ``buffer`` -> logical numpy values of ``shape``.

    Raises ``ValueError`` for a ``pred`` byte that is neither 0 nor 1 (a
    store the kernel never made, or a wrong one).
    """
    element = shape.element_type
    count = shape.num_elements
    if element is ElementType.PRED:
        raw = buffer[:count]
        bad = np.flatnonzero(raw > 1)
        if bad.size:
            raise ValueError(
                f"pred buffer holds {bad.size} bytes that are neither 0 nor 1, first at"
                f" physical index {bad[0]}: {raw[bad[0]]:#x}"
            )
        flat = raw.astype(bool)
    elif element.is_sub_byte:
        width = element.bit_width
        per_byte = 8 // width
        shifts = np.arange(per_byte, dtype=np.uint8) * width
        lanes = (buffer[:, None] >> shifts) & ((1 << width) - 1)
        raw = lanes.reshape(-1)[:count].astype(np.uint8)
        if element.is_signed_integral:
            signed = raw.astype(np.int8) - ((raw >> (width - 1)) << width).astype(np.int8)
            flat = signed.astype(element.numpy_dtype)
        elif element.is_floating:
            flat = raw.view(element.numpy_dtype)
        else:
            flat = raw.astype(element.numpy_dtype)
    else:
        flat = buffer[:count].view(element.numpy_dtype)
    return logical_elements(flat, shape)


def poisoned(shape: ArrayShape, poison: int) -> np.ndarray:
    """An output buffer of ``shape`` with every byte ``poison``."""
    dtype = memory_dtype(shape.element_type)
    return np.full(memory_size(shape) * dtype.itemsize, poison & 0xFF, np.uint8).view(dtype)


def memory_bytes(shape: ArrayShape) -> int:
    """The buffer's size in bytes."""
    return memory_size(shape) * memory_dtype(shape.element_type).itemsize


def is_c_order(shape: ArrayShape) -> bool:
    """Whether a buffer of ``shape`` holds exactly the bytes of a C-contiguous numpy array of
    its logical values, so that another library can read it in place (DLPack).

    True when the layout orders the dimensions as numpy does (size-1 dimensions
    anywhere) and the element type is stored as numpy stores it: not a packed
    sub-byte type; pred as one byte 0 or 1, the fp8 family as its bits. An
    empty array is not (its buffer is one element, never read).
    """
    if shape.element_type.is_sub_byte or shape.num_elements == 0:
        return False
    if shape.layout is not None and shape.layout.is_tiled:
        return False
    order = [d for d in shape.major_to_minor if shape.dims[d] != 1]
    return order == sorted(order)
