"""Dataflow values and the buffers they share: which bytes each array leaf lives in.

Every array leaf an instruction produces is a *value*. Some instructions
produce no new bytes: ``tuple``, ``get-tuple-element``, ``bitcast`` and
``optimization-barrier`` only name their operands' values again (views), and a
sequential sub-computation's parameter names its caller's operand. Others
write their result into an operand's bytes: a ``while`` keeps its state in
place (the init values, the body's parameter and root, the condition's
parameter and the loop's result are one buffer per leaf), ``dynamic-update-
slice`` and ``scatter`` update their first operand(s), and so does a fusion
whose root is one of those applied to a fusion parameter. A ``conditional`` or
``call`` result lives where each branch's root lives. A *buffer* is a class of
values that must share bytes; it is what buffer assignment places. An entry
output that the module's ``input_output_alias`` names is in its donated
parameter's buffer (:mod:`heron.hlo.input_output_alias`).

Only the entry and the computations it reaches through ``while``,
``conditional`` and ``call`` hold buffers (the *sequential* computations, run
one instruction after another); fusion bodies and scalar computations
(reducers, comparators) are the inside of one instruction. Copy insertion
makes these classes safe (no value in a buffer is overwritten while still
needed); this module only computes them.
"""

from __future__ import annotations

from collections.abc import Iterator

import attrs

from heron.hlo.errors import UnsupportedError
from heron.hlo.fusion_outputs import fusion_roots
from heron.hlo.input_output_alias import input_output_aliases, leaf_number
from heron.hlo.ir import Computation, Instruction, Module
from heron.hlo.memory_layout import memory_bytes
from heron.hlo.shapes import ArrayShape, TupleShape

__all__ = [
    "VIEW_OPCODES",
    "Dataflow",
    "Value",
    "analyze_dataflow",
    "in_place_operands",
    "sequential_callees",
    "sequential_computations",
]

#: Opcodes whose result is their operands' bytes under another name.
VIEW_OPCODES = frozenset({"tuple", "get-tuple-element", "bitcast", "optimization-barrier"})

_UPDATERS = frozenset({"dynamic-update-slice", "scatter"})


def _updated_operands(inst: Instruction) -> list[tuple[int, int]]:
    """(result leaf, operand number) pairs a dynamic-update-slice or scatter writes in place."""
    if inst.opcode == "dynamic-update-slice":
        return [(0, 0)]
    if inst.opcode == "scatter":
        count = (len(inst.operands) - 1) // 2
        return [(k, k) for k in range(count)]
    return []


def in_place_operands(inst: Instruction) -> list[tuple[int, int]]:
    """(result leaf, operand number): the operands ``inst`` updates in place.

    A fusion updates operand ``p`` in place when its root (or an element of
    its root tuple) is a dynamic-update-slice or scatter whose updated operand
    is fused parameter ``p`` and nothing else in the fusion reads that
    parameter, nor the update's result (a multi-output fusion whose other root
    reads the updated array reads, in other threads, the bytes it writes):
    the kernel then writes only the updated window, and the rest of the bytes
    are the operand's (what XLA's emitters do for such fusions).
    """
    if inst.opcode in _UPDATERS:
        return _updated_operands(inst)
    if inst.opcode != "fusion":
        return []
    body = inst.called("calls")
    parts = fusion_roots(body)
    # Each root one result leaf: a root of tuple shape (a variadic scatter) is no
    # in-place update of one operand, and would shift the leaves after it.
    if not all(isinstance(p.shape, ArrayShape) for p in parts):
        return []
    users = body.users()
    root = body.root
    pairs: list[tuple[int, int]] = []
    for leaf, part in enumerate(parts):
        if any(user is not root for user in users.get(part, [])):
            continue  # the updated array is read in the fusion too
        for _, operand in _updated_operands(part):
            param = part.operands[operand]
            if (
                param.opcode == "parameter"
                and param.parameter_number is not None
                and len(users.get(param, [])) == 1
                and param.shape == part.shape
            ):
                pairs.append((leaf, param.parameter_number))
    return pairs


def sequential_callees(inst: Instruction) -> list[Computation]:
    """The computations ``inst`` runs instruction by instruction, in the order they run."""
    if inst.opcode == "while":
        return [inst.called("condition"), inst.called("body")]
    if inst.opcode == "conditional":
        refs = inst.attributes.get("branch_computations")
        if refs is not None:
            return list(inst.called_computations())
        return [inst.called("true_computation"), inst.called("false_computation")]
    if inst.opcode == "call":
        return [inst.called("to_apply")]
    return []


def sequential_computations(module: Module) -> list[Computation]:
    """The entry and what it reaches through while/conditional/call, callers first.

    A computation reached twice would need two sets of buffers: like XLA
    (which flattens its call graph first), heron refuses it, naming it.
    """
    order: list[Computation] = []
    seen: dict[int, Instruction | None] = {id(module.entry): None}
    stack = [module.entry]
    while stack:
        computation = stack.pop()
        order.append(computation)
        for inst in computation.instructions:
            for callee in sequential_callees(inst):
                if id(callee) in seen:
                    raise UnsupportedError(
                        f"computation '{callee.name}' is run by more than one instruction"
                        f" ('{inst.name}' and another); buffer assignment needs a flat call"
                        " graph (one caller per computation)"
                    )
                seen[id(callee)] = inst
                stack.append(callee)
    return order


