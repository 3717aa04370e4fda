"""Loading heron plugins from entry points, with errors that name the distribution.

heron has two plugin groups: ``heron.emitters`` (hero emitters, specified in
heron-emitters-core) and ``heron.backends`` (targets and devices, specified in
heron-runtime-core). Both work the same way: an installed distribution
declares an entry point in the group; the entry point names a module (or
object) carrying pluggy hook implementations; each hook returns *specs*
(small frozen records with a ``name`` and a ``priority``). This module is what
the two groups share. It lives in heron-hlo-ir only because that is the one
distribution both depend on.

Why not simply ``pluggy.PluginManager.load_setuptools_entrypoints``: when a
plugin fails to import it lets the exception escape without saying which
distribution's entry point was being loaded, and when a hook returns garbage
the results of ``pm.hook.x()`` no longer say which plugin returned what. A user
with twenty packages installed deserves "heron-foo 1.2's entry point 'bar'
failed: ...". So the loop over entry points is ours (it mirrors pluggy's: same
distributions, same entry points), while registration, hook specifications and
signature validation of implementations stay pluggy's.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import re
from collections.abc import Iterable, Sequence
from types import ModuleType
from typing import Any, Generic, TypeVar

import attrs
import pluggy

#: The pluggy project name of every heron hook (``@hookimpl`` sets ``heron_impl``).
PROJECT = "heron"

T = TypeVar("T")


class PluginError(Exception):
    """A plugin could not be loaded, returned something invalid, or was not found."""


# ---------------------------------------------------------------------------
# attrs validators both groups' specs use (EmitterSpec, BackendSpec).
# ---------------------------------------------------------------------------
_SPEC_NAME = re.compile(r"[a-z][a-z0-9_.-]*\Z")
_REFERENCE = re.compile(r"[A-Za-z_][\w.]*:[A-Za-z_][\w.]*\Z")


def check_spec_name(instance: Any, attribute: attrs.Attribute, value: Any) -> None:
    """A plugin name: a lower-case identifier ('loop', 'my-emitter', 'cuda')."""
    if not isinstance(value, str) or not _SPEC_NAME.match(value):
        raise ValueError(
            f"{attribute.name} must be a lower-case identifier such as 'loop' or 'my-emitter',"
            f" got {value!r}"
        )


def check_int(instance: Any, attribute: attrs.Attribute, value: Any) -> None:
    """An int that is not a bool (a priority)."""
    if not isinstance(value, int) or isinstance(value, bool):
        raise TypeError(f"{attribute.name} must be an int, got {type(value).__name__} {value!r}")


def check_bool(instance: Any, attribute: attrs.Attribute, value: Any) -> None:
    """True or False (a flag), nothing that merely converts to one."""
    if not isinstance(value, bool):
        raise TypeError(f"{attribute.name} must be True or False, got {type(value).__name__}")


def check_callable(instance: Any, attribute: attrs.Attribute, value: Any) -> None:
    if not callable(value):
        raise TypeError(f"{attribute.name} must be callable, got {type(value).__name__}")


def check_reference(instance: Any, attribute: attrs.Attribute, value: Any) -> None:
    """None or a ``"module:attribute"`` string (imported only when used)."""
    if value is not None and (not isinstance(value, str) or not _REFERENCE.match(value)):
        raise ValueError(
            f"{attribute.name} must be None or a 'module:attribute' string, got {value!r}"
        )


def resolve_reference(reference: str) -> Any:
    """The object a ``"module:attribute"`` string names (``attribute`` may be dotted)."""
    module_name, _, attribute = reference.partition(":")
    target: Any = importlib.import_module(module_name)
    for part in attribute.split("."):
        target = getattr(target, part)
    return target


@attrs.frozen
class PluginOrigin:
    """Where a plugin comes from: an entry point of an installed distribution."""

    group: str
    entry_point: str
    value: str
    distribution: str
    version: str

    def __str__(self) -> str:
        return (
            f"entry point '{self.entry_point} = {self.value}' of distribution"
            f" {self.distribution} {self.version} (group {self.group})"
        )


@attrs.frozen
class LoadedPlugin:
    origin: PluginOrigin
    plugin: Any


def _short_repr(value: object, limit: int = 60) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def find_entry_points(
    group: str, path: Sequence[str] | None = None
) -> list[tuple[importlib.metadata.EntryPoint, PluginOrigin]]:
    """Entry points of ``group`` in the distributions on ``path`` (default ``sys.path``).

    A distribution found twice (say, in two directories of the path) counts
    once: the first one wins, as it would for ``import``.
    """
    kwargs = {} if path is None else {"path": list(path)}
    seen: set[str] = set()
    found = []
    for dist in importlib.metadata.distributions(**kwargs):
        dist_name = dist.metadata["Name"] or "<unnamed distribution>"
        key = dist_name.lower().replace("_", "-").replace(".", "-")
        if key in seen:
            continue
        seen.add(key)
        for ep in dist.entry_points:
            if ep.group != group:
                continue
            origin = PluginOrigin(group, ep.name, ep.value, dist_name, dist.version)
            found.append((ep, origin))
    found.sort(key=lambda pair: (pair[1].distribution.lower(), pair[1].entry_point))
    return found


def new_manager(hookspecs: ModuleType) -> pluggy.PluginManager:
    manager = pluggy.PluginManager(PROJECT)
    manager.add_hookspecs(hookspecs)
    return manager


def _implements(manager: pluggy.PluginManager, plugin: object, hook_name: str) -> bool:
    hook = getattr(manager.hook, hook_name, None)
    return hook is not None and any(impl.plugin is plugin for impl in hook.get_hookimpls())


def load_plugins(
    manager: pluggy.PluginManager,
    group: str,
    hook_names: Sequence[str],
    path: Sequence[str] | None = None,
) -> list[LoadedPlugin]:
    """Import every entry point of ``group`` and register it with ``manager``.

    Raises ``PluginError`` naming the distribution when an import fails, when
    the object implements none of ``hook_names`` (usually a forgotten
    ``@hookimpl``), or when pluggy rejects an implementation's signature.
    """
    loaded: list[LoadedPlugin] = []
    for ep, origin in find_entry_points(group, path):
        try:
            plugin = ep.load()
        except Exception as exc:
            raise PluginError(
                f"{origin}: importing '{ep.value}' failed: {type(exc).__name__}: {exc}"
            ) from exc
        try:
            manager.register(plugin, name=f"{origin.distribution}:{origin.entry_point}")
        except pluggy.PluginValidationError as exc:
            raise PluginError(f"{origin}: invalid hook implementation: {exc}") from exc
        except ValueError as exc:
            raise PluginError(
                f"{origin}: '{ep.value}' is already registered through another entry point"
            ) from exc
        if not any(_implements(manager, plugin, name) for name in hook_names):
            raise PluginError(
                f"{origin}: '{ep.value}' implements none of the hooks of group {group}"
                f" ({', '.join(hook_names)}); is the function marked with @hookimpl?"
            )
        loaded.append(LoadedPlugin(origin, plugin))
    return loaded


def collect_specs(
    manager: pluggy.PluginManager,
    plugins: Iterable[LoadedPlugin],
    hook_name: str,
    spec_type: type[T],
) -> list[tuple[T, PluginOrigin]]:
    """Call ``hook_name`` on every plugin and check what each returns.

    A hook returns one ``spec_type`` or a list/tuple of them (possibly empty).
    Each implementation is called on its own, rather than through
    ``manager.hook``, so that an exception or a wrong value is blamed on the
    distribution that produced it.
    """
    origins = {manager.get_name(p.plugin): p.origin for p in plugins}
    hook = getattr(manager.hook, hook_name)
    results: list[tuple[T, PluginOrigin]] = []
    for impl in hook.get_hookimpls():
        if impl.hookwrapper or impl.wrapper or impl.plugin_name not in origins:
            continue
        origin = origins[impl.plugin_name]
        try:
            value = impl.function()
        except Exception as exc:
            raise PluginError(
                f"{origin}: {hook_name}() raised {type(exc).__name__}: {exc}"
            ) from exc
        items = list(value) if isinstance(value, list | tuple) else [value]
        for item in items:
            if not isinstance(item, spec_type):
                raise PluginError(
                    f"{origin}: {hook_name}() returned {type(item).__name__}"
                    f" {_short_repr(item)}; expected {spec_type.__name__} or a list of them"
                )
            results.append((item, origin))
    results.sort(key=lambda pair: (pair[1].distribution.lower(), pair[1].entry_point))
    return results


class PluginTable(Generic[T]):
    """The specs of one group by name, each with the origin that registered it.

    ``specs`` are ordered by descending priority, then name, which is the
    order a selection tries them in.
    """

    def __init__(self, group: str, entries: Iterable[tuple[T, PluginOrigin | None]]):
        self.group = group
        self._by_name: dict[str, tuple[T, PluginOrigin | None]] = {}
        for spec, origin in entries:
            name = spec.name  # type: ignore[attr-defined]
            if name in self._by_name:
                first = self._by_name[name][1]
                raise PluginError(
                    f"two {group} plugins are named '{name}': one from {first or 'code'},"
                    f" one from {origin or 'code'}"
                )
            self._by_name[name] = (spec, origin)
        # In selection order once: a table is filled here only, and priority fusion asks
        # for a fusion's emitter tens of thousands of times in a large module.
        self._ordered: tuple[T, ...] = tuple(
            sorted(
                (spec for spec, _ in self._by_name.values()),
                key=lambda s: (-s.priority, s.name),  # type: ignore[attr-defined]
            )
        )

    @property
    def specs(self) -> list[T]:
        return list(self._ordered)

    def names(self) -> list[str]:
        return [s.name for s in self.specs]  # type: ignore[attr-defined]

    def __contains__(self, name: object) -> bool:
        return name in self._by_name

    def __len__(self) -> int:
        return len(self._by_name)

    def get(self, name: str) -> T:
        try:
            return self._by_name[name][0]
        except KeyError:
            known = ", ".join(self.names()) or "none"
            raise PluginError(
                f"no {self.group} plugin named '{name}' is installed (installed: {known})"
            ) from None

    def origin(self, name: str) -> PluginOrigin | None:
        """The entry point that registered ``name`` (None for specs given in code)."""
        self.get(name)
        return self._by_name[name][1]

    def describe(self, name: str) -> str:
        origin = self.origin(name)
        where = "registered in code" if origin is None else f"from {origin}"
        return f"{self.group} plugin '{name}' ({where})"


def load_specs(
    group: str,
    hookspecs: ModuleType,
    hook_name: str,
    spec_type: type[T],
    path: Sequence[str] | None = None,
) -> list[tuple[T, PluginOrigin]]:
    """Load a group's plugins from entry points and collect the specs they return."""
    manager = new_manager(hookspecs)
    plugins = load_plugins(manager, group, [hook_name], path)
    return collect_specs(manager, plugins, hook_name, spec_type)
