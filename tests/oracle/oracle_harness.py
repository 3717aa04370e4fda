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
"""

from __future__ import annotations

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
    with an absolute error relative to the magnitude of the inputs.
    """

    ulps: float = 0
    atol: float = 0.0


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
        if tol.ulps or tol.atol:
            ulp = _ulp_of(got.dtype, w)
            near = np.abs(g - w) <= tol.ulps * ulp + tol.atol
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
