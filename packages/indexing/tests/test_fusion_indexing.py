"""Maps through whole fused computations, checked against the reference evaluator."""

from __future__ import annotations

import re
import time
from collections import defaultdict

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from heron.hlo import UnsupportedError, parse_module, parse_module_file
from heron.hlo.evaluator import evaluate_computation
from heron.hlo.fusion_outputs import fusion_roots
from heron.hlo.shapes import ArrayShape
from heron.indexing.fusion_indexing import fusion_input_maps, map_key
from heron.indexing.indexing_map import IndexingMap

PAD_VALUE = -999

ADD_S32 = """
add {
  a = s32[] parameter(0)
  b = s32[] parameter(1)
  ROOT r = s32[] add(a, b)
}
"""


def _dims_text(dims) -> str:
    return ",".join(str(d) for d in dims)


def _fused(body: list[str], extra: str = ""):
    """Parse a module with one fused computation ``fused``; return that computation."""
    text = f"HloModule m\n{extra}\nfused {{\n" + "\n".join(body) + "\n}\n"
    module = parse_module(text)
    return module.computation("fused")


# -- random chains of data-movement ops ---------------------------------------------------------


class _Chain:
    """Builds ``fused`` as a chain of random index ops from one parameter."""

    def __init__(self, dims: tuple[int, ...]) -> None:
        self.dims = dims
        self.lines = [
            f"  p0 = s32[{_dims_text(dims)}] parameter(0)",
            f"  pv = s32[] constant({PAD_VALUE})",
        ]
        self.current = "p0"
        self.count = 0
        self.has_pad = False

    def emit(self, dims, text: str) -> None:
        self.count += 1
        name = f"v{self.count}"
        self.lines.append(f"  {name} = s32[{_dims_text(dims)}] {text}")
        self.current, self.dims = name, tuple(dims)

    def step(self, data) -> None:
        dims, x = self.dims, self.current
        choices = ["transpose", "reverse", "slice", "pad", "reshape", "bitcast"]
        if len(dims) < 3:
            choices.append("broadcast")
        kind = data.draw(st.sampled_from(choices))
        if kind == "transpose":
            perm = data.draw(st.permutations(range(len(dims))))
            self.emit([dims[p] for p in perm], f"transpose({x}), dimensions={{{_dims_text(perm)}}}")
        elif kind == "reverse":
            rev = sorted(data.draw(st.sets(st.integers(0, len(dims) - 1), min_size=1)))
            self.emit(dims, f"reverse({x}), dimensions={{{_dims_text(rev)}}}")
        elif kind == "slice":
            specs, out = [], []
            for n in dims:
                start = data.draw(st.integers(0, n - 1))
                limit = data.draw(st.integers(start + 1, n))
                stride = data.draw(st.integers(1, 2))
                specs.append(f"[{start}:{limit}:{stride}]")
                out.append(-(-(limit - start) // stride))
            self.emit(out, f"slice({x}), slice={{{', '.join(specs)}}}")
        elif kind == "pad":
            configs, out = [], []
            for n in dims:
                low, high = data.draw(st.integers(-1, 1)), data.draw(st.integers(0, 1))
                interior = data.draw(st.integers(0, 1))
                size = n + low + high + (n - 1) * interior
                if size < 1:
                    low, size = 0, n + high + (n - 1) * interior
                configs.append(f"{low}_{high}_{interior}")
                out.append(size)
            self.has_pad = True
            self.emit(out, f"pad({x}, pv), padding={'x'.join(configs)}")
        elif kind == "broadcast":
            pos = data.draw(st.integers(0, len(dims)))
            size = data.draw(st.integers(1, 3))
            out = [*dims[:pos], size, *dims[pos:]]
            mapping = [i if i < pos else i + 1 for i in range(len(dims))]
            self.emit(out, f"broadcast({x}), dimensions={{{_dims_text(mapping)}}}")
        elif kind in ("reshape", "bitcast"):
            out = self._reshaped(dims, data)
            if kind == "reshape":
                self.emit(out, f"reshape({x})")
            else:
                layout = data.draw(st.permutations(range(len(out))))
                self.count += 1
                name = f"v{self.count}"
                self.lines.append(
                    f"  {name} = s32[{_dims_text(out)}]{{{_dims_text(layout)}}} bitcast({x})"
                )
                self.current, self.dims = name, tuple(out)

    @staticmethod
    def _reshaped(dims, data) -> list[int]:
        if len(dims) >= 2 and data.draw(st.booleans()):
            i = data.draw(st.integers(0, len(dims) - 2))  # merge i and i+1
            return [*dims[:i], dims[i] * dims[i + 1], *dims[i + 2 :]]
        i = data.draw(st.integers(0, len(dims) - 1))  # split i if it has a factor
        n = dims[i]
        factors = [f for f in range(2, n) if n % f == 0]
        if not factors or len(dims) >= 3:
            return list(reversed(dims)) if len(dims) > 1 else [*dims, 1]
        f = data.draw(st.sampled_from(factors))
        return [*dims[:i], f, n // f, *dims[i + 1 :]]


def _by_output(m: IndexingMap):
    table = defaultdict(list)
    for dims, syms in m.domain_points():
        table[dims].append(syms)
    return table


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    dims=st.lists(st.integers(1, 4), min_size=1, max_size=3).map(tuple),
    steps=st.integers(1, 4),
    data=st.data(),
)
def test_random_chains_reproduce_the_evaluator(dims, steps, data):
    chain = _Chain(dims)
    for _ in range(steps):
        chain.step(data)
    chain.lines[-1] = chain.lines[-1].replace(f"  {chain.current} =", f"  ROOT {chain.current} =")
    comp = _fused(chain.lines)
    x = np.random.default_rng(0).integers(0, 100, size=dims).astype(np.int32)
    out = evaluate_computation(comp, [x])
    maps = fusion_input_maps(comp)
    (param,) = [p for p in maps]
    if not maps[param]:  # only padding reaches the output: the read was proven dead
        assert chain.has_pad and (out == PAD_VALUE).all()
        return
    assert len(maps[param]) == 1, [str(m) for m in maps[param]]
    (m,) = maps[param]
    assert m.num_dims == out.ndim and m.num_results == x.ndim
    table = _by_output(m)
    for o in np.ndindex(out.shape):
        pts = table.get(o, [])
        if pts:
            assert len(pts) == 1, (m.format(), o, pts)
            assert out[o] == x[m.evaluate(o, pts[0])], (m.format(), o)
        else:
            assert chain.has_pad and out[o] == PAD_VALUE, (m.format(), o)


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    dims=st.lists(st.integers(1, 4), min_size=2, max_size=3).map(tuple),
    steps=st.integers(0, 2),
    data=st.data(),
)
def test_random_chains_into_a_reduce(dims, steps, data):
    chain = _Chain(dims)
    for _ in range(steps):
        chain.step(data)
    if chain.has_pad:  # the pad value would join the sum: keep the check simple
        return
    rank = len(chain.dims)
    reduced = sorted(data.draw(st.sets(st.integers(0, rank - 1), min_size=1)))
    out_dims = [n for i, n in enumerate(chain.dims) if i not in reduced]
    chain.lines.append("  zero = s32[] constant(0)")
    chain.lines.append(
        f"  ROOT r = s32[{_dims_text(out_dims)}] reduce({chain.current}, zero),"
        f" dimensions={{{_dims_text(reduced)}}}, to_apply=add"
    )
    comp = _fused(chain.lines, ADD_S32)
    x = np.random.default_rng(1).integers(-50, 50, size=dims).astype(np.int32)
    out = evaluate_computation(comp, [x])
    (m,) = next(iter(fusion_input_maps(comp).values()))
    table = _by_output(m)
    for o in np.ndindex(out.shape):
        assert out[o] == sum(int(x[m.evaluate(o, s)]) for s in table[o]), m.format()


# -- several paths ---------------------------------------------------------------------------------


def test_two_paths_give_two_maps_that_reproduce_the_sum():
    comp = _fused(
        [
            "  p0 = s32[3,3] parameter(0)",
            "  t = s32[3,3] transpose(p0), dimensions={1,0}",
            "  r = s32[3,3] reverse(p0), dimensions={0}",
            "  ROOT a = s32[3,3] add(t, r)",
        ]
    )
    x = np.arange(9, dtype=np.int32).reshape(3, 3) * 7
    out = evaluate_computation(comp, [x])
    (maps,) = fusion_input_maps(comp).values()
    assert sorted(m.evaluate((0, 1)) for m in maps) == [(1, 0), (2, 1)]
    for o in np.ndindex(out.shape):
        assert out[o] == sum(int(x[m.evaluate(o)]) for m in maps)


def _diamonds(n: int, twist: bool) -> list[str]:
    lines = ["  p0 = s32[4,4] parameter(0)"]
    x = "p0"
    for i in range(n):
        left = f"  l{i} = s32[4,4] " + (
            f"reverse({x}), dimensions={{0}}" if twist else f"negate({x})"
        )
        lines += [left, f"  r{i} = s32[4,4] abs({x})"]
        root = "ROOT " if i == n - 1 else ""
        lines.append(f"  {root}x{i} = s32[4,4] add(l{i}, r{i})")
        x = f"x{i}"
    return lines


@pytest.mark.parametrize("twist", [False, True])
def test_thirty_diamonds_do_not_explode(twist):
    comp = _fused(_diamonds(30, twist))
    start = time.perf_counter()
    (maps,) = fusion_input_maps(comp).values()
    elapsed = time.perf_counter() - start
    # 2**30 paths, but only 1 (or 2: reversed an even or odd number of times) distinct maps.
    assert len(maps) == (2 if twist else 1)
    assert IndexingMap.identity((4, 4)) in maps or any(
        map_key(m) == map_key(IndexingMap.identity((4, 4))) for m in maps
    )
    assert elapsed < 5.0


# -- roots -----------------------------------------------------------------------------------------


def test_tuple_root_and_root_index():
    comp = _fused(
        [
            "  p0 = f32[2,3] parameter(0)",
            "  p1 = f32[3] parameter(1)",
            "  t = f32[3,2] transpose(p0), dimensions={1,0}",
            "  b = f32[2,3] broadcast(p1), dimensions={1}",
            "  e = f32[2,3] exponential(p0)",
            "  ROOT out = (f32[3,2], f32[2,3]) tuple(t, e)",
        ]
    )
    p0, p1 = comp.parameters
    everything = fusion_input_maps(comp)
    assert sorted(str(m) for m in everything[p0]) == [
        "(d0, d1) -> (d0, d1), domain: d0 in [0, 1], d1 in [0, 2]",
        "(d0, d1) -> (d1, d0), domain: d0 in [0, 2], d1 in [0, 1]",
    ]
    assert everything[p1] == []  # b is dead
    first = fusion_input_maps(comp, root_index=0)
    assert [str(m) for m in first[p0]] == [
        "(d0, d1) -> (d1, d0), domain: d0 in [0, 2], d1 in [0, 1]"
    ]
    with pytest.raises(IndexError, match="root_index 2"):
        fusion_input_maps(comp, root_index=2)


_VARIADIC_SCATTER = """
pick {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  c = f32[] parameter(2)
  d = f32[] parameter(3)
  ROOT t = (f32[], f32[]) tuple(c, d)
}
"""
_SCATTER_OPERANDS = [
    "  p0 = f32[6] parameter(0)",
    "  p1 = f32[6] parameter(1)",
    "  i = s32[2,1] parameter(2)",
    "  u0 = f32[2] parameter(3)",
    "  u1 = f32[2] parameter(4)",
]
_SCATTER = (
    "s = (f32[6], f32[6]) scatter(p0, p1, i, u0, u1), update_window_dims={},"
    " inserted_window_dims={0}, scatter_dims_to_operand_dims={0}, index_vector_dim=1,"
    " to_apply=pick"
)


@pytest.mark.parametrize("in_a_tuple", [False, True], ids=["alone", "in-a-root-tuple"])
def test_a_root_of_tuple_shape_walks_every_result(in_a_tuple):
    """A variadic scatter as a root is one root (heron.hlo.fusion_outputs.fusion_roots)
    filling two outputs; result ``k`` reads operand ``k`` element for element, so
    both results are walked, whether the scatter is the root or in the root tuple
    (which walked result 0 alone when fusion_indexing chose its roots itself)."""
    if in_a_tuple:
        root = [
            f"  {_SCATTER}",
            "  e = f32[6] exponential(p0)",
            "  ROOT out = ((f32[6], f32[6]), f32[6]) tuple(s, e)",
        ]
    else:
        root = [f"  ROOT {_SCATTER}"]
    comp = _fused([*_SCATTER_OPERANDS, *root], _VARIADIC_SCATTER)
    p0, p1 = comp.parameters[:2]
    identity = "(d0) -> (d0), domain: d0 in [0, 5]"
    for maps in (fusion_input_maps(comp), fusion_input_maps(comp, root_index=0)):
        assert [str(m) for m in maps[p0]] == [identity]
        assert [str(m) for m in maps[p1]] == [identity]
    # root_index counts roots, not outputs: a lone scatter is one root.
    with pytest.raises(IndexError, match=f"has {2 if in_a_tuple else 1} root"):
        fusion_input_maps(comp, root_index=2 if in_a_tuple else 1)


def test_multi_output_reduce_through_get_tuple_element():
    argminmax = """
mm {
  a = s32[] parameter(0)
  b = s32[] parameter(1)
  c = s32[] parameter(2)
  d = s32[] parameter(3)
  x = s32[] maximum(a, c)
  y = s32[] minimum(b, d)
  ROOT t = (s32[], s32[]) tuple(x, y)
}
"""
    comp = _fused(
        [
            "  p0 = s32[4,5] parameter(0)",
            "  p1 = s32[5,4] parameter(1)",
            "  t = s32[4,5] transpose(p1), dimensions={1,0}",
            "  z = s32[] constant(0)",
            "  r = (s32[4], s32[4]) reduce(p0, t, z, z), dimensions={1}, to_apply=mm",
            "  ROOT g = s32[4] get-tuple-element(r), index=1",
        ],
        argminmax,
    )
    p0, p1 = comp.parameters
    maps = fusion_input_maps(comp)
    assert [str(m) for m in maps[p0]] == [
        "(d0)[s0] -> (d0, s0), domain: d0 in [0, 3], s0 in [0, 4]"
    ]
    assert [str(m) for m in maps[p1]] == [
        "(d0)[s0] -> (s0, d0), domain: d0 in [0, 3], s0 in [0, 4]"
    ]


def test_dynamic_slice_in_a_fusion_keeps_runtime_symbols():
    comp = _fused(
        [
            "  p0 = s32[8,6] parameter(0)",
            "  i = s32[] parameter(1)",
            "  z = s32[] constant(0)",
            "  d = s32[2,6] dynamic-slice(p0, i, z), dynamic_slice_sizes={2,6}",
            "  ROOT t = s32[6,2] transpose(d), dimensions={1,0}",
        ]
    )
    p0, i = comp.parameters
    maps = fusion_input_maps(comp)
    (m,) = maps[p0]
    assert len(m.runtime_vars) >= 1 and m.runtime_vars[0].bounds.upper == 6
    x = np.arange(48, dtype=np.int32).reshape(8, 6)
    for offset in (-3, 2, 9):
        out = evaluate_computation(comp, [x, np.int32(offset)])
        clamped = min(max(offset, 0), 6)
        rt = [clamped, 0][: len(m.runtime_vars)]
        nr = len(m.range_vars)
        for o in np.ndindex(out.shape):
            (pt,) = [s for d, s in m.domain_points() if d == o and list(s[nr:]) == rt]
            assert out[o] == x[m.evaluate(o, pt)]
    assert [m.results for m in maps[i]] == [()]


# -- the corpus ------------------------------------------------------------------------------

_NAMED_OP = re.compile(r"'[^']+' \([a-z-]+\)")


def test_corpus_fusions(corpus_file):
    module = parse_module_file(corpus_file)
    fused = [
        c
        for c in module.computations
        if any(i.opcode == "fusion" and i.called("calls") is c for i in module.instructions())
    ]
    if not fused:  # the corpus form whose ENTRY is the fused computation itself
        fused = [module.entry]
    for comp in fused:
        try:
            maps = fusion_input_maps(comp)
        except UnsupportedError as error:  # allowed, but it must name the op
            assert _NAMED_OP.search(str(error)), str(error)
            continue
        assert set(maps) == set(comp.parameters)
        root = comp.root_instruction
        roots = fusion_roots(comp)
        ranks = {len(r.shape.dims) for r in roots if isinstance(r.shape, ArrayShape)}
        for param, param_maps in maps.items():
            for m in param_maps:
                assert not m.has_trivially_empty_domain(), m.format()
                if isinstance(param.shape, ArrayShape):
                    assert m.num_results in (0, param.shape.rank), (param.name, m.format())
                if ranks and root.opcode != "tuple" and isinstance(root.shape, ArrayShape):
                    assert m.num_dims in ranks
