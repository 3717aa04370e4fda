"""The plugin contract for backends (entry-point group ``heron.backends``).

A backend is a target: a way to turn the shared MLIR pipeline's output into
device code (its *compiler*) and a device that runs that code. A distribution
adds one by declaring, in its pyproject.toml::

    [project.entry-points."heron.backends"]
    my_backend = "my_package.backend"

where ``my_package.backend`` implements the hook below::

    from heron.runtime.core.hookspecs import BackendSpec, hookimpl

    @hookimpl
    def heron_backend_specs():
        return BackendSpec(name="my_backend", priority=10, is_available=...,
                           device_factory=..., compiler="my_package.compile:compile")

The compiler is named by a ``"module:attribute"`` string and imported only
when something asks to compile, never when the plugin is loaded: a machine
that only runs serialised executables has no MLIR or llvmlite installed, and
its backends must still load and run there.
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
    check_reference,
    check_spec_name,
)

GROUP = "heron.backends"

hookspec = pluggy.HookspecMarker(PROJECT)
hookimpl = pluggy.HookimplMarker(PROJECT)


@attrs.frozen
class BackendSpec:
    """One backend as a plugin offers it.

    ``is_available()`` returns ``(True, description)`` or ``(False, reason)``,
    the reason being something a user can act on ("no CUDA driver found
    (...)"); it must not raise when the hardware or driver is missing.
    ``device_factory()`` opens the device. ``compiler``, when given, is the
    ``"module:attribute"`` of the function that lowers to this target; it is
    imported lazily (see the module docstring). Higher ``priority`` wins when
    no backend is named.
    """

    name: str = attrs.field(validator=check_spec_name)
    priority: int = attrs.field(validator=check_int)
    is_available: Callable[[], tuple[bool, str]] = attrs.field(validator=check_callable)
    device_factory: Callable[[], Any] = attrs.field(validator=check_callable)
    compiler: str | None = attrs.field(default=None, validator=check_reference)
    description: str = ""


@hookspec
def heron_backend_specs() -> BackendSpec | list[BackendSpec]:
    """Return the backends this plugin provides (one spec, or a list, possibly empty)."""
