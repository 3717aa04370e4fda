"""The pass manager of heron's MLIR pipeline: named passes, run in order, each dumpable.

A pass is a Python function that changes an ``mlir.ir.Module`` in place (it
may use upstream passes through ``PassManager.parse`` internally). Keeping the
list in Python, rather than one upstream pipeline string, is what lets
``heron emit --after PASS`` stop anywhere and ``--print-ir-after-all`` show
every stage, and lets a plugin insert its own passes.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import attrs
from mlir import ir

from heron.hlo.errors import UnsupportedError

#: Receives (stage name, IR text) after every pass.
Dump = Callable[[str, str], None]

TARGETS = ("cuda", "rocm")


@attrs.frozen
class PipelineOptions:
    """What the heron passes need to know about the target.

    ``target`` is ``cuda`` or ``rocm``; passes that differ between them (warp
    size, which math a backend lowers natively) read it here.
    """

    target: str = "cuda"

    def __attrs_post_init__(self) -> None:
        if self.target not in TARGETS:
            raise UnsupportedError(
                f"unknown target {self.target!r} (expected one of {', '.join(TARGETS)})"
            )

    @property
    def warp_size(self) -> int:
        """Threads per warp (NVIDIA) or wavefront (AMD CDNA: 64)."""
        return 32 if self.target == "cuda" else 64


@attrs.frozen
class Pass:
    """One named step: ``run(module, options)`` changes ``module`` in place."""

    name: str
    run: Callable[[ir.Module, PipelineOptions], None]
    description: str = ""


class PassFailure(UnsupportedError):
    """A pass could not transform the module; the message names the pass."""


def run_passes(
    module: ir.Module,
    passes: Sequence[Pass],
    options: PipelineOptions,
    *,
    dump: Dump | None = None,
    stop_after: str | None = None,
    verify: bool = True,
) -> ir.Module:
    """Run ``passes`` in order on ``module`` (in place), reporting each stage to ``dump``.

    ``stop_after`` names the last pass to run (an unknown name is an error,
    listing the known ones). With ``verify`` the module is verified after each
    pass, so a broken pass is named by the error instead of surfacing later.
    """
    names = [p.name for p in passes]
    if stop_after is not None and stop_after not in names and stop_after != "emitted":
        raise UnsupportedError(
            f"unknown pass {stop_after!r}; the passes are: emitted, {', '.join(names)}"
        )
    if dump is not None:
        dump("emitted", str(module))
    if stop_after == "emitted":
        return module
    with module.context, ir.Location.unknown():
        for step in passes:
            try:
                step.run(module, options)
            except UnsupportedError:
                raise
            except Exception as exc:
                raise PassFailure(f"pass {step.name!r} failed: {exc}") from exc
            if verify:
                try:
                    module.operation.verify()
                except Exception as exc:
                    raise PassFailure(
                        f"pass {step.name!r} produced invalid IR: {exc}\n{module}"
                    ) from exc
            if dump is not None:
                dump(step.name, str(module))
            if step.name == stop_after:
                break
    return module


def run_upstream(module: ir.Module, pipeline: str) -> None:
    """Run an upstream pass pipeline string (``builtin.module(...)``) on ``module``."""
    from mlir import passmanager

    passmanager.PassManager.parse(pipeline).run(module.operation)
