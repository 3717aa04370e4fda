"""The simplifier: a table of expected forms, and exactness on random maps."""

from __future__ import annotations

import time

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from heron.indexing.affine import Constant, Dim, Symbol, add, ceildiv, floordiv, mod, mul
from heron.indexing.indexing_map import IndexingMap, Variable
from heron.indexing.interval import Interval
from heron.indexing.parser import parse_affine_expr, parse_indexing_map
from heron.indexing.simplifier import (
    is_known_empty,
    remove_unused_symbols,
    simplify,
    simplify_expr,
)

GELU = (
    "(th_x, bl_x)[vector_index] -> (bl_x floordiv 4096, (bl_x floordiv 8) mod 512, "
    "(bl_x mod 8) * 512 + th_x * 4 + vector_index), "
    "domain: th_x in [0, 127], bl_x in [0, 24575], vector_index in [0, 3]"
)

# Variables: th_x in [0, 1023], d0 in [0, 7], d1 in [0, 1000], s0 in [0, 3], s1 in [0, 15].
TABLE_MAP = parse_indexing_map(
    "(th_x, d0, d1)[s0, s1] -> (), "
    "domain: th_x in [0, 1023], d0 in [0, 7], d1 in [0, 1000], s0 in [0, 3], s1 in [0, 15]"
)
DIMS, SYMS = ["th_x", "d0", "d1"], ["s0", "s1"]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        # The RFC's example: the loop variable leaves the mod.
        ("(th_x * 4 + s0) mod 1024", "(th_x * 4) mod 1024 + s0"),
        ("(th_x * 4 + s0) floordiv 4", "th_x"),
        ("(d1 * 4 + s0) floordiv 4", "d1"),
        ("(d1 * 16 + s1) floordiv 32", "d1 floordiv 2"),
        ("(d1 * 16 + s0 + 1) mod 32", "(d1 * 16) mod 32 + s0 + 1"),
        ("(d1 * 16 + s1 + 1) mod 32", "(d1 * 16 + s1 + 1) mod 32"),  # s1 + 1 may reach 16
        # Range folds.
        ("d0 floordiv 8", "0"),
        ("d0 mod 16", "d0"),
        ("d0 mod 8", "d0"),
        ("(d0 + 8) mod 8", "d0"),
        ("(d0 + 8) floordiv 8", "1"),
        ("s0 ceildiv 4", "s0 ceildiv 4"),
        ("(s0 + 1) ceildiv 4", "1"),
        # Divisible constants.
        ("(d1 * 8) floordiv 4", "d1 * 2"),
        ("(d1 * 4) floordiv 8", "d1 floordiv 2"),
        ("(d1 * 8) mod 4", "0"),
        ("(d1 * 4 + 9) floordiv 4", "d1 + 2"),
        ("(d1 + 8) ceildiv 4", "d1 ceildiv 4 + 2"),
        # Nested divisions.
        ("(d1 floordiv 4) floordiv 8", "d1 floordiv 32"),
        ("(d1 mod 32) mod 8", "d1 mod 8"),
        ("d1 - (d1 floordiv 8) * 8", "d1 mod 8"),
        ("(d1 + th_x) * 2 - ((d1 + th_x) floordiv 16) * 32", "((th_x + d1) mod 16) * 2"),
        # Sums: like terms merged, canonical order, constant last.
        ("s0 + 3 + d1 * 2 + d1 - 1 + th_x", "th_x + d1 * 3 + s0 + 2"),
        ("(d1 + 1) * 4", "d1 * 4 + 4"),
        ("d1 - d1", "0"),
        ("s1 + d1 mod 4 + th_x", "d1 mod 4 + th_x + s1"),
    ],
)
def test_simplified_forms(text, expected):
    expr = parse_affine_expr(text, DIMS, SYMS)
    simplified = simplify_expr(expr, TABLE_MAP)
    assert simplified == parse_affine_expr(expected, DIMS, SYMS), simplified.format(DIMS, SYMS)


def test_the_gelu_thread_map_stays_as_the_seed_prints_it():
    m = parse_indexing_map(GELU)
    assert simplify(m) == m
    assert simplify(m).format() == GELU


