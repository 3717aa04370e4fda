"""The GEMM emitter against the reference evaluator on the interpreter.

Each dot is a one-instruction fusion in canonical form compiled through a
registry holding the loop and gemm emitters (the dev environment's entry
points may predate the plugin), run on the interpreter device (sanitizer on)
with 32- and 64-lane warps, and compared with ``evaluate_module``:

- f32: per element, ``|heron - evaluator| <= c * K * eps * sum_k |a_ik b_kj|``
  with ``c = 1``: each side's sum of K rounded products is within
  ``K * u * sum|a b|`` (``u = eps / 2``, to first order) of the exact sum,
  whatever the order of its additions, so the two are within ``K * eps``;
- f16/bf16 (accumulated in f32, rounded once to the output type): the f32
  sums differ by the bound above, then each side rounds once, so the results
  differ by at most that plus one ulp of the output (``eps * |result|``);
- s8 -> s32 and s32 -> s32: bitwise (s32 sums wrap on both sides).

Shapes: 1x1x1, 3x5x7, 32x32x32, 33x65x17 (no side a multiple of a tile),
128x64x256 and 100x70x130 (register tiles, the second with edges), a batch of
4 16x8x24 products, matrix-vector both ways and a dot product; a bias + relu +
convert epilogue fused after the dot. The kernels compile to PTX
(ptxas-accepted where ptxas is present) and to gfx942 HSACO.
"""

from __future__ import annotations

import re
import shutil

import ml_dtypes
import numpy as np
import pytest
from heron_test_support.analysis import analysed, artefact_text, compile_everywhere

import heron.plugins.gemm as gemm_plugin
import heron.plugins.loop as loop_plugin
from heron.compiler import compile_emitted, compile_fusion, fusions_of
from heron.compiler.device_kernels import run_on_device, target_for_device
from heron.emitters.registry import EmitterRegistry
from heron.emitters.selection import select_emitter
from heron.emitters.target import resident_blocks
from heron.hlo.errors import UnsupportedError
from heron.hlo.evaluator import evaluate_module
from heron.hlo.parser import parse_module
from heron.plugins import gemm_mma, gemm_vector
from heron.plugins.gemm import GemmEmitter
from heron.runtime.cuda.compiler_tools import find_ptxas
from heron.runtime.cuda.ptx_statistics import kernel_statistics, ptxas_resource_usage
from heron.runtime.interpreter.device import InterpreterDevice
from heron.target import Target

REGISTRY = EmitterRegistry(
    [(spec, None) for plugin in (loop_plugin, gemm_plugin) for spec in plugin.heron_emitter_specs()]
)

NUMPY = {
    "f32": np.float32,
    "f16": np.float16,
    "bf16": ml_dtypes.bfloat16,
    "s8": np.int8,
    "s32": np.int32,
}


def _shape(dtype: str, dims: tuple[int, ...]) -> str:
    return f"{dtype}[{','.join(map(str, dims))}]"


def dot_module(
    m: int | None,
    k: int | None,
    n: int | None,
    *,
    batch: tuple[int, ...] = (),
    dtype: str = "f32",
    out: str | None = None,
    producer: str | None = None,
    layouts: tuple[str, str] = ("", ""),
) -> str:
    """A module whose one fusion is the canonical dot ``[batch, m, k] x [batch, k, n]``;
    None drops a dimension. ``producer`` (an elementwise opcode) is applied to A
    inside the fusion."""
    out = out or dtype
    lhs = (*batch, *(d for d in (m, k) if d is not None))
    rhs = (*batch, *(d for d in (k, n) if d is not None))
    result = (*batch, *(d for d in (m, n) if d is not None))
    nb = len(batch)
    batch_dims = ",".join(map(str, range(nb)))
    dims = f"lhs_batch_dims={{{batch_dims}}}, rhs_batch_dims={{{batch_dims}}}, " if nb else ""
    if k is not None:
        dims += f"lhs_contracting_dims={{{len(lhs) - 1}}}, rhs_contracting_dims={{{nb}}}"
    else:
        dims = dims.rstrip(", ")
    a, b, c = _shape(dtype, lhs), _shape(dtype, rhs), _shape(out, result)
    a, b = a + layouts[0], b + layouts[1]
    fed = "a"
    extra = ""
    if producer is not None:
        extra = f"\n  pa = {a} {producer}(a)"
        fed = "pa"
    separator = ", " if dims else ""
    return f"""
fused {{
  a = {a} parameter(0)
  b = {b} parameter(1){extra}
  ROOT d = {c} dot({fed}, b){separator}{dims}
}}
ENTRY e {{
  x = {a} parameter(0)
  y = {b} parameter(1)
  ROOT f = {c} fusion(x, y), kind=kLoop, calls=fused
}}
"""


def _values(dtype: str, dims: tuple[int, ...], rng: np.random.Generator) -> np.ndarray:
    if dtype == "s8":
        return rng.integers(-128, 128, dims).astype(np.int8)
    if dtype == "s32":
        return rng.integers(-(2**31), 2**31, dims, dtype=np.int64).astype(np.int32)
    return rng.standard_normal(dims).astype(NUMPY[dtype])


def _fusion(text: str):
    (fusion,) = fusions_of(parse_module(text))
    return fusion


def run_dot(text: str, inputs: list[np.ndarray], warp: int = 32, target: Target | None = None):
    """(kernel output, evaluator output, compiled kernel) of the module's one fusion."""
    device = InterpreterDevice(warp_size=warp)
    target = target_for_device(device, "interpreter", target)
    kernel = compile_fusion(_fusion(text), target, "interpreter", emitters=REGISTRY)
    assert kernel.emitter == "gemm"
    run = run_on_device(device, kernel, inputs)
    expected = evaluate_module(parse_module(text), inputs)
    return np.asarray(run.outputs[0]), np.asarray(expected), kernel


