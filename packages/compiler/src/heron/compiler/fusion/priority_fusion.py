"""Priority fusion: fuse each producer into all its consumers, most profitable first.

XLA's ``PriorityFusion`` in heron's terms. For every producer (an instruction
that computes an array on the device, or a scalar constant) whose users can
all take it, the pass builds the fusion of the producer into each user, asks
the emitters whether they can emit it (:class:`FusionChecker`) and prices it
(:mod:`heron.compiler.fusion.cost_model`). The producer's *priority* is the
time saved: its own kernel and its users' kernels, minus the fused kernels.
The producer with the highest priority is fused into all its users (so a
producer with several users is duplicated into each: worth it when the
recomputation is cheaper than writing and reading its result), the
priorities around it are recomputed, and so on while some priority is not
negative.

Reductions take their elementwise producers as their input fusion (``kInput``),
and an elementwise consumer of a reduction takes the reduction as its epilogue
when the result is still a reduction hero the emitters accept; a reduction is
never fused where it would be recomputed per element, nor into a loop kernel
that would sum its inputs serially (XLA's "would create a loop fusion" rule,
:meth:`FusionContext.pair_seconds`). Only the entry
computation is fused (reducers and other called computations stay as they are).

Small constants are not queued: as in XLA, each is fused into every user that
takes it once the queue is empty (:func:`_fuse_constants`), unpriced (a constant
read from a parameter or folded into the code costs the same to the model, and
queued it would be priced again at every step of the fusion it ends in: the
thirty constants of an erf polynomial each cloned the kernel of 148
instructions they went into).
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Iterable

import attrs

from heron.compiler.fusion.builder import (
    Candidate,
    fusion_operands,
    install_fusion,
    is_small_constant,
)
from heron.compiler.fusion.context import FusionContext
from heron.compiler.fusion.fusible import Verdict, is_fusible_consumer, is_fusible_producer
from heron.compiler.fusion.graph import FusionGraph
from heron.hlo.ir import Computation, Instruction, Module
from heron.hlo.passes.manager import HloPass
from heron.target import Target

__all__ = ["Priority", "first_priorities", "fuse_by_priority", "priority_fusion"]


#: Ops a producer must not be duplicated for: a reduction is an epilogue's hero
#: once, and a dot's work is its contraction, which the cost model does not see.
_NEVER_DUPLICATED = frozenset({"reduce", "dot"})


def _heavy(inst: Instruction) -> bool:
    if inst.opcode in _NEVER_DUPLICATED:
        return True
    return inst.opcode == "fusion" and any(
        i.opcode in _NEVER_DUPLICATED for i in inst.called("calls").instructions
    )


def _fusible_users(
    computation: Computation, graph: FusionGraph, producer: Instruction
) -> list[Instruction] | None:
    """The users ``producer`` would be fused into, or None when it may not be fused
    by priority (a small constant is fused after the queue, :func:`_fuse_constants`)."""
    if (
        not is_fusible_producer(producer)
        or computation.root is producer
        or is_small_constant(producer)
    ):
        return None
    users = graph.users(producer)
    if not users or not all(is_fusible_consumer(user) for user in users):
        return None
    if len(users) > 1 and _heavy(producer):
        return None  # a reduction or a dot is computed once, never per user
    return users


def _benefit(
    context: FusionContext, computation: Computation, graph: FusionGraph, producer: Instruction
) -> float | None:
    """The time fusing ``producer`` into all its users saves (None: it may not be fused).

    Each (producer, user) fusion is priced once while both live, and built and
    checked once per body it makes (:meth:`FusionContext.pair_seconds`): a
    rewrite elsewhere changes neither. The popped producer is priced so again
    before its fusions are built (:func:`_build`), so a stale priority costs no
    candidate.
    """
    users = _fusible_users(computation, graph, producer)
    if users is None:
        return None
    fused_seconds = context.fused_seconds(producer, users)
    if fused_seconds is None:
        return None
    return context.apart_seconds(producer, users) - fused_seconds


def _ceiling(
    context: FusionContext, computation: Computation, graph: FusionGraph, producer: Instruction
) -> float | None:
    """At least :func:`_benefit` (None: the same None), from the pairs' prices where
    they are known and their floors where not (:meth:`FusionContext.fused_floor`).

    Around each fusion performed the producers it touches are priced again, and
    most are touched again before they come up: a candidate built and checked
    for each of those pairs was thrown away unread (1,250 candidates for 124
    fusions in the exact-GELU MLP). Queued on this bound, a producer's pairs are
    built when it comes up (:class:`_Queue`), as the same priority.
    """
    users = _fusible_users(computation, graph, producer)
    if users is None:
        return None
    floor = context.fused_floor(producer, users)
    if floor is None:
        return None
    return context.apart_seconds(producer, users) - floor


def _build(
    context: FusionContext, computation: Computation, graph: FusionGraph, producer: Instruction
) -> list[tuple[Candidate, Verdict]] | None:
    """The fusions of ``producer`` into its users, built from the graph as it is now
    (None: one is not emittable after all)."""
    users = _fusible_users(computation, graph, producer)
    if users is None:
        return None
    fusions = []
    for user in users:
        made = context.built_pair(producer, user)  # built when the pair was priced
        if made is None:
            made = context.grown(producer, user, sole_user=len(users) == 1)
        if made is None:
            _discard(fusions)
            return None
        fusions.append(made)
    return fusions


def _discard(fusions: Iterable[tuple[Candidate, Verdict]]) -> None:
    for candidate, _ in fusions:
        candidate.discard()


class _Queue:
    """Producers by priority, highest first (ties: earlier in instruction order).

    XLA's priority queue: a producer's priority is computed when it enters and
    again only when a rewrite touches it (its users or itself change); stale
    entries stay in the heap and are skipped when they come up.

    An entry is the priority itself (``exact``) or a bound it cannot exceed:
    an exact entry that comes up first is ahead of every other producer's
    priority as well as its bound, so the order producers are fused in is the
    order of their priorities, whichever were only bounded.
    """

    def __init__(self) -> None:
        self._heap: list[tuple[float, tuple[int, int], int, Instruction, bool]] = []
        self._current: dict[Instruction, tuple[float | None, bool]] = {}
        self._sequence = itertools.count()

    def set(
        self,
        producer: Instruction,
        benefit: float | None,
        rank: tuple[int, int],
        exact: bool = True,
    ) -> None:
        self._current[producer] = (benefit, exact)
        if benefit is not None and benefit >= 0:
            heapq.heappush(self._heap, (-benefit, rank, next(self._sequence), producer, exact))

    def drop(self, producer: Instruction) -> None:
        self._current.pop(producer, None)

    def pop(self) -> tuple[Instruction, float, bool] | None:
        """The producer ahead, its priority or bound, and which of the two it is."""
        while self._heap:
            negative, _, _, producer, exact = heapq.heappop(self._heap)
            if self._current.get(producer) == (-negative, exact):
                return producer, -negative, exact
        return None


@attrs.frozen
class Priority:
    """One producer's price before anything is fused: the seconds of it fused into each
    of ``users`` and of them apart (XLA's ``update_priority`` record, its ``us_fused``
    and ``us_unfused``)."""

    producer: str
    users: tuple[str, ...]
    fused_seconds: float
    apart_seconds: float


def first_priorities(module: Module, target: Target) -> list[Priority]:
    """Every producer's :class:`Priority` in ``module``'s entry as priority fusion first
    prices it, before any fusion (what the first round of XLA's
    ``priority_fusion_dump.txt`` lists, for comparing the two cost models on one
    module: ``benchmarks/cost_model_vs_xla.py``). Leaves ``module`` unchanged."""
    context = FusionContext(module, target)
    computation = module.entry
    graph = FusionGraph(module, computation)
    found = []
    for producer in computation.post_order():
        users = _fusible_users(computation, graph, producer)
        if users is None:
            continue
        fused = context.fused_seconds(producer, users)
        if fused is None:
            continue
        apart = context.apart_seconds(producer, users)
        found.append(Priority(producer.name, tuple(u.name for u in users), fused, apart))
    graph.finish()
    return found


def fuse_by_priority(module: Module, target: Target) -> bool:
    """Run priority fusion on ``module``'s entry computation for ``target``."""
    context = FusionContext(module, target)
    computation = module.entry
    computation.instructions = computation.post_order()  # ranks in post-order
    graph = FusionGraph(module, computation)
    queue = _Queue()

    def update(inst: Instruction) -> None:
        if graph.alive(inst):
            queue.set(inst, _ceiling(context, computation, graph, inst), graph.rank(inst), False)
        else:
            queue.drop(inst)

    for inst in computation.post_order():
        update(inst)
    changed = False
    while (best := queue.pop()) is not None:
        producer, benefit, exact = best
        if not graph.alive(producer):  # a user fused away since it was queued
            queue.drop(producer)
            continue
        if not exact:  # ahead on its bound: its priority now, back in line
            exact_benefit = _benefit(context, computation, graph, producer)
            # A floor above a price would fuse in another order than XLA's queue.
            assert exact_benefit is None or exact_benefit <= benefit, "a bound below it"
            queue.set(producer, exact_benefit, graph.rank(producer))
            continue
        # The benefit again from the prices as they are now (the pairs' prices are
        # kept while both sides live), before anything is built: most producers
        # popped are fused, but a refusal should cost no candidate.
        fresh = _benefit(context, computation, graph, producer)
        if fresh is None or fresh < 0:
            queue.set(producer, None, graph.rank(producer))
            continue
        if fresh < benefit * 0.999:
            queue.set(producer, fresh, graph.rank(producer))
            continue
        # The candidates are built from the graph as it is now (an operand of a
        # user may have become a fusion since the pair was priced).
        fusions = _build(context, computation, graph, producer)
        if fusions is None or not all(context.emits(candidate) for candidate, _ in fusions):
            _discard(fusions or ())
            queue.set(producer, None, graph.rank(producer))
            continue
        touched = list(producer.operands)
        for candidate, verdict in fusions:
            # The producer stays until its last user has taken it. A user may read
            # another user, which the fusion installed before replaced: the body is
            # the one a build would make now, reading that fusion where it read the
            # user (of its shape, and new: no operand merges with it).
            if not all(graph.alive(operand) for operand in candidate.fusion.operands):
                operands = fusion_operands(candidate.members)
                assert len(operands) == len(candidate.fusion.operands), "one for one"
                candidate.fusion.operands = operands
            fusion = install_fusion(module, computation, candidate, verdict.fusion_kind, graph)
            context.installed(fusion, producer, candidate.outputs[0], verdict, candidate)
            for member in candidate.members:
                if not graph.alive(member):
                    context.forget(member)  # its prices and pairs, as XLA invalidates
            touched.append(fusion)
            touched.extend(fusion.operands)
        queue.drop(producer)
        seen: set[int] = set()
        for inst in touched:
            if id(inst) not in seen:
                seen.add(id(inst))
                update(inst)
        changed = True
    changed |= _fuse_constants(context, module, computation, graph)
    graph.finish()
    return changed


