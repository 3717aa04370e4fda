"""lower-tensors' atomics per type: native kinds, exchange, CAS loops over integer bits.

Each case is lowered and then compiled for sm_80 (ptxas) and gfx942, since
the point of the integer view is that LLVM's cmpxchg accepts it.
"""

from __future__ import annotations

import pytest
from heron_test_support.kernels import hsaco_stages, ptx_and_stages
from mlir import ir

from heron.emitters.dialect import make_context
from heron.emitters.pipeline import PipelineOptions, lower_tensors
from heron.hlo.errors import UnsupportedError

TEMPLATE = """
func.func @k(%a: tensor<64x{t}>, %v: tensor<64x{t}>) -> tensor<64x{t}>
    attributes {{heron.kernel, heron.block_size = array<i64: 64>,
                heron.grid_size = array<i64: 1>}} {{
  %t = gpu.thread_id x
  %c0 = arith.constant 0 : index
  %x = tensor.extract %v[%t] : tensor<64x{t}>
  %r = "heron_gpu.atomic_rmw"(%a, %c0) ({{
  ^bb0(%cur: {t}):
    {body}
  }}) : (tensor<64x{t}>, index) -> tensor<64x{t}>
  return %r : tensor<64x{t}>
}}
"""


def _lowered(t: str, body: str, target: str = "cuda") -> str:
    with make_context(), ir.Location.unknown():
        module = ir.Module.parse(TEMPLATE.format(t=t, body=body))
        options = PipelineOptions(backend=target, warp_size=64 if target == "rocm" else 32)
        lower_tensors.run(module, options)
        module.operation.verify()
        return str(module)


def _compiles(text: str) -> None:
    ptx_and_stages(text, "sm_80")  # ptxas accepts the PTX
    hsaco_stages(text, "gfx942")  # an AMDGPU code object


@pytest.mark.parametrize(
    ("t", "bits"), [("f32", "i32"), ("f16", "i16"), ("bf16", "i16"), ("f64", "i64")]
)
def test_float_cas_goes_through_the_integer_view(t, bits):
    body = f'%n = arith.mulf %cur, %x : {t}\n    "gpu.yield"(%n) : ({t}) -> ()'
    out = _lowered(t, body)
    assert f"arith.bitcast %arg0 : memref<64x{t}> to memref<64x{bits}>" in out
    assert f"memref.generic_atomic_rmw %1[%c0] : memref<64x{bits}>" in out
    _compiles(out)


@pytest.mark.parametrize(
    ("t", "kind"),
    [("f16", "addf"), ("bf16", "addf"), ("f64", "addf"), ("i64", "maxs"), ("i8", "addi")],
)
def test_native_kinds_for_every_width(t, kind):
    op = {"addf": "arith.addf", "maxs": "arith.maxsi", "addi": "arith.addi"}[kind]
    body = f'%n = {op} %cur, %x : {t}\n    "gpu.yield"(%n) : ({t}) -> ()'
    out = _lowered(t, body)
    assert f"memref.atomic_rmw {kind}" in out and "generic_atomic_rmw" not in out
    _compiles(out)


@pytest.mark.parametrize("t", ["f32", "i16"])
def test_a_body_ignoring_the_current_value_is_an_exchange(t):
    out = _lowered(t, f'"gpu.yield"(%x) : ({t}) -> ()')
    assert "memref.atomic_rmw assign" in out
    _compiles(out)


def test_i8_cas_compiles():
    body = '%n = arith.muli %cur, %x : i8\n    "gpu.yield"(%n) : (i8) -> ()'
    out = _lowered("i8", body)
    assert "memref.generic_atomic_rmw %arg0[%c0] : memref<64xi8>" in out
    _compiles(out)


WIDENED = """%wc = arith.extf %cur : {t} to f32
    %wx = arith.extf %x : {t} to f32
    %s = {op} %{first}, %{second} : f32
    %n = arith.truncf %s : f32 to {t}
    "gpu.yield"(%n) : ({t}) -> ()"""


@pytest.mark.parametrize("t", ["f16", "bf16"])
@pytest.mark.parametrize(("first", "second"), [("wc", "wx"), ("wx", "wc")])
def test_a_half_add_computed_in_f32_is_the_native_half_add(t, first, second):
    """f32's 24 bits round a sum of two halves to the correctly rounded half sum: the
    elemental emitter's widened add is the device's native half atomic add."""
    out = _lowered(t, WIDENED.format(t=t, op="arith.addf", first=first, second=second))
    assert "memref.atomic_rmw addf" in out and "generic_atomic_rmw" not in out
    _compiles(out)


def test_a_widened_body_that_is_no_single_op_stays_a_cas_loop():
    body = WIDENED.format(t="bf16", op="arith.mulf", first="wc", second="wx")
    assert "generic_atomic_rmw" in _lowered("bf16", body)
    current_twice = WIDENED.format(t="bf16", op="arith.addf", first="wc", second="wc")
    assert "generic_atomic_rmw" in _lowered("bf16", current_twice)


def test_a_vector_atomic_that_is_no_add_is_refused_by_name():
    """vectorize-loads-stores makes vector atomics of adds alone; another body is an error
    naming the op, not a silently scalar or wrong update."""
    text = """
func.func @k(%a: tensor<64xf32>, %v: tensor<64xf32>) -> tensor<64xf32>
    attributes {heron.kernel, heron.block_size = array<i64: 16>,
                heron.grid_size = array<i64: 1>} {
  %c0 = arith.constant 0 : index
  %z = arith.constant 0.0 : f32
  %x = vector.transfer_read %v[%c0], %z {in_bounds = [true]} : tensor<64xf32>, vector<4xf32>
  %r = "heron_gpu.atomic_rmw"(%a, %c0) ({
  ^bb0(%cur: vector<4xf32>):
    %n = arith.mulf %cur, %x : vector<4xf32>
    "gpu.yield"(%n) : (vector<4xf32>) -> ()
  }) : (tensor<64xf32>, index) -> tensor<64xf32>
  return %r : tensor<64xf32>
}
"""
    with make_context(), ir.Location.unknown():
        module = ir.Module.parse(text)
        with pytest.raises(UnsupportedError, match="a vector atomic_rmw must add"):
            lower_tensors.run(module, PipelineOptions())
