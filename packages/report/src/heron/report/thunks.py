"""The thunk sequence as lines, with the command buffers a device would record.

The artefact holds the program without command buffers; a device converts
it when it runs it (:func:`heron.runtime.core.command_buffers.for_device`,
the executor's own call). The report shows it converted for the Target's
kind of device: a CUDA device records loops and conditionals too
(conditional graph nodes), others keep them on the host.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from heron.report.model import ThunkLine
from heron.runtime.core.command_buffers import MIN_GRAPH_SIZE, for_device
from heron.runtime.core.thunks import (
    BufferSlice,
    CommandBufferThunk,
    ConditionalThunk,
    CopyThunk,
    KernelThunk,
    MemsetThunk,
    SequentialThunk,
    Thunk,
    WhileThunk,
)

__all__ = ["command_buffer_note", "recorded_program", "thunk_lines"]


def recorded_program(program: Sequence[Thunk], backend: str) -> tuple[Thunk, ...]:
    """``program`` with command buffers as a ``backend`` device records them."""
    return for_device(program, enabled=True, conditional_nodes=backend == "cuda")


def command_buffer_note(backend: str) -> str:
    nodes = (
        "loops and conditionals are recorded too (CUDA conditional graph nodes)"
        if backend == "cuda"
        else "loops and conditionals stay on the host (no conditional graph nodes)"
    )
    return (
        f"command buffers as a {backend} device records them: every run of at least"
        f" {MIN_GRAPH_SIZE} recordable thunks (XLA's --xla_gpu_graph_min_graph_size); {nodes}"
    )


def _slice(piece: BufferSlice) -> str:
    return f"a{piece.allocation}[{piece.offset}:{piece.offset + piece.size}]"


def thunk_lines(
    thunks: Sequence[Thunk], kernel_of: Mapping[str, str] | None = None
) -> list[ThunkLine]:
    """One line per thunk, nested thunks indented under their parent.

    ``kernel_of`` (fusion -> kernel key, in the order thunk emission met the
    fusions: the schedule's, loop conditions before bodies, branches in
    order) names the fusion each kernel launch is for: launches of one key
    come in that same order, so the n-th launch of a key is its n-th fusion.
    """
    waiting: dict[str, list[str]] = {}
    for fusion, key in (kernel_of or {}).items():
        waiting.setdefault(key, []).append(fusion)
    lines: list[ThunkLine] = []

    def visit(sequence: Sequence[Thunk], depth: int) -> None:
        for thunk in sequence:
            one(thunk, depth)

    def one(thunk: Thunk, depth: int) -> None:
        if isinstance(thunk, KernelThunk):
            queue = waiting.get(thunk.image_key)
            fusion = queue.pop(0) if queue else None
            who = f"{thunk.kernel_name}" + (
                f" (fusion {fusion})" if fusion and fusion != thunk.kernel_name else ""
            )
            grid = "x".join(map(str, thunk.grid))
            block = "x".join(map(str, thunk.block))
            lines.append(
                ThunkLine(
                    depth,
                    thunk.kind,
                    f"{who}: grid {grid}, block {block},"
                    f" {len(thunk.arguments)} buffers ({', '.join(map(_slice, thunk.arguments))})",
                )
            )
        elif isinstance(thunk, CopyThunk):
            lines.append(
                ThunkLine(
                    depth, thunk.kind, f"{_slice(thunk.source)} -> {_slice(thunk.destination)}"
                )
            )
        elif isinstance(thunk, MemsetThunk):
            lines.append(ThunkLine(depth, thunk.kind, repr(thunk)))
        elif isinstance(thunk, CommandBufferThunk):
            lines.append(
                ThunkLine(
                    depth, thunk.kind, f"{len(thunk.thunks)} thunks recorded, replayed as one"
                )
            )
            visit(thunk.thunks, depth + 1)
        elif isinstance(thunk, SequentialThunk):
            lines.append(ThunkLine(depth, thunk.kind, f"{len(thunk.thunks)} thunks"))
            visit(thunk.thunks, depth + 1)
        elif isinstance(thunk, WhileThunk):
            count = f"trip count {thunk.trip_count}" if thunk.trip_count is not None else ""
            lines.append(
                ThunkLine(
                    depth,
                    thunk.kind,
                    f"predicate {_slice(thunk.predicate)}" + (f", {count}" if count else ""),
                )
            )
            lines.append(ThunkLine(depth + 1, "condition", f"{len(thunk.condition)} thunks"))
            visit(thunk.condition, depth + 2)
            lines.append(ThunkLine(depth + 1, "body", f"{len(thunk.body)} thunks"))
            visit(thunk.body, depth + 2)
        elif isinstance(thunk, ConditionalThunk):
            lines.append(
                ThunkLine(
                    depth,
                    thunk.kind,
                    f"selector {_slice(thunk.selector)} ({thunk.selector_type}),"
                    f" {len(thunk.branches)} branches",
                )
            )
            for index, branch in enumerate(thunk.branches):
                lines.append(ThunkLine(depth + 1, f"branch {index}", f"{len(branch)} thunks"))
                visit(branch, depth + 2)
        else:
            lines.append(ThunkLine(depth, thunk.kind, repr(thunk)))

    visit(thunks, 0)
    return lines