def _abs_products(a: np.ndarray, b: np.ndarray, m, k, n) -> np.ndarray:
    """``sum_k |a_ik b_kj|`` in f64, in the output's shape."""
    a64, b64 = np.abs(a.astype(np.float64)), np.abs(b.astype(np.float64))
    if m is None:
        a64 = a64[..., None, :] if k is not None else a64[..., None]
    elif k is None:
        a64 = a64[..., None]
    if k is None:
        b64 = b64[..., None, :] if n is not None else b64[..., None, None]
    elif n is None:
        b64 = b64[..., None]
    products = a64 @ b64
    if m is None:
        products = products[..., 0, :]
    if n is None:
        products = products[..., 0]
    return products


def assert_within_bound(got, want, a, b, m, k, n, out: str) -> None:
    """The bound of the module docstring (c = 1), elementwise."""
    assert got.dtype == want.dtype and got.shape == want.shape
    length = k or 1
    eps32 = float(np.finfo(np.float32).eps)
    bound = 1.0 * length * eps32 * _abs_products(a, b, m, k, n)
    g, w = got.astype(np.float64), want.astype(np.float64)
    if out != "f32":
        bound = bound + float(ml_dtypes.finfo(NUMPY[out]).eps) * np.maximum(np.abs(g), np.abs(w))
    error = np.abs(g - w)
    worst = np.unravel_index(np.argmax(error - bound), error.shape) if error.size else None
    assert (error <= bound).all(), f"error {error[worst]} > bound {bound[worst]} at {worst}"


SHAPES = [
    (1, 1, 1),
    (3, 5, 7),
    (32, 32, 32),
    (33, 65, 17),
    (128, 64, 256),
    (100, 70, 130),
]


@pytest.mark.parametrize(("m", "k", "n"), SHAPES, ids=[f"{m}x{k}x{n}" for m, k, n in SHAPES])
@pytest.mark.parametrize("warp", [32, 64])
def test_f32_within_the_summation_bound(m, k, n, warp):
    rng = np.random.default_rng(m * 1000 + k + n)
    a, b = _values("f32", (m, k), rng), _values("f32", (k, n), rng)
    got, want, kernel = run_dot(dot_module(m, k, n), [a, b], warp)
    assert_within_bound(got, want, a, b, m, k, n, "f32")
    plan = GemmEmitter(analysed(_fusion(dot_module(m, k, n)))).plan
    assert kernel.grid == (plan.tiles_m * plan.tiles_n, 1, 1) and kernel.block == (256, 1, 1)


def test_large_dots_take_a_register_tile_per_thread():
    """M and N of at least 64: 64 x 64 block tiles, 4 x 4 elements a thread; smaller
    ones keep 16 x 16 tiles of one element a thread."""
    large = GemmEmitter(analysed(_fusion(dot_module(128, 64, 256)))).plan
    assert (large.tm, large.tn, large.rm, large.rn, large.threads) == (64, 64, 4, 4, 256)
    assert large.launch.block_x == 2 * 4
    edges = GemmEmitter(analysed(_fusion(dot_module(100, 70, 130)))).plan
    assert (edges.tm, edges.rm, edges.launch.block_x) == (64, 4, 2 * 3)
    small = GemmEmitter(analysed(_fusion(dot_module(33, 65, 17)))).plan
    assert (small.tm, small.tn, small.rm, small.launch.block_x) == (16, 16, 1, 3 * 2)


@pytest.mark.parametrize("warp", [32, 64])
def test_batch_dimensions_are_the_grid_y(warp):
    rng = np.random.default_rng(4)
    m, k, n = 16, 8, 24
    a, b = _values("f32", (4, m, k), rng), _values("f32", (4, k, n), rng)
    got, want, kernel = run_dot(dot_module(m, k, n, batch=(4,)), [a, b], warp)
    assert_within_bound(got, want, a, b, m, k, n, "f32")
    assert kernel.grid == (2, 4, 1)


def test_two_batch_dimensions():
    rng = np.random.default_rng(5)
    a, b = _values("f32", (2, 3, 5, 9), rng), _values("f32", (2, 3, 9, 4), rng)
    got, want, kernel = run_dot(dot_module(5, 9, 4, batch=(2, 3)), [a, b])
    assert_within_bound(got, want, a, b, 5, 9, 4, "f32")
    assert kernel.grid == (1, 6, 1)


@pytest.mark.parametrize(
    ("m", "k", "n", "block"),
    [(300, 70, None, (256, 1, 1)), (None, 70, 300, (256, 1, 1)), (None, 70, None, (1, 1, 1))],
    ids=["matrix_vector", "vector_matrix", "dot_product"],
)
@pytest.mark.parametrize("warp", [32, 64])
def test_matrix_vector_both_ways(m, k, n, block, warp):
    rng = np.random.default_rng(70)
    lhs = tuple(d for d in (m, k) if d is not None)
    rhs = tuple(d for d in (k, n) if d is not None)
    a, b = _values("f32", lhs, rng), _values("f32", rhs, rng)
    got, want, kernel = run_dot(dot_module(m, k, n), [a, b], warp)
    assert_within_bound(got, want, a, b, m, k, n, "f32")
    assert kernel.block == block


def test_an_outer_product_has_nothing_to_contract():
    rng = np.random.default_rng(2)
    a, b = _values("f32", (20,), rng), _values("f32", (18,), rng)
    got, want, _ = run_dot(dot_module(20, None, 18), [a, b])
    assert_within_bound(got, want, a, b, 20, None, 18, "f32")


@pytest.mark.parametrize("dtype", ["f16", "bf16"])
@pytest.mark.parametrize(("m", "k", "n"), [(33, 65, 17), (16, 300, 16)])
def test_half_floats_accumulate_in_f32_and_round_once(dtype, m, k, n):
    rng = np.random.default_rng(k)
    a, b = _values(dtype, (m, k), rng), _values(dtype, (k, n), rng)
    got, want, _ = run_dot(dot_module(m, k, n, dtype=dtype), [a, b])
    assert_within_bound(got, want, a, b, m, k, n, dtype)
    # Rounded once: within one rounding of the output type of the exact sum, plus the
    # f32 summation bound. Partial sums rounded to f16/bf16 would add up to K of
    # the output's roundings and fail this.
    exact = a.astype(np.float64) @ b.astype(np.float64)
    eps = float(ml_dtypes.finfo(NUMPY[dtype]).eps)
    bound = eps / 2 * np.abs(exact) + k * float(np.finfo(np.float32).eps) * _abs_products(
        a, b, m, k, n
    )
    assert (np.abs(got.astype(np.float64) - exact) <= bound).all()


