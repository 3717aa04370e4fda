"""Thread-to-output maps of the loop emitter: the seeds' GELU map and the bijection property.

The property that makes a loop kernel correct is that its in-bounds
(thread, block, symbol) points hit every output element exactly once; the
tests enumerate small domains and check exactly that.
"""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from heron.hlo.shapes import array_shape
from heron.indexing.indexing_map import IndexingError
from heron.indexing.thread_maps import LaunchDimensions, loop_thread_to_output_map

GELU = (
    "(th_x, bl_x)[vector_index] -> (bl_x floordiv 4096, (bl_x floordiv 8) mod 512,"
    " (bl_x mod 8) * 512 + th_x * 4 + vector_index),"
    " domain: th_x in [0, 127], bl_x in [0, 24575], vector_index in [0, 3]"
)


def test_gelu_map_matches_the_seeds():
    """The launch is the loop emitter's (heron.plugins.iteration decides it: 24576 blocks
    of 128 threads, 4 elements each); the map of that launch is the seeds'."""
    launch = LaunchDimensions(24576, 128)
    assert loop_thread_to_output_map((6, 512, 4096), launch, 4, 1).format() == GELU


def test_gelu_map_without_the_general_simplifier_is_the_same():
    launch = LaunchDimensions(block_x=24576, thread_x=128)
    assert loop_thread_to_output_map((6, 512, 4096), launch, 4, simplify=False).format() == GELU


def test_small_output_uses_one_block_of_exactly_its_size():
    launch = LaunchDimensions(1, 20)
    assert loop_thread_to_output_map((20,), launch, 1, 1).format() == (
        "(th_x, bl_x) -> (th_x), domain: th_x in [0, 19], bl_x in [0, 0]"
    )


def test_partial_last_block_gets_a_bounds_constraint():
    m = loop_thread_to_output_map((3, 5), LaunchDimensions(2, 8), 1, simplify=False)
    assert len(m.constraints) == 1
    expr, bounds = m.constraints[0]
    assert (bounds.lower, bounds.upper) == (0, 14)
    assert "bl_x * 8 + th_x in [0, 14]" in m.format()


def test_exact_cover_has_no_constraint():
    m = loop_thread_to_output_map((4, 8), LaunchDimensions(2, 4), 4, simplify=False)
    assert m.constraints == ()


def test_launch_that_does_not_cover_the_output_is_rejected():
    with pytest.raises(IndexingError, match="covers 24 elements"):
        loop_thread_to_output_map((6, 10), LaunchDimensions(3, 4), 2)


def _assert_bijection(dims, indexing_map):
    seen = {}
    for point_dims, point_syms in indexing_map.domain_points():
        index = indexing_map.evaluate(point_dims, point_syms)
        assert all(0 <= i < n for i, n in zip(index, dims)), (index, dims)
        assert index not in seen, f"{index} written by {seen[index]} and {(point_dims, point_syms)}"
        seen[index] = (point_dims, point_syms)
    assert len(seen) == math.prod(dims)


@settings(max_examples=40, deadline=None)
@given(
    dims=st.lists(st.integers(1, 7), min_size=1, max_size=3),
    threads=st.integers(1, 8),
    vector_size=st.sampled_from([1, 2, 4]),
    unroll=st.integers(1, 3),
    extra_blocks=st.integers(0, 1),
    block_y=st.integers(1, 2),
    simplify=st.booleans(),
    layout_seed=st.randoms(use_true_random=False),
)
def test_in_bounds_points_cover_every_output_index_once(
    dims, threads, vector_size, unroll, extra_blocks, block_y, simplify, layout_seed
):
    elements = math.prod(dims)
    blocks = math.ceil(elements / (threads * vector_size * unroll)) + extra_blocks
    block_x = math.ceil(blocks / block_y)
    launch = LaunchDimensions(block_x=block_x, thread_x=threads, block_y=block_y)
    order = list(range(len(dims)))
    layout_seed.shuffle(order)
    m = loop_thread_to_output_map(
        dims, launch, vector_size, unroll, minor_to_major=order, simplify=simplify
    )
    _assert_bijection(dims, m)


@settings(max_examples=25, deadline=None)
@given(
    dims=st.lists(st.integers(1, 12), min_size=1, max_size=3),
    element_type=st.sampled_from(["f32", "bf16", "f64", "s8", "s4"]),
)
def test_chosen_launch_is_a_bijection(dims, element_type):
    """Any vector size dividing the element count (vectors may span rows, as XLA's loop
    emitter's do) and blocks of 8 threads: every output element exactly once."""
    shape = array_shape(element_type, tuple(dims))
    elements = math.prod(shape.dims)
    vector_size = next(v for v in (4, 2, 1) if elements % v == 0)
    work_items = elements // vector_size
    threads = min(8, work_items)
    launch_dims = LaunchDimensions(math.ceil(work_items / threads), threads)
    m = loop_thread_to_output_map(shape.dims, launch_dims, vector_size, 1)
    _assert_bijection(shape.dims, m)


