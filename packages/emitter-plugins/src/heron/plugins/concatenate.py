"""The concatenate emitter: one loop per operand of the concatenate hero.

A loop emitter over the output would, for every output element, decide which
operand it comes from (a chain of selects over all operands). XLA's
concatenate emitter instead iterates over the *largest* operand's shape:
operand by operand, the same thread map is restricted to the operand's extent
along the concatenation dimension, each thread reads the operand at its index
and writes the output at that index shifted by the operand's offset. Each
operand is then read exactly where it is, with no selection.

What comes after the hero (an epilogue: ``negate(concat)``, a bitcast, a
convert shared by several roots) is the partitioner's epilogue function,
called with the hero's value injected and the root's index, which is the
hero's index mapped through the epilogue (``iteration.epilogue_map``).
Hero selection gives this emitter single-root fusions only: a fusion of
several roots is a loop fusion in XLA 0.12 (``GetEmitterFusionKind``), one
thread per output element. The emitter itself still handles several roots
when a plugin hands it such a fusion: roots sharing one hero, or several
concatenates of the same operand shapes (RoPE's q and k); every loop then
writes every root.

Vectors (the loop emitter's elements per thread) are limited to a divisor of
every operand's size along the concatenation dimension, as XLA does, so a
vector never straddles two operands.
"""

from __future__ import annotations

import math

from mlir import ir
from mlir.dialects import tensor

from heron.emitters import mlir_types
from heron.emitters.dialect import apply_indexing_op, loop_op
from heron.emitters.emitter_base import EntryFunction, FusionEmitter, fusion_output_shapes
from heron.emitters.fusion_analysis import FusionAnalysis, claims_kind
from heron.emitters.hookspecs import EmitterSpec, hookimpl
from heron.hlo.errors import UnsupportedError
from heron.hlo.ir import Instruction
from heron.hlo.shapes import ArrayShape
from heron.indexing import IndexingMap, Interval, compose, input_to_output_map, simplify
from heron.indexing.affine import AffineExpr, Symbol
from heron.indexing.simplifier import from_linear_form, linear_form
from heron.partitioner import Subgraph
from heron.partitioner.subgraph import leaf_shapes
from heron.plugins.iteration import (
    Iteration,
    Write,
    add_constraints,
    chunks,
    epilogue_map,
    fusion_writes,
    loop_iteration,
)

__all__ = ["ConcatenateEmitter", "heron_emitter_specs"]


def _axis(concat: Instruction) -> int:
    (axis,) = concat.attributes["dimensions"]
    return int(axis)


def _piece_sizes(concat: Instruction) -> tuple[int, ...]:
    axis = _axis(concat)
    return tuple(operand.shape.dims[axis] for operand in concat.operands)


def _whole_vector_bound(
    thread_map: IndexingMap, expr: AffineExpr, size: int
) -> tuple[AffineExpr, Interval]:
    """The constraint ``expr in [0, size - 1]``, stated per vector where that is exact.

    Where ``expr`` is ``base + vector_index`` with ``base`` a multiple of the
    vector size V (the axis is the physical minor one) and V divides ``size``,
    a vector is all inside or all outside, so the constraint is ``base in
    [0, size - V]``: it does not depend on ``vector_index`` and the
    vectorize pass may still turn the accesses into vector loads and stores.
    """
    names = [v.name for v in thread_map.range_vars]
    if "vector_index" not in names:
        return expr, Interval(0, size - 1)
    vector = Symbol(names.index("vector_index"))
    width = thread_map.range_vars[vector.index].bounds.upper + 1
    terms, constant = linear_form(expr)
    if vector not in terms:
        return expr, Interval(0, size - 1)
    others = {t: c for t, c in terms.items() if t != vector}
    aligned = all(c % width == 0 for c in others.values()) and constant % width == 0
    if terms[vector] != 1 or not aligned or size % width:
        return expr, Interval(0, size - 1)
    return from_linear_form(others, constant), Interval(0, size - width)


