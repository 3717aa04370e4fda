"""Deterministic random arguments that every program in the corpus can take.

Values are chosen to be valid everywhere they might be used: floats in
[-1, 1) (no overflow in exp/log chains, exactly representable, so a value
printed and read back is the same), integers in [0, 8) (small enough to be a
valid index into any dimension the corpus uses, and within the range of
every integer type after clamping), random preds, complex numbers from two
such floats, and ``TOKEN`` for tokens.

``random_arguments`` checks the memory budget (:mod:`heron.hlo.memory_budget`)
before drawing anything: the arguments and the generator's temporaries.
"""

from __future__ import annotations

import functools

import numpy as np

from heron.hlo import memory_budget
from heron.hlo.element_types import ElementType
from heron.hlo.evaluator.common import TOKEN
from heron.hlo.ir import Literal, Module
from heron.hlo.shapes import ArrayShape, Shape, TupleShape

#: Significand bits (without the implicit one) of the wide float types: a value
#: k / 2**bits with |k| <= 2**bits has at most bits+1 significant bits.
_FRACTION_BITS = {
    ElementType.F16: 10,
    ElementType.BF16: 7,
    ElementType.F32: 23,
    ElementType.F64: 52,
}

INTEGER_LIMIT = 8


@functools.cache
def _finite_values_below_one(et: ElementType) -> np.ndarray:
    """Every finite value of an 8-bit-or-narrower float type in [-1, 1)."""
    patterns = np.arange(1 << et.bit_width, dtype=np.uint8)
    values = patterns.view(et.numpy_dtype).astype(np.float64)
    chosen = np.unique(values[np.isfinite(values) & (values >= -1.0) & (values < 1.0)])
    return chosen.astype(et.numpy_dtype)


def _random_floats(et: ElementType, dims: tuple[int, ...], rng: np.random.Generator) -> np.ndarray:
    bits = _FRACTION_BITS.get(et)
    if bits is None:
        return rng.choice(_finite_values_below_one(et), size=dims)
    # k / 2**bits is exact in float32 for every type but f64 (|k| <= 2**23).
    wide, exact = (np.int64, np.float64) if et is ElementType.F64 else (np.int32, np.float32)
    k = rng.integers(-(1 << bits), 1 << bits, size=dims, dtype=wide)
    return (k.astype(exact) * exact(2.0**-bits)).astype(et.numpy_dtype)


def _integer_range(et: ElementType) -> tuple[int, int]:
    if et.is_signed_integral:
        return -(1 << (et.bit_width - 1)), (1 << (et.bit_width - 1)) - 1
    return 0, (1 << et.bit_width) - 1


def random_array(shape: ArrayShape, rng: np.random.Generator) -> Literal:
    """One random value of an array (or token) shape."""
    et = shape.element_type
    dims = shape.dims
    if et.is_token:
        return TOKEN
    if et.is_pred:
        return rng.integers(0, 2, size=dims).astype(np.bool_)
    if et.is_integral:
        low, high = _integer_range(et)
        values = rng.integers(0, INTEGER_LIMIT, size=dims, dtype=np.int64)
        return np.clip(values, max(low, 0), high).astype(et.numpy_dtype)
    if et.is_complex:
        part = et.component_type
        real = _random_floats(part, dims, rng)
        imag = _random_floats(part, dims, rng)
        out = np.empty(dims, dtype=et.numpy_dtype)
        out.real = real
        out.imag = imag
        return out
    return np.asarray(_random_floats(et, dims, rng))


def random_literal(shape: Shape, rng: np.random.Generator) -> Literal:
    """A random value of ``shape`` (tuples recursively)."""
    if isinstance(shape, TupleShape):
        return tuple(random_literal(e, rng) for e in shape.elements)
    return random_array(shape, rng)


#: Bytes per element the generator holds beside the result while drawing one
#: array (int64 draws, or int32/int64 numerators and their float conversion).
_TEMPORARY_BYTES_PER_ELEMENT = 16


def random_arguments_bytes(module: Module) -> int:
    """Host bytes ``random_arguments`` needs at its peak: every argument, plus temporaries."""
    leaves = [
        leaf
        for p in module.entry.parameters
        for leaf in p.shape.leaves()
        if isinstance(leaf, ArrayShape) and not leaf.is_token
    ]
    if not leaves:
        return 0
    total = sum(leaf.num_elements * leaf.element_type.byte_width for leaf in leaves)
    largest = max(leaf.num_elements for leaf in leaves)
    return total + largest * _TEMPORARY_BYTES_PER_ELEMENT


def random_arguments(module: Module, seed: int = 0) -> list[Literal]:
    """Random arguments for ``module``'s entry, one per parameter, deterministic in ``seed``.

    MemoryBudgetError (before anything is drawn) if they do not fit the memory budget.
    """
    memory_budget.check(
        random_arguments_bytes(module),
        f"random arguments for the {len(module.entry.parameters)} parameter(s) of"
        f" '{module.entry.name}'",
    )
    rng = np.random.default_rng(seed)
    return [random_literal(p.shape, rng) for p in module.entry.parameters]
