"""The sort emitter against the reference evaluator, bitwise, on the interpreter.

Each sort is a one-instruction fusion compiled through a registry holding the
loop and sort emitters (the dev environment's entry points may predate the
plugin), run on the interpreter device (sanitizer on) with 32- and 64-lane
warps, and compared bit for bit with ``evaluate_module``: float keys with NaN
of both signs, -0.0, infinities and ties; bf16, s32, u8 and pred keys;
ascending and descending comparators; argsort (key + s32 iota) and key +
payload sorts, stable and unstable; rows of 1 to 1,024 elements, several rows
per block and a partial last block; sorts along a non-minor dimension. The
kernels compile to PTX that ptxas accepts (sm_80, sm_90) and to gfx942 HSACO.
"""

from __future__ import annotations

import contextlib
from unittest import mock

import attrs
import ml_dtypes
import numpy as np
import pytest
from heron_test_support.analysis import analysed, artefact_text, compile_everywhere

import heron.plugins.loop as loop_plugin
import heron.plugins.sort as sort_plugin
from heron.compiler import compile_fusion, fusions_of
from heron.compiler.device_kernels import run_on_device, target_for_device
from heron.emitters.registry import EmitterRegistry
from heron.harness import check_file
from heron.hlo.errors import UnsupportedError
from heron.hlo.evaluator import evaluate_module
from heron.hlo.parser import parse_module
from heron.plugins.sort import SortEmitter
from heron.runtime.cuda.ptx_statistics import kernel_statistics
from heron.runtime.interpreter.device import InterpreterDevice

REGISTRY = EmitterRegistry(
    [(spec, None) for plugin in (loop_plugin, sort_plugin) for spec in plugin.heron_emitter_specs()]
)

FLOAT_EDGES = [np.nan, -np.nan, np.inf, -np.inf, 0.0, -0.0, 1.0, -1.0, 1.0, 2.5, -2.5]


def _shape(dtype: str, dims: tuple[int, ...]) -> str:
    return f"{dtype}[{','.join(map(str, dims))}]"


def sort_module(
    key: str,
    dims: tuple[int, ...],
    dimension: int,
    *,
    direction: str = "LT",
    total_order: bool = True,
    stable: bool = False,
    extra: str | tuple[str, ...] = (),
    iota: bool = False,
) -> str:
    """A module whose one fusion sorts a ``key`` array (then an s32 iota, then ``extra``
    payload parameters) along ``dimension`` by ``compare(p0, p1), direction=...``."""
    extras = (extra,) if isinstance(extra, str) else tuple(extra)
    floating = key in ("f32", "bf16", "f16", "f64", "f8e4m3fn")
    kind = ", type=TOTALORDER" if floating and total_order else ""
    operands = [key, *(["s32"] if iota else []), *extras]
    params = "\n".join(
        f"  p{2 * k} = {t}[] parameter({2 * k})\n  p{2 * k + 1} = {t}[] parameter({2 * k + 1})"
        for k, t in enumerate(operands)
    )
    shapes = [_shape(t, dims) for t in operands]
    result = shapes[0] if len(shapes) == 1 else f"({', '.join(shapes)})"
    fused = [f"  k = {shapes[0]} parameter(0)"]
    names = ["k"]
    if iota:
        fused.append(f"  i = {shapes[1]} iota(), iota_dimension={dimension}")
        names.append("i")
    payloads = shapes[len(shapes) - len(extras) :]
    for n, shape in enumerate(payloads, start=1):
        fused.append(f"  v{n} = {shape} parameter({n})")
        names.append(f"v{n}")
    entry = [f"  x{n} = {shape} parameter({n})" for n, shape in enumerate([shapes[0], *payloads])]
    args = ", ".join(f"x{n}" for n in range(len(entry)))
    stable_attr = ", is_stable=true" if stable else ""
    newline = "\n"
    return f"""
cmp {{
{params}
  ROOT c = pred[] compare(p0, p1), direction={direction}{kind}
}}
fused {{
{newline.join(fused)}
  ROOT s = {result} sort({", ".join(names)}), dimensions={{{dimension}}}{stable_attr},
    to_apply=cmp
}}
ENTRY e {{
{newline.join(entry)}
  ROOT f = {result} fusion({args}), kind=kLoop, calls=fused
}}
"""


