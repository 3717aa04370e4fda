"""The XLA:CPU oracle: heron's reference evaluator against jax, op by op.

Each test builds a small program with ``jax.lax``, asks jax for its HLO text
(before XLA's optimisations, so the op under test is really in it), parses and
evaluates that text with heron, and compares with what XLA:CPU computes for the
same inputs. The ``xla_oracle`` fixture does all of that for one instance.

Tolerances (``Tolerance``): integers, pred, data movement and exactly rounded
float ops must match bit for bit (NaN matches any NaN); transcendental float
ops may differ by a few ulps of the result type because XLA:CPU uses its own
polynomial approximations, and heron uses numpy's libm.

Two XLA:CPU behaviours are accepted rather than reproduced: it flushes
subnormal float results to zero (so a subnormal from heron matches XLA's
zero of the same sign), and it computes complex products with fused
multiply-adds (complex results get the few-ulp bound).

``run_compiled_oracle`` checks heron's compiled kernels the same way: the
module compiled for the h100 preset and run by the thunk executor on the
interpreter device, against XLA:CPU, exact where the case is exact and
otherwise within the case's bound plus heron's documented one
(``compiled_tolerance``). XLA:CPU also reads subnormal f32, f64 and bf16
inputs as zero; the elements that depend on one are compared with heron's
reference evaluator instead.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Sequence
from typing import Any

import attrs
import jax
import ml_dtypes
import numpy as np

jax.config.update("jax_enable_x64", True)

from heron.hlo.evaluator import evaluate_module, flatten_literal  # noqa: E402
from heron.hlo.parser import parse_module  # noqa: E402
from heron.hlo.printer import print_module  # noqa: E402
from heron.hlo.verifier import verify_module  # noqa: E402


@attrs.frozen
class Tolerance:
    """How far heron may be from XLA: ``ulps`` of the result type, or exact.

    ``atol`` lets results near zero (where ulps are tiny, e.g. sin(pi)) pass
    with an absolute error relative to the magnitude of the inputs; ``rtol`` a
    relative error of XLA's value (heron's reassociation bounds for dots).
    """

    ulps: float = 0
    atol: float = 0.0
    rtol: float = 0.0


EXACT = Tolerance()


def _is_float(dtype: np.dtype) -> bool:
    return dtype.kind == "f" or dtype.name.startswith(("bfloat16", "float"))


def _is_int(dtype: np.dtype) -> bool:
    return dtype.kind in "iu" or dtype.name.startswith(("int", "uint"))


def _ulp_of(dtype: np.dtype, values: np.ndarray) -> np.ndarray:
    """Size of one ulp of ``dtype`` at each value (at least the smallest subnormal)."""
    info = ml_dtypes.finfo(dtype)
    mags = np.abs(values.astype(np.float64))
    exponent = np.floor(np.log2(np.maximum(mags, float(info.smallest_normal))))
    return np.maximum(2.0 ** (exponent - info.nmant), float(info.smallest_subnormal))


def assert_close(got: np.ndarray, want: np.ndarray, tol: Tolerance, what: str) -> None:
    """Compare one output leaf; the message names the first differing index."""
    assert got.shape == want.shape, f"{what}: shape {got.shape} != XLA's {want.shape}"
    assert got.dtype == want.dtype, f"{what}: dtype {got.dtype} != XLA's {want.dtype}"
    if _is_int(got.dtype) or got.dtype == np.bool_:
        bad = got != want
    elif got.dtype.kind == "c":
        for part in (np.real, np.imag):
            assert_close(part(got), part(want), tol, what)
        return
    elif _is_float(got.dtype):
        g = got.astype(np.float64)
        w = want.astype(np.float64)
        both_nan = np.isnan(g) & np.isnan(w)
        smallest_normal = float(ml_dtypes.finfo(got.dtype).smallest_normal)
        flushed = (w == 0) & (np.abs(g) < smallest_normal) & (np.signbit(g) == np.signbit(w))
        same = (g == w) | both_nan | flushed
        if tol.ulps or tol.atol or tol.rtol:
            ulp = _ulp_of(got.dtype, w)
            with np.errstate(invalid="ignore"):  # inf - inf: not near, whatever it gives
                near = np.abs(g - w) <= tol.ulps * ulp + tol.atol + tol.rtol * np.abs(w)
            same |= near & np.isfinite(g) & np.isfinite(w)
        else:
            # Exact: also tell -0 from +0.
            same &= (np.signbit(g) == np.signbit(w)) | both_nan
        bad = ~same
    else:
        bad = got != want
    if np.any(bad):
        index = tuple(int(i) for i in np.argwhere(bad)[0])
        raise AssertionError(
            f"{what}: {int(np.count_nonzero(bad))} of {bad.size} elements differ; first at "
            f"{index}: heron {got[index]!r} vs XLA {want[index]!r} (tolerance {tol})"
        )


@attrs.define
class OracleRun:
    hlo_text: str
    heron: list[np.ndarray]
    xla: list[np.ndarray]


def run_oracle(fn: Callable[..., Any], args: Sequence[Any], tol: Tolerance = EXACT) -> OracleRun:
    """Evaluate ``fn(*args)`` with heron (through its HLO text) and with XLA:CPU."""
    jitted = jax.jit(fn, keep_unused=True)
    hlo_text = jitted.lower(*args).as_text("hlo")
    module = parse_module(hlo_text, source="<jax>")
    verify_module(module)
    # The text heron prints must mean the same program.
    reparsed = parse_module(print_module(module), source="<printed>")
    assert reparsed == module, "print/parse round trip changed the jax module"
    np_args = [np.asarray(a) for a in args]
    heron_out = [np.asarray(x) for x in flatten_literal(evaluate_module(module, np_args))]
    xla_out = [np.asarray(x) for x in jax.tree.leaves(jitted(*args))]
    assert len(heron_out) == len(xla_out), f"{len(heron_out)} outputs vs XLA's {len(xla_out)}"
    for i, (got, want) in enumerate(zip(heron_out, xla_out)):
        try:
            assert_close(got, want, tol, f"output {i}")
        except AssertionError as err:
            raise AssertionError(f"{err}\n--- HLO ---\n{hlo_text}") from None
    return OracleRun(hlo_text, heron_out, xla_out)


def random_array(
    rng: np.random.Generator,
    shape: tuple[int, ...],
    dtype: Any,
    specials: bool = True,
    low: float = -4.0,
    high: float = 4.0,
) -> np.ndarray:
    """Inputs that exercise edge cases: for floats, some NaN/inf/-0/tiny values;
    for integers, the type's extremes and zero mixed with small values."""
    dtype = np.dtype(dtype)
    size = math.prod(shape)
    if dtype == np.bool_:
        return rng.integers(0, 2, size=shape).astype(np.bool_)
    if dtype.kind == "c":
        # Non-finite complex values are implementation-defined across XLA backends.
        parts = [random_array(rng, shape, np.float64, False, low, high) for _ in range(2)]
        return (parts[0] + 1j * parts[1]).astype(dtype)
    if _is_int(dtype):
        info = ml_dtypes.iinfo(dtype)
        small = rng.integers(max(info.min, -9), min(info.max, 9) + 1, size=size)
        if specials and size:
            pool = np.array([info.min, info.max, 0, 1, info.max // 2 + 1, info.min + 1])
            mask = rng.random(size) < 0.25
            small = np.where(mask, rng.choice(pool, size=size), small)
        return small.reshape(shape).astype(dtype)
    values = rng.uniform(low, high, size=size)
    if specials and size:
        finfo = ml_dtypes.finfo(dtype)
        pool = [0.0, -0.0, 1.0, -1.0, 0.5, float(finfo.smallest_normal), float(finfo.max)]
        if finfo.bits > 8 or dtype.name in ("float8_e5m2",):
            pool += [math.inf, -math.inf]
        pool += [math.nan]
        mask = rng.random(size) < 0.2
        values = np.where(mask, rng.choice(np.array(pool), size=size), values)
    return values.reshape(shape).astype(dtype)


# -- heron's compiled kernels against XLA:CPU --------------------------------------------


@functools.lru_cache(maxsize=64)
def _compiled_artefact(hlo_text: str) -> Any:
    """jax's HLO text compiled by heron for the h100 preset with interpreter kernel images
    (what ``heron compile --executable`` does); one compile per program, so that a test
    running one program on several inputs of the same shapes compiles it once."""
    from heron.compiler import Target
    from heron.compiler.executable import compile_program

    module = parse_module(hlo_text, source="<jax>")
    verify_module(module)
    return compile_program(module, Target.preset("h100"), ("interpreter",)).artefact


def compiled_tolerance(module: Any, tol: Tolerance) -> list[Tolerance]:
    """Per output leaf of ``module``'s entry: how far heron's compiled kernels may be
    from XLA:CPU.

    ``tol`` is the case's own tolerance, XLA:CPU's distance from the exact result
    (as :func:`run_oracle` uses it). An exact case stays exact: the compiled kernels
    must give XLA:CPU's bits (NaN-ness and the sign of zero included). Otherwise
    heron's documented bound for the output is added, since each side may be that
    far from the exact value: ``heron.harness.tolerance.output_tolerance``, what
    ``heron check`` allows a kernel against the reference, for the h100 preset: the
    ulps of every approximated op reaching the output (``ACCURACY`` and ``FAST_MATH``
    of ``heron.emitters.math_accuracy``, once per path; one rounding more for
    f16/bf16), and for what a dot reaches (or a regrouped cumulative sum) the
    reassociation bounds, widened for TF32 (the h100 multiplies f32 dots in TF32 at
    default precision: ``heron.hlo.dot_precision.check_tolerance``). A plain
    reduce's reassociation is the caller's ``tol`` (a bound of the instance).
    """
    from heron.compiler import Target
    from heron.harness.tolerance import output_tolerance

    tf32 = Target.preset("h100").tf32
    leaves: list[tuple[Any, Any]] = []  # (instruction, element type) per output leaf

    def walk(inst: Any) -> None:
        if inst.opcode == "tuple":
            for operand in inst.operands:
                walk(operand)
        else:
            leaves.extend((inst, shape.element_type) for shape in inst.shape.leaves())

    walk(module.entry.root_instruction)
    if tol == EXACT:
        return [EXACT] * len(leaves)
    out = []
    for inst, element in leaves:
        documented = output_tolerance(inst, element, tf32=tf32)
        out.append(
            Tolerance(
                ulps=tol.ulps + documented.ulps,
                atol=max(tol.atol, documented.bounds.absolute or 0.0),
                rtol=max(tol.rtol, documented.bounds.relative or 0.0),
            )
        )
    return out


def _at(array: np.ndarray, index: tuple[int, ...], shape: tuple[int, ...]) -> str:
    """``array[index]`` when it has the output's shape (an elementwise operand), else
    the whole array when small."""
    if array.shape == shape:
        return repr(array[index])
    return repr(array) if array.size <= 16 else f"{array.dtype}{list(array.shape)}"


#: The float types whose subnormal inputs XLA:CPU reads as zero: it runs with
#: denormals-are-zero and flush-to-zero set (f64 and f32, and bf16, which it computes in
#: f32, where a bf16 subnormal is still subnormal; an f16 subnormal is a normal f32).
DAZ_TYPES = frozenset({np.dtype(np.float32), np.dtype(np.float64), np.dtype(ml_dtypes.bfloat16)})


def subnormal(array: np.ndarray) -> np.ndarray:
    """Per element: a subnormal of a type in :data:`DAZ_TYPES` (XLA:CPU reads it as 0)."""
    if array.dtype not in DAZ_TYPES:
        return np.zeros(array.shape, np.bool_)
    mags = np.abs(array.astype(np.float64))
    return (mags > 0) & (mags < float(ml_dtypes.finfo(array.dtype).smallest_normal))


def run_compiled_oracle(
    fn: Callable[..., Any],
    args: Sequence[Any],
    tol: Tolerance = EXACT,
    *,
    expected_fn: Callable[..., Any] | None = None,
) -> OracleRun:
    """Compile ``fn`` (its HLO text as jax lowers it) with heron, run the executable on
    the interpreter device, and compare every output with what XLA:CPU computes
    (``jax.jit(fn)(*args)``) within :func:`compiled_tolerance`.

    XLA:CPU reads subnormal inputs as zero (:data:`DAZ_TYPES`), heron's kernels (as
    XLA:GPU's) do not; so an output element whose elementwise operand (an argument of
    the output's shape) is subnormal is compared with heron's reference evaluator's
    value instead, which the evaluator's own oracle checks against XLA:CPU elsewhere.

    ``expected_fn``: another jax function of the same arguments and results whose
    XLA:CPU value is the expected one, where XLA:CPU's own result for ``fn`` is not
    the op's defined result (the caller says why); default ``fn``.

    A failure names the first differing element, its inputs (elementwise operands),
    heron's compiled value, XLA:CPU's and heron's reference evaluator's, so that a
    compiled-path bug (the evaluator agrees with XLA) reads apart from a reference
    one.
    """
    from heron.runtime.core.executor import Executable
    from heron.runtime.interpreter.device import InterpreterDevice

    jitted = jax.jit(fn, keep_unused=True)
    hlo_text = jitted.lower(*args).as_text("hlo")
    module = parse_module(hlo_text, source="<jax>")
    verify_module(module)
    np_args = [np.asarray(a) for a in args]
    artefact = _compiled_artefact(hlo_text)
    compiled = [np.asarray(x) for x in Executable(artefact, InterpreterDevice()).run(np_args)]
    expected = jax.jit(expected_fn or fn, keep_unused=True)(*args)
    leaves = jax.tree_util.tree_flatten_with_path(expected)[0]
    xla_out = [np.asarray(x) for _, x in leaves]
    names = [jax.tree_util.keystr(path) for path, _ in leaves]
    assert len(compiled) == len(xla_out), f"{len(compiled)} outputs vs XLA's {len(xla_out)}"
    tolerances = compiled_tolerance(module, tol)
    reference: list[np.ndarray] = []

    def evaluated() -> list[np.ndarray]:
        if not reference:
            reference.extend(
                np.asarray(x) for x in flatten_literal(evaluate_module(module, np_args))
            )
        return reference

    for i, (got, want) in enumerate(zip(compiled, xla_out)):
        flushed = np.zeros(want.shape, np.bool_)
        for a in np_args:
            if a.shape == want.shape:
                flushed |= subnormal(a)
        if flushed.any():
            want = np.where(flushed, evaluated()[i], want)
        try:
            assert_close(got, want, tolerances[i], f"output {i}{names[i]} (compiled)")
        except AssertionError as err:
            bad = _first_bad(got, want, tolerances[i])
            inputs = ", ".join(_at(a, bad, want.shape) for a in np_args)
            raise AssertionError(
                f"{err}\n  inputs at {bad}: {inputs}\n  reference evaluator: "
                f"{evaluated()[i][bad]!r}\n--- HLO ---\n{hlo_text}"
            ) from None
    return OracleRun(hlo_text, compiled, xla_out)


def _first_bad(got: np.ndarray, want: np.ndarray, tol: Tolerance) -> tuple[int, ...]:
    """The index :func:`assert_close` reports first."""
    for index in np.ndindex(*want.shape):
        try:
            assert_close(got[index][None], want[index][None], tol, "")
        except AssertionError:
            return tuple(int(i) for i in index)
    return ()
