"""The plugin contract for hero emitters (entry-point group ``heron.emitters``).

A distribution adds an emitter by declaring, in its pyproject.toml::

    [project.entry-points."heron.emitters"]
    my_emitter = "my_package.my_module"

where ``my_package.my_module`` implements the hook below::

    from heron.emitters.hookspecs import EmitterSpec, hookimpl

    @hookimpl
    def heron_emitter_specs():
        return [EmitterSpec(name="my_emitter", priority=10, claims=..., factory=MyEmitter)]

with ``claims(analysis) -> bool`` and ``MyEmitter(analysis)`` a ``FusionEmitter``
(see ``EmitterSpec``).

heron's own emitters (heron-emitter-plugins) register exactly this way.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import attrs
import pluggy

from heron.hlo.plugin_loading import (
    PROJECT,
    check_bool,
    check_callable,
    check_int,
    check_spec_name,
)

GROUP = "heron.emitters"

hookspec = pluggy.HookspecMarker(PROJECT)
hookimpl = pluggy.HookimplMarker(PROJECT)


@attrs.frozen
class EmitterSpec:
    """One hero emitter as a plugin offers it.

    ``claims(analysis)`` says whether this emitter can emit the fusion that
    ``analysis`` describes (a ``heron.emitters.fusion_analysis.FusionAnalysis``:
    the fusion, the target, XLA's ``kind`` and every root's hero, computed once
    for all emitters); it must return a bool, and False, not an exception, for
    anything that is not such an analysis. ``heron.emitters.fusion_analysis
    .claims_kind("transpose")`` is the claims function of an emitter that takes
    what XLA would give its transpose emitter. Among the emitters that claim an
    analysis, the highest ``priority`` wins, so a specialised emitter outranks a
    general one (the loop emitter, which claims every fusion, sits at 0).
    ``factory(analysis)`` builds the emitter object for that one fusion (a
    ``heron.emitters.emitter_base.FusionEmitter`` whose ``name`` is this
    spec's ``name``: the kernel reports who really emitted it).

    ``refuses_when_built``: the factory raises for every fusion the emitter
    cannot emit, so that emitting never refuses one it built. The fusion
    passes, which must know before they make a fusion that its emitter takes
    it, then build the emitter instead of emitting the whole kernel (emission
    is most of a fusion pass's time). Leave it False where some limit is only
    found while emitting: the passes emit each fusion they are about to make.
    """

    name: str = attrs.field(validator=check_spec_name)
    priority: int = attrs.field(validator=check_int)
    claims: Callable[[Any], bool] = attrs.field(validator=check_callable)
    factory: Callable[[Any], Any] = attrs.field(validator=check_callable)
    description: str = ""
    refuses_when_built: bool = attrs.field(default=False, validator=check_bool)


@hookspec
def heron_emitter_specs() -> EmitterSpec | list[EmitterSpec]:
    """Return the emitters this plugin provides (one spec, or a list, possibly empty)."""