def test_the_seed_mod_example_in_a_map():
    m = parse_indexing_map(
        "(th_x)[s0] -> ((th_x * 4 + s0) mod 1024), domain: th_x in [0, 1023], s0 in [0, 3]"
    )
    expected = parse_affine_expr("(th_x * 4) mod 1024 + s0", ["th_x"], ["s0"])
    assert simplify(m).results == (expected,)


def test_constraints_that_always_hold_are_dropped_and_single_variable_ones_become_bounds():
    m = parse_indexing_map(
        "(d0, d1) -> (d0 + d1), domain: d0 in [0, 9], d1 in [0, 9], d0 + d1 in [0, 18], "
        "d0 in [2, 20], d1 * 2 + 1 in [3, 10], d0 mod 2 in [0, 0]"
    )
    s = simplify(m)
    assert s.dimensions == (Variable("d0", Interval(2, 9)), Variable("d1", Interval(1, 4)))
    assert s.constraints == ((mod(Dim(0), Constant(2)), Interval(0, 0)),)
    assert not is_known_empty(s)


def test_constraints_make_results_simpler():
    m = parse_indexing_map("(d0) -> (d0 floordiv 8), domain: d0 in [0, 100], d0 in [8, 15]")
    assert simplify(m).results == (Constant(1),)


@pytest.mark.parametrize(
    "text",
    [
        "(d0) -> (d0), domain: d0 in [0, 9], d0 + 20 in [0, 5]",
        "(d0) -> (d0), domain: d0 in [0, 9], d0 mod 4 in [4, 7]",
        "(d0, d1) -> (d0), domain: d0 in [0, 9], d1 in [0, 1], d0 * 2 in [3, 3]",
        "(d0) -> (d0), domain: d0 in [0, 9], d0 in [12, 20]",
    ],
)
def test_known_empty(text):
    m = parse_indexing_map(text)
    assert is_known_empty(m)
    assert list(m.domain_points()) == []


def test_empty_variable_range_is_known_empty():
    m = IndexingMap((Variable("d0", Interval(3, 1)),), (Dim(0),))
    assert is_known_empty(m)
    assert simplify(m) == m


def test_not_known_empty():
    m = parse_indexing_map("(d0) -> (d0), domain: d0 in [0, 9], d0 mod 4 in [1, 1]")
    assert not is_known_empty(m)


def test_remove_unused_symbols_keeps_order_and_kinds():
    m = parse_indexing_map(
        "(d0)[s0, s1, s2]{rt0, rt1} -> (d0 + s2 + rt1), domain: d0 in [0, 3], s0 in [0, 1], "
        "s1 in [0, 2], s2 in [0, 3], rt0 in [0, 4], rt1 in [0, 5], s1 + d0 in [0, 4]"
    )
    r = remove_unused_symbols(m)
    assert [v.name for v in r.range_vars] == ["s1", "s2"]
    assert [v.name for v in r.runtime_vars] == ["rt1"]
    assert r.format() == (
        "(d0)[s1, s2]{rt1} -> (d0 + s2 + rt1), domain: d0 in [0, 3], s1 in [0, 2], "
        "s2 in [0, 3], rt1 in [0, 5], s1 + d0 in [0, 4]"
    )
    assert remove_unused_symbols(r) == r


# -- exactness on random maps -------------------------------------------------------


@st.composite
def exprs(draw, n_syms: int, depth: int = 3):
    leaves = [Dim(0), Dim(1), *(Symbol(i) for i in range(n_syms))]
    if depth == 0 or draw(st.integers(0, 3)) == 0:
        if draw(st.integers(0, 4)) == 0:
            return Constant(draw(st.integers(-4, 8)))
        return draw(st.sampled_from(leaves))
    kind = draw(st.sampled_from(["add", "add", "sub", "mul", "floordiv", "ceildiv", "mod"]))
    lhs = draw(exprs(n_syms, depth - 1))
    if kind in ("add", "sub"):
        rhs = draw(exprs(n_syms, depth - 1))
        return add(lhs, rhs) if kind == "add" else lhs - rhs
    if kind == "mul":
        return mul(lhs, Constant(draw(st.sampled_from([-2, 2, 3, 4, 8]))))
    c = Constant(draw(st.sampled_from([2, 3, 4, 8, 16])))
    return {"floordiv": floordiv, "ceildiv": ceildiv, "mod": mod}[kind](lhs, c)