def test_bf16_inputs_with_an_f32_result():
    rng = np.random.default_rng(8)
    a, b = _values("bf16", (9, 40), rng), _values("bf16", (40, 11), rng)
    got, want, _ = run_dot(dot_module(9, 40, 11, dtype="bf16", out="f32"), [a, b])
    assert_within_bound(got, want, a, b, 9, 40, 11, "f32")


@pytest.mark.parametrize(
    ("dtype", "out"), [("s8", "s32"), ("s32", "s32"), ("s8", "s8")], ids=["s8_s32", "s32", "s8"]
)
@pytest.mark.parametrize(("m", "k", "n"), [(33, 65, 17), (3, 5, 7)])
@pytest.mark.parametrize("warp", [32, 64])
def test_integers_are_bitwise(dtype, out, m, k, n, warp):
    rng = np.random.default_rng(m + k)
    a, b = _values(dtype, (m, k), rng), _values(dtype, (k, n), rng)
    got, want, _ = run_dot(dot_module(m, k, n, dtype=dtype, out=out), [a, b], warp)
    assert got.dtype == want.dtype and np.array_equal(got, want)


def test_an_elementwise_producer_is_computed_as_the_operand_is_staged():
    rng = np.random.default_rng(3)
    a, b = _values("f32", (17, 20), rng), _values("f32", (20, 19), rng)
    got, want, _ = run_dot(dot_module(17, 20, 19, producer="negate"), [a, b])
    assert_within_bound(got, want, -a, b, 17, 20, 19, "f32")


def test_what_the_emitter_does_not_claim_stays_with_the_loop_emitter():
    """Zero sizes and fp8 keep the loop emitter's elemental dot."""
    target = target_for_device(InterpreterDevice(), "interpreter", None)
    empty_k = dot_module(8, 0, 16)
    fp8 = dot_module(23, 42, None, dtype="f8e4m3fn")
    for text in (empty_k, fp8, dot_module(0, 4, 4)):
        spec = select_emitter(analysed(_fusion(text), target), REGISTRY)
        assert spec.name == "loop"
    with pytest.raises(UnsupportedError, match=r"dot 'd'.*f8e4m3fn: the gemm emitter takes"):
        GemmEmitter(analysed(_fusion(fp8)))


def test_a_non_canonical_dot_is_refused_naming_it():
    text = """
fused {
  a = f32[4,8] parameter(0)
  b = f32[2,8] parameter(1)
  ROOT d = f32[4,2] dot(a, b), lhs_contracting_dims={1}, rhs_contracting_dims={1}
}
ENTRY e {
  x = f32[4,8] parameter(0)
  y = f32[2,8] parameter(1)
  ROOT f = f32[4,2] fusion(x, y), kind=kLoop, calls=fused
}
"""
    with pytest.raises(UnsupportedError, match=r"dot 'd' \(f32\[4,2\]\).*canonical form"):
        GemmEmitter(analysed(_fusion(text)))


BIAS_RELU = """
fused {
  a = f32[33,40] parameter(0)
  b = f32[40,19] parameter(1)
  bias = f32[19] parameter(2)
  d = f32[33,19] dot(a, b), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  bb = f32[33,19] broadcast(bias), dimensions={1}
  s = f32[33,19] add(d, bb)
  z = f32[] constant(0)
  zb = f32[33,19] broadcast(z), dimensions={}
  r = f32[33,19] maximum(s, zb)
  ROOT c = bf16[33,19] convert(r)
}
ENTRY e {
  x = f32[33,40] parameter(0)
  y = f32[40,19] parameter(1)
  w = f32[19] parameter(2)
  ROOT f = bf16[33,19] fusion(x, y, w), kind=kLoop, calls=fused
}
"""


@pytest.mark.parametrize("warp", [32, 64])
def test_a_bias_activation_epilogue_is_fused(warp):
    """add(dot, broadcast(bias)) -> relu -> convert: each thread applies it to its sum."""
    rng = np.random.default_rng(19)
    a, b = _values("f32", (33, 40), rng), _values("f32", (40, 19), rng)
    bias = _values("f32", (19,), rng)
    got, want, kernel = run_dot(BIAS_RELU, [a, b, bias], warp)
    assert got.dtype == want.dtype == ml_dtypes.bfloat16
    # The f32 sums differ within the summation bound; bias, relu and one bf16 rounding
    # follow on both sides, so the results are within that plus one bf16 ulp.
    g, w = got.astype(np.float64), want.astype(np.float64)
    eps16 = float(ml_dtypes.finfo(ml_dtypes.bfloat16).eps)
    bound = 40 * float(np.finfo(np.float32).eps) * _abs_products(a, b, 33, 40, 19)
    assert (np.abs(g - w) <= bound + eps16 * np.maximum(np.abs(g), np.abs(w))).all()
    assert (g >= 0).all() and (g > 0).any()
    assert kernel.grid == (6, 1, 1)


def test_a_transposed_result_is_stored_at_the_transposed_index():
    """A transpose of the dot (jax's weight gradients): each element of C is stored
    where the transpose puts it, by the thread that summed it."""
    text = """
fused {
  a = f32[12,20] parameter(0)
  b = f32[20,9] parameter(1)
  d = f32[12,9] dot(a, b), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  ROOT t = f32[9,12] transpose(d), dimensions={1,0}
}
ENTRY e {
  x = f32[12,20] parameter(0)
  y = f32[20,9] parameter(1)
  ROOT f = f32[9,12] fusion(x, y), kind=kLoop, calls=fused
}
"""
    rng = np.random.default_rng(5)
    a, b = _values("f32", (12, 20), rng), _values("f32", (20, 9), rng)
    got, want, _ = run_dot(text, [a, b])
    assert got.shape == (9, 12)
    assert_within_bound(got.T, want.T, a, b, 12, 20, 9, "f32")