class ConcatenateEmitter(FusionEmitter):
    """One ``heron_gpu.loop`` per concatenate operand over the largest operand's shape."""

    name = "concatenate"

    def __init__(self, analysis: FusionAnalysis) -> None:
        super().__init__(analysis)
        fusion = self.fusion
        self.writes: list[Write] = fusion_writes(analysis)
        self.root_heroes: dict[int, Instruction] = {}
        heroes: list[Instruction] = []
        for write in self.writes:
            hero = analysis.hero_of(write.root)
            if hero.opcode != "concatenate":
                raise UnsupportedError(
                    f"fusion '{fusion.name}': root {write.root.opcode} '{write.root.name}' is not"
                    " computed from exactly one concatenate",
                    write.root.location,
                )
            self.root_heroes[id(write.root)] = hero
            if not any(hero is h for h in heroes):
                heroes.append(hero)
        self._heroes = tuple(heroes)
        first = heroes[0]
        self.axis = _axis(first)
        self.pieces = _piece_sizes(first)
        for hero in heroes[1:]:
            if (
                _axis(hero) != self.axis
                or _piece_sizes(hero) != self.pieces
                or hero.shape.dims != first.shape.dims
            ):
                raise UnsupportedError(
                    f"fusion '{fusion.name}': concatenates '{first.name}' and '{hero.name}' have"
                    " different operand shapes; one loop cannot iterate over both",
                    hero.location,
                )
        largest = max(range(len(self.pieces)), key=lambda k: self.pieces[k])
        self.largest: ArrayShape = first.operands[largest].shape
        vector_divisor = math.gcd(*self.pieces)
        try:
            self.iteration: Iteration = loop_iteration(
                self.largest, self.computation, self.target, vector_divisor=vector_divisor
            )
        except Exception as exc:
            raise UnsupportedError(f"fusion '{fusion.name}': {exc}", fusion.location) from exc
        self.operand_maps = [self._operand_map(size) for size in self.pieces]
        self.root_maps = [self._root_maps(k) for k in range(len(self.pieces))]
        self._check_epilogues()

    def _check_epilogues(self) -> None:
        """Refuse, when built, every root emission could not write (the spec says
        ``refuses_when_built``): a root that is not a concatenate is its epilogue's
        root, the epilogue reads the heroes only and, being called once at one index,
        is written at the same index for all its roots, for every operand; no function
        reads a value only an epilogue computes."""
        partitioned = self.partitioned()
        for write in self.writes:
            root = write.root
            if self._is_hero(root):
                continue
            sub = partitioned.epilogue_of(root)
            if sub is None:
                raise self.error("a root of a concatenate fusion must follow the hero", root)
            if not any(sub_root is root for sub_root in sub.roots):
                raise self.error(f"it is not a root of the epilogue {sub.name}", root)
            for hero in sub.injected:
                if not self._is_hero(hero):
                    raise self.error(f"the epilogue {sub.name} injects a non-hero", hero)
            for size, operand_maps in zip(self.pieces, self.root_maps, strict=True):
                if size == 0:
                    continue  # an empty operand is not emitted
                key = operand_maps[id(root)].format()
                for other in sub.roots:
                    other_map = operand_maps.get(id(other))
                    if other_map is None or other_map.format() != key:
                        raise self.error(
                            f"the epilogue {sub.name} computes roots '{root.name}' and"
                            f" '{other.name}' at different indices; it is called at one index",
                            other,
                        )
        self.refuse_uncallable_reads(
            hero.operands[k] for hero in self._heroes for k, size in enumerate(self.pieces) if size
        )

    def _is_hero(self, inst: Instruction) -> bool:
        return any(inst is hero for hero in self._heroes)

    # -- maps --------------------------------------------------------------------------

    def _operand_map(self, size: int) -> IndexingMap:
        """Threads -> index of an operand of ``size`` along the axis (the largest's map, cut)."""
        thread_map = self.iteration.thread_map
        if size == self.largest.dims[self.axis] or size == 0:  # no loop for an empty operand
            return thread_map
        expr = thread_map.results[self.axis]
        return add_constraints(thread_map, [_whole_vector_bound(thread_map, expr, size)])

    def _root_maps(self, operand: int) -> dict[int, IndexingMap]:
        """For every root: operand ``operand``'s index -> the root's index it is written at."""
        maps: dict[int, IndexingMap] = {}
        to_hero: dict[int, IndexingMap] = {}
        for write in self.writes:
            hero = self.root_heroes[id(write.root)]
            if id(hero) not in to_hero:
                to_hero[id(hero)] = input_to_output_map(hero, operand)
            maps[id(write.root)] = simplify(
                compose(to_hero[id(hero)], epilogue_map(hero, write.root))
            )
        return maps

    # -- FusionEmitter ------------------------------------------------------------------

    def launch_dimensions(self):
        return self.iteration.launch

    def heroes(self) -> tuple[Instruction, ...]:
        return self._heroes

    def emit_entry(self, entry: EntryFunction) -> list[ir.Value]:
        dims = [entry.thread_ids[0], *entry.block_ids]
        results = list(entry.outputs)
        for operand in range(len(self.pieces)):
            if self.pieces[operand] == 0:
                continue  # an empty operand contributes no element
            for group in chunks(self.writes, entry):
                positions = [k for write in group for k in write.positions]
                body = self._body(entry, operand, group)
                loop = loop_op(
                    self.operand_maps[operand], dims, [results[k] for k in positions], body
                )
                for k, value in zip(positions, loop.results, strict=True):
                    results[k] = value
        return results

    def _body(self, entry: EntryFunction, operand: int, group: list[Write]):
        outputs = fusion_output_shapes(self.fusion)

        def body(symbols, operand_indices, iter_args):
            del symbols
            tensors = list(iter_args)
            slots = {k: n for n, k in enumerate(k for w in group for k in w.positions)}
            hero_values: dict[int, list[ir.Value]] = {}
            for hero in self._heroes:
                hero_values[id(hero)] = entry.value_of(hero.operands[operand], operand_indices)
            indices_memo: dict[str, list[ir.Value]] = {}
            epilogue_memo: dict[tuple[int, str], list[ir.Value]] = {}
            for write in group:
                root_map = self.root_maps[operand][id(write.root)]
                key = root_map.format()
                if key not in indices_memo:
                    indices_memo[key] = list(apply_indexing_op(root_map, operand_indices).results)
                indices = indices_memo[key]
                values = self._root_values(
                    entry, operand, write.root, indices, hero_values, epilogue_memo
                )
                for value, k in zip(values, write.positions, strict=True):
                    element = mlir_types.to_element(value, outputs[k].element_type)
                    tensors[slots[k]] = tensor.insert(element, tensors[slots[k]], indices)
            return tensors

        return body

    def _root_values(
        self,
        entry: EntryFunction,
        operand: int,
        root: Instruction,
        indices: list[ir.Value],
        hero_values: dict[int, list[ir.Value]],
        memo: dict[tuple[int, str], list[ir.Value]],
    ) -> list[ir.Value]:
        """The root's value(s) at ``indices``: the hero's own, or its epilogue's result."""
        if id(root) in hero_values:
            return hero_values[id(root)]
        sub = entry.partitioned.epilogue_of(root)
        assert sub is not None, "the constructor refuses a root without an epilogue"
        memo_key = (id(sub), self.root_maps[operand][id(root)].format())
        if memo_key not in memo:
            memo[memo_key] = self._call_epilogue(entry, sub, indices, hero_values)
        values = memo[memo_key]
        offset = 0
        for sub_root in sub.roots:
            count = len(leaf_shapes(sub_root.shape))
            if sub_root is root:
                return values[offset : offset + count]
            offset += count
        raise AssertionError(f"'{root.name}' is not a root of {sub.name}: refused when built")

    def _call_epilogue(
        self,
        entry: EntryFunction,
        sub: Subgraph,
        indices: list[ir.Value],
        hero_values: dict[int, list[ir.Value]],
    ) -> list[ir.Value]:
        """Call ``sub`` at ``indices`` (where all its roots are written, and it reads the
        heroes only: the constructor refuses it otherwise)."""
        injected: list[ir.Value] = []
        for hero in sub.injected:
            injected.extend(hero_values[id(hero)])
        return entry.call_subgraph(sub, indices, injected)


@hookimpl
def heron_emitter_specs() -> list[EmitterSpec]:
    return [
        EmitterSpec(
            name="concatenate",
            priority=10,
            claims=claims_kind("concatenate"),
            factory=ConcatenateEmitter,
            refuses_when_built=True,
            description="one loop per concatenate operand over the largest operand",
        )
    ]
