import pytest

from heron.hlo.shapes import Layout


def test_a_layout_is_tiled_by_a_tile_only():
    assert Layout((1, 0), "T(8,128)").is_tiled
    assert Layout((1, 0), "T(8,128)(2,1)S(1)").is_tiled
    assert Layout((1, 0), "T(2,128)E(4)").is_tiled
    assert Layout((1, 0), "E(4):T(2,128)").is_tiled
    assert not Layout((1, 0), "E(4)").is_tiled
    assert not Layout((1, 0)).is_tiled


@pytest.mark.parametrize("suffix", ["S(1)", "E(4)S(1)", "S(5)", "L(2)", "SC(0:1)"])
def test_a_memory_space_or_element_size_is_no_tiling(suffix):
    """XLA's parts that leave the minor-to-major order alone: the buffer is no tiled one."""
    assert not Layout((1, 0), suffix).is_tiled


def test_a_physical_shapes_tile_is_not_the_layouts():
    assert not Layout((0,), "P(f32[8]{0:T(8)})").is_tiled
