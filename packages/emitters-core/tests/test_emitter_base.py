"""The emitter base: partition -> functions, signatures, pure_call wiring, the entry ABI, errors.

The fusions are emitted with a minimal hero emitter defined here (one
``heron_gpu.loop`` calling each root), so these tests check the base alone,
not the loop plugin. Structure is checked exactly: function names and types,
who calls whom with which operands.
"""

from __future__ import annotations

import re

import pytest
from heron_test_support.analysis import analysed
from mlir import ir
from mlir.dialects import tensor

from heron.emitters.dialect import loop_op, make_context, verify_xla_ops
from heron.emitters.elemental import core
from heron.emitters.emitter_base import (
    EmittedKernel,
    EntryFunction,
    FusionEmitter,
    KernelArgument,
    called_computations,
)
from heron.emitters.ir_utils import walk_ops
from heron.hlo.errors import UnsupportedError
from heron.hlo.parser import parse_module
from heron.hlo.shapes import array_shape
from heron.indexing.thread_maps import LaunchDimensions, loop_thread_to_output_map


class IdentityEmitter(FusionEmitter):
    """One thread per element of the first output (no vectors), every root called."""

    name = "identity-test"

    def first(self):
        return next(iter(self.fusion.shape.leaves()))

    def launch_dimensions(self) -> LaunchDimensions:
        return LaunchDimensions(block_x=1, thread_x=self.first().num_elements)

    def emit_entry(self, entry: EntryFunction) -> list[ir.Value]:
        roots = self.analysis.roots
        thread_map = loop_thread_to_output_map(self.first().dims, self.launch_dimensions())

        def body(symbols, indices, outs):
            outs = list(outs)
            k = 0
            for r in roots:
                for value in entry.value_of(r, indices):
                    outs[k] = tensor.insert(value, outs[k], indices)
                    k += 1
            return outs

        dims = [entry.thread_ids[0], entry.block_ids[0]]
        return list(loop_op(thread_map, dims, entry.outputs, body).results)


def fusion_of(text: str):
    return parse_module(text, "test.hlo").entry.root_instruction


def functions(kernel: EmittedKernel) -> dict[str, ir.Operation]:
    return {
        ir.StringAttr(op.attributes["sym_name"]).value: op
        for op in walk_ops(kernel.module.operation, "func.func")
    }


def calls_in(function: ir.Operation) -> list[tuple[str, list[ir.Value]]]:
    return [
        (ir.FlatSymbolRefAttr(op.attributes["callee"]).value, list(op.operands))
        for op in walk_ops(function, "heron_gpu.pure_call")
    ]


LOG_TRANSPOSE_ADD = """HloModule m
fusion {
  p = f32[8,8] parameter(0)
  log = f32[8,8] log(p)
  t = f32[8,8] transpose(log), dimensions={1,0}
  ROOT add = f32[8,8] add(log, t)
}
ENTRY main {
  p = f32[8,8] parameter(0)
  ROOT f = f32[8,8] fusion(p), kind=kLoop, calls=fusion
}
"""


def test_seed_split_gives_one_function_per_subgraph_wired_by_pure_calls():
    kernel = IdentityEmitter(analysed(fusion_of(LOG_TRANSPOSE_ADD))).emit()
    funcs = functions(kernel)
    assert list(funcs) == ["f", "fusion_add", "fusion_log"]
    # log is read at (i, j) and, through the transpose, at (j, i): two calls, swapped indices.
    add = funcs["fusion_add"]
    tensor_arg, i, j = list(add.regions[0].blocks[0].arguments)
    assert calls_in(add) == [("fusion_log", [tensor_arg, i, j]), ("fusion_log", [tensor_arg, j, i])]
    # The log function reads the parameter at its own indices.
    log = funcs["fusion_log"]
    extracts = walk_ops(log, "tensor.extract")
    assert len(extracts) == 1
    assert list(extracts[0].operands) == list(log.regions[0].blocks[0].arguments)
    assert len(walk_ops(log, "math.log")) == 1
    # The entry calls the root subgraph with its tensor and the loop's indices.
    entry = funcs["f"]
    [(callee, operands)] = calls_in(entry)
    assert callee == "fusion_add"
    assert operands[0] == entry.regions[0].blocks[0].arguments[0]


def test_signatures_entry_abi_and_attributes():
    kernel = IdentityEmitter(analysed(fusion_of(LOG_TRANSPOSE_ADD))).emit()
    funcs = functions(kernel)
    assert str(funcs["f"].attributes["function_type"]) == (
        "(tensor<8x8xf32>, tensor<8x8xf32>) -> tensor<8x8xf32>"
    )
    assert str(funcs["fusion_log"].attributes["function_type"]) == (
        "(tensor<8x8xf32>, index, index) -> f32"
    )
    entry = funcs["f"]
    assert "heron.kernel" in entry.attributes
    assert str(entry.attributes["heron.block_size"]) == "array<i64: 64, 1, 1>"
    assert str(entry.attributes["heron.grid_size"]) == "array<i64: 1, 1, 1>"
    assert "sym_visibility" not in entry.attributes
    for name in ("fusion_add", "fusion_log"):
        assert str(funcs[name].attributes["sym_visibility"]) == '"private"'
    assert kernel.name == "f" and kernel.fusion_name == "f" and kernel.emitter == "identity-test"
    assert kernel.launch == LaunchDimensions(1, 64)
    shape = array_shape("f32", (8, 8))
    assert kernel.arguments == (
        KernelArgument("p", shape, False),
        KernelArgument("out0", shape, True),
    )
    # The thread and block ids carry the launch bounds.
    text = str(kernel.module)
    assert "gpu.thread_id  x upper_bound 64" in text
    assert "gpu.block_id  x upper_bound 1" in text


