"""``heron.jax.jit``: a JAX function compiled by heron and run on a heron device.

``heron.jax.jit(f, backend="auto")(*args)`` does, per distinct signature
(:class:`~heron.jax.lowering.Signature`: the arguments' pytree, shapes, dtypes,
static values):

1. lower ``f`` with jax for the CPU (:func:`heron.jax.lowering.lower`);
2. compile the module with heron into an executable for the Target of the
   chosen device (the program pipeline, thunks, kernel images:
   :func:`heron.compiler.executable.compile_executable`), unless the disk
   cache (:mod:`heron.jax.cache`) already holds it;
3. load it on the device once, then run it for every call with that
   signature (:class:`heron.runtime.core.resident.ResidentRunner`): arguments
   already on the device (a ``jax.Array`` on the same GPU, through DLPack; an
   earlier call's result) are used in place, host arrays are copied once;
   results stay on the device and the call returns once the work is issued,
   in the function's own pytree structure.

What a call returns (``results``): ``"auto"`` gives numpy arrays where the
device's memory is the host's (the interpreter) and, on a GPU, ``jax.Array`` values
on that GPU (exchanged through DLPack, no copy) where jax has that GPU, else
heron's :class:`~heron.runtime.core.resident.DeviceArray` (``np.asarray``,
``__dlpack__``, ``block_until_ready``); ``"numpy"``, ``"jax"`` and ``"device"``
ask for one of them. ``donate_argnums`` (``donate_argnames``) are jax's: the
module is lowered with the donation, so that a result may be written into a
donated argument's buffer (input-output aliasing); a donated heron array is
then consumed, any other donated value copied first (docs/runtime.md,
"Device-resident arrays").

``backend``: ``auto`` (the first available of cuda, rocm, the interpreter),
or a name. ``target``: the device to compile for, a :class:`heron.target.Target`
or what ``heron --target`` takes (a preset such as ``"h100"``, or ``"cuda"``/``"rocm"``
for that backend's default); by default the chosen device's own.
Called with jax's tracers (inside ``jax.grad``, ``jax.vmap``, ``jax.jit``, ...), a
heron-jitted function is staged as the primitive ``heron_call`` rather than run, and
the transformed programs are compiled and run by heron in turn
(:mod:`heron.jax.transforms`).

``deterministic=True`` compiles no kernel whose result depends on the order its
threads run (XLA's ``--xla_gpu_deterministic_ops``): every call
gives the same bits. Compiles are counted (:attr:`HeronJitted.compiles`), so a test can
see that a second call with the same signature does not compile again.
"""

from __future__ import annotations

import functools
import weakref
from collections.abc import Callable, Sequence
from typing import Any

import attrs
import numpy as np

from heron.jax.cache import DiskCache, cache_key, default_cache_dir, heron_fingerprint
from heron.jax.lowering import (
    Lowered,
    Signature,
    TracedCall,
    lower,
    platform_for,
    resolve_argnums_and_argnames,
    signature_of,
    split_static,
)
from heron.jax.transforms import DerivedPrograms, remember_direct_trace, traced_call
from heron.runtime.core import dlpack

__all__ = ["RESULTS", "HeronJitted", "jit"]

#: What ``results=`` may ask for (see the module docstring).
RESULTS = ("auto", "numpy", "jax", "device")


@attrs.define
class _Compiled:
    """One signature's program: how it was lowered, its executable loaded on the device, and
    the runner that takes device-resident arguments; ``donated`` are the entry parameters
    (argument leaves) the caller donates."""

    lowered: Lowered
    artefact: Any
    executable: Any
    from_disk: bool
    runner: Any
    donated: frozenset[int]


