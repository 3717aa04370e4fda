"""Memory operations: ``memref.load``/``store``, ``vector.load``/``store``,
``memref.get_global``, ``memref.alloca`` (see :mod:`~..memory` for the checks)."""

from __future__ import annotations

from heron.runtime.interpreter import memory
from heron.runtime.interpreter.engine import Frame, semantics
from heron.runtime.interpreter.program import Op
from heron.runtime.interpreter.types import MemRefType, VectorType, parse_type


def _vector_width(frame: Frame, op: Op, type_text: str) -> int:
    vtype = parse_type(type_text)
    if not isinstance(vtype, VectorType) or len(vtype.shape) != 1:
        raise frame.unsupported(op, f"vector accesses must be 1-D, not {type_text}")
    return vtype.shape[0]


@semantics("memref.load")
def memref_load(frame: Frame, op: Op) -> None:
    ref, *indices = frame.operands(op)
    flat = memory.flat_index(frame, op, ref, indices)
    frame.set_result(op, memory.read(frame, op, ref, flat))


@semantics("memref.store")
def memref_store(frame: Frame, op: Op) -> None:
    value, ref, *indices = frame.operands(op)
    flat = memory.flat_index(frame, op, ref, indices)
    memory.write(frame, op, ref, flat, value)


@semantics("vector.load")
def vector_load(frame: Frame, op: Op) -> None:
    ref, *indices = frame.operands(op)
    width = _vector_width(frame, op, op.result_types[0])
    flat = memory.flat_index(frame, op, ref, indices, width)
    memory.check_alignment(frame, op, ref, flat, op.attributes.get("alignment"))
    frame.set_result(op, memory.read(frame, op, ref, flat, width))


@semantics("vector.store")
def vector_store(frame: Frame, op: Op) -> None:
    value, ref, *indices = frame.operands(op)
    width = _vector_width(frame, op, op.operand_types[0])
    flat = memory.flat_index(frame, op, ref, indices, width)
    memory.check_alignment(frame, op, ref, flat, op.attributes.get("alignment"))
    memory.write(frame, op, ref, flat, value, width)


@semantics("memref.get_global")
def get_global(frame: Frame, op: Op) -> None:
    name = op.attributes["name"]
    found = frame.launch.globals_memory.get(name)
    if found is None:
        raise frame.unsupported(op, f"no memref.global '{name}' in the program")
    frame.set_result(op, memory.MemRef(found, parse_type(op.result_types[0])))


@semantics("memref.alloca")
def alloca(frame: Frame, op: Op) -> None:
    memref_type = parse_type(op.result_types[0])
    if not isinstance(memref_type, MemRefType) or op.operands:
        raise frame.unsupported(op, "only static allocas are supported")
    name = f"alloca #{op.number}"
    frame.set_result(op, memory.private_memref(frame.launch, memref_type, name))
