"""lower-heron-gpu-to-scf: predicated accesses and warp reductions before lower-tensors."""

from __future__ import annotations

import pytest
from heron_test_support import vector_pipeline_inputs as _inputs
from heron_test_support.kernels import gpu_module, ptx_and_stages
from mlir import ir

from heron.emitters.dialect import make_context
from heron.emitters.pipeline import PipelineOptions, lower_to_scf


def _after(text: str, warp: int = 32) -> str:
    with make_context(), ir.Location.unknown():
        module = ir.Module.parse(text)
        lower_to_scf.run(module, PipelineOptions(warp_size=warp))
        module.operation.verify()
        return str(module)


@pytest.mark.parametrize("warp", [32, 64])
def test_predicated_accesses_become_scf_if_and_the_reduction_shuffles(warp):
    out = _after(_inputs.reduction_lower_input(), warp)
    assert "predicated_" not in out and "shuffle_reduce" not in out
    # max_distance 8: distances 8, 4, 2, 1, each a shuffle and a call of the reducer
    assert out.count("gpu.shuffle  xor") == 4 and out.count("call @add") == 4
    assert f"arith.constant {warp} : i32" in out
    # still tensors: the extract's else-branch is its fallback, the insert's the tensor
    assert out.count("scf.if") == 2 and "tensor.insert" in out and "tensor.extract" in out


KERNEL = """
func.func private @combine(%a: {t}, %b: {t}) -> {t} {{
  %s = {add} %a, %b : {t}
  return %s : {t}
}}
func.func @k(%in: tensor<32x{t}>, %out: tensor<32x{t}>) -> tensor<32x{t}>
    attributes {{heron.kernel, heron.block_size = array<i64: 32>,
                heron.grid_size = array<i64: 1>}} {{
  %tid = gpu.thread_id x upper_bound 32
  %x = tensor.extract %in[%tid] : tensor<32x{t}>
  %r = "heron_gpu.shuffle_reduce"(%x) {{max_distance = 16 : i64, reducer = @combine,
      operandSegmentSizes = array<i32: 1, 0, 0, 0, 0, 0, 0, 0>,
      resultSegmentSizes = array<i32: 1, 0, 0, 0, 0, 0, 0, 0>}} : ({t}) -> {t}
  %o = tensor.insert %r into %out[%tid] : tensor<32x{t}>
  return %o : tensor<32x{t}>
}}
"""


@pytest.mark.parametrize(
    ("t", "add", "lanes_per_value"),
    [
        ("f32", "arith.addf", 1),
        ("f16", "arith.addf", 1),
        ("i64", "arith.addi", 2),
        ("i8", "arith.addi", 1),
    ],
)
def test_every_width_is_shuffled_in_32_bit_lanes_and_compiles(t, add, lanes_per_value):
    text = KERNEL.format(t=t, add=add)
    out = _after(text)
    assert out.count("gpu.shuffle  xor") == 5 * lanes_per_value  # distances 16 .. 1
    ptx, _ = ptx_and_stages(gpu_module(text), "sm_80")  # ptxas accepts it
    assert ptx.count("shfl.sync.bfly") == 5 * lanes_per_value
