"""How many devices an HLO module is written for: its header's replicas times partitions.

heron runs a program on one device; the collectives of a program written for one
(``shard_map`` over a mesh of one) are simplified away
(:mod:`heron.hlo.passes.one_device_collectives`) and the reference evaluator computes
them the same way, both reading the count here.
"""

from __future__ import annotations

from heron.hlo.attributes import RawAttribute
from heron.hlo.ir import Module

__all__ = ["devices_declared"]


def devices_declared(module: Module) -> int:
    """Replicas times partitions the module's header declares (1 where it says none)."""
    count = 1
    for name in ("replica_count", "num_partitions"):
        value = module.header.get(name)
        if value is not None:
            count *= int(value.text if isinstance(value, RawAttribute) else value)
    return count
