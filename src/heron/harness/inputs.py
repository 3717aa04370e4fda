"""Random inputs for checking a kernel against the reference evaluator.

Two kinds of input set, because they find different bugs:

* edge values (:func:`edge_array`): zeros of both signs, infinities, NaN,
  subnormals, the largest finite values, integer minima and maxima, mixed
  with random values of any magnitude. They find wrong rounding, NaN and
  overflow handling, and indices out of range (the clamping of gather and
  dynamic-update-slice). Narrow floats (fp8, f4) get every bit pattern.
* moderate values (:func:`moderate_array`, the evaluator's own
  ``random_array``: floats in [-1, 1), integers in [0, 8)), under which
  reductions, dots and chains of transcendental ops stay finite, so that a
  wrong result is not hidden behind an infinity or a NaN.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import ml_dtypes
import numpy as np

from heron.hlo import ElementType
from heron.hlo.evaluator.random_inputs import random_array
from heron.hlo.shapes import ArrayShape

__all__ = [
    "GENERATION_BYTES_PER_ELEMENT",
    "INPUT_SET_NAMES",
    "edge_array",
    "float_values",
    "input_sets",
    "integer_values",
    "moderate_array",
]

#: Share of the edge-value elements that take one of the listed edge values.
FLOAT_EDGE_SHARE = 0.15
INTEGER_EDGE_SHARE = 0.1
#: Host bytes per element the generators hold at their peak while drawing one
#: array, the array included (measured with tracemalloc: 40 for f32/bf16 edge
#: values, 48 for complex ones, at most 24 for the rest).
GENERATION_BYTES_PER_ELEMENT = 48
#: The names of the two input sets, in the order :func:`input_sets` makes them.
INPUT_SET_NAMES = ("edge inputs", "moderate inputs")


def float_values(element: ElementType, count: int, rng: np.random.Generator) -> np.ndarray:
    """``count`` floats of ``element``: half in [-1, 1), half of any magnitude, some edges.

    Types of 8 bits or fewer take every bit pattern with equal chance (NaNs
    and infinities included), which covers their whole range in a few
    hundred elements.
    """
    dtype = element.numpy_dtype
    if element.bit_width <= 8:
        return rng.integers(0, 1 << element.bit_width, count).astype(np.uint8).view(dtype)
    info = ml_dtypes.finfo(dtype)
    edges = np.array(
        [0.0, -0.0, np.inf, -np.inf, np.nan, 1.0, -1.0, 0.5, float(info.max), -float(info.max)]
        + [float(info.tiny), -float(info.tiny), float(info.smallest_subnormal), 2.0, -2.0],
        np.float64,
    )
    unit = rng.uniform(-1.0, 1.0, count)
    exponents = rng.uniform(math.log2(float(info.tiny)), math.log2(float(info.max)), count)
    wide = np.exp2(exponents) * rng.choice([-1.0, 1.0], count)
    with np.errstate(over="ignore"):
        values = np.where(rng.random(count) < 0.5, unit, wide).astype(dtype)
    chosen = rng.random(count) < FLOAT_EDGE_SHARE
    values[chosen] = rng.choice(edges, int(chosen.sum())).astype(dtype)
    return values


def _integer_range(element: ElementType) -> tuple[int, int]:
    width = element.bit_width
    if element.is_signed_integral:
        return -(1 << (width - 1)), (1 << (width - 1)) - 1
    return 0, (1 << width) - 1


def integer_values(element: ElementType, count: int, rng: np.random.Generator) -> np.ndarray:
    """``count`` integers of ``element``: the whole range, small values (valid indices), edges."""
    low, high = _integer_range(element)
    if element.bit_width == 64 and not element.is_signed_integral:
        # Draw the top bit separately: numpy's int64 cannot hold u64's maximum.
        values = rng.integers(0, 1 << 63, count, dtype=np.uint64, endpoint=False)
        values |= rng.integers(0, 2, count).astype(np.uint64) << np.uint64(63)
        small = rng.random(count) < 0.5
        values[small] = rng.integers(0, 8, int(small.sum()), endpoint=True).astype(np.uint64)
        edges = np.array([0, high, 1], np.uint64)
        chosen = rng.random(count) < INTEGER_EDGE_SHARE
        values[chosen] = rng.choice(edges, int(chosen.sum()))
        return values
    values = rng.integers(low, high, count, dtype=np.int64, endpoint=True)
    small = rng.random(count) < 0.5
    values[small] = rng.integers(max(low, -2), min(high, 8), int(small.sum()), endpoint=True)
    edges = np.array([low, high, 0, min(high, 1), max(low, -1)], np.int64)
    chosen = rng.random(count) < INTEGER_EDGE_SHARE
    values[chosen] = rng.choice(edges, int(chosen.sum()))
    return values.astype(element.numpy_dtype)


def edge_array(shape: ArrayShape, rng: np.random.Generator) -> np.ndarray:
    """A logical array of ``shape`` with edge values (see the module docstring)."""
    element = shape.element_type
    count = shape.num_elements
    if element is ElementType.PRED:
        flat = rng.integers(0, 2, count).astype(bool)
    elif element.is_complex:
        part = element.component_type
        flat = np.empty(count, element.numpy_dtype)
        flat.real = float_values(part, count, rng)
        flat.imag = float_values(part, count, rng)
    elif element.is_floating:
        flat = float_values(element, count, rng)
    else:
        flat = integer_values(element, count, rng)
    return np.asarray(flat.reshape(shape.dims), element.numpy_dtype)


def moderate_array(shape: ArrayShape, rng: np.random.Generator) -> np.ndarray:
    """A logical array of ``shape`` with the evaluator's moderate values."""
    return np.asarray(random_array(shape, rng), shape.element_type.numpy_dtype)


def input_sets(
    shapes: Sequence[ArrayShape], rng: np.random.Generator
) -> dict[str, list[np.ndarray]]:
    """The two input sets for a kernel taking ``shapes``, by name (edge first)."""
    edge = [edge_array(shape, rng) for shape in shapes]
    moderate = [moderate_array(shape, rng) for shape in shapes]
    return dict(zip(INPUT_SET_NAMES, (edge, moderate), strict=True))
