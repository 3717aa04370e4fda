"""Where two shapes name one buffer, they must name one layout.

Some instructions move no data: a ``tuple`` holds its operands' buffers, a
``get-tuple-element`` is one of them, and a ``while`` hands its operand to
the body's and the condition's parameter, the body's root back to the next
iteration and, at the end, to its own result (a ``conditional`` and a
``call`` do the same with their computations' parameters and roots). The
compiled program reads those buffers through each instruction's declared
layout, so every pair of shapes that names one buffer must agree on the
layout, or an iteration reads the bytes another one wrote in a different
order (a silently wrong result, issue 26: JAX prints a scan's batch/time
transpose as ``f32[5,4,3]{2,0,1}`` into a while whose body parameter says
``{2,1,0}``).

XLA's verifier checks this once layouts are assigned (layout-sensitive
mode); :func:`layout_disagreement` is heron's one statement of the rule, used
by the verifier and by layout assignment, which establishes it.
"""

from __future__ import annotations

from collections.abc import Iterator

from heron.hlo.control_flow import conditional_branches
from heron.hlo.ir import Instruction
from heron.hlo.shapes import Shape

__all__ = ["forwarded_pairs", "layout_disagreement", "same_layouts"]


def same_layouts(a: Shape, b: Shape) -> bool:
    """Whether ``a`` and ``b`` (same types and dims) lay out every leaf alike.

    A leaf without a layout agrees with anything: before layout assignment,
    only the layouts that are there can disagree.
    """
    return all(
        x.layout is None or y.layout is None or x.layout == y.layout
        for x, y in zip(a.leaves(), b.leaves(), strict=False)
    )


def forwarded_pairs(inst: Instruction) -> Iterator[tuple[str, Shape, str, Shape]]:
    """The pairs of shapes ``inst`` declares to name one buffer, each with what it is."""
    opcode = inst.opcode
    if opcode == "tuple":
        for i, operand in enumerate(inst.operands):
            yield f"operand {i}", operand.shape, f"tuple element {i}", inst.shape.elements[i]
    elif opcode == "get-tuple-element":
        index = inst.attr("index")
        yield (
            "its shape",
            inst.shape,
            f"operand element {index}",
            inst.operands[0].shape.elements[index],
        )
    elif opcode == "while":
        body, condition = inst.called("body"), inst.called("condition")
        parameter = body.parameters[0].shape
        yield "the operand", inst.operands[0].shape, "the body's parameter", parameter
        yield (
            "the condition's parameter",
            condition.parameters[0].shape,
            "the body's parameter",
            parameter,
        )
        yield "the body's root", body.root_instruction.shape, "the body's parameter", parameter
        yield "its shape", inst.shape, "the body's parameter", parameter
    elif opcode == "conditional":
        for b, branch in enumerate(conditional_branches(inst)):
            operand = inst.operands[b + 1]
            yield (
                f"operand {b + 1}",
                operand.shape,
                f"branch {b}'s parameter",
                branch.parameters[0].shape,
            )
            yield f"branch {b}'s root", branch.root_instruction.shape, "its shape", inst.shape
    elif opcode == "call":
        callee = inst.called("to_apply")
        for i, (operand, parameter) in enumerate(
            zip(inst.operands, callee.parameters, strict=False)
        ):
            yield f"operand {i}", operand.shape, f"parameter {i}", parameter.shape
        yield "the callee's root", callee.root_instruction.shape, "its shape", inst.shape


def layout_disagreement(inst: Instruction) -> str | None:
    """What two shapes of ``inst`` that name one buffer say differently, or None."""
    for what, shape, other, other_shape in forwarded_pairs(inst):
        if not same_layouts(shape, other_shape):
            return (
                f"{what} is {shape} but {other} is {other_shape}: both name one buffer,"
                " so their layouts must agree"
            )
    return None
