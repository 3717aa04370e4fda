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
  :class:`~heron.runtime.core.thunks.CommandBufferThunk`, unless it costs less
  than ``min_size`` launches (:func:`cost`): then its thunks stay as they are.
  The default, :data:`MIN_GRAPH_SIZE` = 5, is XLA's
  ``--xla_gpu_graph_min_graph_size`` default (a graph launch costs about what
  a few kernel launches do, so capturing fewer does not pay). XLA compares the
  run's *length* with ``max(1, min_graph_size)``; heron compares its cost,
  which for a run of launches, copies and library calls is its length, but
  counts a loop as what it launches: its condition and body times its trip
  count (:data:`UNKNOWN_TRIPS` where the compiler did not know it), plus the
  synchronising read of its predicate that running it from the host would
  cost every trip (:data:`HOST_READ`); a conditional as its largest branch
  plus that read. So on a device with conditional nodes every loop and
  conditional is recorded, whatever its length, with the thunks around it: a
  1000-step ``fori_loop`` is one graph launch instead of 2,000 launches and
  1,000 reads of the predicate (issue 30: 72 ms -> 6.5 ms on an H200).
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

__all__ = [
    "HOST_READ",
    "MIN_GRAPH_SIZE",
    "UNKNOWN_TRIPS",
    "convert",
    "cost",
    "for_device",
    "recordable",
    "strip",
]

#: XLA's ``--xla_gpu_graph_min_graph_size`` default: cheaper runs are not recorded.
MIN_GRAPH_SIZE = 5
#: What a loop's or conditional's synchronising read of its predicate or selector costs
#: when the host runs it, in launches: at least a graph launch (a device-to-host copy
#: waits for all work before it), so that a loop or conditional alone is worth a graph.
HOST_READ = MIN_GRAPH_SIZE
#: The trips a loop is expected to make when the compiler did not know its trip count.
UNKNOWN_TRIPS = 10

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


def cost(thunk: Thunk) -> int:
    """What running ``thunk`` from the host costs, in launches (see the module docstring):
    1 for a kernel, copy, memset or library call; a loop's condition and body times its
    trips plus a predicate read per trip; a conditional's largest branch plus a read."""
    if isinstance(thunk, WhileThunk):
        trips = thunk.trip_count if thunk.trip_count is not None else UNKNOWN_TRIPS
        inside = sum(map(cost, thunk.condition)) + sum(map(cost, thunk.body))
        return max(1, trips) * (inside + HOST_READ)
    if isinstance(thunk, ConditionalThunk):
        return HOST_READ + max((sum(map(cost, branch)) for branch in thunk.branches), default=0)
    if isinstance(thunk, (SequentialThunk, CommandBufferThunk)):
        return sum(map(cost, thunk.thunks))
    return 1


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
    """``thunks`` with every maximal run of recordable thunks costing ``min_size`` or more
    launches recorded (:func:`cost`)."""
    result: list[Thunk] = []
    run: list[Thunk] = []

    def flush() -> None:
        if run and sum(map(cost, run)) >= max(1, min_size):
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
