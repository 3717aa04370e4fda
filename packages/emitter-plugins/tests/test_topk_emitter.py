"""The top-k emitter against the reference evaluator, bitwise, on the interpreter.

Each topk is a one-instruction fusion compiled through a registry holding the
loop and top-k emitters (the dev environment's entry points may predate the
plugin), run on the interpreter device (sanitizer on) with 32- and 64-lane
warps, and compared bit for bit with ``evaluate_module`` (largest first, ties
by lower index, NaN of both signs, -0.0 and infinities in total order): f32,
bf16 and s32 values (u8 and f64 too), k in {1, 2, 8, 16}, rows shorter than,
equal to and not a multiple of the threads, one row and many, rank 1 to 3,
``largest=false``. The kernels compile to PTX that ptxas accepts (sm_80,
sm_90) and to gfx942 HSACO.
"""

from __future__ import annotations

import contextlib
from unittest import mock

import numpy as np
import pytest
from heron_test_support.analysis import analysed, artefact_text, compile_everywhere
from heron_test_support.topk_values import tie_values

import heron.plugins.loop as loop_plugin
import heron.plugins.topk as topk_plugin
from heron.compiler import compile_fusion, fusions_of
from heron.compiler.device_kernels import run_on_device, target_for_device
from heron.emitters.registry import EmitterRegistry
from heron.harness import check_file
from heron.hlo.errors import UnsupportedError
from heron.hlo.evaluator import evaluate_module
from heron.hlo.parser import parse_module
from heron.plugins.topk import TopkEmitter
from heron.runtime.cuda.ptx_statistics import kernel_statistics
from heron.runtime.interpreter.device import InterpreterDevice

REGISTRY = EmitterRegistry(
    [(spec, None) for plugin in (loop_plugin, topk_plugin) for spec in plugin.heron_emitter_specs()]
)


def topk_module(dtype: str, dims: tuple[int, ...], k: int, largest: bool = True) -> str:
    shape = f"{dtype}[{','.join(map(str, dims))}]"
    out = ",".join(map(str, (*dims[:-1], k)))
    result = f"({dtype}[{out}], s32[{out}])"
    return f"""
fused {{
  x = {shape} parameter(0)
  ROOT t = {result} topk(x), k={k}, largest={"true" if largest else "false"}
}}
ENTRY e {{
  x = {shape} parameter(0)
  ROOT f = {result} fusion(x), kind=kLoop, calls=fused
}}
"""


def _values(dtype: str, dims: tuple[int, ...], rng: np.random.Generator) -> np.ndarray:
    """Values with many ties (and NaN of both signs, signed zeros, infinities)."""
    return tie_values(dtype, int(np.prod(dims)), rng).reshape(dims)


def run_topk(text: str, inputs: list[np.ndarray], warp: int = 32, *, unrolled: bool = False):
    """(kernel outputs, evaluator outputs, compiled kernel) of the module's one fusion.

    ``unrolled``: the short loops left to unroll-loops, as on a grid of more blocks than
    the device has cores (``TopkPlan.rolled`` false); the small grids of these tests
    otherwise keep them loops."""
    (fusion,) = fusions_of(parse_module(text))
    device = InterpreterDevice(warp_size=warp)
    target = target_for_device(device, "interpreter", None)
    rolled_never = mock.patch.object(topk_plugin, "one_block_per_core", lambda *_: False)
    with rolled_never if unrolled else contextlib.nullcontext():
        kernel = compile_fusion(fusion, target, "interpreter", emitters=REGISTRY)
    assert kernel.emitter == "topk"
    run = run_on_device(device, kernel, inputs)
    expected = evaluate_module(parse_module(text), inputs)
    return [np.asarray(o) for o in run.outputs], [np.asarray(e) for e in expected], kernel


def assert_bitwise(got: list[np.ndarray], want: list[np.ndarray]) -> None:
    assert len(got) == len(want) == 2
    for k, (g, w) in enumerate(zip(got, want, strict=True)):
        assert g.dtype == w.dtype and g.shape == w.shape, (k, g.dtype, w.dtype)
        assert np.array_equal(g.view(np.uint8), w.view(np.uint8)), f"output {k}:\n{g}\n!=\n{w}"


@pytest.mark.parametrize("dtype", ["f32", "bf16", "s32"])
@pytest.mark.parametrize("k", [1, 2, 8, 16])
@pytest.mark.parametrize("length", [16, 37, 128, 1000])
@pytest.mark.parametrize("unrolled", [False, True])
def test_every_k_type_and_row_length(dtype, k, length, unrolled):
    """Rows of 16 (k threads or fewer), 37 and 1,000 (not a multiple of the threads)."""
    rng = np.random.default_rng(length * 100 + k)
    dims = (3, length)
    text = topk_module(dtype, dims, k)
    got, want, _ = run_topk(text, [_values(dtype, dims, rng)], unrolled=unrolled)
    assert_bitwise(got, want)


@pytest.mark.parametrize("warp", [32, 64])
@pytest.mark.parametrize("dtype", ["f32", "s32", "u8", "f64"])
def test_smallest_first_with_largest_false(dtype, warp):
    rng = np.random.default_rng(5)
    dims = (4, 300)
    text = topk_module(dtype, dims, 8, largest=False)
    got, want, _ = run_topk(text, [_values(dtype, dims, rng)], warp)
    assert_bitwise(got, want)


