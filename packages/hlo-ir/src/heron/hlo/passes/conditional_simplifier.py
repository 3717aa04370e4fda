"""A conditional whose selector is a constant is a call of the branch it selects.

``conditional(true, a, b)`` runs ``true_computation`` on ``a``; an ``s32``
index runs that branch, an index out of range the last one (HLO's rule, as
the reference evaluator implements it). The call this pass leaves is inlined
by ``call-inliner`` in the same fixed-point group, so ``jax.lax.cond`` on a
value the simplifier folded costs nothing at run time.
"""

from __future__ import annotations

from heron.hlo.attributes import ComputationRef
from heron.hlo.control_flow import branch_index, conditional_branches
from heron.hlo.ir import Instruction, Module
from heron.hlo.passes.registry import hlo_pass
from heron.hlo.passes.rewrite import (
    has_side_effect,
    module_names,
    non_fusion_computations,
    remove_instructions,
    replace_all_uses,
)

__all__ = ["simplify_conditionals"]


@hlo_pass("conditional-simplifier", "a conditional on a constant selector becomes a call")
def simplify_conditionals(module: Module) -> bool:
    """Replace each conditional with a constant selector by a call of its branch."""
    names = module_names(module)
    changed = False
    for computation in non_fusion_computations(module):
        for inst in [i for i in computation.instructions if i.opcode == "conditional"]:
            selector = inst.operands[0]
            if selector.opcode != "constant" or has_side_effect(inst):
                continue
            branches = conditional_branches(inst)
            index = branch_index(selector.literal, len(branches))
            branch = branches[index]
            call = computation.add(
                Instruction(
                    name=names.unique(inst.name),
                    opcode="call",
                    shape=inst.shape,
                    operands=[inst.operands[index + 1]],
                    attributes={"to_apply": ComputationRef(branch.name, branch)},
                    location=inst.location,
                )
            )
            replace_all_uses(computation, inst, call)
            remove_instructions(computation, [inst])
            changed = True
    return changed
