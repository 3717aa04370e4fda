"""What the while-loop passes ask of a loop's state: which element an instruction reads,
and whether a loop's computations are its own to rewrite.

A loop's state is a tuple; its body and condition read element ``k`` as
``get-tuple-element(parameter), index=k``, and a rewrite that changes the state
(drops an element, sinks one) must change both computations and every user of the
loop, which is only sound when no other instruction calls those computations.
"""

from __future__ import annotations

from collections import Counter

import attrs

from heron.hlo.ir import Computation, Instruction, Module

__all__ = [
    "TupleLoop",
    "call_counts",
    "is_exclusive",
    "state_element",
    "state_elements_read",
    "tuple_loop",
]


@attrs.frozen
class TupleLoop:
    """A loop whose init is a tuple instruction and whose body's root is one: its state
    elements are operands to read and rewrite one by one."""

    loop: Instruction
    init: Instruction
    condition: Computation
    body: Computation
    #: the body's root tuple: element ``k``'s update is ``root.operands[k]``
    root: Instruction
    body_state: Instruction
    condition_state: Instruction


def tuple_loop(loop: Instruction) -> TupleLoop | None:
    """``loop``'s parts, when its init and its body's root are tuple instructions."""
    init = loop.operands[0]
    condition, body = loop.called("condition"), loop.called("body")
    root = body.root_instruction
    if init.opcode != "tuple" or root.opcode != "tuple":
        return None
    (body_state,), (condition_state,) = body.parameters, condition.parameters
    return TupleLoop(loop, init, condition, body, root, body_state, condition_state)


def state_element(inst: Instruction, state: Instruction) -> int | None:
    """The element of ``state`` (a parameter or a loop) that ``inst`` reads, if it is a
    get-tuple-element of it; else None."""
    if inst.opcode == "get-tuple-element" and inst.operands[0] is state:
        return int(inst.attr("index"))
    return None


def state_elements_read(computation: Computation, parameter: Instruction) -> set[int] | None:
    """Which elements of ``parameter`` ``computation`` reads; None when it uses it whole."""
    reads: set[int] = set()
    for inst in computation.instructions:
        for operand in inst.operands:
            if operand is parameter:
                index = state_element(inst, parameter)
                if index is None:
                    return None
                reads.add(index)
    if computation.root is parameter:
        return None
    return reads


def call_counts(module: Module) -> Counter[Computation]:
    """How many instructions of ``module`` call each computation."""
    return Counter(
        called
        for computation in module.computations
        for inst in computation.instructions
        for called in inst.called_computations()
    )


def is_exclusive(loop: Instruction, calls: Counter[Computation]) -> bool:
    """Whether nothing but ``loop`` calls its condition and body (``calls``: call_counts)."""
    return all(calls[called] == 1 for called in loop.called_computations())