def _values(dtype: str, dims: tuple[int, ...], rng: np.random.Generator) -> np.ndarray:
    """Values with ties (and NaN of both signs, signed zeros, infinities for floats)."""
    count = int(np.prod(dims))
    if dtype in ("f32", "bf16"):
        pool = np.array(FLOAT_EDGES + list(rng.standard_normal(8)), np.float64)
        numpy_type = np.float32 if dtype == "f32" else ml_dtypes.bfloat16
        return rng.choice(pool, count).astype(numpy_type).reshape(dims)
    if dtype in ("f16", "f8e4m3fn"):
        numpy_type = np.float16 if dtype == "f16" else ml_dtypes.float8_e4m3fn
        pool = np.array([np.nan, -np.nan, 0.0, -0.0, 1.0, -1.0, 3.5, -0.25], np.float64)
        return rng.choice(pool, count).astype(numpy_type).reshape(dims)
    if dtype == "s4":
        return rng.integers(-8, 8, count).astype(ml_dtypes.int4).reshape(dims)
    if dtype == "s32":
        return rng.integers(-5, 6, count).astype(np.int32).reshape(dims)
    if dtype == "u8":
        return rng.integers(0, 256, count).astype(np.uint8).reshape(dims)
    if dtype == "pred":
        return rng.integers(0, 2, count).astype(bool).reshape(dims)
    raise AssertionError(f"no test values for {dtype}")


def _bits(x: np.ndarray) -> np.ndarray:
    x = np.ascontiguousarray(x)
    return x.view(np.uint8) if x.dtype != bool else x


def run_sort(text: str, inputs: list[np.ndarray], warp: int = 32, *, written_out: bool = False):
    """(kernel outputs, evaluator outputs, compiled kernel) of the module's one fusion.

    ``written_out``: the network's steps written out, as on a grid of more blocks than
    the device has cores (``SortPlan.rolled`` false); otherwise the small grids of these
    tests keep them loops."""
    module = parse_module(text)
    (fusion,) = fusions_of(module)
    device = InterpreterDevice(warp_size=warp)
    target = target_for_device(device, "interpreter", None)
    rolled_never = mock.patch.object(sort_plugin, "one_block_per_core", lambda *_: False)
    with rolled_never if written_out else contextlib.nullcontext():
        kernel = compile_fusion(fusion, target, "interpreter", emitters=REGISTRY)
    assert kernel.emitter == "sort"
    run = run_on_device(device, kernel, inputs)
    expected = evaluate_module(parse_module(text), inputs)
    expected = list(expected) if isinstance(expected, tuple) else [expected]
    return [np.asarray(o) for o in run.outputs], [np.asarray(e) for e in expected], kernel


def assert_bitwise(got: list[np.ndarray], want: list[np.ndarray]) -> None:
    assert len(got) == len(want)
    for k, (g, w) in enumerate(zip(got, want, strict=True)):
        assert g.dtype == w.dtype and g.shape == w.shape, (k, g.dtype, w.dtype)
        assert np.array_equal(_bits(g), _bits(w)), f"output {k}:\n{g}\n!=\n{w}"


@pytest.mark.parametrize("length", [1, 2, 3, 31, 32, 33, 1024])
@pytest.mark.parametrize("warp", [32, 64])
@pytest.mark.parametrize("written_out", [False, True])
def test_f32_total_order_rows_of_every_length(length, warp, written_out):
    rng = np.random.default_rng(length)
    dims = (5, length)
    text = sort_module("f32", dims, 1)
    got, want, _ = run_sort(text, [_values("f32", dims, rng)], warp, written_out=written_out)
    assert_bitwise(got, want)