def _fuse_constants(
    context: FusionContext, module: Module, computation: Computation, graph: FusionGraph
) -> bool:
    """Fuse the small constants into each user that takes them, all of a user's at once.

    XLA's priority fusion ends so, unpriced: a small constant is folded into the
    code of every kernel that reads it. Here each user that may be fused into
    takes its constant operands in one fusion (one build of its body, not one per
    constant), checked and emitted like any fusion a pass makes; a user that
    refuses them keeps reading them as parameters.
    """
    changed = False
    for user in list(graph.instructions()):
        if not graph.alive(user) or not is_fusible_consumer(user):
            continue
        constants = [
            operand
            for operand in dict.fromkeys(user.operands)
            if is_small_constant(operand) and computation.root is not operand
        ]
        if not constants:
            continue
        made = context.candidate([*constants, user], [user], consumer=user)
        if made is None or not context.emits(made[0]):
            if made is not None:
                made[0].discard()
            continue
        candidate, verdict = made
        install_fusion(module, computation, candidate, verdict.fusion_kind, graph)
        for member in candidate.members:
            if not graph.alive(member):
                context.forget(member)
        changed = True
    return changed


def priority_fusion(target: Target) -> HloPass:
    """The ``priority-fusion`` pass for ``target``."""
    return HloPass(
        "priority-fusion",
        lambda module: fuse_by_priority(module, target),
        "fuse producers into all their consumers, most time saved first (cost model)",
        entry_only=True,
    )
