"""Interval analysis: exact on the basic cases, and sound on random expressions."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from heron.indexing.affine import (
    Binary,
    BinaryKind,
    Constant,
    Dim,
    Symbol,
    add,
    ceildiv,
    floordiv,
    mod,
    mul,
)
from heron.indexing.indexing_map import IndexingError
from heron.indexing.interval import Interval
from heron.indexing.parser import parse_affine_expr, parse_indexing_map
from heron.indexing.range_analysis import expr_range

MAP = parse_indexing_map(
    "(d0, d1)[s0]{rt0} -> (), domain: d0 in [0, 19], d1 in [-5, 7], s0 in [0, 3], rt0 in [2, 4], "
    "d0 + d1 in [0, 10]"
)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("42", (42, 42)),
        ("d0", (0, 19)),
        ("rt0", (2, 4)),
        ("d0 * 4 + s0", (0, 79)),
        ("d1 * -2", (-14, 10)),
        ("d0 - d1", (-7, 24)),
        ("d0 floordiv 8", (0, 2)),
        ("d1 floordiv 4", (-2, 1)),
        ("d0 ceildiv 8", (0, 3)),
        ("d0 mod 8", (0, 7)),
        ("s0 mod 8", (0, 3)),
        ("(d0 + 16) mod 8 ", (0, 7)),
        ("(s0 + 8) mod 8", (0, 3)),
        ("d1 mod 4", (0, 3)),
        ("d0 + d1", (0, 10)),  # tightened by the constraint on exactly this expression
        ("d0 mod rt0", (0, 3)),
        ("d0 floordiv rt0", (0, 9)),
        ("d0 * d1", (-95, 133)),
    ],
)
def test_ranges(text, expected):
    expr = parse_affine_expr(text, ["d0", "d1"], ["s0", "rt0"])
    assert expr_range(expr, MAP) == Interval(*expected)


def test_non_positive_divisor_is_an_error():
    bad = Binary(BinaryKind.MOD, Dim(0), Dim(1))
    with pytest.raises(IndexingError, match="divisor's range"):
        expr_range(bad, MAP)


@st.composite
def exprs(draw, depth=3):
    if depth == 0 or draw(st.booleans()):
        return draw(
            st.sampled_from(
                [Dim(0), Dim(1), Symbol(0), Symbol(1), Constant(draw(st.integers(-6, 6)))]
            )
        )
    kind = draw(st.sampled_from(["add", "mul", "floordiv", "ceildiv", "mod"]))
    lhs = draw(exprs(depth - 1))
    if kind == "add":
        return add(lhs, draw(exprs(depth - 1)))
    c = Constant(draw(st.integers(1, 9)) * draw(st.sampled_from([1, -1])))
    return {"mul": mul, "floordiv": floordiv, "ceildiv": ceildiv, "mod": mod}[kind](lhs, c)


@settings(max_examples=120, deadline=None)
@given(exprs())
def test_range_holds_every_value(expr):
    m = parse_indexing_map(
        "(d0, d1)[s0]{rt0} -> (), domain: d0 in [0, 9], d1 in [-4, 3], s0 in [0, 3], rt0 in [1, 2]"
    )
    bounds = expr_range(expr, m)
    values = {expr.evaluate(dims, syms) for dims, syms in m.domain_points()}
    assert min(values) >= bounds.lower and max(values) <= bounds.upper