class HeronJitted:
    """The callable ``heron.jax.jit`` returns (see the module docstring)."""

    def __init__(
        self,
        function: Callable[..., Any],
        *,
        backend: str = "auto",
        target: Any = None,
        cache_dir: Any = None,
        static_argnums: int | Sequence[int] = (),
        static_argnames: str | Sequence[str] = (),
        command_buffers: bool = True,
        deterministic: bool = False,
        donate_argnums: int | Sequence[int] = (),
        donate_argnames: str | Sequence[str] = (),
        results: str = "auto",
    ) -> None:
        from heron.jax.devices import HeronJaxError

        if results not in RESULTS:
            raise HeronJaxError(
                f"heron.jax.jit: results={results!r}; it is one of {', '.join(RESULTS)}"
            )
        self.function = function
        self.deterministic = deterministic
        # each completed from the other, as jax.jit does: an argument named static (or
        # donated) is found when a call passes it by position, and the other way round
        self.donate_argnums, self.donate_argnames = resolve_argnums_and_argnames(
            function, donate_argnums, donate_argnames
        )
        self.results = results
        self.requested_backend = backend
        self.static_argnums, self.static_argnames = resolve_argnums_and_argnames(
            function, static_argnums, static_argnames
        )
        self.command_buffers = command_buffers
        self._target = _target(target)
        self._device = None
        self._backend: str | None = None
        self._programs: dict[Signature, _Compiled] = {}
        self._disk = None if cache_dir is False else DiskCache(cache_dir or default_cache_dir())
        #: How many times this function was compiled by heron (a disk-cache hit is no compile).
        self.compiles = 0
        #: How many programs came from the disk cache.
        self.disk_hits = 0
        #: What calls under jax's transformations traced and derived, and the programs
        #: compiled for them (heron.jax.transforms), counted in ``compiles`` too.
        self.derived_programs = DerivedPrograms()
        self._counted_by: HeronJitted | None = None
        # The name, docstring and __wrapped__, not the function's __dict__: a function
        # made by functools.wraps of another heron-jitted one (jax.grad(jitted)) holds that
        # one's state, which would replace this one's (its function among it).
        functools.update_wrapper(self, function, updated=())

    def __repr__(self) -> str:
        name = getattr(self.function, "__name__", type(self.function).__name__)
        return f"heron.jax.jit({name}, backend={self.requested_backend!r})"

    def for_jaxpr(self, jaxpr: Any, name: str) -> HeronJitted:
        """A heron-jitted function of ``jaxpr`` (a transformation of this one's, named
        ``name``) with this one's options and disk cache, its results jax arrays (jax's
        transformations take them on), its compiles counted here too."""
        from jax.extend.core import jaxpr_as_fun

        function = jaxpr_as_fun(jaxpr)

        def program(*args: Any) -> Any:
            return function(*args)

        # jax names the module after the function: jit_transpose_jvp_f_
        program.__name__ = program.__qualname__ = "".join(c if c.isalnum() else "_" for c in name)
        derived = HeronJitted(
            program,
            backend=self.requested_backend,
            target=self._target,
            cache_dir=False,
            command_buffers=self.command_buffers,
            deterministic=self.deterministic,
            results="jax",
        )
        derived._disk = self._disk
        derived._counted_by = self
        return derived

    def _count(self, *, from_disk: bool) -> None:
        """One program compiled (or taken from the disk cache), here and where it counts."""
        counter: HeronJitted | None = self
        while counter is not None:
            if from_disk:
                counter.disk_hits += 1
            else:
                counter.compiles += 1
            counter = counter._counted_by

    # -- the device ----------------------------------------------------------------------
    @property
    def backend(self) -> str:
        """The backend that runs the program (``auto`` resolved on first use)."""
        self._open()
        assert self._backend is not None
        return self._backend

    @property
    def target(self) -> Any:
        """The Target the programs are compiled for (the device's where none was given)."""
        self._open()
        return self._target

    def _open(self) -> None:
        if self._device is not None:
            return
        from heron.jax.devices import open_device

        self._backend, self._device, self._target = open_device(
            self.requested_backend, self._target
        )

    # -- calling -------------------------------------------------------------------------
    def lower(self, *args: Any, **kwargs: Any) -> Lowered:
        """The module heron compiles for these arguments (no compile, no run), lowered by
        jax for the platform the program runs on (:func:`heron.jax.lowering.platform_for`)."""
        return lower(
            self.function,
            *args,
            static_argnums=self.static_argnums,
            static_argnames=self.static_argnames,
            donate_argnums=self.donate_argnums,
            donate_argnames=self.donate_argnames,
            platform=platform_for(self.backend),
            **kwargs,
        )

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        try:
            program, dynamic_args, dynamic_kwargs = self._program(args, kwargs)
        except TracedCall:  # inside jax.grad, jax.vmap, jax.jit, ...: staged, not run
            return traced_call(self, args, kwargs)
        leaves = program.lowered.argument_leaves(dynamic_args, dynamic_kwargs)
        outputs = program.runner(leaves, donate=program.donated)
        return program.lowered.unflatten_results(self._deliver(outputs))

    def _deliver(self, outputs: Sequence[Any]) -> list[Any]:
        """The results as ``results=`` asks (see the module docstring)."""
        from heron.jax.arrays import as_jax_arrays, jax_sees

        wanted = self.results
        if wanted == "auto":
            device = self._device
            assert device is not None
            where = device.dlpack_device
            if where is None or where[0] == dlpack.CPU:
                wanted = "numpy"
            else:
                wanted = "jax" if jax_sees(where) else "device"
        if wanted == "numpy":
            return [np.asarray(output) for output in outputs]
        if wanted == "jax":
            return as_jax_arrays(outputs)
        return list(outputs)

    def _program(
        self, args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> tuple[_Compiled, list[Any], dict[str, Any]]:
        dynamic_args, dynamic_kwargs, static = split_static(
            args, kwargs, self.static_argnums, self.static_argnames
        )
        key = signature_of(dynamic_args, dynamic_kwargs, static)
        program = self._programs.get(key)
        if program is None:
            program = self._programs[key] = self._compile(args, kwargs)
            remember_direct_trace(self, key, program)
        return program, dynamic_args, dynamic_kwargs

    def artefact(self, *args: Any, **kwargs: Any) -> Any:
        """The executable for these arguments' signature (compiled if it is not yet), as
        the artefact ``heron-run`` runs: ``jitted.artefact(x).save("f.heron")``."""
        return self._program(args, kwargs)[0].artefact

    def last_run(self, *args: Any, **kwargs: Any) -> Any:
        """What the executor recorded of the last run for this signature (per thunk:
        kind, kernel, launch, seconds; command buffers; kernel launches)."""
        return self._program(args, kwargs)[0].executable.stats

    def inputs_taken(self, *args: Any, **kwargs: Any) -> Any:
        """How the last call for these arguments' signature took each entry parameter
        (:class:`heron.runtime.core.resident.RunInputs`: in place, through DLPack, donated,
        copied)."""
        return self._program(args, kwargs)[0].runner.last_inputs

    def _compile(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> _Compiled:
        from heron.compiler.executable import compile_executable
        from heron.jax.devices import gemm_library, load_on_device, result_pool
        from heron.jax.host_callbacks import bind_callbacks, forget_callbacks
        from heron.runtime.core import __version__
        from heron.runtime.core.resident import ResidentRunner

        self._open()
        lowered = self.lower(*args, **kwargs)
        backends = tuple(dict.fromkeys((self._backend, "interpreter")))
        key = cache_key(
            lowered.hlo_text,
            self._target,
            backends,
            f"{__version__}+{heron_fingerprint()}",
            deterministic=self.deterministic,
            gemm_library=gemm_library(self._device),
        )
        # Callbacks are this process's Python functions: such a program is not cached on disk.
        callbacks = bind_callbacks(lowered.module, lowered.host_callbacks)
        disk = self._disk if not callbacks else None
        artefact = disk.get(key) if disk is not None else None
        from_disk = artefact is not None
        if artefact is None:
            artefact = compile_executable(
                lowered.module,
                self._target,
                backends=backends,
                deterministic=self.deterministic,
                # heron's kernel beside a library call where this device will run it.
                library_fallbacks=lambda call: self._device.library_for(call) is None,
            )
            self._count(from_disk=False)
            if disk is not None:
                disk.put(key, artefact)
        else:
            self._count(from_disk=True)
        executable = load_on_device(
            artefact, self._device, self._backend, command_buffers=self.command_buffers
        )
        import jax

        runner = ResidentRunner(executable, result_pool(self._device), immutable=(jax.Array,))
        donated = lowered.donated_leaves(
            args,
            kwargs,
            self.donate_argnums,
            self.donate_argnames,
            self.static_argnums,
            self.static_argnames,
        )
        compiled = _Compiled(lowered, artefact, executable, from_disk, runner, donated)
        if callbacks:  # the numbers live as long as the program that calls them
            weakref.finalize(compiled, forget_callbacks, callbacks)
        return compiled


def _target(target: Any) -> Any:
    """The Target ``target`` names (a Target, a preset or backend name, or None: the
    device's), or a HeronJaxError saying what is wrong with it."""
    from heron.jax.devices import HeronJaxError
    from heron.target import Target, TargetError

    if target is None or isinstance(target, Target):
        return target
    if not isinstance(target, str):
        raise HeronJaxError(
            f"heron.jax.jit: target must be a heron.target.Target or a preset name such as"
            f" 'h100', not {type(target).__name__}"
        )
    try:
        return Target.resolve(target, None)
    except TargetError as error:
        raise HeronJaxError(f"heron.jax.jit: target {target!r}: {error}") from None


def jit(
    function: Callable[..., Any] | None = None,
    *,
    backend: str = "auto",
    target: Any = None,
    cache_dir: Any = None,
    static_argnums: int | Sequence[int] = (),
    static_argnames: str | Sequence[str] = (),
    command_buffers: bool = True,
    deterministic: bool = False,
    donate_argnums: int | Sequence[int] = (),
    donate_argnames: str | Sequence[str] = (),
    results: str = "auto",
) -> Any:
    """``function`` compiled by heron (see the module docstring); usable as a decorator,
    with or without arguments (``@heron.jax.jit`` or ``@heron.jax.jit(backend=...)``)."""
    options = dict(
        backend=backend,
        target=target,
        cache_dir=cache_dir,
        static_argnums=static_argnums,
        static_argnames=static_argnames,
        command_buffers=command_buffers,
        deterministic=deterministic,
        donate_argnums=donate_argnums,
        donate_argnames=donate_argnames,
        results=results,
    )
    if function is None:
        return lambda f: HeronJitted(f, **options)
    return HeronJitted(function, **options)
