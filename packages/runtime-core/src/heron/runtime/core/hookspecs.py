"""The plugin contract for backends (entry-point group ``heron.backends``).

A backend is a way to turn heron's MLIR pipeline output into device code (its
*stages*) and a device that runs that code. A distribution adds one by
declaring, in its pyproject.toml::

    [project.entry-points."heron.backends"]
    my_backend = "my_package.backend"

where ``my_package.backend`` implements the hook below::

    from heron.runtime.core.hookspecs import BackendSpec, Stage, hookimpl

    @hookimpl
    def heron_backend_specs():
        return BackendSpec(
            name="my_backend", priority=10, is_available=..., device_factory=...,
            stages=(
                Stage("llvm-ir", "my_package.stages:to_llvm_ir", extension="ll"),
                Stage("binary", "my_package.stages:to_binary", extension="bin"),
            ),
        )

Stages, as Triton's backends ``add_stages``: an ordered list of named steps
from the ``lower-tensors``-stage MLIR module (the last backend-neutral stage of
heron's pipeline) to device code. heron's compile driver
(``heron.compiler.compile_fusion``) runs them after heron's own passes, times
each one, hands it the dump callback, and checks what it returns.

The stage contract
------------------

``fn(previous, context) -> output``

* ``previous``: for the first stage, the ``lower-tensors``-stage
  ``mlir.ir.Module`` (read it, print it, clone it: it is the module the driver
  reports as the fusion's last heron stage, so do not change it); for the
  others, what the stage before returned.
* ``context``: a :class:`StageContext`: the target (:class:`heron.target.Target`), the
  kernel's and the fusion's names, and ``dump(name, text)`` for any text the
  stage makes on the way (its own steps, its product), or None.
* ``output``: anything the next stage takes. A stage with an ``extension``
  makes an artefact: it returns ``str`` (text), ``bytes``, or a
  :class:`~heron.runtime.core.device.KernelImage` (code a device loads), whose
  bytes are the artefact. The last stage that runs must return a KernelImage.
* A stage that cannot run here but need not (ptxas is not installed, and PTX
  alone is loadable) raises :class:`StageSkipped` with the reason: the driver
  reports the reason and hands ``previous`` to the next stage unchanged. Any
  other failure is an exception: ``heron.hlo.errors.UnsupportedError`` for
  code the backend cannot compile, ``ImportError`` when the compile-side
  dependencies are missing.

A stage names its function by a ``"module:attribute"`` string, imported only
when something compiles, never when the plugin is loaded: a machine that only
runs serialised executables has no MLIR or llvmlite installed, and its
backends must still load and run there. For the same reason this package never
imports MLIR: the first stage's argument is typed ``Any``.
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
    check_reference,
    check_spec_name,
)
from heron.target import Target

__all__ = [
    "GROUP",
    "BackendSpec",
    "Dump",
    "Stage",
    "StageContext",
    "StageSkipped",
    "heron_backend_specs",
    "hookimpl",
    "hookspec",
]

GROUP = "heron.backends"

hookspec = pluggy.HookspecMarker(PROJECT)
hookimpl = pluggy.HookimplMarker(PROJECT)

#: Receives (name, text) of a step's result, for ``--dump-dir`` and tests.
Dump = Callable[[str, str], None]

_EXTENSION_CHARACTERS = frozenset("abcdefghijklmnopqrstuvwxyz0123456789")


class StageSkipped(Exception):  # noqa: N818 - a signal, not an error
    """Raised by a stage that cannot run here and need not; the message says why.

    The driver reports the stage as skipped with that reason and gives the
    previous stage's output to the next stage (see the module docstring).
    """


@attrs.frozen
class StageContext:
    """What every stage of one compile gets besides the previous stage's output."""

    target: Target
    #: The kernel's symbol (the emitted kernel's name): the one to keep, and to launch.
    kernel_name: str
    #: The fusion the kernel was emitted for (for error messages).
    fusion_name: str
    #: ``dump(name, text)`` for the texts the stage makes, or None when nobody listens.
    dump: Dump | None = None


def _check_extension(instance: Any, attribute: attrs.Attribute, value: Any) -> None:
    if value is None:
        return
    if not isinstance(value, str) or not value or not set(value) <= _EXTENSION_CHARACTERS:
        raise ValueError(
            f"{attribute.name} must be None or a file extension without the dot"
            f" ('ptx', 'hsaco'), got {value!r}"
        )


def _check_required_reference(instance: Any, attribute: attrs.Attribute, value: Any) -> None:
    if value is None:
        raise ValueError(f"{attribute.name} must be a 'module:attribute' string, got None")
    check_reference(instance, attribute, value)