# -- the fusion-level choice (XLA's loop fusion unroll factor) -----------------


def _computation(text: str):
    from heron.hlo.parser import parse_module

    return parse_module(text).entry


def test_fusion_limits_of_the_corpus_cases():
    from heron.indexing.thread_maps import fusion_vectorization_limits

    convert = _computation(
        "HloModule m\nENTRY e {\n  p = f64[1024,1024] parameter(0)\n"
        "  ROOT c = bf16[1024,1024] convert(p)\n}\n"
    )
    assert fusion_vectorization_limits(convert) == (64, 16, True)

    variadic = _computation(
        "HloModule m\nadd {\n  a = f32[] parameter(0)\n  b = f32[] parameter(1)\n"
        "  c = f32[] parameter(2)\n  d = f32[] parameter(3)\n  s = f32[] add(a, c)\n"
        "  t = f32[] add(b, d)\n  ROOT r = (f32[], f32[]) tuple(s, t)\n}\n"
        "ENTRY e {\n  p = f32[3,4,5] parameter(0)\n  q = f32[3,4,5] parameter(1)\n"
        "  z = f32[] constant(0)\n"
        "  ROOT r = (f32[4], f32[4]) reduce(p, q, z, z), dimensions={0,2}, to_apply=add\n}\n"
    )
    assert fusion_vectorization_limits(variadic) == (32, 32, False)

    # a reduce-window (jax's cumsum): one element a thread, as XLA:GPU 0.12 emits it
    # (16 scalar loads for a 16-wide window of f32[4096,4096])
    window = _computation(
        "HloModule m\nadd {\n  a = f32[] parameter(0)\n  b = f32[] parameter(1)\n"
        "  ROOT s = f32[] add(a, b)\n}\nENTRY e {\n  p = f32[4096,4096] parameter(0)\n"
        "  z = f32[] constant(0)\n  ROOT r = f32[4096,4096] reduce-window(p, z),"
        " window={size=1x16 pad=0_0x15_0}, to_apply=add\n}\n"
    )
    assert fusion_vectorization_limits(window) == (32, 32, False)

    # windows of at most 8 elements are unrolled, as XLA:GPU 0.12 launches them (a 2x2
    # average pool: a quarter of the threads); 9 (a 3x3 max pool) is not
    for size, pad, vectorised in (
        ("1x8", "0_0x7_0", True),
        ("2x2", "1_0x1_0", True),
        ("3x3", "2_0x2_0", False),
        ("1x9", "0_0x8_0", False),
    ):
        pooled = _computation(
            "HloModule m\nadd {\n  a = f32[] parameter(0)\n  b = f32[] parameter(1)\n"
            "  ROOT s = f32[] add(a, b)\n}\nENTRY e {\n  p = f32[64,64] parameter(0)\n"
            "  z = f32[] constant(0)\n  ROOT r = f32[64,64] reduce-window(p, z),"
            f" window={{size={size} pad={pad}}}, to_apply=add\n}}\n"
        )
        assert fusion_vectorization_limits(pooled)[2] is vectorised, size


def test_bounds_check_is_on_whole_vectors_when_they_divide_the_output():
    """vectorize_x4: 240000 elements in 469 blocks of 512; the check must not use vector_index."""
    m = loop_thread_to_output_map((20, 40, 300), LaunchDimensions(469, 128), 4, 1)
    assert len(m.constraints) == 1
    expr, bounds = m.constraints[0]
    assert "vector_index" not in expr.format(["th_x", "bl_x"], ["vector_index"])
    assert (bounds.lower, bounds.upper) == (0, 59999)
    _assert_bijection_sampled(m, (20, 40, 300))


def _assert_bijection_sampled(indexing_map, dims):
    """Every in-domain point of the last two blocks hits a distinct in-range element."""
    seen = set()
    last = indexing_map.dimensions[1].bounds.upper
    for bl_x in (last - 1, last):
        for th_x in range(indexing_map.dimensions[0].bounds.upper + 1):
            for vector_index in range(4):
                point = ((th_x, bl_x), (vector_index,))
                if not indexing_map.in_domain(*point):
                    continue
                index = indexing_map.evaluate(*point)
                assert all(0 <= i < n for i, n in zip(index, dims))
                assert index not in seen
                seen.add(index)
    assert len(seen) == 240000 - 467 * 512