def test_an_epilogue_that_is_not_elementwise_is_not_claimed():
    """A reverse after the dot moves elements: the fusion stays with the loop emitter."""
    text = """
fused {
  a = f32[8,8] parameter(0)
  b = f32[8,8] parameter(1)
  d = f32[8,8] dot(a, b), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  ROOT t = f32[8,8] reverse(d), dimensions={1}
}
ENTRY e {
  x = f32[8,8] parameter(0)
  y = f32[8,8] parameter(1)
  ROOT f = f32[8,8] fusion(x, y), kind=kLoop, calls=fused
}
"""
    target = target_for_device(InterpreterDevice(), "interpreter", None)
    assert select_emitter(analysed(_fusion(text), target), REGISTRY).name != "gemm"


@pytest.mark.parametrize(
    "text",
    [
        dot_module(128, 128, 128),
        dot_module(33, 65, 17, dtype="bf16"),
        dot_module(16, 8, 24, batch=(4,), dtype="s8", out="s32"),
        dot_module(300, 70, None, dtype="f16"),
        BIAS_RELU,
    ],
    ids=["f32_128", "bf16_edges", "s8_batched", "f16_matrix_vector", "bias_relu"],
)
def test_compiles_to_ptx_and_hsaco(text):
    compiled = compile_everywhere(GemmEmitter, _fusion(text))
    if shutil.which("ptxas"):
        assert all(r.name != "cubin" for r in compiled[1].skipped)  # ptxas accepted it
    assert [k.image.format for k in compiled][2] == "hsaco"
    ptx = artefact_text(compiled[1], "ptx")
    (stats,) = kernel_statistics(ptx).values()
    shared_reads = stats.shared_loads + ptx.count("ldmatrix.sync")  # MMA fragments: ldmatrix
    assert stats.barriers >= 2 and shared_reads > 0 and stats.shared_stores > 0


# -- the tensor-core path (mma.sync m16n8k16) ---------------------------------------------

A100_TARGET = Target.preset("a100")
H100_TARGET = Target.preset("h100")
MI300X_TARGET = Target.preset("mi300x")


def _mma_instructions(kernel) -> int:
    """How many MMA ops the kernel's interpreted program runs (its lower-tensors module)."""
    return str(kernel.module).count("nvgpu.mma.sync")


def test_the_fragment_layout_is_the_ptx_isas():
    """Spot checks against the PTX ISA's figures for mma.m16n8k16 (f16/bf16) and
    mma.m16n8k32 (s8): lane 5 is group 1, thread 1 of its group. The emitter and the
    interpreter state the layouts once each, and agree element for element."""
    from heron.runtime.interpreter.semantics import mma as mma_semantics

    a = gemm_mma.fragment_positions("a", 5)
    assert (a[0][0], a[0][1], a[1][0], a[2][0], a[3][1]) == (
        (1, 2),
        (1, 3),
        (9, 2),
        (1, 10),
        (9, 11),
    )
    assert gemm_mma.fragment_positions("b", 5) == [[(2, 1), (3, 1)], [(10, 1), (11, 1)]]
    assert gemm_mma.fragment_positions("c", 31) == [[(7, 6), (7, 7)], [(15, 6), (15, 7)]]
    a8 = gemm_mma.fragment_positions("a", 5, k=32)
    assert (a8[0][0], a8[0][3], a8[1][0], a8[2][0], a8[3][3]) == (
        (1, 4),
        (1, 7),
        (9, 4),
        (1, 20),
        (9, 23),
    )
    assert gemm_mma.fragment_positions("b", 5, k=32) == [
        [(4, 1), (5, 1), (6, 1), (7, 1)],
        [(20, 1), (21, 1), (22, 1), (23, 1)],
    ]
    for k in (16, 32):
        for operand in ("a", "b", "c"):
            rows, cols = mma_semantics.fragment_positions(operand, (16, 8, k))
            for lane in range(32):
                emitted = gemm_mma.fragment_positions(operand, lane, k)
                interpreted = [
                    [(int(i), int(j)) for i, j in zip(r, c, strict=True)]
                    for r, c in zip(rows[lane], cols[lane], strict=True)
                ]
                assert emitted == interpreted
            # every element of the tile is in exactly one lane's fragment
            cells = {(int(i), int(j)) for i, j in zip(rows.ravel(), cols.ravel(), strict=True)}
            assert len(cells) == rows.size


@pytest.mark.parametrize("target", [A100_TARGET, H100_TARGET], ids=["sm_80", "sm_90"])
@pytest.mark.parametrize("dtype", ["f16", "bf16"])
@pytest.mark.parametrize(
    ("m", "k", "n"), [(33, 65, 17), (100, 70, 130), (64, 16, 64)], ids=["edges", "large", "exact"]
)
def test_half_floats_take_mma_sync_on_the_interpreter(target, dtype, m, k, n):
    """f16/bf16 dots on sm_80/sm_90 run as m16n8k16 MMAs: 64x64 block tiles of 8 warps,
    and the interpreter's run equals the evaluator within the GEMM bound; M, N, K that
    are not multiples of a tile are staged as zeros and stored only inside C."""
    rng = np.random.default_rng(m * 7 + k)
    a, b = _values(dtype, (m, k), rng), _values(dtype, (k, n), rng)
    got, want, kernel = run_dot(dot_module(m, k, n, dtype=dtype), [a, b], target=target)
    assert_within_bound(got, want, a, b, m, k, n, dtype)
    plan = GemmEmitter(analysed(_fusion(dot_module(m, k, n, dtype=dtype)), target)).plan
    assert plan.mma == f"m16n8k16.{dtype}" and (plan.tm, plan.tn, plan.tk) == (64, 64, 16)
    assert kernel.grid == (plan.tiles_m * plan.tiles_n, 1, 1) and kernel.block == (256, 1, 1)
    # four MMAs a warp and K step: the K loop takes one step a stage (two) an iteration,
    # or is unrolled whole
    assert _mma_instructions(kernel) in {4 * gemm_mma.STAGES, 4 * plan.k_steps}


