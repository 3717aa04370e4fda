"""Per-op indexing maps, checked against heron's reference evaluator.

Each test builds one op from HLO text on random shapes (hypothesis), runs the
evaluator, then walks every point of every operand map's domain and gathers
the operand through the map: the result must reproduce the evaluator's
output (exactly for data movement, as a sum for reduce / reduce-window / dot).
Runtime symbols take the value the op really used (the clamped offset, the
clamped gathered start index).
"""

from __future__ import annotations

from collections import defaultdict

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from heron.hlo import UnsupportedError, parse_module
from heron.hlo.evaluator import evaluate_computation
from heron.indexing.affine import Constant, Dim, Symbol
from heron.indexing.hlo_indexing import (
    input_to_output_map,
    output_to_input_maps,
    reshape_exprs,
)
from heron.indexing.indexing_map import IndexingMap

SETTINGS = settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])

ADD_S32 = """
add {
  a = s32[] parameter(0)
  b = s32[] parameter(1)
  ROOT r = s32[] add(a, b)
}
"""


# -- harness ----------------------------------------------------------------------------------


def _shape(dims) -> str:
    return ",".join(str(d) for d in dims)


def build(params: list[str], root: str, extra: str = ""):
    """A module whose entry has parameters ``params`` (shape text) and the given root line."""
    lines = [f"  p{i} = {shape} parameter({i})" for i, shape in enumerate(params)]
    text = f"HloModule m\n{extra}\nENTRY e {{\n" + "\n".join(lines) + f"\n  ROOT r = {root}\n}}\n"
    module = parse_module(text)
    return module.entry, module.entry.root


def run(comp, args):
    return evaluate_computation(comp, args)


def points_by_output(m: IndexingMap, runtime: tuple[int, ...] | None = None):
    """Output point -> list of (symbols) in the domain; runtime vars pinned when given."""
    nr = len(m.range_vars)
    table = defaultdict(list)
    for dims, syms in m.domain_points():
        if runtime is not None and tuple(syms[nr:]) != tuple(runtime):
            continue
        table[dims].append(syms)
    return table


def ints(shape, rng, low=-20, high=20):
    return rng.integers(low, high, size=shape).astype(np.int32)


def check_gather_exact(m: IndexingMap, operand: np.ndarray, output: np.ndarray, rt=None):
    """Every output element is exactly the one operand element the map names."""
    table = points_by_output(m, rt)
    for o in np.ndindex(output.shape):
        pts = table.get(o, [])
        assert len(pts) == 1, (m.format(), o, pts)
        assert output[o] == operand[m.evaluate(o, pts[0])], (m.format(), o)


dims_st = st.lists(st.integers(1, 4), min_size=1, max_size=3).map(tuple)


# -- elementwise --------------------------------------------------------------------------------


@SETTINGS
@given(dims=dims_st, seed=st.integers(0, 1000))
def test_elementwise_and_clamp(dims, seed):
    rng = np.random.default_rng(seed)
    s = f"s32[{_shape(dims)}]"
    comp, root = build([s, s], f"{s} add(p0, p1)")
    maps = output_to_input_maps(root)
    assert all(m.results == tuple(Dim(i) for i in range(len(dims))) for m in maps)
    a, b = ints(dims, rng), ints(dims, rng)
    out = run(comp, [a, b])
    for o in np.ndindex(out.shape):
        assert out[o] == a[maps[0].evaluate(o)] + b[maps[1].evaluate(o)]

    comp, root = build(["s32[]", s, "s32[]"], f"{s} clamp(p0, p1, p2)")
    lo_map, x_map, hi_map = output_to_input_maps(root)
    assert lo_map.results == () and hi_map.results == () and lo_map.num_dims == len(dims)
    x = ints(dims, rng)
    out = run(comp, [np.int32(-5), x, np.int32(5)])
    for o in np.ndindex(out.shape):
        assert out[o] == min(max(x[x_map.evaluate(o)], -5), 5)


