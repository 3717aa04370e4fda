"""Two independent checks of a buffer assignment: the bytes never clash.

- :func:`overlapping_buffers`: no two buffers whose live ranges overlap share
  a byte of one allocation (a static check of the placement);
- :func:`simulate`: run the module in schedule order with the reference
  evaluator, every array value stored in one byte array per allocation at its
  assigned offset and every operand read back from there. If a value's bytes
  were reused while it was still needed, or an in-place update or loop wrote
  over bytes something still reads, the result differs from
  ``evaluate_module``'s; the caller compares them bit for bit.

Both live here, beside the assignment, so that tests and tools run the same
checks; neither is used to build an assignment.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from heron.hlo.buffers.assignment import BufferAssignment, Slice
from heron.hlo.buffers.dataflow import VIEW_OPCODES, sequential_callees
from heron.hlo.evaluator.interpreter import (
    TOKEN,
    Evaluator,
    check_arguments,
    flatten_literal,
    handlers,
)
from heron.hlo.evaluator.interpreter import _handler_for as handler_for
from heron.hlo.ir import Computation, Instruction, Literal
from heron.hlo.memory_layout import from_memory, memory_dtype, to_memory
from heron.hlo.shapes import ArrayShape, Shape, TupleShape

__all__ = ["overlapping_buffers", "simulate"]

#: Every byte of memory starts as this, so a read of bytes nobody wrote is not silently zero.
POISON = 0xA5


def overlapping_buffers(assignment: BufferAssignment) -> list[tuple[int, int]]:
    """Pairs of buffers live at one time that share bytes of one allocation (empty: sound)."""
    clashes: list[tuple[int, int]] = []
    by_allocation: dict[int, list[tuple[int, Slice]]] = {}
    for buffer, where in assignment.slices.items():
        by_allocation.setdefault(where.allocation, []).append((buffer, where))
    for placed in by_allocation.values():
        for i, (a, sa) in enumerate(placed):
            for b, sb in placed[i + 1 :]:
                bytes_meet = sa.offset < sb.end and sb.offset < sa.end
                if bytes_meet and assignment.live_range(a).overlaps(assignment.live_range(b)):
                    clashes.append((a, b))
    return clashes


class _Memory:
    def __init__(self, assignment: BufferAssignment) -> None:
        self.assignment = assignment
        self.blocks = [np.full(a.size, POISON, np.uint8) for a in assignment.allocations]

    def write(self, inst: Instruction, value: Literal) -> None:
        leaves = flatten_literal(value)
        shapes = list(inst.shape.leaves())
        for where, shape, leaf in zip(
            self.assignment.leaf_slices(inst), shapes, leaves, strict=True
        ):
            if where is None or shape.is_token:
                continue
            raw = to_memory(np.asarray(leaf), shape).view(np.uint8).reshape(-1)
            block = self.blocks[where.allocation]
            block[where.offset : where.offset + raw.size] = raw

    def read(self, inst: Instruction) -> Literal:
        leaves = iter(zip(self.assignment.leaf_slices(inst), inst.shape.leaves(), strict=True))

        def build(shape: Shape) -> Any:
            if isinstance(shape, TupleShape):
                return tuple(build(e) for e in shape.elements)
            where, leaf = next(leaves)
            if where is None or leaf.is_token:
                return TOKEN
            assert isinstance(leaf, ArrayShape)
            raw = self.blocks[where.allocation][where.offset : where.offset + where.size]
            return from_memory(raw.view(memory_dtype(leaf.element_type)).copy(), leaf)

        return build(inst.shape)


def simulate(assignment: BufferAssignment, arguments: Sequence[Literal]) -> Literal:
    """The entry's result, computed through the assigned bytes (see the module docstring)."""
    module = assignment.module
    memory = _Memory(assignment)
    evaluator = Evaluator()
    handlers()  # build the tables before looking up handlers one by one
    for inst in assignment.flow.instructions():
        if inst.opcode == "constant":
            memory.write(inst, inst.literal)
    entry = module.entry
    for param, argument in zip(entry.parameters, check_arguments(entry, arguments)):
        memory.write(param, argument)
    _run(entry, memory, evaluator)
    return memory.read(entry.root_instruction)


def _run(computation: Computation, memory: _Memory, evaluator: Evaluator) -> None:
    for inst in computation.instructions:
        op = inst.opcode
        if op in VIEW_OPCODES or op in ("parameter", "constant"):
            continue  # no bytes written: the values are already where they belong
        if op == "while":
            condition, body = sequential_callees(inst)
            while True:
                _run(condition, memory, evaluator)
                if not bool(memory.read(condition.root_instruction)):
                    break
                _run(body, memory, evaluator)
            continue
        if op == "conditional":
            branches = sequential_callees(inst)
            selector = np.asarray(memory.read(inst.operands[0]))
            if selector.dtype == np.bool_:
                chosen = branches[0] if bool(selector) else branches[1]
            else:
                index = int(selector)
                chosen = branches[index if 0 <= index < len(branches) else len(branches) - 1]
            _run(chosen, memory, evaluator)
            continue
        if op == "call":
            _run(sequential_callees(inst)[0], memory, evaluator)
            continue
        operands = [memory.read(operand) for operand in inst.operands]
        with np.errstate(all="ignore"):
            value = handler_for(op, False)(evaluator, inst, operands)
        memory.write(inst, value)
