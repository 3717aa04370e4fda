"""The reduction splitter: a reduce of dimensions apart in memory becomes two.

The decisions are XLA:GPU's own, read off its optimized HLO of the same module
(jax-cuda13-pjrt 0.12 through ``../shared/tools/xla_gpu``, deviceless, H100):
which run is reduced first and what the first reduce keeps; heron's one
documented difference (a split whose first half no reduction emitter takes
stays whole, where XLA splits and its fusion makes the halves one loop kernel
again) is tested as such. Each split is checked against the evaluator's result
on the unsplit module: bitwise for integer and max reductions, within the
summation bound for float sums.
"""

from __future__ import annotations

import copy

import numpy as np
import pytest

from heron.compiler import Target
from heron.compiler.fusion import gpu_pipeline
from heron.compiler.reduction_splitter import first_reduced_run, split_scattered_reductions
from heron.hlo.evaluator import evaluate_module
from heron.hlo.parser import parse_module
from heron.hlo.passes import run_pipeline
from heron.hlo.verifier import verify_module

H100 = Target.preset("h100")


def _module(input_shape: str, output_shape: str, dims: str, reducer: str = "add", t="f32"):
    init = "0" if reducer == "add" else "-inf" if t.startswith("f") else "-2147483648"
    op = "add" if reducer == "add" else "maximum"
    return parse_module(
        f"""
HloModule reduce_{reducer}

reducer {{
  a = {t}[] parameter(0)
  b = {t}[] parameter(1)
  ROOT s = {t}[] {op}(a, b)
}}

ENTRY main {{
  x = {t}{input_shape} parameter(0)
  init = {t}[] constant({init})
  ROOT r = {t}{output_shape} reduce(x, init), dimensions={dims}, to_apply=reducer
}}
"""
    )


def _split(module):
    work = copy.deepcopy(module)
    changed = split_scattered_reductions(work, H100)
    verify_module(work)
    reduces = [i for i in work.entry.instructions if i.opcode == "reduce"]
    # (the operand's dimensions, the reduced ones), the first reduce first
    return work, changed, [(i.operands[0].array_shape.dims, i.attr("dimensions")) for i in reduces]


def _input(shape: str, t: str, seed: int) -> np.ndarray:
    dims = tuple(int(d) for d in shape.split("{")[0].strip("[]").split(","))
    rng = np.random.default_rng(seed)
    if t == "s32":
        return rng.integers(-(2**31), 2**31, dims, dtype=np.int64).astype(np.int32)
    return rng.standard_normal(dims).astype(np.float32)


#: name -> input shape, output shape, reduced dimensions, the two reduces heron makes, the
#: first first (the operand's dimensions, the reduced ones): XLA's split of the same reduce (its
#: ReductionDimensionGrouper merges the adjacent runs first, so its first reduce is over
#: one grouped dimension of the same elements).
XLA_SPLITS = {
    # flax GroupNorm's statistics over NHWC with 4 groups of 2 channels: the 8 x 8
    # spatial run (64) first, then the 2 channels of each group (XLA: [4,64,4,2] over
    # {1} to f32[4,4,2], then {2})
    "group_norm": (
        "[4,8,8,4,2]",
        "[4,4]",
        "{1,2,4}",
        [((4, 8, 8, 4, 2), (1, 2)), ((4, 4, 2), (2,))],
    ),
    # two runs of 100: the first (major) one first (XLA: f32[8,4,100], then {2})
    "equal_runs": (
        "[8,100,4,100]",
        "[8,4]",
        "{1,3}",
        [((8, 100, 4, 100), (1,)), ((8, 4, 100), (2,))],
    ),
    # three runs: the longest (256) first, then what is left is a batched row reduction
    # the reduction emitters take
    "three_runs": (
        "[2,64,3,5,256]",
        "[64,5]",
        "{0,2,4}",
        [((2, 64, 3, 5, 256), (4,)), ((2, 64, 3, 5), (0, 2))],
    ),
}


@pytest.mark.parametrize("name", sorted(XLA_SPLITS))
def test_a_scattered_reduction_is_split_as_xla_splits_it(name):
    shape, out, dims, expected = XLA_SPLITS[name]
    module = _module(shape, out, dims)
    work, changed, reduces = _split(module)
    assert changed and reduces == expected
    x = _input(shape, "f32", 1)
    want = np.asarray(evaluate_module(module, [x]), np.float64)
    got = np.asarray(evaluate_module(work, [x]), np.float64)
    # another summation order: within (n - 1 + log2 n) u sum|x| of each output's inputs
    n = x.size // want.size
    bound = (n + np.log2(n)) * 2.0**-24 * np.abs(x).sum() / want.size
    assert np.all(np.abs(got - want) <= bound)


def test_integer_and_max_reductions_keep_every_bit():
    for reducer, t in (("add", "s32"), ("max", "f32"), ("max", "s32")):
        module = _module("[48,40,9,33]", "[40,33]", "{0,2}", reducer, t)
        x = _input("[48,40,9,33]", t, 2)
        work, changed, reduces = _split(module)
        assert changed, (reducer, t)
        assert reduces == [((48, 40, 9, 33), (0,)), ((40, 9, 33), (1,))]  # the 48s, then the 9s
        assert (
            np.asarray(evaluate_module(work, [x])).tobytes()
            == np.asarray(evaluate_module(module, [x])).tobytes()
        )


