"""The installed hero emitters, and the choice of one for a fusion.

``load_emitters()`` reads the ``heron.emitters`` entry-point group; ``select``
asks every emitter whether it claims a fusion's analysis (``heron.emitters
.fusion_analysis.FusionAnalysis``, computed once and shown to all of them) and
keeps the highest priority.
Two emitters claiming the same fusion at the same priority is an error, not a
coin toss: which one wins must not depend on installation order.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from heron.emitters import hookspecs
from heron.emitters.hookspecs import GROUP, EmitterSpec
from heron.hlo.plugin_loading import PluginError, PluginOrigin, PluginTable, load_specs


class EmitterRegistry(PluginTable[EmitterSpec]):
    def __init__(self, entries: Iterable[tuple[EmitterSpec, PluginOrigin | None]] = ()):
        super().__init__(GROUP, entries)

    def claimants(self, analysis: Any) -> list[EmitterSpec]:
        """Emitters that claim ``analysis`` (a fusion's analysis), best first."""
        result = []
        for spec in self.specs:
            try:
                claimed = spec.claims(analysis)
            except Exception as exc:
                raise PluginError(
                    f"{self.describe(spec.name)}: claims() raised {type(exc).__name__}: {exc}"
                ) from exc
            if not isinstance(claimed, bool):
                raise PluginError(
                    f"{self.describe(spec.name)}: claims() returned"
                    f" {type(claimed).__name__} {claimed!r}, expected a bool"
                )
            if claimed:
                result.append(spec)
        return result

    def select(self, analysis: Any) -> EmitterSpec:
        """The emitter for the fusion ``analysis`` describes: the highest-priority claimant.

        Anything that is not an analysis of a fusion is claimed by no emitter, so
        it gets the "no hero emitter claims" error naming it.
        """
        candidates = self.claimants(analysis)
        label = _label(analysis)
        if not candidates:
            known = ", ".join(self.names()) or "none installed"
            raise PluginError(f"no hero emitter claims fusion '{label}' (emitters: {known})")
        if len(candidates) > 1 and candidates[0].priority == candidates[1].priority:
            tied = [s for s in candidates if s.priority == candidates[0].priority]
            raise PluginError(
                f"fusion '{label}' is claimed by several emitters at priority"
                f" {candidates[0].priority}: " + "; ".join(self.describe(s.name) for s in tied)
            )
        return candidates[0]


def _label(analysis: Any) -> str:
    """The fusion's name for an error message (an analysis's fusion, or the object itself)."""
    fusion = getattr(analysis, "fusion", analysis)
    return getattr(fusion, "name", None) or repr(analysis)


def load_emitters(path: Sequence[str] | None = None) -> EmitterRegistry:
    """Every emitter registered through the entry points on ``path`` (default ``sys.path``)."""
    return EmitterRegistry(load_specs(GROUP, hookspecs, "heron_emitter_specs", EmitterSpec, path))
