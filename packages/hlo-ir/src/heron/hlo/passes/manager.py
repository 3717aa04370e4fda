"""The HLO pass manager: named passes, pipelines and fixed-point groups, verified and dumped.

A pass is a function that rewrites a module in place and says whether it
changed anything (:class:`HloPass`). Passes compose into a :class:`Pipeline`
(run once, in order) and a :class:`FixedPoint` group (run again while any
member changes the module, up to a bound, as XLA's ``HloPassFix``), which nest.
:func:`run_pipeline` is the one loop that runs them: after every pass it
verifies the module (so a broken pass is named by the error, not by a later
stage), times it, records whether it changed the module, and dumps the module
text when it did (the counterpart of XLA's ``--xla_dump_hlo_pass_re``).

A group whose passes run many times over a whole module (the simplification
fixed points, the fusion pipeline) verifies once when it ends instead
(``verify_each_pass=False``: XLA's ``AddInvariantCheckerDebug``, which its GPU
compiler uses for the same groups), unless ``HERON_VERIFY_EACH_PASS=1`` asks for
every pass to be verified again, to name the one that broke the module.

The manager knows nothing about particular passes: the target-independent ones
live beside it (one module each), the GPU ones in the compiler package, and
:mod:`heron.hlo.passes.registry` names them for ``heron opt --passes``.
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import attrs

from heron.hlo.errors import HloError, HloVerifyError, UnsupportedError
from heron.hlo.ir import Computation, Module
from heron.hlo.passes.rewrite import computations_reached
from heron.hlo.printer import print_module
from heron.hlo.verifier import verify_module

__all__ = [
    "FixedPoint",
    "HloPass",
    "PassFailure",
    "PassRecord",
    "Pipeline",
    "PipelineReport",
    "Step",
    "VERIFY_EACH_PASS_ENV",
    "run_pipeline",
]


def _name(instance: object, attribute: attrs.Attribute, value: object) -> None:
    if not isinstance(value, str) or not re.fullmatch(r"[a-z][a-z0-9-]*", value):
        raise UnsupportedError(
            f"a pass or pipeline name is lower-case words joined by '-', got {value!r}"
        )


def _bool(instance: object, attribute: attrs.Attribute, value: object) -> None:
    if not isinstance(value, bool):
        raise UnsupportedError(f"{attribute.name} must be True or False, got {value!r}")


@attrs.frozen
class HloPass:
    """One rewrite: ``run(module)`` changes ``module`` in place and returns whether it did.

    ``entry_only`` promises that the pass changes the entry computation alone (its
    instructions and their order), adding computations it builds (fusion bodies) and
    removing those the entry no longer calls, never changing another one (XLA's fusion
    passes, which fuse the entry only). After it the manager verifies the entry and
    the computations it added rather than the whole module (a loop body fused as its
    view's entry is a small part of it), and the whole module once when the pipeline
    ends, so a pass that breaks the promise is still caught.
    """

    name: str = attrs.field(validator=_name)
    run: Callable[[Module], bool]
    description: str = ""
    entry_only: bool = attrs.field(default=False, validator=_bool)


#: Set to 1, every pass is verified after it changes the module, in the groups that
#: otherwise verify once at their end (``verify_each_pass=False``).
VERIFY_EACH_PASS_ENV = "HERON_VERIFY_EACH_PASS"


@attrs.frozen
class Pipeline:
    """Steps run once, in order.

    ``verify_each_pass=False``: the module is verified once, when the pipeline has
    run and changed it, rather than after each of its passes (see the module's doc).
    """

    name: str = attrs.field(validator=_name)
    steps: tuple[Step, ...] = attrs.field(converter=tuple)
    verify_each_pass: bool = attrs.field(default=True, validator=_bool)


def _positive(instance: object, attribute: attrs.Attribute, value: object) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise UnsupportedError(f"{attribute.name} must be a positive integer, got {value!r}")


@attrs.frozen
class FixedPoint:
    """Steps run in order, again and again while any of them changes the module.

    ``max_iterations`` bounds the loop: passes that undo each other would
    otherwise never stop. Reaching the bound is not an error (the module is
    still valid after every pass), but the report says so.
    ``verify_each_pass``: as :class:`Pipeline`'s (the rounds verified once, at the end).
    """

    name: str = attrs.field(validator=_name)
    steps: tuple[Step, ...] = attrs.field(converter=tuple)
    max_iterations: int = attrs.field(default=25, validator=_positive)
    verify_each_pass: bool = attrs.field(default=True, validator=_bool)


Step = HloPass | Pipeline | FixedPoint


class PassFailure(RuntimeError):
    """A pass crashed, or left a module that does not verify: a bug in heron, not in the input.

    The message names the pass (its path in the pipeline); the original error is
    the ``__cause__``. An ``HloError`` a pass raises on purpose (input it refuses,
    naming the instruction) is not wrapped: it reaches the user as it is.
    """


@attrs.frozen
class PassRecord:
    """What one run of one pass did: where it ran, whether it changed the module, how long."""

    path: str
    """The pass's name after its enclosing pipelines and groups: ``simplify/fixed/dce``."""
    changed: bool
    seconds: float
    iteration: int = 0
    """Which round of the innermost fixed-point group this was (0 outside one)."""


@attrs.define
class PipelineReport:
    """Every pass run, in order, and the fixed-point groups that hit their bound."""

    records: list[PassRecord] = attrs.field(factory=list)
    unconverged: list[str] = attrs.field(factory=list)
    dumps: list[Path] = attrs.field(factory=list)
    #: The passes that changed the module and were verified in their scope only
    #: (``HloPass.entry_only``): the whole module is verified once more at the end.
    scoped: list[str] = attrs.field(factory=list)

    @property
    def changed(self) -> bool:
        return any(record.changed for record in self.records)

    @property
    def seconds(self) -> float:
        return sum(record.seconds for record in self.records)

    def timing_table(self) -> str:
        """Per pass name: runs, runs that changed the module, total seconds (slowest first)."""
        totals: dict[str, list[float]] = {}
        for record in self.records:
            name = record.path.rsplit("/", 1)[-1]
            runs, changed, seconds = totals.get(name, [0, 0, 0.0])
            totals[name] = [runs + 1, changed + record.changed, seconds + record.seconds]
        rows = sorted(totals.items(), key=lambda item: -item[1][2])
        width = max([len("pass"), *(len(name) for name in totals)])
        lines = [f"{'pass':<{width}}  runs  changed  seconds"]
        for name, (runs, changed, seconds) in rows:
            lines.append(f"{name:<{width}}  {runs:>4}  {changed:>7}  {seconds:>7.3f}")
        lines.append(f"{'total':<{width}}  {len(self.records):>4}  {'':>7}  {self.seconds:>7.3f}")
        return "\n".join(lines)


@attrs.frozen
class _Dumper:
    directory: Path
    pattern: re.Pattern[str] | None

    def wanted(self, path: str) -> bool:
        return self.pattern is None or self.pattern.search(path) is not None


def run_pipeline(
    module: Module,
    pipeline: Step,
    *,
    verify: bool = True,
    verified: bool = False,
    dump_dir: str | Path | None = None,
    dump_passes: str | None = None,
    on_pass: Callable[[PassRecord], None] | None = None,
    verify_each_pass: bool | None = None,
    reached_only: bool = False,
) -> PipelineReport:
    """Run ``pipeline`` on ``module`` in place and report what each pass did.

    ``verify`` checks the module after every pass (and before the first, unless
    ``verified`` says the module is known to verify: the output of an earlier
    pipeline run with ``verify``, which always leaves a verified module); in a
    group with ``verify_each_pass=False``, once when the group ends, unless
    ``verify_each_pass`` (default: ``HERON_VERIFY_EACH_PASS=1`` in the
    environment) asks for every pass.
    ``dump_dir`` receives ``<module>.0000.before_optimizations.txt``, then one
    file per pass run that changed the module (``<module>.NNNN.<path>.txt``,
    only for paths matching the regular expression ``dump_passes`` when given)
    and ``<module>.NNNN.after_optimizations.txt`` at the end. ``on_pass`` hears
    each record as soon as the pass has run.
    ``reached_only``: verify only what the entry reaches (and the module's own
    invariants), for a run on a view whose other computations are there for their
    names and are no business of its passes (:mod:`heron.compiler.control_flow_fusion`:
    each loop body fused as if it were the entry). Verifying the whole module in each
    of a program's hundred views was a fifth of its compile; what the views leave is
    verified whole by the run after them.
    """
    dumper = None
    if dump_dir is not None:
        directory = Path(dump_dir)
        directory.mkdir(parents=True, exist_ok=True)
        pattern = None
        if dump_passes is not None:
            try:
                pattern = re.compile(dump_passes)
            except re.error as exc:
                raise UnsupportedError(f"--dump-passes {dump_passes!r}: {exc}") from exc
        dumper = _Dumper(directory, pattern)
    if verify and not verified:
        _verify(module, None, reached_only)
    report = PipelineReport()
    if dumper is not None:
        _dump(module, dumper, report, "before_optimizations")
    every = verify_each_pass
    if every is None:
        every = os.environ.get(VERIFY_EACH_PASS_ENV) == "1"
    checks = _Checks(verify, every, reached_only)
    _run_step(module, pipeline, "", 0, report, checks, dumper, on_pass)
    if verify and report.scoped:
        try:
            _verify(module, None, reached_only)
        except HloError as exc:
            raise PassFailure(
                f"pipeline {pipeline.name!r} left a module that does not verify (after"
                f" {', '.join(repr(path) for path in report.scoped)}, which promise to change"
                f" the entry computation only): {exc}"
            ) from exc
    if dumper is not None:
        _dump(module, dumper, report, "after_optimizations")
    return report


@attrs.frozen
class _Checks:
    """What a run verifies: after the passes (``verify``), and whether after every pass
    even in a group that verifies once at its end (``every``)."""

    verify: bool
    every: bool
    #: Verify only what the entry reaches (``run_pipeline``'s ``reached_only``).
    reached: bool = False


def _verify(module: Module, scope: Sequence[Computation] | None, reached_only: bool) -> None:
    """Verify ``scope`` (None: the module), within what the entry reaches when
    ``reached_only``."""
    if reached_only:
        reached = computations_reached([module.entry])
        if scope is not None:
            within = {id(computation) for computation in reached}
            scope = [computation for computation in scope if id(computation) in within]
        else:
            scope = reached
    verify_module(module, scope)


def _run_step(
    module: Module,
    step: Step,
    prefix: str,
    iteration: int,
    report: PipelineReport,
    checks: _Checks,
    dumper: _Dumper | None,
    on_pass: Callable[[PassRecord], None] | None,
) -> bool:
    path = f"{prefix}/{step.name}" if prefix else step.name
    if isinstance(step, HloPass):
        return _run_pass(module, step, path, iteration, report, checks, dumper, on_pass)
    if not isinstance(step, Pipeline | FixedPoint):
        raise UnsupportedError(f"not a pass, pipeline or fixed-point group: {step!r}")
    if not (checks.verify and not step.verify_each_pass and not checks.every):
        return _run_group(module, step, path, iteration, report, checks, dumper, on_pass)
    first = len(report.records)
    changed = _run_group(
        module, step, path, iteration, report, _Checks(False, False), dumper, on_pass
    )
    if changed:
        try:
            _verify(module, None, checks.reached)
        except HloError as exc:
            changers = dict.fromkeys(r.path for r in report.records[first:] if r.changed)
            raise PassFailure(
                f"{path!r} left a module that does not verify (its passes that changed it:"
                f" {', '.join(changers)}; {VERIFY_EACH_PASS_ENV}=1 verifies after each"
                f" and names the one): {exc}"
            ) from exc
    return changed


def _run_group(
    module: Module,
    step: Pipeline | FixedPoint,
    path: str,
    iteration: int,
    report: PipelineReport,
    checks: _Checks,
    dumper: _Dumper | None,
    on_pass: Callable[[PassRecord], None] | None,
) -> bool:
    """The steps of a pipeline once, or of a fixed-point group until none changes."""
    if isinstance(step, Pipeline):
        changed = False
        for inner in step.steps:
            changed |= _run_step(module, inner, path, iteration, report, checks, dumper, on_pass)
        return changed
    changed = False
    for round_number in range(step.max_iterations):
        changed_this_round = False
        for inner in step.steps:
            changed_this_round |= _run_step(
                module, inner, path, round_number, report, checks, dumper, on_pass
            )
        changed |= changed_this_round
        if not changed_this_round:
            return changed
    report.unconverged.append(path)
    return changed


def _run_pass(
    module: Module,
    step: HloPass,
    path: str,
    iteration: int,
    report: PipelineReport,
    checks: _Checks,
    dumper: _Dumper | None,
    on_pass: Callable[[PassRecord], None] | None,
) -> bool:
    verify = checks.verify
    start = time.perf_counter()
    # Held while the pass runs, so that no computation it adds can take the id of one
    # that was there before.
    before = list(module.computations) if step.entry_only else []
    try:
        changed = step.run(module)
    except HloVerifyError as exc:  # the pass broke the module (a cycle): a bug in heron
        raise PassFailure(f"pass {path!r} left a module that does not verify: {exc}") from exc
    except (HloError, PassFailure):
        raise
    except Exception as exc:  # a bug in a pass: name the pass, keep the cause
        raise PassFailure(f"pass {path!r} failed: {type(exc).__name__}: {exc}") from exc
    if not isinstance(changed, bool):
        raise PassFailure(f"pass {path!r} returned {changed!r}; a pass returns whether it changed")
    if verify and changed:
        try:
            scope = None
            if step.entry_only:
                known = {id(computation) for computation in before}
                scope = [module.entry, *(c for c in module.computations if id(c) not in known)]
                report.scoped.append(path)
            _verify(module, scope, checks.reached)
        except HloError as exc:
            raise PassFailure(f"pass {path!r} left a module that does not verify: {exc}") from exc
    record = PassRecord(path, changed, time.perf_counter() - start, iteration)
    report.records.append(record)
    if on_pass is not None:
        on_pass(record)
    if changed and dumper is not None and dumper.wanted(path):
        _dump(module, dumper, report, path.replace("/", "."))
    return changed


def _dump(module: Module, dumper: _Dumper, report: PipelineReport, what: str) -> None:
    target = dumper.directory / f"{module.name}.{len(report.dumps):04d}.{what}.txt"
    target.write_text(print_module(module) + "\n")
    report.dumps.append(target)


def pipeline_of(steps: Sequence[Step], name: str = "passes") -> Pipeline:
    """A pipeline of ``steps`` (what ``heron opt --passes a,b`` runs)."""
    return Pipeline(name, tuple(steps))