def test_select_convert_copy_are_identity():
    comp, root = build(["pred[2,3]", "f32[2,3]", "f32[2,3]"], "f32[2,3] select(p0, p1, p2)")
    assert [str(m) for m in output_to_input_maps(root)] == [
        "(d0, d1) -> (d0, d1), domain: d0 in [0, 1], d1 in [0, 2]"
    ] * 3
    for op in ("convert", "copy"):
        _, root = build(
            ["f32[2,3]"], f"s32[2,3] {op}(p0)" if op == "convert" else "f32[2,3] copy(p0)"
        )
        (m,) = output_to_input_maps(root)
        assert m == IndexingMap.identity((2, 3))


def test_bitcast_convert_widths():
    comp, root = build(["s32[2]"], "s8[2,4] bitcast-convert(p0)")
    (m,) = output_to_input_maps(root)
    assert m.results == (Dim(0),)
    x = np.array([0x01020304, -1], dtype=np.int32)
    out = run(comp, [x])
    for o in np.ndindex(out.shape):
        # each s8 output element comes from the one s32 element the map names
        assert out[o] == np.array([x[m.evaluate(o)]]).view(np.int8)[o[1]]
    _, root = build(["s8[3,4]"], "s32[3] bitcast-convert(p0)")
    (m,) = output_to_input_maps(root)
    assert str(m) == "(d0)[s0] -> (d0, s0), domain: d0 in [0, 2], s0 in [0, 3]"
    _, root = build(["f32[3]"], "s32[3] bitcast-convert(p0)")
    assert output_to_input_maps(root) == [IndexingMap.identity((3,))]


def test_leaf_ops_have_no_operand_maps():
    _, root = build([], "s32[3,4] iota(), iota_dimension=1")
    assert output_to_input_maps(root) == []
    _, root = build([], "s32[2] constant({1, 2})")
    assert output_to_input_maps(root) == []


# -- data movement --------------------------------------------------------------------------------


@SETTINGS
@given(dims=dims_st, extra=st.lists(st.integers(1, 3), max_size=2), data=st.data())
def test_broadcast(dims, extra, data):
    out_rank = len(dims) + len(extra)
    positions = sorted(data.draw(st.permutations(range(out_rank)))[: len(dims)])
    order = data.draw(st.permutations(range(len(dims))))
    # operand dim k goes to positions[order[k]]
    mapping = [positions[order[k]] for k in range(len(dims))]
    out_dims = [0] * out_rank
    extras = iter(extra)
    for j in range(out_rank):
        out_dims[j] = dims[mapping.index(j)] if j in mapping else next(extras)
    comp, root = build(
        [f"s32[{_shape(dims)}]"],
        f"s32[{_shape(out_dims)}] broadcast(p0), dimensions={{{_shape(mapping)}}}",
    )
    x = ints(dims, np.random.default_rng(0))
    out = run(comp, [x])
    (m,) = output_to_input_maps(root)
    check_gather_exact(m, x, out)
    check_input_to_output(root, 0)


def _factorizations():
    return st.sampled_from(
        [
            ((6,), (2, 3)),
            ((2, 3), (3, 2)),
            ((4, 6), (2, 12)),
            ((2, 3, 4), (6, 4)),
            ((2, 3, 4), (4, 3, 2)),
            ((1, 6, 1), (3, 1, 2)),
            ((24,), (2, 3, 4)),
            ((2, 2, 6), (4, 3, 2)),
            ((1,), ()),
            ((), (1, 1)),
            ((5, 1, 3), (15,)),
        ]
    )


@SETTINGS
@given(pair=_factorizations(), flip=st.booleans())
def test_reshape(pair, flip):
    src, dst = pair if not flip else pair[::-1]
    comp, root = build([f"s32[{_shape(src)}]"], f"s32[{_shape(dst)}] reshape(p0)")
    x = ints(src, np.random.default_rng(1))
    out = run(comp, [x])
    (m,) = output_to_input_maps(root)
    check_gather_exact(m, x, out)
    check_input_to_output(root, 0)


