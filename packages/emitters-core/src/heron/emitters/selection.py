"""Hero selection: analyse a fusion once, pick the installed emitter that claims it, emit.

``emit_fusion(fusion, target)`` is the whole of stage ``emitted``
(docs/pipeline.md): ``analyse_fusion`` computes the fusion's analysis for the
target once; every installed emitter sees that same analysis in ``claims``;
the highest-priority claimant's ``factory`` builds the emitter from it; the
kernel it emits names that emitter. Nothing is relabelled: a factory whose
emitter calls itself something else than its spec is a plugin error.

The registry (``heron.emitters.registry``) reads the ``heron.emitters``
entry-point group; loading it scans installed distributions, so the default
registry is loaded once per process and reused. Tests and plugins pass their
own ``registry``.
"""

from __future__ import annotations

import functools
from collections.abc import Collection

from heron.emitters.emitter_base import EmittedKernel, share_buffers
from heron.emitters.fusion_analysis import FusionAnalysis, analyse_fusion
from heron.emitters.hookspecs import EmitterSpec
from heron.emitters.registry import EmitterRegistry, load_emitters
from heron.hlo.errors import HloError, UnsupportedError
from heron.hlo.ir import Instruction
from heron.hlo.plugin_loading import PluginError
from heron.target import Target

__all__ = [
    "analyse_fusion",
    "default_registry",
    "emit_fusion",
    "emitter_heroes",
    "select_emitter",
]


@functools.cache
def default_registry() -> EmitterRegistry:
    """The emitters installed in this environment (loaded on first use, then cached)."""
    return load_emitters()


def select_emitter(
    analysis: FusionAnalysis, registry: EmitterRegistry | None = None
) -> EmitterSpec:
    """The emitter spec for the analysed fusion: the highest-priority claimant.

    ``PluginError`` when no emitter claims it (anything that is not a fusion's
    analysis is claimed by none) or two claim it at the same priority.
    """
    return (registry or default_registry()).select(analysis)


def emitter_heroes(analysis: FusionAnalysis, spec: EmitterSpec) -> tuple[Instruction, ...]:
    """The instructions the selected emitter computes as heroes (``FusionEmitter.heroes``).

    ``analysis.heroes`` is XLA's hero per root (a reduce, a transpose); an
    emitter may compute more than that itself: the GEMM emitter's dot under an
    epilogue, the sort emitter's sort. Only the emitter built for the analysis
    knows, so it is asked, once, by whoever must decide whether a dot or a sort
    is computed whole (the fusion checker) rather than per element. Errors of the
    factory (an emitter that refuses the fusion) propagate.
    """
    return tuple(spec.factory(analysis).heroes())


def emit_fusion(
    fusion: Instruction,
    target: Target,
    registry: EmitterRegistry | None = None,
    *,
    shared: Collection[int] = (),
) -> EmittedKernel:
    """Analyse ``fusion`` for ``target``, select its emitter and emit it (stage ``emitted``).

    ``target`` is the device (:class:`heron.target.Target`). The kernel's
    ``emitter`` is the name of the emitter that emitted it. ``shared`` are the
    kernel argument indices whose buffer the launch makes overlap another
    argument's (:func:`heron.emitters.emitter_base.share_buffers`): they are
    emitted neither ``noalias`` nor ``readonly``; none by default.
    """
    analysis = analyse_fusion(fusion, target)
    spec = select_emitter(analysis, registry)
    emitter = spec.factory(analysis)
    built = getattr(emitter, "name", None)
    if built != spec.name:
        origin = (registry or default_registry()).describe(spec.name)
        raise PluginError(
            f"fusion '{fusion.name}': {origin}: its factory built the emitter"
            f" {built!r} ({type(emitter).__name__}), not {spec.name!r}; a factory must build"
            " the emitter its spec names"
        )
    try:
        emitted = emitter.emit()
    except HloError as exc:  # a limit met while emitting (the dialect's, say): say where
        if f"fusion '{fusion.name}'" in exc.message:
            raise
        raise UnsupportedError(
            f"fusion '{fusion.name}' ({spec.name} emitter): {exc.message}",
            exc.location or fusion.location,
        ) from exc
    return share_buffers(emitted, shared)
