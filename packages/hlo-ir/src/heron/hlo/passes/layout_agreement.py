"""Layout assignment's last step: shapes that name one buffer agree on its layout.

JAX prints each instruction with the layout it chose for it, and those need
not agree where no data moves: a scan feeds its while loop a batch/time
transpose laid out ``{2,0,1}`` (a bitcast of its input) while the loop body's
parameter says ``{2,1,0}``. The evaluator computes on logical arrays and never
notices; compiled code reads each buffer through the declared layout, so every
iteration after the first read the sequence in the wrong order (issue 26).
XLA avoids this by assigning every layout inside the module itself; heron
keeps JAX's layouts (they make most transposes free) and instead makes the
forwarded ones agree (the rule: :mod:`heron.hlo.forwarded_layouts`):

- a computation's parameters keep their layouts: what a ``while``,
  ``conditional`` or ``call`` hands to them is copied into that layout where
  it differs, and so is a loop body's or a branch's root (layout
  normalisation makes each such copy a transpose);
- a ``tuple``, ``get-tuple-element``, ``while`` or ``call`` result takes the
  layout of what it forwards; a ``bitcast`` user, which reads the bytes as the
  old layout laid them out, gets a copy back into that layout.
"""

from __future__ import annotations

from heron.hlo.control_flow import conditional_branches
from heron.hlo.errors import UnsupportedError
from heron.hlo.ir import Computation, Instruction, Module
from heron.hlo.passes.rewrite import Inserter, module_names, non_fusion_computations
from heron.hlo.shapes import ArrayShape, Shape, TupleShape

__all__ = ["agree_forwarded_layouts"]


def agree_forwarded_layouts(module: Module) -> bool:
    """Make every forwarded pair of shapes in ``module`` agree; True if anything changed.

    A while in the caller fixes its condition's parameter, which the
    condition's own instructions then follow, so computations are revisited
    until nothing changes: once per level of nesting.
    """
    names = module_names(module)
    computations = non_fusion_computations(module)
    changed = False
    for _ in range(len(computations) + 1):
        changed_now = False
        for computation in computations:
            changed_now |= _agree_in(computation, Inserter(computation, names))
        if not changed_now:
            return changed
        changed = True
    raise UnsupportedError(
        f"module '{module.name}': the layouts of its loops and calls do not settle"
    )


def _agree_in(computation: Computation, inserter: Inserter) -> bool:
    changed = False
    for inst in computation.post_order():
        opcode = inst.opcode
        if opcode == "tuple":
            changed |= _take(inst, TupleShape(tuple(o.shape for o in inst.operands)), inserter)
        elif opcode == "get-tuple-element":
            element = inst.operands[0].shape.elements[inst.attr("index")]
            changed |= _take(inst, element, inserter)
        elif opcode == "while":
            body, condition = inst.called("body"), inst.called("condition")
            layout = body.parameters[0].shape
            changed |= _hand_over(inst, 0, layout, inserter)
            changed |= _retype(condition.parameters[0], layout)
            changed |= _return(body, layout, names=inserter.names)
            changed |= _take(inst, layout, inserter)
        elif opcode == "conditional":
            for b, branch in enumerate(conditional_branches(inst)):
                changed |= _hand_over(inst, b + 1, branch.parameters[0].shape, inserter)
                changed |= _return(branch, inst.shape, names=inserter.names)
        elif opcode == "call":
            callee = inst.called("to_apply")
            for i, parameter in enumerate(callee.parameters):
                changed |= _hand_over(inst, i, parameter.shape, inserter)
            changed |= _take(inst, callee.root_instruction.shape, inserter)
    return changed


def _retype(inst: Instruction, shape: Shape) -> bool:
    if inst.shape == shape:
        return False
    inst.shape = shape
    return True


def _take(inst: Instruction, shape: Shape, inserter: Inserter) -> bool:
    """``inst`` forwards a buffer laid out as ``shape``: it says so, and its bitcast users
    keep reading the layout they were written against."""
    declared = inst.shape
    if not _retype(inst, shape):
        return False
    bitcasts = [user for user in inserter.uses.users(inst) if user.opcode == "bitcast"]
    if bitcasts:
        kept = _coerce(inserter, inst, declared, inst)
        for user in bitcasts:
            user.operands = [kept if operand is inst else operand for operand in user.operands]
    return True


def _hand_over(inst: Instruction, index: int, shape: Shape, inserter: Inserter) -> bool:
    """Operand ``index`` of ``inst`` becomes a value laid out as ``shape``."""
    operand = inst.operands[index]
    coerced = _coerce(inserter, operand, shape, inst)
    if coerced is operand:
        return False
    inst.operands = [coerced if i == index else o for i, o in enumerate(inst.operands)]
    return True


def _return(computation: Computation, shape: Shape, *, names) -> bool:
    """``computation``'s root becomes a value laid out as ``shape``."""
    root = computation.root_instruction
    coerced = _coerce(Inserter(computation, names), root, shape, root)
    if coerced is root:
        return False
    computation.root = coerced
    return True


def _coerce(inserter: Inserter, value: Instruction, shape: Shape, like: Instruction) -> Instruction:
    """``value`` laid out as ``shape`` (same types and dims): itself, a copy, or a tuple of them."""
    if value.shape == shape:
        return value
    if isinstance(shape, ArrayShape):
        return inserter.add("copy", shape, [value], like=like, suffix="relayout")
    elements = []
    for i, element_shape in enumerate(shape.elements):
        if value.opcode == "tuple":
            element = value.operands[i]
        else:
            element = inserter.add(
                "get-tuple-element",
                value.shape.elements[i],
                [value],
                {"index": i},
                like=like,
                suffix=f"element_{i}",
            )
        elements.append(_coerce(inserter, element, element_shape, like))
    return inserter.add("tuple", shape, elements, like=like, suffix="relayout")