@st.composite
def random_maps(draw):
    n_syms = draw(st.integers(1, 2))
    n_runtime = draw(st.integers(0, n_syms))

    def var(name):
        lo = draw(st.integers(-2, 4))
        return Variable(name, Interval(lo, lo + draw(st.integers(0, 9))))

    dims = (var("d0"), var("d1"))
    symbols = [var(f"s{i}") for i in range(n_syms)]
    results = tuple(draw(st.lists(exprs(n_syms), min_size=1, max_size=3)))
    constraints = []
    for _ in range(draw(st.integers(0, 2))):
        lo = draw(st.integers(-3, 12))
        constraints.append((draw(exprs(n_syms, 2)), Interval(lo, lo + draw(st.integers(0, 12)))))
    split = n_syms - n_runtime
    return IndexingMap(
        dims, results, tuple(symbols[:split]), tuple(symbols[split:]), tuple(constraints)
    )


def _meaning(m: IndexingMap) -> dict:
    return {(dims, syms): m.evaluate(dims, syms) for dims, syms in m.domain_points()}


SETTINGS = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@SETTINGS
@given(random_maps())
def test_simplify_preserves_meaning(m):
    s = simplify(m)
    assert s.num_dims == m.num_dims and s.num_symbols == m.num_symbols
    assert _meaning(s) == _meaning(m)


@SETTINGS
@given(random_maps())
def test_simplify_is_idempotent(m):
    once = simplify(m)
    assert simplify(once) == once


@SETTINGS
@given(random_maps())
def test_known_empty_is_sound_and_unused_symbol_removal_is_exact(m):
    if is_known_empty(m):
        assert list(m.domain_points()) == []
    r = remove_unused_symbols(m)
    projected = {(d, m.evaluate(d, s)) for d, s in m.domain_points()}
    assert {(d, r.evaluate(d, s)) for d, s in r.domain_points()} == projected


def test_simplify_is_fast_on_small_maps():
    """A guard against a blow-up (an exponential rewrite), not a speed measurement
    (benchmarks/ measure speed): typically well under 1 ms a map, bounded at 100 ms so that
    a loaded CI machine (11 ms seen beside other suites) cannot fail it."""
    maps = [parse_indexing_map(GELU)] + [
        parse_indexing_map(
            f"(d0, d1)[s0] -> ((d0 * {4 * k} + s0) mod 1024, (d1 * 4 + s0) floordiv {4 * k}, "
            f"d0 - (d0 floordiv 8) * 8), domain: d0 in [0, 255], d1 in [0, 99], s0 in [0, 3], "
            f"d0 + d1 in [0, 300]"
        )
        for k in range(1, 50)
    ]
    start = time.perf_counter()
    for m in maps:
        simplify(m)
    per_map = (time.perf_counter() - start) / len(maps)
    assert per_map < 0.1


def test_simplify_is_memoised_for_equal_maps():
    """A compile asks for the same maps again and again: equal maps (frozen values)
    are simplified once, and the answer is the same value."""
    from heron.indexing import IndexingMap, simplify
    from heron.indexing.affine import Dim

    def build():
        return IndexingMap.for_shape([4, 8], [Dim(0) * 8 + Dim(1) - Dim(1)])

    simplify.cache_clear()
    first = simplify(build())
    second = simplify(build())
    assert first is second
    assert simplify.cache_info().hits == 1
    assert first.results == (Dim(0) * 8,)


def test_a_map_built_from_lists_is_a_hashable_value():
    from heron.indexing import IndexingMap, Interval, Variable, simplify
    from heron.indexing.affine import Dim

    m = IndexingMap([Variable("d0", Interval(0, 3))], [Dim(0)], [], [], [[Dim(0), Interval(0, 1)]])
    assert isinstance(m.results, tuple) and isinstance(m.constraints[0], tuple)
    assert hash(m) == hash(
        IndexingMap.for_shape([4], [Dim(0)], constraints=[(Dim(0), Interval(0, 1))])
    )
    assert simplify(m) == simplify(m)
