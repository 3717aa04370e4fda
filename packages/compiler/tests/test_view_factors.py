"""heron.compiler.view_factors: which reshape/transpose chains are a permutation."""

from __future__ import annotations

import numpy as np
import pytest

from heron.compiler.view_factors import identity, permutation_of, reshaped, transposed


def _numpy_chain(sizes, steps):
    x = np.arange(int(np.prod(sizes))).reshape(sizes)
    for kind, argument in steps:
        x = x.reshape(argument) if kind == "reshape" else x.transpose(argument)
    return x


def _factor_chain(sizes, steps):
    dims = identity(sizes)
    for kind, argument in steps:
        dims = reshaped(dims, argument) if kind == "reshape" else transposed(dims, argument)
        if dims is None:
            return None
    return dims


# jax's grouped-query q [B, T, N, D] (N = K x G), as its dot reads it and back to cuDNN's order
GQA = [
    ("reshape", (2, 16, 2, 4, 8)),  # heads split into (K, G)
    ("transpose", (0, 2, 1, 3, 4)),  # [B, K, T, G, D]
    ("reshape", (2, 2, 64, 8)),  # the dot's rows: (T, G) merged
    ("reshape", (2, 2, 16, 4, 8)),  # heron splits them again
    ("transpose", (0, 1, 3, 2, 4)),  # [B, K, G, T, D]
    ("reshape", (2, 8, 16, 8)),  # [B, N, T, D]
]


@pytest.mark.parametrize(
    ("sizes", "steps"),
    [
        ((2, 16, 8, 8), GQA),
        ((2, 3, 4, 5), [("transpose", (0, 2, 1, 3))]),
        ((2, 1, 4, 5), [("reshape", (2, 4, 5)), ("reshape", (2, 4, 1, 5))]),
        ((6, 4), [("reshape", (2, 3, 4)), ("reshape", (6, 4))]),
    ],
)
def test_the_permutation_found_is_what_the_chain_computes(sizes, steps):
    dims = _factor_chain(sizes, steps)
    order = permutation_of(dims, sizes)
    assert order is not None
    end = _numpy_chain(sizes, steps)
    assert np.array_equal(end, np.arange(end.size).reshape(sizes).transpose(order))


def test_a_merge_of_parts_in_another_order_is_no_permutation():
    # [B, T, N, D] with N split, G moved in front of K, merged again: heads reordered
    steps = [
        ("reshape", (2, 16, 2, 4, 8)),
        ("transpose", (0, 3, 2, 1, 4)),
        ("reshape", (2, 8, 16, 8)),
    ]
    assert permutation_of(_factor_chain((2, 16, 8, 8), steps), (2, 16, 8, 8)) is None
    interleaved = [("reshape", (2, 3, 4)), ("transpose", (1, 0, 2)), ("reshape", (6, 4))]
    assert permutation_of(_factor_chain((6, 4), interleaved), (6, 4)) is None


def test_a_reshape_that_cuts_a_dimension_unevenly_is_refused():
    assert reshaped(identity((6, 4)), (4, 6)) is None
    assert reshaped(identity((6, 4)), (3, 8)) is not None  # 6 = 3 x 2, then 2 x 4
