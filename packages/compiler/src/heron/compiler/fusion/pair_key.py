"""What a producer fused into one consumer is made of, told without building the fusion.

Priority fusion prices every (producer, user) pair around each fusion it
performs, and in a module that repeats a layer most pairs are a fusion priced
before: the same producer body into the same consumer body, reading the same
operands. Finding that out by building the candidate (cloning both bodies) and
signing the clone (:func:`~heron.compiler.fusion.fusion_cse.signature`) cost
more than checking and pricing it did. XLA's priority fusion keeps analyses per
instruction and composes them per pair; heron does the same for the pair's
identity: each instruction's own body is signed once while it lives and
interned to a number, and a pair is keyed by the two numbers and by how the
consumer's operands relate to the producer and to the producer's operands.

The body :func:`~heron.compiler.fusion.builder.build_fusion` makes of
``[producer, user]`` is a function of exactly that key (the producer's clone or
inlined body first, over parameters for its operands in order; then the
user's, each operand the producer's root, a parameter already made, or a new
one in order), so whatever was decided about one pair (the emitters' verdict,
the price) holds for every pair with its key.
"""

from __future__ import annotations

import weakref
from collections.abc import Sequence

import attrs

from heron.compiler.fusion.builder import OwnBodies, is_small_constant
from heron.compiler.fusion.fusion_cse import signature
from heron.hlo.ir import Instruction

__all__ = ["MembersKey", "PairKey", "PairKeys"]

#: A pair's key: each side's (is a fusion, interned body signature), then per
#: operand of the user, ``-1`` for the producer, ``k >= 0`` for the producer's
#: ``k``-th operand, ``-2 - j`` for another value (``j``: its first slot); then which
#: operands of the producer and of the user are small constants (read for nothing,
#: :mod:`~heron.compiler.fusion.cost_model`).
PairKey = tuple[
    tuple[bool, int], tuple[bool, int], tuple[int, ...], tuple[int, ...], tuple[int, ...]
]
#: A fusion of any members' key (:meth:`PairKeys.of_members`).
MembersKey = tuple[
    tuple[tuple[tuple[bool, int], object, tuple[int, ...]], ...], tuple[int, ...], tuple[int, ...]
]


@attrs.define
class PairKeys:
    """The keys of (producer, user) fusions for one pass run (see the module's doc).

    ``called`` and ``formatted`` are the run's memos of reducers' signatures and
    formatted attribute values (:func:`signature`), shared with its other signing;
    ``bodies`` its instructions' own bodies.
    """

    called: dict[int, tuple[object, object]]
    formatted: dict[tuple[str, int], tuple[object, str]]
    bodies: OwnBodies
    #: Body signatures by the number standing for them.
    _interned: dict[object, int] = attrs.field(init=False, factory=dict)
    #: Each instruction's own (is a fusion, interned signature), while it lives.
    _own: weakref.WeakKeyDictionary[Instruction, tuple[bool, int]] = attrs.field(
        init=False, factory=weakref.WeakKeyDictionary
    )

    def own(self, inst: Instruction) -> tuple[bool, int]:
        """``inst``'s own body, as a number: a fusion's fused computation, or the
        one-member fusion of anything else (its clone over a parameter per distinct
        operand). A rewrite replaces instructions rather than changing them, so it
        is signed once."""
        known = self._own.get(inst)
        if known is not None:
            return known
        values: list[object] = []
        form = signature(self.bodies.of(inst), self.called, values, self.formatted)
        return self._intern(inst, (form, tuple(values)))

    def adopt(self, inst: Instruction, signed: object) -> None:
        """Know ``inst``'s own body by ``signed``, its form and scalar values as a fusion
        pass signed them (:func:`signature` with ``scalar_values``), instead of signing
        it again: priority fusion signs each candidate it installs to look its verdict
        up, and the fusion installed is that body (a tenth of the Fisher matrix's pass
        signed each twice)."""
        if inst not in self._own:
            self._intern(inst, signed)

    def _intern(self, inst: Instruction, signed: object) -> tuple[bool, int]:
        number = self._interned.setdefault(signed, len(self._interned))
        known = self._own[inst] = (inst.opcode == "fusion", number)
        return known

    def of(self, producer: Instruction, user: Instruction) -> PairKey:
        """The key of ``producer`` fused into ``user`` (``user`` reads ``producer``)."""
        first: dict[Instruction, int] = {}
        for k, operand in enumerate(producer.operands):
            first.setdefault(operand, k)
        slots: dict[Instruction, int] = {}
        reads: list[int] = []
        for j, operand in enumerate(user.operands):
            if operand is producer:
                reads.append(-1)
            elif operand in first:
                reads.append(first[operand])
            else:
                reads.append(-2 - slots.setdefault(operand, j))
        return (
            self.own(producer),
            self.own(user),
            tuple(reads),
            _small_constants(producer),
            _small_constants(user),
        )

    def of_members(
        self, members: Sequence[Instruction], outputs: Sequence[Instruction]
    ) -> MembersKey:
        """The key of the fusion :func:`~heron.compiler.fusion.builder.build_fusion`
        makes of ``members`` (in that order) computing ``outputs`` (members).

        The built body is a function of it, as a pair's of a :data:`PairKey`: each
        member's own body and kind in order, where each of its operands comes from
        (``-1 - k``: the ``k``-th member; ``j >= 0``: the ``j``-th value read from
        outside, the fusion's ``j``-th parameter), the outputs' positions, and which
        values read from outside are small constants."""
        position = {id(member): k for k, member in enumerate(members)}
        slots: dict[int, int] = {}
        outside: list[Instruction] = []
        parts = []
        for member in members:
            reads = []
            for operand in member.operands:
                k = position.get(id(operand))
                if k is not None:
                    reads.append(-1 - k)
                    continue
                slot = slots.get(id(operand))
                if slot is None:
                    slot = slots[id(operand)] = len(outside)
                    outside.append(operand)
                reads.append(slot)
            parts.append((self.own(member), member.attributes.get("kind"), tuple(reads)))
        return (
            tuple(parts),
            tuple(position[id(output)] for output in outputs),
            tuple(j for j, value in enumerate(outside) if is_small_constant(value)),
        )


def _small_constants(inst: Instruction) -> tuple[int, ...]:
    return tuple(k for k, operand in enumerate(inst.operands) if is_small_constant(operand))
