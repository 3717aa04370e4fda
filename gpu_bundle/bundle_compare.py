"""How the bundle compares a device's outputs with a reference: numpy and ml_dtypes only.

The rule is the program corpus's (``heron_test_support.programs.assert_close``,
which the bundle cannot import: test aids are never shipped): integers and pred
bit for bit; floats within ``FLOAT_ULPS`` machine epsilons of the output type
times the reference's largest finite magnitude (complex numbers: their real and
imaginary parts so, as floats of the component type) (a cancelling sum has no relative
bound of its own), infinities and NaNs where the reference has them. Beside the
verdict each comparison says how many elements are bit-identical and the worst
error in those epsilons, which is what the report prints for "against heron's
interpreter".
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

#: Bound in epsilons of the output type (see heron_test_support.programs.FLOAT_ULPS).
FLOAT_ULPS = {"float32": 16, "float64": 16, "bfloat16": 2, "float16": 2}


def _eps(dtype: np.dtype) -> float:
    import ml_dtypes

    return float(ml_dtypes.finfo(dtype).eps)


def compare(got: np.ndarray, want: np.ndarray, ulps: int | None = None) -> dict[str, Any]:
    """One output against its reference: ``ok`` (within the rule), ``identical`` (bytes),
    ``identical_elements``, ``elements``, ``error_eps`` (worst error in epsilons x scale)."""
    got, want = np.asarray(got), np.asarray(want)
    if want.dtype.kind == "c" and got.dtype == want.dtype and got.shape == want.shape:
        # Complex: the real and imaginary parts, each a float of the component type (an FFT's
        # sums run in the library's order, as any float sum's).
        parts = compare(_parts(got), _parts(want), ulps)
        parts["elements"] = int(want.size)
        if "identical_elements" in parts:
            same = np.all(_parts(got) == _parts(want), axis=-1) | _same_nan(got, want)
            parts["identical_elements"] = int(same.sum())
        return parts
    result: dict[str, Any] = {"elements": int(want.size)}
    if got.dtype != want.dtype or got.shape != want.shape:
        result.update(
            ok=False,
            identical=False,
            identical_elements=0,
            error_eps=None,
            why=f"{got.dtype}{list(got.shape)} against {want.dtype}{list(want.shape)}",
        )
        return result
    g_bytes = got.reshape(-1).view(np.uint8).reshape(got.size, -1) if got.size else got
    w_bytes = want.reshape(-1).view(np.uint8).reshape(want.size, -1) if want.size else want
    same = np.all(g_bytes == w_bytes, axis=1) if got.size else np.zeros(0, bool)
    result["identical_elements"] = int(same.sum())
    result["identical"] = bool(same.all())
    if str(want.dtype) not in FLOAT_ULPS:
        result.update(ok=result["identical"], error_eps=None if result["identical"] else "bits")
        if not result["ok"]:
            result["why"] = f"{int(got.size - same.sum())} of {got.size} elements differ (bitwise)"
        return result
    g, w = got.astype(np.float64), want.astype(np.float64)
    finite = np.isfinite(w)
    special = (g[~finite] == w[~finite]) | (np.isnan(g[~finite]) & np.isnan(w[~finite]))
    if not special.all():
        result.update(ok=False, error_eps=None, why="an inf or NaN of the reference's differs")
        return result
    if not finite.any():
        result.update(ok=True, error_eps=0.0)
        return result
    eps = _eps(want.dtype)
    scale = float(np.max(np.abs(w[finite])))
    error = float(np.max(np.abs(g[finite] - w[finite])))
    with np.errstate(divide="ignore", invalid="ignore"):
        in_eps = error / (eps * scale) if scale else (0.0 if error == 0 else float("inf"))
    result["error_eps"] = round(in_eps, 3)
    bound = ulps or FLOAT_ULPS[str(want.dtype)]
    result["ok"] = bool(error <= bound * eps * scale)
    if not result["ok"]:
        result["why"] = f"max error {error:.3g} = {in_eps:.1f} eps x max|reference|, over {bound}"
    return result


def _parts(values: np.ndarray) -> np.ndarray:
    """A complex array as floats of its component type, real and imaginary last."""
    component = np.float32 if values.dtype == np.complex64 else np.float64
    return np.ascontiguousarray(values).view(component).reshape(*values.shape, 2)


def _same_nan(got: np.ndarray, want: np.ndarray) -> np.ndarray:
    return np.all(np.isnan(_parts(got)) & np.isnan(_parts(want)), axis=-1)


def compare_all(
    got: Sequence[np.ndarray], want: Sequence[np.ndarray], ulps: int | None = None
) -> dict[str, Any]:
    """Every output: ``ok``, ``identical_outputs`` ("2/3"), the worst ``error_eps``, ``why``.
    ``ulps`` replaces FLOAT_ULPS (a workload whose error grows with its steps says so)."""
    if len(got) != len(want):
        return {"ok": False, "why": f"{len(got)} outputs, the reference has {len(want)}"}
    each = [compare(g, w, ulps) for g, w in zip(got, want, strict=True)]
    errors = [e["error_eps"] for e in each if isinstance(e.get("error_eps"), float)]
    summary: dict[str, Any] = {
        "ok": all(e["ok"] for e in each),
        "identical": all(e["identical"] for e in each),
        "identical_outputs": f"{sum(e['identical'] for e in each)}/{len(each)}",
        "identical_elements": f"{sum(e['identical_elements'] for e in each)}"
        f"/{sum(e['elements'] for e in each)}",
        "worst_error_eps": max(errors) if errors else 0.0,
    }
    why = [f"out{i}: {e['why']}" for i, e in enumerate(each) if not e["ok"]]
    if why:
        summary["why"] = "; ".join(why)
    return summary


def identical(a: Sequence[np.ndarray], b: Sequence[np.ndarray]) -> bool:
    """The same bytes, dtypes and shapes, output by output."""
    return len(a) == len(b) and all(
        x.dtype == y.dtype and x.shape == y.shape and x.tobytes() == y.tobytes()
        for x, y in zip(a, b, strict=True)
    )


def relative_error(got: np.ndarray, want: np.ndarray) -> float | None:
    """max|got - want| / max|want| over finite elements (speed cases against jax on the
    same GPU); for integers the fraction of elements that differ. None when the shapes
    differ."""
    got, want = np.asarray(got), np.asarray(want)
    if got.shape != want.shape:
        return None
    if str(want.dtype) not in FLOAT_ULPS and want.dtype.kind != "f":
        return float(np.mean(got != want)) if want.size else 0.0
    g, w = got.astype(np.float64), want.astype(np.float64)
    finite = np.isfinite(w) & np.isfinite(g)
    if not finite.any():
        return 0.0
    scale = float(np.max(np.abs(w[finite]))) or 1.0
    return float(np.max(np.abs(g[finite] - w[finite]))) / scale
