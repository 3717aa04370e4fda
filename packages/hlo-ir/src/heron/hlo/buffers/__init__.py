"""Buffers of a scheduled module: dataflow values, aliasing, live ranges, assignment.

- ``dataflow``: values, the buffers they must share (views, loop state, in-place updates);
- ``liveness``: the schedule as one time line, and each buffer's live range;
- ``heap``: best-fit placement of temporaries into one allocation;
- ``assignment``: :func:`assign_buffers`, the allocations, the listing and peak memory;
- ``check``: the two checkers (no overlap; a simulated run through the assigned bytes).
"""

from heron.hlo.buffers.assignment import Allocation, BufferAssignment, Slice, assign_buffers
from heron.hlo.buffers.dataflow import Dataflow, Value, analyze_dataflow, in_place_operands
from heron.hlo.buffers.liveness import Liveness, LiveRange, analyze_liveness

__all__ = [
    "Allocation",
    "BufferAssignment",
    "Dataflow",
    "LiveRange",
    "Liveness",
    "Slice",
    "Value",
    "analyze_dataflow",
    "analyze_liveness",
    "assign_buffers",
    "in_place_operands",
]
