"""While loops: known trip counts of 0 and 1, repeated and dead carried values.

Four rewrites, from XLA's ``WhileLoopSimplifier``:

- a loop that provably runs **zero** times is its initial value;
- a loop that provably runs **once** is a call of its body on the initial
  value (``call-inliner`` then flattens it);
- a **dead carried value** (a tuple element that neither the loop's users,
  the condition, nor any live element's update reads) is dropped from the
  loop state: JAX's ``fori_loop`` and ``scan`` carry bookkeeping that the
  caller often ignores;
- two carried values that always hold the same value (the same init, the same
  update) are read as one (:mod:`~heron.hlo.passes.while_repeated_elements`),
  and the other is dead.

The trip count is known when the loop has XLA's counted form: an integer
element ``i`` starts at a constant, the body adds a positive constant to it,
and the condition is ``i < N`` or ``i <= N`` (also written ``N > i``) for a
constant ``N``. Loops whose computations are shared with another loop, or
contain side effects, are left alone.
"""

from __future__ import annotations

import numpy as np

from heron.hlo.attributes import ComputationRef
from heron.hlo.builder import NameUniquer
from heron.hlo.ir import Computation, Instruction, Module
from heron.hlo.passes.loop_state import (
    call_counts,
    is_exclusive,
    state_element,
    state_elements_read,
)
from heron.hlo.passes.registry import hlo_pass
from heron.hlo.passes.rewrite import (
    has_side_effect,
    module_names,
    non_fusion_computations,
    remove_instructions,
    replace_all_uses,
)
from heron.hlo.passes.while_repeated_elements import merge_repeated_elements
from heron.hlo.shapes import TupleShape

__all__ = ["simplify_while_loops", "trip_count"]


@hlo_pass("while-loop-simplifier", "loops of 0 or 1 known trips, repeated and dead carried values")
def simplify_while_loops(module: Module) -> bool:
    names = module_names(module)
    calls = call_counts(module)
    changed = False
    for computation in non_fusion_computations(module):
        # Who reads each loop, found once and again only after a rewrite: a scan of the
        # computation per loop was quadratic in a program of many loops (jax-cosmo's).
        users: dict[Instruction, list[Instruction]] | None = None
        for loop in [i for i in computation.instructions if i.opcode == "while"]:
            if has_side_effect(loop):
                continue
            count = trip_count(loop)
            if count == 0:
                changed |= _replace(computation, loop, loop.operands[0])
                users = None
            elif count == 1:
                body = loop.called("body")
                call = computation.add(
                    Instruction(
                        name=names.unique(loop.name),
                        opcode="call",
                        shape=loop.shape,
                        operands=[loop.operands[0]],
                        attributes={"to_apply": ComputationRef(body.name, body)},
                        location=loop.location,
                    )
                )
                changed |= _replace(computation, loop, call)
                users = None
            elif is_exclusive(loop, calls):
                if merge_repeated_elements(computation, loop):
                    changed, users = True, None
                if users is None:
                    users = computation.users()
                if _drop_dead_elements(computation, loop, users.get(loop, []), names):
                    changed, users = True, None
    return changed


def _replace(computation: Computation, old: Instruction, new: Instruction) -> bool:
    replace_all_uses(computation, old, new)
    remove_instructions(computation, [old])
    return True


# -- trip counts -------------------------------------------------------------------------


def _scalar_constant(inst: Instruction) -> int | None:
    if inst.opcode != "constant" or inst.literal is None:
        return None
    value = np.asarray(inst.literal)
    if value.shape != () or value.dtype.kind not in "iu":
        return None
    return int(value)


def _element(value: Instruction, index: int) -> Instruction | None:
    """Element ``index`` of a tuple value, when the graph says which instruction it is."""
    if value.opcode == "tuple":
        return value.operands[index]
    return None


