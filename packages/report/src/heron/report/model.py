"""The report model: everything the page shows, gathered once, as plain data.

:mod:`heron.report.gather` fills it from one compile of the module;
:mod:`heron.report.html` only renders it. Keeping the two apart lets the tests
check the figures (nodes per fusion, the peak) on the model and on the page.
"""

from __future__ import annotations

import attrs

__all__ = [
    "Allocation",
    "GraphEdge",
    "GraphNode",
    "KernelReport",
    "MemoryBlock",
    "MemoryPicture",
    "Report",
    "StageText",
    "ThunkLine",
]


@attrs.frozen
class StageText:
    """The IR after one compile stage (``emitted``, a heron pass, a backend stage)."""

    name: str
    text: str
    #: Wall-clock seconds of the stage, when the driver timed it.
    seconds: float | None = None


@attrs.frozen
class KernelReport:
    """One kernel: the first fusion compiled to it, and everything its compile decided."""

    key: str
    #: Every fusion launched with this kernel (fusions with the same body share one).
    fusions: tuple[str, ...]
    kernel_name: str
    emitter: str
    #: The fusion analysis's kind (XLA's hero choice: loop, transpose, reduction, ...).
    kind: str
    #: ``root -> hero`` lines of the analysis, one per root.
    heroes: tuple[str, ...]
    backend: str
    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    #: The fused computation as the partitioner cut it (``Subgraph.format`` per function).
    partition: tuple[str, ...]
    #: ``parameter: map`` lines (output-to-input indexing), or why there are none.
    indexing: tuple[str, ...]
    stages: tuple[StageText, ...]
    #: The whole compile: emission, heron's passes, the backend's stages.
    compile_seconds: float = 0.0
    #: PTX statistics (``heron.runtime.cuda.ptx_statistics``): name -> value, or empty.
    ptx_statistics: dict[str, object] = attrs.field(factory=dict)
    #: Why there are no PTX statistics (no CUDA compile here), else None.
    ptx_note: str | None = None


@attrs.frozen
class GraphNode:
    """A node of the module graph: a fusion, an unfused op, or a control-flow thunk."""

    name: str
    #: ``fusion``, ``control`` (while, conditional), ``copy``, ``parameter``,
    #: ``constant`` or ``op`` (anything else shown).
    role: str
    label: str
    #: The emitter of a fusion's kernel (its colour), else None.
    emitter: str | None = None
    #: The kernel's key, for a link to its section.
    kernel: str | None = None
    #: The computation it belongs to.
    computation: str = ""


@attrs.frozen
class GraphEdge:
    source: str
    target: str
    #: ``data`` (an operand) or ``calls`` (a loop or conditional to its computations).
    kind: str = "data"
    #: What a ``calls`` edge leads to (``body``, ``condition``, ``branch 0``...).
    label: str = ""


@attrs.frozen
class ThunkLine:
    """One line of the thunk sequence: its depth in the nesting, kind and what it does."""

    depth: int
    kind: str
    text: str


@attrs.frozen
class MemoryBlock:
    """One buffer in its allocation: bytes ``[y, y + size)`` from ``start`` to ``end`` inclusive."""

    allocation: int
    kind: str
    #: The values in the buffer, as the listing names them.
    label: str
    #: Offset of the buffer from the bottom of the picture (allocations stacked in order).
    y: int
    size: int
    start: int
    end: int


@attrs.frozen
class Allocation:
    index: int
    kind: str
    size: int
    #: Offset of the allocation from the bottom of the picture.
    base: int
    detail: str


@attrs.frozen
class MemoryPicture:
    """The buffer assignment over the schedule: x = position, y = bytes."""

    #: Schedule positions (the flattened schedule's length).
    positions: int
    allocations: tuple[Allocation, ...]
    blocks: tuple[MemoryBlock, ...]
    #: The buffer assignment's peak memory (the sum of its allocations).
    peak_bytes: int
    #: Bytes of the buffers live at each schedule position.
    live_bytes: tuple[int, ...]
    #: The instruction at each schedule position.
    schedule: tuple[str, ...]


@attrs.frozen
class Report:
    """A module compiled for a Target, as the page shows it."""

    module: str
    source: str
    target: str
    backend: str
    arch: str
    nodes: tuple[GraphNode, ...]
    edges: tuple[GraphEdge, ...]
    kernels: tuple[KernelReport, ...]
    #: Fusion name -> kernel key (every fusion the executable launches).
    kernel_of: dict[str, str]
    thunks: tuple[ThunkLine, ...]
    #: What the command buffers were formed for (the device property they depend on).
    command_buffer_note: str
    memory: MemoryPicture
    #: The artefact's allocations in bytes (the assignment's plus scratch and result copies).
    artefact_bytes: int
    optimized_hlo: str
    compile_seconds: float
    #: The ``heron xla`` comparison as text, or None with ``xla_note`` saying why not.
    xla_comparison: str | None = None
    xla_note: str | None = None
    notes: tuple[str, ...] = ()

    @property
    def fusion_nodes(self) -> tuple[GraphNode, ...]:
        return tuple(node for node in self.nodes if node.role == "fusion")
