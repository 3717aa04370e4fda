"""The speed cases' autotuning step: cuBLASLt's algorithm tuned on the GPU, then timed.

cuBLASLt's heuristic picks each GEMM call's algorithm from its shape alone;
``heron.runtime.cuda.autotune.autotune_gemms`` measures the heuristic's
candidates on the device and records the fastest correct one in the artefact
(docs/devices.md, "cuBLASLt's algorithm"). A GPU window is the only place that
measurement means anything, so the bundle does it by itself: after a speed
case has timed heron's artefact (the untuned run), ``run.py`` asks the worker
to tune a copy of it and time the copy exactly as the untuned one was timed
(:func:`measure`). What comes back goes into the speed case's
``details.autotune``; it never changes the case's status: the untuned numbers
stand whatever autotuning does, and its problems are reported, not failed.

This module runs in the worker only (numpy, heron's runtime wheels): it imports
heron's runtime inside the functions, so that the module imports where the CUDA
runtime does not, and an import failure is a stated reason, not a dead worker.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

#: Timing the tuned artefact takes about as long as timing the untuned one did; it is
#: skipped unless this many times that is left before the deadline (a late answer is
#: killed by the watchdog, which would lose the tuning's numbers too).
TIMING_MARGIN = 1.5
#: The untuned and tuned times reported (what the speed table prints for heron).
TIMES = ("first_s", "single_s", "throughput_s", "device_s", "batch_runs")


@dataclass
class SpeedRun:
    """The untuned side of one speed case, as the speed handler timed it: what the
    autotuning step tunes and compares against without running it again."""

    name: str  #: the case's name
    artefact: Any  #: the artefact as loaded from the bundle
    inputs: list[np.ndarray]  #: the GPU-size inputs it ran on
    outputs: list[np.ndarray]  #: its outputs
    times: dict[str, Any]  #: the worker's timing of it (``details.heron``)
    timing_s: float  #: wall seconds that timing took


class _OutOfTime(Exception):
    """Raised from ``autotune_gemms``'s ``on_call`` when the deadline has passed."""


def gemm_calls(program: Sequence[Any]) -> list[tuple[str, Any]]:
    """(path, :class:`~heron.runtime.core.gemm.GemmCall`) of each GEMM library call of
    ``program``, in loops, branches and command buffers too, paths as the executor's
    report names them (``3.body.1``); raises ``ThunkError`` for a malformed call."""
    from heron.runtime.core.gemm import GEMM, GemmCall
    from heron.runtime.core.thunks import (
        CommandBufferThunk,
        ConditionalThunk,
        LibraryCallThunk,
        SequentialThunk,
        WhileThunk,
    )

    found: list[tuple[str, Any]] = []

    def walk(thunks: Sequence[Any], prefix: str) -> None:
        for i, thunk in enumerate(thunks):
            path = f"{prefix}{i}"
            if isinstance(thunk, LibraryCallThunk):
                if thunk.operation == GEMM:
                    found.append((path, GemmCall.from_thunk(thunk)))
            elif isinstance(thunk, SequentialThunk | CommandBufferThunk):
                walk(thunk.thunks, f"{path}.")
            elif isinstance(thunk, WhileThunk):
                walk(thunk.condition, f"{path}.condition.")
                walk(thunk.body, f"{path}.body.")
            elif isinstance(thunk, ConditionalThunk):
                for b, branch in enumerate(thunk.branches):
                    walk(branch, f"{path}.branch{b}.")

    walk(program, "")
    return found


