"""Constants a loop carries unchanged become constants inside it.

XLA's ``WhileLoopConstantSinking``. JAX carries what a loop's body closes over
as state elements the body passes through unchanged (``fori_loop`` and
``scan`` constants, threefry's rotation tables); when such an element starts as
a constant, every read of it in the body and the condition becomes a copy of
the constant, and the loop's users read the constant itself. The element is
then read by nothing but its own pass-through, and ``while-loop-simplifier``
drops it: no copy of the constant into the loop's state (copy insertion must
copy a constant that a loop state starts from), one buffer less carried.

Only loops whose condition and body nothing else calls, with a tuple of
instructions as their init, are rewritten; the body's pass-through of the
element stays (the simplifier removes it with the element).
"""

from __future__ import annotations

from heron.hlo.builder import NameUniquer
from heron.hlo.ir import Computation, Instruction, Module
from heron.hlo.passes.loop_state import call_counts, is_exclusive, state_element, tuple_loop
from heron.hlo.passes.registry import hlo_pass
from heron.hlo.passes.rewrite import module_names, non_fusion_computations, replace_all_uses

__all__ = ["sink_while_loop_constants"]


@hlo_pass(
    "while-loop-constant-sinking",
    "constants a loop carries unchanged are read as constants inside it and after it",
)
def sink_while_loop_constants(module: Module) -> bool:
    names = module_names(module)
    calls = call_counts(module)
    changed = False
    for computation in non_fusion_computations(module):
        for loop in [i for i in computation.instructions if i.opcode == "while"]:
            if is_exclusive(loop, calls):
                changed |= _sink_loop(computation, loop, names)
    return changed


def _sink_loop(computation: Computation, loop: Instruction, names: NameUniquer) -> bool:
    parts = tuple_loop(loop)
    if parts is None:
        return False
    changed = False
    for k, value in enumerate(parts.init.operands):
        passed_through = state_element(parts.root.operands[k], parts.body_state) == k
        if value.opcode != "constant" or not passed_through:
            continue
        changed |= _read_as_constant(parts.body, parts.body_state, k, value, names)
        changed |= _read_as_constant(parts.condition, parts.condition_state, k, value, names)
        for user in [i for i in computation.instructions if state_element(i, loop) == k]:
            changed |= replace_all_uses(computation, user, value)
    return changed


def _read_as_constant(
    computation: Computation,
    state: Instruction,
    k: int,
    constant: Instruction,
    names: NameUniquer,
) -> bool:
    """Every read of element ``k`` of ``state`` in ``computation`` becomes a copy of
    ``constant``, except the body root's pass-through of it (the element's own update)."""
    reads = {i for i in computation.instructions if state_element(i, state) == k}
    root = computation.root_instruction
    readers = [
        inst
        for inst in computation.instructions
        if inst is not root and any(operand in reads for operand in inst.operands)
    ]
    root_reads = root in reads  # a condition that is the element itself
    if not readers and not root_reads:
        return False
    sunk = computation.add(constant.clone([], name=names.unique(constant.name)))
    for inst in readers:
        inst.operands = [sunk if operand in reads else operand for operand in inst.operands]
    if root_reads:
        computation.root = sunk
    return True
