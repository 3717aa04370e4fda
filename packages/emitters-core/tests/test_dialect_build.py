"""Building every heron_gpu op from Python, verifying, printing and re-parsing.

One shared context serves the building tests (contexts cost time); the
round-trip test parses into a fresh one, as another process would.
"""

from __future__ import annotations

import pytest
from heron_test_support.seed_modules import GELU_MAP, gelu_emitted_module
from mlir import ir
from mlir.dialects import arith, func

from heron.emitters.dialect import (
    DIALECT_NAME,
    OP_NAMES,
    allocate_shared_op,
    apply_indexing_op,
    atomic_rmw_op,
    ensure_dialect_loaded,
    ldmatrix_op,
    make_context,
    op_indexing_map,
    predicated_extract_op,
    predicated_insert_op,
    shuffle_reduce_op,
    sync_threads_op,
    verify_xla_ops,
)
from heron.emitters.ir_utils import walk_ops
from heron.indexing import parse_indexing_map


@pytest.fixture(scope="module")
def ctx():
    context = make_context()
    with context, ir.Location.unknown(context):
        yield context


def test_make_context_registers_every_op(ctx):
    for name in OP_NAMES:
        assert ctx.is_registered_operation(f"{DIALECT_NAME}.{name}")
    ensure_dialect_loaded(ctx)  # a second load must be a no-op, not an abort
    assert ctx.is_registered_operation(f"{DIALECT_NAME}.loop")


def test_gelu_loop_builds_verifies_and_round_trips(ctx):
    module = gelu_emitted_module("half_tanh", bounded_ids=False, callee_first=True)
    verify_xla_ops(module)
    (built,) = walk_ops(module.operation, "heron_gpu.loop")
    # the body builder got 1 range symbol, 3 map results and 1 iter_arg
    index = ir.IndexType.get()
    body_types = [a.type for a in built.regions[0].blocks[0].arguments]
    assert body_types[:4] == [index] * 4 and len(body_types) == 5
    assert isinstance(body_types[4], ir.RankedTensorType)
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
        halves = allocate_shared_op(ir.RankedTensorType.get([256], ir.F16Type.get())).results[0]
        ldmatrix_op(halves, [i], 4)
        func.ReturnOp([updated, reduced])
    verify_xla_ops(module)
    text = module.operation.get_asm()
    for name in OP_NAMES:
        if name not in ("loop", "pure_call"):
            assert f'"heron_gpu.{name}"' in text, name
    assert "gpu.yield" in text  # atomic_rmw's body terminator
    with make_context() as fresh, ir.Location.unknown(fresh):
        verify_xla_ops(ir.Module.parse(text))
