"""The ``vector`` dialect (``vector.load``/``store`` are in :mod:`~.memory`).

A vector value is a numpy array with the vector's shape as trailing axes,
after a lane axis when it differs between lanes (:mod:`~..lanes`); the type
says which (:func:`lead`). Element positions count from the first trailing
axis; dynamic positions (``static_position`` entries equal to
``ShapedType::kDynamic``, taken from the operands in order) may differ per
lane, and one out of range in an active lane is an ``out-of-bounds`` finding
(LLVM says poison).

``vector.reduction`` combines left to right, starting from the accumulator
when there is one: ``((acc op v0) op v1) ...``, what LLVM's ordered
``llvm.vector.reduce.fadd``/``fmul`` compute without ``reassoc`` (the
integer and min/max kinds do not depend on the order).
"""

from __future__ import annotations

import numpy as np

from heron.runtime.interpreter.engine import Frame, semantics
from heron.runtime.interpreter.program import Op
from heron.runtime.interpreter.semantics import arith
from heron.runtime.interpreter.semantics import math as math_semantics
from heron.runtime.interpreter.semantics.arith import element_type, unsigned, wrap
from heron.runtime.interpreter.types import (
    FloatType,
    IntegerType,
    VectorType,
    parse_type,
)

#: ``ShapedType::kDynamic``: a position given by an operand.
DYNAMIC = -(1 << 63)


def _shape(type_text: str) -> tuple[int, ...]:
    t = parse_type(type_text)
    return t.shape if isinstance(t, VectorType) else ()


def lead(value, type_text: str) -> int:
    """1 when ``value`` has a lane axis (it differs between lanes), else 0."""
    return np.ndim(value) - len(_shape(type_text))


def with_lanes(frame: Frame, value, type_text: str) -> np.ndarray:
    """``value`` with its lane axis, materialised when uniform."""
    return frame.per_lane(value, type_text)


def _positions(frame: Frame, op: Op, dynamic: list) -> list:
    """The ``static_position`` entries, dynamic ones replaced by their operands (int64)."""
    positions = []
    operands = iter(dynamic)
    for p in op.attributes.get("static_position", []):
        positions.append(np.asarray(next(operands)).astype(np.int64) if p == DYNAMIC else int(p))
    return positions


def _check_positions(frame: Frame, op: Op, positions: list, shape) -> list:
    """Positions with dynamic out-of-range ones reported (active lanes) and clamped."""
    checked = []
    for k, (p, size) in enumerate(zip(positions, shape, strict=False)):
        if isinstance(p, int):
            if not 0 <= p < size:
                raise frame.unsupported(op, f"position {p} of dimension {k} is not in [0, {size})")
            checked.append(p)
            continue
        bad = (p < 0) | (p >= size)
        if bad.any():
            frame.fail(
                "out-of-bounds",
                op,
                np.broadcast_to(bad, (frame.lanes.size,)) if bad.ndim else bad,
                lambda lane, p=p, size=size, k=k: (
                    f"position {int(np.broadcast_to(p, (frame.lanes.size,))[lane])} of dimension"
                    f" {k} is out of range for a vector dimension of {size}"
                ),
            )
        checked.append(np.clip(p, 0, size - 1))
    return checked


def _per_lane_positions(positions: list) -> bool:
    return any(np.ndim(p) > 0 for p in positions)


@semantics("vector.extract")
def extract(frame: Frame, op: Op) -> None:
    source, *dynamic = frame.operands(op)
    source_type = op.operand_types[0]
    positions = _check_positions(frame, op, _positions(frame, op, dynamic), _shape(source_type))
    if not _per_lane_positions(positions):
        index = (slice(None),) * lead(source, source_type) + tuple(positions)
        frame.set_result(op, np.asarray(source)[index].copy())
        return
    full = with_lanes(frame, source, source_type)
    lanes = np.arange(frame.lanes.size)
    index = (lanes, *(np.broadcast_to(p, lanes.shape) for p in positions))
    frame.set_result(op, full[index])


@semantics("vector.insert")
def insert(frame: Frame, op: Op) -> None:
    value, dest, *dynamic = frame.operands(op)
    dest_type = op.operand_types[1]
    positions = _check_positions(frame, op, _positions(frame, op, dynamic), _shape(dest_type))
    value_type = op.operand_types[0]
    if not _per_lane_positions(positions) and lead(value, value_type) == 0:
        out = np.array(dest, copy=True)
        index = (slice(None),) * lead(dest, dest_type) + tuple(positions)
        out[index] = value
        frame.set_result(op, out)
        return
    out = with_lanes(frame, dest, dest_type).copy()
    lanes = np.arange(frame.lanes.size)
    index = (lanes, *(np.broadcast_to(p, lanes.shape) for p in positions))
    out[index] = with_lanes(frame, value, value_type)
    frame.set_result(op, out)


