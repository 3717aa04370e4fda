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


def test_an_arrays_element_count_is_kept_and_not_part_of_its_identity():
    import copy
    import pickle

    import attrs

    from heron.hlo.shape_syntax import parse_shape

    shape = parse_shape("f32[8,4]{1,0}")
    assert shape.num_elements == 32
    assert parse_shape("pred[]").num_elements == 1
    assert parse_shape("s32[0,5]").num_elements == 0
    grown = attrs.evolve(shape, dims=(16, 4))
    assert grown.num_elements == 64  # counted again for the new dims
    for twin in (copy.deepcopy(shape), pickle.loads(pickle.dumps(shape))):
        assert twin == shape and hash(twin) == hash(shape) and twin.num_elements == 32
    assert "num_elements" not in repr(shape)
