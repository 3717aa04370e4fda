"""Colouring: which instructions of a region can be emitted together in one function.

Instructions are visited users-first. Each one either joins the function of
its users or starts a new one (becomes a root). It joins when every use of it
(every (user, operand position) pair inside the region) lies in the same
function and reads it through the same indexing, expressed relative to that
function's root: the user's own map from the root composed with the user's
output-to-input map for that operand. Then one value per root index serves
every use, so the instruction is emitted once. Otherwise emitting it inline
would need it at two indices (the old emitters duplicated the code, which is
exponential on chains of multi-user pads); a separate function is called
instead, once per distinct index.

A single use always joins (one index, whatever it is), even through a
reduce's loop; that is XLA's rule too. Maps with range or runtime symbols are
only equal when the same users introduced those symbols (two reduces with the
same shape run two different loops), which ``_Access.key`` tracks.

Work is linear in the number of (user, operand) pairs: one composition and
one simplification each.
"""

from __future__ import annotations

import attrs

from heron.hlo.errors import UnsupportedError
from heron.hlo.ir import Instruction
from heron.hlo.shapes import TupleShape
from heron.indexing import IndexingMap, compose, output_to_input_maps, simplify
from heron.indexing.fusion_indexing import map_key

__all__ = ["Colouring", "colour"]


@attrs.frozen(eq=False)
class _Access:
    """How a function's root index reaches an instruction: ``map`` (None if not
    modelled) and the users that introduced its symbols, in order."""

    map: IndexingMap | None
    symbol_origins: tuple[int, ...] = ()

    @property
    def key(self) -> tuple | None:
        if self.map is None:
            return None
        return (map_key(self.map), self.symbol_origins)


@attrs.frozen(eq=False)
class Colouring:
    """``colour[inst]``: index of the instruction's function; ``starters[c]``: the
    instruction that started function ``c`` (its first root)."""

    colour: dict[Instruction, int]
    starters: list[Instruction]


def _result_dims(inst: Instruction) -> tuple[int, ...]:
    shape = inst.shape
    while isinstance(shape, TupleShape):
        shape = shape.elements[0]
    return shape.dims


def _is_evaluated_more_than_once(inst: Instruction, user: Instruction) -> bool:
    """A gather reads each start-index vector element by element: with an index
    vector of more than one element its index operand is needed at several
    points per output element, although its map says one vector."""
    if user.opcode != "gather" or len(user.operands) < 2 or user.operands[1] is not inst:
        return False
    dims = _result_dims(inst)
    return len(dims) >= 2 and dims[1] > 1


class _Colourer:
    def __init__(self, users: dict, forced_roots: frozenset) -> None:
        self.users = users
        self.forced_roots = forced_roots
        self.colour: dict[Instruction, int] = {}
        self.starters: list[Instruction] = []
        self.access: dict[Instruction, _Access] = {}
        self._operand_maps: dict[Instruction, list[IndexingMap] | None] = {}

    def operand_maps(self, user: Instruction) -> list[IndexingMap] | None:
        if user not in self._operand_maps:
            try:
                self._operand_maps[user] = output_to_input_maps(user)
            except UnsupportedError:
                self._operand_maps[user] = None
        return self._operand_maps[user]

    def use_access(self, user: Instruction, position: int) -> _Access:
        """How the root of ``user``'s function reaches operand ``position`` of ``user``."""
        base = self.access[user]
        maps = self.operand_maps(user)
        if base.map is None or maps is None:
            return _Access(None)
        op_map = maps[position]
        try:
            composed = simplify(compose(base.map, op_map))
        except (ValueError, UnsupportedError):
            return _Access(None)
        origins = base.symbol_origins
        if op_map.num_symbols:
            origins = (*origins, id(user))
        return _Access(composed, origins)

    def start(self, inst: Instruction) -> None:
        self.colour[inst] = len(self.starters)
        self.starters.append(inst)
        self.access[inst] = _Access(IndexingMap.identity(_result_dims(inst)))

    def visit(self, inst: Instruction) -> None:
        uses = [
            (user, position)
            for user in dict.fromkeys(self.users.get(inst, []))
            if user in self.colour
            for position, operand in enumerate(user.operands)
            if operand is inst
        ]
        if inst in self.forced_roots or not uses:
            self.start(inst)
            return
        colours = {self.colour[user] for user, _ in uses}
        if len(colours) != 1 or any(_is_evaluated_more_than_once(inst, u) for u, _ in uses):
            self.start(inst)
            return
        accesses = [self.use_access(user, position) for user, position in uses]
        if len(accesses) > 1:
            keys = {a.key for a in accesses}
            if None in keys or len(keys) != 1:
                self.start(inst)
                return
        self.colour[inst] = colours.pop()
        self.access[inst] = accesses[0]


def colour(
    order: list[Instruction],
    users: dict[Instruction, list[Instruction]],
    forced_roots: frozenset[Instruction],
) -> Colouring:
    """Colour ``order`` (def-before-use; only these instructions are considered).

    ``users`` may mention instructions outside ``order``: those uses are
    ignored here (the caller forces such operands to be roots when another
    region calls them).
    """
    colourer = _Colourer(users, forced_roots)
    for inst in reversed(order):
        colourer.visit(inst)
    return Colouring(colourer.colour, colourer.starters)
