"""Kernel arguments: noalias, readonly, align and dereferenceable from the kernel ABI to LLVM IR.

``heron.emitters.kernel_arguments``: the emitter marks in-place outputs on the
entry (``heron.in_place_of``), lower-tensors gives the ``gpu.func`` the LLVM
dialect's argument attributes and checks the lowered kernel against them, and
both backends' conversions carry them to the ``define`` of the kernel. An argument
marked ``heron.shares_buffer`` (its buffer overlaps another argument's) gets neither
``noalias`` nor ``readonly``. A wrong ``readonly`` (an argument the kernel writes), or
an aliased pair or shared argument marked ``noalias``/``readonly``, is refused. The
corpus-wide checks are in tests/test_nc_loads.py, the programs whose buffer assignment
shares arguments in tests/test_shared_kernel_arguments.py.
"""

from __future__ import annotations

import re

import pytest
from heron_test_support.kernels import hsaco_stages, ptx_and_stages
from mlir import ir

from heron.emitters import kernel_arguments as ka
from heron.emitters.dialect import make_context
from heron.emitters.pipeline import PipelineOptions, lower_tensors
from heron.hlo.errors import UnsupportedError

# An in-place kernel as the DUS emitter writes it: %o is %p's buffer (heron.in_place_of = 0),
# %u is only read; one more output %s is written and is a buffer of its own.
IN_PLACE = """
func.func @k(%p: tensor<64xf32>, %u: tensor<64xf32>,
             %o: tensor<64xf32> {heron.in_place_of = 0 : i64}, %s: tensor<16xi4>)
    -> (tensor<64xf32>, tensor<16xi4>)
    attributes {heron.kernel, heron.block_size = array<i64: 64>,
                heron.grid_size = array<i64: 1>} {
  %t = gpu.thread_id x
  %x = tensor.extract %u[%t] : tensor<64xf32>
  %r = tensor.insert %x into %o[%t] : tensor<64xf32>
  %c0 = arith.constant 0 : index
  %b = arith.constant 1 : i4
  %s2 = tensor.insert %b into %s[%c0] : tensor<16xi4>
  return %r, %s2 : tensor<64xf32>, tensor<16xi4>
}
"""


def _lowered(text: str) -> ir.Module:
    module = ir.Module.parse(text)
    lower_tensors.run(module, PipelineOptions())
    module.operation.verify()
    return module


def _kernel(module: ir.Module) -> tuple[ir.Operation, ir.Operation]:
    gpu_module = next(op.operation for op in module.body.operations)
    kernel = next(
        op.operation
        for op in gpu_module.regions[0].blocks[0].operations
        if op.operation.name == "gpu.func"
    )
    return gpu_module, kernel


def _attrs(kernel: ir.Operation) -> list[set[str]]:
    return [
        {ir.DictAttr(d)[i].name for i in range(len(ir.DictAttr(d)))}
        for d in ir.ArrayAttr(kernel.attributes["arg_attrs"])
    ]


def test_the_abi_decides_noalias_and_readonly():
    # parameters 0..2, outputs 3, 4; output 3 is parameter 1's buffer
    assert ka.argument_attributes(5, {3, 4}, {3: 1}) == [
        (True, True),
        (False, False),
        (True, True),
        (False, False),
        (True, False),
    ]


def test_lower_tensors_gives_the_kernel_its_argument_attributes():
    with make_context(), ir.Location.unknown():
        module = _lowered(IN_PLACE)
        _, kernel = _kernel(module)
        attrs = _attrs(kernel)
        assert attrs[0] == {"llvm.align", "llvm.dereferenceable"}  # aliased parameter
        assert attrs[1] == {"llvm.align", "llvm.dereferenceable", "llvm.noalias", "llvm.readonly"}
        assert attrs[2] == {"llvm.align", "llvm.dereferenceable", ka.IN_PLACE_ATTR}
        assert attrs[3] == {"llvm.align", "llvm.dereferenceable", "llvm.noalias"}
        text = str(kernel)
        assert "memref<64xf32> {llvm.align = 16 : i64, llvm.dereferenceable = 256 : i64}" in text
        assert "memref<8xi8> {llvm.align = 16 : i64, llvm.dereferenceable = 8 : i64" in text
        assert ka.in_place_pairs(kernel) == {2: 0}