def test_mma_with_batch_dimensions_and_an_f32_result():
    rng = np.random.default_rng(11)
    a, b = _values("bf16", (2, 3, 20, 40), rng), _values("bf16", (2, 3, 40, 24), rng)
    text = dot_module(20, 40, 24, batch=(2, 3), dtype="bf16", out="f32")
    got, want, kernel = run_dot(text, [a, b])
    assert _mma_instructions(kernel) > 0 and kernel.grid == (1, 6, 1)
    assert_within_bound(got, want, a, b, 20, 40, 24, "f32")


@pytest.mark.parametrize("dtype", ["f16", "bf16"])
def test_half_float_dots_with_an_f64_result_take_no_mma(dtype):
    """An f64 result accumulates in f64, which no MMA shape does (the accumulator was
    given to mma.sync as f64: refused by the interpreter, no PTX instruction either):
    the vector path computes it, equal to the evaluator."""
    rng = np.random.default_rng(12)
    a, b = _values(dtype, (16, 16), rng), _values(dtype, (16, 8), rng)
    got, want, kernel = run_dot(dot_module(16, 16, 8, dtype=dtype, out="f64"), [a, b])
    assert _mma_instructions(kernel) == 0
    assert got.dtype == want.dtype == np.float64
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)  # f16 products are exact


@pytest.mark.parametrize(
    "layouts", [("{0,1}", ""), ("", "{0,1}"), ("{0,1}", "{0,1}")], ids=["At", "Bt", "AtBt"]
)
def test_mma_with_transposed_operand_layouts(layouts):
    """Operands stored column-major: the staging reads them through their layout."""
    rng = np.random.default_rng(12)
    a, b = _values("f16", (48, 40), rng), _values("f16", (40, 72), rng)
    got, want, kernel = run_dot(dot_module(48, 40, 72, dtype="f16", layouts=layouts), [a, b])
    assert _mma_instructions(kernel) > 0
    assert_within_bound(got, want, a, b, 48, 40, 72, "f16")


MMA_EPILOGUE = BIAS_RELU.replace("f32[33,40]", "f16[33,40]").replace("f32[40,19]", "f16[40,19]")


def test_mma_with_a_bias_activation_epilogue():
    """Each accumulator element goes through the epilogue in the thread that owns it."""
    rng = np.random.default_rng(13)
    a, b = _values("f16", (33, 40), rng), _values("f16", (40, 19), rng)
    bias = _values("f32", (19,), rng)
    got, want, kernel = run_dot(MMA_EPILOGUE, [a, b, bias])
    assert _mma_instructions(kernel) > 0
    g, w = got.astype(np.float64), want.astype(np.float64)
    eps16 = float(ml_dtypes.finfo(ml_dtypes.bfloat16).eps)
    eps32 = float(np.finfo(np.float32).eps)
    bound = 40 * eps32 * _abs_products(a, b, 33, 40, 19) + eps16 * np.maximum(abs(g), abs(w))
    assert (np.abs(g - w) <= bound).all() and (g >= 0).all() and (g > 0).any()


@pytest.mark.parametrize(
    ("text", "why"),
    [
        (dot_module(64, 64, 64), "f32 keeps exact f32 products"),
        (dot_module(64, 64, 64, dtype="s32"), "s32 operands"),
        (dot_module(16, 131072, 8, dtype="s8", out="s32"), "an s32 sum may overflow"),
        (dot_module(300, 70, None, dtype="f16"), "matrix-vector"),
    ],
    ids=["f32", "s32", "s8_long_k", "f16_matrix_vector"],
)
def test_other_dots_keep_the_scalar_path_on_sm_90(text, why):
    assert GemmEmitter(analysed(_fusion(text), H100_TARGET)).plan.mma is None, why


@pytest.mark.parametrize("dtype", ["f16", "bf16"])
def test_mma_sync_in_the_ptx_for_sm_80_and_sm_90_and_hsaco_for_gfx942(dtype):
    """A100 and H100 PTX hold 4 mma.sync.aligned.m16n8k16 a K step, the K loop two
    steps (its two shared stages) an iteration (ptxas accepts them where it is
    installed); MI300X keeps the scalar path and still makes an HSACO."""
    text = dot_module(100, 70, 130, dtype=dtype)
    a100, h100, mi300x = compile_everywhere(GemmEmitter, _fusion(text))
    if shutil.which("ptxas"):
        assert all(r.name != "cubin" for k in (a100, h100) for r in k.skipped)
    for kernel in (a100, h100):
        ptx = artefact_text(kernel, "ptx")
        spelled = f"mma.sync.aligned.m16n8k16.row.col.f32.{dtype}.{dtype}.f32"
        assert ptx.count(spelled) == 4 * 2  # 4 a warp and K step, 2 steps an iteration
        (stats,) = kernel_statistics(ptx).values()
        # the prologue's barrier and one a K step; the fragments are 3 ldmatrix.x4 a K
        # step (one for A, one for each pair of B fragments) and no other shared load
        assert stats.barriers == 3 and stats.fma == 0
        assert ptx.count("ldmatrix.sync.aligned.m8n8.x4.shared.b16") == 3 * 2
        assert "ld.shared" not in ptx
    assert mi300x.image.format == "hsaco"
    assert GemmEmitter(analysed(_fusion(text), MI300X_TARGET)).plan.mma is None


def test_before_sm_80_the_scalar_path_is_taken():
    """sm_75 (Turing) has no m16n8k16 f16 MMA (the PTX ISA: sm_80): the Target has no
    mma_shapes and the PTX no mma."""
    turing = Target.for_arch("sm_75")
    assert turing.mma_shapes == ()
    text = dot_module(64, 64, 64, dtype="f16")
    assert GemmEmitter(analysed(_fusion(text), turing)).plan.mma is None
    kernel = compile_emitted(GemmEmitter(analysed(_fusion(text), turing)).emit(), turing)
    assert "mma" not in artefact_text(kernel, "ptx")


