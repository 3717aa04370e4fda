"""Buffer assignment: every array value of a scheduled module gets bytes of an allocation.

Allocations, as in XLA: one per entry parameter leaf (the caller's memory),
one per constant (loaded with the program), one per output leaf (live after
the program: the caller reads it; none for an output the module's
``input_output_alias`` puts in a donated parameter's allocation, which then
is both: ``live_out``), and one block for every temporary, where
buffers whose live ranges do not overlap reuse the same bytes (placed by
:mod:`heron.hlo.buffers.heap`). The module must have been through copy
insertion (so a buffer never mixes a parameter or constant with values
written by the program) and the scheduler (each computation's instruction
list is its order). Peak memory is the sum of the allocations: everything a
run needs at once, the figure XLA's memory-usage report calls total bytes.
"""

from __future__ import annotations

import attrs

from heron.hlo.buffers.dataflow import Dataflow, Value, analyze_dataflow
from heron.hlo.buffers.heap import Chunk, HeapRequest, place
from heron.hlo.buffers.liveness import Liveness, LiveRange, analyze_liveness, max_live
from heron.hlo.errors import HloVerifyError
from heron.hlo.input_output_alias import input_output_aliases, leaf_number
from heron.hlo.ir import Instruction, Module
from heron.hlo.memory_budget import format_size

__all__ = ["Allocation", "BufferAssignment", "Slice", "assign_buffers"]

KINDS = ("parameter", "constant", "output", "temp")


@attrs.frozen
class Slice:
    """``size`` bytes at ``offset`` of allocation ``allocation``."""

    allocation: int
    offset: int
    size: int

    @property
    def end(self) -> int:
        return self.offset + self.size


@attrs.define
class Allocation:
    """One block of memory and the buffers placed in it (buffer -> chunk)."""

    index: int
    kind: str
    size: int
    live_out: bool = False
    parameter_number: int | None = None
    leaf: int | None = None
    chunks: dict[int, Chunk] = attrs.field(factory=dict)


@attrs.define
class BufferAssignment:
    """Where every buffer lives, and what that costs."""

    module: Module
    flow: Dataflow
    liveness: Liveness
    alignment: int
    allocations: list[Allocation]
    slices: dict[int, Slice]
    #: Largest sum of temporary bytes live at one time (what a perfect heap would need).
    peak_live_temp_bytes: int

    def leaf_slices(self, inst: Instruction) -> list[Slice | None]:
        """Where each array leaf of ``inst``'s result lives (None: a token, no bytes)."""
        return [self.slices.get(b) for b in self.flow.leaf_buffers(inst)]

    def bytes_of(self, kind: str) -> int:
        return sum(a.size for a in self.allocations if a.kind == kind)

    @property
    def total_bytes(self) -> int:
        """Peak memory: every allocation, all needed for the whole run."""
        return sum(a.size for a in self.allocations)

    def live_range(self, buffer: int) -> LiveRange:
        return self.liveness.ranges[buffer]

    def listing(self) -> str:
        """The allocations and the values in each, in the spirit of XLA's buffer-assignment dump."""
        buffers = self.flow.buffers()
        lines = [f"BufferAssignment for module {self.module.name} (alignment {self.alignment}):"]
        for allocation in self.allocations:
            lines.append(_allocation_header(allocation, buffers))
            for buffer, chunk in sorted(
                allocation.chunks.items(), key=lambda item: (item[1].offset, item[0])
            ):
                live = self.liveness.ranges[buffer]
                for value in buffers[buffer]:
                    lines.append(
                        f" value: <{value.id} {value} @{live.start}..{live.end}>"
                        f" (size={chunk.size},offset={chunk.offset}): {value.shape}"
                    )
        lines.append("")
        lines.append(self.summary())
        return "\n".join(lines)

    def summary(self) -> str:
        parts = ", ".join(
            f"{kind}s {format_size(self.bytes_of(kind))}"
            for kind in ("parameter", "constant", "output")
        )
        temp = self.bytes_of("temp")
        return (
            f"Allocations: {len(self.allocations)}; {parts}, temporaries {format_size(temp)}"
            f" (at most {format_size(self.peak_live_temp_bytes)} live at once)\n"
            f"Peak memory: {format_size(self.total_bytes)}"
        )


