"""Indexing maps through a whole fused computation: from its root(s) to each parameter.

The emitters read a fusion's inputs through these maps: one map per distinct
way a root element reaches a parameter (an elementwise diamond reads its
parameter once, ``x + reverse(x)`` reads it twice, with different maps).

The walk visits instructions users-first (reverse post order). Each
instruction holds the set of distinct maps from the root's indices to its
own indices, gathered from all its users; composing each with the
instruction's per-operand maps gives its operands' sets. Because maps are
deduplicated at every instruction, the work is proportional to the number of
*distinct* maps per instruction, not the number of paths: a chain of
diamonds, with 2**n paths, costs n steps.
"""

from __future__ import annotations

from heron.hlo.errors import UnsupportedError
from heron.hlo.fusion_outputs import fusion_roots, output_positions
from heron.hlo.ir import Computation, Instruction
from heron.hlo.shapes import ArrayShape, TupleShape
from heron.indexing.composition import compose
from heron.indexing.hlo_indexing import output_to_input_maps
from heron.indexing.indexing_map import IndexingMap
from heron.indexing.simplifier import is_known_empty, simplify

__all__ = ["fusion_input_maps", "map_key"]


def map_key(m: IndexingMap) -> tuple:
    """What makes two maps the same, ignoring variable names and constraint order.

    Composition renames clashing symbols (``s0``, ``s0_1``...), so maps equal
    up to names must still group together.
    """
    return (
        tuple(v.bounds for v in m.dimensions),
        m.results,
        tuple(v.bounds for v in m.range_vars),
        tuple(v.bounds for v in m.runtime_vars),
        tuple(sorted(m.constraints, key=lambda c: (str(c[0]), c[1].lower, c[1].upper))),
    )


class _MapSet:
    """Distinct maps in arrival order."""

    def __init__(self) -> None:
        self.maps: list[IndexingMap] = []
        self._keys: set[tuple] = set()

    def add(self, m: IndexingMap) -> None:
        key = map_key(m)
        if key not in self._keys:
            self._keys.add(key)
            self.maps.append(m)


def _roots(computation: Computation, root_index: int | None) -> list[tuple[Instruction, int]]:
    """(instruction, result index) pairs the fusion's outputs come from.

    The roots are :func:`heron.hlo.fusion_outputs.fusion_roots` (``root_index``
    picks one); a root of tuple shape (a variadic reduce or scatter) starts
    once per output it fills (:func:`heron.hlo.fusion_outputs.output_positions`),
    in a root tuple as well as alone: its results need not read the same
    operands (a variadic scatter's result ``k`` reads operand ``k``).
    """
    roots = fusion_roots(computation)
    if root_index is not None:
        if not 0 <= root_index < len(roots):
            raise IndexError(
                f"root_index {root_index} out of range: '{computation.name}' has"
                f" {len(roots)} root(s)"
            )
        roots = (roots[root_index],)
    return [
        (root, k)
        for root, positions in zip(roots, output_positions(roots))
        for k in range(len(positions))
    ]


def _result_shape(inst: Instruction, output_index: int) -> ArrayShape:
    shape = inst.shape
    if isinstance(shape, TupleShape):
        shape = shape.elements[output_index]
    if not isinstance(shape, ArrayShape):
        raise UnsupportedError(
            f"indexing analysis: '{inst.name}' ({inst.opcode}) has a nested tuple result"
            f" {inst.shape}",
            inst.location,
        )
    return shape


def fusion_input_maps(
    computation: Computation, root_index: int | None = None
) -> dict[Instruction, list[IndexingMap]]:
    """Every distinct simplified map from the root(s) to each parameter.

    The roots are :func:`heron.hlo.fusion_outputs.fusion_roots`
    (``root_index`` selects one; a root of tuple shape is one root, every
    result of which is walked); maps from different roots have different
    dimensions when the roots' shapes differ. Every parameter is a key; one
    no root reads maps to ``[]``.
    Raises ``UnsupportedError`` naming the first op the analysis cannot model.
    """
    # id(instruction) -> output index -> maps from the root(s) to that result.
    pending: dict[int, dict[int, _MapSet]] = {}
    for inst, k in _roots(computation, root_index):
        dims = _result_shape(inst, k).dims
        pending.setdefault(id(inst), {}).setdefault(k, _MapSet()).add(IndexingMap.identity(dims))

    result: dict[Instruction, list[IndexingMap]] = {p: [] for p in computation.parameters}
    param_sets: dict[int, _MapSet] = {}
    for inst in reversed(computation.post_order()):
        for output_index, maps in sorted(pending.pop(id(inst), {}).items()):
            incoming = maps.maps
            if inst.opcode == "parameter":
                target = param_sets.setdefault(id(inst), _MapSet())
                for m in incoming:
                    target.add(m)
                continue
            operand_maps = output_to_input_maps(inst, output_index)
            for operand, op_map in zip(inst.operands, operand_maps):
                # get-tuple-element reads one element of its tuple operand.
                index = inst.attributes["index"] if inst.opcode == "get-tuple-element" else 0
                target = pending.setdefault(id(operand), {}).setdefault(index, _MapSet())
                for m in incoming:
                    composed = simplify(compose(m, op_map))
                    if not is_known_empty(composed):
                        target.add(composed)
    for param in result:
        if id(param) in param_sets:
            result[param] = param_sets[id(param)].maps
    return result
