"""Live ranges of buffers over a module's schedule.

The schedule is each sequential computation's instruction list (what the
scheduler pass leaves). Time is one counter over the whole module, the
sub-computations of a ``while`` (condition, then body), ``conditional``
(each branch) or ``call`` numbered just before the instruction that runs
them. A buffer is live from the first time one of its values is defined to
the last time one is read. Numbering a loop's body once is enough: every value
the body defines dies inside it (its state lives in the loop's buffers, live
around the whole loop), so what is true of one trip is true of all; and two
branches of a conditional get disjoint times, which lets their temporaries
share bytes, since only one of them runs.
"""

from __future__ import annotations

from collections.abc import Iterable

import attrs

from heron.hlo.buffers.dataflow import Dataflow, sequential_callees
from heron.hlo.errors import HloVerifyError
from heron.hlo.ir import Computation, Instruction, Module

__all__ = [
    "LiveRange",
    "Liveness",
    "analyze_liveness",
    "control_predecessors",
    "max_live",
    "peak_live_bytes",
]


@attrs.frozen
class LiveRange:
    """First and last time (inclusive) a buffer's bytes are needed."""

    start: int
    end: int

    def overlaps(self, other: LiveRange) -> bool:
        return self.start <= other.end and other.start <= self.end


@attrs.define
class Liveness:
    """The time of every instruction, and the live range of every buffer."""

    times: dict[int, int]
    ranges: dict[int, LiveRange]
    #: Instructions in time order (the flattened schedule).
    sequence: list[Instruction]

    def time(self, inst: Instruction) -> int:
        return self.times[id(inst)]


def analyze_liveness(module: Module, flow: Dataflow) -> Liveness:
    """Number the schedule and compute every buffer's live range.

    Raises ``HloVerifyError`` when an instruction comes before one of its
    operands or control predecessors in its computation's list: the module was
    not scheduled.
    """
    sequence: list[Instruction] = []
    _flatten(module.entry, sequence)
    times = {id(inst): t for t, inst in enumerate(sequence)}
    starts: dict[int, int] = {}
    ends: dict[int, int] = {}

    def touch(buffer: int, t: int) -> None:
        starts[buffer] = min(starts.get(buffer, t), t)
        ends[buffer] = max(ends.get(buffer, t), t)

    for t, inst in enumerate(sequence):
        for buffer in flow.leaf_buffers(inst):
            touch(buffer, t)
        for operand in inst.operands:
            for buffer in flow.leaf_buffers(operand):
                touch(buffer, t)
    end_of_program = len(sequence)
    for buffer in flow.leaf_buffers(module.entry.root_instruction):
        touch(buffer, end_of_program)
    ranges = {b: LiveRange(starts[b], ends[b]) for b in starts}
    return Liveness(times, ranges, sequence)


def _flatten(computation: Computation, sequence: list[Instruction]) -> None:
    placed: set[int] = set()
    by_name = {inst.name: inst for inst in computation.instructions}
    for inst in computation.instructions:
        for before in (*inst.operands, *control_predecessors(inst, by_name)):
            if id(before) not in placed:
                raise HloVerifyError(
                    f"computation '{computation.name}' is not scheduled: '{inst.name}' comes"
                    f" before '{before.name}', which it depends on (run the scheduler first)",
                    inst.location,
                )
        for callee in sequential_callees(inst):
            _flatten(callee, sequence)
        placed.add(id(inst))
        sequence.append(inst)


def control_predecessors(inst: Instruction, by_name: dict[str, Instruction]) -> list[Instruction]:
    """The instructions ``inst`` must run after besides its operands."""
    refs = inst.attributes.get("control-predecessors")
    if refs is None:
        return []
    return [by_name[name] for name in refs.names]


def peak_live_bytes(module: Module, flow: Dataflow, liveness: Liveness) -> int:
    """The most bytes the program's own buffers hold at one time under this schedule.

    Entry parameters and constants are left out (they exist whatever the
    order); outputs and temporaries count from definition to last use. This
    is what the scheduler compares its candidate orders by.
    """
    fixed = {b for p in module.entry.parameters for b in flow.leaf_buffers(p)}
    sizes: dict[int, int] = {}
    for value in flow.values:
        buffer = flow.buffer(value.id)
        if value.instruction.opcode == "constant":
            fixed.add(buffer)
        sizes[buffer] = max(sizes.get(buffer, 0), value.size)
    return max_live(
        (live, sizes[buffer])
        for buffer, live in liveness.ranges.items()
        if buffer not in fixed and sizes.get(buffer)
    )


def max_live(items: Iterable[tuple[LiveRange, int]]) -> int:
    """The largest total size of ranges live at one time."""
    events: list[tuple[int, int]] = []
    for live, size in items:
        events.append((live.start, size))
        events.append((live.end + 1, -size))
    peak = current = 0
    for _, delta in sorted(events):
        current += delta
        peak = max(peak, current)
    return peak
