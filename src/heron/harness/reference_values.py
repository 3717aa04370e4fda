"""The reference evaluator's value of one instruction inside a computation.

The check's per-element tolerances (a reduction's summation bound, an arg-reduction's
NaN ties) need the values a fused computation's instructions take on the inputs the
kernel was given; the fusion's operands are evaluated at the entry, the rest here.
"""

from __future__ import annotations

from heron.hlo.ir import Computation, Instruction

__all__ = ["value_of", "value_with", "values_of"]


def value_of(computation: Computation, instruction: Instruction, arguments):
    """The reference value of one ``instruction`` of ``computation`` given its arguments:
    a parameter's argument, else the computation evaluated up to that instruction."""
    (value,) = values_of(computation, [instruction], arguments)
    return value


def values_of(computation: Computation, instructions: list[Instruction], arguments) -> list:
    """The reference values of several ``instructions`` of ``computation``, evaluated in
    one pass: :func:`value_of` each would evaluate the computation up to each of them
    again (the sixty operands of sax's last kernel: sixty evaluations of the whole
    lattice, 30 s of a check whose one evaluation took 0.6 s)."""
    from heron.hlo.evaluator import evaluate_computation
    from heron.hlo.shapes import TupleShape

    computed = list(dict.fromkeys(i for i in instructions if i.opcode != "parameter"))
    values: dict[Instruction, object] = {}
    if computed:
        root = Instruction(
            f"{computation.name}.values_of",
            "tuple",
            TupleShape(tuple(i.shape for i in computed)),
            operands=computed,
        )
        view = Computation(f"{computation.name}.values_of", [*computation.instructions, root], root)
        values = dict(zip(computed, evaluate_computation(view, list(arguments)), strict=True))
    return [
        arguments[i.parameter_number] if i.opcode == "parameter" else values[i]
        for i in instructions
    ]


def value_with(
    computation: Computation, instruction: Instruction, arguments, replaced: Instruction, value
):
    """The reference value of ``instruction`` when ``replaced`` (an instruction of
    ``computation``) takes ``value`` instead of its own: the check's error propagation
    moves an approximation's result by its bound and measures the output
    (:mod:`heron.harness.error_propagation`). ``computation`` is not changed."""
    from heron.hlo.evaluator import evaluate_computation

    if replaced.opcode == "parameter":
        moved = list(arguments)
        moved[replaced.parameter_number] = value
        return value_of(computation, instruction, moved)
    stand_in = Instruction(
        f"{replaced.name}.replaced",
        "parameter",
        replaced.shape,
        parameter_number=len(computation.parameters),
    )
    copies: dict[Instruction, Instruction] = {replaced: stand_in}
    for inst in computation.post_order():
        if inst not in copies:
            copies[inst] = inst.clone([copies[o] for o in inst.operands])
    view = Computation(
        f"{computation.name}.value_with_{replaced.name}",
        list(copies.values()),
        copies[instruction],
    )
    return evaluate_computation(view, [*arguments, value])
