"""The installed custom-call targets, and calling one.

``load_custom_calls()`` reads the ``heron.custom_calls`` entry-point group;
:func:`default_custom_calls` is the registry of this process (loaded on first
use, then kept), which the evaluator, the compiler and the executor all ask,
and which code may add to (:meth:`CustomCallRegistry.register`,
:func:`registered`): a test, a notebook, an application that defines its
targets without packaging them. A target registered twice is refused, whoever
registers it: which implementation runs must not depend on installation order.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

import numpy as np

from heron.hlo.custom_calls import hookspecs
from heron.hlo.custom_calls.call import (
    CustomCall,
    CustomCallError,
    UnknownCustomCallTarget,
    custom_call_of,
)
from heron.hlo.custom_calls.hookspecs import GROUP, CustomCallSpec
from heron.hlo.errors import UnsupportedError
from heron.hlo.ir import Instruction
from heron.hlo.plugin_loading import PluginOrigin, load_specs

__all__ = [
    "CustomCallRegistry",
    "default_custom_calls",
    "load_custom_calls",
    "registered",
    "resolve",
]


class CustomCallRegistry:
    """Custom-call targets by name, each with the entry point that registered it."""

    def __init__(self, entries: Iterable[tuple[CustomCallSpec, PluginOrigin | None]] = ()):
        self._by_target: dict[str, tuple[CustomCallSpec, PluginOrigin | None]] = {}
        for spec, origin in entries:
            self.register(spec, origin)

    def register(self, spec: CustomCallSpec, origin: PluginOrigin | None = None) -> None:
        """Add ``spec``; a target already registered is refused, naming both registrations."""
        if not isinstance(spec, CustomCallSpec):
            raise CustomCallError(
                f"register() takes a CustomCallSpec, got {type(spec).__name__} {spec!r:.60}"
            )
        if spec.target in self._by_target:
            first = self._by_target[spec.target][1]
            raise CustomCallError(
                f"custom-call target '{spec.target}' is registered twice: by"
                f" {first or 'code'} and by {origin or 'code'}"
            )
        self._by_target[spec.target] = (spec, origin)

    def unregister(self, target: str) -> None:
        """Remove ``target`` (registered in code or not); unknown targets are an error."""
        if target not in self._by_target:
            raise UnknownCustomCallTarget(f"custom-call target '{target}' is not registered")
        del self._by_target[target]

    def targets(self) -> list[str]:
        return sorted(self._by_target)

    def __contains__(self, target: object) -> bool:
        return target in self._by_target

    def __len__(self) -> int:
        return len(self._by_target)

    def origin(self, target: str) -> PluginOrigin | None:
        """The entry point that registered ``target`` (None for one registered in code)."""
        return self._by_target[target][1]

    def describe(self, target: str) -> str:
        origin = self.origin(target)
        where = "registered in code" if origin is None else f"from {origin}"
        return f"its host implementation ({where})"

    def unknown(self, target: str) -> str:
        """Why ``target`` cannot be called: no installed plugin provides it (and what is)."""
        known = ", ".join(self.targets()) or "none"
        return (
            f"custom_call_target '{target}' is provided by no installed plugin (entry-point"
            f" group {GROUP}; targets installed: {known})"
        )

    def get(self, call: CustomCall) -> CustomCallSpec:
        """The spec of ``call``'s target, or UnknownCustomCallTarget naming it and the call."""
        entry = self._by_target.get(call.target)
        if entry is None:
            raise UnknownCustomCallTarget(f"{call.where}: {self.unknown(call.target)}")
        return entry[0]

    def invoke(self, call: CustomCall, operands: Sequence[np.ndarray]) -> list[np.ndarray]:
        """Run ``call``'s host implementation on ``operands``: one checked array per result leaf.

        An exception the implementation raises, or a result of another shape
        or dtype than declared, is a :class:`CustomCallError` naming the target,
        the instruction and the plugin.
        """
        spec = self.get(call)
        given = call.check_operands(operands)
        provider = self.describe(call.target)
        try:
            value: Any = spec.host(given, call)
        except Exception as exc:
            raise call.error(f"{provider} raised {type(exc).__name__}: {exc}") from exc
        return call.check_results(value, provider)


def resolve(
    inst: Instruction, registry: CustomCallRegistry | None = None
) -> tuple[CustomCall, CustomCallRegistry]:
    """A custom-call instruction's call, and the registry that provides its target.

    The one refusal of an unknown target before anything runs, for the
    evaluator and the compiler alike: an
    ``UnsupportedError`` at the instruction's location naming the target, the
    instruction and its computation.
    """
    registry = default_custom_calls() if registry is None else registry
    call = custom_call_of(inst)
    if call.target not in registry:
        error = UnsupportedError(f"{call.where}: {registry.unknown(call.target)}", inst.location)
        error.names_instruction = True  # type: ignore[attr-defined]
        raise error
    return call, registry


def load_custom_calls(path: Sequence[str] | None = None) -> CustomCallRegistry:
    """Every target registered through the entry points on ``path`` (default ``sys.path``)."""
    return CustomCallRegistry(
        load_specs(GROUP, hookspecs, "heron_custom_call_specs", CustomCallSpec, path)
    )


@functools.cache
def default_custom_calls() -> CustomCallRegistry:
    """This process's registry: the installed plugins' targets, loaded on first use, and
    whatever code registered since. Only a program that meets a custom call loads it."""
    return load_custom_calls()


@contextlib.contextmanager
def registered(*specs: CustomCallSpec) -> Iterator[CustomCallRegistry]:
    """Register ``specs`` in the default registry for the ``with`` block, then remove them."""
    registry = default_custom_calls()
    added: list[str] = []
    try:
        for spec in specs:
            registry.register(spec)
            added.append(spec.target)
        yield registry
    finally:
        for target in added:
            registry.unregister(target)
