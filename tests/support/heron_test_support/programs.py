"""The program corpora as tests see them, and how a program's outputs are compared with XLA:CPU's.

Two corpora share one layout and one set of tests: ``programs/`` (JAX written
by hand, issue 15) and ``models/`` (flax, equinox, haiku, optax and transformers models and
training steps, issue 26). Each folder holds an ``index.json`` and one folder
per program (``module.hlo``, ``inputs.npz``, ``outputs.npz``,
``xla_gpu_optimized.hlo``, ``xla_gpu.json``); :class:`CorpusProgram` reads
them, :func:`parameters` turns every program of both corpora into a pytest
parameter, and :func:`compile_corpus_program` compiles one into an executable.

tests/test_programs.py (the evaluator, ``heron run --check``, buffers, the
kernel table), tests/test_executables.py (the thunk executor),
tests/test_jax_bridge.py (heron.jax) and programs/artefacts.py (artefacts
under heron-run) all compare a program's outputs with XLA:CPU's through
:func:`assert_close`.

A program heron gets wrong or refuses today is a row of :data:`KNOWN_FAILURES`,
with the reason; the tests check that it still fails that way
(:func:`expect_known_failure`), so that a fix makes them fail until the row
goes: the table can only shrink.
"""

from __future__ import annotations

import contextlib
import functools
import json
import re
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import attrs
import ml_dtypes
import numpy as np

if TYPE_CHECKING:
    from heron.compiler.executable import CompiledExecutable
    from heron.hlo.ir import Module

__all__ = [
    "CORPORA",
    "FLOAT_ULPS",
    "KNOWN_FAILURES",
    "NARROW_ARITHMETIC",
    "CorpusProgram",
    "KnownFailure",
    "assert_close",
    "compile_corpus_program",
    "corpus_programs",
    "expect_known_failure",
    "index",
    "kernel_compiler",
    "parameters",
]

#: The repository: tests/support/heron_test_support/programs.py is three folders down.
ROOT = Path(__file__).resolve().parents[3]
#: The corpora, folders of the repository: the hand-written programs and the library models.
CORPORA = ("programs", "models")
#: The files every program's folder holds.
FILES = ("module.hlo", "inputs.npz", "outputs.npz", "xla_gpu_optimized.hlo", "xla_gpu.json")
#: The device every corpus program is compiled for.
TARGET = "h100"

#: The float bound, in units of the output type's machine epsilon, on
#: max|heron - XLA:CPU| / max|XLA:CPU| over an output's finite elements. f32:
#: numpy's transcendentals are not XLA:CPU's polynomials (a few ulps each, 3.3
#: eps seen after an erf GELU and two dots) and XLA:CPU sums reductions and dots
#: in its own order (2.2 eps seen in an MLP's gradients): 16 leaves room for
#: both, relative to the output's largest magnitude because a cancelling sum
#: has no relative bound of its own. bf16 and f16 programs compute in f32 (or
#: round each op's result): one rounding of the result may differ, 0.54 eps seen.
FLOAT_ULPS = {
    np.dtype(np.float32): 16,
    np.dtype(np.float64): 16,
    np.dtype(ml_dtypes.bfloat16): 2,
    np.dtype(np.float16): 2,
}


#: How much wider the float bound is for a program whose module calls the host's LAPACK
#: (jax's cuSOLVER targets, which heron computes with scipy's LAPACK as jaxlib's CPU
#: kernels do). Its XLA:CPU outputs were made on one machine, and OpenBLAS picks its
#: kernels by CPU: optax's Gaussian-process Adam step is 10.4 eps from them with the
#: SkylakeX kernels and 16.6 with the Haswell and Zen ones (an AMD EPYC), its Cholesky
#: factor feeding an Adam update.
HOST_LAPACK_FACTOR = 2
#: The custom-call targets that make a program's outputs depend on the host's LAPACK.
_HOST_LAPACK = re.compile(r'custom_call_target="(cusolver_|lapack_)')


