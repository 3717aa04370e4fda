def test_a_layout_is_tiled_by_any_suffix_but_an_element_size():
    from heron.hlo.shapes import Layout

    assert Layout((1, 0), "T(8,128)").is_tiled
    assert Layout((1, 0), "E(4):T(2,128)").is_tiled
    assert not Layout((1, 0), "E(4)").is_tiled
    assert not Layout((1, 0)).is_tiled
