"""The installed backends, their availability, and the choice of one.

``load_backends()`` reads the ``heron.backends`` entry-point group. A backend
that is installed may still be unusable here (no driver, no device): that is
not an error until someone selects it, and then the error says why.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import attrs

from heron.hlo.plugin_loading import PluginError, PluginOrigin, PluginTable, load_specs
from heron.runtime.core import hookspecs
from heron.runtime.core.hookspecs import GROUP, BackendSpec


@attrs.frozen
class Availability:
    available: bool
    reason: str


class BackendRegistry(PluginTable[BackendSpec]):
    def __init__(self, entries: Iterable[tuple[BackendSpec, PluginOrigin | None]] = ()):
        super().__init__(GROUP, entries)

    def availability(self, name: str) -> Availability:
        spec = self.get(name)
        try:
            value = spec.is_available()
        except Exception as exc:
            raise PluginError(
                f"{self.describe(name)}: is_available() raised {type(exc).__name__}: {exc}"
            ) from exc
        if (
            not isinstance(value, tuple)
            or len(value) != 2
            or not isinstance(value[0], bool)
            or not isinstance(value[1], str)
        ):
            raise PluginError(
                f"{self.describe(name)}: is_available() returned {value!r},"
                " expected a (bool, str) tuple"
            )
        return Availability(*value)

    def select(self, name: str | None = None) -> BackendSpec:
        """The backend called ``name``, or the best available one; it must be available."""
        if name is not None:
            status = self.availability(name)
            if not status.available:
                raise PluginError(f"{self.describe(name)} is not available: {status.reason}")
            return self.get(name)
        reasons = []
        for spec in self.specs:
            status = self.availability(spec.name)
            if status.available:
                return spec
            reasons.append(f"{spec.name}: {status.reason}")
        detail = "; ".join(reasons) if reasons else "none is installed"
        raise PluginError(f"no {GROUP} backend is available ({detail})")

    def create_device(self, name: str | None = None) -> Any:
        return self.select(name).device_factory()

    def load_compiler(self, name: str) -> Callable[..., Any]:
        """Import the backend's compiler (only now: it may need MLIR)."""
        spec = self.get(name)
        if spec.compiler is None:
            raise PluginError(f"{self.describe(name)} has no compiler (it can only run artefacts)")
        module_name, _, attribute = spec.compiler.partition(":")
        try:
            target: Any = importlib.import_module(module_name)
            for part in attribute.split("."):
                target = getattr(target, part)
        except Exception as exc:
            raise PluginError(
                f"{self.describe(name)}: cannot load its compiler '{spec.compiler}':"
                f" {type(exc).__name__}: {exc}"
            ) from exc
        if not callable(target):
            raise PluginError(
                f"{self.describe(name)}: compiler '{spec.compiler}' is a"
                f" {type(target).__name__}, not a function"
            )
        return target


def load_backends(path: Sequence[str] | None = None) -> BackendRegistry:
    """Every backend registered through the entry points on ``path`` (default ``sys.path``)."""
    return BackendRegistry(load_specs(GROUP, hookspecs, "heron_backend_specs", BackendSpec, path))