def test_emitted_module_round_trips_and_verifies():
    kernel = IdentityEmitter(analysed(fusion_of(LOG_TRANSPOSE_ADD))).emit()
    text = str(kernel.module)
    with make_context():
        again = ir.Module.parse(text)
        verify_xla_ops(again)
        assert str(again) == text


MIXED_TYPES = """HloModule m
fusion {
  a = bf16[4,6]{0,1} parameter(0)
  b = pred[4,6] parameter(1)
  s = bf16[] parameter(2)
  n = bf16[4,6]{0,1} negate(a)
  c = pred[4,6] not(b)
  ROOT r = (bf16[4,6]{0,1}, pred[4,6]) tuple(n, c)
}
ENTRY main {
  a = bf16[4,6]{0,1} parameter(0)
  b = pred[4,6] parameter(1)
  s = bf16[] parameter(2)
  ROOT f = (bf16[4,6]{0,1}, pred[4,6]) fusion(a, b, s), kind=kLoop, calls=fusion
}
"""


def test_layouts_scalars_and_tuple_outputs():
    kernel = IdentityEmitter(analysed(fusion_of(MIXED_TYPES))).emit()
    funcs = functions(kernel)
    layout = "tensor<4x6xbf16, {minor_to_major = array<i64: 0, 1>}>"
    assert str(funcs["f"].attributes["function_type"]) == (
        f"({layout}, tensor<4x6xi1>, tensor<bf16>, {layout}, tensor<4x6xi1>)"
        f" -> ({layout}, tensor<4x6xi1>)"
    )
    assert str(funcs["fusion_n"].attributes["function_type"]) == (
        f"({layout}, tensor<4x6xi1>, tensor<bf16>, index, index) -> bf16"
    )
    assert str(funcs["fusion_c"].attributes["function_type"]) == (
        f"({layout}, tensor<4x6xi1>, tensor<bf16>, index, index) -> i1"
    )
    # One call per root, each result inserted into its own output.
    entry = funcs["f"]
    assert [c for c, _ in calls_in(entry)] == ["fusion_n", "fusion_c"]
    inserts = walk_ops(entry, "tensor.insert")
    assert [str(op.operands[1].type) for op in inserts] == [layout, "tensor<4x6xi1>"]


MAPPED = """HloModule m
times_two {
  x = f32[] parameter(0)
  two = f32[] constant(2)
  ROOT y = f32[] multiply(x, two)
}
fusion {
  p = f32[16] parameter(0)
  ROOT m = f32[16] map(p), dimensions={0}, to_apply=times_two
}
ENTRY main {
  p = f32[16] parameter(0)
  ROOT f = f32[16] fusion(p), kind=kLoop, calls=fusion
}
"""


def test_scalar_computations_become_functions_called_through_the_context(monkeypatch):
    """``ctx.call`` is a pure_call of the computation's function of scalars."""

    def fake_map(inst, indices, ctx):  # the base's wiring, whatever the real map lowering does
        return ctx.call(inst.called("to_apply"), [ctx.operand(inst, 0, indices)])

    monkeypatch.setitem(core._LOWERINGS, "map", fake_map)
    fusion = fusion_of(MAPPED)
    assert [c.name for c in called_computations(fusion.called("calls"))] == ["times_two"]
    kernel = IdentityEmitter(analysed(fusion)).emit()
    funcs = functions(kernel)
    assert str(funcs["times_two"].attributes["function_type"]) == "(f32) -> f32"
    assert str(funcs["times_two"].attributes["sym_visibility"]) == '"private"'
    [(callee, operands)] = calls_in(funcs["fusion_m"])
    assert callee == "times_two"
    assert operands[0].owner.name == "tensor.extract"
    assert len(walk_ops(funcs["times_two"], "arith.mulf")) == 1


def test_unsupported_op_names_the_fusion_the_op_and_the_line(monkeypatch):
    monkeypatch.delitem(core._LOWERINGS, "log", raising=False)
    with pytest.raises(UnsupportedError) as info:
        IdentityEmitter(analysed(fusion_of(LOG_TRANSPOSE_ADD))).emit()
    message = str(info.value)
    assert "fusion 'f'" in message
    assert "log 'log'" in message
    assert "no elemental lowering" in message
    assert message.startswith("test.hlo:4:")


