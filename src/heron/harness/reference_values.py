"""The reference evaluator's value of one instruction inside a computation.

The check's per-element tolerances (a reduction's summation bound, an arg-reduction's
NaN ties) need the values a fused computation's instructions take on the inputs the
kernel was given; the fusion's operands are evaluated at the entry, the rest here.
"""

from __future__ import annotations

from heron.hlo.ir import Computation, Instruction

__all__ = ["value_of"]


def value_of(computation: Computation, instruction: Instruction, arguments):
    """The reference value of one ``instruction`` of ``computation`` given its arguments:
    a parameter's argument, else the computation evaluated up to that instruction."""
    from heron.hlo.evaluator import evaluate_computation

    if instruction.opcode == "parameter":
        return arguments[instruction.parameter_number]
    view = Computation(
        f"{computation.name}.value_of_{instruction.name}",
        list(computation.instructions),
        instruction,
    )
    return evaluate_computation(view, list(arguments))
