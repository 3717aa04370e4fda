"""flatten-tensors: 1-D types everywhere, physical order, one composed apply_indexing per access."""

from __future__ import annotations

import itertools
import random

import numpy as np
import pytest
from heron_test_support.seed_modules import gelu_emitted_module
from mlir import ir
from mlir.dialects import arith, func, scf, tensor

from heron.emitters.dialect import (
    apply_indexing_op,
    atomic_rmw_op,
    op_indexing_map,
    predicated_extract_op,
    predicated_insert_op,
    pure_call_op,
    verify_xla_ops,
)
from heron.emitters.ir_utils import walk_ops
from heron.emitters.pipeline import PipelineOptions
from heron.emitters.pipeline import inline as inline_pass
from heron.emitters.pipeline import lower_loops as lower_loops_pass
from heron.emitters.pipeline.flatten_tensors import PASS
from heron.hlo.errors import UnsupportedError
from heron.indexing import parse_indexing_map


def _run(module: ir.Module) -> None:
    PASS.run(module, PipelineOptions())
    module.operation.verify()
    verify_xla_ops(module)


def _all_tensor_types(module: ir.Module) -> list[ir.RankedTensorType]:
    types = []
    for op in walk_ops(module.operation):
        values = list(op.results)
        for region in op.regions:
            for block in region.blocks:
                values += list(block.arguments)
        types += [v.type for v in values if isinstance(v.type, ir.RankedTensorType)]
        if op.name == "func.func":
            fn = ir.FunctionType(ir.TypeAttr(op.attributes["function_type"]).value)
            types += [t for t in [*fn.inputs, *fn.results] if isinstance(t, ir.RankedTensorType)]
    return types


def test_gelu_after_flatten(ctx):
    module = gelu_emitted_module()
    inline_pass.PASS.run(module, PipelineOptions())
    lower_loops_pass.PASS.run(module, PipelineOptions())
    _run(module)
    flat = ir.RankedTensorType.get([12582912], ir.BF16Type.get())
    types = _all_tensor_types(module)
    assert types and all(t == flat for t in types)
    accesses = walk_ops(module.operation, "tensor.extract") + walk_ops(
        module.operation, "tensor.insert"
    )
    assert len(accesses) == 2
    applies = walk_ops(module.operation, "heron_gpu.apply_indexing")
    # One for both accesses: the extract and the insert are at the same indices of
    # tensors of one shape, in one block (the 3-result map is gone).
    assert len(applies) == 1
    expected = parse_indexing_map(
        "(th_x, bl_x, vector_index) -> (th_x * 4 + bl_x * 512 + vector_index), "
        "domain: th_x in [0, 127], bl_x in [0, 24575], vector_index in [0, 3]"
    )
    for access in accesses:
        index = list(access.operands)[-1]
        assert index.owner.name == "heron_gpu.apply_indexing"
        producer = index.owner
        assert op_indexing_map(producer) == expected, op_indexing_map(producer).format()
        tid, bid, vi = producer.operands
        assert tid.owner.name == "gpu.thread_id" and bid.owner.name == "gpu.block_id"
        assert vi.owner.owner.name == "scf.for"


def _physical_position(shape, minor_to_major, idx) -> int:
    position, stride = 0, 1
    for d in minor_to_major:
        position += idx[d] * stride
        stride *= shape[d]
    return position


def _layout_type(shape, minor_to_major, element):
    encoding = None
    if list(minor_to_major) != list(range(len(shape) - 1, -1, -1)):
        encoding = ir.Attribute.parse(
            "{minor_to_major = array<i64: " + ", ".join(map(str, minor_to_major)) + ">}"
        )
    return ir.RankedTensorType.get(shape, element, encoding)


@pytest.mark.parametrize("seed", range(12))
def test_linear_index_is_the_physical_position(ctx, seed):
    """Random shape and layout; indices through an apply_indexing chain; check every point."""
    rng = random.Random(seed)
    rank = rng.randint(0, 3)
    shape = [rng.randint(1, 4) for _ in range(rank)]
    order = list(range(rank))
    rng.shuffle(order)
    f32, index = ir.F32Type.get(), ir.IndexType.get()
    t = _layout_type(shape, order, f32)
    module = ir.Module.create()
    with ir.InsertionPoint(module.body):
        f = func.FuncOp("f", ir.FunctionType.get([t, index], [f32]))
    # the indices come from the linear logical position %p via one apply_indexing
    strides = [int(np.prod(shape[i + 1 :])) for i in range(rank)]
    results = ", ".join(f"(p floordiv {s}) mod {n}" for s, n in zip(strides, shape)) or ""
    total = int(np.prod(shape))
    with ir.InsertionPoint(f.add_entry_block()):
        src, p = f.arguments
        if rank:
            idx = apply_indexing_op(f"(p) -> ({results}), domain: p in [0, {total - 1}]", [p])
            idx = list(idx.results)
        else:
            idx = []
        func.ReturnOp([tensor.extract(src, idx)])
    _run(module)
    assert f.arguments[0].type == ir.RankedTensorType.get([total], f32)
    (extract,) = walk_ops(module.operation, "tensor.extract")
    (linear,) = walk_ops(module.operation, "heron_gpu.apply_indexing")
    assert list(extract.operands)[1] == linear.results[0]
    m = op_indexing_map(linear)
    assert list(linear.operands) == ([f.arguments[1]] if m.num_dims else [])
    for logical, multi in enumerate(itertools.product(*[range(n) for n in shape])):
        dims = [logical] if m.num_dims else []
        assert m.evaluate(dims)[0] == _physical_position(shape, order, multi)


