"""Building every heron_gpu op from Python, verifying, printing and re-parsing.

One shared context serves the building tests (contexts cost time); the
round-trip test parses into a fresh one, as another process would.
"""

from __future__ import annotations

import pytest
from mlir import ir
from mlir.dialects import arith, func, gpu, math, tensor

from heron.emitters.dialect import (
    DIALECT_NAME,
    OP_NAMES,
    allocate_shared_op,
    apply_indexing_op,
    atomic_rmw_op,
    ensure_dialect_loaded,
    loop_op,
    make_context,
    op_indexing_map,
    predicated_extract_op,
    predicated_insert_op,
    pure_call_op,
    shuffle_reduce_op,
    sync_threads_op,
    verify_xla_ops,
)
from heron.indexing import parse_indexing_map

GELU_MAP = (
    "(th_x, bl_x)[vector_index] -> (bl_x floordiv 4096, (bl_x floordiv 8) mod 512, "
    "(bl_x mod 8) * 512 + th_x * 4 + vector_index), "
    "domain: th_x in [0, 127], bl_x in [0, 24575], vector_index in [0, 3]"
)


@pytest.fixture(scope="module")
def ctx():
    context = make_context()
    with context, ir.Location.unknown(context):
        yield context


def _gelu_module() -> ir.Module:
    """The seeds' loop-emitter GELU: a loop over the thread map calling @gelu per element."""
    bf16 = ir.BF16Type.get()
    index = ir.IndexType.get()
    t = ir.RankedTensorType.get([6, 512, 4096], bf16)
    module = ir.Module.create()
    with ir.InsertionPoint(module.body):
        gelu = func.FuncOp("gelu", ir.FunctionType.get([t, index, index, index], [bf16]))
        gelu.sym_visibility = ir.StringAttr.get("private")
        main = func.FuncOp("main", ir.FunctionType.get([t, t], [t]))
    with ir.InsertionPoint(gelu.add_entry_block()):
        x, i, j, k = gelu.arguments
        elem = tensor.extract(x, [i, j, k])
        half = arith.constant(bf16, 0.5)
        func.ReturnOp([arith.mulf(elem, arith.mulf(half, math.tanh(elem)))])
    with ir.InsertionPoint(main.add_entry_block()):
        inp, out = main.arguments
        tid = gpu.thread_id(gpu.Dimension.x)
        bid = gpu.block_id(gpu.Dimension.x)

        def body(symbols, idx, iters):
            assert len(symbols) == 1 and len(idx) == 3 and len(iters) == 1
            value = pure_call_op(gelu, [inp, *idx], [bf16]).results[0]
            return [tensor.insert(value, iters[0], idx)]

        loop = loop_op(GELU_MAP, [tid, bid], [out], body)
        func.ReturnOp([loop.results[0]])
    return module


def test_make_context_registers_every_op(ctx):
    for name in OP_NAMES:
        assert ctx.is_registered_operation(f"{DIALECT_NAME}.{name}")
    ensure_dialect_loaded(ctx)  # a second load must be a no-op, not an abort
    assert ctx.is_registered_operation(f"{DIALECT_NAME}.loop")


def test_gelu_loop_builds_verifies_and_round_trips(ctx):
    module = _gelu_module()
    verify_xla_ops(module)
    text = module.operation.get_asm()
    assert '"heron_gpu.loop"' in text and '"heron_gpu.pure_call"' in text
    assert "callee = @gelu" in text
    with make_context() as fresh, ir.Location.unknown(fresh):
        reparsed = ir.Module.parse(text)
        verify_xla_ops(reparsed)
        assert reparsed.operation.get_asm() == text
        loop = next(
            op
            for op in reparsed.body.operations[1].regions[0].blocks[0].operations
            if op.operation.name == "heron_gpu.loop"
        )
        assert op_indexing_map(loop.operation) == parse_indexing_map(GELU_MAP)


def test_reduction_and_scatter_ops_build_and_verify(ctx):
    """Every other op, in the shapes the reduction and scatter emitters produce."""
    f32 = ir.F32Type.get()
    index = ir.IndexType.get()
    t = ir.RankedTensorType.get([32, 33], f32)
    i1 = ir.IntegerType.get_signless(1)
    module = ir.Module.create()
    with ir.InsertionPoint(module.body):
        add = func.FuncOp("add", ir.FunctionType.get([f32, f32], [f32]))
        add.sym_visibility = ir.StringAttr.get("private")
        kernel = func.FuncOp(
            "kernel",
            ir.FunctionType.get([t, index, i1], [t, f32]),
        )
    with ir.InsertionPoint(add.add_entry_block()):
        func.ReturnOp([arith.addf(*add.arguments)])
    with ir.InsertionPoint(kernel.add_entry_block()):
        out, i, cond = kernel.arguments
        row = apply_indexing_op(
            "(d0)[s0] -> (d0 floordiv 33 + s0), domain: d0 in [0, 1055], s0 in [0, 0]", [i], [i]
        ).results[0]
        shmem = allocate_shared_op(t).results[0]
        zero = arith.constant(f32, 0.0)
        loaded = predicated_extract_op(cond, zero, out, [row, i]).results[0]
        reduced = shuffle_reduce_op([loaded], 16, "add").results[0]
        written = predicated_insert_op(cond, reduced, shmem, [row, i]).results[0]
        (synced,) = sync_threads_op([written]).results
        updated = atomic_rmw_op(synced, [row, i], lambda cur: arith.addf(cur, reduced)).results[0]
        func.ReturnOp([updated, reduced])
    verify_xla_ops(module)
    text = module.operation.get_asm()
    for name in OP_NAMES:
        if name not in ("loop", "pure_call"):
            assert f'"heron_gpu.{name}"' in text, name
    assert "gpu.yield" in text  # atomic_rmw's body terminator
    with make_context() as fresh, ir.Location.unknown(fresh):
        verify_xla_ops(ir.Module.parse(text))
