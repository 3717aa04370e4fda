"""Conditionals that need no branch at run time: constant selectors and cheap branches.

Three rewrites, XLA's ``ConditionalSimplifier::TryRemoveConditional`` rules:

* A conditional with one branch, or whose selector is a constant, is a call of
  the branch it selects: ``conditional(true, a, b)`` runs ``true_computation``
  on ``a``; an ``s32`` index runs that branch, an index out of range the last
  one (HLO's rule, as the reference evaluator implements it).
* A two-branch conditional on a ``pred`` whose branches are both cheap becomes
  both branches inlined and a ``select`` of their results (per array leaf of a
  tuple result, the ``pred`` broadcast to each leaf's shape). Running both
  branches costs a few elementwise operations; a conditional costs a host
  round trip for the selector and a kernel per branch, and blocks fusion across
  it. A branch is cheap when every instruction in it is elementwise or one of
  broadcast, concatenate, dynamic-slice, get-tuple-element, reduce, reshape,
  pad, parameter, slice and tuple (XLA's list: an iota, a dot or anything
  else is expensive), or a constant (XLA asks ``IsElementwise()`` of the rest,
  and a constant answers yes). A branch that only
  forwards its parameter (all parameter, tuple and get-tuple-element with an
  array in its result) is left alone, since running nothing beats a select.
* Before that, a two-branch conditional whose ``s32`` selector is
  ``convert(pred)`` (how ``jax.lax.cond`` lowers: ``cond(p, f, g)`` becomes
  ``conditional(convert(p), g, f)``) becomes a ``pred`` conditional with its
  branches swapped, so the rule above applies to it: ``convert`` gives 1 for
  true, which selected branch 1, now ``true_computation``.

A conditional with a side effect anywhere in its branches is never touched.
The calls this pass leaves are inlined by ``call-inliner`` in the same
fixed-point group.
"""

from __future__ import annotations

from heron.hlo.attributes import ComputationRef
from heron.hlo.builder import NameUniquer
from heron.hlo.control_flow import branch_index, conditional_branches
from heron.hlo.element_types import ElementType
from heron.hlo.ir import Computation, Instruction, Module
from heron.hlo.opcodes import is_elementwise
from heron.hlo.passes.registry import hlo_pass
from heron.hlo.passes.rewrite import (
    has_side_effect,
    module_names,
    non_fusion_computations,
    remove_instructions,
    replace_all_uses,
)
from heron.hlo.shapes import ArrayShape, Shape, TupleShape

__all__ = ["CHEAP_NON_ELEMENTWISE", "branch_is_cheap", "simplify_conditionals"]

#: The non-elementwise opcodes a branch may hold and still be run unconditionally
#: (``constant``: XLA's ``HloConstantInstruction`` calls itself elementwise).
CHEAP_NON_ELEMENTWISE = frozenset(
    {
        "broadcast",
        "concatenate",
        "constant",
        "dynamic-slice",
        "get-tuple-element",
        "reduce",
        "reshape",
        "pad",
        "parameter",
        "slice",
        "tuple",
    }
)

_FORWARDING = frozenset({"parameter", "tuple", "get-tuple-element"})


@hlo_pass(
    "conditional-simplifier",
    "a conditional on a constant selector becomes a call; one with two cheap branches, a select",
)
def simplify_conditionals(module: Module) -> bool:
    """Remove each conditional whose branch is known, or whose branches are cheap enough to
    run both."""
    names = module_names(module)
    changed = False
    for computation in non_fusion_computations(module):
        for inst in [i for i in computation.instructions if i.opcode == "conditional"]:
            if has_side_effect(inst):
                continue
            changed |= _canonicalize_converted_pred(inst)
            if _remove(computation, inst, names):
                changed = True
    return changed


def branch_is_cheap(branch: Computation) -> bool:
    """Whether running ``branch`` unconditionally costs no more than a few elementwise ops."""
    return all(
        is_elementwise(i.opcode) or i.opcode in CHEAP_NON_ELEMENTWISE for i in branch.instructions
    )