@pytest.mark.parametrize("dtype", ["f32", "bf16", "f16", "f8e4m3fn", "s32", "u8", "s4", "pred"])
@pytest.mark.parametrize("direction", ["LT", "GT"])
def test_every_key_type_both_directions(dtype, direction):
    rng = np.random.default_rng(7)
    dims = (3, 33)
    text = sort_module(dtype, dims, 1, direction=direction)
    got, want, _ = run_sort(text, [_values(dtype, dims, rng)])
    assert_bitwise(got, want)


@pytest.mark.parametrize("dtype", ["f32", "bf16", "s32", "u8", "pred"])
@pytest.mark.parametrize("length", [32, 100])
@pytest.mark.parametrize("warp", [32, 64])
@pytest.mark.parametrize("written_out", [False, True])
def test_stable_argsort_with_ties(dtype, length, warp, written_out):
    """key + s32 iota, is_stable: ties keep their original order (the evaluator's)."""
    rng = np.random.default_rng(length)
    dims = (4, length)
    text = sort_module(dtype, dims, 1, stable=True, iota=True)
    got, want, kernel = run_sort(text, [_values(dtype, dims, rng)], warp, written_out=written_out)
    assert_bitwise(got, want)
    assert kernel.emitter == "sort"


def test_stable_sort_with_a_float_comparator_keeps_zeros_in_order():
    """A plain LT (no TOTALORDER) sees -0.0 == 0.0: only stability decides their order."""
    rng = np.random.default_rng(3)
    dims = (2, 64)
    keys = rng.choice(np.array([0.0, -0.0, 1.0, -1.0], np.float32), dims).astype(np.float32)
    payload = np.arange(128, dtype=np.int32).reshape(dims)
    text = sort_module("f32", dims, 1, total_order=False, stable=True, extra="s32")
    got, want, _ = run_sort(text, [keys, payload])
    assert_bitwise(got, want)


@pytest.mark.parametrize("payload", ["f32", "u8", "pred"])
def test_unstable_key_and_payload_with_distinct_keys(payload):
    """Without stability, distinct keys make the result unique: compare it bitwise."""
    rng = np.random.default_rng(11)
    dims = (3, 50)
    keys = np.stack([rng.permutation(50) for _ in range(3)]).astype(np.int32)
    values = _values(payload, dims, rng)
    text = sort_module("s32", dims, 1, direction="GT", extra=payload)
    got, want, _ = run_sort(text, [keys, values])
    assert_bitwise(got, want)


def test_unstable_sort_with_ties_is_a_sorted_permutation():
    """Ties may come out in any order without is_stable: keys equal the evaluator's and
    every (key, payload) pair of a row is still there."""
    rng = np.random.default_rng(5)
    dims = (4, 77)
    keys = rng.integers(0, 5, dims).astype(np.int32)
    payload = np.arange(4 * 77, dtype=np.int32).reshape(dims)
    text = sort_module("s32", dims, 1, extra="s32")
    got, want, _ = run_sort(text, [keys, payload])
    assert np.array_equal(got[0], want[0])
    for row in range(4):
        pairs = sorted(zip(got[0][row], got[1][row], strict=True))
        assert pairs == sorted(zip(keys[row], payload[row], strict=True))


@pytest.mark.parametrize(("dims", "dimension"), [((33, 3), 0), ((2, 31, 3), 1), ((32, 2, 2), 0)])
def test_sort_along_a_non_minor_dimension(dims, dimension):
    rng = np.random.default_rng(len(dims))
    text = sort_module("f32", dims, dimension, stable=True, iota=True)
    got, want, _ = run_sort(text, [_values("f32", dims, rng)])
    assert_bitwise(got, want)


