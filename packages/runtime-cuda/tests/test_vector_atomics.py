"""sm_90's vector atomic adds: lower-tensors' marked lanes -> one ``red.global`` in the PTX.

A vector ``heron_gpu.atomic_rmw`` (what vectorize-loads-stores makes of a scatter-add's
window) is lowered by lower-tensors to one marked scalar atomic per lane, and joined
again by the CUDA step ``vector-atomics``; the SASS holds one 128-bit reduction.
"""

from __future__ import annotations

import pytest
from heron_test_support.kernels import kernel_after, ptx_and_stages
from mlir import ir

from heron.emitters import ir_utils
from heron.emitters.atomics import lane_of
from heron.emitters.dialect import make_context
from heron.emitters.pipeline import PipelineOptions, lower_tensors

KERNEL = """
func.func @k(%a: tensor<1024x{t}>, %v: tensor<1024x{t}>) -> tensor<1024x{t}>
    attributes {{heron.kernel, heron.block_size = array<i64: 64>,
                heron.grid_size = array<i64: 1>}} {{
  %t = gpu.thread_id x upper_bound 64
  %c{lanes} = arith.constant {lanes} : index
  %i = arith.muli %t, %c{lanes} : index
  %z = arith.constant 0.0 : {t}
  %x = vector.transfer_read %v[%i], %z {{in_bounds = [true]}}
      : tensor<1024x{t}>, vector<{lanes}x{t}>
  %r = "heron_gpu.atomic_rmw"(%a, %i) ({{
  ^bb0(%cur: vector<{lanes}x{t}>):
    %n = arith.addf %cur, %x : vector<{lanes}x{t}>
    "gpu.yield"(%n) : (vector<{lanes}x{t}>) -> ()
  }}) : (tensor<1024x{t}>, index) -> tensor<1024x{t}>
  return %r : tensor<1024x{t}>
}}
"""


def _lowered(t: str, lanes: int) -> str:
    text = KERNEL.format(t=t, lanes=lanes)
    return kernel_after(text, lambda m: lower_tensors.run(m, PipelineOptions()))


@pytest.mark.parametrize(("t", "lanes"), [("f32", 4), ("f32", 2), ("bf16", 8), ("f16", 4)])
def test_lower_tensors_writes_one_marked_atomic_per_lane(t, lanes):
    out = _lowered(t, lanes)
    marks = [f"heron.vector_atomic_lane = [{k}, {lanes}]" for k in range(lanes)]
    assert all(out.count(mark) == 1 for mark in marks), out
    assert out.count("memref.atomic_rmw addf") == lanes
    assert out.index(marks[0]) < out.index(marks[-1])


@pytest.mark.parametrize(
    ("t", "lanes", "ptx", "sass"),
    [
        ("f32", 4, "red.global.add.v4.f32", "REDG.E.ADD.F32x4"),
        ("f32", 2, "red.global.add.v2.f32", "REDG.E.ADD.F32x2"),
        ("bf16", 8, "red.global.add.noftz.v8.bf16", "REDG.E.ADD.BF16x8"),
        ("f16", 4, "red.global.add.noftz.v4.f16", "REDG.E.ADD.F16x4"),
    ],
)
def test_the_cuda_step_joins_the_lanes_into_one_reduction(t, lanes, ptx, sass):
    text, stages = ptx_and_stages(_lowered(t, lanes), "sm_90")  # ptxas accepts it
    assert ptx in text
    assert "atom.global" not in text  # no scalar lane left
    assert "heron.vector_atomic_lane" in stages["fast-math"]
    assert "heron.vector_atomic_lane" not in stages["vector-atomics"]
    statistics = pytest.importorskip("heron.runtime.cuda.sass_statistics")
    tools = pytest.importorskip("heron.runtime.cuda.compiler_tools")
    try:
        ptxas, nvdisasm = tools.find_ptxas(), tools.find_nvdisasm()
    except tools.ToolNotFoundError as exc:  # CI installs both; a bare checkout may not
        pytest.skip(str(exc))
    (kernel,) = statistics.ptx_sass_statistics(text, ptxas, nvdisasm).values()
    assert kernel.atomics == {lanes * (32 if t == "f32" else 16): 1}, sass


def test_an_incomplete_run_stays_scalar():
    """Lanes that do not add to consecutive elements of one buffer are not joined."""
    out = _lowered("f32", 4).replace("heron.vector_atomic_lane = [2, 4]", "heron.other = 1")
    text, _ = ptx_and_stages(out, "sm_90")
    assert "red.global.add.v" not in text
    assert text.count("atom.global.add.f32") + text.count("red.global.add.f32") == 4


def test_marks_read_back():
    out = _lowered("f32", 2)
    with make_context():
        module = ir.Module.parse(out)
        lanes = [lane_of(op) for op in ir_utils.walk_ops(module.operation, "memref.atomic_rmw")]
    assert lanes == [(0, 2), (1, 2)]