def _forwards_only(branch: Computation) -> bool:
    """A branch that computes nothing (its result is its parameter, rearranged)."""
    root = branch.root_instruction
    has_array = any(True for _ in root.shape.leaves())
    return has_array and all(i.opcode in _FORWARDING for i in branch.instructions)


def _canonicalize_converted_pred(inst: Instruction) -> bool:
    """``conditional(convert(p), b0, b1)`` on a pred ``p`` -> ``conditional(p, b1, b0)``."""
    selector = inst.operands[0]
    if (
        selector.opcode != "convert"
        or selector.operands[0].shape.element_type is not ElementType.PRED
        or len(conditional_branches(inst)) != 2
    ):
        return False
    branch0, branch1 = conditional_branches(inst)
    inst.operands = [selector.operands[0], inst.operands[2], inst.operands[1]]
    inst.attributes.pop("branch_computations", None)
    inst.attributes["true_computation"] = ComputationRef(branch1.name, branch1)
    inst.attributes["false_computation"] = ComputationRef(branch0.name, branch0)
    return True


def _remove(computation: Computation, inst: Instruction, names: NameUniquer) -> bool:
    branches = conditional_branches(inst)
    selector = inst.operands[0]
    if len(branches) == 1 or selector.opcode == "constant":
        index = 0 if len(branches) == 1 else branch_index(selector.literal, len(branches))
        _replace(computation, inst, _call(computation, inst, index, names))
        return True
    if (
        len(branches) != 2
        or selector.shape.element_type is not ElementType.PRED
        or not all(branch_is_cheap(b) for b in branches)
        or any(_forwards_only(b) for b in branches)
        or any(leaf.is_token for leaf in inst.shape.leaves())
    ):
        return False
    on_true = _call(computation, inst, 0, names)
    on_false = _call(computation, inst, 1, names)
    _replace(computation, inst, _select(computation, inst, on_true, on_false, names))
    return True


def _call(computation: Computation, inst: Instruction, index: int, names: NameUniquer):
    branch = conditional_branches(inst)[index]
    return computation.add(
        Instruction(
            name=names.unique(inst.name),
            opcode="call",
            shape=inst.shape,
            operands=[inst.operands[index + 1]],
            attributes={"to_apply": ComputationRef(branch.name, branch)},
            location=inst.location,
        )
    )


def _select(
    computation: Computation,
    inst: Instruction,
    on_true: Instruction,
    on_false: Instruction,
    names: NameUniquer,
) -> Instruction:
    """``select`` of the two results, leaf by leaf of a tuple shape."""

    def new(opcode: str, shape: Shape, operands: list[Instruction], attributes=None):
        return computation.add(
            Instruction(
                name=names.unique(f"{inst.name}.{opcode}"),
                opcode=opcode,
                shape=shape,
                operands=operands,
                attributes=dict(attributes or {}),
                location=inst.location,
            )
        )

    predicate = inst.operands[0]

    def select(t: Instruction, f: Instruction) -> Instruction:
        shape = f.shape
        if isinstance(shape, TupleShape):
            elements = [
                select(
                    new("get-tuple-element", element, [t], {"index": i}),
                    new("get-tuple-element", element, [f], {"index": i}),
                )
                for i, element in enumerate(shape.elements)
            ]
            return new("tuple", shape, elements)
        assert isinstance(shape, ArrayShape)
        mask = predicate
        if shape.dims:
            mask_shape = shape.with_element_type(ElementType.PRED)
            mask = new("broadcast", mask_shape, [predicate], {"dimensions": ()})
        return new("select", shape, [mask, t, f])

    return select(on_true, on_false)


def _replace(computation: Computation, old: Instruction, new: Instruction) -> None:
    replace_all_uses(computation, old, new)
    remove_instructions(computation, [old])