@pytest.mark.parametrize("target", [A100_TARGET, H100_TARGET], ids=["sm_80", "sm_90"])
@pytest.mark.parametrize(
    ("m", "k", "n", "out", "batch"),
    [(33, 65, 17, "s32", ()), (100, 300, 70, "s8", ()), (16, 40, 24, "s32", (4,))],
    ids=["edges", "s8_result", "batched"],
)
def test_s8_takes_m16n8k32_and_is_bitwise(target, m, k, n, out, batch):
    """s8 x s8 -> s32 (or s8) runs as m16n8k32 MMAs with s32 accumulators; the
    interpreter's result equals the evaluator's bit for bit."""
    rng = np.random.default_rng(m + k + n)
    a, b = _values("s8", (*batch, m, k), rng), _values("s8", (*batch, k, n), rng)
    text = dot_module(m, k, n, dtype="s8", out=out, batch=batch)
    got, want, kernel = run_dot(text, [a, b], target=target)
    assert GemmEmitter(analysed(_fusion(text), target)).plan.mma == "m16n8k32.s8"
    assert _mma_instructions(kernel) > 0
    assert got.dtype == want.dtype and np.array_equal(got, want)


def test_s8_mma_sync_in_the_ptx():
    text = dot_module(100, 70, 130, dtype="s8", out="s32")
    a100, h100, mi300x = compile_everywhere(GemmEmitter, _fusion(text))
    if shutil.which("ptxas"):
        assert all(r.name != "cubin" for k in (a100, h100) for r in k.skipped)
    for kernel in (a100, h100):
        ptx = artefact_text(kernel, "ptx")
        assert ptx.count("mma.sync.aligned.m16n8k32.row.col.satfinite.s32.s8.s8.s32") >= 4
        # s8 fragments are loaded as b16 words: the same bytes in the same registers
        assert ptx.count("ldmatrix.sync.aligned.m8n8.x4.shared.b16") == 3 * 2
        assert "ld.shared" not in ptx
    assert mi300x.image.format == "hsaco"


@pytest.mark.parametrize(("dtype", "out"), [("f16", "f16"), ("bf16", "bf16"), ("s8", "s32")])
def test_mma_kernels_fit_in_64_registers_on_sm_80_and_sm_90(dtype, out):
    """The docs' GEMM (512 x 256 x 512): at most 64 registers a thread and no spills
    (4 blocks of 256 threads an SM). A thread holds its prefetched next K step as 4
    32-bit words (one register each; A read a word at a time), each round's global
    address its first plus a constant: element by element, the s8 kernel held 16
    bytes and a 64-bit pointer for most of them (125 registers on sm_90)."""
    text = dot_module(512, 256, 512, dtype=dtype, out=out)
    fusion = _fusion(text)
    for target in (A100_TARGET, H100_TARGET):
        emitter = GemmEmitter(analysed(fusion, target))
        assert emitter.plan.mma is not None
        ptx = artefact_text(compile_emitted(emitter.emit(), target), "ptx")
        (usage,) = ptxas_resource_usage(ptx, find_ptxas(), target.arch).values()
        assert usage.registers <= 64, (target.arch, usage)
        assert usage.spill_stores == usage.spill_loads == 0


@pytest.mark.parametrize(("dtype", "out"), [("f16", "f16"), ("bf16", "bf16"), ("s8", "s32")])
def test_chunked_kernels_ask_for_5_blocks_an_sm_and_fit_48_registers(dtype, out):
    """The docs' GEMM (512 x 256 x 512, chunk staging): the kernel tells ptxas the
    blocks an SM its 48-register plan allows (``.minnctapersm 5`` beside ``.maxntid
    256``: 5 x 256 x 48 of an SM's 65,536 registers), and ptxas fits it without a
    spill on sm_80 and sm_90 (unprompted, sm_90 took 56 for f16, 55 for bf16: 4
    blocks). Word staging asks nothing (its edge kernels need up to 64)."""
    fusion = _fusion(dot_module(512, 256, 512, dtype=dtype, out=out))
    for target in (A100_TARGET, H100_TARGET):
        emitter = GemmEmitter(analysed(fusion, target))
        assert emitter.vector_staging is not None and emitter.min_blocks_per_core == 5
        ptx = artefact_text(compile_emitted(emitter.emit(), target), "ptx")
        assert re.search(r"\.maxntid 256, 1, 1\s+\.minnctapersm 5\b", ptx), target.arch
        (usage,) = ptxas_resource_usage(ptx, find_ptxas(), target.arch).values()
        assert usage.registers <= gemm_vector.REGISTERS_PER_THREAD == 48, (target.arch, usage)
        assert usage.spill_stores == usage.spill_loads == 0
    words = _fusion(dot_module(100, 70, 130, dtype=dtype, out=out))
    emitter = GemmEmitter(analysed(words, H100_TARGET))
    assert emitter.vector_staging is None and emitter.min_blocks_per_core is None
    ptx = artefact_text(compile_emitted(emitter.emit(), H100_TARGET), "ptx")
    assert ".minnctapersm" not in ptx
    (usage,) = ptxas_resource_usage(ptx, find_ptxas(), H100_TARGET.arch).values()
    assert usage.spill_stores == usage.spill_loads == 0


def test_resident_blocks_is_the_occupancy_calculators_minimum():
    """The limits ``min_blocks_per_core`` is computed with (H100: 65,536 registers, 2,048
    threads, 228 KiB of shared memory, 1 KiB reserved a block, 32 blocks an SM)."""
    assert resident_blocks(H100_TARGET, 256, 48, 12288) == 5  # registers
    assert resident_blocks(H100_TARGET, 256, 56, 12288) == 4  # 56 x 32 rounds to 1,792
    assert resident_blocks(H100_TARGET, 256, 16, 100 * 1024) == 2  # shared memory
    assert resident_blocks(H100_TARGET, 1024, 16, 0) == 2  # threads
    assert resident_blocks(H100_TARGET, 32, 8, 0) == 32  # blocks


