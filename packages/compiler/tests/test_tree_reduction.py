"""The tree reduction rewriter: reductions longer than one block takes become two (issue 29).

Each case is checked three ways: the shapes of the two reduces (XLA's split, as
XLA:GPU's deviceless compiler made them), the evaluator's result against the unsplit module's
(bitwise for integers and max, within the summation bound for float sums), and
for the small cases the kernels run on the interpreter. A reduction to a
scalar of 256M elements, as issue 29 measured it, launches enough blocks to
fill an H100.
"""

from __future__ import annotations

import copy

import attrs
import numpy as np
import pytest

from heron.compiler import Target
from heron.compiler.fusion import gpu_pipeline
from heron.compiler.tree_reduction import (
    column_bound,
    row_bound,
    split_factors,
    split_long_reductions,
)
from heron.hlo.evaluator import evaluate_module
from heron.hlo.parser import parse_module
from heron.hlo.passes import run_pipeline
from heron.hlo.passes.pipelines import simplification_pipeline
from heron.hlo.verifier import verify_module

H100 = Target.preset("h100")

REDUCERS = {
    "add": "ROOT s = {t}[] add(a, b)",
    "max": "ROOT s = {t}[] maximum(a, b)",
}


def _module(input_shape: str, output_shape: str, dims: str, reducer: str = "add", t="f32"):
    init = "0" if reducer == "add" else "-inf" if t.startswith("f") else "-2147483648"
    body = REDUCERS[reducer].format(t=t)
    return parse_module(
        f"""
HloModule reduce_{reducer}

reducer {{
  a = {t}[] parameter(0)
  b = {t}[] parameter(1)
  {body}
}}

ENTRY main {{
  x = {t}{input_shape} parameter(0)
  init = {t}[] constant({init})
  ROOT r = {t}{output_shape} reduce(x, init), dimensions={dims}, to_apply=reducer
}}
"""
    )


def _split(module, target=H100):
    work = copy.deepcopy(module)
    run_pipeline(work, simplification_pipeline())
    changed = split_long_reductions(work, target)
    verify_module(work)
    reduces = [i for i in work.entry.instructions if i.opcode == "reduce"]
    return work, changed, [(i.operands[0].array_shape.dims, i.attr("dimensions")) for i in reduces]


#: name -> input shape, output shape, reduced dimensions, the reduces it becomes (XLA:GPU's
#: own, read off its optimized HLO: jax-cuda13-pjrt 0.12, deviceless, H100).
CASES = {
    # a scalar sum of 1,000,003 elements: padded to 815 x 1227, the 1227-long rows first
    "to_scalar": ("[1000003]", "[]", "{0}", [((815,), (0,)), ((815, 1227), (1,))]),
    # long rows: each of 4 rows of 40000 = 200 x 200
    "rows": ("[4,40000]", "[4]", "{1}", [((4, 200), (1,)), ((4, 200, 200), (2,))]),
    # long columns: 9000 = 90 x 100, the minor 100 first (90 x 3 columns left)
    "columns": ("[9000,3]", "[3]", "{0}", [((90, 3), (0,)), ((90, 100, 3), (1,))]),
    # a batched row reduction: the rows first, then the batch; the rows split again
    "batched": (
        "[20,3,50000]",
        "[3]",
        "{0,2}",
        [((60, 200), (1,)), ((60, 200, 250), (2,)), ((20, 3), (0,))],
    ),
    # a batch small enough for one block, its rows too long: the batch goes with the rows
    "small_batch_long_rows": (
        "[4,3,50000]",
        "[3]",
        "{0,2}",
        [((4, 3, 200, 250), (0, 3)), ((3, 200), (1,))],
    ),
}

