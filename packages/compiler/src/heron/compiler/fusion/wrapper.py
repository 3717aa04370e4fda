"""Fusion wrapper: every computing instruction left alone becomes a fusion of its own.

XLA's ``FusionWrapper``, the last fusion pass: the emitters compile fusions,
so an instruction no fusion pass merged (a lone broadcast, the last add of a
chain) gets a fused computation holding just itself, of the kind its analysis
gives (``kLoop``, or ``kInput`` for a lone reduction or transpose). Host
instructions stay (parameters, constants, tuples, get-tuple-element,
bitcasts), and so do instructions no emitter takes (dot, custom-call, ...):
the executor refuses those by name. A sort gets a fusion of its own here, for
the sort emitter.
"""

from __future__ import annotations

from heron.compiler.fusion.builder import install_fusion
from heron.compiler.fusion.context import FusionContext
from heron.compiler.fusion.fusible import is_wrappable
from heron.compiler.fusion.graph import FusionGraph
from heron.hlo.ir import Module
from heron.hlo.passes.manager import HloPass
from heron.hlo.passes.outline import HOST_OPCODES
from heron.target import Target

__all__ = ["fusion_wrapper", "wrap_in_fusions"]


def wrap_in_fusions(module: Module, target: Target) -> bool:
    """Wrap each remaining computing instruction of ``module``'s entry in a fusion."""
    context = FusionContext(module, target)
    computation = module.entry
    graph = FusionGraph(module, computation)  # one for the pass: an install costs what it touches
    changed = False
    for inst in list(computation.instructions):
        if inst.opcode in HOST_OPCODES or inst.opcode == "fusion":
            continue
        if not is_wrappable(inst):
            continue
        made = context.candidate([inst], [inst], consumer=inst)
        if made is None or not context.emits(made[0]):
            continue
        install_fusion(module, computation, made[0], made[1].fusion_kind, graph)
        changed = True
    graph.finish()
    return changed


def fusion_wrapper(target: Target) -> HloPass:
    """The ``fusion-wrapper`` pass for ``target``."""
    return HloPass(
        "fusion-wrapper",
        lambda module: wrap_in_fusions(module, target),
        "give every computing instruction left unfused a fusion of its own",
        entry_only=True,
    )