@semantics("vector.extractelement")
def extract_element(frame: Frame, op: Op) -> None:
    source, *position = frame.operands(op)
    source_type = op.operand_types[0]
    positions = _check_positions(
        frame, op, [np.asarray(p).astype(np.int64) for p in position] or [0], _shape(source_type)
    )
    full = with_lanes(frame, source, source_type)
    lanes = np.arange(frame.lanes.size)
    result = full[(lanes, *(np.broadcast_to(p, lanes.shape) for p in positions))]
    frame.set_result(op, result)


@semantics("vector.insertelement")
def insert_element(frame: Frame, op: Op) -> None:
    value, dest, *position = frame.operands(op)
    dest_type = op.operand_types[1]
    positions = _check_positions(
        frame, op, [np.asarray(p).astype(np.int64) for p in position] or [0], _shape(dest_type)
    )
    out = with_lanes(frame, dest, dest_type).copy()
    lanes = np.arange(frame.lanes.size)
    out[(lanes, *(np.broadcast_to(p, lanes.shape) for p in positions))] = np.broadcast_to(
        value, lanes.shape
    )
    frame.set_result(op, out)


@semantics("vector.from_elements")
def from_elements(frame: Frame, op: Op) -> None:
    shape = _shape(op.result_types[0])
    elements = frame.operands(op)
    if all(np.ndim(e) == 0 for e in elements):
        frame.set_result(op, np.array(elements).reshape(shape))
        return
    lanes = frame.lanes.size
    stacked = np.stack([np.broadcast_to(e, (lanes,)) for e in elements], axis=-1)
    frame.set_result(op, stacked.reshape((lanes, *shape)))


@semantics("vector.broadcast", "vector.splat")
def broadcast(frame: Frame, op: Op) -> None:
    (source,) = frame.operands(op)
    shape = _shape(op.result_types[0])
    source_shape = _shape(op.operand_types[0])
    source = np.asarray(source)
    if lead(source, op.operand_types[0]) == 0:
        frame.set_result(op, np.broadcast_to(source, shape).copy())
        return
    inserted = source.reshape(
        (source.shape[0],) + (1,) * (len(shape) - len(source_shape)) + source_shape
    )
    frame.set_result(op, np.broadcast_to(inserted, (source.shape[0], *shape)).copy())


@semantics("vector.shape_cast")
def shape_cast(frame: Frame, op: Op) -> None:
    (source,) = frame.operands(op)
    source = np.asarray(source)
    shape = _shape(op.result_types[0])
    lanes = source.shape[:1] if lead(source, op.operand_types[0]) else ()
    frame.set_result(op, source.reshape((*lanes, *shape)))


def _to_bits(values: np.ndarray, element) -> np.ndarray:
    """Each element's ``width`` bits, low first, as a trailing axis of 0/1 uint64."""
    if isinstance(element, FloatType):
        raw = np.ascontiguousarray(values).view(f"u{element.dtype.itemsize}").astype(np.uint64)
    else:
        raw = unsigned(values, element).astype(np.uint64)
    return (raw[..., None] >> np.arange(element.width, dtype=np.uint64)) & np.uint64(1)


def _from_bits(bits: np.ndarray, element) -> np.ndarray:
    raw = (bits << np.arange(element.width, dtype=np.uint64)).sum(axis=-1, dtype=np.uint64)
    if isinstance(element, FloatType):
        return raw.astype(f"u{element.dtype.itemsize}").view(element.dtype)
    return wrap(raw, element)


@semantics("vector.bitcast")
def bitcast(frame: Frame, op: Op) -> None:
    """The same bits, the last dimension regrouped (element 0 in the low bits)."""
    (source,) = frame.operands(op)
    source = np.asarray(source)
    source_element = element_type(op.operand_types[0])
    target_type = parse_type(op.result_types[0])
    bits = _to_bits(source, source_element)
    bits = bits.reshape(bits.shape[:-2] + (-1,))
    bits = bits.reshape(bits.shape[:-1] + (target_type.shape[-1], target_type.element.width))
    frame.set_result(op, _from_bits(bits, target_type.element))