def trip_count(loop: Instruction) -> int | None:
    """How many times ``loop``'s body runs, when it has the counted form; else None."""
    condition, body = loop.called("condition"), loop.called("body")
    compare = condition.root_instruction
    if compare.opcode != "compare" or len(compare.operands) != 2:
        return None
    direction = str(compare.attr("direction"))
    lhs, rhs = compare.operands
    (cond_param,) = condition.parameters
    if state_element(rhs, cond_param) is not None:  # N > i  is  i < N
        lhs, rhs = rhs, lhs
        direction = {"GT": "LT", "GE": "LE"}.get(direction, "")
    index = state_element(lhs, cond_param)
    limit = _scalar_constant(rhs)
    if index is None or limit is None or direction not in ("LT", "LE"):
        return None
    initial = _element(loop.operands[0], index)
    start = _scalar_constant(initial) if initial is not None else None
    (body_param,) = body.parameters
    update = _element(body.root_instruction, index)
    if start is None or update is None or update.opcode != "add":
        return None
    step = None
    for counter, constant in (update.operands, reversed(update.operands)):
        if state_element(counter, body_param) == index:
            step = _scalar_constant(constant)
    if step is None or step <= 0:
        return None
    end = limit + 1 if direction == "LE" else limit
    if end <= start:
        return 0
    # The counter's type could wrap before reaching the limit only if the limit
    # were past its largest value, which a constant of that type cannot be.
    return -(-(end - start) // step)


# -- dead carried values -----------------------------------------------------------------


def _depends_on(value: Instruction, parameter: Instruction) -> set[int]:
    """Elements of ``parameter`` that ``value`` is computed from."""
    found: set[int] = set()
    seen: set[int] = set()
    stack = [value]
    while stack:
        inst = stack.pop()
        if id(inst) in seen:
            continue
        seen.add(id(inst))
        index = state_element(inst, parameter)
        if index is not None:
            found.add(index)
            continue
        stack.extend(inst.operands)
    return found


def _drop_dead_elements(
    computation: Computation, loop: Instruction, users: list[Instruction], names: NameUniquer
) -> bool:
    """Drop the state elements of ``loop`` (read by ``users``) that nothing after the loop,
    its condition or the elements those need reads."""
    shape = loop.shape
    condition, body = loop.called("condition"), loop.called("body")
    if not isinstance(shape, TupleShape) or body.root_instruction.opcode != "tuple":
        return False
    if any(has_side_effect(i) for c in (condition, body) for i in c.instructions):
        return False
    (cond_param,), (body_param,) = condition.parameters, body.parameters
    used: set[int] = set()
    for user in users:
        index = state_element(user, loop)
        if index is None or computation.root is loop:
            return False
        used.add(index)
    if computation.root is loop:
        return False
    condition_reads = state_elements_read(condition, cond_param)
    if condition_reads is None or state_elements_read(body, body_param) is None:
        return False
    live = used | condition_reads
    updates = body.root_instruction.operands
    pending = list(live)
    while pending:
        for index in _depends_on(updates[pending.pop()], body_param) - live:
            live.add(index)
            pending.append(index)
    if not live or len(live) == len(shape.elements):
        return False
    kept = sorted(live)
    new_index = {old: new for new, old in enumerate(kept)}
    new_shape = TupleShape(tuple(shape.elements[k] for k in kept))
    for parameter, owner in ((cond_param, condition), (body_param, body)):
        parameter.shape = new_shape
        for inst in owner.instructions:
            index = state_element(inst, parameter)
            if index is not None and index in new_index:
                inst.attributes["index"] = new_index[index]
    old_root = body.root_instruction
    body.root = body.add(
        Instruction(
            name=names.unique(old_root.name),
            opcode="tuple",
            shape=new_shape,
            operands=[old_root.operands[k] for k in kept],
            location=old_root.location,
        )
    )
    _remove_unreachable(body)
    _remove_unreachable(condition)
    initial = loop.operands[0]
    pieces = [
        computation.add(
            Instruction(
                name=names.unique(f"{loop.name}.init"),
                opcode="get-tuple-element",
                shape=shape.elements[k],
                operands=[initial],
                attributes={"index": k},
                location=loop.location,
            )
        )
        for k in kept
    ]
    loop.operands = [
        computation.add(
            Instruction(
                name=names.unique(f"{loop.name}.init"),
                opcode="tuple",
                shape=new_shape,
                operands=pieces,
                location=loop.location,
            )
        )
    ]
    loop.shape = new_shape
    for user in users:
        user.attributes["index"] = new_index[int(user.attr("index"))]
    return True


def _remove_unreachable(computation: Computation) -> None:
    live: set[int] = set()
    stack = [computation.root_instruction, *computation.parameters]
    while stack:
        inst = stack.pop()
        if id(inst) not in live:
            live.add(id(inst))
            stack.extend(inst.operands)
    remove_instructions(computation, [i for i in computation.instructions if id(i) not in live])
