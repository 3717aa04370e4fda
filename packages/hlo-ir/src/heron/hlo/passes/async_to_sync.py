"""async-to-sync: an asynchronous computation runs where it is waited for.

XLA's optimized modules wrap some work in an ``async-start``/``async-done``
pair: the start launches the computation it ``calls`` on another stream, the
done waits for its result (the ``kDynamicSliceFusion`` thunks of a scan's
per-step slices and updates, ``fusion-start``/``fusion-done`` in XLA:GPU's
dumps). heron runs a program's work in one stream, in order, so a pair is the
computation called at its ``async-done``: this pass replaces the pair (and any
``async-update`` between them) by a ``call`` of the start's computation with
the start's operands, named as the done was, which ``call-inliner`` then
inlines (a fusion, in XLA's modules). Running the computation at the done
instead of at the start changes no value: nothing reads the start but its
update or done. XLA's own ``ConvertAsyncCollectivesToSync`` makes the same
trade for collectives scheduled without anything to overlap.

A start read by anything but the chain to its done (a ``get-tuple-element`` of
its operands' copy, which XLA's modules do not print) is left as it is, and
the module is refused later naming it.
"""

from __future__ import annotations

from heron.hlo.attributes import ComputationRef, InstructionRefs
from heron.hlo.ir import Computation, Instruction, Module
from heron.hlo.passes.registry import hlo_pass
from heron.hlo.passes.rewrite import (
    CONTROL,
    Uses,
    non_fusion_computations,
    rename_control_predecessors,
)

__all__ = ["make_async_sync"]


@hlo_pass("async-to-sync", "run each async-start/async-done pair's computation as a call")
def make_async_sync(module: Module) -> bool:
    """Replace every async chain of ``module`` by a ``call`` at its done; True if any."""
    changed = False
    for computation in non_fusion_computations(module):
        if any(inst.opcode == "async-done" for inst in computation.instructions):
            changed |= _make_sync(computation)
    return changed


def _make_sync(computation: Computation) -> bool:
    uses = Uses(computation)
    renamed: dict[str, str] = {}
    changed = False
    for done in [inst for inst in computation.instructions if inst.opcode == "async-done"]:
        chain = _chain(done, uses)
        if chain is None:
            continue
        start = chain[0]
        call = Instruction(
            done.name,
            "call",
            done.shape,
            operands=list(start.operands),
            attributes=_call_attributes(start, chain),
            location=done.location,
            parent=computation,
        )
        position = computation.instructions.index(done)
        computation.instructions[position] = call
        uses.record(call)
        uses.replace(done, call)
        for inst in chain:
            uses.forget(inst)
            renamed[inst.name] = call.name
        doomed = {id(inst) for inst in chain[:-1]}
        computation.instructions = [i for i in computation.instructions if id(i) not in doomed]
        changed = True
    if renamed:
        rename_control_predecessors(computation.instructions, renamed)
    return changed


def _chain(done: Instruction, uses: Uses) -> list[Instruction] | None:
    """``[async-start, async-update..., done]``, or None when the start or an update has
    another reader (then the pair is not a call at the done)."""
    chain = [done]
    inst = done.operands[0] if len(done.operands) == 1 else None
    while inst is not None and inst.opcode == "async-update":
        chain.append(inst)
        inst = inst.operands[0] if len(inst.operands) == 1 else None
    if inst is None or inst.opcode != "async-start" or "calls" not in inst.attributes:
        return None
    chain.append(inst)
    chain.reverse()
    for earlier, later in zip(chain, chain[1:], strict=False):
        if uses.users(earlier) != [later]:
            return None
    return chain


def _call_attributes(start: Instruction, chain: list[Instruction]) -> dict:
    """The call's attributes: the start's computation, and the control predecessors of
    every instruction of the chain but those inside it."""
    called = start.called("calls")
    attributes: dict = {"to_apply": ComputationRef(called.name, called)}
    inside = {inst.name for inst in chain}
    predecessors: list[str] = []
    for inst in chain:
        refs = inst.attributes.get(CONTROL)
        if isinstance(refs, InstructionRefs):
            predecessors += [n for n in refs.names if n not in inside and n not in predecessors]
    if predecessors:
        attributes[CONTROL] = InstructionRefs(tuple(predecessors))
    return attributes
