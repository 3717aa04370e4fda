"""Fusion inside loop bodies, loop conditions and conditional branches.

The fusion passes (:mod:`heron.compiler.fusion`) fuse the entry computation
only. An executable runs
``while`` and ``conditional`` as thunks holding the thunks of their
computations, so those computations need kernels too: each sequential
computation the entry reaches (``heron.hlo.buffers.dataflow``'s own list) goes
through the same fusion passes, as if it were an entry. XLA runs its fusion
passes over every non-fusion computation in the same way.

The passes read ``module.entry``; here each computation takes the entry's
place in turn, on a module that lists every computation, so the fusions they
make land in the real module. Dead-code elimination runs once at the end, with
the real entry back in place (run with a body as the entry it would delete
the program). The module each view starts from is the one the program pipeline
or the view before left, verified at its end: it is not verified again first, and
after its passes only what the view's entry reaches is (``run_pipeline``'s
``reached_only``: the whole module a hundred times over was a fifth of a
jax-cosmo program's compile).
"""

from __future__ import annotations

from collections.abc import Iterator

from heron.compiler.fusion import fusion_pipeline
from heron.compiler.fusion.wrapper import fusion_wrapper
from heron.hlo.buffers.dataflow import sequential_computations
from heron.hlo.ir import Computation, Module
from heron.hlo.passes import Pipeline, pass_named, run_pipeline
from heron.hlo.passes.manager import PipelineReport
from heron.hlo.passes.rewrite import computations_reached
from heron.target import Target

__all__ = ["fuse_control_flow_computations"]

_DCE = "hlo-dce"


def _passes_for(already_fused: bool, target: Target) -> Pipeline:
    """The entry's fusion passes without DCE (which needs the real entry)."""
    if already_fused:  # an optimized module keeps its fusions: only the wrapper
        return Pipeline("control-flow-fusion", (fusion_wrapper(target),))
    entry = fusion_pipeline(target)
    steps = tuple(step for step in entry.steps if getattr(step, "name", "") != _DCE)
    return Pipeline("control-flow-fusion", steps, verify_each_pass=entry.verify_each_pass)


def fuse_control_flow_computations(
    module: Module, target: Target, already_fused: bool, report: PipelineReport | None = None
) -> bool:
    """Fuse every computation run by a ``while`` or ``conditional`` of ``module``, in place.

    Returns whether anything changed. The entry itself is the program
    pipeline's (:func:`heron.compiler.fusion.program_pipeline`), already fused.
    ``already_fused``: the module came fused (XLA's optimized dump), as
    :func:`heron.compiler.fusion.is_fused` said of it *before* the program
    pipeline (after it, every entry holds fusions): its computations then keep
    their fusions and only get the wrapper, as its entry did. ``report``: where the
    passes' records go (``heron compile --timing``: a loop body's priority fusion is
    often most of a program's).
    """
    entry = module.entry
    computations = sequential_computations(module)[1:]
    if not computations:
        return False
    pipeline = _passes_for(already_fused, target)
    changed = False
    records = PipelineReport() if report is None else report
    for computation in computations:
        changed |= _fuse_as_entry(module, entry, computation, pipeline, records)
    if changed:
        dce = run_pipeline(module, Pipeline("control-flow-dce", (pass_named(_DCE),)), verified=True)
        records.records.extend(dce.records)
    return changed


def _fuse_as_entry(
    module: Module,
    entry: Computation,
    computation: Computation,
    pipeline: Pipeline,
    records: PipelineReport,
) -> bool:
    # The view lists what its entry reaches (what the real entry, the other bodies and
    # conditions hold is no business of its passes, and walking it in each of a
    # hundred views' dozen passes was a seventh of a jax-cosmo program's compile);
    # the rest's names stay taken. A pass that removes dead computations (an s8 dot's
    # operand layout ends so) would otherwise take the rest from the program.
    reached = set(computations_reached([computation]))
    listed = [c for c in module.computations if c in reached]
    view = Module(
        name=f"{module.name}.{computation.name}",
        computations=list(listed),
        source=module.source,
        layouts_assigned=module.layouts_assigned,
        names_elsewhere=frozenset(_names_outside(module.computations, reached)),
    )
    entry.is_entry, computation.is_entry = False, True
    try:
        # Verified as it is: the module the program pipeline (or the last view) left;
        # after the passes, what the view's entry reaches (the scheduling pipeline after
        # the views verifies the whole module).
        report = run_pipeline(view, pipeline, verified=True, reached_only=True)
    finally:
        computation.is_entry, entry.is_entry = False, True
    module.computations = _merged(module.computations, listed, view.computations)
    records.records.extend(report.records)
    return report.changed


def _names_outside(computations: list[Computation], reached: set[Computation]) -> Iterator[str]:
    for c in computations:
        if c not in reached:
            yield c.name
            yield from (inst.name for inst in c.instructions)


def _merged(
    everything: list[Computation], listed: list[Computation], after: list[Computation]
) -> list[Computation]:
    """The module's computations once a view listing ``listed`` (of ``everything``, in
    its order) ended with ``after``: in the order the passes would have left had the
    view listed everything. A pass puts a new computation before one it had (a fusion
    body before the computation fused) or at the end, and removes only what it lists."""
    had = set(listed)  # computations hash by identity
    kept = set(after)
    before: dict[Computation, list[Computation]] = {}  # new ones, by the one they precede
    waiting: list[Computation] = []
    for c in after:
        if c in had:
            if waiting:
                before[c] = waiting
                waiting = []
        else:
            waiting.append(c)
    merged: list[Computation] = []
    for c in everything:
        merged.extend(before.get(c, ()))
        if c not in had or c in kept:
            merged.append(c)
    merged.extend(waiting)
    return merged