def test_signatures_control_flow_and_heron_ops(ctx):
    f32, index, i1 = ir.F32Type.get(), ir.IndexType.get(), ir.IntegerType.get_signless(1)
    t = ir.RankedTensorType.get([2, 3], f32)
    flat = ir.RankedTensorType.get([6], f32)
    module = ir.Module.create()
    with ir.InsertionPoint(module.body):
        main = func.FuncOp("main", ir.FunctionType.get([t, index, i1], [t, f32]))
        g = func.FuncOp("g", ir.FunctionType.get([t, index], [f32]))
        g.sym_visibility = ir.StringAttr.get("private")
    with ir.InsertionPoint(g.add_entry_block()):
        func.ReturnOp([tensor.extract(g.arguments[0], [g.arguments[1], g.arguments[1]])])
    with ir.InsertionPoint(main.add_entry_block()):
        x, i, cond = main.arguments
        c0, c1, c2 = (arith.constant(index, v) for v in (0, 1, 2))
        for_op = scf.ForOp(c0, c2, c1, [x])
        with ir.InsertionPoint(for_op.body):
            it = for_op.inner_iter_args[0]
            iv = for_op.induction_variable
            value = pure_call_op(g, [it, iv], [f32]).results[0]
            written = predicated_insert_op(cond, value, it, [iv, c2]).results[0]
            updated = atomic_rmw_op(written, [c1, iv], lambda cur: arith.addf(cur, value))
            scf.YieldOp([updated.results[0]])
        if_op = scf.IfOp(cond, [t], has_else=True)
        with ir.InsertionPoint(if_op.then_block):
            scf.YieldOp([for_op.results[0]])
        with ir.InsertionPoint(if_op.else_block):
            scf.YieldOp([x])
        read = predicated_extract_op(cond, arith.constant(f32, 0.0), if_op.results[0], [i, c0])
        func.ReturnOp([if_op.results[0], read.results[0]])
    verify_xla_ops(module)
    _run(module)
    assert all(t == flat for t in _all_tensor_types(module))
    g_type = ir.FunctionType(ir.TypeAttr(g.attributes["function_type"]).value)
    assert list(g_type.inputs) == [flat, index]
    (rmw,) = walk_ops(module.operation, "heron_gpu.atomic_rmw")
    assert len(list(rmw.operands)) == 2
    assert [op.operation.name for op in rmw.regions[0].blocks[0].operations] == [
        "arith.addf",
        "gpu.yield",
    ]
    # atomic index is [1, iv] -> 3 + iv
    m = op_indexing_map(list(rmw.operands)[1].owner)
    assert [m.evaluate([v])[0] for v in range(2)] == [3, 4]
    (ins,) = walk_ops(module.operation, "heron_gpu.predicated_insert")
    m = op_indexing_map(list(ins.operands)[-1].owner)
    assert [m.evaluate([v])[0] for v in range(2)] == [2, 5]
    (ext,) = walk_ops(module.operation, "heron_gpu.predicated_extract")
    assert op_indexing_map(list(ext.operands)[-1].owner).evaluate([1]) == (3,)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            "dense<[[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]]> : tensor<2x3xbf16>",
            "dense<[1.000000e+00, 2.000000e+00, 3.000000e+00, 4.000000e+00, 5.000000e+00, "
            "6.000000e+00]> : tensor<6xbf16>",
        ),
        (
            "dense<[[1, 2, 3], [4, 5, 6]]> : tensor<2x3xi32, {minor_to_major = array<i64: 0, 1>}>",
            "dense<[1, 4, 2, 5, 3, 6]> : tensor<6xi32>",
        ),
        (
            "dense<[[(1.0,2.0), (3.0,4.0)]]> : tensor<1x2xcomplex<f32>>",
            "dense<[(1.000000e+00,2.000000e+00), (3.000000e+00,4.000000e+00)]> "
            ": tensor<2xcomplex<f32>>",
        ),
        ("dense<true> : tensor<2x2xi1>", "dense<true> : tensor<4xi1>"),
        ("dense<7> : tensor<i8>", "dense<7> : tensor<1xi8>"),
    ],
)
def test_dense_constants(ctx, text, expected):
    def constant_module(attr: str) -> ir.Module:
        type_text = attr.split(" : ", 1)[1]
        return ir.Module.parse(
            f"func.func @f() -> {type_text} {{\n  %c = arith.constant {attr}\n"
            f"  return %c : {type_text}\n}}"
        )

    module = constant_module(text)
    _run(module)
    (const,) = walk_ops(module.operation, "arith.constant")
    reference = constant_module(expected)
    (expected_const,) = walk_ops(reference.operation, "arith.constant")
    assert str(const) == str(expected_const)


