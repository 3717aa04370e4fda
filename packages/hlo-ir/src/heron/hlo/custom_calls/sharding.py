"""Sharding annotations: custom calls that say how to split a value, and compute nothing.

jax writes ``lax.with_sharding_constraint`` and the sharding of a ``jit``'s
arguments as ``custom-call(x), custom_call_target="Sharding"`` (and
``shard_map`` as ``SPMDFullToShardShape`` / ``SPMDShardToFullShape``). XLA's
SPMD partitioner consumes them when a program runs on several devices; on
one device XLA's ``ShardingRemover`` replaces each by its operand. heron
compiles for one device, so the value is the operand: the pass
``sharding-remover`` removes them before anything else and the reference
evaluator passes the operand through. An annotation whose result shape is not
its operand's (a ``shard_map`` over several devices) is none of these: it
stays, and is refused by name as any custom call no plugin provides.
"""

from __future__ import annotations

from heron.hlo.ir import Instruction

__all__ = ["SHARDING_TARGETS", "is_sharding_annotation"]

#: The custom-call targets XLA's ShardingRemover removes on one device.
SHARDING_TARGETS = frozenset({"Sharding", "SPMDFullToShardShape", "SPMDShardToFullShape"})


def is_sharding_annotation(inst: Instruction) -> bool:
    """Whether ``inst`` is a sharding annotation that, on one device, is its operand."""
    if inst.opcode != "custom-call" or len(inst.operands) != 1:
        return False
    target = inst.attributes.get("custom_call_target")
    name = getattr(target, "text", target)
    return name in SHARDING_TARGETS and inst.shape == inst.operands[0].shape
