"""Parsing the seeds' indexing-map text: round trips, variable kinds, and clear errors."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from heron.indexing.affine import Constant, Dim, Symbol, add, ceildiv, floordiv, mod, mul
from heron.indexing.indexing_map import IndexingError, IndexingMap, Variable
from heron.indexing.interval import Interval
from heron.indexing.parser import parse_affine_expr, parse_indexing_map

GELU = (
    "(th_x, bl_x)[vector_index] -> (bl_x floordiv 4096, (bl_x floordiv 8) mod 512, "
    "(bl_x mod 8) * 512 + th_x * 4 + vector_index), "
    "domain: th_x in [0, 127], bl_x in [0, 24575], vector_index in [0, 3]"
)


def test_parses_the_seed_example():
    m = parse_indexing_map(
        "(d0, d1)[s0] -> (d1, d0 * 4 + s0), domain: d0 in [0, 19], d1 in [0, 39], s0 in [0, 3]"
    )
    assert m == IndexingMap(
        (Variable("d0", Interval(0, 19)), Variable("d1", Interval(0, 39))),
        (Dim(1), add(mul(Dim(0), Constant(4)), Symbol(0))),
        (Variable("s0", Interval(0, 3)),),
    )
    assert parse_indexing_map(m.format()) == m


def test_parses_the_gelu_thread_map_with_named_variables():
    m = parse_indexing_map(GELU)
    assert [v.name for v in m.dimensions] == ["th_x", "bl_x"]
    assert [v.name for v in m.range_vars] == ["vector_index"]
    assert m.evaluate((3, 4097), (2,)) == (1, 0, 512 + 12 + 2)
    assert m.format() == GELU


def test_runtime_vars_constraints_and_empty_results():
    text = (
        "(d0)[s0]{rt0, rt1} -> (d0 + s0 + rt1), domain: d0 in [0, 9], s0 in [0, 1], "
        "rt0 in [-3, 5], rt1 in [0, 2], d0 + rt0 in [0, 8], d0 mod 2 in [0, 0]"
    )
    m = parse_indexing_map(text)
    assert len(m.range_vars) == 1 and [v.name for v in m.runtime_vars] == ["rt0", "rt1"]
    assert m.results == (add(add(Dim(0), Symbol(0)), Symbol(2)),)
    assert m.constraints == (
        (add(Dim(0), Symbol(1)), Interval(0, 8)),
        (mod(Dim(0), Constant(2)), Interval(0, 0)),
    )
    assert m.format() == text
    empty = parse_indexing_map("(d0) -> (), domain: d0 in [0, 3]")
    assert empty.results == () and empty.num_dims == 1
    assert parse_indexing_map("() -> ()") == IndexingMap((), ())


def test_expression_precedence_and_negatives():
    names = ["a", "b"]
    assert parse_affine_expr("a - b * 2", names) == add(Dim(0), mul(Dim(1), Constant(-2)))
    assert parse_affine_expr("a * 4 mod 1024", names) == mod(
        mul(Dim(0), Constant(4)), Constant(1024)
    )
    assert parse_affine_expr("a floordiv 2 ceildiv 3", names) == ceildiv(
        floordiv(Dim(0), Constant(2)), Constant(3)
    )
    assert parse_affine_expr("-a + (b - 3)", names) == add(
        mul(Dim(0), Constant(-1)), add(Dim(1), Constant(-3))
    )
    assert parse_affine_expr("4 * s0", [], ["s0"]) == mul(Symbol(0), Constant(4))


@st.composite
def exprs(draw, n_dims: int, n_syms: int, depth: int = 3):
    leaves = [Constant(draw(st.integers(-5, 9)))]
    leaves += [Dim(i) for i in range(n_dims)] + [Symbol(i) for i in range(n_syms)]
    if depth == 0 or draw(st.booleans()):
        return draw(st.sampled_from(leaves))
    kind = draw(st.sampled_from(["add", "mul", "floordiv", "ceildiv", "mod"]))
    lhs = draw(exprs(n_dims, n_syms, depth - 1))
    if kind == "add":
        return add(lhs, draw(exprs(n_dims, n_syms, depth - 1)))
    c = Constant(draw(st.integers(1, 8)) * (draw(st.sampled_from([1, -1])) if kind == "mul" else 1))
    return {"mul": mul, "floordiv": floordiv, "ceildiv": ceildiv, "mod": mod}[kind](lhs, c)


@st.composite
def maps(draw):
    n_dims = draw(st.integers(0, 3))
    n_range = draw(st.integers(0, 2))
    n_runtime = draw(st.integers(0, 2))
    n_syms = n_range + n_runtime

    def var(name):
        lo = draw(st.integers(-4, 4))
        return Variable(name, Interval(lo, lo + draw(st.integers(0, 6))))

    names = iter(draw(st.permutations(["d0", "th_x", "bl_x", "s0", "vector_index", "rt0", "x7"])))
    dims = tuple(var(next(names)) for _ in range(n_dims))
    range_vars = tuple(var(next(names)) for _ in range(n_range))
    runtime = tuple(var(next(names)) for _ in range(n_runtime))
    results = tuple(draw(st.lists(exprs(n_dims, n_syms), max_size=3)))
    constraints = tuple(
        (e, Interval(lo, lo + draw(st.integers(0, 5))))
        for e, lo in draw(
            st.lists(st.tuples(exprs(n_dims, n_syms), st.integers(-3, 3)), max_size=2)
        )
    )
    return IndexingMap(dims, results, range_vars, runtime, constraints)


@settings(max_examples=150, deadline=None)
@given(maps())
def test_format_parse_round_trip(m):
    assert parse_indexing_map(m.format()) == m


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("(d0) -> (d0", "expected ',' or ')' at position 11"),
        ("(d0) (d0)", "expected '->' at position 5"),
        ("(d0) -> (d0 +), domain: d0 in [0, 3]", "expected an expression"),
        ("(d0) -> (d1), domain: d0 in [0, 3]", "unknown variable 'd1' at position 9"),
        ("(d0) -> (d0), domain: d0 in [5, 2]", "empty range [5, 2]"),
        ("(d0, d1) -> (d0), domain: d0 in [0, 3]", "missing: d1"),
        ("(d0) -> (d0)", "missing: d0"),
        ("(d0, d0) -> (d0)", "declared twice"),
        ("(d0)[d0] -> (d0)", "declared twice"),
        ("(d0) -> (d0 mod 0), domain: d0 in [0, 3]", "mod by zero"),
        ("(d0) -> (d0), domain: d0 in [0, 3], d0 + 1 in [4, 1]", "empty range [4, 1]"),
        ("(d0) -> (d0), domain: d0 in [0, 3] extra", "expected end of input"),
        ("(d0) -> (d0 # 2)", "unexpected character '#' at position 12"),
        ("(d0) -> (d0), domain: d0 in [a, 3]", "expected an integer"),
    ],
)
def test_bad_input_says_where_and_what(text, message):
    with pytest.raises(IndexingError) as info:
        parse_indexing_map(text)
    assert message in str(info.value)


def test_bad_expression_input():
    with pytest.raises(IndexingError, match="unknown variable 'x'"):
        parse_affine_expr("d0 + x", ["d0"])
    with pytest.raises(IndexingError, match="expected end of input"):
        parse_affine_expr("d0 d0", ["d0"])


def test_a_map_refuses_variables_it_does_not_have_and_names_them():
    from heron.indexing.affine import used_variables

    d0 = Variable("d0", Interval(0, 3))
    expr = Dim(0) + Dim(2) * 4 + Symbol(1)
    assert used_variables(expr) == (frozenset({0, 2}), frozenset({1}))
    with pytest.raises(IndexingError, match=r"uses d2, s1 but the map has 1 dimension\(s\)"):
        IndexingMap((d0,), (expr,))
    assert IndexingMap((d0,), (Dim(0) * 2,)).num_results == 1  # its own variables: fine


def test_a_formatted_map_is_read_back_as_itself_without_parsing(monkeypatch):
    """An emitter writes each map it builds into an attribute as text and every later
    pass reads the text back: the map that text came from is the answer (it parses to
    an equal map), and a text never formatted here is parsed."""
    from heron.indexing import forget_memos, parser
    from heron.indexing.parser import format_indexing_map, parse_indexing_map

    forget_memos()
    built = IndexingMap.for_shape([4, 8], [Dim(0) * 8 + Dim(1)])
    text = format_indexing_map(built)
    parsed = []
    monkeypatch.setattr(parser._Parser, "indexing_map", lambda self: parsed.append(self))
    assert parse_indexing_map(text) is built
    assert parsed == []
    monkeypatch.undo()
    forget_memos()
    again = parse_indexing_map(text)
    assert again == built and again is not built