@attrs.frozen
class Stage:
    """One named step of a backend, from the previous stage's output to its own.

    ``function`` is the ``"module:attribute"`` of ``fn(previous, context)``
    (see the module docstring), imported lazily. ``extension`` is the file
    extension of what the stage makes when that is an artefact (``ll``,
    ``ptx``, ``cubin``, ``o``, ``hsaco``), None when it is not.
    ``concurrent``: the stage spends its time outside Python (an external tool
    such as ptxas, or a library that leaves the GIL, as LLVM through llvmlite) and
    touches no shared state, so a whole program's compile may run it, and the
    stages after it, on a worker thread while it emits the next kernels (the
    stages before a batched one start at once; its group waits for them).
    ``batched``: the ``"module:attribute"`` of ``fn(items) -> images``, the same
    stage for several kernels at once (``items``: ``(previous, context)`` pairs;
    ``images``: one KernelImage per item, in order, which may share their bytes),
    for a stage whose tool costs more to start than to run (ptxas: about 20 ms a
    process, a few ms a kernel). Only the last stage may be batched, and it must
    be ``concurrent``. A whole program's compile hands it groups of kernels; a
    compile of one fusion, or a group the batched function fails on, runs
    ``function`` kernel by kernel (so an error names its kernel).
    """

    name: str = attrs.field(validator=check_spec_name)
    function: str = attrs.field(validator=_check_required_reference)
    extension: str | None = attrs.field(default=None, validator=_check_extension)
    description: str = ""
    concurrent: bool = attrs.field(default=False, validator=check_bool)
    batched: str | None = attrs.field(default=None, validator=check_reference)


def _to_stages(value: Any) -> Any:
    """A list of stages becomes a tuple (the spec is frozen and hashable)."""
    return tuple(value) if isinstance(value, list) else value


def _check_formats(instance: Any, attribute: attrs.Attribute, value: Any) -> None:
    if not isinstance(value, tuple) or not all(isinstance(f, str) and f for f in value):
        raise TypeError(f"{attribute.name} must be a sequence of format names, got {value!r}")
    if len(set(value)) != len(value):
        raise ValueError(f"{attribute.name}: a format is named twice in {list(value)}")


def _check_stages(instance: Any, attribute: attrs.Attribute, value: Any) -> None:
    if not isinstance(value, tuple) or not all(isinstance(s, Stage) for s in value):
        raise TypeError(f"{attribute.name} must be a sequence of Stage, got {value!r}")
    names = [stage.name for stage in value]
    repeated = sorted({name for name in names if names.count(name) > 1})
    if repeated:
        raise ValueError(f"{attribute.name}: more than one stage is named {', '.join(repeated)}")
    for position, stage in enumerate(value):
        if stage.batched is not None and (position != len(value) - 1 or not stage.concurrent):
            raise ValueError(
                f"{attribute.name}: stage '{stage.name}' is batched, so it must be the last"
                " stage and concurrent"
            )


def never(call: Any) -> bool:
    """A backend's ``library_always_runs`` when it promises no library call."""
    return False


@attrs.frozen
class BackendSpec:
    """One backend as a plugin offers it.

    ``is_available()`` returns ``(True, description)`` or ``(False, reason)``,
    the reason being something a user can act on ("no CUDA driver found
    (...)"); it must not raise when the hardware or driver is missing.
    ``device_factory(target)`` opens the device, for the ``heron.compiler.Target``
    the kernels are compiled for (None: the backend's own choice); a device that
    emulates a GPU (the interpreter) takes its warp size from it. ``stages``
    turn a ``lower-tensors`` module into device code (the module docstring); a
    backend without stages can only run what was compiled elsewhere.
    ``image_formats`` are the :class:`~heron.runtime.core.device.KernelImage`
    formats its devices load, in order of preference: an executable keeps, of
    what a compile made, the first of them (``cubin`` before ``ptx`` on CUDA);
    without them, what the last stage returned. Higher ``priority`` wins when no
    backend is named.

    ``library_always_runs(call)`` says whether every device of the backend runs
    the library call ``call`` (its contract object, such as a
    :class:`~heron.runtime.core.gemm.GemmCall`) with its library, wherever the
    backend's runtime is installed as its package requires. A compile leaves
    heron's kernel beside such a call out of the backend's images (XLA keeps
    none; ``heron compile --library-fallbacks`` keeps it): the kernel would never
    run, and compiling it costs most of a GEMM program's compile. Unsure means
    False, the default: the device may then refuse the call (cuBLASLt's
    heuristic finding no algorithm) and run heron's kernel.
    """

    name: str = attrs.field(validator=check_spec_name)
    priority: int = attrs.field(validator=check_int)
    is_available: Callable[[], tuple[bool, str]] = attrs.field(validator=check_callable)
    device_factory: Callable[[Any], Any] = attrs.field(validator=check_callable)
    stages: tuple[Stage, ...] = attrs.field(
        default=(), converter=_to_stages, validator=_check_stages
    )
    description: str = ""
    image_formats: tuple[str, ...] = attrs.field(
        default=(), converter=_to_stages, validator=_check_formats
    )
    library_always_runs: Callable[[Any], bool] = attrs.field(
        default=never, validator=check_callable
    )


@hookspec
def heron_backend_specs() -> BackendSpec | list[BackendSpec]:
    """Return the backends this plugin provides (one spec, or a list, possibly empty)."""
