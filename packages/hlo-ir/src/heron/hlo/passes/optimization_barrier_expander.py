"""Optimization barriers removed: ``opt-barrier(x)`` is ``x``.

An optimization barrier (``opt-barrier``, what ``jax.checkpoint``/remat and
``jax.lax.optimization_barrier`` lower to) computes nothing: its result is
its operand. It exists to keep XLA's passes from moving or merging values
across it, so that a rematerialised forward is recomputed in the backward
pass instead of kept alive. XLA:GPU removes the barriers itself
(``OptimizationBarrierExpander``) once the passes they guard have run; heron
has no rematerialisation pass to guard, so it removes them first, before
simplification. The values are the program's either way; what changes is
that CSE may then share a recomputed forward with the original one (more
memory live, fewer kernels), which is the scheduler's trade, not a result.
"""

from __future__ import annotations

from heron.hlo.ir import Module
from heron.hlo.passes.registry import hlo_pass
from heron.hlo.passes.rewrite import forward_operands

__all__ = ["BARRIERS", "expand_optimization_barriers"]

#: The opcode's two spellings (XLA prints ``opt-barrier``).
BARRIERS = frozenset({"opt-barrier", "optimization-barrier"})


@hlo_pass("optimization-barrier-expander", "opt-barrier(x) becomes x (XLA's expander)")
def expand_optimization_barriers(module: Module) -> bool:
    """Replace every barrier outside fusion bodies by its operand; True when any was."""
    return forward_operands(module, lambda inst: inst.opcode in BARRIERS)
