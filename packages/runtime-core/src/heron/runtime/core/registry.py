"""The installed backends, their availability, their stages, and the choice of one.

``load_backends()`` reads the ``heron.backends`` entry-point group, which scans
every installed distribution's metadata: ``default_backends()`` does that once
per process and keeps the result, and everything that compiles or runs uses
it. Tests and tools that need another set (fake distributions on a temporary
path) call ``load_backends(path)`` or build a ``BackendRegistry`` themselves.

A backend that is installed may still be unusable here (no driver, no device):
that is not an error until someone selects it, and then the error says why.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import attrs

from heron.hlo.plugin_loading import (
    PluginError,
    PluginOrigin,
    PluginTable,
    load_specs,
    resolve_reference,
)
from heron.runtime.core import hookspecs
from heron.runtime.core.hookspecs import GROUP, BackendSpec, Stage

__all__ = [
    "DEVICE_BACKENDS",
    "Availability",
    "BackendChoice",
    "BackendRegistry",
    "LoadedStage",
    "NoBackendError",
    "default_backends",
    "load_backends",
]

#: The device backends ``auto`` chooses among, in order of preference: a GPU when
#: one is there, else the interpreter, which every machine has.
DEVICE_BACKENDS = ("cuda", "rocm", "interpreter")


class NoBackendError(Exception):
    """No backend asked for can run here; the message says, per backend, why not."""


@attrs.frozen
class BackendChoice:
    """The backend that runs, and a line (``name: reason``) per backend passed over."""

    name: str
    passed_over: tuple[str, ...] = ()


@attrs.frozen
class Availability:
    available: bool
    reason: str


@attrs.frozen
class LoadedStage:
    """A stage with its function imported: ``run(previous, context)``."""

    stage: Stage
    run: Callable[[Any, Any], Any]
    #: The stage for several kernels at once (``Stage.batched``), or None.
    run_batch: Callable[[Any], Any] | None = None

    @property
    def name(self) -> str:
        return self.stage.name


#: heron's own backends -> the distribution (with its compile side) that provides one.
INSTALLS = {
    "cuda": "heron-runtime-cuda[compile]",
    "rocm": "heron-runtime-rocm[compile]",
    "interpreter": "heron-runtime-interpreter[compile]",
}


class BackendRegistry(PluginTable[BackendSpec]):
    def __init__(self, entries: Iterable[tuple[BackendSpec, PluginOrigin | None]] = ()):
        super().__init__(GROUP, entries)
        # Stage functions by backend, imported on first use (they may need MLIR).
        self._loaded_stages: dict[str, tuple[LoadedStage, ...]] = {}

    def get(self, name: str) -> BackendSpec:
        """The backend ``name``; a PluginError saying what to install where it is heron's own."""
        try:
            return super().get(name)
        except PluginError as error:
            if name not in INSTALLS:
                raise
            where = (
                f" (heron[{name}] where heron's wheels are on your index; from a checkout"
                f" `nox -s dev`, `uv pip install -e '.[{name}]'` or `pip install -r"
                f" local-packages.txt -e '.[{name}]'`)"
                if name != "interpreter"
                else ""
            )
            raise PluginError(f"{error}: install {INSTALLS[name]}{where}") from None

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

    def choose(
        self,
        requested: str,
        candidates: Sequence[str] = DEVICE_BACKENDS,
        unusable: Callable[[str], str | None] | None = None,
    ) -> BackendChoice:
        """The backend that runs for ``requested`` (``auto`` or a backend's name).

        ``auto`` takes the first of ``candidates`` that is installed, available
        here, and not ``unusable`` (a caller's own reason to pass one over,
        e.g. an artefact without kernel images for it); a name must satisfy the
        same. ``NoBackendError`` otherwise, saying why each was passed over
        (every caller, ``heron run``, ``heron-run`` and ``heron.jax``, words
        its refusal from it).
        """
        installed = set(self.names())
        names = tuple(candidates) if requested == "auto" else (requested,)
        passed_over = []
        for name in names:
            reason = unusable(name) if unusable is not None else None
            if reason is None and name not in installed:
                reason = "not installed (its heron.backends plugin is missing)"
            if reason is None:
                try:
                    status = self.availability(name)
                except PluginError as exc:
                    reason = str(exc)
                else:
                    if status.available:
                        return BackendChoice(name, tuple(passed_over))
                    reason = status.reason
            passed_over.append(f"{name}: {reason}")
        if requested == "auto":
            raise NoBackendError(f"no backend is available ({'; '.join(passed_over)})")
        raise NoBackendError(f"backend '{requested}' is not available here: {passed_over[0]}")

    def create_device(self, name: str | None = None, target: Any = None) -> Any:
        """A device of the backend ``name`` (or the best available one) for ``target``.

        ``target`` is the ``heron.compiler.Target`` the kernels are compiled
        for; None leaves the choice to the backend (see ``BackendSpec``).
        """
        return self.select(name).device_factory(target)

    def load_stages(self, name: str) -> tuple[LoadedStage, ...]:
        """The backend's stages with their functions imported (only now: they may need MLIR).

        Imported once per registry; a backend without stages, or a stage whose
        function cannot be imported or is not callable, is a ``PluginError``
        naming the backend's distribution and the stage.
        """
        if name in self._loaded_stages:
            return self._loaded_stages[name]
        spec = self.get(name)
        if not spec.stages:
            raise PluginError(
                f"{self.describe(name)} declares no compile stages (it can only run artefacts)"
            )
        loaded = []
        for stage in spec.stages:
            loaded.append(self._load_stage(name, stage))
        self._loaded_stages[name] = tuple(loaded)
        return self._loaded_stages[name]

    def _load_stage(self, name: str, stage: Stage) -> LoadedStage:
        functions = []
        for reference in (stage.function, stage.batched):
            if reference is None:
                functions.append(None)
                continue
            try:
                function = resolve_reference(reference)
            except ImportError as exc:
                origin = self.origin(name)
                extra = f"{origin.distribution}[compile]" if origin else "its [compile] extra"
                raise PluginError(
                    f"{self.describe(name)}: cannot load stage '{stage.name}'"
                    f" ('{reference}'): {exc}. Compiling for this backend needs its"
                    f" compile side: install {extra}"
                ) from exc
            except Exception as exc:
                raise PluginError(
                    f"{self.describe(name)}: cannot load stage '{stage.name}'"
                    f" ('{reference}'): {type(exc).__name__}: {exc}"
                ) from exc
            if not callable(function):
                raise PluginError(
                    f"{self.describe(name)}: stage '{stage.name}' ('{reference}') is a"
                    f" {type(function).__name__}, not a function"
                )
            functions.append(function)
        return LoadedStage(stage, functions[0], functions[1])


def load_backends(path: Sequence[str] | None = None) -> BackendRegistry:
    """Every backend registered through the entry points on ``path`` (default ``sys.path``).

    Scans the installed distributions each time; see ``default_backends``.
    """
    return BackendRegistry(load_specs(GROUP, hookspecs, "heron_backend_specs", BackendSpec, path))


@functools.cache
def default_backends() -> BackendRegistry:
    """The backends installed in this environment, loaded on first use and then kept.

    Loading scans every installed distribution's entry points, which costs more
    than compiling a small fusion; the compile driver, ``heron run`` and
    ``heron check`` all ask for backends, so they share this one registry
    (and the stage functions it has imported).
    """
    return load_backends()