#: (reduced length, row?) -> XLA:GPU's (k1, k2) on the H100 (its optimized HLO, as above):
#: rows bound 16384, columns 4096. Padding where no factor pair is near sqrt(length).
XLA_SPLITS = {
    (8192, False): (64, 128),
    (10000, False): (100, 100),
    (5000, False): (50, 100),
    (100000, False): (250, 400),
    (65536, False): (256, 256),
    (6000, False): (75, 80),
    (8191, False): (64, 128),
    (10007, False): (72, 139),
    (8198, False): (82, 100),
    (9000, False): (90, 100),
    (4097, False): (50, 82),
    (100003, True): (295, 339),
    (16390, True): (149, 110),
    (40000, True): (200, 200),
    (100000, True): (250, 400),
    (65536, True): (256, 256),
    (1000003, True): (815, 1227),
    (268435456, True): (16384, 16384),
    (70001, True): (172, 407),
    (30001, True): (137, 219),
    (30000, True): (150, 200),
    (50000, True): (200, 250),
}


@pytest.mark.parametrize(("length", "row"), sorted(XLA_SPLITS))
def test_the_factors_are_xla_s(length, row):
    bound = row_bound(H100) if row else column_bound(H100)
    assert split_factors(length, bound, row=row) == XLA_SPLITS[length, row]


def _key(entry):
    return sorted(entry)


@pytest.mark.parametrize("name", sorted(CASES))
def test_a_long_reduction_becomes_two_as_xla_splits_it(name):
    shape, out, dims, expected = CASES[name]
    module = _module(shape, out, dims)
    work, changed, reduces = _split(module)
    assert changed and _key(reduces) == _key(expected)
    x = (
        np.random.default_rng(1)
        .standard_normal(tuple(int(d) for d in shape.strip("[]").split(",")))
        .astype(np.float32)
    )
    want = np.asarray(evaluate_module(module, [x]), np.float64)
    got = np.asarray(evaluate_module(work, [x]), np.float64)
    # another summation order: within (n - 1 + log2 n) u sum|x| of the reference
    n = x.size // max(want.size, 1)
    bound = (n + np.log2(n)) * 2.0**-24 * np.abs(x).sum() / max(want.size, 1)
    assert np.all(np.abs(got - want) <= bound)


def test_integer_and_max_reductions_keep_every_bit():
    for reducer, t in (("add", "s32"), ("max", "f32"), ("max", "s32")):
        module = _module("[70001]", "[]", "{0}", reducer, t)
        work, changed, _ = _split(module)
        assert changed
        rng = np.random.default_rng(2)
        if t == "s32":
            x = rng.integers(-(2**31), 2**31, 70001, dtype=np.int64).astype(np.int32)
        else:
            x = rng.standard_normal(70001).astype(np.float32)
        assert (
            np.asarray(evaluate_module(work, [x])).tobytes()
            == np.asarray(evaluate_module(module, [x])).tobytes()
        )


def test_a_reduction_one_block_takes_stays_as_it_is():
    for shape, out, dims in (
        (f"[{row_bound(H100)}]", "[]", "{0}"),
        (f"[8,{row_bound(H100)}]", "[8]", "{1}"),
        (f"[{column_bound(H100)},7]", "[7]", "{0}"),
        ("[8,3,64]", "[3]", "{0,2}"),
    ):
        _, changed, reduces = _split(_module(shape, out, dims))
        assert not changed and len(reduces) == 1, shape


def test_a_variadic_argmax_is_split_with_each_input_padded_by_its_own_init():
    module = parse_module(
        """
HloModule argmax

argmax {
  v0 = f32[] parameter(0)
  i0 = s32[] parameter(1)
  v1 = f32[] parameter(2)
  i1 = s32[] parameter(3)
  greater = pred[] compare(v0, v1), direction=GT
  equal = pred[] compare(v0, v1), direction=EQ
  lower = pred[] compare(i0, i1), direction=LT
  tie = pred[] and(equal, lower)
  keep = pred[] or(greater, tie)
  v = f32[] select(keep, v0, v1)
  i = s32[] select(keep, i0, i1)
  ROOT r = (f32[], s32[]) tuple(v, i)
}

ENTRY main {
  x = f32[30001]{0} parameter(0)
  iota = s32[30001]{0} iota(), iota_dimension=0
  ninf = f32[] constant(-inf)
  zero = s32[] constant(0)
  ROOT r = (f32[], s32[]) reduce(x, iota, ninf, zero), dimensions={0}, to_apply=argmax
}
"""
    )
    work, changed, reduces = _split(module)
    assert changed and len(reduces) == 2
    x = np.random.default_rng(3).standard_normal(30001).astype(np.float32)
    x[12345] = 10.0
    got = evaluate_module(work, [x])
    want = evaluate_module(module, [x])
    assert [np.asarray(v).item() for v in got] == [np.asarray(v).item() for v in want]
    assert np.asarray(got[1]).item() == 12345


