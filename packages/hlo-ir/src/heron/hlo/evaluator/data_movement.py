"""Operations that move or create data without arithmetic.

Each handler is one (or a few) numpy operations on the whole array: views
where numpy can make them (broadcast, transpose, reverse, slice), one copy
where it cannot. Values are immutable by convention, so handlers that write
(dynamic-update-slice, pad) start from a fresh array.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from heron.hlo.attributes import PaddingConfig
from heron.hlo.element_types import ElementType
from heron.hlo.errors import UnsupportedError
from heron.hlo.evaluator.common import (
    TOKEN,
    convert_array,
    instruction_error,
)
from heron.hlo.ir import Instruction, Literal
from heron.hlo.memory_layout import logical_elements, physical_elements
from heron.hlo.shapes import ArrayShape

if TYPE_CHECKING:
    from heron.hlo.evaluator.interpreter import Evaluator


# -- shared helpers ------------------------------------------------------------------


def required(inst: Instruction, name: str) -> Any:
    """Attribute ``name`` of ``inst``, or an error naming the instruction."""
    value = inst.attributes.get(name)
    if value is None:
        raise instruction_error(inst, f"missing attribute {name}=")
    return value


def index_value(value: np.ndarray) -> int:
    """A scalar index of any integer type as a Python int (u64 stays unsigned)."""
    array = np.asarray(value)
    if array.dtype.kind in "iub":
        return int(array.item())
    return int(array.astype(np.int64).item())


def indices_as_int64(indices: np.ndarray) -> np.ndarray:
    """Index arrays of any integer type as int64.

    u64 values above int64's range are clamped to 2**62 first: every use
    clamps or bounds-checks indices against dimension sizes far below that,
    so the result is the same as with the exact value.
    """
    if indices.dtype == np.uint64:
        indices = np.minimum(indices, np.uint64(2**62))
    return indices.astype(np.int64, copy=False)


def pad_array(x: np.ndarray, value: Any, config: Sequence[tuple[int, int, int]]) -> np.ndarray:
    """XLA pad: per dimension (low, high, interior); negative low/high crop.

    Interior padding puts ``interior`` pad elements between neighbours. The
    array is built with non-negative edges first and then cropped, which is
    what a negative edge means.
    """
    if all(lo == 0 and hi == 0 and it == 0 for lo, hi, it in config):
        return x
    sizes = []
    places = []
    crops = []
    for n, (lo, hi, it) in zip(x.shape, config):
        dilated = n + (n - 1) * it if n > 0 else 0
        total = max(lo, 0) + dilated + max(hi, 0)
        sizes.append(total)
        places.append(slice(max(lo, 0), max(lo, 0) + dilated, it + 1))
        start = max(-lo, 0)
        end = total - max(-hi, 0)
        if end < start:
            raise ValueError(
                f"padding (low={lo}, high={hi}, interior={it}) of a dimension of size {n}"
                " leaves a negative size"
            )
        crops.append(slice(start, end))
    out = np.full(sizes, value, dtype=x.dtype)
    out[tuple(places)] = x
    return out[tuple(crops)]


def _bits(flat: np.ndarray, et: ElementType) -> np.ndarray:
    """Sub-byte values as their raw bit patterns (uint8, low bits)."""
    mask = (1 << et.bit_width) - 1
    if et.is_floating:
        return flat.view(np.uint8) & mask
    return (flat.astype(np.int8).view(np.uint8) & mask).astype(np.uint8)


def _from_bits(bits: np.ndarray, et: ElementType) -> np.ndarray:
    if et.is_floating:
        return bits.astype(np.uint8).view(et.numpy_dtype)
    if et.is_signed_integral:
        width = et.bit_width
        signed = bits.astype(np.int16)
        signed = np.where(signed >= 1 << (width - 1), signed - (1 << width), signed)
        return signed.astype(et.numpy_dtype)
    return bits.astype(et.numpy_dtype)


def reinterpret(flat: np.ndarray, src: ElementType, dst: ElementType) -> np.ndarray:
    """Reinterpret a 1-D physical buffer of ``src`` elements as ``dst`` elements.

    Byte-sized types reinterpret bytes (little-endian, as on every XLA
    target); sub-byte types reinterpret the bit pattern of each element and
    only between types of the same width (packing is not modelled).
    """
    if src is dst:
        return flat
    if src.is_pred:
        return reinterpret(flat.view(np.uint8), ElementType.U8, dst)
    if dst.is_pred:
        return reinterpret(flat, src, ElementType.U8) != 0
    if src.is_sub_byte or dst.is_sub_byte:
        if src.bit_width != dst.bit_width:
            raise UnsupportedError(f"bitcast between {src} and {dst} (sub-byte, different widths)")
        return _from_bits(_bits(flat, src), dst)
    return np.ascontiguousarray(flat).view(dst.numpy_dtype)


# -- handlers ------------------------------------------------------------------------------


def _constant(ev: Evaluator, inst: Instruction, ops: list[Literal]) -> Literal:
    if inst.literal is None:
        raise instruction_error(inst, "constant without a value (elided as {...} in the text)")
    return _read_only(inst.literal)


def _read_only(value: Literal) -> Literal:
    """A view the caller cannot write through (the module's constant stays intact)."""
    if isinstance(value, tuple):
        return tuple(_read_only(v) for v in value)
    view = np.asarray(value).view()
    view.flags.writeable = False
    return view


def _broadcast(ev: Evaluator, inst: Instruction, ops: list[Literal]) -> Literal:
    x = ops[0]
    dims = tuple(inst.attributes.get("dimensions", ()))
    out = inst.array_shape.dims
    if x.ndim != len(dims):
        raise instruction_error(
            inst, f"operand has rank {x.ndim} but dimensions={{{dims}}} names {len(dims)}"
        )
    order = sorted(range(len(dims)), key=lambda i: dims[i])
    if order != list(range(len(dims))):
        x = np.transpose(x, order)
    expanded = [1] * len(out)
    for axis, d in enumerate(sorted(dims)):
        expanded[d] = x.shape[axis]
    return np.broadcast_to(x.reshape(expanded), out)


def _reshape(ev: Evaluator, inst: Instruction, ops: list[Literal]) -> Literal:
    return np.reshape(ops[0], inst.array_shape.dims)


def _bitcast(ev: Evaluator, inst: Instruction, ops: list[Literal]) -> Literal:
    """Reinterpret the physical buffer: logical -> memory order -> new logical shape.

    Only the minor-to-major order of a layout is honoured; tiling suffixes
    (``T(8,128)``) are not, and are refused rather than silently ignored.
    """
    src_shape = inst.operands[0].array_shape
    dst_shape = inst.array_shape
    for shape in (src_shape, dst_shape):
        if shape.layout is not None and shape.layout.is_tiled:
            raise instruction_error(
                inst, f"bitcast with a tiled layout {shape} is not supported", UnsupportedError
            )
    src_bytes = src_shape.num_elements * src_shape.element_type.bit_width
    dst_bytes = dst_shape.num_elements * dst_shape.element_type.bit_width
    if src_bytes != dst_bytes:
        raise instruction_error(
            inst, f"bitcast from {src_shape} to {dst_shape} changes the size in bits"
        )
    flat = physical_elements(ops[0], src_shape)
    flat = reinterpret(flat, src_shape.element_type, dst_shape.element_type)
    return logical_elements(flat, dst_shape)


def _transpose(ev: Evaluator, inst: Instruction, ops: list[Literal]) -> Literal:
    return np.transpose(ops[0], tuple(required(inst, "dimensions")))


def _copy_value(value: Literal) -> Literal:
    if isinstance(value, tuple):
        return tuple(_copy_value(v) for v in value)
    if isinstance(value, np.ndarray):
        return np.array(value, copy=True)
    return value


def _copy(ev: Evaluator, inst: Instruction, ops: list[Literal]) -> Literal:
    # Layouts do not change logical values: a copy is the same value.
    return _copy_value(ops[0])


def _slice(ev: Evaluator, inst: Instruction, ops: list[Literal]) -> Literal:
    ranges = required(inst, "slice")
    x = ops[0]
    if len(ranges) != x.ndim:
        raise instruction_error(inst, f"slice has {len(ranges)} ranges for rank {x.ndim}")
    return x[tuple(slice(r.start, r.limit, r.stride) for r in ranges)]


def _start_indices(inst: Instruction, ops: list[Literal], first: int, rank: int) -> list[int]:
    """Start indices of dynamic-(update-)slice: one scalar per dimension, or one vector."""
    rest = ops[first:]
    if len(rest) == 1 and np.ndim(rest[0]) == 1:
        rest = list(rest[0])
    if len(rest) != rank:
        raise instruction_error(inst, f"expected {rank} start indices, got {len(rest)}")
    return [index_value(v) for v in rest]


def _clamp(start: int, dim: int, size: int) -> int:
    return min(max(start, 0), dim - size)


def _dynamic_slice(ev: Evaluator, inst: Instruction, ops: list[Literal]) -> Literal:
    x = ops[0]
    sizes = tuple(required(inst, "dynamic_slice_sizes"))
    starts = _start_indices(inst, ops, 1, x.ndim)
    if len(sizes) != x.ndim:
        raise instruction_error(inst, f"dynamic_slice_sizes has {len(sizes)} entries")
    index = []
    for start, dim, size in zip(starts, x.shape, sizes):
        if size > dim:
            raise instruction_error(inst, f"slice size {size} exceeds dimension {dim}")
        begin = _clamp(start, dim, size)
        index.append(slice(begin, begin + size))
    return x[tuple(index)]


def _dynamic_update_slice(ev: Evaluator, inst: Instruction, ops: list[Literal]) -> Literal:
    x, update = ops[0], ops[1]
    starts = _start_indices(inst, ops, 2, x.ndim)
    index = []
    for start, dim, size in zip(starts, x.shape, update.shape):
        if size > dim:
            raise instruction_error(inst, f"update size {size} exceeds dimension {dim}")
        begin = _clamp(start, dim, size)
        index.append(slice(begin, begin + size))
    out = np.array(x, copy=True)
    out[tuple(index)] = update
    return out


def _pad(ev: Evaluator, inst: Instruction, ops: list[Literal]) -> Literal:
    config = required(inst, "padding")
    if not isinstance(config, PaddingConfig) or len(config.dims) != ops[0].ndim:
        raise instruction_error(inst, f"padding={config!r} does not fit rank {ops[0].ndim}")
    dims = [(d.low, d.high, d.interior) for d in config.dims]
    return pad_array(ops[0], ops[1][()], dims)


def _concatenate(ev: Evaluator, inst: Instruction, ops: list[Literal]) -> Literal:
    (axis,) = tuple(required(inst, "dimensions"))
    return np.concatenate(ops, axis=axis)


def _reverse(ev: Evaluator, inst: Instruction, ops: list[Literal]) -> Literal:
    dims = tuple(inst.attributes.get("dimensions", ()))
    return np.flip(ops[0], axis=dims) if dims else ops[0]


def _iota(ev: Evaluator, inst: Instruction, ops: list[Literal]) -> Literal:
    shape = inst.array_shape
    axis = required(inst, "iota_dimension")
    if not 0 <= axis < shape.rank:
        raise instruction_error(inst, f"iota_dimension={axis} out of range for {shape}")
    et = shape.element_type
    n = shape.dims[axis]
    if et.is_floating or et.is_complex:
        values = convert_array(np.arange(n, dtype=np.float64), et)
    elif et.is_pred:
        values = np.arange(n) != 0
    else:
        values = convert_array(np.arange(n, dtype=np.int64), et)
    expanded = [1] * shape.rank
    expanded[axis] = n
    return np.broadcast_to(values.reshape(expanded), shape.dims)


def _tuple(ev: Evaluator, inst: Instruction, ops: list[Literal]) -> Literal:
    return tuple(ops)


def _get_tuple_element(ev: Evaluator, inst: Instruction, ops: list[Literal]) -> Literal:
    value = ops[0]
    index = required(inst, "index")
    if not isinstance(value, tuple) or not 0 <= index < len(value):
        raise instruction_error(inst, f"index={index} does not select an element of the operand")
    return value[index]


def _get_dimension_size(ev: Evaluator, inst: Instruction, ops: list[Literal]) -> Literal:
    (dim,) = tuple(required(inst, "dimensions"))
    shape = inst.operands[0].shape
    if not isinstance(shape, ArrayShape) or not 0 <= dim < shape.rank:
        raise instruction_error(inst, f"dimension {dim} out of range for {shape}")
    return np.asarray(np.shape(ops[0])[dim], dtype=np.int32)


def _pass_through(ev: Evaluator, inst: Instruction, ops: list[Literal]) -> Literal:
    return ops[0]


def _set_dimension_size(ev: Evaluator, inst: Instruction, ops: list[Literal]) -> Literal:
    # Values are held at their bounds; the dynamic size is not tracked.
    return ops[0]


def _token_value(ev: Evaluator, inst: Instruction, ops: list[Literal]) -> Literal:
    return TOKEN


HANDLERS = {
    "constant": _constant,
    "broadcast": _broadcast,
    "reshape": _reshape,
    "bitcast": _bitcast,
    "transpose": _transpose,
    "copy": _copy,
    "slice": _slice,
    "dynamic-slice": _dynamic_slice,
    "dynamic-update-slice": _dynamic_update_slice,
    "pad": _pad,
    "concatenate": _concatenate,
    "reverse": _reverse,
    "iota": _iota,
    "tuple": _tuple,
    "get-tuple-element": _get_tuple_element,
    "get-dimension-size": _get_dimension_size,
    "set-dimension-size": _set_dimension_size,
}

#: Handlers for array mode (see ``interpreter``): only scalar-to-scalar forms
#: reach them, so shape-changing ops are the identity there.
VECTOR_HANDLERS = {
    "constant": _constant,
    "tuple": _tuple,
    "get-tuple-element": _get_tuple_element,
    "copy": _pass_through,
    "reshape": _pass_through,
    "bitcast": _pass_through,
    "broadcast": _pass_through,
}
