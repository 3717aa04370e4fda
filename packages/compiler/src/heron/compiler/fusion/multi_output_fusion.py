"""Multi-output fusion: one kernel for siblings, and for a producer with its consumer.

XLA's ``MultiOutputFusion``, after priority fusion:

- *sibling*: two kernels reading the same operand, neither depending on the
  other, become one kernel with both outputs, so the operand is read once and
  one launch is saved;
- *producer-consumer*: a producer that priority fusion could not fuse away
  (it has a user that cannot take it, or is an output of the module) is fused
  into one consumer and stays an output of the new fusion, so its kernel
  disappears while its other users read the fusion's output.

A merge is made only when no path leads from one kernel to the other through
the rest of the graph (it would make a cycle: checked with
:class:`~heron.compiler.fusion.reachability.Reachability`), the emitters accept
the result, loop kernels' outputs have one shape (one thread per element of
all of them), and the cost model says it saves time.
"""

from __future__ import annotations

import itertools

from heron.compiler.fusion.builder import install_fusion, outputs_of
from heron.compiler.fusion.context import FusionContext
from heron.compiler.fusion.fusible import Verdict, is_fusible_consumer, is_fusible_producer
from heron.compiler.fusion.reachability import Reachability
from heron.compiler.target import Target
from heron.hlo.ir import Computation, Instruction, Module
from heron.hlo.passes.manager import HloPass
from heron.hlo.passes.outline import HOST_OPCODES
from heron.hlo.shapes import ArrayShape

__all__ = ["fuse_multi_output", "multi_output_fusion"]


def _kernel(inst: Instruction) -> bool:
    return inst.opcode not in HOST_OPCODES and is_fusible_consumer(inst)


def _members(inst: Instruction, outputs: list[Instruction]) -> list[Instruction]:
    return [inst] + [o for o in outputs if o is not inst]


def _shapes_agree(verdict: Verdict, outputs: list[Instruction]) -> bool:
    if verdict.emitter_kind != "loop":
        return True  # the analysis checked the heroes' compatibility
    dims = {o.shape.dims for o in outputs if isinstance(o.shape, ArrayShape)}
    return len(dims) <= 1


def _try(
    context: FusionContext,
    computation: Computation,
    members: list[Instruction],
    outputs: list[Instruction],
    apart: float,
    order: Reachability,
) -> bool:
    members = sorted(members, key=order.position)
    made = context.candidate(members, outputs)
    if made is None or not _shapes_agree(made[1], outputs):
        return False
    if context.price(*made).seconds >= apart or not context.emits(made[0]):
        return False
    install_fusion(context.module, computation, made[0], made[1].fusion_kind)
    return True


def _sibling_round(context: FusionContext, computation: Computation) -> bool:
    order = Reachability(computation)
    for operand in computation.post_order():
        users: list[Instruction] = []
        for inst in computation.instructions:
            if any(op is operand for op in inst.operands) and _kernel(inst):
                if all(u is not inst for u in users):
                    users.append(inst)
        for a, b in itertools.combinations(users, 2):
            if not order.independent(a, b):
                continue
            outs_a, outs_b = outputs_of(a), outputs_of(b)
            if outs_a is None or outs_b is None:
                continue
            apart = context.cost(a).seconds + context.cost(b).seconds
            members = _members(a, outs_a) + _members(b, outs_b)
            if _try(context, computation, members, outs_a + outs_b, apart, order):
                return True
    return False


def _producer_consumer_round(context: FusionContext, computation: Computation) -> bool:
    order = Reachability(computation)
    for producer in computation.post_order():
        if producer.opcode in HOST_OPCODES or not is_fusible_producer(producer):
            continue
        users = [u for u in computation.instructions if any(op is producer for op in u.operands)]
        if len(users) < 2 and computation.root is not producer:
            continue  # priority fusion's business
        for consumer in users:
            if not _kernel(consumer):
                continue
            if any(op is not producer and order.reaches(producer, op) for op in consumer.operands):
                continue  # another path from the producer into the consumer: a cycle
            outs = outputs_of(consumer)
            if outs is None:
                continue
            apart = context.cost(producer).seconds + context.cost(consumer).seconds
            members = [producer, *_members(consumer, outs)]
            if _try(context, computation, members, [producer, *outs], apart, order):
                return True
    return False


def fuse_multi_output(module: Module, target: Target) -> bool:
    """Producer-consumer, then sibling multi-output fusion of the entry, to a fixed point."""
    context = FusionContext(module, target)
    changed = False
    while _producer_consumer_round(context, module.entry) or _sibling_round(context, module.entry):
        changed = True
    return changed


def multi_output_fusion(target: Target) -> HloPass:
    """The ``multi-output-fusion`` pass for ``target``."""
    return HloPass(
        "multi-output-fusion",
        lambda module: fuse_multi_output(module, target),
        "merge sibling kernels and producers with a consumer into multi-output fusions",
    )
