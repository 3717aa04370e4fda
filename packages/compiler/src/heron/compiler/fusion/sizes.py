"""How many instructions a fusion would hold, told without building it.

Every fusion pass refuses a body over
:data:`~heron.compiler.fusion.fusible.MAX_FUSED_INSTRUCTIONS`. Building a merge of two
large kernels to count it and throw it away cost more than anything else the passes
did on programs whose kernels grow near the limit: sax's 84-port lattice offered
multi-output fusion 1,154 sibling merges refused so, 900,000 instructions cloned.
:class:`FusionSizes` walks the members as :func:`~heron.compiler.fusion.builder.build_fusion`
does, numbering values instead of cloning them: a parameter per outside value, each op
as the builder interns it (equal ops over equal operands once, constants each their
own), a ``get-tuple-element`` of a tuple made in the body read through, and only what
the roots need kept. The count is the built body's, exactly
(``packages/compiler/tests/test_fusion_sizes.py`` compares them).
"""

from __future__ import annotations

from collections.abc import Sequence

import attrs

from heron.compiler.fusion.builder import op_kind
from heron.hlo.ir import Instruction

__all__ = ["FusionSizes"]


@attrs.frozen
class _Step:
    """One op of a member as the builder clones it: the number of its kind (None: made
    anew each time), what it reads (an earlier step by index, or the member's operand
    ``k`` as ``-1 - k``) and whether it is a tuple (read through by a member
    ``get-tuple-element``)."""

    kind: int | None
    reads: tuple[int, ...]
    is_tuple: bool


@attrs.frozen
class _Plan:
    """A member's ops in the order the builder clones them, and the one its value is
    (a reference as in :class:`_Step`)."""

    steps: tuple[_Step, ...]
    value: int


@attrs.define
class FusionSizes:
    """Sizes of fusions of a pass's instructions, each member's plan made once while it
    lives (a rewrite replaces instructions rather than changing them)."""

    _plans: dict[Instruction, _Plan] = attrs.field(factory=dict)
    _kinds: dict[tuple[object, ...], int] = attrs.field(factory=dict)

    def planned(self, members: Sequence[Instruction], outputs: Sequence[Instruction]) -> int:
        """The instructions ``build_fusion(members, outputs)`` would hold, parameters and
        a multi-output tuple included."""
        outside: dict[Instruction, int] = {}  # an outer value -> its parameter's number
        mapped: dict[Instruction, int] = {}  # a member -> its value's number
        classes: dict[tuple[int, tuple[int, ...]], int] = {}
        reads: list[tuple[int, ...]] = []  # by number: the numbers an op reads
        tuples: set[int] = set()

        def value_of(outer: Instruction) -> int:
            number = mapped.get(outer)
            if number is None:
                number = outside.get(outer)
                if number is None:
                    number = outside[outer] = len(reads)
                    reads.append(())
            return number

        for member in members:
            operands = [value_of(op) for op in member.operands]
            if member.opcode == "get-tuple-element" and operands[0] in tuples:
                mapped[member] = reads[operands[0]][member.attr("index")]
                continue
            plan = self._plan(member)
            local: list[int] = []
            for step in plan.steps:
                ins = tuple(local[r] if r >= 0 else operands[-1 - r] for r in step.reads)
                number = len(reads)
                if step.kind is not None:
                    number = classes.setdefault((step.kind, ins), number)
                if number == len(reads):
                    reads.append(ins)
                    if step.is_tuple:
                        tuples.add(number)
                local.append(number)
            mapped[member] = local[plan.value] if plan.value >= 0 else operands[-1 - plan.value]
        live: set[int] = set()
        stack = [mapped[output] for output in outputs]
        while stack:
            number = stack.pop()
            if number not in live:
                live.add(number)
                stack.extend(reads[number])
        parameters = set(outside.values())
        return len(parameters) + len(live - parameters) + (len(outputs) > 1)

    def forget(self, inst: Instruction) -> None:
        """Let go of ``inst``'s plan (it left the computation)."""
        self._plans.pop(inst, None)

    def _plan(self, member: Instruction) -> _Plan:
        plan = self._plans.get(member)
        if plan is None:
            plan = self._plans[member] = self._make_plan(member)
        return plan

    def _make_plan(self, member: Instruction) -> _Plan:
        if member.opcode != "fusion":
            reads = tuple(-1 - k for k in range(len(member.operands)))
            return _Plan((self._step(member, reads),), 0)
        body = member.called("calls")
        refs: dict[Instruction, int] = {}
        steps: list[_Step] = []
        for inst in body.post_order():
            if inst.opcode == "parameter":
                refs[inst] = -1 - inst.parameter_number
            else:
                refs[inst] = len(steps)
                steps.append(self._step(inst, tuple(refs[op] for op in inst.operands)))
        return _Plan(tuple(steps), refs[body.root_instruction])

    def _step(self, inst: Instruction, reads: tuple[int, ...]) -> _Step:
        kind = op_kind(inst)
        number = None if kind is None else self._kinds.setdefault(kind, len(self._kinds))
        return _Step(number, reads, inst.opcode == "tuple")