def test_reshape_leaves_unchanged_dimensions_alone():
    exprs = reshape_exprs([Dim(0), Dim(1), Dim(2)], (2, 3, 4), (6, 4))
    assert exprs[1] == Dim(2)
    assert str(exprs[0]) == "d0 * 3 + d1"


def _layout_st(rank):
    return st.permutations(range(rank)).map(lambda p: "{" + ",".join(map(str, p)) + "}")


@SETTINGS
@given(pair=_factorizations(), data=st.data())
def test_bitcast_with_layouts(pair, data):
    src, dst = pair
    src_layout = data.draw(_layout_st(len(src)))
    dst_layout = data.draw(_layout_st(len(dst)))
    comp, root = build(
        [f"s32[{_shape(src)}]{src_layout}"], f"s32[{_shape(dst)}]{dst_layout} bitcast(p0)"
    )
    x = ints(src, np.random.default_rng(2))
    out = run(comp, [x])
    (m,) = output_to_input_maps(root)
    check_gather_exact(m, x, out)
    check_input_to_output(root, 0)


def test_bitcast_changing_width_is_refused_by_name():
    _, root = build(["s32[4]"], "s16[8] bitcast(p0)")
    with pytest.raises(UnsupportedError, match="'r' \\(bitcast\\)"):
        output_to_input_maps(root)


@SETTINGS
@given(dims=dims_st, data=st.data())
def test_transpose_and_reverse(dims, data):
    perm = data.draw(st.permutations(range(len(dims))))
    out_dims = [dims[p] for p in perm]
    comp, root = build(
        [f"s32[{_shape(dims)}]"],
        f"s32[{_shape(out_dims)}] transpose(p0), dimensions={{{_shape(perm)}}}",
    )
    x = ints(dims, np.random.default_rng(3))
    (m,) = output_to_input_maps(root)
    check_gather_exact(m, x, run(comp, [x]))
    check_input_to_output(root, 0)

    rev = sorted(data.draw(st.sets(st.integers(0, len(dims) - 1))))
    comp, root = build(
        [f"s32[{_shape(dims)}]"], f"s32[{_shape(dims)}] reverse(p0), dimensions={{{_shape(rev)}}}"
    )
    (m,) = output_to_input_maps(root)
    check_gather_exact(m, x, run(comp, [x]))
    check_input_to_output(root, 0)


