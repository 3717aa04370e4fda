"""The command-buffer conversion pass: runs of recordable thunks become command buffers.

XLA's CommandBufferConversionPass (seeds/from-hlo-to-thunks.md, "Command
Buffers"), as a pure function over thunk sequences:

- A thunk is *recordable* when it is a kernel, copy, memset or library call;
  a while or a conditional is recordable only on a device with conditional
  nodes (``conditional_nodes``, CUDA 12.4+) and only when every thunk inside it
  is recordable. Sequential thunks are flattened into the sequence around them
  first (they add nothing but nesting); command buffers already in the input
  are unwrapped too, so that the grouping is decided here, for this device,
  once (``convert(convert(p)) == convert(p)``).
- Each maximal contiguous run of recordable thunks becomes one
  :class:`~heron.runtime.core.thunks.CommandBufferThunk`, unless it is shorter
  than ``min_size``: then its thunks stay as they are. The default,
  :data:`MIN_GRAPH_SIZE` = 5, is XLA's ``--xla_gpu_graph_min_graph_size``
  default (a graph launch costs about what a few kernel launches do, so
  capturing fewer does not pay); XLA compares the run's length with
  ``max(1, min_graph_size)``, and so does this pass.
- A while or conditional that is not recordable stays a thunk run by the
  host, and the pass converts the sequences inside it (XLA converts the while
  body and each branch; this pass also converts the condition's sequence).
- A custom call is never recordable: its host implementation runs on the CPU
  between device work (operands copied out, results copied in), which no
  graph can replay. It ends the run before it and starts a new one after it,
  and a loop or conditional holding one stays on the host (XLA's custom calls
  without a command-buffer-compatible FFI handler do the same).
"""

from __future__ import annotations

from collections.abc import Sequence

from heron.runtime.core.thunks import (
    CommandBufferThunk,
    ConditionalThunk,
    CopyThunk,
    CustomCallThunk,
    KernelThunk,
    LibraryCallThunk,
    MemsetThunk,
    SequentialThunk,
    Thunk,
    WhileThunk,
)

__all__ = ["MIN_GRAPH_SIZE", "convert", "for_device", "recordable", "strip"]

#: XLA's ``--xla_gpu_graph_min_graph_size`` default: shorter runs are not recorded.
MIN_GRAPH_SIZE = 5

_LEAVES = (KernelThunk, CopyThunk, MemsetThunk, LibraryCallThunk)


def recordable(thunk: Thunk, conditional_nodes: bool) -> bool:
    """Whether ``thunk`` can go into a command buffer of a device (see the module docstring)."""
    if isinstance(thunk, CustomCallThunk):  # a host call: the CPU runs it between graphs
        return False
    if isinstance(thunk, _LEAVES):
        return True
    if isinstance(thunk, (WhileThunk, ConditionalThunk)):
        return conditional_nodes and all(recordable(t, conditional_nodes) for t in thunk.children())
    if isinstance(thunk, (SequentialThunk, CommandBufferThunk)):  # flattened when recorded
        return all(recordable(t, conditional_nodes) for t in thunk.children())
    return False


def _flatten(thunks: Sequence[Thunk]) -> list[Thunk]:
    """Sequential thunks and command buffers spliced into the sequence around them."""
    flat: list[Thunk] = []
    for thunk in thunks:
        if isinstance(thunk, (SequentialThunk, CommandBufferThunk)):
            flat.extend(_flatten(thunk.thunks))
        else:
            flat.append(thunk)
    return flat


def convert(
    thunks: Sequence[Thunk], *, conditional_nodes: bool, min_size: int = MIN_GRAPH_SIZE
) -> tuple[Thunk, ...]:
    """``thunks`` with every maximal run of recordable thunks of ``min_size`` or more recorded."""
    result: list[Thunk] = []
    run: list[Thunk] = []

    def flush() -> None:
        if len(run) >= max(1, min_size):
            result.append(CommandBufferThunk(tuple(_unwrapped(t) for t in run)))
        else:
            result.extend(_inner(t, conditional_nodes, min_size) for t in run)
        run.clear()

    for thunk in _flatten(thunks):
        if recordable(thunk, conditional_nodes):
            run.append(thunk)
            continue
        flush()
        result.append(_inner(thunk, conditional_nodes, min_size))
    flush()
    return tuple(result)


def _unwrapped(thunk: Thunk) -> Thunk:
    """A recordable while / conditional with command buffers and sequentials inside removed."""
    if isinstance(thunk, WhileThunk):
        return WhileThunk(
            tuple(_unwrapped(t) for t in _flatten(thunk.condition)),
            thunk.predicate,
            tuple(_unwrapped(t) for t in _flatten(thunk.body)),
            thunk.trip_count,
        )
    if isinstance(thunk, ConditionalThunk):
        return ConditionalThunk(
            thunk.selector,
            thunk.selector_type,
            tuple(tuple(_unwrapped(t) for t in _flatten(b)) for b in thunk.branches),
        )
    return thunk


def _inner(thunk: Thunk, conditional_nodes: bool, min_size: int) -> Thunk:
    """A thunk run by the host, with the sequences inside it converted."""

    def again(thunks: Sequence[Thunk]) -> tuple[Thunk, ...]:
        return convert(thunks, conditional_nodes=conditional_nodes, min_size=min_size)

    if isinstance(thunk, WhileThunk):
        return WhileThunk(
            again(thunk.condition), thunk.predicate, again(thunk.body), thunk.trip_count
        )
    if isinstance(thunk, ConditionalThunk):
        return ConditionalThunk(
            thunk.selector, thunk.selector_type, tuple(again(b) for b in thunk.branches)
        )
    return thunk


def strip(thunks: Sequence[Thunk]) -> tuple[Thunk, ...]:
    """``thunks`` without command buffers (their thunks in their place), at every level."""
    return convert(thunks, conditional_nodes=False, min_size=1 << 62)


def for_device(
    thunks: Sequence[Thunk],
    *,
    enabled: bool,
    conditional_nodes: bool,
    min_size: int = MIN_GRAPH_SIZE,
) -> tuple[Thunk, ...]:
    """The program a device runs: converted for it, or (``enabled`` false) with none."""
    if not enabled:
        return strip(thunks)
    return convert(thunks, conditional_nodes=conditional_nodes, min_size=min_size)
