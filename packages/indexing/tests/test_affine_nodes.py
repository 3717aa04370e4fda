"""Affine expression nodes are hash-consed values: one object per expression, a hash
computed once and the same in every process, immutable, and equal by structure even
when the intern table was reset between two of them."""

from __future__ import annotations

import copy
import os
import pickle
import subprocess
import sys

import numpy as np
import pytest

from heron.indexing import (
    IndexingError,
    IndexingMap,
    forget_memos,
    parse_indexing_map,
    simplify,
)
from heron.indexing.affine import Binary, BinaryKind, Constant, Dim, Symbol, forget_interned
from heron.indexing.simplifier import _simplifier_over


def _expression():
    return (Dim(0) * 4 + Symbol(1)) % 1024 + Dim(1).ceildiv(3)


def test_an_expression_built_twice_is_one_object():
    assert _expression() is _expression()
    assert Binary(BinaryKind.ADD, Dim(0), Constant(1)) is Dim(0) + 1


def test_leaves_of_different_kinds_differ():
    assert len({Dim(0), Symbol(0), Constant(0)}) == 3
    assert Dim(0) != Symbol(0)
    assert Dim(0) != 0  # an expression is not an int
    assert Constant(3) == Constant(np.int64(3))
    assert type(Constant(np.int64(3)).value) is int
    assert Constant(True).value == 1 and type(Constant(True).value) is int


def test_a_node_built_after_a_reset_equals_the_one_before():
    before = _expression()
    forget_interned()
    after = _expression()
    assert after is not before
    assert after == before and hash(after) == hash(before)
    assert {before: "found"}[after] == "found"
    assert after + 1 == before + 1
    assert (after + 1) != (before + 2)


def test_pickle_and_copy_give_the_interned_node():
    expr = _expression()
    assert pickle.loads(pickle.dumps(expr)) is expr
    assert copy.deepcopy(expr) is expr
    assert copy.copy(expr) is expr
    indexing_map = IndexingMap.for_shape([4, 8], [expr], range_sizes=[4, 4])
    assert pickle.loads(pickle.dumps(indexing_map)) == indexing_map


def test_nodes_are_immutable():
    expr = Dim(0) + 1
    with pytest.raises(AttributeError, match="immutable"):
        expr.lhs = Dim(1)  # type: ignore[misc]
    with pytest.raises(AttributeError, match="immutable"):
        del Constant(2).value  # type: ignore[misc]


def test_a_binary_node_needs_expressions():
    with pytest.raises(TypeError, match="not affine expressions"):
        Binary(BinaryKind.ADD, Dim(0), 1)  # type: ignore[arg-type]


def test_the_hash_is_the_same_in_every_process():
    """Ints only, no str or enum hash (randomised per process): sets of expressions
    iterate in one order everywhere, so a compile's output does not depend on the seed."""
    code = (
        "from heron.indexing.affine import Dim, Symbol;"
        "print(hash((Dim(0) * 4 + Symbol(1)) % 1024 + Dim(1).ceildiv(3)))"
    )
    hashes = {
        subprocess.run(
            [sys.executable, "-c", code],
            env={**os.environ, "PYTHONHASHSEED": seed},
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        for seed in ("1", "2")
    }
    assert hashes == {str(hash(_expression()))}


def test_the_order_key_sorts_compound_terms_then_dims_then_symbols_then_constants():
    terms = [Constant(2), Symbol(0), Dim(1), Dim(0), Dim(0) * Dim(1)]
    ordered = sorted(terms, key=lambda t: t.order_key)
    assert ordered == [Dim(0) * Dim(1), Dim(0), Dim(1), Symbol(0), Constant(2)]


def test_maps_over_one_domain_share_one_simplifier_and_give_what_a_cold_one_gives():
    texts = [
        f"(d0, d1) -> (((d0 floordiv 4 + d1 * 32) mod 5) * 8 + {k}),"
        " domain: d0 in [0, 127], d1 in [0, 1], d0 + d1 * 128 in [0, 199]"
        for k in range(4)
    ]
    forget_memos()
    shared = [simplify(parse_indexing_map(text)) for text in texts]
    assert _simplifier_over.cache_info().hits > 0
    cold = []
    for text in texts:
        forget_memos()
        cold.append(simplify(parse_indexing_map(text)))
    assert shared == cold


def test_a_node_knows_the_highest_dimension_and_symbol_it_uses():
    expr = (Dim(2) * 4 + Symbol(1)) % 1024 + Dim(0)
    assert (expr.max_dim, expr.max_symbol) == (2, 1)
    assert (Constant(7).max_dim, Constant(7).max_symbol) == (-1, -1)
    with pytest.raises(IndexingError, match="uses d2 but the map has 2 dimension"):
        IndexingMap.for_shape([4, 8], [expr], range_sizes=[4, 4])
    with pytest.raises(IndexingError, match="is not an affine expression"):
        IndexingMap.for_shape([4], [3])  # type: ignore[list-item]
