"""The plugin contract for hero emitters (entry-point group ``heron.emitters``).

A distribution adds an emitter by declaring, in its pyproject.toml::

    [project.entry-points."heron.emitters"]
    my_emitter = "my_package.my_module"

where ``my_package.my_module`` implements the hook below::

    from heron.emitters.hookspecs import EmitterSpec, hookimpl

    @hookimpl
    def heron_emitter_specs():
        return [EmitterSpec(name="my_emitter", priority=10, claims=..., factory=...)]

heron's own emitters (heron-emitter-plugins) register exactly this way.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import attrs
import pluggy

from heron.hlo.plugin_loading import (
    PROJECT,
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

    ``claims(fusion)`` says whether this emitter can emit ``fusion`` (a fusion
    instruction, ``heron.hlo.ir.Instruction``); it must return a bool and not
    modify the fusion. Among the emitters that claim a fusion, the highest
    ``priority`` wins, so a specialised emitter outranks a general one (the
    loop emitter, which claims everything elementwise, should sit low).
    ``factory(fusion)`` builds the emitter object for one fusion.
    """

    name: str = attrs.field(validator=check_spec_name)
    priority: int = attrs.field(validator=check_int)
    claims: Callable[[Any], bool] = attrs.field(validator=check_callable)
    factory: Callable[[Any], Any] = attrs.field(validator=check_callable)
    description: str = ""


@hookspec
def heron_emitter_specs() -> EmitterSpec | list[EmitterSpec]:
    """Return the emitters this plugin provides (one spec, or a list, possibly empty)."""