def test_mma_prefetch_is_held_in_words():
    """The fetched next K step crosses the MMAs in 32-bit words, one register each: a
    thread's 16-byte chunk as ``vector<4xi32>`` (row-major operands, ``gemm_vector``),
    or, staging word by word (A stored column-major), one vector a word (4 s8 or 2 f16
    elements: A's words as read, B's consecutive rounds); never one value an element."""
    for dtype, out, word in (("s8", "s32", 4), ("f16", "f16", 2)):
        chunked = dot_module(64, 96, 64, dtype=dtype, out=out)
        module = str(GemmEmitter(analysed(_fusion(chunked), H100_TARGET)).emit().module)
        # the chunk fetched in each of the 2 stages (guarded by "a next step exists")
        assert module.count("-> (vector<4xi32>)") >= 2
        words = dot_module(64, 96, 64, dtype=dtype, out=out, layouts=("{0,1}", ""))
        emitter = GemmEmitter(analysed(_fusion(words), H100_TARGET))
        assert emitter.vector_staging is None
        module = str(emitter.emit().module)
        element = {"s8": "i8", "f16": "f16"}[dtype]
        # a thread's 2 words of A and 2 of B a K step, fetched in each of the 2 stages
        assert module.count(f"-> (vector<{word}x{element}>, vector<{word}x{element}>,") == 2


# -- 16-byte chunks: one vector global load a thread and K step (gemm_vector) -------------

VECTOR_SHAPES = [
    ("f16", "f16", 100, 72, 136, ()),  # M, N, K edges, all multiples of 8
    ("bf16", "f32", 64, 96, 64, ()),
    ("f16", "f32", 24, 40, 48, (2,)),
    ("s8", "s32", 100, 96, 144, ()),  # s8 chunks are 16 elements: K and N multiples of 16
    ("s8", "s8", 40, 48, 80, (3,)),
]


@pytest.mark.parametrize("target", [A100_TARGET, H100_TARGET], ids=["sm_80", "sm_90"])
@pytest.mark.parametrize(
    ("dtype", "out", "m", "k", "n", "batch"),
    VECTOR_SHAPES,
    ids=["f16_edges", "bf16_f32", "f16_batched", "s8_edges", "s8_batched"],
)
def test_chunked_staging_equals_the_evaluator(target, dtype, out, m, k, n, batch):
    """Where A's K and B's N are minor and multiples of 16 bytes the tiles are staged in
    16-byte chunks (the first 128 threads A's, the others B's), tiles past an edge as
    zeros: s8 equals the evaluator bit for bit, f16/bf16 within the GEMM bound; the
    interpreter checks each vector access's alignment."""
    rng = np.random.default_rng(m + 3 * k + n)
    a, b = _values(dtype, (*batch, m, k), rng), _values(dtype, (*batch, k, n), rng)
    text = dot_module(m, k, n, dtype=dtype, out=out, batch=batch)
    staging = GemmEmitter(analysed(_fusion(text), target)).vector_staging
    assert staging is not None and staging.vector == 16 // np.dtype(NUMPY[dtype]).itemsize
    assert (staging.a_threads, staging.b_threads) == (128, 128)
    got, want, kernel = run_dot(text, [a, b], target=target)
    assert "vector.load" in str(kernel.module) and _mma_instructions(kernel) > 0
    if dtype == "s8":
        assert got.dtype == want.dtype and np.array_equal(got, want)
    else:
        assert_within_bound(got, want, a, b, m, k, n, out)


@pytest.mark.parametrize(("dtype", "out"), [("f16", "f16"), ("s8", "s32")])
def test_chunk_loads_read_whole_sectors(dtype, out):
    """The interpreter's memory model on a chunked kernel (64 x 96 x 64, one block): every
    lane's global read is one 16-byte chunk (s8 too: the vectorize pass groups 16 1-byte
    elements; at most 8 made it two 8-byte halves, each request using half of each of
    its sectors), a warp's request covers whole 32-byte sectors (A: 16 rows x 32 bytes;
    B: 16 K rows x two chunks), and the staging still equals the evaluator."""
    from heron.runtime.interpreter.profile import AccessRecorder

    rng = np.random.default_rng(22)
    m, k, n = 64, 96, 64
    a, b = _values(dtype, (m, k), rng), _values(dtype, (k, n), rng)
    text = dot_module(m, k, n, dtype=dtype, out=out)
    device = InterpreterDevice()
    target = target_for_device(device, "interpreter", H100_TARGET)
    kernel = compile_fusion(_fusion(text), target, "interpreter", emitters=REGISTRY)
    device.observer = AccessRecorder()
    run = run_on_device(device, kernel, [a, b])
    loads = device.observer.stats("global", "load")
    steps = k // gemm_mma.mma_k(dtype)
    # 8 warps, each one request a K step
    assert loads.requests == 8 * steps
    assert loads.widths == {16: loads.lane_accesses}
    # every 32-byte sector a request touches is used whole
    assert loads.sectors * 32 == loads.bytes_requested
    want = np.asarray(evaluate_module(parse_module(text), [a, b]))
    got = np.asarray(run.outputs[0])
    if dtype == "s8":
        assert np.array_equal(got, want)
    else:
        assert_within_bound(got, want, a, b, m, k, n, dtype)


@pytest.mark.parametrize(
    ("text", "why"),
    [
        (dot_module(100, 70, 136, dtype="f16"), "K is not a multiple of 8"),
        (dot_module(100, 72, 130, dtype="f16"), "N is not a multiple of 8"),
        (dot_module(64, 72, 64, dtype="s8", out="s32"), "K is not a multiple of 16"),
        (dot_module(64, 64, 64, dtype="f16", layouts=("{0,1}", "")), "A is column-major"),
        (dot_module(64, 64, 64, dtype="f16", layouts=("", "{0,1}")), "B's N is not minor"),
        (dot_module(64, 64, 64, dtype="f16", producer="negate"), "A is computed"),
    ],
    ids=["k_unaligned", "n_unaligned", "s8_k_unaligned", "a_col_major", "b_col_major", "fused"],
)
def test_unaligned_or_strided_operands_keep_word_staging(text, why):
    emitter = GemmEmitter(analysed(_fusion(text), H100_TARGET))
    assert emitter.plan.mma is not None and emitter.vector_staging is None, why


