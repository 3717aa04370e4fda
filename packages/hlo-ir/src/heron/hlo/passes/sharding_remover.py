"""Sharding annotations removed: on one device, ``custom-call(x), custom_call_target="Sharding"``
is ``x`` (XLA's ``ShardingRemover``; :mod:`heron.hlo.custom_calls.sharding` says which
calls are annotations).

jax code written for several devices (``lax.with_sharding_constraint``, a
``NamedSharding`` on a ``jit``) runs on one as well: XLA removes the
annotations when the program has one partition, and so does heron, first in
its pipeline, so that fusion sees the values flow through.
"""

from __future__ import annotations

from heron.hlo.custom_calls.sharding import is_sharding_annotation
from heron.hlo.ir import Module
from heron.hlo.passes.registry import hlo_pass
from heron.hlo.passes.rewrite import forward_operands

__all__ = ["remove_shardings"]


@hlo_pass("sharding-remover", "sharding annotations become their operand (one device, XLA's)")
def remove_shardings(module: Module) -> bool:
    """Replace every sharding annotation outside fusion bodies by its operand."""
    return forward_operands(module, is_sharding_annotation)
