"""Inputs for top-k tests: values with many ties, NaN of both signs, signed zeros and
infinities (the total order's corners), in the element types the top-k kernels take."""

from __future__ import annotations

import ml_dtypes
import numpy as np

__all__ = ["FLOAT_EDGES", "NUMPY", "tie_values"]

NUMPY = {
    "f32": np.float32,
    "bf16": ml_dtypes.bfloat16,
    "f64": np.float64,
    "s32": np.int32,
    "u8": np.uint8,
}
FLOAT_EDGES = [np.nan, -np.nan, np.inf, -np.inf, 0.0, -0.0, 1.0, -1.0, 2.5, -2.5]


def tie_values(dtype: str, count: int, rng: np.random.Generator) -> np.ndarray:
    """``count`` values of ``dtype`` (a key of ``NUMPY``) drawn from a small pool: many
    ties, and for floats NaN of both signs, signed zeros and infinities."""
    if dtype in ("f32", "bf16", "f64"):
        pool = np.array(FLOAT_EDGES + list(rng.standard_normal(6)), np.float64)
        return rng.choice(pool, count).astype(NUMPY[dtype])
    if dtype == "s32":
        return rng.integers(-6, 6, count).astype(np.int32)
    return rng.integers(0, 256, count).astype(np.uint8)
