"""Which library calls run here: the load-time choice between a library and heron's kernel.

A compiled GEMM fusion is a :class:`~heron.runtime.core.thunks.LibraryCallThunk`
carrying both the library call (``operation "gemm"``, the contract of
:mod:`heron.runtime.core.gemm`) and, as its ``fallback``, the launch of
heron's own kernel; a convolution the compiler gave a DNN library
(``operation "convolution"``, :mod:`heron.runtime.core.convolution`) carries
its host computation as the fallback, and so do a fused attention
(``operation "attention"``, :mod:`heron.runtime.core.attention`) and an FFT
(``operation "fft"``, :mod:`heron.runtime.core.fft`). When an
executable is loaded, :func:`resolve` asks the device, call by call, whether
it offers the call (``Device.library_for``: cuBLASLt on a CUDA device where
nvmath-python finds it, hipBLAS on ROCm for the calls hipBLAS can express,
numpy on an interpreter device built with ``libraries=("gemm",)``), and puts
either the library call (its fallback dropped) or the fallback's thunks in its
place. The choice is made once, here,
and reported: one :class:`LibraryChoice` per call, and the emitter of every
resulting thunk (the library's name, or the fallback's emitter such as
``"gemm"``) for the run records. Where the library runs the call, the choice
also says which of its algorithms it runs and why (``Device.library_algorithm``:
cuBLASLt's heuristic, or the algorithm an autotuning pass stored with the call,
or the heuristic because that stored one does not apply here, with the reason).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import attrs

from heron.runtime.core.attention import ATTENTION, AttentionCall
from heron.runtime.core.attention_backward import ATTENTION_BACKWARD, AttentionBackwardCall
from heron.runtime.core.convolution import CONVOLUTION, ConvolutionCall
from heron.runtime.core.fft import FFT, FftCall
from heron.runtime.core.gemm import GEMM, GemmCall
from heron.runtime.core.thunks import (
    CommandBufferThunk,
    ConditionalThunk,
    LibraryCallThunk,
    SequentialThunk,
    Thunk,
    ThunkError,
    WhileThunk,
)

__all__ = ["OPERATIONS", "LibraryChoice", "Resolved", "parse_call", "resolve"]

#: operation -> how its thunk's attributes and slices are read (the contracts).
OPERATIONS: Mapping[str, Callable[[LibraryCallThunk], Any]] = {
    GEMM: GemmCall.from_thunk,
    CONVOLUTION: ConvolutionCall.from_thunk,
    ATTENTION: AttentionCall.from_thunk,
    ATTENTION_BACKWARD: AttentionBackwardCall.from_thunk,
    FFT: FftCall.from_thunk,
}


def parse_call(thunk: LibraryCallThunk) -> Any:
    """The call ``thunk`` describes (a :class:`~heron.runtime.core.gemm.GemmCall`, ...).

    Raises :class:`ThunkError` for an operation heron has no contract for, or
    attributes and slices that do not fit its contract.
    """
    reader = OPERATIONS.get(thunk.operation)
    if reader is None:
        raise ThunkError(
            f"library call {thunk.library}.{thunk.operation}: no such operation (heron's"
            f" library calls: {', '.join(OPERATIONS)})"
        )
    return reader(thunk)


@attrs.frozen
class LibraryChoice:
    """What the executor chose for one library call of the program."""

    path: str  #: the thunk's place in the program before the choice (``3.body.1``)
    call: str  #: the call, described (``gemm f32[64x32] x f32[32x16] -> f32``)
    chosen: str  #: the library that runs it (``cublasLt``), or the fallback's emitter
    library: bool  #: whether the library runs it (else heron's kernel)
    #: why heron's kernel runs it (the device's word), "" where the library does
    reason: str = ""
    #: which of the library's algorithms runs it and why (the device's word: ``tuned
    #: algorithm ...`` or ``heuristic ...``), "" where the library says nothing or
    #: heron's kernel runs it
    algorithm: str = ""

    def to_json(self) -> dict[str, Any]:
        """Every field; ``algorithm`` only where the library said which (the reports of a
        call heron's kernel runs are as they were before libraries reported it)."""
        out = attrs.asdict(self)
        if not self.algorithm:
            del out["algorithm"]
        return out

    def report_line(self) -> str:
        """``library call 3: gemm f32[...] -> f32: cublasLt (library)``: what the reports
        of ``heron run`` and ``heron-run`` print for it."""
        fallback = "on the host" if self.chosen == "host" else "heron kernel"
        how = "library" if self.library else f"{fallback}: {self.reason}"
        if self.library and self.algorithm:
            how = f"library; {self.algorithm}"
        return f"library call {self.path}: {self.call}: {self.chosen} ({how})"


@attrs.frozen
class Resolved:
    """A program with every library call decided (see the module docstring)."""

    program: tuple[Thunk, ...]
    choices: tuple[LibraryChoice, ...]
    #: The program's library calls -> the parsed call the device runs. Thunks are frozen
    #: values: equal thunks are the same call on the same slices, so they share an entry.
    calls: Mapping[Thunk, Any]
    #: A thunk the choice made -> its emitter (the library, or the fallback's emitter).
    emitters: Mapping[Thunk, str]


def resolve(
    program: Sequence[Thunk],
    library_for: Callable[[Any], str | None],
    refusal: Callable[[Any], str] | None = None,
    algorithm: Callable[[Any], str] | None = None,
    *,
    runs_fallback: Callable[[LibraryCallThunk], bool] | None = None,
) -> Resolved:
    """``program`` with each library call or its fallback, as ``library_for(call)`` says.

    ``library_for`` is the device's: the name of the library that runs the
    call there, or None; ``refusal(call)`` (the device's ``library_refusal``)
    says why not, for the report; ``algorithm(call)`` (the device's
    ``library_algorithm``) which algorithm the library runs it with, for the report
    too; ``runs_fallback(thunk)`` whether the thunk's fallback can run here (the
    artefact's: every kernel of it has an image for the device's backend; default:
    it has a fallback). A call the device does not offer and whose fallback cannot
    run is refused (:class:`ThunkError`, naming the call, its place and the reason).
    """
    choices: list[LibraryChoice] = []
    calls: dict[Thunk, Any] = {}
    emitters: dict[Thunk, str] = {}

    def sequence(thunks: Sequence[Thunk], prefix: str) -> tuple[Thunk, ...]:
        out: list[Thunk] = []
        for i, thunk in enumerate(thunks):
            out.extend(one(thunk, f"{prefix}{i}"))
        return tuple(out)

    def one(thunk: Thunk, path: str) -> list[Thunk]:
        if isinstance(thunk, LibraryCallThunk):
            return library_call(thunk, path)
        if isinstance(thunk, SequentialThunk):
            return [SequentialThunk(sequence(thunk.thunks, f"{path}."))]
        if isinstance(thunk, CommandBufferThunk):
            return [CommandBufferThunk(sequence(thunk.thunks, f"{path}."))]
        if isinstance(thunk, WhileThunk):
            return [
                WhileThunk(
                    sequence(thunk.condition, f"{path}.condition."),
                    thunk.predicate,
                    sequence(thunk.body, f"{path}.body."),
                    thunk.trip_count,
                )
            ]
        if isinstance(thunk, ConditionalThunk):
            return [
                ConditionalThunk(
                    thunk.selector,
                    thunk.selector_type,
                    tuple(
                        sequence(branch, f"{path}.branch{b}.")
                        for b, branch in enumerate(thunk.branches)
                    ),
                )
            ]
        return [thunk]

    def library_call(thunk: LibraryCallThunk, path: str) -> list[Thunk]:
        try:
            call = parse_call(thunk)
        except ThunkError as error:
            raise ThunkError(f"thunk {path}: {error}") from None
        described = call.describe() if hasattr(call, "describe") else thunk.operation
        library = library_for(call)
        if library is not None:
            chosen = attrs.evolve(thunk, fallback=())
            calls[chosen] = call
            emitters[chosen] = library
            how = algorithm(call) if algorithm is not None else ""
            choices.append(LibraryChoice(path, described, library, True, algorithm=how))
            return [chosen]
        reason = refusal(call) if refusal is not None else "the device offers no library for it"
        if not thunk.fallback:
            raise ThunkError(
                f"thunk {path}: library call {thunk.library}.{thunk.operation} ({described}):"
                f" {reason}, and the artefact has no heron kernel beside it (its compile"
                " counted on the library: `heron compile --library-fallbacks` keeps one)"
            )
        if runs_fallback is not None and not runs_fallback(thunk):
            raise ThunkError(
                f"thunk {path}: library call {thunk.library}.{thunk.operation} ({described}):"
                f" {reason}, and the artefact holds heron's kernel beside it for other"
                " backends only (its compile counted on this backend's library: compile"
                " with `heron compile --library-fallbacks` to keep the kernel everywhere)"
            )
        emitter = thunk.fallback_emitter or "heron"
        fallback = sequence(thunk.fallback, f"{path}.fallback.")
        for inner in fallback:
            emitters.setdefault(inner, emitter)
        choices.append(LibraryChoice(path, described, emitter, False, reason))
        return list(fallback)

    resolved = sequence(program, "")
    return Resolved(resolved, tuple(choices), calls, emitters)
