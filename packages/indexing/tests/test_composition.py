"""Composition: second ∘ first, checked point by point on random maps."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from heron.indexing.affine import Constant, Dim, Symbol, add, floordiv, mod, mul
from heron.indexing.composition import compose
from heron.indexing.indexing_map import IndexingError, IndexingMap, Variable
from heron.indexing.interval import Interval
from heron.indexing.parser import parse_indexing_map


def test_transpose_then_slice():
    transpose = parse_indexing_map("(d0, d1) -> (d1, d0), domain: d0 in [0, 39], d1 in [0, 19]")
    slice_ = parse_indexing_map(
        "(d0, d1) -> (d0 + 2, d1 * 2), domain: d0 in [0, 19], d1 in [0, 39]"
    )
    c = compose(transpose, slice_)
    assert c.format() == "(d0, d1) -> (d1 + 2, d0 * 2), domain: d0 in [0, 39], d1 in [0, 19]"


def test_symbols_are_reindexed_range_vars_first():
    first = parse_indexing_map(
        "(d0)[s0]{rt0} -> (d0 + s0 + rt0), domain: d0 in [0, 9], s0 in [0, 1], rt0 in [0, 2]"
    )
    second = parse_indexing_map(
        "(d0)[s0]{rt0} -> (d0 * 10 + s0 + rt0 * 100), "
        "domain: d0 in [0, 20], s0 in [0, 3], rt0 in [0, 4]"
    )
    c = compose(first, second)
    assert [v.bounds for v in c.range_vars] == [Interval(0, 1), Interval(0, 3)]
    assert [v.bounds for v in c.runtime_vars] == [Interval(0, 2), Interval(0, 4)]
    # Names stay unique so that the text form still parses.
    assert len({v.name for v in (*c.dimensions, *c.symbols)}) == 5
    assert parse_indexing_map(c.format()) == c
    assert c.evaluate((3,), (1, 2, 1, 3)) == ((3 + 1 + 1) * 10 + 2 + 300,)
    # second's bound on its d0 (<= 20) is implied by first's ranges, so no constraint remains.
    assert c.constraints == ()


def test_second_dimension_bounds_become_constraints():
    first = parse_indexing_map("(d0) -> (d0 - 3), domain: d0 in [0, 9]")
    second = parse_indexing_map("(d0) -> (d0), domain: d0 in [0, 4]")
    c = compose(first, second)
    assert c.dimensions == (Variable("d0", Interval(3, 7)),)  # d0 - 3 in [0, 4]
    assert c.results == (add(Dim(0), Constant(-3)),)


def test_wrong_arity_is_an_error():
    first = parse_indexing_map("(d0) -> (d0, d0), domain: d0 in [0, 9]")
    second = parse_indexing_map("(d0) -> (d0), domain: d0 in [0, 9]")
    with pytest.raises(IndexingError, match=r"2 result\(s\) but the second has 1 dimension"):
        compose(first, second)


@st.composite
def exprs(draw, n_dims, n_syms, depth=2):
    leaves = [*(Dim(i) for i in range(n_dims)), *(Symbol(i) for i in range(n_syms))]
    if depth == 0 or draw(st.booleans()):
        return draw(st.sampled_from(leaves))
    kind = draw(st.sampled_from(["add", "mul", "floordiv", "mod"]))
    lhs = draw(exprs(n_dims, n_syms, depth - 1))
    if kind == "add":
        return add(lhs, draw(exprs(n_dims, n_syms, depth - 1)))
    c = Constant(draw(st.integers(2, 5)))
    return {"mul": mul, "floordiv": floordiv, "mod": mod}[kind](lhs, c)


@st.composite
def random_map(draw, n_dims, n_results):
    n_range = draw(st.integers(0, 1))
    n_runtime = draw(st.integers(0, 1))

    def var(name):
        lo = draw(st.integers(0, 3))
        return Variable(name, Interval(lo, lo + draw(st.integers(0, 5))))

    n_syms = n_range + n_runtime
    results = tuple(draw(exprs(n_dims, n_syms)) for _ in range(n_results))
    constraints = tuple(
        (draw(exprs(n_dims, n_syms)), Interval(lo, lo + 6))
        for lo in draw(st.lists(st.integers(0, 4), max_size=1))
    )
    return IndexingMap(
        tuple(var(f"d{i}") for i in range(n_dims)),
        results,
        tuple(var(f"s{i}") for i in range(n_range)),
        tuple(var(f"rt{i}") for i in range(n_runtime)),
        constraints,
    )


@st.composite
def map_pairs(draw):
    mid = draw(st.integers(1, 2))
    return draw(random_map(2, mid)), draw(random_map(mid, draw(st.integers(1, 2))))


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(map_pairs())
def test_compose_matches_applying_both(pair):
    first, second = pair
    c = compose(first, second)
    r1, r2 = len(first.range_vars), len(second.range_vars)
    t1 = len(first.runtime_vars)
    expected = {}
    for dims, syms in first.domain_points():
        mid = first.evaluate(dims, syms)
        for _, syms2 in second.domain_points():
            if not second.in_domain(mid, syms2):
                continue
            combined = syms[:r1] + syms2[:r2] + syms[r1:] + syms2[r2:]
            assert len(combined) == r1 + r2 + t1 + len(second.runtime_vars)
            expected[(dims, combined)] = second.evaluate(mid, syms2)
    actual = {(d, s): c.evaluate(d, s) for d, s in c.domain_points()}
    assert actual == expected


def test_compose_is_memoised_for_equal_maps_and_forgotten_with_the_other_memos():
    """The partitioner composes a map per operand access of every kernel, mostly the
    same few: equal maps are composed once, and forget_memos starts cold again."""
    from heron.indexing import IndexingMap, compose, forget_memos

    def maps():
        return IndexingMap.identity([4, 8]), IndexingMap.identity([4, 8])

    forget_memos()
    first = compose(*maps())
    assert compose(*maps()) is first
    assert compose.cache_info().hits == 1
    forget_memos()
    assert compose.cache_info().currsize == 0
    assert compose(*maps()) == first