@SETTINGS
@given(dims=dims_st, data=st.data())
def test_slice(dims, data):
    specs = []
    out_dims = []
    for n in dims:
        start = data.draw(st.integers(0, n - 1))
        limit = data.draw(st.integers(start + 1, n))
        stride = data.draw(st.integers(1, 3))
        specs.append(f"[{start}:{limit}:{stride}]")
        out_dims.append(-(-(limit - start) // stride))
    comp, root = build(
        [f"s32[{_shape(dims)}]"], f"s32[{_shape(out_dims)}] slice(p0), slice={{{', '.join(specs)}}}"
    )
    x = ints(dims, np.random.default_rng(4))
    (m,) = output_to_input_maps(root)
    check_gather_exact(m, x, run(comp, [x]))
    check_input_to_output(root, 0)


@SETTINGS
@given(dims=dims_st, data=st.data())
def test_pad(dims, data):
    configs, out_dims = [], []
    for n in dims:
        interior = data.draw(st.integers(0, 2))
        low = data.draw(st.integers(-1, 2))
        high = data.draw(st.integers(-1, 2))
        size = low + high + n + (n - 1) * interior
        if size < 1:
            low, high, size = 0, 0, n + (n - 1) * interior
        configs.append(f"{low}_{high}_{interior}")
        out_dims.append(size)
    comp, root = build(
        [f"s32[{_shape(dims)}]", "s32[]"],
        f"s32[{_shape(out_dims)}] pad(p0, p1), padding={'x'.join(configs)}",
    )
    x = ints(dims, np.random.default_rng(5), 1, 100)
    out = run(comp, [x, np.int32(-7)])
    operand_map, value_map = output_to_input_maps(root)
    assert value_map.results == () and value_map.num_dims == len(dims)
    table = points_by_output(operand_map)
    for o in np.ndindex(out.shape):
        pts = table.get(o, [])
        if pts:
            assert len(pts) == 1
            assert out[o] == x[operand_map.evaluate(o, pts[0])]
        else:
            assert out[o] == -7, (operand_map.format(), o)
    check_input_to_output(root, 0)
    check_input_to_output(root, 1)


def test_pad_map_text():
    _, root = build(["f32[4]", "f32[]"], "f32[12] pad(p0, p1), padding=1_4_1")
    operand_map, value_map = output_to_input_maps(root)
    assert str(operand_map) == (
        "(d0) -> ((d0 - 1) floordiv 2), domain: d0 in [0, 11], d0 - 1 in [0, 6],"
        " (d0 - 1) mod 2 in [0, 0]"
    )
    assert str(value_map) == "(d0) -> (), domain: d0 in [0, 11]"


@SETTINGS
@given(dims=dims_st, sizes=st.lists(st.integers(1, 3), min_size=1, max_size=3), data=st.data())
def test_concatenate(dims, sizes, data):
    axis = data.draw(st.integers(0, len(dims) - 1))
    shapes = [tuple(s if i == axis else n for i, n in enumerate(dims)) for s in sizes]
    out_dims = tuple(sum(sizes) if i == axis else n for i, n in enumerate(dims))
    params = [f"s32[{_shape(s)}]" for s in shapes]
    operands = ", ".join(f"p{i}" for i in range(len(shapes)))
    comp, root = build(
        params, f"s32[{_shape(out_dims)}] concatenate({operands}), dimensions={{{axis}}}"
    )
    rng = np.random.default_rng(6)
    xs = [ints(s, rng) for s in shapes]
    out = run(comp, xs)
    maps = output_to_input_maps(root)
    tables = [points_by_output(m) for m in maps]
    for o in np.ndindex(out.shape):
        hits = [(k, pts) for k, t in enumerate(tables) for pts in [t.get(o, [])] if pts]
        assert len(hits) == 1 and len(hits[0][1]) == 1
        k, (pt,) = hits[0]
        assert out[o] == xs[k][maps[k].evaluate(o, pt)]
    for k in range(len(shapes)):
        check_input_to_output(root, k)


@SETTINGS
@given(dims=dims_st, data=st.data())
def test_dynamic_slice(dims, data):
    sizes = [data.draw(st.integers(1, n)) for n in dims]
    offsets = [data.draw(st.integers(-2, n + 1)) for n in dims]
    params = [f"s32[{_shape(dims)}]"] + ["s32[]"] * len(dims)
    operands = ", ".join(f"p{i}" for i in range(len(params)))
    comp, root = build(
        params,
        f"s32[{_shape(sizes)}] dynamic-slice({operands}), dynamic_slice_sizes={{{_shape(sizes)}}}",
    )
    x = ints(dims, np.random.default_rng(7))
    out = run(comp, [x, *(np.int32(v) for v in offsets)])
    maps = output_to_input_maps(root)
    assert len(maps) == 1 + len(dims)
    assert all(m.results == () for m in maps[1:])
    clamped = tuple(min(max(v, 0), n - s) for v, n, s in zip(offsets, dims, sizes))
    assert all(
        v.bounds.lower == 0 and v.bounds.upper == n - s
        for v, n, s in zip(maps[0].runtime_vars, dims, sizes)
    )
    check_gather_exact(maps[0], x, out, clamped)


@SETTINGS
@given(dims=dims_st, data=st.data())
def test_dynamic_update_slice(dims, data):
    sizes = [data.draw(st.integers(1, n)) for n in dims]
    offsets = [data.draw(st.integers(-2, n + 1)) for n in dims]
    params = [f"s32[{_shape(dims)}]", f"s32[{_shape(sizes)}]"] + ["s32[]"] * len(dims)
    operands = ", ".join(f"p{i}" for i in range(len(params)))
    comp, root = build(params, f"s32[{_shape(dims)}] dynamic-update-slice({operands})")
    rng = np.random.default_rng(8)
    x, u = ints(dims, rng, 0, 50), ints(sizes, rng, 100, 150)
    out = run(comp, [x, u, *(np.int32(v) for v in offsets)])
    base_map, update_map, *offset_maps = output_to_input_maps(root)
    assert all(m.results == () for m in offset_maps)
    clamped = tuple(min(max(v, 0), n - s) for v, n, s in zip(offsets, dims, sizes))
    table = points_by_output(update_map, clamped)
    for o in np.ndindex(out.shape):
        pts = table.get(o, [])
        if pts:
            assert len(pts) == 1 and out[o] == u[update_map.evaluate(o, pts[0])]
        else:
            assert out[o] == x[base_map.evaluate(o)]


# -- reductions and contractions -----------------------------------------------------------------


@SETTINGS
@given(dims=dims_st, data=st.data())
def test_reduce(dims, data):
    reduced = sorted(data.draw(st.sets(st.integers(0, len(dims) - 1), min_size=1)))
    out_dims = [n for i, n in enumerate(dims) if i not in reduced]
    comp, root = build(
        [f"s32[{_shape(dims)}]", "s32[]"],
        f"s32[{_shape(out_dims)}] reduce(p0, p1), dimensions={{{_shape(reduced)}}}, to_apply=add",
        ADD_S32,
    )
    x = ints(dims, np.random.default_rng(9))
    out = run(comp, [x, np.int32(3)])
    input_map, init_map = output_to_input_maps(root)
    assert init_map.results == ()
    assert [v.bounds.upper + 1 for v in input_map.range_vars] == [dims[d] for d in reduced]
    table = points_by_output(input_map)
    for o in np.ndindex(out.shape):
        values = [x[input_map.evaluate(o, s)] for s in table[o]]
        assert len(values) == int(np.prod([dims[d] for d in reduced]))
        assert out[o] == 3 + sum(int(v) for v in values)
    check_input_to_output(root, 0)
    check_input_to_output(root, 1)


def test_variadic_reduce_maps_per_output():
    argmax = """
argmax {
  a = s32[] parameter(0)
  b = s32[] parameter(1)
  c = s32[] parameter(2)
  d = s32[] parameter(3)
  x = s32[] maximum(a, c)
  y = s32[] minimum(b, d)
  ROOT t = (s32[], s32[]) tuple(x, y)
}
"""
    _, root = build(
        ["s32[3,4]", "s32[3,4]", "s32[]", "s32[]"],
        "(s32[3], s32[3]) reduce(p0, p1, p2, p3), dimensions={1}, to_apply=argmax",
        argmax,
    )
    for k in (0, 1):
        maps = output_to_input_maps(root, k)
        assert [str(m) for m in maps] == [
            "(d0)[s0] -> (d0, s0), domain: d0 in [0, 2], s0 in [0, 3]"
        ] * 2 + ["(d0) -> (), domain: d0 in [0, 2]"] * 2


@SETTINGS
@given(dims=st.lists(st.integers(1, 5), min_size=1, max_size=2), data=st.data())
def test_reduce_window(dims, data):
    windows, out_dims = [], []
    for n in dims:
        size = data.draw(st.integers(1, 3))
        stride = data.draw(st.integers(1, 2))
        lhs_dil = data.draw(st.integers(1, 2))
        rhs_dil = data.draw(st.integers(1, 2))
        lo, hi = data.draw(st.integers(0, 2)), data.draw(st.integers(0, 2))
        padded = (n - 1) * lhs_dil + 1 + lo + hi
        span = (size - 1) * rhs_dil + 1
        if padded < span:
            lo, hi = 0, span
            padded = (n - 1) * lhs_dil + 1 + lo + hi
        out_dims.append((padded - span) // stride + 1)
        windows.append((size, stride, lo, hi, lhs_dil, rhs_dil))
    window = (
        "size=" + "x".join(str(w[0]) for w in windows)
        + " stride=" + "x".join(str(w[1]) for w in windows)
        + " pad=" + "x".join(f"{w[2]}_{w[3]}" for w in windows)
        + " lhs_dilate=" + "x".join(str(w[4]) for w in windows)
        + " rhs_dilate=" + "x".join(str(w[5]) for w in windows)
    )  # fmt: skip
    comp, root = build(
        [f"s32[{_shape(dims)}]", "s32[]"],
        f"s32[{_shape(out_dims)}] reduce-window(p0, p1), window={{{window}}}, to_apply=add",
        ADD_S32,
    )
    x = ints(dims, np.random.default_rng(10))
    out = run(comp, [x, np.int32(1)])
    input_map, init_map = output_to_input_maps(root)
    assert init_map.results == ()
    table = points_by_output(input_map)
    for o in np.ndindex(out.shape):
        total = 1 + sum(int(x[input_map.evaluate(o, s)]) for s in table.get(o, []))
        assert out[o] == total, (input_map.format(), o)


@SETTINGS
@given(
    batch=st.lists(st.integers(1, 3), max_size=1),
    m=st.integers(1, 3),
    n=st.integers(1, 3),
    k=st.lists(st.integers(1, 3), min_size=1, max_size=2),
    rhs_t=st.booleans(),
)
def test_dot(batch, m, n, k, rhs_t):
    nb, nk = len(batch), len(k)
    lhs = [*batch, m, *k]
    rhs = [*batch, *k, n] if not rhs_t else [*batch, n, *k]
    lc = list(range(nb + 1, nb + 1 + nk))
    rc = list(range(nb, nb + nk)) if not rhs_t else list(range(nb + 1, nb + 1 + nk))
    attrs = f"lhs_contracting_dims={{{_shape(lc)}}}, rhs_contracting_dims={{{_shape(rc)}}}"
    if nb:
        attrs += ", lhs_batch_dims={0}, rhs_batch_dims={0}"
    comp, root = build(
        [f"s32[{_shape(lhs)}]", f"s32[{_shape(rhs)}]"],
        f"s32[{_shape([*batch, m, n])}] dot(p0, p1), {attrs}",
    )
    rng = np.random.default_rng(11)
    a, b = ints(lhs, rng), ints(rhs, rng)
    out = run(comp, [a, b])
    lmap, rmap = output_to_input_maps(root)
    table = points_by_output(lmap)
    for o in np.ndindex(out.shape):
        total = sum(int(a[lmap.evaluate(o, s)]) * int(b[rmap.evaluate(o, s)]) for s in table[o])
        assert len(table[o]) == int(np.prod(k))
        assert out[o] == total


# -- gather / scatter ----------------------------------------------------------------------------


def _gather_case(batching: bool):
    if not batching:
        # operand [5,4,3]; indices [2,3,2] with index_vector_dim=1 (not last); offsets in the middle
        return (
            ["s32[5,4,3]", "s32[2,2,3]"],
            "s32[2,2,2,3] gather(p0, p1), offset_dims={1,2}, collapsed_slice_dims={0},"
            " start_index_map={0,2}, index_vector_dim=1, slice_sizes={1,2,2}",
            (5, 4, 3),
            (2, 2, 3),
        )
    return (
        ["s32[3,5,4]", "s32[3,2,1]"],
        "s32[3,2,2] gather(p0, p1), offset_dims={2}, collapsed_slice_dims={1},"
        " operand_batching_dims={0}, start_indices_batching_dims={0},"
        " start_index_map={1}, index_vector_dim=2, slice_sizes={1,1,2}",
        (3, 5, 4),
        (3, 2, 1),
    )


def _gather_runtime(root, indices: np.ndarray, o: tuple[int, ...]) -> tuple[int, ...]:
    """The clamped start index the evaluator used for output element ``o``."""
    operand = root.operands[0].shape
    attrs = root.attributes
    offset_dims = attrs["offset_dims"]
    ivd = attrs["index_vector_dim"]
    batch = [o[d] for d in range(len(o)) if d not in offset_dims]
    values = []
    for j, d in enumerate(attrs["start_index_map"]):
        idx = list(batch)
        idx.insert(ivd, j)
        start = int(indices[tuple(idx)]) if ivd < indices.ndim else int(indices[tuple(batch)])
        values.append(min(max(start, 0), operand.dims[d] - attrs["slice_sizes"][d]))
    return tuple(values)


@pytest.mark.parametrize("batching", [False, True])
@SETTINGS
@given(seed=st.integers(0, 10_000))
def test_gather(batching, seed):
    params, root_text, operand_dims, index_dims = _gather_case(batching)
    comp, root = build(params, root_text)
    rng = np.random.default_rng(seed)
    x = ints(operand_dims, rng)
    indices = rng.integers(-2, 7, size=index_dims).astype(np.int32)
    out = run(comp, [x, indices])
    operand_map, index_map = output_to_input_maps(root)
    for o in np.ndindex(out.shape):
        rt = _gather_runtime(root, indices, o)
        pts = [s for d, s in operand_map.domain_points() if d == o and s == rt]
        assert len(pts) == 1
        assert out[o] == x[operand_map.evaluate(o, pts[0])]
        # the indices map reads exactly the index vector used for this element
        read = {index_map.evaluate(d, s) for d, s in index_map.domain_points() if d == o}
        assert len(read) == len(root.attributes["start_index_map"])


def test_scatter_maps():
    text = """HloModule m
add {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT r = f32[] add(a, b)
}
ENTRY e {
  p0 = f32[4,3] parameter(0)
  p1 = s32[2,1] parameter(1)
  p2 = f32[2,3] parameter(2)
  ROOT r = f32[4,3] scatter(p0, p1, p2), update_window_dims={1}, inserted_window_dims={0},
      scatter_dims_to_operand_dims={0}, index_vector_dim=1, to_apply=add
}
"""
    root = parse_module(text).entry.root
    operand_map, index_map, update_map = output_to_input_maps(root)
    assert operand_map == IndexingMap.identity((4, 3))
    assert str(index_map) == (
        "(d0, d1)[s0, s1] -> (s0, s1), domain: d0 in [0, 3], d1 in [0, 2], s0 in [0, 1],"
        " s1 in [0, 0]"
    )
    assert {update_map.evaluate(d, s) for d, s in update_map.domain_points()} == set(
        np.ndindex(2, 3)
    )


def test_tuple_and_get_tuple_element():
    _, root = build(["f32[2]", "f32[3]"], "(f32[2], f32[3]) tuple(p0, p1)")
    m0, m1 = output_to_input_maps(root, 1)
    assert m1 == IndexingMap.identity((3,))
    assert not list(m0.domain_points())  # element 0 is not read for result 1
    text = """HloModule m
ENTRY e {
  p0 = (f32[2], f32[3]) parameter(0)
  ROOT g = f32[3] get-tuple-element(p0), index=1
}
"""
    root = parse_module(text).entry.root
    assert output_to_input_maps(root) == [IndexingMap.identity((3,))]


def test_unsupported_op_names_instruction():
    text = """HloModule m
ENTRY e {
  p0 = f32[4] parameter(0)
  ROOT c = f32[4] custom-call(p0), custom_call_target="foo"
}
"""
    root = parse_module(text).entry.root
    with pytest.raises(UnsupportedError, match="'c' \\(custom-call\\)"):
        output_to_input_maps(root)
    with pytest.raises(UnsupportedError, match="custom-call"):
        input_to_output_map(root, 0)


# -- input to output ------------------------------------------------------------------------------


def check_input_to_output(root, operand_index: int) -> None:
    """The reverse map agrees with the forward one: p feeds q iff q reads p."""
    forward = output_to_input_maps(root)[operand_index]
    backward = input_to_output_map(root, operand_index)
    reads = set()
    for o, s in forward.domain_points():
        reads.add((forward.evaluate(o, s), o))
    feeds = set()
    for i, s in backward.domain_points():
        feeds.add((i, backward.evaluate(i, s)))
    assert reads == feeds, (forward.format(), backward.format())


def test_input_to_output_examples():
    _, root = build(["f32[3]"], "f32[2,3,4] broadcast(p0), dimensions={1}")
    assert str(input_to_output_map(root, 0)) == (
        "(d0)[s0, s1] -> (s0, d0, s1), domain: d0 in [0, 2], s0 in [0, 1], s1 in [0, 3]"
    )
    _, root = build(["f32[2,3]", "f32[2,3]"], "f32[2,3] add(p0, p1)")
    assert input_to_output_map(root, 1) == IndexingMap.identity((2, 3))
    _, root = build(["f32[8]"], "f32[3] slice(p0), slice={[1:8:3]}")
    assert str(input_to_output_map(root, 0)) == (
        "(d0) -> ((d0 - 1) floordiv 3), domain: d0 in [0, 7], d0 - 1 in [0, 6],"
        " (d0 - 1) mod 3 in [0, 0]"
    )
    assert isinstance(Constant(0), Constant) and Symbol(0) != Dim(0)


def test_bitcast_of_a_memory_space_is_indexed_and_of_a_tile_is_refused():
    comp, root = build(["s32[3,4]{1,0:S(1)}"], "s32[12]{0} bitcast(p0)")
    x = ints((3, 4), np.random.default_rng(3))
    (m,) = output_to_input_maps(root)
    check_gather_exact(m, x, run(comp, [x]))
    _, root = build(["s32[3,4]{1,0:T(8,128)}"], "s32[12]{0} bitcast(p0)")
    with pytest.raises(UnsupportedError, match="tiled layout"):
        output_to_input_maps(root)


def test_bitcast_asks_layout_is_tiled(monkeypatch):
    """The indexing's refusal is Layout.is_tiled's answer, not a second test of the suffix."""
    from heron.hlo.shapes import Layout

    _, root = build(["s32[3,4]{1,0}"], "s32[12]{0} bitcast(p0)")
    monkeypatch.setattr(Layout, "is_tiled", property(lambda layout: True))
    with pytest.raises(UnsupportedError, match="tiled layout"):
        output_to_input_maps(root)


# -- the memo by form ---------------------------------------------------------------------------


def test_maps_are_memoised_by_form_not_by_instruction():
    """Two ops of one form (opcode, shapes, attributes but metadata and called computations)
    share their maps; another attribute value is another form, and a list handed out
    is the caller's own."""
    from heron.indexing.hlo_indexing import forget_maps, indexing_form

    forget_maps()
    module = parse_module(
        f"""HloModule m
{ADD_S32}
ENTRY e {{
  p = s32[4,6] parameter(0)
  z = s32[] constant(0)
  a = s32[4] reduce(p, z), dimensions={{1}}, to_apply=add, metadata={{op_name="a"}}
  b = s32[4] reduce(p, z), dimensions={{1}}, to_apply=add, metadata={{op_name="b"}}
  c = s32[6] reduce(p, z), dimensions={{0}}, to_apply=add
  ROOT t = (s32[4], s32[4], s32[6]) tuple(a, b, c)
}}
"""
    )
    a, b, c = (module.entry.instruction(name) for name in "abc")
    assert indexing_form(a) == indexing_form(b) != indexing_form(c)
    first = output_to_input_maps(a)
    first.append(None)  # the caller's list, not the memo's
    assert output_to_input_maps(b) == output_to_input_maps(a) == first[:-1]
    assert output_to_input_maps(c) != output_to_input_maps(a)
    assert output_to_input_maps(c)[0].format() != output_to_input_maps(a)[0].format()


def test_a_refusal_is_not_memoised_and_names_its_instruction():
    from heron.indexing.hlo_indexing import forget_maps

    forget_maps()
    module = parse_module(
        """HloModule m
ENTRY e {
  p = s32[4] parameter(0)
  x = s32[4] custom-call(p), custom_call_target="first"
  y = s32[4] custom-call(p), custom_call_target="first"
  ROOT t = (s32[4], s32[4]) tuple(x, y)
}
"""
    )
    for name in ("x", "y"):
        with pytest.raises(UnsupportedError, match=f"'{name}' \\(custom-call\\)"):
            output_to_input_maps(module.entry.instruction(name))
