"""A program with its loops unrolled at the trip counts they take on given arguments.

The check allows an approximation's error as the ops after it amplify it
(:mod:`heron.harness.error_propagation`), by moving each approximated op of a
straight-line computation and evaluating it again. Inside a while loop, an op
runs once per trip and its error is carried through every later trip: a loop
``x <- x + 7 cos(x)`` multiplies it by up to 8 a trip, so after six trips a
kernel whose cos is within its bound is thousands of ulps from the reference,
and XLA:CPU is as far. Counted once, the op's bound called such kernels wrong (a
helper's sweep of iterative algorithms found four: nested while loops, a
gradient through a rematerialised loop of tanh, an escape-time iteration).

:func:`unrolled` turns the entry computation into one straight line: each while
loop becomes as many copies of its body as it runs trips on these arguments
(decided by the reference evaluator, the condition evaluated on each state), each
conditional the branch it takes, each call its callee, nested ones likewise.
Error propagation then moves every trip's copy of an op on its own: the first-order
sum over trips that the loop's error is.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import attrs
import numpy as np

from heron.harness.error_propagation import error_propagation
from heron.harness.reference_values import value_of
from heron.harness.tolerance import leaf_of, output_sources
from heron.hlo.control_flow import branch_index, conditional_branches
from heron.hlo.errors import HloError
from heron.hlo.evaluator import evaluate_computation
from heron.hlo.ir import Computation, Instruction

__all__ = [
    "MAX_INSTRUCTIONS",
    "MAX_TRIPS",
    "has_control_flow",
    "LoopErrorPropagation",
    "Unrolled",
    "UnrolledProgram",
    "unrolled",
]

#: The most instructions an unrolled program may have: past it (a loop of thousands of
#: trips) the loop's approximations keep their bound counted once.
MAX_INSTRUCTIONS = 20_000
#: The most trips of one loop unrolled (a body of no instructions, its state passed
#: through, would otherwise never reach :data:`MAX_INSTRUCTIONS`).
MAX_TRIPS = 10_000

_CONTROL = ("while", "conditional", "call")


@attrs.frozen(eq=False)
class Unrolled:
    """The straight line (its parameters the entry's) and, per output leaf of the
    entry's root, the instruction of it that computes that output."""

    computation: Computation
    outputs: tuple[Instruction, ...]


class _TooLong(Exception):
    """The unrolled program would exceed :data:`MAX_INSTRUCTIONS` or a loop
    :data:`MAX_TRIPS`."""


def has_control_flow(instructions: Sequence[Instruction]) -> bool:
    """Whether any of ``instructions`` is a loop, a conditional or a call."""
    return any(inst.opcode in _CONTROL for inst in instructions)


def unrolled(entry: Computation, arguments: Sequence) -> Unrolled | None:
    """``entry`` without control flow on ``arguments`` (one value per parameter); None
    when it would exceed :data:`MAX_INSTRUCTIONS` or a value could not be evaluated."""
    tracer = _Tracer()
    try:
        root = tracer.trace(entry, list(entry.parameters), list(arguments))
    except (_TooLong, HloError):
        return None
    parameters = [p for p in entry.parameters if p is not None]
    computation = Computation(f"{entry.name}.unrolled", [*parameters, *tracer.emitted], root)
    return Unrolled(computation, tuple(output_sources(root)))


class _Tracer:
    def __init__(self) -> None:
        self.emitted: list[Instruction] = []

    def trace(
        self, computation: Computation, inputs: list[Instruction], values: list
    ) -> Instruction:
        """The instruction computing ``computation``'s root when its parameters are
        ``inputs`` (whose values are ``values``), every instruction copied into
        :attr:`emitted`."""
        copies: dict[Instruction, Instruction] = {}
        for inst in computation.post_order():
            if inst.opcode == "parameter":
                copies[inst] = inputs[inst.parameter_number]
            elif inst.opcode in _CONTROL:
                copies[inst] = self._control(computation, inst, copies, values)
            else:
                copy = inst.clone([copies[o] for o in inst.operands])
                self._emit(copy)
                copies[inst] = copy
        return copies[computation.root_instruction]

    def _control(self, computation, inst, copies, values) -> Instruction:
        operands = [copies[o] for o in inst.operands]
        operand_values = [value_of(computation, o, values) for o in inst.operands]
        if inst.opcode == "call":
            return self.trace(inst.called("to_apply"), operands, operand_values)
        if inst.opcode == "conditional":
            branches = conditional_branches(inst)
            index = branch_index(operand_values[0], len(branches))
            return self.trace(branches[index], [operands[index + 1]], [operand_values[index + 1]])
        condition, body = inst.called("condition"), inst.called("body")
        (state,), (value,) = operands, operand_values
        for _ in range(MAX_TRIPS):
            if not bool(np.asarray(evaluate_computation(condition, [value]))):
                return state
            state = self.trace(body, [state], [value])
            value = evaluate_computation(body, [value])
        raise _TooLong

    def _emit(self, instruction: Instruction) -> None:
        self.emitted.append(instruction)
        if len(self.emitted) > MAX_INSTRUCTIONS:
            raise _TooLong


class UnrolledProgram:
    """:func:`unrolled` of an entry on arguments, computed on first use (a check that
    passes never unrolls) and shared by the outputs that ask."""

    def __init__(self, entry: Computation, arguments: Sequence) -> None:
        self._entry, self._arguments = entry, list(arguments)
        self._program: Unrolled | None = None
        self._done = False

    @property
    def arguments(self) -> list:
        return self._arguments

    def get(self) -> Unrolled | None:
        if not self._done:
            self._program, self._done = unrolled(self._entry, self._arguments), True
        return self._program


@attrs.frozen(eq=False)
class LoopErrorPropagation:
    """Output ``output``'s approximation errors as every trip of the loops before it
    carries them on: :class:`heron.harness.error_propagation.ErrorPropagation` on the
    unrolled program, built only where the ulp bound refuses an element."""

    program: UnrolledProgram
    output: int
    op_ulps: Callable[[Instruction], int]

    def accepts(self, kernel: np.ndarray, reference: np.ndarray) -> np.ndarray:
        unrolled_program = self.program.get()
        amplified = None
        if unrolled_program is not None:
            outputs = list(unrolled_program.outputs)
            amplified = error_propagation(
                outputs[self.output],
                unrolled_program.computation,
                self.program.arguments,
                op_ulps=self.op_ulps,
                leaf=leaf_of(outputs, self.output),
            )
        if amplified is None:
            return np.zeros(np.asarray(kernel).size, np.bool_)
        return amplified.accepts(kernel, reference)
