"""Inline every ``call``: its computation's instructions take its place in the caller.

JAX wraps ``jnp.where``, ``clip``, ``take``, ``remainder`` and more in jitted
helpers, which reach HLO as ``call`` instructions; nothing after this pass
(fusion, scheduling, the emitters) has to know about calls. Like XLA's
``CallInliner`` it inlines every call, innermost first (a called computation
is inlined into its callers after its own calls were), so one run leaves no
``call`` in any computation that is not itself unreachable; ``hlo-dce`` then
drops the computations nothing calls any more.

The clones get module-unique names derived from the originals (``x`` becomes
``x.1`` when ``x`` is taken) and keep their source locations, so an error
about an inlined instruction still points at the helper's text.
"""

from __future__ import annotations

from heron.hlo.attributes import InstructionRefs
from heron.hlo.builder import NameUniquer
from heron.hlo.ir import Computation, Instruction, Module
from heron.hlo.passes.registry import hlo_pass
from heron.hlo.passes.rewrite import Uses, module_names, rename_control_predecessors

__all__ = ["inline_calls"]


@hlo_pass("call-inliner", "inline every call instruction into its caller")
def inline_calls(module: Module) -> bool:
    """Inline every ``call`` instruction of ``module``; True when there was one."""
    names = module_names(module)
    changed = False
    for computation in _callees_first(module):
        if not any(i.opcode == "call" for i in computation.instructions):
            continue
        uses = Uses(computation)
        instructions: list[Instruction] = []
        inlined: dict[str, str] = {}  # a call's name -> what stands for its result
        for inst in computation.instructions:
            if inst.opcode != "call":
                instructions.append(inst)
                continue
            clones, result = _inline(computation, inst, names)
            instructions.extend(clones)
            for clone in clones:
                uses.record(clone)
            uses.replace(inst, result)
            inlined[inst.name] = result.name
        computation.instructions = instructions
        rename_control_predecessors(instructions, inlined)
        changed = True
    return changed


def _callees_first(module: Module) -> list[Computation]:
    """Computations ordered so that each comes after every computation it calls."""
    order: list[Computation] = []
    done: set[int] = set()

    def visit(computation: Computation) -> None:
        # The verifier refuses recursion, so a depth-first walk terminates.
        if id(computation) in done:
            return
        done.add(id(computation))
        for inst in computation.instructions:
            for called in inst.called_computations():
                visit(called)
        order.append(computation)

    for computation in module.computations:
        visit(computation)
    return order


def _inline(
    caller: Computation, call: Instruction, names: NameUniquer
) -> tuple[list[Instruction], Instruction]:
    """Clones of ``call``'s body for ``caller`` (operands first) and the clone of its root."""
    body = call.called("to_apply")
    mapped: dict[int, Instruction] = {}
    renamed: dict[str, str] = {}
    clones: list[Instruction] = []
    for inst in body.post_order():
        if inst.opcode == "parameter":
            assert inst.parameter_number is not None
            mapped[id(inst)] = call.operands[inst.parameter_number]
            continue
        clone = Instruction(
            name=names.take(inst.name),
            opcode=inst.opcode,
            shape=inst.shape,
            operands=[mapped[id(operand)] for operand in inst.operands],
            attributes=dict(inst.attributes),
            literal=inst.literal,
            location=inst.location,
            parent=caller,
        )
        renamed[inst.name] = clone.name
        mapped[id(inst)] = clone
        clones.append(clone)
    # The call's own control predecessors come before everything it computed.
    outer = call.attributes.get("control-predecessors")
    before = outer.names if isinstance(outer, InstructionRefs) else ()
    for clone in clones:
        predecessors = clone.attributes.get("control-predecessors")
        inner = predecessors.names if isinstance(predecessors, InstructionRefs) else ()
        names = tuple(dict.fromkeys([*(renamed.get(name, name) for name in inner), *before]))
        if names:
            clone.attributes["control-predecessors"] = InstructionRefs(names)
    return clones, mapped[id(body.root_instruction)]