@attrs.frozen
class Value:
    """One array leaf defined by one instruction (``leaf``: depth-first leaf number)."""

    id: int
    instruction: Instruction
    leaf: int
    shape: ArrayShape

    @property
    def size(self) -> int:
        return 0 if self.shape.is_token else memory_bytes(self.shape)

    def __str__(self) -> str:
        suffix = f"{{{self.leaf}}}" if isinstance(self.instruction.shape, TupleShape) else ""
        return f"{self.instruction.name}{suffix}"


@attrs.define
class Dataflow:
    """Values, the buffer of each, and the value ids held at each instruction's leaves."""

    values: list[Value] = attrs.field(factory=list)
    #: id(instruction) -> the value id at each array leaf of its result (depth first).
    leaves: dict[int, list[int]] = attrs.field(factory=dict)
    #: Union-find parent of each value id.
    _parent: list[int] = attrs.field(factory=list)
    computations: list[Computation] = attrs.field(factory=list)

    def define(self, inst: Instruction) -> list[int]:
        ids = []
        for leaf, shape in enumerate(inst.shape.leaves()):
            value = Value(len(self.values), inst, leaf, shape)
            self.values.append(value)
            self._parent.append(value.id)
            ids.append(value.id)
        return ids

    def buffer(self, value_id: int) -> int:
        """The representative value id of ``value_id``'s buffer."""
        root = value_id
        while self._parent[root] != root:
            root = self._parent[root]
        while self._parent[value_id] != root:
            self._parent[value_id], value_id = root, self._parent[value_id]
        return root

    def union(self, a: int, b: int) -> None:
        ra, rb = self.buffer(a), self.buffer(b)
        if ra != rb:
            self._parent[max(ra, rb)] = min(ra, rb)

    def leaf_buffers(self, inst: Instruction) -> list[int]:
        """The buffer of each array leaf of ``inst``'s result."""
        return [self.buffer(v) for v in self.leaves[id(inst)]]

    def buffers(self) -> dict[int, list[Value]]:
        """Buffer -> its values, in definition order."""
        result: dict[int, list[Value]] = {}
        for value in self.values:
            result.setdefault(self.buffer(value.id), []).append(value)
        return result

    def instructions(self) -> Iterator[Instruction]:
        for computation in self.computations:
            yield from computation.instructions


def _leaf_range(shape: TupleShape, index: int) -> tuple[int, int]:
    start = sum(sum(1 for _ in e.leaves()) for e in shape.elements[:index])
    return start, start + sum(1 for _ in shape.elements[index].leaves())


def analyze_dataflow(module: Module) -> Dataflow:
    """Values and buffers of every sequential computation, in each one's instruction order."""
    flow = Dataflow()
    flow.computations = sequential_computations(module)
    _walk(flow, module.entry, None)
    _donate(flow, module)
    return flow


def _donate(flow: Dataflow, module: Module) -> None:
    """Each output the header's ``input_output_alias`` names lives in its parameter's
    buffer (copy insertion has made that safe: :mod:`heron.hlo.passes.copy_insertion`)."""
    entry = module.entry
    root = entry.root_instruction
    outputs = flow.leaves[id(root)]
    parameters = {p.parameter_number: p for p in entry.parameters}
    for alias in input_output_aliases(module):
        param = parameters[alias.parameter_number]
        donated = flow.leaves[id(param)][leaf_number(param.shape, alias.parameter_index)]
        flow.union(outputs[leaf_number(root.shape, alias.output_index)], donated)


def _walk(flow: Dataflow, computation: Computation, arguments: list[list[int]] | None) -> None:
    for inst in computation.post_order():
        _visit(flow, inst, arguments)


def _visit(flow: Dataflow, inst: Instruction, arguments: list[list[int]] | None) -> None:
    op = inst.opcode
    leaves = flow.leaves
    if op == "parameter" and arguments is not None:
        leaves[id(inst)] = list(arguments[inst.parameter_number or 0])
    elif op == "tuple":
        leaves[id(inst)] = [v for operand in inst.operands for v in leaves[id(operand)]]
    elif op == "get-tuple-element":
        operand = inst.operands[0]
        start, stop = _leaf_range(operand.shape, int(inst.attr("index")))  # type: ignore[arg-type]
        leaves[id(inst)] = leaves[id(operand)][start:stop]
    elif op in ("bitcast", "optimization-barrier"):
        leaves[id(inst)] = list(leaves[id(inst.operands[0])])
    elif op == "while":
        state = list(leaves[id(inst.operands[0])])
        condition, body = sequential_callees(inst)
        _walk(flow, condition, [state])
        _walk(flow, body, [state])
        for init, result in zip(state, leaves[id(body.root_instruction)], strict=True):
            flow.union(init, result)
        leaves[id(inst)] = state
    elif op in ("conditional", "call"):
        mine = flow.define(inst)
        leaves[id(inst)] = mine
        for k, callee in enumerate(sequential_callees(inst)):
            if op == "conditional":
                args = [list(leaves[id(inst.operands[k + 1])])]
            else:
                args = [list(leaves[id(operand)]) for operand in inst.operands]
            _walk(flow, callee, args)
            for value, result in zip(mine, leaves[id(callee.root_instruction)], strict=True):
                flow.union(value, result)
    else:
        mine = flow.define(inst)
        leaves[id(inst)] = mine
        for leaf, operand in in_place_operands(inst):
            (updated,) = leaves[id(inst.operands[operand])]
            flow.union(mine[leaf], updated)
