"""Main (prologue) and epilogue regions of a fusion with heroes.

A hero that customises the iteration order (transpose, reduce, concatenate)
is emitted by its own emitter, not elementally, so the instructions after it
cannot be computed by calling a function at the root's index: the hero's
value only exists inside the hero emitter's loop. Those instructions form the
*epilogue*; the hero is *injected* into it as an argument. Everything the
heroes read forms the *prologue*, partitioned like a loop fusion.

An instruction that depends on a hero and also feeds another hero (reduce ->
broadcast -> reduce, with a second root after the broadcast) belongs to both
regions: the prologue of the second hero computes it by calling functions,
the epilogue of the first recomputes it from the injected value. Those are
the duplicated instructions, and the only ones that appear in two subgraphs.
"""

from __future__ import annotations

from collections.abc import Iterable

import attrs

from heron.hlo.fusion_outputs import fusion_roots
from heron.hlo.ir import Computation, Instruction

# fusion_roots: "the roots of a fusion" is heron.hlo.fusion_outputs's (heron.indexing
# and buffer assignment, below the partitioner, need it too); re-exported here for
# hero selection, the emitters and the fusion passes.
__all__ = ["Regions", "distinct_roots", "find_regions", "fusion_roots"]


def distinct_roots(computation: Computation) -> list[Instruction]:
    """``fusion_roots`` without repeats, in order: the instructions that compute outputs."""
    unique: list[Instruction] = []
    for root in fusion_roots(computation):
        if not any(root is u for u in unique):
            unique.append(root)
    return unique


def is_partitioned(inst: Instruction, computation: Computation) -> bool:
    """Whether ``inst`` goes into a subgraph: parameters are arguments, a root tuple is the ABI."""
    if inst.opcode == "parameter":
        return False
    return not (inst is computation.root_instruction and inst.opcode == "tuple")


@attrs.frozen(eq=False)
class Regions:
    """``main``: what the prologue-style subgraphs compute (heroes, their ancestors,
    roots that do not depend on a hero, dead code); ``epilogue``: what the epilogue
    functions compute; ``duplicated``: in both."""

    main: frozenset[Instruction]
    epilogue: frozenset[Instruction]

    @property
    def duplicated(self) -> frozenset[Instruction]:
        return self.main & self.epilogue


def _closure(starts: Iterable[Instruction], step, stop: frozenset[Instruction]) -> set:
    seen: set[Instruction] = set()
    stack = [s for s in starts if s not in stop]
    while stack:
        inst = stack.pop()
        if inst in seen:
            continue
        seen.add(inst)
        stack.extend(n for n in step(inst) if n not in stop and n not in seen)
    return seen


def find_regions(computation: Computation, heroes: frozenset[Instruction]) -> Regions:
    """Split the computation's instructions into main and epilogue regions (see module doc).

    The epilogue is what the hero-dependent fusion roots need, walking back from
    them and stopping at heroes, minus what the main region computes anyway and
    does not depend on a hero: ``log`` in ``add(log, transpose(log))`` feeds the
    hero, so it stays in the main region and the epilogue calls it.
    """
    partitioned = frozenset(i for i in computation.instructions if is_partitioned(i, computation))
    users = computation.users()

    def operands(inst: Instruction) -> list[Instruction]:
        return [o for o in inst.operands if o in partitioned]

    def users_of(inst: Instruction) -> list[Instruction]:
        return [u for u in users.get(inst, []) if u in partitioned]

    roots = distinct_roots(computation)
    after_heroes = _closure((u for h in heroes for u in users_of(h)), users_of, frozenset())
    dependent_roots = [r for r in roots if r in after_heroes and r not in heroes]
    main_starts = [*heroes, *(r for r in roots if r not in dependent_roots)]
    # Instructions nothing reads and no root is (dead code) still get a function.
    main_starts += [i for i in partitioned if not users_of(i) and not any(i is r for r in roots)]
    main = _closure(main_starts, operands, frozenset())
    needed = _closure(dependent_roots, operands, heroes)
    epilogue = {i for i in needed if i not in main or i in after_heroes}
    return Regions(frozenset(main & partitioned), frozenset(epilogue))