def assert_close(
    got: np.ndarray,
    expected: np.ndarray,
    label: str,
    arithmetic: np.dtype | None = None,
    factor: float = 1,
) -> None:
    """Equal dtype and shape; bitwise for integers and pred, FLOAT_ULPS for floats (and for
    each part of a complex number, relative to the largest part): of the
    output's type, or of ``arithmetic``, the narrower float type the output was computed
    through, when that bound is the wider one."""
    assert got.dtype == expected.dtype and got.shape == expected.shape, (
        f"{label}: {got.dtype}{list(got.shape)} against XLA:CPU's"
        f" {expected.dtype}{list(expected.shape)}"
    )
    if expected.dtype.kind == "c":  # each part within its float type's bound
        part = np.dtype(np.float32 if expected.dtype == np.complex64 else np.float64)
        parts = [np.ascontiguousarray(a).view(part) for a in (got, expected)]
        assert_close(*parts, label, arithmetic, factor)
        return
    if expected.dtype not in FLOAT_ULPS:
        assert np.array_equal(got, expected), f"{label}: differs from XLA:CPU (bitwise)"
        return
    g, e = got.astype(np.float64), expected.astype(np.float64)
    finite = np.isfinite(e)
    special_equal = (g[~finite] == e[~finite]) | (np.isnan(g[~finite]) & np.isnan(e[~finite]))
    assert special_equal.all(), f"{label}: an inf or NaN of XLA:CPU's is not heron's"
    if not finite.any():
        return
    kind = expected.dtype
    if arithmetic is not None and _ulp_bound(arithmetic) > _ulp_bound(kind):
        kind = arithmetic
    eps = float(ml_dtypes.finfo(kind).eps)
    scale = float(np.max(np.abs(e[finite])))
    error = float(np.max(np.abs(g[finite] - e[finite])))
    ulps = FLOAT_ULPS[kind] * factor
    bound = ulps * eps * scale
    assert error <= bound, (
        f"{label}: max error {error:.3g} > {ulps:g} {kind} eps x max|XLA:CPU|"
        f" = {bound:.3g} ({error / (eps * scale) if scale else float('inf'):.1f} eps)"
    )


def _ulp_bound(dtype: np.dtype) -> float:
    """FLOAT_ULPS of ``dtype`` in units of 1 (its ulps times its epsilon)."""
    return FLOAT_ULPS[np.dtype(dtype)] * float(ml_dtypes.finfo(dtype).eps)


#: Programs whose float outputs are computed through a narrower float type than theirs,
#: by ``corpus/name``: (that type, why). Their outputs are compared within that type's
#: bound: XLA:CPU may keep a bf16 intermediate in f32 (XLA's excess precision) where
#: heron rounds it to bf16, so an f32 result of bf16 arithmetic carries a difference of
#: bf16 roundings (an ulp of bf16 in a gradient element becomes 0.4% of its Adam moment).
NARROW_ARITHMETIC: dict[str, tuple[np.dtype, str]] = {
    "models/flax_mixed_precision_adam_step": (
        np.dtype(ml_dtypes.bfloat16),
        "f32 master weights, moments and loss from a bf16 forward and backward pass",
    ),
    "models/flax_bf16_attention_adamw_step": (
        np.dtype(ml_dtypes.bfloat16),
        "f32 parameters, AdamW moments and loss from a bf16 attention's forward and backward"
        " pass (whose fused call also computes dp in f32 where jax rounds it to bf16)",
    ),
}


# -- the known failures --------------------------------------------------------------------


#: How a wrong result reads: heron run --check's verdict, or assert_close's.
WRONG_RESULTS = r"DISAGREE|max error|differs from XLA:CPU|inf or NaN"


@attrs.frozen
class KnownFailure:
    """How a corpus program fails today, and why."""

    #: The issue and the cause, for the reader and the test report.
    reason: str
    #: For a program heron refuses (compiling it raises UnsupportedError): a regular
    #: expression of the refusal's message. None for one that compiles and runs and
    #: gives wrong results.
    refusal: str | None = None

    @property
    def refused(self) -> bool:
        return self.refusal is not None

    @property
    def message(self) -> str:
        """What the failure's message must match (re.search), so that a program failing
        another way is not taken for this failure."""
        return self.refusal if self.refusal is not None else WRONG_RESULTS


KNOWN_FAILURES: dict[str, KnownFailure] = {
    # Empty since issue 26's fixes: the recurrent models fed a batch/time-swapped
    # sequence (a while operand laid out otherwise than its body parameter: layout
    # assignment's forwarded-layout agreement) and the CNN training steps (the weight
    # gradient's im2col concatenate: XLA's fusion budget rule, one slice per output
    # position) now equal XLA:CPU.
}


#: What a test exercises: ``compile``, an executable (its thunks, buffers, kernels);
#: ``results``, the compiled program's outputs against XLA:CPU's.
Stage = Literal["compile", "results"]


def expected_failure(program: CorpusProgram, stage: Stage) -> KnownFailure | None:
    """The known failure a test of ``stage`` meets on ``program``, if any: ``compile``
    tests meet refusals, ``results`` tests every known failure (tests of the files, the
    evaluator and XLA's facts meet none: they do not use heron's compiled path)."""
    failure = KNOWN_FAILURES.get(program.id)
    if failure is None or (stage == "compile" and not failure.refused):
        return None
    return failure


@contextlib.contextmanager
def expect_known_failure(program: CorpusProgram, stage: Stage) -> Iterator[None]:
    """Around what a test of ``stage`` checks: for a program of :data:`KNOWN_FAILURES`,
    require that it fails as recorded (an AssertionError or UnsupportedError whose
    message matches; the test then reports xfail); for any other program, nothing. A
    known failure that no longer fails fails the test, naming the row to remove."""
    from heron.hlo.errors import UnsupportedError

    failure = expected_failure(program, stage)
    if failure is None:
        yield
        return
    try:
        yield
    except (AssertionError, UnsupportedError) as raised:
        if not re.search(failure.message, str(raised)):
            raise AssertionError(
                f"{program.id} fails, but not as KNOWN_FAILURES says ({failure.message!r}):"
                f" {raised}"
            ) from raised
    else:
        raise AssertionError(
            f"{program.id} now passes: remove it from KNOWN_FAILURES ({failure.reason})"
        )
    import pytest

    pytest.xfail(f"{failure.reason}: fails as recorded")