def test_the_attributes_reach_the_llvm_ir_of_both_backends():
    with make_context(), ir.Location.unknown():
        text = str(_lowered(IN_PLACE))
    _, stages = ptx_and_stages(text, "sm_90")
    (define,) = re.findall(r"^define ptx_kernel void @k\((.*)\)", stages["llvm-ir"], re.M)
    expected = [
        "ptr align 16 dereferenceable(256) %0",
        "ptr noalias readonly align 16 dereferenceable(256) %1",
        "ptr align 16 dereferenceable(256) %2",
        "ptr noalias align 16 dereferenceable(8) %3",
    ]
    assert define.split(", ") == expected
    assert "ld.global.nc.b32" in stages["ptx"]  # %u, through the read-only cache
    rocm = hsaco_stages(text, "gfx942")["llvm-ir"]
    (define,) = re.findall(r"^define amdgpu_kernel void @k\((.*)\)", rocm, re.M)
    assert "noalias readonly align 16 dereferenceable(256) %1" in define
    assert define.count("noalias") == 2 and define.count("readonly") == 1


# A lowered module whose readonly %a is written: through a bitcast view and a call.
WRONG = """
module attributes {gpu.container_module} {
  gpu.module @k_module {
    func.func private @write(%m: memref<4xi32>, %i: index) {
      %c = arith.constant 1 : i32
      memref.store %c, %m[%i] : memref<4xi32>
      return
    }
    gpu.func @k(%a: memref<4xf32> {llvm.noalias, llvm.readonly},
                %b: memref<4xf32> {llvm.noalias}) kernel {
      %t = gpu.thread_id x
      %v = arith.bitcast %a : memref<4xf32> to memref<4xi32>
      func.call @write(%v, %t) : (memref<4xi32>, index) -> ()
      %x = memref.load %a[%t] : memref<4xf32>
      memref.store %x, %b[%t] : memref<4xf32>
      gpu.return
    }
  }
}
"""


def test_a_write_into_a_readonly_argument_is_found_through_views_and_calls():
    with make_context(), ir.Location.unknown():
        module = ir.Module.parse(WRONG)
        gpu_module, kernel = _kernel(module)
        assert ka.written_arguments(gpu_module, kernel) == {
            0: ["memref.store"],
            1: ["memref.store"],
        }
        with pytest.raises(UnsupportedError, match="argument 0 is marked readonly but the kernel"):
            ka.check_argument_attributes(gpu_module, kernel, "test")


def test_an_aliased_pair_marked_noalias_is_refused():
    with make_context(), ir.Location.unknown():
        module = _lowered(IN_PLACE)
        gpu_module, kernel = _kernel(module)
        attrs = list(ir.ArrayAttr(kernel.attributes["arg_attrs"]))
        attrs[0] = ir.DictAttr.get({"llvm.noalias": ir.UnitAttr.get()})
        kernel.attributes["arg_attrs"] = ir.ArrayAttr.get(attrs)
        with pytest.raises(UnsupportedError, match="argument 0 shares its buffer"):
            ka.check_argument_attributes(gpu_module, kernel, "test")


def test_a_kernel_writing_a_parameter_it_returns_is_not_readonly():
    # Not the emitters' order (outputs last), but destination passing still says which
    # buffers are outputs: the returned %a is one, %v (read only) keeps readonly.
    text = """
    func.func @k(%a: tensor<64xf32>, %v: tensor<64xf32>) -> tensor<64xf32>
        attributes {heron.kernel, heron.block_size = array<i64: 64>,
                    heron.grid_size = array<i64: 1>} {
      %t = gpu.thread_id x
      %x = tensor.extract %v[%t] : tensor<64xf32>
      %r = tensor.insert %x into %a[%t] : tensor<64xf32>
      return %r : tensor<64xf32>
    }
    """
    with make_context(), ir.Location.unknown():
        module = _lowered(text)
        _, kernel = _kernel(module)
        attrs = _attrs(kernel)
        assert "llvm.readonly" not in attrs[0] and "llvm.noalias" in attrs[0]
        assert "llvm.readonly" not in attrs[1]  # the last argument counts as an output too