@pytest.mark.parametrize("written_out", [False, True])
def test_short_rows_share_a_block_and_a_partial_block_is_guarded(written_out):
    rng = np.random.default_rng(1)
    dims = (9, 31)  # 16 pairs a row, 8 rows a block: 2 blocks, the second partial
    text = sort_module("s32", dims, 1)
    got, want, kernel = run_sort(text, [_values("s32", dims, rng)], written_out=written_out)
    assert_bitwise(got, want)
    assert kernel.grid[0] == 2 and kernel.block[0] == 128


def _fusion(text: str):
    (fusion,) = fusions_of(parse_module(text))
    return fusion


def test_a_stable_sort_breaks_ties_with_its_iota_operand_or_a_position_tile():
    argsort = SortEmitter(analysed(_fusion(sort_module("f32", (2, 40), 1, stable=True, iota=True))))
    assert argsort.plan.positions == 1 and not argsort.plan.position_tile
    keyed = SortEmitter(analysed(_fusion(sort_module("f32", (2, 40), 1, stable=True, extra="s32"))))
    assert keyed.plan.positions is None and keyed.plan.position_tile
    emitted = str(keyed.emit().module)
    assert emitted.count("heron_gpu.allocate_shared") == 3  # key, payload, positions
    unstable = SortEmitter(analysed(_fusion(sort_module("f32", (2, 40), 1, iota=True))))
    assert unstable.plan.positions is None and not unstable.plan.position_tile


FUSED_ARGSORT = """
cmp {
  p0 = f32[] parameter(0)
  p1 = f32[] parameter(1)
  p2 = s32[] parameter(2)
  p3 = s32[] parameter(3)
  ROOT c = pred[] compare(p0, p1), direction=LT, type=TOTALORDER
}
fused {
  x = f32[6,40] parameter(0)
  k = f32[6,40] negate(x)
  i = s32[IOTA] iota(), iota_dimension=0
  b = s32[6,40] broadcast(i), dimensions={DIM}
  ROOT s = (f32[6,40], s32[6,40]) sort(k, b), dimensions={1}, is_stable=true, to_apply=cmp
}
ENTRY e {
  x = f32[6,40] parameter(0)
  ROOT f = (f32[6,40], s32[6,40]) fusion(x), kind=kLoop, calls=fused
}
"""


@pytest.mark.parametrize(("iota", "dim", "positions"), [("40", "1", 1), ("6", "0", None)])
def test_fused_producers_are_computed_as_the_rows_load(iota, dim, positions):
    """JAX's argsort as the fusion passes make it: the key's producer and a broadcast
    iota inside the sort's fusion. An iota broadcast along the sorted dimension is
    the stable sort's positions (no position tile); along another it is a payload."""
    text = FUSED_ARGSORT.replace("IOTA", iota).replace("DIM", dim)
    emitter = SortEmitter(analysed(_fusion(text)))
    assert emitter.plan.positions == positions
    assert emitter.plan.position_tile == (positions is None)
    rng = np.random.default_rng(40)
    got, want, _ = run_sort(text, [_values("f32", (6, 40), rng)])
    assert_bitwise(got, want)


@pytest.mark.parametrize("warp", [32, 64])
def test_rows_longer_than_a_block_are_sorted_in_the_outputs(warp):
    """4,097 elements pad to 8,192: 4,096 pairs, more than a block's threads."""
    rng = np.random.default_rng(4097)
    dims = (2, 4097)
    text = sort_module("f32", dims, 1, stable=True, iota=True)
    emitter = SortEmitter(analysed(_fusion(text)))
    assert not emitter.plan.in_shared and emitter.plan.rounds == 4
    got, want, kernel = run_sort(text, [_values("f32", dims, rng)], warp)
    assert_bitwise(got, want)
    assert kernel.grid[0] == 2 and kernel.block[0] == 1024


