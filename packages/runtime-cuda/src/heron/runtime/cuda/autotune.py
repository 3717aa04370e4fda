"""Autotuning an artefact's GEMM library calls on a CUDA device (``heron compile --autotune``).

cuBLASLt's heuristic picks an algorithm from the call's shape alone; the fastest
one on a given GPU is often another of its candidates. As XLA's GEMM
autotuner does, this pass measures: for each GEMM library call of the
artefact (each call shape once, loops' and branches' calls too) it

1. asks the device's cuBLASLt for the heuristic's candidates
   (:meth:`~heron.runtime.cuda.cublaslt.CublasLt.candidates`, up to
   ``HEURISTIC_CANDIDATES``);
2. allocates device buffers of the call's sizes and fills every one, the
   outputs too (``beta`` reads ``out``), with small random values from a fixed
   seed: no candidate ever reads uninitialised memory;
3. runs the heuristic's first once (the reference), then each candidate as a
   tuned call (so ``cublasLtMatmulAlgoCheck`` vets it exactly as a later load
   will), its outputs restored before, and drops a candidate that is refused,
   fails, or whose result differs from the reference by more than the
   contract's :func:`~heron.runtime.core.gemm.agreement_tolerance` (a broken
   algorithm must never be the fastest);
4. times each remaining candidate on the device's stream with event timers:
   :data:`WARMUP_RUNS` untimed runs, then the median of :data:`TIMED_RUNS`;
5. records the fastest in the call's ``tuning`` attribute
   (:class:`~heron.runtime.core.gemm.GemmTuning`: the algorithm's bytes, the
   device's name and compute capability, the cuBLASLt version, its time).

The result is a new artefact, saved like any (the tuning travels in
``program.json``). Loading it where the device or cuBLASLt version differs
runs the heuristic's choice again, and the executor's report says why.
A call cuBLASLt does not offer is left as it is (its fallback runs anyway).
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Sequence
from typing import Any

import attrs
import numpy as np

from heron.hlo.element_types import ElementType
from heron.runtime.core.artefact import Artefact
from heron.runtime.core.device import DeviceBuffer, DeviceError
from heron.runtime.core.gemm import GEMM, GemmCall, GemmTuning, agreement_tolerance
from heron.runtime.core.thunks import (
    CommandBufferThunk,
    ConditionalThunk,
    LibraryCallThunk,
    SequentialThunk,
    Thunk,
    ThunkError,
    WhileThunk,
)
from heron.runtime.cuda.cublaslt import CublasLt
from heron.runtime.cuda.device import CudaDevice

__all__ = [
    "TIMED_RUNS",
    "WARMUP_RUNS",
    "AutotuneError",
    "CandidateResult",
    "TunedCall",
    "autotune_gemms",
    "tuning_device",
]

#: Untimed runs of each candidate first: its kernel's first launch loads its module.
WARMUP_RUNS = 3
#: Timed runs of each candidate; its time is their median (robust to one late launch).
TIMED_RUNS = 7
#: The random inputs' seed: the same artefact is tuned on the same inputs.
SEED = 0


class AutotuneError(DeviceError):
    """The pass cannot run here (no CUDA device, no cuBLASLt); the message says why."""


@attrs.frozen
class CandidateResult:
    """One candidate algorithm of one call: its time, or why it was dropped."""

    number: int  #: its place in the heuristic's order (0: the heuristic's own choice)
    seconds: float | None  #: median of the timed runs (None when dropped)
    dropped: str = ""  #: why it was not kept ("" when it was timed)


@attrs.frozen
class TunedCall:
    """What the pass did with one GEMM library call (for the CLI's and the bundle's reports)."""

    path: str  #: the thunk's place in the program (``3.body.1``)
    call: str  #: the call, described
    candidates: tuple[CandidateResult, ...] = ()
    chosen: int | None = None  #: the candidate recorded (None: the call is left as it was)
    skipped: str = ""  #: why the call was not tuned

    def report_line(self) -> str:
        """``gemm f32[...] -> f32: candidate 2 of 8, 41.3 us (heuristic's first 55.0 us)``."""
        if self.chosen is None:
            return f"library call {self.path}: {self.call}: not tuned: {self.skipped}"
        best = self.candidates[self.chosen]
        first = self.candidates[0]
        dropped = sum(1 for c in self.candidates if c.dropped)
        parts = [f"candidate {self.chosen} of {len(self.candidates)}, {best.seconds * 1e6:.1f} us"]
        if self.chosen != 0 and first.seconds is not None:
            parts.append(f"heuristic's first {first.seconds * 1e6:.1f} us")
        if dropped:
            parts.append(f"{dropped} dropped")
        return f"library call {self.path}: {self.call}: " + ", ".join(parts)


def tuning_device(target: Any = None) -> CudaDevice:
    """The CUDA device to tune on (device 0, checked to run code compiled for ``target``);
    :class:`AutotuneError` saying why there is none: the pass measures real GPU time,
    so nothing stands in for it."""
    if target is not None and getattr(target, "backend", "cuda") != "cuda":
        raise AutotuneError(
            f"autotuning tunes cuBLASLt calls on a CUDA device; the target {target.name} is"
            f" {target.backend}"
        )
    from heron.runtime.cuda.backend import create_device

    try:
        return create_device(target)
    except DeviceError as error:
        raise AutotuneError(f"autotuning needs a CUDA device: {error}") from None


def autotune_gemms(
    artefact: Artefact,
    device: Any,
    *,
    on_call: Callable[[TunedCall], None] | None = None,
    warmup: int = WARMUP_RUNS,
    runs: int = TIMED_RUNS,
) -> Artefact:
    """``artefact`` with the fastest correct cuBLASLt algorithm of each GEMM library call
    measured on ``device`` and stored with the call (see the module docstring).

    ``on_call`` is told what happened to each call, in program order. Raises
    :class:`AutotuneError` when ``device`` is not a CUDA device or has no cuBLASLt.
    """
    if not isinstance(device, CudaDevice):
        described = getattr(device, "description", type(device).__name__)
        raise AutotuneError(f"autotuning times cuBLASLt on a CUDA device, not on {described}")
    library = device.library(GEMM)
    if not isinstance(library, CublasLt):
        why = device.library_reasons.get(GEMM, "its GEMM library is not cuBLASLt")
        raise AutotuneError(f"autotuning needs cuBLASLt on {device.description}: {why}")
    if warmup < 0 or runs < 1:
        raise AutotuneError(f"autotuning: {warmup} warm-up and {runs} timed runs (>= 0, >= 1)")
    tuner = _Tuner(device, library, warmup, runs)

    def visit(thunk: LibraryCallThunk, path: str) -> LibraryCallThunk:
        if thunk.operation != GEMM:
            return thunk
        try:
            call = GemmCall.from_thunk(thunk)
        except ThunkError as error:
            raise AutotuneError(f"thunk {path}: {error}") from None
        tuning, report = tuner.tune(call.untuned, path)
        if on_call is not None:
            on_call(report)
        if tuning is None:
            return thunk
        tuned = attrs.evolve(call, tuning=tuning)
        return attrs.evolve(thunk, attributes=tuned.attributes())

    program = _map_library_calls(artefact.program, "", visit)
    return attrs.evolve(artefact, program=program)


class _Tuner:
    """The measurements of one pass: each call shape tuned once."""

    def __init__(self, device: CudaDevice, library: CublasLt, warmup: int, runs: int) -> None:
        self.device = device
        self.library = library
        self.warmup = warmup
        self.runs = runs
        self.rng = np.random.default_rng(SEED)
        self.done: dict[GemmCall, tuple[GemmTuning | None, TunedCall]] = {}

    def tune(self, call: GemmCall, path: str) -> tuple[GemmTuning | None, TunedCall]:
        if call in self.done:
            tuning, report = self.done[call]
            return tuning, attrs.evolve(report, path=path)
        described = call.describe()
        if not self.library.offers(call):
            report = TunedCall(path, described, skipped=self.library.refusal(call))
            self.done[call] = (None, report)
            return None, report
        candidates = self.library.candidates(call)
        buffers = self._inputs(call)
        try:
            results = self._measure(call, candidates, buffers)
        finally:
            for _, buffer in buffers:
                self.device.free(buffer)
        timed = [r for r in results if r.seconds is not None]
        if not timed:
            report = TunedCall(path, described, tuple(results), skipped="no candidate ran")
            self.done[call] = (None, report)
            return None, report
        best = min(timed, key=lambda r: (r.seconds, r.number))
        assert best.seconds is not None
        tuning = self.library.tuning(candidates[best.number], best.seconds, len(candidates))
        report = TunedCall(path, described, tuple(results), best.number)
        self.done[call] = (tuning, report)
        return tuning, report

    def _inputs(self, call: GemmCall) -> list[tuple[np.ndarray, DeviceBuffer]]:
        """Every argument as (its host values, its device buffer holding them)."""
        out = []
        for name, kind, count in zip(
            call.operand_names, call.element_types(), call.element_counts(), strict=True
        ):
            values = _random_values(name, kind, count, self.rng)
            out.append((values, self.device.upload(values, f"autotune {name}")))
        return out

    def _run(
        self, call: GemmCall, buffers: Sequence[tuple[np.ndarray, DeviceBuffer]]
    ) -> list[np.ndarray]:
        """``call`` once on the inputs as first written (its outputs restored: beta reads
        ``out``); the outputs' bytes after it."""
        first_output = len(buffers) - call.outputs
        for values, buffer in buffers[first_output:]:
            self.device.copy_to_device(buffer, values)
        self.device.library_call(call, [buffer for _, buffer in buffers])
        return [self.device.copy_from_device(buffer) for _, buffer in buffers[first_output:]]

    def _measure(
        self,
        call: GemmCall,
        candidates: Sequence[bytes],
        buffers: Sequence[tuple[np.ndarray, DeviceBuffer]],
    ) -> list[CandidateResult]:
        reference = self._run(call, buffers)
        tolerance = agreement_tolerance(call)
        timer = self.device.timer()
        results = []
        for number, algorithm in enumerate(candidates):
            tuned = attrs.evolve(call, tuning=self.library.tuning(algorithm, 0.0, len(candidates)))
            refused = self.library.tuning_refusal(tuned)
            if refused:
                results.append(CandidateResult(number, None, refused))
                continue
            try:
                outputs = self._run(tuned, buffers)
                apart = max(
                    _distance(call, got, expected)
                    for got, expected in zip(outputs, reference, strict=True)
                )
                if not apart <= tolerance:
                    results.append(
                        CandidateResult(
                            number,
                            None,
                            f"its result is {apart:.3g} from the heuristic's first (the contract"
                            f" allows {tolerance:.3g})",
                        )
                    )
                    continue
                arguments = [buffer for _, buffer in buffers]
                for _ in range(self.warmup):
                    self.device.library_call(tuned, arguments)
                times = []
                for _ in range(self.runs):
                    timer.start()
                    self.device.library_call(tuned, arguments)
                    timer.stop()
                    times.append(timer.seconds())
            except DeviceError as error:
                results.append(CandidateResult(number, None, f"it failed: {error}"))
                continue
            results.append(CandidateResult(number, statistics.median(times)))
        return results


def _random_values(name: str, kind: str, count: int, rng: np.random.Generator) -> np.ndarray:
    """``count`` small values of ``kind`` for argument ``name``: uniform in [-1, 1] for
    floats (complex: both parts), -4..4 for integers, 1 for an fp8 call's scales (the
    result stays in range, so candidates are compared on finite values)."""
    dtype = ElementType(kind).numpy_dtype
    if name in ("a_scale", "b_scale", "d_scale"):
        return np.ones(count, dtype)
    if np.dtype(dtype).kind in "iu":
        return rng.integers(-4, 5, count).astype(dtype)
    values = rng.uniform(-1, 1, count)
    if np.dtype(dtype).kind == "c":
        values = values + 1j * rng.uniform(-1, 1, count)
    return values.astype(dtype)


def _distance(call: GemmCall, got: np.ndarray, expected: np.ndarray) -> float:
    """The largest ``|got - expected| / (1 + |expected|)`` over the output's elements (NaN
    where they differ in NaN-ness or in an infinity: never within a tolerance)."""
    dtype = ElementType(call.out_type).numpy_dtype  # out's type, and aux's
    wide = np.complex128 if np.dtype(dtype).kind == "c" else np.float64
    a = np.ascontiguousarray(got).view(dtype).astype(wide)
    b = np.ascontiguousarray(expected).view(dtype).astype(wide)
    if a.size == 0:
        return 0.0
    same = (a == b) | (np.isnan(a) & np.isnan(b))
    with np.errstate(invalid="ignore", over="ignore"):
        apart = np.where(same, 0.0, np.abs(a - b) / (1 + np.abs(b)))
    if np.isnan(apart).any():
        return float("nan")
    return float(apart.max())


def _map_library_calls(
    thunks: Sequence[Thunk], prefix: str, visit: Callable[[LibraryCallThunk, str], Thunk]
) -> tuple[Thunk, ...]:
    """``thunks`` with every library call (in loops, branches and command buffers too)
    replaced by ``visit(call, path)``; paths as the executor's report names them."""
    out: list[Thunk] = []
    for i, thunk in enumerate(thunks):
        path = f"{prefix}{i}"
        if isinstance(thunk, LibraryCallThunk):
            out.append(visit(thunk, path))
        elif isinstance(thunk, SequentialThunk | CommandBufferThunk):
            inner = _map_library_calls(thunk.thunks, f"{path}.", visit)
            out.append(attrs.evolve(thunk, thunks=inner))
        elif isinstance(thunk, WhileThunk):
            condition = _map_library_calls(thunk.condition, f"{path}.condition.", visit)
            body = _map_library_calls(thunk.body, f"{path}.body.", visit)
            out.append(attrs.evolve(thunk, condition=condition, body=body))
        elif isinstance(thunk, ConditionalThunk):
            branches = tuple(
                _map_library_calls(branch, f"{path}.branch{b}.", visit)
                for b, branch in enumerate(thunk.branches)
            )
            out.append(attrs.evolve(thunk, branches=branches))
        else:
            out.append(thunk)
    return tuple(out)
