"""Which dimensions of a tensor, reached through reshapes and transposes, are whole
dimensions of another: the tensor a library call can read (or write) through strides.

A library that takes a tensor with a stride per dimension (cuDNN's attention)
can read ``transpose(x)`` from ``x`` itself, with no copy. Programs reach the
tensor a library wants through longer chains: jax's grouped-query attention
splits the heads of ``q [B, T, N, D]`` into ``[B, T, K, G, D]``, transposes,
merges ``T`` and ``G`` into one dimension for its dot, and heron, to hand
cuDNN ``q [B, N, T, D]``, splits and merges them back. Whether the end is a
permutation of the start cannot be seen one reshape at a time; it can by
following each dimension as a list of *factors* of the start's dimensions.

A factor is ``(source dimension, size, stride)``: the part of a source
dimension whose index is ``(i // stride) % size``. A dimension is its factors,
major first (size-1 dimensions have none). Transposes permute dimensions;
reshapes regroup the stream of factors, splitting a factor where a new
dimension ends inside it. A dimension is *whole* when its factors, joined where
they are adjacent pieces of one source dimension, are that entire source
dimension: then the end is the start read with the start's own strides.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

__all__ = [
    "Dims",
    "Factor",
    "identity",
    "normalised",
    "permutation_of",
    "reshaped",
    "transposed",
]

#: (source dimension, size, stride within the source dimension)
Factor = tuple[int, int, int]
#: Per dimension, its factors, major first.
Dims = tuple[tuple[Factor, ...], ...]


def identity(sizes: Sequence[int]) -> Dims:
    """The dimensions of a tensor of ``sizes`` as factors of itself."""
    return tuple(((d, size, 1),) if size != 1 else () for d, size in enumerate(sizes))


def transposed(dims: Dims, permutation: Sequence[int]) -> Dims:
    """``transpose(x, dimensions=permutation)``: dimension i is ``x``'s ``permutation[i]``."""
    return tuple(dims[p] for p in permutation)


def reshaped(dims: Dims, sizes: Sequence[int]) -> Dims | None:
    """``reshape(x, sizes)`` (row-major regrouping); None where a new dimension would end
    inside a factor that does not divide there."""
    stream = [factor for dim in dims for factor in dim]
    result: list[tuple[Factor, ...]] = []
    for size in sizes:
        taken: list[Factor] = []
        remaining = size
        while remaining > 1:
            if not stream:
                return None
            source, length, stride = stream.pop(0)
            if length <= remaining:
                if remaining % length:
                    return None
                taken.append((source, length, stride))
                remaining //= length
                continue
            if length % remaining:
                return None
            # split: the major part ends this dimension, the minor part starts the next
            minor = length // remaining
            taken.append((source, remaining, stride * minor))
            stream.insert(0, (source, minor, stride))
            remaining = 1
        result.append(tuple(taken))
    if stream or math.prod(sizes) != math.prod(f[1] for d in dims for f in d):
        return None
    return tuple(result)


def _joined(factors: tuple[Factor, ...]) -> tuple[Factor, ...]:
    """Adjacent factors of one source dimension, major then the minor just below it, as one."""
    out: list[Factor] = []
    for source, size, stride in factors:
        if out and out[-1][0] == source and out[-1][2] == size * stride:
            major = out.pop()
            out.append((source, major[1] * size, stride))
        else:
            out.append((source, size, stride))
    return tuple(out)


def normalised(dims: Dims) -> Dims:
    """``dims`` with each dimension's adjacent pieces of one source dimension joined: two
    views of one source read the same elements in the same order exactly when their
    normalised factors are equal."""
    return tuple(_joined(factors) for factors in dims)


def permutation_of(dims: Dims, source_sizes: Sequence[int]) -> tuple[int, ...] | None:
    """Where each of ``dims`` is among the source's dimensions, when every one is a whole
    source dimension and each source dimension is used once (size-1 dimensions paired
    in order); None otherwise. The result ``order`` makes the tensor
    ``transpose(source, dimensions=order)``."""
    if len(dims) != len(source_sizes):
        return None
    order: list[int | None] = []
    for factors in dims:
        joined = _joined(factors)
        if not joined:
            order.append(None)
            continue
        if len(joined) != 1:
            return None
        source, size, stride = joined[0]
        if stride != 1 or size != source_sizes[source]:
            return None
        order.append(source)
    unit_sources = iter(d for d, size in enumerate(source_sizes) if size == 1)
    filled = [d if d is not None else next(unit_sources, None) for d in order]
    if None in filled or sorted(filled) != list(range(len(source_sizes))):
        return None
    return tuple(d for d in filled if d is not None)