def test_a_lowering_that_crashes_is_reported_against_its_op(monkeypatch):
    def broken(inst, indices, ctx):
        raise KeyError("oops")

    monkeypatch.setitem(core._LOWERINGS, "add", broken)
    with pytest.raises(UnsupportedError, match=r"fusion 'f': cannot emit add 'add' .*KeyError"):
        IdentityEmitter(analysed(fusion_of(LOG_TRANSPOSE_ADD))).emit()


def test_values_are_reused_only_where_they_dominate(monkeypatch):
    """An operand first read inside a region is read again outside it, not reused."""
    from mlir.dialects import arith, scf

    def add_in_region(inst, indices, ctx):
        index = ir.IndexType.get()
        zero = arith.ConstantOp(index, 0).result
        one = arith.ConstantOp(index, 1).result
        f32 = ir.F32Type.get()
        init = arith.ConstantOp(f32, 0.0).result
        loop = scf.ForOp(zero, one, one, [init])
        with ir.InsertionPoint(loop.body):
            inner = ctx.operand(inst, 0, indices)  # first read: inside the loop
            scf.YieldOp([inner])
        outer = ctx.operand(inst, 0, indices)  # same operand, same indices: outside
        return [arith.AddFOp(loop.results[0], outer).result]

    monkeypatch.setitem(core._LOWERINGS, "add", add_in_region)
    kernel = IdentityEmitter(analysed(fusion_of(LOG_TRANSPOSE_ADD))).emit()  # verifies dominance
    assert len(calls_in(functions(kernel)["fusion_add"])) == 2


def test_emitting_twice_gives_independent_modules():
    a = IdentityEmitter(analysed(fusion_of(LOG_TRANSPOSE_ADD))).emit()
    b = IdentityEmitter(analysed(fusion_of(LOG_TRANSPOSE_ADD))).emit()
    assert a.module is not b.module
    assert str(a.module) == str(b.module)
    assert a == b  # the module is not part of equality
    with a.module.context:  # changing one leaves the other as it was
        for op in list(a.module.body.operations):
            op.erase()
    assert str(b.module) != str(a.module) and "func.func" in str(b.module)


def test_emissions_share_a_context_a_bounded_number_of_times():
    """A context costs as much to make as a small kernel to emit: a program's kernels
    share one, and a new one is made after CONTEXT_REUSES (a context keeps every
    attribute it uniqued, a kernel's constants too, as long as it lives)."""
    from heron.emitters.dialect import context as contexts

    contexts._local.uses = contexts.CONTEXT_REUSES  # start a fresh one
    first = contexts.make_context()
    shared = [contexts.make_context() for _ in range(contexts.CONTEXT_REUSES - 1)]
    assert all(c is first for c in shared)
    assert contexts.make_context() is not first


def test_an_emitter_is_built_from_an_analysis_only():
    inst = parse_module(LOG_TRANSPOSE_ADD).entry.root_instruction
    with pytest.raises(UnsupportedError, match="built from a fusion's analysis.*not from Instr"):
        IdentityEmitter(inst)


class CombiningEmitter(IdentityEmitter):
    """The identity emitter, declaring that it may write an element more than once."""

    writes_each_element_once = False


def test_the_kernel_records_the_emitter_s_name_and_write_promise():
    fusion = fusion_of(LOG_TRANSPOSE_ADD)
    kernel = IdentityEmitter(analysed(fusion)).emit()
    assert (kernel.emitter, kernel.writes_each_element_once) == ("identity-test", True)
    assert CombiningEmitter(analysed(fusion)).emit().writes_each_element_once is False


class InPlaceEmitter(IdentityEmitter):
    """The identity emitter, declaring its first output as parameter 0's buffer."""

    aliases: dict[int, int] = {0: 0}

    def output_aliases(self) -> dict[int, int]:
        return dict(self.aliases)


def test_in_place_outputs_are_recorded_on_the_kernel():
    fusion = fusion_of(
        "f {\n  p = f32[8] parameter(0)\n  q = f32[8] parameter(1)\n"
        "  ROOT a = f32[8] add(p, q)\n}\n"
    )
    assert IdentityEmitter(analysed(fusion)).emit().output_aliases == {}
    assert InPlaceEmitter(analysed(fusion)).emit().output_aliases == {0: 0}


@pytest.mark.parametrize(
    ("aliases", "message"),
    [
        ({0: 1}, "output 0 (f32[8]) cannot alias parameter q (s32[8]): the buffers differ"),
        ({1: 0}, "aliases output 1 with parameter 0, but the kernel has 1 outputs"),
    ],
)
def test_an_impossible_alias_is_refused_naming_the_buffers(aliases, message):
    fusion = fusion_of(
        "f {\n  p = f32[8] parameter(0)\n  q = s32[8] parameter(1)\n"
        "  c = f32[8] convert(q)\n  ROOT a = f32[8] add(p, c)\n}\n"
    )
    emitter = InPlaceEmitter(analysed(fusion))
    emitter.aliases = aliases
    with pytest.raises(UnsupportedError, match=re.escape(message)):
        emitter.emit()