@pytest.mark.parametrize(
    ("key", "length", "extra", "stable", "chunk"),
    [
        ("f32", 2049, (), False, 2048),  # one element past a tile
        ("s32", 3000, ("f32",), False, 2048),
        ("f32", 8192, (), True, 2048),  # stable (its iota): four tiles, three global stages
        ("u8", 10000, ("pred", "s32"), True, 2048),  # stable, its iota, two payloads
        ("f64", 5000, ("f64", "f64", "f64"), False, 1024),  # 32 B an element: smaller tiles
    ],
)
def test_long_rows_run_their_short_steps_in_shared_tiles(key, length, extra, stable, chunk):
    """XLA's split of a long sort: the in-tile stages tile by tile in shared memory,
    then per later stage its long-distance steps over the row in the outputs and its
    short ones tile by tile again (``SortPlan.phases``). Unstable sorts with payloads
    get distinct keys (their ties' order is the network's)."""
    rng = np.random.default_rng(length)
    dims = (2, length)
    text = sort_module(key, dims, 1, stable=stable, iota=stable, extra=extra)
    plan = SortEmitter(analysed(_fusion(text))).plan
    assert not plan.in_shared and plan.chunk == chunk
    tile = chunk.bit_length() - 1
    stages = plan.padded.bit_length() - 1
    global_steps = [steps for in_tile, steps in plan.phases if not in_tile]
    assert len(global_steps) == sum(s - tile + 1 for s in range(tile, stages))
    assert sum(len(steps) for _, steps in plan.phases) == len(plan.steps)
    payloads = [rng.standard_normal(dims) if t == "f64" else _values(t, dims, rng) for t in extra]
    keys = np.zeros(dims, np.float64) if key == "f64" else _values(key, dims, rng)
    if extra and not stable:
        keys = np.stack([rng.permutation(length) for _ in range(2)]).astype(keys.dtype)
    got, want, _ = run_sort(text, [keys, *payloads])
    assert_bitwise(got, want)


def test_rows_over_shared_memory_are_sorted_in_the_outputs():
    rng = np.random.default_rng(9)
    dims = (1, 2048)
    text = sort_module("f64", dims, 1, extra=("f64", "f64", "f64"), direction="GT")
    emitter = SortEmitter(analysed(_fusion(text)))
    assert not emitter.plan.in_shared and emitter.plan.rounds == 1
    keys = rng.permutation(2048).astype(np.float64).reshape(dims)
    payloads = [rng.standard_normal(dims) for _ in range(3)]
    got, want, _ = run_sort(text, [keys, *payloads])
    assert_bitwise(got, want)


def test_a_long_stable_sort_without_an_iota_is_refused_with_its_shape():
    text = sort_module("f32", (2, 4097), 1, stable=True, extra="s32")
    with pytest.raises(
        UnsupportedError, match=r"sort 's' of f32\[2,4097\].*4096 threads.*iota operand"
    ):
        SortEmitter(analysed(_fusion(text)))
    text = sort_module("f64", (1, 2048), 1, stable=True, extra=("f64", "f64"))
    with pytest.raises(UnsupportedError, match=r"57344 bytes of shared memory"):
        SortEmitter(analysed(_fusion(text)))


@pytest.mark.parametrize(
    "text",
    [
        sort_module("f32", (1, 32), 1),
        sort_module("bf16", (3, 1000), 1, stable=True, iota=True),
        sort_module("u8", (33, 3), 0, direction="GT", extra="pred"),
        sort_module("f32", (2, 5000), 1, stable=True, iota=True),
        sort_module("f64", (1, 3000), 1, extra=("f64", "f64", "f64", "f64", "f64")),
    ],
    ids=[
        "f32_1x32",
        "bf16_argsort_stable",
        "u8_pred_axis0",
        "f32_argsort_5000_tiles_and_global",
        "f64_6_operands_3000",
    ],
)
def test_compiles_to_ptx_and_hsaco(text):
    compiled = compile_everywhere(SortEmitter, _fusion(text))
    assert [k.image.format for k in compiled][2] == "hsaco"
    ptx = artefact_text(compiled[1], "ptx")
    (stats,) = kernel_statistics(ptx).values()
    plan = SortEmitter(analysed(_fusion(text))).plan
    assert stats.barriers > 0
    assert (stats.shared_loads > 0 and stats.shared_stores > 0) == (
        plan.in_shared or plan.chunk > 0
    )