def test_large_dense_constant_in_physical_order(ctx):
    """Constants above 100 elements print as a hex blob; reordering must still be right."""
    values = np.arange(12 * 20, dtype=np.int32).reshape(12, 20)
    body = ", ".join("[" + ", ".join(map(str, row)) + "]" for row in values)
    text = f"dense<[{body}]> : tensor<12x20xi32, {{minor_to_major = array<i64: 0, 1>}}>"
    f32 = ir.F32Type.get()
    module = ir.Module.parse(
        "func.func @f(%i: index) -> i32 {\n"
        f"  %c = arith.constant {text}\n"
        "  %c0 = arith.constant 3 : index\n"
        "  %v = tensor.extract %c[%c0, %i] : "
        "tensor<12x20xi32, {minor_to_major = array<i64: 0, 1>}>\n"
        "  return %v : i32\n}"
    )
    del f32
    _run(module)
    (const,) = [op for op in walk_ops(module.operation, "arith.constant") if "dense" in str(op)]
    data = ir.DenseIntElementsAttr(const.attributes["value"])
    assert [data[k] for k in range(240)] == values.T.reshape(-1).tolist()
    (linear,) = walk_ops(module.operation, "heron_gpu.apply_indexing")
    m = op_indexing_map(linear)
    assert [m.evaluate([j])[0] for j in range(20)] == [3 + 12 * j for j in range(20)]


def test_unknown_op_on_a_tensor_is_rejected(ctx):
    module = ir.Module.parse(
        "func.func @fusion(%t: tensor<4x4xf32>) -> index {\n"
        "  %c0 = arith.constant 0 : index\n"
        "  %d = tensor.dim %t, %c0 : tensor<4x4xf32>\n"
        "  return %d : index\n}"
    )
    with pytest.raises(UnsupportedError, match=r"fusion 'fusion'.*tensor\.dim.*tensor<4x4xf32>"):
        _run(module)


def test_positions_shared_in_a_block_for_one_shape_and_layout(ctx):
    """Accesses of one block at the same indices into tensors of one shape and layout
    share one position; another layout, another shape or another block gets its own."""
    module = ir.Module.parse(
        "func.func @fusion(%a: tensor<4x8xf32>, %b: tensor<4x8xi32>,"
        " %c: tensor<4x8xf32, {minor_to_major = array<i64: 0, 1>}>, %d: tensor<8x4xf32>,"
        " %i: index, %j: index, %p: i1) -> (f32, i32, f32, f32, f32) {\n"
        "  %0 = tensor.extract %a[%i, %j] : tensor<4x8xf32>\n"
        "  %1 = tensor.extract %b[%i, %j] : tensor<4x8xi32>\n"
        "  %2 = tensor.extract %c[%i, %j] : tensor<4x8xf32, {minor_to_major = array<i64: 0, 1>}>\n"
        "  %3 = tensor.extract %d[%j, %i] : tensor<8x4xf32>\n"
        "  %4 = scf.if %p -> f32 {\n"
        "    %5 = tensor.extract %a[%i, %j] : tensor<4x8xf32>\n"
        "    scf.yield %5 : f32\n"
        "  } else {\n"
        "    %6 = arith.constant 0.0 : f32\n"
        "    scf.yield %6 : f32\n"
        "  }\n"
        "  return %0, %1, %2, %3, %4 : f32, i32, f32, f32, f32\n}"
    )
    _run(module)
    extracts = walk_ops(module.operation, "tensor.extract")
    positions = [list(op.operands)[-1].owner for op in extracts]
    assert all(p.name == "heron_gpu.apply_indexing" for p in positions)
    row_major_a, row_major_b, column_major, other_shape, nested = positions
    assert row_major_a == row_major_b  # same shape, layout, indices and block
    assert len({row_major_a, column_major, other_shape, nested}) == 4
    assert len(walk_ops(module.operation, "heron_gpu.apply_indexing")) == 4
