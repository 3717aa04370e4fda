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
never fused where it would be recomputed per element. Only the entry
computation is fused (reducers and other called computations stay as they are).
"""

from __future__ import annotations

import attrs

from heron.compiler.fusion.builder import Candidate, install_fusion
from heron.compiler.fusion.context import FusionContext
from heron.compiler.fusion.fusible import Verdict, is_fusible_consumer, is_fusible_producer
from heron.compiler.target import Target
from heron.hlo.ir import Computation, Instruction, Module
from heron.hlo.passes.manager import HloPass

__all__ = ["fuse_by_priority", "priority_fusion"]


@attrs.frozen
class _Plan:
    producer: Instruction
    benefit: float
    fusions: tuple[tuple[Candidate, Verdict], ...]


def _users(users: dict[Instruction, list[Instruction]], inst: Instruction) -> list[Instruction]:
    seen: dict[int, Instruction] = {}
    for user in users.get(inst, ()):
        seen.setdefault(id(user), user)
    return list(seen.values())


def _reduces(inst: Instruction) -> bool:
    if inst.opcode == "reduce":
        return True
    return inst.opcode == "fusion" and any(
        i.opcode == "reduce" for i in inst.called("calls").instructions
    )


def _plan(
    context: FusionContext,
    computation: Computation,
    users_of: dict[Instruction, list[Instruction]],
    producer: Instruction,
) -> _Plan | None:
    if not is_fusible_producer(producer) or computation.root is producer:
        return None
    users = _users(users_of, producer)
    if not users or not all(is_fusible_consumer(user) for user in users):
        return None
    if len(users) > 1 and _reduces(producer):
        return None  # a reduction is an epilogue's hero once, never recomputed per user
    fusions = []
    fused_seconds = 0.0
    for user in users:
        made = context.candidate([producer, user], [user])
        if made is None:
            return None
        fusions.append(made)
        fused_seconds += context.price(*made).seconds
    apart = context.cost(producer).seconds + sum(context.cost(user).seconds for user in users)
    return _Plan(producer, apart - fused_seconds, tuple(fusions))


def fuse_by_priority(module: Module, target: Target) -> bool:
    """Run priority fusion on ``module``'s entry computation for ``target``."""
    context = FusionContext(module, target)
    computation = module.entry
    plans: dict[int, tuple[Instruction, _Plan | None]] = {}
    changed = False
    while True:
        best: _Plan | None = None
        users_of = computation.users()
        for inst in computation.post_order():
            cached = plans.get(id(inst))
            if cached is None or cached[0] is not inst:
                cached = (inst, _plan(context, computation, users_of, inst))
                plans[id(inst)] = cached
            plan = cached[1]
            if (
                plan is not None
                and plan.benefit >= 0
                and (best is None or plan.benefit > best.benefit)
            ):
                best = plan
        if best is None:
            return changed
        # A cached plan may predate a rewrite next to it: apply a fresh one.
        fresh = _plan(context, computation, users_of, best.producer)
        plans[id(best.producer)] = (best.producer, fresh)
        if fresh is None or fresh.benefit < 0 or fresh.benefit < best.benefit * 0.999:
            continue
        if not all(context.emits(candidate) for candidate, _ in fresh.fusions):
            plans[id(best.producer)] = (best.producer, None)
            continue
        best = fresh
        stale = {id(op) for op in best.producer.operands}
        for candidate, verdict in best.fusions:
            # The members were built from the current graph; the producer stays
            # until its last user has taken it.
            fusion = install_fusion(module, computation, candidate, verdict.fusion_kind)
            stale.update(id(op) for op in fusion.operands)
        for key in stale:
            plans.pop(key, None)
        changed = True


def priority_fusion(target: Target) -> HloPass:
    """The ``priority-fusion`` pass for ``target``."""
    return HloPass(
        "priority-fusion",
        lambda module: fuse_by_priority(module, target),
        "fuse producers into all their consumers, most time saved first (cost model)",
    )