def agreement(
    tuned: Sequence[np.ndarray],
    untuned: Sequence[np.ndarray],
    bound: float,
    int_tolerance: float,
) -> dict[str, Any]:
    """Whether the tuned run's outputs equal the untuned run's within the GEMM contract.

    A float output's distance is ``max|tuned - untuned| / (1 + max|untuned|)``: the
    contract's :func:`~heron.runtime.core.gemm.agreement_tolerance` bounds each element of
    one call's result by ``tolerance * (1 + |value|)``, so one call's output is within
    ``bound`` by this measure; ``bound`` is the sum of the program's calls' tolerances
    (to first order, each call of a chain adds its own). A NaN or infinity where the
    other run has none is never within it (distance None). Integer outputs (exact for an
    integer GEMM, ties of a top-k of floats otherwise) may differ in ``int_tolerance``
    of their elements where ``bound`` is not 0, in none where it is.
    """
    if len(tuned) != len(untuned):
        return {"agree": False, "why": f"{len(tuned)} outputs, the untuned run's {len(untuned)}"}
    distances: list[float | None] = []
    why: list[str] = []
    for i, (got, want) in enumerate(zip(tuned, untuned, strict=True)):
        got, want = np.asarray(got), np.asarray(want)
        if got.shape != want.shape or got.dtype != want.dtype:
            distances.append(None)
            theirs = f"{want.dtype}{list(want.shape)}"
            why.append(f"out{i}: {got.dtype}{list(got.shape)} against {theirs}")
            continue
        if want.dtype.kind in "iub":
            differing = float(np.mean(got != want)) if want.size else 0.0
            distances.append(differing)
            allowed = int_tolerance if bound else 0.0
            if differing > allowed:
                why.append(f"out{i}: {differing:.3g} of its elements differ (allowed {allowed:g})")
            continue
        wide = np.complex128 if want.dtype.kind == "c" else np.float64
        g, w = got.astype(wide), want.astype(wide)
        finite_g, finite_w = np.isfinite(g), np.isfinite(w)
        special = ~(finite_g & finite_w)
        if special.any() and not (
            np.array_equal(finite_g, finite_w)
            and np.all((g[special] == w[special]) | (np.isnan(g[special]) & np.isnan(w[special])))
        ):
            distances.append(None)
            why.append(f"out{i}: a NaN or infinity of one run is not the other's")
            continue
        finite = finite_w
        if not finite.any():
            distances.append(0.0)
            continue
        apart = float(np.max(np.abs(g[finite] - w[finite])))
        distance = apart / (1 + float(np.max(np.abs(w[finite]))))
        distances.append(distance)
        if not distance <= bound:
            why.append(f"out{i}: {distance:.3g} apart, the contract allows {bound:.3g}")
    result: dict[str, Any] = {"agree": not why, "distances": distances, "bound": bound}
    if why:
        result["why"] = "; ".join(why)
    return result


