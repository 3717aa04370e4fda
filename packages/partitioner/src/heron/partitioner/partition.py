"""``partition``: cut a fused computation into subgraphs, one function each.

The steps: split the instructions into a main region and epilogues
(``regions``), colour the main region (``colouring``) with heroes, hero
operands, fusion roots and whatever an epilogue reads from the main region as
forced roots, then make each epilogue (a connected group of
instructions after heroes) one subgraph with its heroes injected. An epilogue
is one function because it receives the hero's value at one index only; it
cannot call a function at another index for a hero-dependent value.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from heron.hlo.errors import UnsupportedError
from heron.hlo.ir import Computation, Instruction
from heron.partitioner.colouring import colour
from heron.partitioner.partitioned import PartitionedComputation
from heron.partitioner.regions import distinct_roots, find_regions, is_partitioned
from heron.partitioner.subgraph import Subgraph, function_name, make_signature

__all__ = ["partition"]


def _resolve_heroes(
    computation: Computation, heroes: Iterable[Instruction | str]
) -> tuple[Instruction, ...]:
    result: list[Instruction] = []
    members = set(computation.instructions)
    for hero in heroes:
        inst = computation.instruction(hero) if isinstance(hero, str) else hero
        if inst not in members:
            raise ValueError(f"hero '{inst.name}' is not an instruction of '{computation.name}'")
        if not is_partitioned(inst, computation):
            raise UnsupportedError(
                f"'{inst.name}' ({inst.opcode}) in fusion '{computation.name}' cannot be a hero:"
                " parameters and the root tuple are not computed by any function"
            )
        if inst not in result:
            result.append(inst)
    return tuple(result)


def _unique_name(name: str, taken: set[str]) -> str:
    candidate, suffix = name, 1
    while candidate in taken:
        candidate = f"{name}_{suffix}"
        suffix += 1
    taken.add(candidate)
    return candidate


def _components(members: Sequence[Instruction]) -> list[list[Instruction]]:
    """Connected groups of ``members`` (edges: operand links between members), in order."""
    inside = set(members)
    parent: dict[Instruction, Instruction] = {m: m for m in members}

    def find(x: Instruction) -> Instruction:
        while parent[x] is not x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    for inst in members:
        for operand in inst.operands:
            if operand in inside:
                parent[find(operand)] = find(inst)
    groups: dict[Instruction, list[Instruction]] = {}
    for inst in members:
        groups.setdefault(find(inst), []).append(inst)
    return list(groups.values())


def partition(
    computation: Computation, heroes: Iterable[Instruction | str] = ()
) -> PartitionedComputation:
    """Partition ``computation`` (a fused computation) into subgraphs.

    ``heroes`` are the instructions whose emitter chooses the iteration order
    (a transpose, reduce or concatenate hero, as picked by hero selection); by
    default none, which is a loop fusion. Heroes and their operands become
    subgraph roots; what comes after a hero becomes an epilogue that receives
    the hero's value as an argument.
    """
    hero_list = _resolve_heroes(computation, heroes)
    hero_set = frozenset(hero_list)
    regions = find_regions(computation, hero_set)
    order = computation.post_order()
    users = computation.users()
    roots = distinct_roots(computation)
    root_set = set(roots)

    main_order = [i for i in order if i in regions.main]
    epilogue_order = [i for i in order if i in regions.epilogue]
    epilogue_set = regions.epilogue
    forced: set[Instruction] = set(hero_set) | (root_set & regions.main)
    for hero in hero_list:
        forced.update(o for o in hero.operands if o in regions.main)
    for inst in epilogue_order:
        forced.update(o for o in inst.operands if o in regions.main and o not in epilogue_set)

    colouring = colour(main_order, users, frozenset(forced))
    groups: list[list[Instruction]] = [[] for _ in colouring.starters]
    for inst in main_order:
        groups[colouring.colour[inst]].append(inst)

    taken: set[str] = set()
    subgraphs: list[Subgraph] = []
    to_subgraph: dict[Instruction, Subgraph] = {}
    for c, members in enumerate(groups):
        starter = colouring.starters[c]

        def leaves_group(inst: Instruction, c: int = c) -> bool:
            for user in users.get(inst, []):
                if user in regions.main and colouring.colour[user] != c:
                    return True
                if user in epilogue_set and inst not in epilogue_set:
                    return True
            return False

        sub_roots = [starter] + [
            i
            for i in members
            if i is not starter and (i in root_set or i in hero_set or leaves_group(i))
        ]
        name = _unique_name(function_name(computation.name, *(r.name for r in sub_roots)), taken)
        sub = Subgraph(
            name=name,
            instructions=tuple(members),
            roots=tuple(sub_roots),
            signature=make_signature(computation, tuple(sub_roots)),
        )
        subgraphs.append(sub)
        for inst in members:
            to_subgraph[inst] = sub

    to_epilogue: dict[Instruction, Subgraph] = {}
    for members in _components(epilogue_order):
        ep_roots = tuple(r for r in roots if r in members)
        # Every epilogue reaches a hero through its own instructions (a root after a hero).
        injected = tuple(h for h in hero_list if any(h in i.operands for i in members))
        base = f"{computation.name}__epilogue__" + "_".join(r.name for r in ep_roots)
        sub = Subgraph(
            name=_unique_name(function_name(base), taken),
            instructions=tuple(members),
            roots=ep_roots,
            signature=make_signature(computation, ep_roots, injected),
            injected=injected,
            is_epilogue=True,
        )
        subgraphs.append(sub)
        for inst in members:
            to_epilogue[inst] = sub

    root_subgraphs: list[Subgraph] = []
    for root in roots:
        if not is_partitioned(root, computation):
            # A fusion parameter as an output (``tuple(e, p0)``): no function computes
            # it, the emitter reads the output's element straight from the parameter.
            continue
        sub = to_epilogue.get(root) or to_subgraph[root]
        if not any(sub is s for s in root_subgraphs):
            root_subgraphs.append(sub)
    return PartitionedComputation(
        computation=computation,
        subgraphs=tuple(subgraphs),
        instruction_to_subgraph=to_subgraph,
        instruction_to_epilogue=to_epilogue,
        root_subgraphs=tuple(root_subgraphs),
        heroes=hero_list,
    )
