"""Invariant checks shared by the partitioner tests (fixtures, so importlib mode finds them)."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from heron.hlo.ir import Instruction
from heron.hlo.shapes import TupleShape
from heron.indexing import IndexingMap, compose, output_to_input_maps, simplify
from heron.indexing.fusion_indexing import map_key
from heron.partitioner import PartitionedComputation, Subgraph, fusion_roots


def partitioned_instructions(pc: PartitionedComputation) -> list[Instruction]:
    root = pc.computation.root_instruction
    return [
        i
        for i in pc.computation.instructions
        if i.opcode != "parameter" and not (i is root and i.opcode == "tuple")
    ]


def check_invariants(pc: PartitionedComputation) -> None:
    """Coverage, operand sources, signatures and an acyclic call graph."""
    main_count: dict[Instruction, int] = {}
    epilogue_count: dict[Instruction, int] = {}
    for sub in pc.subgraphs:
        target = epilogue_count if sub.is_epilogue else main_count
        assert sub.roots, f"{sub.name} has no root"
        assert all(r in sub for r in sub.roots), sub.name
        for inst in sub.instructions:
            target[inst] = target.get(inst, 0) + 1
    for inst in partitioned_instructions(pc):
        m, e = main_count.get(inst, 0), epilogue_count.get(inst, 0)
        assert m <= 1 and e <= 1, f"{inst.name} is in {m} main and {e} epilogue subgraphs"
        assert m + e >= 1, f"{inst.name} is in no subgraph"
        if m and e:
            assert inst in pc.duplicated, f"{inst.name} is in two subgraphs but not reported"
        assert pc.subgraph_of(inst) is not None
    assert set(main_count) & set(epilogue_count) == set(pc.duplicated)

    # Every operand: a parameter, a member, an injected hero, or another subgraph's root.
    for sub in pc.subgraphs:
        for inst in sub.instructions:
            for operand in inst.operands:
                if operand.opcode == "parameter" or operand in sub or operand in sub.injected:
                    continue
                owner = pc.instruction_to_subgraph[operand]
                assert owner is not sub
                assert any(operand is r for r in owner.roots), (
                    f"{sub.name} reads {operand.name}, which is not a root of {owner.name}"
                )
        for hero in sub.injected:
            assert hero in pc.heroes

    # Signatures: one tensor per parameter leaf, indices of the first root, one result per leaf.
    params = pc.computation.parameters
    leaves = sum(len(p.shape.elements) if isinstance(p.shape, TupleShape) else 1 for p in params)
    for sub in pc.subgraphs:
        sig = sub.signature
        assert len(sig.tensor_params) == leaves
        first = sub.roots[0].shape
        while isinstance(first, TupleShape):
            first = first.elements[0]
        assert sig.index_ranges == first.dims
        n_results = sum(
            len(r.shape.elements) if isinstance(r.shape, TupleShape) else 1 for r in sub.roots
        )
        assert len(sig.results) == n_results
        assert sub.name.replace("_", "").isalnum(), sub.name

    names = [s.name for s in pc.subgraphs]
    assert len(names) == len(set(names)), names

    for root in fusion_roots(pc.computation):
        if root.opcode == "parameter":  # an output that is an input: read, never computed
            assert not any(root in s for s in pc.subgraphs), root.name
            continue
        assert any(root in s for s in pc.root_subgraphs), root.name

    # No cycles in the call graph (depth-first search with colours).
    state: dict[int, int] = {}

    def visit(sub: Subgraph, path: list[str]) -> None:
        state[id(sub)] = 1
        for callee in pc.callees(sub):
            s = state.get(id(callee))
            assert s != 1, f"call cycle: {' -> '.join([*path, sub.name, callee.name])}"
            if s is None:
                visit(callee, [*path, sub.name])
        state[id(sub)] = 2

    for sub in pc.subgraphs:
        if id(sub) not in state:
            visit(sub, [])


def emission_counts(sub: Subgraph) -> dict[str, int]:
    """How often a recursive emitter that reuses a value only at the same index would emit
    each instruction of ``sub`` (one emission per distinct map from the subgraph's root)."""
    members = set(sub.instructions)
    maps: dict[Instruction, dict[tuple, IndexingMap]] = {}
    root = sub.roots[0]
    shape = root.shape
    while isinstance(shape, TupleShape):
        shape = shape.elements[0]
    maps[root] = {map_key(IndexingMap.identity(shape.dims)): IndexingMap.identity(shape.dims)}
    for inst in reversed(sub.instructions):
        for extra in sub.roots[1:]:
            if extra is inst and not maps.get(inst):
                ident = IndexingMap.identity(extra.shape.dims)
                maps[inst] = {map_key(ident): ident}
        incoming = maps.get(inst, {})
        if not incoming:
            continue
        op_maps = output_to_input_maps(inst) if inst.operands else []
        for operand, op_map in zip(inst.operands, op_maps):
            if operand not in members:
                continue
            target = maps.setdefault(operand, {})
            for m in incoming.values():
                composed = simplify(compose(m, op_map))
                target.setdefault(map_key(composed), composed)
    return {inst.name: len(maps.get(inst, {})) for inst in sub.instructions}


@pytest.fixture
def check() -> Callable[[PartitionedComputation], None]:
    return check_invariants


@pytest.fixture
def emissions() -> Callable[[Subgraph], dict[str, int]]:
    return emission_counts