def _allocation_header(allocation: Allocation, buffers: dict[int, list[Value]]) -> str:
    text = f"allocation {allocation.index}: size {allocation.size}"
    if allocation.kind == "parameter":
        (buffer,) = allocation.chunks
        shape = buffers[buffer][0].shape
        text += (
            f", parameter {allocation.parameter_number}, shape |{shape}| at leaf {allocation.leaf}"
        )
    elif allocation.kind == "constant":
        text += ", constant"
    elif allocation.kind == "output":
        text += ", output"
    else:
        text += ", preallocated-temp"
    if allocation.live_out:
        text += ", maybe-live-out"
    return text + ":"


def assign_buffers(module: Module, *, alignment: int) -> BufferAssignment:
    """Assign every buffer of the scheduled, copy-inserted ``module`` to an allocation.

    ``alignment``: the byte multiple every temporary's offset is rounded up to
    (the compiler passes its Target's). Raises ``HloVerifyError`` when the
    module is not scheduled, or when a parameter or constant shares its bytes
    with a value the program writes (copy insertion did not run).
    """
    flow = analyze_dataflow(module)
    liveness = analyze_liveness(module, flow)
    buffers = flow.buffers()
    entry = module.entry
    outputs = set(flow.leaf_buffers(entry.root_instruction))
    allocations: list[Allocation] = []
    slices: dict[int, Slice] = {}

    def own(kind: str, buffer: int, **fields: object) -> None:
        size = max((v.size for v in buffers[buffer]), default=0)
        allocation = Allocation(len(allocations), kind, size, buffer in outputs, **fields)  # type: ignore[arg-type]
        allocation.chunks[buffer] = Chunk(0, size)
        allocations.append(allocation)
        slices[buffer] = Slice(allocation.index, 0, size)

    donated = {
        (alias.parameter_number, leaf_number(param.shape, alias.parameter_index))
        for alias in input_output_aliases(module)
        for param in entry.parameters
        if param.parameter_number == alias.parameter_number
    }
    for param in entry.parameters:
        for leaf, buffer in enumerate(flow.leaf_buffers(param)):
            if (param.parameter_number, leaf) in donated:
                _check_donated(buffers[buffer], param)
            else:
                _check_read_only(buffers[buffer], param)
            if buffers[buffer][0].size:
                own("parameter", buffer, parameter_number=param.parameter_number, leaf=leaf)
    for buffer, values in buffers.items():
        constant = next((v.instruction for v in values if v.instruction.opcode == "constant"), None)
        if constant is not None and buffer not in slices:
            _check_read_only(values, constant)
            if values[0].size:
                own("constant", buffer)
    for buffer in sorted(outputs):
        if buffer not in slices and buffers[buffer][0].size:
            own("output", buffer)
    requests = [
        HeapRequest(buffer, max(v.size for v in values), liveness.ranges[buffer])
        for buffer, values in buffers.items()
        if buffer not in slices and max(v.size for v in values) > 0
    ]
    if requests:
        chunks, heap_size = place(requests, alignment)
        temp = Allocation(len(allocations), "temp", heap_size)
        temp.chunks.update(chunks)
        allocations.append(temp)
        for buffer, chunk in chunks.items():
            slices[buffer] = Slice(temp.index, chunk.offset, chunk.size)
    return BufferAssignment(
        module,
        flow,
        liveness,
        alignment,
        allocations,
        slices,
        max_live((r.live, r.size) for r in requests),
    )


def _check_donated(values: list[Value], owner: Instruction) -> None:
    """A donated parameter's buffer holds the program's writes, never a constant's or
    another parameter's bytes (copy insertion copies those into it)."""
    strangers = [
        v.instruction.name
        for v in values
        if v.instruction is not owner and v.instruction.opcode in ("constant", "parameter")
    ]
    if strangers:
        raise HloVerifyError(
            f"donated parameter '{owner.name}' shares its bytes with"
            f" {', '.join(strangers[:3])}: run copy insertion before buffer assignment",
            owner.location,
        )


def _check_read_only(values: list[Value], owner: Instruction) -> None:
    writers = [v.instruction.name for v in values if v.instruction is not owner]
    if writers:
        raise HloVerifyError(
            f"{owner.opcode} '{owner.name}' shares its bytes with values the program writes"
            f" ({', '.join(writers[:3])}): run copy insertion before buffer assignment",
            owner.location,
        )
