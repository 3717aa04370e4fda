"""Dead code elimination: drop what no result depends on, instructions and computations.

An instruction is dead when the root does not depend on it and it has no
side effect (:func:`~heron.hlo.passes.rewrite.has_side_effect`); a
computation is dead when nothing reachable from the entry calls it. Parameters
stay (they are the computation's signature). Like XLA's ``HloDCE`` it leaves
fusion bodies alone: what a fusion computes is the fusion passes' decision.
"""

from __future__ import annotations

from heron.hlo.ir import Computation, Instruction, Module
from heron.hlo.passes.registry import hlo_pass
from heron.hlo.passes.rewrite import (
    has_side_effect,
    non_fusion_computations,
    reachable_computations,
    remove_instructions,
)

__all__ = ["eliminate_dead_code"]


@hlo_pass("hlo-dce", "remove instructions and computations nothing depends on")
def eliminate_dead_code(module: Module) -> bool:
    """Remove dead instructions, then dead computations; True when anything went."""
    changed = False
    for computation in non_fusion_computations(module):
        changed |= _remove_dead_instructions(computation)
    reachable = reachable_computations(module)
    if len(reachable) != len(module.computations):
        module.computations = reachable
        changed = True
    return changed


def _remove_dead_instructions(computation: Computation) -> bool:
    live: set[int] = set()
    stack: list[Instruction] = [computation.root_instruction]
    stack.extend(
        inst
        for inst in computation.instructions
        if inst.opcode == "parameter" or has_side_effect(inst)
    )
    while stack:
        inst = stack.pop()
        if id(inst) in live:
            continue
        live.add(id(inst))
        stack.extend(inst.operands)
    dead = [inst for inst in computation.instructions if id(inst) not in live]
    return remove_instructions(computation, dead) > 0