@pytest.mark.parametrize(("dtype", "out"), [("f16", "f16"), ("bf16", "bf16"), ("s8", "s32")])
def test_chunks_are_128_bit_global_loads_in_the_ptx(dtype, out):
    """The docs' GEMM (512 x 256 x 512) on sm_80 and sm_90: f16/bf16 stage every global
    element through ``ld.global.nc.v4.b32`` (one a thread and K step) and A's chunk
    through one ``st.shared.v4.b32``; s8 its 16-byte chunks through
    ``ld.global.nc.v4.b32`` too (the vectorize pass groups 16 1-byte elements; at most
    8 gave two 64-bit loads, which LLVM did not merge). The 100 x 70 x 130 kernel (K, N
    not multiples of 8) keeps words."""
    fusion = _fusion(dot_module(512, 256, 512, dtype=dtype, out=out))
    unaligned = _fusion(dot_module(100, 70, 130, dtype=dtype, out=out))
    for target in (A100_TARGET, H100_TARGET):
        ptx = artefact_text(
            compile_emitted(GemmEmitter(analysed(fusion, target)).emit(), target), "ptx"
        )
        (stats,) = kernel_statistics(ptx).values()
        assert set(stats.global_loads) == {128}, stats.global_loads
        assert "ld.global.nc.v4.b32" in ptx
        if dtype != "s8":
            assert ptx.count("st.shared.v4.b32") >= 3  # the prologue and each of 2 steps
        (usage,) = ptxas_resource_usage(ptx, find_ptxas(), target.arch).values()
        assert usage.spill_stores == usage.spill_loads == 0
        kernel = compile_emitted(GemmEmitter(analysed(unaligned, target)).emit(), target)
        assert "ld.global.nc.v4" not in artefact_text(kernel, "ptx")


@pytest.mark.parametrize(("dtype", "out"), [("f16", "f16"), ("s8", "s32")])
def test_mma_fragment_loads_have_no_bank_conflicts(dtype, out):
    """The padded tiles (rows 16 bytes longer, 12 banks apart) put the 8 rows of 16
    bytes of each matrix of an ``ldmatrix`` in 32 banks: the interpreter's memory model
    counts no conflict on the shared loads (unpadded rows of 32 bytes gave 2.33 a
    request); the double-buffered run still equals the evaluator."""
    from heron.runtime.interpreter.profile import AccessRecorder

    rng = np.random.default_rng(21)
    m, k, n = 64, 96, 64  # 6 K steps of f16 (3 of s8), one block
    a, b = _values(dtype, (m, k), rng), _values(dtype, (k, n), rng)
    text = dot_module(m, k, n, dtype=dtype, out=out)
    device = InterpreterDevice()
    target = target_for_device(device, "interpreter", H100_TARGET)
    kernel = compile_fusion(_fusion(text), target, "interpreter", emitters=REGISTRY)
    assert kernel.emitter == "gemm" and _mma_instructions(kernel) > 0
    device.observer = AccessRecorder()
    run = run_on_device(device, kernel, [a, b])
    loads = device.observer.stats("workgroup", "load")
    # per K step each of the 8 warps runs 3 ldmatrix.x4 (A, and B's two pairs of
    # fragments), each lane reading one 16-byte row
    assert loads.requests == 8 * 3 * (k // gemm_mma.mma_k(dtype))
    assert loads.widths == {16: loads.lane_accesses}
    assert loads.bank_conflicts == 0
    want = evaluate_module(parse_module(text), [a, b])
    got = np.asarray(run.outputs[0])
    if dtype == "s8":
        assert np.array_equal(got, np.asarray(want))
    else:
        assert_within_bound(got, np.asarray(want), a, b, m, k, n, dtype)


@pytest.mark.parametrize(
    ("dtype", "out", "m", "k", "n"),
    [
        ("f32", "f32", 3, 3, 3),  # partial rounds, A's not in whole tile rows
        ("f32", "f32", 100, 3, 24),
        ("f32", "f32", 40, 100, 200),
        ("f16", "f32", 64, 40, 24),
        ("bf16", "f32", 3, 256, 100),
        ("s8", "s32", 24, 40, 16),
        ("f16", "f32", 256, 128, 256),
    ],
)
def test_the_constructors_staging_layout_is_what_emission_copies(dtype, out, m, k, n):
    """The constructor decides from the plan alone (``_Staging``) what the copy of each
    tile looks like, so that it refuses what emission cannot write (the spec promises
    ``refuses_when_built``): some thread idle in a round exactly where ``_slots`` guards
    a copy, and as many rounds."""
    from mlir import ir
    from mlir.dialects import func

    from heron.emitters.dialect.context import make_context
    from heron.emitters.ir_utils import index_constant

    emitter = GemmEmitter(analysed(_fusion(dot_module(m, k, n, dtype=dtype, out=out))))
    with make_context(), ir.Location.unknown():
        module = ir.Module.create()
        with ir.InsertionPoint(module.body):
            index = ir.IndexType.get()
            function = func.FuncOp("f", ir.FunctionType.get([index], []))
            with ir.InsertionPoint(function.add_entry_block()):
                thread = function.entry_block.arguments[0]
                for side in (0, 1):
                    staging = emitter._staging(side)
                    slots = emitter._slots(side, [], index_constant(0), index_constant(0), thread)
                    assert len(slots) == staging.rounds * staging.word
                    assert staging.partial == any(slot.used is not None for slot in slots)
                func.ReturnOp([])


def test_an_mma_gemm_whose_tiles_are_not_whole_rounds_is_refused_when_built(monkeypatch):
    """On the MMA path without chunk staging the next K step travels in whole words, so
    a block whose threads would not all copy in every round cannot be emitted: the
    constructor says so (none of heron's plans makes one; K tiles of 25 would)."""
    import attrs

    from heron.plugins import gemm_plan

    def odd_k_tiles(dot, target):
        plan = gemm_plan.plan_gemm(dot, target)
        assert plan.mma is not None
        return attrs.evolve(plan, tk=25)

    monkeypatch.setattr(gemm_plugin, "plan_gemm", odd_k_tiles)
    monkeypatch.setattr(gemm_plugin, "vector_staging", lambda *args: None)
    with pytest.raises(UnsupportedError, match="whole rounds of the block"):
        GemmEmitter(analysed(_fusion(dot_module(256, 128, 256, dtype="f16", out="f32"))))