def measure(
    run: SpeedRun,
    device: Any,
    time_run: Callable[[Any], tuple[list[np.ndarray], dict[str, Any]]],
    deadline: float,
    int_tolerance: float,
) -> dict[str, Any]:
    """Autotune ``run.artefact``'s GEMM calls on ``device``, time the tuned copy with
    ``time_run`` (the speed handler's timing, so both sides are measured alike), compare
    its outputs with the untuned run's; the ``details.autotune`` of the case.

    ``status`` is ``measured``, ``skipped`` (``reason``: no GEMM library call, no
    cuBLASLt, no call tuned, the budget, a runtime without the pass) or ``error``
    (``reason``: autotuning or the tuned run raised). ``deadline`` is a
    ``time.monotonic()`` value: autotuning stops after the call that passes it, and the
    tuned timing is skipped unless :data:`TIMING_MARGIN` times the untuned timing's
    duration is left.
    """
    from heron.runtime.core.gemm import agreement_tolerance
    from heron.runtime.core.thunks import ThunkError

    try:
        calls = gemm_calls(run.artefact.program)
    except ThunkError as error:
        return {"status": "error", "reason": f"a GEMM call of the artefact is malformed: {error}"}
    if not calls:
        return {"status": "skipped", "reason": "the artefact has no GEMM library calls"}
    try:
        from heron.runtime.cuda.autotune import AutotuneError, autotune_gemms
    except ImportError as error:
        return {"status": "skipped", "reason": f"heron's autotuning does not import here: {error}"}
    reports: list[Any] = []

    def on_call(report: Any) -> None:
        reports.append(report)
        if time.monotonic() > deadline and len(reports) < len(calls):
            raise _OutOfTime

    begun = time.perf_counter()
    try:
        tuned = autotune_gemms(run.artefact, device, on_call=on_call)
    except _OutOfTime:
        return {
            "status": "skipped",
            "reason": f"budget: autotuning stopped after {len(reports)} of {len(calls)} GEMM"
            f" calls ({time.perf_counter() - begun:.1f} s)",
            "calls": [_call(r, {}, {}) for r in reports],
        }
    except AutotuneError as error:
        return {"status": "skipped", "reason": str(error)}
    except Exception as error:  # noqa: BLE001 - recorded in the case's details, never a failure
        return {"status": "error", "reason": f"autotuning failed: {type(error).__name__}: {error}"}
    result: dict[str, Any] = {"autotune_s": time.perf_counter() - begun}
    untuned_algorithms = run.times.get("library_algorithms") or {}
    if all(r.chosen is None for r in reports):
        why = "; ".join(sorted({r.skipped for r in reports})) or "no GEMM call reached cuBLASLt"
        result.update(status="skipped", reason=f"no GEMM call was tuned: {why}")
        result["calls"] = [_call(r, untuned_algorithms, {}) for r in reports]
        return result
    left = deadline - time.monotonic()
    if left < TIMING_MARGIN * run.timing_s:
        result.update(
            status="skipped",
            reason=f"budget: {left:.1f} s left after tuning; timing the tuned artefact takes"
            f" about {run.timing_s:.1f} s",
        )
        result["calls"] = [_call(r, untuned_algorithms, {}) for r in reports]
        return result
    try:
        outputs, times = time_run(tuned)
    except Exception as error:  # noqa: BLE001 - recorded in the case's details, never a failure
        result.update(
            status="error",
            reason=f"the tuned artefact's run failed: {type(error).__name__}: {error}"[:500],
        )
        result["calls"] = [_call(r, untuned_algorithms, {}) for r in reports]
        return result
    tuned_algorithms = times.get("library_algorithms") or {}
    result["calls"] = [_call(r, untuned_algorithms, tuned_algorithms) for r in reports]
    result["untuned"] = {k: run.times[k] for k in TIMES if k in run.times}
    result["tuned"] = {k: times[k] for k in TIMES if k in times}
    result["tuned"]["kernels"] = times.get("kernels", [])
    result["untuned_over_tuned"] = {
        side: run.times[f"{side}_s"] / times[f"{side}_s"]
        for side in ("throughput", "device")
        if run.times.get(f"{side}_s") and times.get(f"{side}_s")
    }
    bound = sum(agreement_tolerance(call) for _, call in calls)
    result["outputs"] = agreement(outputs, run.outputs, bound, int_tolerance)
    result["status"] = "measured"
    if not result["outputs"]["agree"]:
        result["problem"] = (
            "the tuned artefact's outputs differ from the untuned run's beyond the GEMM"
            f" contract: {result['outputs']['why']}"
        )
    return result


def _call(report: Any, untuned: dict[str, str], tuned: dict[str, str]) -> dict[str, Any]:
    """One call's line of ``details.autotune.calls``: the candidate chosen against the
    heuristic's first (candidate 0), their times, what was dropped and why, and the
    algorithm each run's executor said it ran (``LibraryChoice.algorithm``)."""
    first = report.candidates[0] if report.candidates else None
    chosen = report.candidates[report.chosen] if report.chosen is not None else None
    entry: dict[str, Any] = {
        "path": report.path,
        "call": report.call,
        "candidates": len(report.candidates),
        "chosen": report.chosen,
        "chosen_s": chosen.seconds if chosen is not None else None,
        "heuristic_first_s": first.seconds if first is not None else None,
        "dropped": {str(c.number): c.dropped for c in report.candidates if c.dropped},
        "line": report.report_line(),
    }
    if report.skipped:
        entry["skipped"] = report.skipped
    if report.path in untuned:
        entry["untuned_algorithm"] = untuned[report.path]
    if report.path in tuned:
        entry["tuned_algorithm"] = tuned[report.path]
    return entry
