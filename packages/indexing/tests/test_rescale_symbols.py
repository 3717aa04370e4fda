"""Rescaling range symbols held to one residue (``s mod c in [k, k]``)."""

from __future__ import annotations

from collections import defaultdict

from hypothesis import given, settings
from hypothesis import strategies as st

from heron.indexing.indexing_map import IndexingMap
from heron.indexing.parser import parse_indexing_map
from heron.indexing.simplifier import rescale_symbols


def _images(indexing_map: IndexingMap) -> dict[tuple[int, ...], set[tuple[int, ...]]]:
    """For each dimension point, the set of results over every valid symbol value."""
    images: dict[tuple[int, ...], set[tuple[int, ...]]] = defaultdict(set)
    for dims, symbols in indexing_map.domain_points():
        images[dims].add(indexing_map.evaluate(dims, symbols))
    return dict(images)


def test_a_residue_constraint_becomes_a_denser_symbol():
    original = parse_indexing_map(
        "(d0)[s0] -> (d0 + s0), domain: d0 in [0, 9], s0 in [0, 15], s0 mod 4 in [1, 1]"
    )
    rescaled = rescale_symbols(original)
    assert rescaled == parse_indexing_map(
        "(d0)[s0] -> (d0 + s0 * 4 + 1), domain: d0 in [0, 9], s0 in [0, 3]"
    )
    assert _images(rescaled) == _images(original)


def test_maps_without_residue_constraints_are_only_simplified():
    text = "(d0)[s0] -> (d0 * 2 + s0), domain: d0 in [0, 9], s0 in [0, 1]"
    assert rescale_symbols(parse_indexing_map(text)) == parse_indexing_map(text)


def test_runtime_symbols_are_left_alone():
    text = "(d0){rt0} -> (d0 + rt0), domain: d0 in [0, 3], rt0 in [0, 15], rt0 mod 4 in [0, 0]"
    assert rescale_symbols(parse_indexing_map(text)).runtime_vars[0].bounds.upper == 15


@settings(max_examples=60, deadline=None)
@given(
    lo=st.integers(-5, 5),
    size=st.integers(1, 20),
    stride=st.integers(1, 5),
    residue=st.integers(0, 4),
    scale=st.integers(-3, 3),
)
def test_rescaling_keeps_every_dimension_points_image(lo, size, stride, residue, scale):
    residue %= stride
    original = parse_indexing_map(
        f"(d0)[s0] -> (d0 * 3 + s0 * {scale}, s0 floordiv 2), domain: d0 in [0, 2],"
        f" s0 in [{lo}, {lo + size - 1}], s0 mod {stride} in [{residue}, {residue}]"
    )
    assert _images(rescale_symbols(original)) == _images(original)
