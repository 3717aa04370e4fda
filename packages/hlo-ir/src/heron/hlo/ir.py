"""The HLO object graph: instructions, computations, modules.

Instructions refer to their operands directly (a graph, not names), so passes
can rewrite in place. Identity is object identity; ``structurally_equal``
compares two modules the way ``parse(print(m)) == m`` means it: same names,
opcodes, shapes, operands, attributes and constants, in the same order.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import attrs
import numpy as np

from heron.hlo.attributes import ComputationRef
from heron.hlo.errors import HloVerifyError, SourceLocation
from heron.hlo.shapes import ArrayShape, Shape

Literal = Any  # np.ndarray for arrays, tuple[Literal, ...] for tuples


@attrs.define(eq=False, repr=False)
class Instruction:
    """One HLO instruction.

    ``attributes`` holds every ``name=value`` after the operand list, in text
    order, with typed values (see ``heron.hlo.attributes``). A constant's value
    is ``literal`` (a numpy array of the shape's dtype, or a tuple of them); a
    parameter's index is ``parameter_number``.
    """

    name: str
    opcode: str
    shape: Shape
    operands: list[Instruction] = attrs.field(factory=list)
    attributes: dict[str, Any] = attrs.field(factory=dict)
    literal: Literal | None = None
    parameter_number: int | None = None
    location: SourceLocation | None = None
    parent: Computation | None = None

    def __repr__(self) -> str:
        return f"<Instruction {self.name} = {self.shape} {self.opcode}>"

    # -- convenience ---------------------------------------------------------
    def clone(self, operands: list[Instruction], name: str | None = None) -> Instruction:
        """This instruction over other ``operands`` (and under ``name``): same opcode,
        shape, attributes (a dict of its own), constant, parameter number and source
        location; in no computation until one adds it."""
        return Instruction(
            name=self.name if name is None else name,
            opcode=self.opcode,
            shape=self.shape,
            operands=operands,
            attributes=dict(self.attributes),
            literal=self.literal,
            parameter_number=self.parameter_number,
            location=self.location,
        )

    @property
    def array_shape(self) -> ArrayShape:
        """The shape, asserting it is an array (most ops)."""
        if not isinstance(self.shape, ArrayShape):
            raise HloVerifyError(
                f"'{self.name}' ({self.opcode}) has tuple shape {self.shape}"
                " where an array is needed",
                self.location,
            )
        return self.shape

    def attr(self, name: str, default: Any = None) -> Any:
        return self.attributes.get(name, default)

    def called_computations(self) -> list[Computation]:
        """Computations this instruction calls, in attribute order."""
        result: list[Computation] = []
        for value in self.attributes.values():
            refs = value if isinstance(value, tuple) else (value,)
            for ref in refs:
                if isinstance(ref, ComputationRef) and ref.computation is not None:
                    result.append(ref.computation)
        return result

    def called(self, attribute: str) -> Computation:
        """The computation named by attribute ``attribute`` (e.g. ``to_apply``)."""
        ref = self.attributes.get(attribute)
        if not isinstance(ref, ComputationRef) or ref.computation is None:
            raise HloVerifyError(
                f"'{self.name}' ({self.opcode}) needs attribute {attribute}=<computation>",
                self.location,
            )
        return ref.computation


@attrs.define(eq=False, repr=False)
class Computation:
    """A named list of instructions with one root.

    ``instructions`` is in text order (operands may appear after their users
    in text; ``post_order`` gives a def-before-use order). ``parameters`` is
    indexed by parameter number.
    """

    name: str
    instructions: list[Instruction] = attrs.field(factory=list)
    root: Instruction | None = None
    is_entry: bool = False
    location: SourceLocation | None = None
    #: Text of the computation's attributes after its signature, kept verbatim
    #: (e.g. ``execution_thread="main"``); empty when none.
    trailing_attributes: str = ""

    def __repr__(self) -> str:
        return f"<Computation {self.name} ({len(self.instructions)} instructions)>"

    @property
    def parameters(self) -> list[Instruction]:
        params = [i for i in self.instructions if i.opcode == "parameter"]
        params.sort(key=lambda i: i.parameter_number if i.parameter_number is not None else -1)
        return params

    @property
    def root_instruction(self) -> Instruction:
        if self.root is None:
            raise HloVerifyError(f"computation '{self.name}' has no root", self.location)
        return self.root

    def instruction(self, name: str) -> Instruction:
        for inst in self.instructions:
            if inst.name == name:
                return inst
        raise KeyError(f"no instruction '{name}' in computation '{self.name}'")

    def add(self, instruction: Instruction) -> Instruction:
        instruction.parent = self
        self.instructions.append(instruction)
        return instruction

    def users(self) -> dict[Instruction, list[Instruction]]:
        """Map from each instruction to its users (in instruction order, with repeats)."""
        result: dict[Instruction, list[Instruction]] = {i: [] for i in self.instructions}
        for inst in self.instructions:
            for op in inst.operands:
                result.setdefault(op, []).append(inst)
        return result

    def post_order(self) -> list[Instruction]:
        """Every instruction after all its operands (the root last when reachable, but for
        unused instructions that read it).

        Raises ``HloVerifyError`` naming an instruction on a cycle if there is one.
        The order is a depth-first walk from each instruction in list order, operands
        in order: an instruction whose operands are all placed keeps its place, so
        a list that is one already (each instruction after its operands, the root
        last: what parsing and the passes mostly leave) comes back as it is, and one
        a rewrite disturbed in a few places costs a set lookup per instruction and a
        walk from those places only (the fusion passes ask after every fusion they
        install, thousands of times for a model of a few thousand kernels).
        """
        instructions = self.instructions
        placed: set[Instruction] = set()  # by identity (eq=False): a C-level check each
        in_place = 0  # the leading instructions already after their operands
        for inst in instructions:
            if inst in placed or not placed.issuperset(inst.operands):
                break
            placed.add(inst)
            in_place += 1
        else:
            if self.root is None or not instructions or instructions[-1] is self.root:
                return list(instructions)
        order = instructions[:in_place]
        for start in instructions[in_place:]:
            if start in placed:
                continue
            if placed.issuperset(start.operands):
                placed.add(start)
                order.append(start)
                continue
            self._walk(start, placed, order)
        if self.root is not None and order and order[-1] is not self.root:
            # Keep the root last: unused instructions come before it, but for those that
            # read it (dead code JAX leaves after a root constant), which follow it.
            order = _root_last(order, self.root)
        return order

    def _walk(self, start: Instruction, placed: set[Instruction], order: list[Instruction]) -> None:
        """Place ``start`` after its operands not yet placed, depth first, operands in order."""
        visiting: set[Instruction] = {start}
        stack: list[tuple[Instruction, int]] = [(start, 0)]
        while stack:
            inst, next_operand = stack[-1]
            if next_operand < len(inst.operands):
                stack[-1] = (inst, next_operand + 1)
                op = inst.operands[next_operand]
                if op in placed:
                    continue
                if op in visiting:
                    raise HloVerifyError(
                        f"cycle in computation '{self.name}': '{op.name}' depends on itself"
                        f" (through '{inst.name}')",
                        op.location,
                    )
                visiting.add(op)
                stack.append((op, 0))
            else:
                stack.pop()
                visiting.discard(inst)
                placed.add(inst)
                order.append(inst)


def _root_last(order: list[Instruction], root: Instruction) -> list[Instruction]:
    """``order`` (each instruction after its operands) with ``root`` moved as late as it
    can go: after everything but the instructions that read it, directly or not."""
    at = next(k for k, inst in enumerate(order) if inst is root)
    reading: set[Instruction] = {root}
    others: list[Instruction] = []
    readers: list[Instruction] = []
    for inst in order[at + 1 :]:
        if reading.intersection(inst.operands):
            reading.add(inst)
            readers.append(inst)
        else:
            others.append(inst)
    return [*order[:at], *others, root, *readers]


@attrs.define(eq=False, repr=False)
class Module:
    """An HLO module: computations in text order, one of them the entry.

    ``header`` keeps the ``HloModule`` line's attributes (typed where heron
    reads them, ``RawAttribute`` otherwise). ``sections`` keeps the debug
    sections of recent dumps (FileNames, FunctionNames, FileLocations,
    StackFrames) as ``(title, lines)`` so printing gives them back.
    ``fusion_under_test`` is set when the text had no ENTRY (the corpus form):
    it names the fusion computation the synthesised entry calls.
    ``layouts_assigned`` is set by layout assignment: from then on every
    shape has a layout and the verifier checks that shapes naming one buffer
    agree on it (:mod:`heron.hlo.forwarded_layouts`; XLA's layout-sensitive
    verification). It is a state of the compile, not of the text, so it is
    not printed. Nor is ``names_elsewhere``: for a module that lists part of a
    larger one (control-flow fusion's view of one loop body and what it calls),
    the instruction and computation names the rest holds, which a pass naming
    something new must not take (HLO names are unique in the whole module).
    """

    name: str
    computations: list[Computation] = attrs.field(factory=list)
    header: dict[str, Any] = attrs.field(factory=dict)
    sections: list[tuple[str, tuple[str, ...]]] = attrs.field(factory=list)
    fusion_under_test: str | None = None
    source: str = "<string>"
    layouts_assigned: bool = False
    names_elsewhere: frozenset[str] = frozenset()

    def __repr__(self) -> str:
        return f"<Module {self.name} ({len(self.computations)} computations)>"

    @property
    def entry(self) -> Computation:
        for comp in self.computations:
            if comp.is_entry:
                return comp
        raise HloVerifyError(f"module '{self.name}' has no ENTRY computation")

    def computation(self, name: str) -> Computation:
        for comp in self.computations:
            if comp.name == name:
                return comp
        raise KeyError(f"no computation '{name}' in module '{self.name}'")

    def instructions(self) -> Iterator[Instruction]:
        for comp in self.computations:
            yield from comp.instructions

    def copy(self) -> Module:
        """An independent copy, what ``copy.deepcopy`` makes, in a fifth of its time
        (a compile starts from one: :func:`heron.compiler.executable.prepare_module`).

        Computations, instructions, their operand lists and attribute dicts, the
        computation references and constants' arrays are new; shapes, source
        locations and attribute records are immutable and shared.
        """
        copied: dict[Computation, Computation] = {}
        for comp in self.computations:
            copied[comp] = Computation(
                name=comp.name,
                is_entry=comp.is_entry,
                location=comp.location,
                trailing_attributes=comp.trailing_attributes,
            )
        for comp in self.computations:
            _copy_body(comp, copied)
        return Module(
            name=self.name,
            computations=[copied[comp] for comp in self.computations],
            header=dict(self.header),
            sections=list(self.sections),
            fusion_under_test=self.fusion_under_test,
            source=self.source,
            layouts_assigned=self.layouts_assigned,
            names_elsewhere=self.names_elsewhere,
        )

    def structurally_equal(self, other: Module) -> bool:
        return structural_difference(self, other) is None

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Module) and self.structurally_equal(other)

    __hash__ = object.__hash__


def _copy_body(comp: Computation, copied: dict[Computation, Computation]) -> None:
    """Fill ``copied[comp]`` with copies of ``comp``'s instructions (operands in the same
    computation, in any text order; references to the module's computations mapped)."""
    into = copied[comp]
    instructions: dict[Instruction, Instruction] = {}
    for inst in comp.instructions:
        instructions[inst] = Instruction(
            name=inst.name,
            opcode=inst.opcode,
            shape=inst.shape,
            attributes={k: _copy_value(v, copied) for k, v in inst.attributes.items()},
            literal=_copy_literal(inst.literal),
            parameter_number=inst.parameter_number,
            location=inst.location,
            parent=into,
        )
    for inst, clone in instructions.items():
        clone.operands = [instructions[operand] for operand in inst.operands]
    into.instructions = list(instructions.values())
    into.root = None if comp.root is None else instructions[comp.root]


def _copy_value(value: Any, copied: dict[Computation, Computation]) -> Any:
    """An attribute value for the copy: its computation references mapped (the other
    attribute records are frozen, so shared)."""
    if isinstance(value, ComputationRef):
        target = value.computation
        return ComputationRef(value.name, copied.get(target, target) if target else None)
    if isinstance(value, tuple) and any(isinstance(v, ComputationRef | tuple) for v in value):
        return tuple(_copy_value(v, copied) for v in value)
    return value


def _copy_literal(literal: Literal | None) -> Literal | None:
    if isinstance(literal, np.ndarray):
        return literal.copy()
    if isinstance(literal, tuple):
        return tuple(_copy_literal(part) for part in literal)
    return literal


# -- structural comparison ---------------------------------------------------


def structural_difference(a: Module, b: Module) -> str | None:
    """Describe the first difference between two modules, or None if equal."""
    if a.name != b.name:
        return f"module name {a.name!r} != {b.name!r}"
    if a.header != b.header:
        return f"header {a.header!r} != {b.header!r}"
    if a.sections != b.sections:
        return "debug sections differ"
    if a.fusion_under_test != b.fusion_under_test:
        return f"fusion_under_test {a.fusion_under_test!r} != {b.fusion_under_test!r}"
    if [c.name for c in a.computations] != [c.name for c in b.computations]:
        return "computation names or order differ"
    for ca, cb in zip(a.computations, b.computations):
        diff = _computation_difference(ca, cb)
        if diff is not None:
            return f"computation {ca.name}: {diff}"
    return None


def _computation_difference(a: Computation, b: Computation) -> str | None:
    if a.is_entry != b.is_entry:
        return "ENTRY flag differs"
    if (a.root.name if a.root else None) != (b.root.name if b.root else None):
        return "root differs"
    if a.trailing_attributes != b.trailing_attributes:
        return "computation attributes differ"
    if len(a.instructions) != len(b.instructions):
        return f"{len(a.instructions)} != {len(b.instructions)} instructions"
    for ia, ib in zip(a.instructions, b.instructions):
        diff = _instruction_difference(ia, ib)
        if diff is not None:
            return f"instruction {ia.name}: {diff}"
    return None


def _instruction_difference(a: Instruction, b: Instruction) -> str | None:
    if a.name != b.name:
        return f"name {a.name} != {b.name}"
    if a.opcode != b.opcode:
        return f"opcode {a.opcode} != {b.opcode}"
    if a.shape != b.shape:
        return f"shape {a.shape} != {b.shape}"
    if [o.name for o in a.operands] != [o.name for o in b.operands]:
        return "operands differ"
    if a.parameter_number != b.parameter_number:
        return "parameter number differs"
    if list(a.attributes) != list(b.attributes):
        return f"attribute names {list(a.attributes)} != {list(b.attributes)}"
    for key, va in a.attributes.items():
        vb = b.attributes[key]
        if va != vb:
            return f"attribute {key}: {va!r} != {vb!r}"
    if not literals_identical(a.literal, b.literal):
        return "constant values differ"
    return None


def literals_identical(a: Literal | None, b: Literal | None) -> bool:
    """Bit-for-bit equality of constants (so NaN == NaN, and -0.0 != 0.0)."""
    if a is None or b is None:
        return a is None and b is None
    if isinstance(a, tuple) or isinstance(b, tuple):
        return (
            isinstance(a, tuple)
            and isinstance(b, tuple)
            and len(a) == len(b)
            and all(literals_identical(x, y) for x, y in zip(a, b))
        )
    a = np.asarray(a)
    b = np.asarray(b)
    if a.dtype != b.dtype or a.shape != b.shape:
        return False
    if a.dtype.itemsize == 0 or a.size == 0:
        return True
    return a.tobytes() == b.tobytes()