@semantics("vector.extract_strided_slice")
def extract_strided_slice(frame: Frame, op: Op) -> None:
    (source,) = frame.operands(op)
    offsets, sizes = op.attributes["offsets"], op.attributes["sizes"]
    strides = op.attributes.get("strides") or [1] * len(offsets)
    index = tuple(
        slice(o, o + s * st, st) for o, s, st in zip(offsets, sizes, strides, strict=True)
    )
    lanes = (slice(None),) * lead(source, op.operand_types[0])
    frame.set_result(op, np.asarray(source)[lanes + index].copy())


@semantics("vector.insert_strided_slice")
def insert_strided_slice(frame: Frame, op: Op) -> None:
    source, dest = frame.operands(op)
    source_shape = _shape(op.operand_types[0])
    dest_type = op.operand_types[1]
    offsets = op.attributes["offsets"]
    strides = op.attributes.get("strides") or [1] * len(source_shape)
    outer = len(offsets) - len(source_shape)
    index = tuple(offsets[:outer]) + tuple(
        slice(o, o + s * st, st)
        for o, s, st in zip(offsets[outer:], source_shape, strides, strict=True)
    )
    if lead(source, op.operand_types[0]) == 0 and lead(dest, dest_type) == 0:
        out = np.array(dest, copy=True)
        out[index] = source
    else:
        out = with_lanes(frame, dest, dest_type).copy()
        out[(slice(None),) + index] = with_lanes(frame, source, op.operand_types[0])
    frame.set_result(op, out)


def _combine(kind: str, element, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """One step of a reduction of ``kind`` (the ``#vector.kind`` keyword)."""
    if isinstance(element, FloatType):
        floats = {
            "add": np.add,
            "mul": np.multiply,
        }
        if kind in floats:
            return arith.float_binary(a, b, element.dtype, floats[kind])
        if kind in ("maximumf", "minimumf"):
            return arith.maximum(a, b, kind == "maximumf")
        if kind in ("maxnumf", "minnumf", "maxf", "minf"):
            return arith.maximum_number(a, b, kind.startswith("max"))
        raise ValueError(kind)
    sa, sb = arith.signed(a, element), arith.signed(b, element)
    ua, ub = unsigned(a, element), unsigned(b, element)
    integer = {
        "add": lambda: sa + sb,
        "mul": lambda: sa * sb,
        "and": lambda: sa & sb,
        "or": lambda: sa | sb,
        "xor": lambda: sa ^ sb,
        "minsi": lambda: np.minimum(sa, sb),
        "maxsi": lambda: np.maximum(sa, sb),
        "minui": lambda: np.minimum(ua, ub),
        "maxui": lambda: np.maximum(ua, ub),
    }
    return wrap(integer[kind](), element)


def _kind(frame: Frame, op: Op) -> str:
    text = str(op.attributes.get("kind", ""))
    return text.rstrip(">").split("<")[-1].strip()


@semantics("vector.reduction")
def reduction(frame: Frame, op: Op) -> None:
    source, *accumulator = frame.operands(op)
    source_type = op.operand_types[0]
    element = element_type(source_type)
    kind = _kind(frame, op)
    if len(_shape(source_type)) != 1:
        raise frame.unsupported(op, "a reduction of a vector that is not 1-D")
    source = np.asarray(source)
    count = _shape(source_type)[0]
    try:
        value = accumulator[0] if accumulator else source[..., 0]
        for k in range(0 if accumulator else 1, count):
            value = _combine(kind, element, value, source[..., k])
    except (ValueError, KeyError):
        raise frame.unsupported(op, f"reduction kind '{kind}' on {element}") from None
    frame.set_result(op, value)


@semantics("vector.fma")
def vector_fma(frame: Frame, op: Op) -> None:
    a, b, c = frame.operands(op)
    dtype = element_type(op.result_types[0]).dtype
    frame.set_result(op, math_semantics.fused_multiply_add(a, b, c, dtype))


@semantics("vector.shuffle")
def shuffle(frame: Frame, op: Op) -> None:
    """Elements (of the leading vector dimension) of ``v1`` then ``v2``, picked by ``mask``."""
    first, second = frame.operands(op)
    types = op.operand_types
    a, b = with_lanes(frame, first, types[0]), with_lanes(frame, second, types[1])
    if not _shape(types[0]):
        a, b = a[:, None], b[:, None]
    joined = np.concatenate([a, b], axis=1)
    mask = [0 if m == -1 else m for m in op.attributes["mask"]]
    frame.set_result(op, joined[:, mask])


__all__ = ["DYNAMIC", "IntegerType", "lead", "with_lanes"]