# -- the corpora -----------------------------------------------------------------------------


@functools.cache
def index(corpus: str) -> dict[str, Any]:
    """The corpus's ``index.json``: per program its description, tags, element types."""
    return json.loads((ROOT / corpus / "index.json").read_text())


@attrs.frozen
class CorpusProgram:
    """One program of a corpus: where its files are and how to read them."""

    corpus: str
    name: str

    @property
    def id(self) -> str:
        return f"{self.corpus}/{self.name}"

    @property
    def folder(self) -> Path:
        return ROOT / self.corpus / self.name

    @property
    def entry(self) -> dict[str, Any]:
        """The program's row of the corpus's index.json."""
        (entry,) = [e for e in index(self.corpus)["programs"] if e["name"] == self.name]
        return entry

    def module(self) -> Module:
        """``module.hlo``, parsed and verified (a fresh module: passes may change it)."""
        from heron.hlo.parser import parse_module_file
        from heron.hlo.verifier import verify_module

        module = parse_module_file(self.folder / "module.hlo")
        verify_module(module)
        return module

    def inputs(self, module: Module) -> list[np.ndarray]:
        """``inputs.npz`` in the entry's parameter order, each of its parameter's type."""
        from heron.hlo.npz_io import load_inputs

        parameters = module.entry.parameters
        return load_inputs(
            self.folder / "inputs.npz", [p.shape for p in parameters], [p.name for p in parameters]
        )

    def expected(self) -> list[np.ndarray]:
        """XLA:CPU's outputs (``outputs.npz``)."""
        from heron.hlo.npz_io import load_outputs

        return load_outputs(self.folder / "outputs.npz")

    def xla_facts(self) -> dict[str, Any]:
        return json.loads((self.folder / "xla_gpu.json").read_text())

    def assert_outputs(self, got: Sequence[np.ndarray], where: str) -> None:
        """``got`` (the program's flattened results, from ``where``) equal XLA:CPU's
        outputs under :func:`assert_close`, with the program's NARROW_ARITHMETIC, and
        HOST_LAPACK_FACTOR where its module calls the host's LAPACK."""
        expected = self.expected()
        assert len(got) == len(expected), f"{self.id}: {len(got)} outputs, XLA:CPU {len(expected)}"
        arithmetic = NARROW_ARITHMETIC.get(self.id, (None, ""))[0]
        text = (self.folder / "module.hlo").read_text()
        factor = HOST_LAPACK_FACTOR if _HOST_LAPACK.search(text) else 1
        for i, (g, e) in enumerate(zip(got, expected, strict=True)):
            label = f"{self.id} out{i} ({where})"
            assert_close(np.asarray(g), np.asarray(e), label, arithmetic, factor)


def corpus_programs(corpus: str | None = None) -> list[CorpusProgram]:
    """Every program of ``corpus`` (of every corpus when None), in index order."""
    corpora = CORPORA if corpus is None else (corpus,)
    return [CorpusProgram(c, e["name"]) for c in corpora for e in index(c)["programs"]]


def parameters(corpus: str | None = None) -> list[Any]:
    """Every program of ``corpus`` (of both when None) as a pytest parameter, its id
    ``corpus/name``."""
    import pytest

    return [pytest.param(program, id=program.id) for program in corpus_programs(corpus)]


def kernel_compiler():
    """``compile_fusion`` with the installed emitters and this tree's GEMM emitter (the
    environment's entry points may predate the plugin)."""
    import heron.plugins.gemm as gemm_plugin
    from heron.compiler import compile_fusion
    from heron.emitters.registry import EmitterRegistry
    from heron.emitters.selection import default_registry

    installed = [(spec, None) for spec in default_registry().specs if spec.name != "gemm"]
    registry = EmitterRegistry(
        [*installed, *((s, None) for s in gemm_plugin.heron_emitter_specs())]
    )
    return lambda fusion, target, backend, shared=(): compile_fusion(
        fusion, target, backend, emitters=registry, shared=shared
    )


def compile_corpus_program(program: CorpusProgram) -> CompiledExecutable:
    """``program`` compiled into an executable with interpreter kernel images for the h100
    Target, with :func:`kernel_compiler` (what ``heron compile --executable`` does);
    UnsupportedError when heron refuses it."""
    from heron.compiler import Target
    from heron.compiler.executable import compile_program

    return compile_program(
        program.module(), Target.preset(TARGET), ("interpreter",), compiler=kernel_compiler()
    )