def test_a_split_no_reduction_emitter_would_take_is_not_made():
    """XLA splits these too, then fuses the two loop-emitted halves back into one loop
    kernel (its optimized HLO: one kernel for each); heron keeps them whole, one kernel."""
    for shape, out, dims in (
        ("[16,32,8,64]", "[32,64]", "{0,2}"),  # a column of 16: under a warp
        ("[12,40,9,33]", "[40,33]", "{0,2}"),
        ("[4,6,6,4]{2,3,0,1}", "[4,4]", "{1,2}"),  # haiku's bicubic resize's mean
    ):
        module = _module(shape, out, dims)
        assert first_reduced_run(module.entry.root) is not None, shape
        _, changed, reduces = _split(module)
        assert not changed and len(reduces) == 1, shape


def test_runs_are_read_in_the_physical_order():
    # dimensions 0 and 2 lie together when dimension 2 is laid out next to 0
    together = _module("[64,16,64,16]{3,1,2,0}", "[16,16]", "{0,2}")
    assert first_reduced_run(together.entry.root) is None
    assert not _split(together)[1]
    # the same reduce row-major: two runs of 64, the first reduced first
    apart = _module("[64,16,64,16]", "[16,16]", "{0,2}")
    assert first_reduced_run(apart.entry.root) == (0,)
    # laid out [d2, d1, d0, d3]: dimension 2's run comes first in memory
    transposed = _module("[64,16,64,16]{3,0,1,2}", "[16,16]", "{0,2}")
    assert first_reduced_run(transposed.entry.root) == (2,)
    work, changed, _ = _split(transposed)
    assert changed
    partial = next(i for i in work.entry.instructions if i.name.endswith("split.1"))
    # the first reduce keeps the order in memory of the dimensions it keeps: d1, d0, d3
    assert str(partial.shape) == "f32[64,16,16]{2,0,1}"
    x = _input("[64,16,64,16]", "f32", 3)
    want = np.asarray(evaluate_module(transposed, [x]), np.float64)
    got = np.asarray(evaluate_module(work, [x]), np.float64)
    assert np.allclose(got, want, rtol=1e-5, atol=1e-3)


def test_size_one_dimensions_neither_join_nor_separate_runs():
    # [N, 1, H, 1, C]: H and C are one run apart from N only if a kept dim lies between
    assert first_reduced_run(_module("[8,1,64,1,32]", "[8,1]", "{1,2,4}").entry.root) is None
    module = _module("[64,1,8,1,32]", "[8,1]", "{0,1,4}")
    assert first_reduced_run(module.entry.root) == (0,)


def test_variadic_and_contiguous_reductions_are_left_alone():
    # a row, a column and a batched row reduction: the emitters take them as they are
    for shape, out, dims in (
        ("[64,4096]", "[64]", "{1}"),
        ("[4096,64]", "[64]", "{0}"),
        ("[4,64,4096]", "[64]", "{0,2}"),
    ):
        assert not _split(_module(shape, out, dims))[1], shape
    argmax = parse_module(
        """
HloModule argmax

argmax {
  v0 = f32[] parameter(0)
  i0 = s32[] parameter(1)
  v1 = f32[] parameter(2)
  i1 = s32[] parameter(3)
  keep = pred[] compare(v0, v1), direction=GE
  v = f32[] select(keep, v0, v1)
  i = s32[] select(keep, i0, i1)
  ROOT r = (f32[], s32[]) tuple(v, i)
}

ENTRY main {
  x = f32[64,8,64] parameter(0)
  i = s32[64,8,64] iota(), iota_dimension=0
  low = f32[] constant(-inf)
  zero = s32[] constant(0)
  ROOT r = (f32[8], s32[8]) reduce(x, i, low, zero), dimensions={0,2}, to_apply=argmax
}
"""
    )
    assert not _split(argmax)[1]


def test_a_group_norm_of_gpu_size_reduces_in_blocks_that_fill_the_device():
    """flax GroupNorm's statistics over NHWC f32 [32, 64, 64, 512] in 32 groups: the loop
    emitter gave each of the 1,024 (batch, group) pairs one thread summing 65,536
    elements; split, the spatial run is a column reduction in 256 blocks of 1,024 threads
    (XLA:GPU's launch for the same module), the 16 channels of each group a row one."""
    module = _module("[32,64,64,32,16]", "[32,32]", "{1,2,4}")
    run_pipeline(module, gpu_pipeline(H100))
    from heron.emitters.fusion_analysis import analyse_fusion
    from heron.emitters.selection import default_registry, select_emitter

    kinds = []
    for fusion in (i for i in module.entry.instructions if i.opcode == "fusion"):
        analysis = analyse_fusion(fusion, H100)
        kinds.append(select_emitter(analysis, default_registry()).name)
    assert sorted(kinds) == ["reduce_column", "reduce_multirow"]