def test_ties_come_by_increasing_index_and_zeros_in_total_order():
    """Every value equal but the zeros' signs: -0.0 below +0.0, then by index."""
    row = np.zeros(200, np.float32)
    row[::3] = -0.0
    row[7] = np.float32(-np.nan)  # below -inf: never in the top of zeros
    got, want, _ = run_topk(topk_module("f32", (1, 200), 16), [row.reshape(1, 200)])
    assert_bitwise(got, want)
    assert list(got[1][0]) == [i for i in range(200) if i % 3 and i != 7][:16]


@pytest.mark.parametrize("dims", [(1000,), (2, 3, 70), (1, 16)])
def test_any_rank_one_block_per_row(dims):
    rng = np.random.default_rng(len(dims))
    text = topk_module("f32", dims, 4)
    got, want, kernel = run_topk(text, [_values("f32", dims, rng)])
    assert_bitwise(got, want)
    assert kernel.grid[0] == int(np.prod(dims[:-1]))


def test_the_plan_reads_about_k_elements_a_thread():
    emitter = TopkEmitter(analysed(_fusion(topk_module("f32", (8, 32), 4))))
    assert (emitter.plan.threads, emitter.plan.per_thread, emitter.plan.rounds) == (8, 4, 3)
    long = TopkEmitter(analysed(_fusion(topk_module("bf16", (2, 5000), 16))))
    assert (long.plan.threads, long.plan.per_thread, long.plan.key_width) == (128, 40, 32)


def test_the_kernel_does_not_grow_with_the_merge_rounds():
    """The merge rounds and a partner's ``k`` offers are loops: written out, a top 16 of
    32,768 held 7 rounds of 16 offers of 16 compare-and-swaps (8 s of compile, a 200 KiB
    cubin, issue 32). The emitted kernel is the same size for 3 rounds and for 7."""

    def ops(length: int) -> tuple[int, int]:
        emitter = TopkEmitter(analysed(_fusion(topk_module("f32", (4, length), 16))))
        text = str(emitter.emit().module)
        return emitter.plan.rounds, text.count("arith.cmpi")

    (few, few_ops), (many, many_ops) = ops(128), ops(32768)
    assert (few, many) == (3, 7)
    assert many_ops == few_ops


def _fusion(text: str):
    (fusion,) = fusions_of(parse_module(text))
    return fusion


def test_short_loops_stay_loops_on_one_block_a_core():
    """On a grid of no more blocks than cores (a row a block) the scan and the offers are
    loops however few their trips: after unroll-loops the kernel for 132 rows holds one
    offer's compare-and-swaps per loop, the kernel for 133 rows every trip's."""
    from heron_test_support.analysis import H100

    def compares(rows: int) -> tuple[bool, int]:
        fusion = _fusion(topk_module("f32", (rows, 32), 4))
        kernel = compile_fusion(fusion, H100, "interpreter", stop_after="unroll-loops")
        rolled = TopkEmitter(analysed(fusion)).plan.rolled
        return rolled, str(kernel.module).count("arith.cmpi")

    (one_wave, few), (more, many) = compares(132), compares(133)
    assert one_wave and not more
    # 4 elements a thread and 4 offers a round, each offer's compare-and-swaps (and
    # guard) once in the loops, four times written out
    assert many > 2 * few


def test_unsupported_topks_are_refused_by_name():
    with pytest.raises(UnsupportedError, match=r"topk 't' of f32\[2,100\]: k=65 exceeds"):
        TopkEmitter(analysed(_fusion(topk_module("f32", (2, 100), 65))))
    with pytest.raises(UnsupportedError, match=r"no order for c64"):
        TopkEmitter(analysed(_fusion(topk_module("c64", (2, 10), 2))))


@pytest.mark.parametrize(
    "text",
    [
        topk_module("f32", (8, 32), 4),
        topk_module("bf16", (3, 4096), 16),
        topk_module("s32", (5, 37), 1, largest=False),
    ],
    ids=["f32_8x32_k4", "bf16_k16_long", "s32_smallest"],
)
def test_compiles_to_ptx_and_hsaco(text):
    compiled = compile_everywhere(TopkEmitter, _fusion(text))
    assert [k.image.format for k in compiled][2] == "hsaco"
    ptx = artefact_text(compiled[1], "ptx")
    (stats,) = kernel_statistics(ptx).values()
    assert stats.barriers > 0 and stats.shared_loads > 0 and stats.shared_stores > 0


@pytest.mark.parametrize(
    "text",
    [topk_module("f32", (6, 45), 4), topk_module("bf16", (3, 700), 16, largest=False)],
    ids=["f32_k4", "bf16_k16_smallest"],
)
@pytest.mark.parametrize("warp", [32, 64])
def test_the_harness_accepts_the_kernels(force_emitter, tmp_path, text, warp):
    """``heron check``'s harness: its edge and moderate inputs, and its write coverage
    (each output element written once, by thread 0 of its row), on the interpreter."""
    force_emitter("topk", TopkEmitter)
    path = tmp_path / "topk.hlo"
    path.write_text(text)
    report = check_file(path, device=InterpreterDevice(warp_size=warp))
    assert report.ok, report.text()
    assert [f.emitter for f in report.fusions] == ["topk"]


def test_an_empty_topk_is_a_kernel_that_writes_nothing():
    text = topk_module("f32", (0, 32), 4)
    got, want, kernel = run_topk(text, [np.zeros((0, 32), np.float32)])
    assert kernel.grid == (1, 1, 1) and kernel.block == (1, 1, 1)
    assert [g.shape for g in got] == [w.shape for w in want] == [(0, 4), (0, 4)]
