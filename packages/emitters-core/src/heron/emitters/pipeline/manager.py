"""The pass manager of heron's MLIR pipeline: named passes, run in order, each dumpable.

A pass is a Python function that changes an ``mlir.ir.Module`` in place (it
may use upstream passes through ``PassManager.parse`` internally). Keeping the
list in Python, rather than one upstream pipeline string, is what lets
``heron emit --after PASS`` stop anywhere and ``--print-ir-after-all`` show
every stage, and lets a plugin insert its own passes.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Literal

import attrs
from mlir import ir

from heron.emitters.callbacks import CallbackError
from heron.emitters.pipeline.upstream import upstream_pass_manager
from heron.hlo.errors import UnsupportedError
from heron.target import Target

#: Receives (stage name, IR text) after every pass.
Dump = Callable[[str, str], None]
#: Receives (pass name, seconds) after every pass: the time it took, verification included.
OnPass = Callable[[str, float], None]


def _warp_size(options: PipelineOptions, attribute: attrs.Attribute, value: object) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0 or value & (value - 1):
        raise UnsupportedError(f"warp_size must be a positive power of two, got {value!r}")


def _backend(options: PipelineOptions, attribute: attrs.Attribute, value: object) -> None:
    if not isinstance(value, str) or not value:
        raise UnsupportedError(f"backend must be a name such as 'cuda', got {value!r}")


@attrs.frozen
class PipelineOptions:
    """What heron's passes need to know about the device they prepare a kernel for.

    Built from the compile's Target (:meth:`for_target`), so that no pass keeps
    a device fact of its own. ``backend`` is the GPU family the lowering goes
    on to (``cuda``, ``rocm``); ``warp_size`` the lanes of a warp or wavefront,
    which shuffles and warp-level reductions are written for;
    ``vector_atomic_add_bytes`` how many bytes of consecutive elements one atomic
    add may update (``Target.vector_atomic_add_bytes``; 0: one element each). The
    defaults are an NVIDIA GPU's before sm_90, for tests that build options by hand.
    """

    backend: str = attrs.field(default="cuda", validator=_backend)
    warp_size: int = attrs.field(default=32, validator=_warp_size)
    vector_atomic_add_bytes: int = attrs.field(default=0, validator=attrs.validators.ge(0))

    @classmethod
    def for_target(cls, target: Target) -> PipelineOptions:
        """The options for ``target``."""
        return cls(
            backend=target.backend,
            warp_size=target.warp_size,
            vector_atomic_add_bytes=target.vector_atomic_add_bytes,
        )


@attrs.frozen
class Pass:
    """One named step: ``run(module, options)`` changes ``module`` in place."""

    name: str
    run: Callable[[ir.Module, PipelineOptions], None]
    description: str = ""


class PassFailure(UnsupportedError):
    """A pass could not transform the module; the message names the pass."""


class InvalidAfterPasses(PassFailure):
    """The module verified once after several passes (``run_passes(verify="end")``) is
    invalid; which pass broke it takes running them again, verifying each."""


#: When :func:`run_passes` verifies the module: after each pass, after the last, never.
Verification = Literal["each", "end", "off"]


def run_passes(
    module: ir.Module,
    passes: Sequence[Pass],
    options: PipelineOptions,
    *,
    dump: Dump | None = None,
    stop_after: str | None = None,
    verify: Verification = "each",
    on_pass: OnPass | None = None,
) -> ir.Module:
    """Run ``passes`` in order on ``module`` (in place), reporting each stage to ``dump``.

    ``stop_after`` names the last pass to run (an unknown name is an error,
    listing the known ones). ``verify``: ``"each"`` verifies the module after each
    pass, so a broken pass is named by the error instead of surfacing later;
    ``"end"`` once, after the last pass run (:class:`InvalidAfterPasses` if it fails:
    the compile driver, which verifies so to save a tenth of the passes' time, then
    runs them again on the kernel emitted again, verifying each, to name the pass);
    ``"off"`` never. ``on_pass(name, seconds)`` hears how long each pass took (the
    compile driver's per-stage timings), verification included, dumping not.
    """
    names = [p.name for p in passes]
    if stop_after is not None and stop_after not in names and stop_after != "emitted":
        raise UnsupportedError(
            f"unknown pass {stop_after!r}; the passes are: emitted, {', '.join(names)}"
        )
    if verify not in ("each", "end", "off"):
        raise ValueError(f"run_passes: verify must be 'each', 'end' or 'off', not {verify!r}")
    if dump is not None:
        dump("emitted", str(module))
    if stop_after == "emitted":
        return module
    ran: list[str] = []
    with module.context, ir.Location.unknown():
        for step in passes:
            ran.append(step.name)
            start = time.perf_counter()
            try:
                step.run(module, options)
            except CallbackError as exc:  # raised in a callback MLIR called: name the pass too
                raise PassFailure(f"pass {step.name!r}: {exc.message}", exc.location) from exc
            except UnsupportedError:
                raise
            except Exception as exc:
                raise PassFailure(f"pass {step.name!r} failed: {exc}") from exc
            if verify == "each":
                try:
                    module.operation.verify()
                except Exception as exc:
                    raise PassFailure(
                        f"pass {step.name!r} produced invalid IR: {exc}\n{module}"
                    ) from exc
            if on_pass is not None:
                on_pass(step.name, time.perf_counter() - start)
            if dump is not None:
                dump(step.name, str(module))
            if step.name == stop_after:
                break
        if verify == "end" and ran:
            try:
                module.operation.verify()
            except Exception as exc:
                raise InvalidAfterPasses(
                    f"heron's passes {ran[0]!r} to {ran[-1]!r} produced invalid IR"
                    f" (verified after the last only): {exc}\n{module}"
                ) from exc
    return module


def run_upstream(module: ir.Module, pipeline: str) -> None:
    """Run an upstream pass pipeline string (``builtin.module(...)``) on ``module`` (its
    pass manager made once per context: :mod:`heron.emitters.pipeline.upstream`)."""
    upstream_pass_manager(pipeline, module.context).run(module.operation)
