"""A computation's post-order kept current across fusion installs, without walking it.

Multi-output fusion orders the members of each merge it tries by their place in the
computation's post-order (:meth:`heron.hlo.ir.Computation.post_order`), and each
merge it installs changes that order. Made again after every install, the post-order
was a walk of the whole computation (and a dictionary of places rebuilt), 850 times
on a GPT-2 training step of 2,700 instructions: 1.7 s of the pass. An install moves
few instructions, though: ``KeptPostOrder.installed`` makes exactly the list
``post_order`` would make of the list the install left (the fusion after one of its
members, the members gone, its ``get-tuple-element``\\ s at the end) from the order
before it, touching only the instructions that read what the fusion now provides and
those the walk would pull before them.

Places are sparse integers (:data:`SPACING` apart at first): an instruction moved or
added takes one between its new neighbours, and all are numbered afresh only when a
gap runs out. They compare as list indices do; they are not indices.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Iterable, Sequence

from heron.hlo.ir import Computation, Instruction

__all__ = ["SPACING", "KeptPostOrder"]

#: The first gap between neighbouring places: room for about 16 halvings of a gap (an
#: instruction put before the same one again and again) before a renumbering.
SPACING = 1 << 16


class KeptPostOrder:
    """The post-order of ``computation``, written back as its instruction list.

    Built from :meth:`Computation.post_order` (and written back, so that the list the
    next install edits is this order); kept by :meth:`installed`.
    """

    def __init__(self, computation: Computation, order: list[Instruction] | None = None) -> None:
        """``order``: ``computation.post_order()`` when the caller has it already."""
        self._computation = computation
        self._items: list[Instruction] = order if order is not None else computation.post_order()
        computation.instructions = list(self._items)
        self._places: list[int] = []
        #: Each instruction's place, by the instruction (they hash by identity, eq=False).
        self._place: dict[Instruction, int] = {}
        self._renumber()

    def place(self, inst: Instruction) -> int:
        """A number that orders ``inst`` among the computation's instructions as the
        post-order does."""
        return self._place[inst]

    def from_place(self, place: int) -> list[Instruction]:
        """The instructions at ``place`` and after it, in order."""
        return self._items[bisect_left(self._places, place) :]

    def order(self) -> list[Instruction]:
        """The instructions in post-order (a copy)."""
        return list(self._items)

    def installed(
        self,
        gone: Iterable[Instruction],
        new: Sequence[Instruction],
        readers: Iterable[Instruction],
    ) -> None:
        """Account for a fusion just installed, and write the post-order back.

        ``gone``: the members the install removed; ``new``: what it made, the fusion
        first, the rest (its ``get-tuple-element``\\ s and bitcasts) appended at the
        list's end in this order; ``readers``: the instructions that now read one of
        ``new`` (they read the members' outputs before). The computation's list must
        be the one the install's edits left, the fusion just after an instruction
        that was there before.

        ``post_order`` of that list keeps in place every instruction whose operands
        come before it; only a reader of something ``new`` that comes later (the
        fusion after one of the members, the rest at the end) is not, and the walk
        from it pulls that operand, with whatever of its own operands also come
        later, to just before it. Nothing else moves but the root, kept last.
        """
        fusion, appended = new[0], new[1:]
        listed = self._computation.instructions
        at = listed.index(fusion)  # a scan in C (instructions compare by identity)
        before = listed[at - 1] if at > 0 else None
        for member in gone:
            self._take_out(member)
        self._put(self._index(before) + 1 if before is not None else 0, [fusion])
        for inst in appended:
            self._put(len(self._items), [inst])
        suspects = dict.fromkeys(inst for inst in (*new, *readers) if inst in self._place)
        for suspect in sorted(suspects, key=self.place):
            self._pull_operands_before(suspect)
        root = self._computation.root
        if root is not None and self._items and self._items[-1] is not root:
            self._take_out(root)
            self._put(len(self._items), [root])
        self._computation.instructions = list(self._items)

    # -- the walk ------------------------------------------------------------------
    def _pull_operands_before(self, start: Instruction) -> None:
        """What ``post_order``'s walk from ``start`` does when ``start`` comes before
        one of its operands: every operand placed later, depth first, operands in
        order, put just before ``start`` (each after its own)."""
        limit = self._place[start]
        place = self._place
        if all(place[op] < limit for op in start.operands):
            return
        pulled: list[Instruction] = []
        seen: set[Instruction] = {start}
        stack: list[tuple[Instruction, int]] = [(start, 0)]
        while stack:
            inst, next_operand = stack[-1]
            if next_operand < len(inst.operands):
                stack[-1] = (inst, next_operand + 1)
                op = inst.operands[next_operand]
                if op in seen or place[op] < limit:
                    continue
                seen.add(op)
                stack.append((op, 0))
            else:
                stack.pop()
                if inst is not start:
                    pulled.append(inst)
        for inst in pulled:
            self._take_out(inst)
        self._put(self._index(start), pulled)

    # -- sparse places -------------------------------------------------------------
    def _index(self, inst: Instruction) -> int:
        return bisect_left(self._places, self._place[inst])

    def _take_out(self, inst: Instruction) -> None:
        at = self._index(inst)
        del self._items[at], self._places[at], self._place[inst]

    def _put(self, at: int, insts: list[Instruction]) -> None:
        """Put ``insts`` in order before the ``at``-th instruction (at the end when
        ``at`` is the length)."""
        count = len(insts)
        if not count:
            return
        low, high = self._gap(at, count)
        if high - low <= count:
            self._renumber(room=count)
            low, high = self._gap(at, count)
        step = (high - low) // (count + 1)
        places = [low + step * (k + 1) for k in range(count)]
        self._items[at:at] = insts
        self._places[at:at] = places
        for inst, number in zip(insts, places, strict=True):
            self._place[inst] = number

    def _gap(self, at: int, count: int) -> tuple[int, int]:
        places = self._places
        low = places[at - 1] if at > 0 else (places[0] if places else 0) - SPACING * (count + 1)
        high = places[at] if at < len(places) else low + SPACING * (count + 1)
        return low, high

    def _renumber(self, room: int = 0) -> None:
        """Number the places afresh, :data:`SPACING` apart or wide enough for ``room``
        instructions in each gap."""
        spacing = max(SPACING, room + 2)
        self._places = [n * spacing for n in range(len(self._items))]
        self._place = {inst: n * spacing for n, inst in enumerate(self._items)}
