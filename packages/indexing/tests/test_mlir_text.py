"""MLIR affine_map text out and back in (bounds travel separately)."""

from __future__ import annotations

import pytest

from heron.indexing.indexing_map import IndexingError
from heron.indexing.interval import Interval
from heron.indexing.mlir_text import from_mlir_affine_map, to_mlir_affine_map
from heron.indexing.parser import parse_indexing_map


def test_seed_example_to_mlir():
    m = parse_indexing_map(
        "(d0, d1)[s0] -> (d1, d0 * 4 + s0), domain: d0 in [0, 19], d1 in [0, 39], s0 in [0, 3]"
    )
    assert to_mlir_affine_map(m) == "affine_map<(d0, d1)[s0] -> (d1, d0 * 4 + s0)>"


def test_named_variables_and_runtime_vars_print_as_d_and_s():
    m = parse_indexing_map(
        "(th_x)[vector_index]{rt} -> (th_x * 4 + vector_index - rt, th_x floordiv 8), "
        "domain: th_x in [0, 127], vector_index in [0, 3], rt in [0, 1], th_x + rt in [0, 100]"
    )
    text = to_mlir_affine_map(m)
    assert text == "affine_map<(d0)[s0, s1] -> (d0 * 4 + s0 - s1, d0 floordiv 8)>"
    back = from_mlir_affine_map(text, [(0, 127)], [(0, 3), Interval(0, 1)], num_runtime_vars=1)
    assert back.results == m.results
    assert [v.bounds for v in back.symbols] == [v.bounds for v in m.symbols]
    assert len(back.runtime_vars) == 1
    assert back.constraints == ()  # affine_map has no domain


def test_round_trip_with_bounds_and_empty_results():
    m = parse_indexing_map("(d0, d1) -> (), domain: d0 in [0, 1], d1 in [0, 2]")
    text = to_mlir_affine_map(m)
    assert text == "affine_map<(d0, d1) -> ()>"
    assert from_mlir_affine_map(text, [(0, 1), (0, 2)]) == m
    assert (
        from_mlir_affine_map("(d0)[s0] -> (d0 mod 4, s0)", [(0, 7)], [(0, 1)]).results[0].format()
        == "d0 mod 4"
    )


@pytest.mark.parametrize(
    ("text", "dims", "syms", "message"),
    [
        ("affine_map<(d0) -> (d0)>", [], [], "1 dimension(s) but 0 bound(s)"),
        ("affine_map<(d0)[s0] -> (d0)>", [(0, 1)], [], "1 symbol(s) but 0 bound(s)"),
        ("affine_map<(d0) -> (d0)>", [(3, 1)], [], "empty range [3, 1]"),
        ("affine_map<(d0) -> (d1)>", [(0, 1)], [], "unknown variable 'd1'"),
        ("affine_map(d0) -> (d0)", [(0, 1)], [], "expected 'affine_map<...>'"),
        ("affine_map<(d0) -> (d0) + 1>", [(0, 1)], [], "expected end of input"),
    ],
)
def test_bad_mlir_input(text, dims, syms, message):
    with pytest.raises(IndexingError) as info:
        from_mlir_affine_map(text, dims, syms)
    assert message in str(info.value)