def test_the_split_runs_on_the_interpreter_and_gives_the_evaluator_s_result():
    # A Target whose blocks hold 64 threads takes rows of 1024 at most: a 5000-long
    # row is split; on the H100 a 9000-long column is (4096 at most). Compiled and run.
    from heron.compiler.program_run import run_program
    from heron.runtime.core.registry import load_backends

    small = attrs.evolve(H100, threads_per_block_limit=64)
    assert row_bound(small) == 1024
    device = load_backends().create_device("interpreter")
    for target, shape, out, dims in (
        (small, "[3,5000]", "[3]", "{1}"),
        (H100, "[9000,2]", "[2]", "{0}"),
    ):
        module = _module(shape, out, dims)
        work = copy.deepcopy(module)
        run_pipeline(work, gpu_pipeline(target))
        assert sum(i.opcode == "fusion" for i in work.entry.instructions) == 2, shape
        x = (
            np.random.default_rng(4)
            .standard_normal(tuple(int(d) for d in shape.strip("[]").split(",")))
            .astype(np.float32)
        )
        run = run_program(module, [x], device, "interpreter", target=target)
        want = np.asarray(evaluate_module(module, [x]))
        np.testing.assert_allclose(run.outputs[0], want, rtol=1e-5, atol=1e-4)
        assert run.kernel_launches == 2


def test_a_scalar_sum_of_256m_elements_fills_the_device():
    # issue 29's table: heron launched one block of 512 threads, XLA 16384 blocks then 1
    from heron.compiler.executable import compile_program

    module = _module("[268435456]", "[]", "{0}")
    compiled = compile_program(module, H100, ("interpreter",))
    grids = [kernel.grid for kernel in _launches(compiled.artefact.program)]
    assert len(grids) == 2
    first, second = grids
    assert first[0] * first[1] * first[2] >= H100.core_count  # every SM has work
    assert second == (1, 1, 1)


def _launches(program):
    from heron.runtime.core.thunks import KernelThunk, walk

    return [t for t in walk(program) if isinstance(t, KernelThunk)]


def test_a_reduction_read_through_a_relabelling_transpose_is_split_by_its_bytes():
    """ViT-B/16's bias gradient: ``transpose(p)`` of layout ``{1,3,2,0}`` is p's bytes
    ``[32,12,64,197]`` relabelled, summed over batch and tokens: physically a batched row
    reduction ``[32, 768, 197]``, which XLA splits (197 first, then 32: 3,072 and 6
    blocks) after normalising the layout; heron kept it one kernel of 96 blocks."""
    module = parse_module(
        """
HloModule bias_grad

add_r {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}

ENTRY main {
  p = f32[32,12,64,197]{3,2,1,0} parameter(0)
  t = f32[32,197,12,64]{1,3,2,0} transpose(p), dimensions={0,3,1,2}
  z = f32[] constant(0)
  ROOT r = f32[12,64]{1,0} reduce(t, z), dimensions={0,1}, to_apply=add_r
}
"""
    )
    work = copy.deepcopy(module)
    assert split_long_reductions(work, H100)
    verify_module(work)
    reduces = [i for i in work.entry.instructions if i.opcode == "reduce"]
    assert [(i.operands[0].array_shape.dims, i.attr("dimensions")) for i in reduces] == [
        ((32, 768, 197), (2,)),
        ((32, 768), (0,)),
    ]
    x = np.random.default_rng(5).standard_normal((32, 12, 64, 197)).astype(np.float32)
    np.testing.assert_allclose(
        np.asarray(evaluate_module(work, [x])),
        np.asarray(evaluate_module(module, [x])),
        rtol=1e-4,
        atol=1e-4,
    )
