"""Two state elements of a loop that always hold the same value become one.

XLA's ``WhileLoopSimplifier`` removes repeated tuple indices. JAX gives a
``fori_loop`` its counter, and a ``scan`` or a loop inside the body (a closed
call) often carries a counter of its own that starts at the same constant and
steps the same way: two elements, two buffers, two kernels or copies an
iteration. Elements ``i`` and ``j`` hold the same value at every iteration when
they start from the same instruction and the body computes them the same way,
reading ``j`` wherever it reads ``i`` (by induction: equal before an iteration,
equal after it). Then every read of ``j`` (in the body, the condition and after
the loop) reads ``i``, and ``j``, read by nothing, is left for the dead-element
rewrite to drop.
"""

from __future__ import annotations

from heron.hlo.ir import Computation, Instruction
from heron.hlo.passes.cse import instruction_signature
from heron.hlo.passes.loop_state import state_element, tuple_loop
from heron.hlo.passes.rewrite import has_side_effect

__all__ = ["merge_repeated_elements"]


def merge_repeated_elements(computation: Computation, loop: Instruction) -> bool:
    """Merge the repeated elements of ``loop`` (in ``computation``; its condition and body
    called by nothing else); True when one was merged."""
    parts = tuple_loop(loop)
    if parts is None:
        return False
    updates, body_state = parts.root.operands, parts.body_state
    merged = False
    for j, value in enumerate(parts.init.operands):
        i = next(k for k, v in enumerate(parts.init.operands) if v is value)
        if i == j or not _same_update(updates[i], updates[j], body_state, i, j):
            continue
        for state, owner in (
            (body_state, parts.body),
            (parts.condition_state, parts.condition),
            (loop, computation),
        ):
            for inst in owner.instructions:
                if state_element(inst, state) == j:
                    inst.attributes["index"] = i
        merged = True
    return merged


def _same_update(a: Instruction, b: Instruction, state: Instruction, i: int, j: int) -> bool:
    """Whether ``a`` and ``b`` compute the same value when elements ``i`` and ``j`` of
    ``state`` hold the same one: the same instructions (opcode, shape, attributes,
    constant) over operands that are the same, walked together."""
    same_element = {i: i, j: i}
    pending = [(a, b)]
    seen: set[tuple[Instruction, Instruction]] = set()
    while pending:
        x, y = pending.pop()
        if x is y or (x, y) in seen:
            continue
        seen.add((x, y))
        kx, ky = state_element(x, state), state_element(y, state)
        if kx is not None or ky is not None:
            if kx is None or ky is None or same_element.get(kx, kx) != same_element.get(ky, ky):
                return False
            continue
        if (
            x.opcode == "parameter"
            or has_side_effect(x)
            or len(x.operands) != len(y.operands)
            or instruction_signature(x) != instruction_signature(y)
        ):
            return False
        pending.extend(zip(x.operands, y.operands, strict=True))
    return True