@pytest.mark.parametrize(
    "text",
    [
        sort_module("f32", (6, 45), 1, stable=True, iota=True),
        sort_module("bf16", (40, 5), 0, direction="GT", stable=True, extra="s32"),
        sort_module("s32", (2, 3000), 1),
    ],
    ids=["argsort", "bf16_axis0_payload", "long_rows"],
)
@pytest.mark.parametrize("warp", [32, 64])
def test_the_harness_accepts_the_kernels(force_emitter, tmp_path, text, warp):
    """``heron check``'s harness: its edge and moderate inputs, write coverage (once per
    element in shared memory), all on the interpreter."""
    force_emitter("sort", SortEmitter)
    path = tmp_path / "sort.hlo"
    path.write_text(text)
    report = check_file(path, device=InterpreterDevice(warp_size=warp))
    assert report.ok, report.text()
    assert [f.emitter for f in report.fusions] == ["sort"]


@pytest.mark.parametrize("dims", [(0, 32), (3, 0)])
def test_an_empty_sort_is_a_kernel_that_writes_nothing(dims):
    text = sort_module("f32", dims, 1, iota=True)
    got, want, kernel = run_sort(text, [np.zeros(dims, np.float32)])
    assert kernel.grid == (1, 1, 1) and kernel.block == (1, 1, 1)
    assert [g.shape for g in got] == [w.shape for w in want] == [dims, dims]


def test_a_long_network_is_loops_the_same_size_for_any_row():
    """A row longer than shared memory holds is sorted through tiles, its network's
    stages, tile phases and global stages loops that unroll-loops leaves alone: written
    out, a sort of rows of 16,384 held 196 steps (1.3-2 s of compile, issue 32). The
    kernel after heron's passes is as large for 65,536 elements as for 32,768 (a thread's
    pairs of a global step are still unrolled up to 8, as every loop of 8 small
    iterations is: both lengths give a thread more than 8 pairs a step)."""
    from heron_test_support.analysis import H100

    def size(dims: tuple[int, int]) -> int:
        fusion = _fusion(sort_module("f32", dims, 1))
        kernel = compile_fusion(fusion, H100, "interpreter", stop_after="lower-tensors")
        return str(kernel.module).count("\n")

    assert size((1, 65536)) == size((1, 32768))


def test_a_network_on_one_block_a_core_is_loops_and_written_out_on_more():
    """A grid that gives no core a second block takes one block's latency: its network
    is loops (a barrier in the loop body, the kernel as large for rows of 64 as of 16),
    which compiles in about half the time (issue 32: a sort of 8 rows of 32 took 100 ms,
    XLA 89 ms); a grid of more blocks than cores writes its steps out (a barrier each),
    the kernels the GPU measured."""
    from heron_test_support.analysis import H100

    from heron.plugins.sort import plan_sort

    def barriers(dims: tuple[int, int], cores: int) -> int:
        fusion = _fusion(sort_module("f32", dims, 1))
        target = attrs.evolve(H100, core_count=cores)
        kernel = compile_fusion(fusion, target, "interpreter", stop_after="lower-tensors")
        return str(kernel.module).count("gpu.barrier")

    one_wave = _fusion(sort_module("f32", (132 * 8, 32), 1))  # 8 rows a block: 132 blocks
    assert plan_sort(one_wave.called("calls").root, H100).rolled
    more = _fusion(sort_module("f32", (132 * 8 + 1, 32), 1))
    assert not plan_sort(more.called("calls").root, H100).rolled
    # 32 elements: 15 steps; 64: 21. Loops: the load's barrier and one in the loop.
    assert barriers((16, 32), cores=132) == barriers((16, 64), cores=132) == 2
    assert barriers((16, 32), cores=1) == 1 + 15  # two blocks on one core
    assert barriers((16, 64), cores=1) == 1 + 21