# An elementwise update whose output the buffer assignment put over its input %p (a while
# state element, a donated parameter): %p and %o are marked heron.shares_buffer; %g is
# only read and is a buffer of its own.
SHARED = """
func.func @k(%p: tensor<64xf32> {heron.shares_buffer}, %g: tensor<64xf32>,
             %o: tensor<64xf32> {heron.shares_buffer}) -> tensor<64xf32>
    attributes {heron.kernel, heron.block_size = array<i64: 64>,
                heron.grid_size = array<i64: 1>} {
  %t = gpu.thread_id x
  %x = tensor.extract %p[%t] : tensor<64xf32>
  %y = tensor.extract %g[%t] : tensor<64xf32>
  %z = arith.subf %x, %y : f32
  %r = tensor.insert %z into %o[%t] : tensor<64xf32>
  return %r : tensor<64xf32>
}
"""


def test_shared_arguments_are_neither_noalias_nor_readonly():
    # parameters 0..2, outputs 3, 4: output 4 overlaps parameter 0 outside any in-place pair
    assert ka.argument_attributes(5, {3, 4}, {}, {0, 4}) == [
        (False, False),
        (True, True),
        (True, True),
        (True, False),
        (False, False),
    ]
    # shared and in-place together: both rules take noalias and readonly away
    assert ka.argument_attributes(3, {2}, {2: 0}, {1, 2}) == [
        (False, False),
        (False, False),
        (False, False),
    ]


def test_lower_tensors_drops_noalias_and_readonly_of_shared_arguments():
    with make_context(), ir.Location.unknown():
        module = _lowered(SHARED)
        _, kernel = _kernel(module)
        attrs = _attrs(kernel)
        assert attrs[0] == {"llvm.align", "llvm.dereferenceable", ka.SHARED_ATTR}
        assert attrs[1] == {"llvm.align", "llvm.dereferenceable", "llvm.noalias", "llvm.readonly"}
        assert attrs[2] == {"llvm.align", "llvm.dereferenceable", ka.SHARED_ATTR}
        assert ka.shared_arguments(kernel) == {0, 2}
        text = str(module)
    _, stages = ptx_and_stages(text, "sm_90")
    (define,) = re.findall(r"^define ptx_kernel void @k\((.*)\)", stages["llvm-ir"], re.M)
    assert define.split(", ") == [
        "ptr align 16 dereferenceable(256) %0",
        "ptr noalias readonly align 16 dereferenceable(256) %1",
        "ptr align 16 dereferenceable(256) %2",
    ]
    # %g through the read-only cache, %p (written through %o) by a coherent load
    assert stages["ptx"].count("ld.global.nc.") == 1
    assert len(re.findall(r"ld\.global\.(?!nc)", stages["ptx"])) == 1


def test_a_shared_argument_marked_noalias_or_readonly_is_refused():
    with make_context(), ir.Location.unknown():
        module = _lowered(SHARED)
        gpu_module, kernel = _kernel(module)
        ka.check_argument_attributes(gpu_module, kernel, "test")  # as lowered: fine
        for wrong in ("llvm.noalias", "llvm.readonly"):
            attrs = list(ir.ArrayAttr(kernel.attributes["arg_attrs"]))
            attrs[0] = ir.DictAttr.get(
                {ka.SHARED_ATTR: ir.UnitAttr.get(), wrong: ir.UnitAttr.get()}
            )
            kernel.attributes["arg_attrs"] = ir.ArrayAttr.get(attrs)
            with pytest.raises(UnsupportedError, match="argument 0 overlaps another argument"):
                ka.check_argument_attributes(gpu_module, kernel, "test")


def test_mark_shared_checks_the_indices_and_leaves_a_kernel_without_sharing_alone():
    text = SHARED.replace(" {heron.shares_buffer}", "")
    with make_context(), ir.Location.unknown():
        module = ir.Module.parse(text)
        entry = next(op.operation for op in module.body.operations)
        before = str(module)
        ka.mark_shared(entry, ())
        assert str(module) == before
        with pytest.raises(UnsupportedError, match=r"arguments \[3\] cannot share"):
            ka.mark_shared(entry, {0, 3})
        assert ka.shared_arguments(entry) == set()
        ka.mark_shared(entry, {0, 2})
        assert ka.shared_arguments(entry) == {0, 2}
        # the vectorizer may read a readonly parameter early: not a shared one
        assert ka.read_only_arguments(entry) == {1}
