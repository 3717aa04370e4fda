"""narrow-index-types: i32 index math where ranges fit, i64 where they do not, same values.

Also the whole first half of the pipeline on the seeds' GELU (inline ->
lower-loops -> flatten -> simplify-indexing -> narrow), checking the structure
after every step, and the PTX that the narrowed index math becomes.
"""

from __future__ import annotations

import ctypes
import re

import numpy as np
import pytest
from heron_test_support.host_jit import jit
from heron_test_support.seed_modules import gelu_emitted_module
from mlir import ir
from mlir.dialects import arith, func, gpu, memref, scf

from heron.emitters.dialect import (
    apply_indexing_op,
    make_context,
    op_indexing_map,
    verify_xla_ops,
)
from heron.emitters.ir_utils import walk_ops
from heron.emitters.pipeline import (
    PipelineOptions,
    flatten_tensors,
    inline,
    lower_loops,
    run_passes,
    simplify_indexing,
)
from heron.emitters.pipeline.narrow_index import PASS
from heron.indexing import parse_indexing_map


def _names(module: ir.Module) -> list[str]:
    return [op.name for op in walk_ops(module.operation)]


def test_gelu_through_the_first_passes(ctx):
    module = gelu_emitted_module()
    stages: dict[str, str] = {}
    passes = [inline.PASS, lower_loops.PASS, flatten_tensors.PASS, simplify_indexing.PASS, PASS]

    def check(stage: str, text: str) -> None:
        stages[stage] = text
        verify_xla_ops(module)

    run_passes(module, passes, PipelineOptions(), dump=check)
    assert list(stages) == ["emitted", *(p.name for p in passes)]
    with make_context(), ir.Location.unknown():
        after = {name: ir.Module.parse(text) for name, text in stages.items()}
        # inline: one function, the loop holds the body
        m = after["inline"]
        assert len(list(m.body.operations)) == 1 and "heron_gpu.pure_call" not in _names(m)
        # lower-loops: scf.for 0..4 around an scf.if, no loop op
        m = after["lower-loops-to-scf"]
        names = _names(m)
        assert "heron_gpu.loop" not in names and names.count("scf.for") == 1
        assert names.count("scf.if") == 0  # every point in the domain: no check
        # flatten: 1-D tensors, one composed apply_indexing for the extract and the
        # insert (the same position in tensors of one shape)
        m = after["flatten-tensors"]
        assert "tensor<6x512x4096xbf16>" not in stages["flatten-tensors"]
        assert "tensor<12582912xbf16>" in stages["flatten-tensors"]
        applies = walk_ops(m.operation, "heron_gpu.apply_indexing")
        assert len(applies) == 1
        for a in applies:
            assert op_indexing_map(a) == parse_indexing_map(
                "(th_x, bl_x, vector_index) -> (th_x * 4 + bl_x * 512 + vector_index), "
                "domain: th_x in [0, 127], bl_x in [0, 24575], vector_index in [0, 3]"
            )
        # simplify-indexing: arith on index only
        m = after["simplify-indexing"]
        assert "heron_gpu.apply_indexing" not in _names(m)
        # narrow: the index math is i32 and reaches the accesses through one cast
        m = after["narrow-index-types"]
        i32 = ir.IntegerType.get_signless(32)
        muls = walk_ops(m.operation, "arith.muli")
        adds = walk_ops(m.operation, "arith.addi")
        assert muls and adds
        assert all(op.results[0].type == i32 for op in muls + adds)
        (extract,) = walk_ops(m.operation, "tensor.extract")
        assert list(extract.operands)[1].owner.name == "arith.index_castui"


# -- narrowed index math in PTX ----------------------------------------------------------------


def _index_kernel(map_text: str, elements: int, grid: int) -> ir.Module:
    """A gpu.module kernel storing 1.0 at ``map(th_x, bl_x, v)`` for v in [0, 4)."""
    module = ir.Module.create()
    module.operation.attributes["gpu.container_module"] = ir.UnitAttr.get()
    f32, index = ir.F32Type.get(), ir.IndexType.get()
    buffer = ir.MemRefType.get([elements], f32)
    with ir.InsertionPoint(module.body):
        container = gpu.GPUModuleOp("m")
        container.bodyRegion.blocks.append()
    with ir.InsertionPoint(container.bodyRegion.blocks[0]):
        kernel = gpu.GPUFuncOp(
            ir.TypeAttr.get(ir.FunctionType.get([buffer], [])), sym_name="k", kernel=True
        )
        block = kernel.body.blocks.append(buffer)
    with ir.InsertionPoint(block):
        tid = gpu.thread_id(gpu.Dimension.x, upper_bound=128)
        bid = gpu.block_id(gpu.Dimension.x, upper_bound=grid)
        c0, c1, c4 = (arith.constant(index, v) for v in (0, 1, 4))
        loop = scf.ForOp(c0, c4, c1)
        with ir.InsertionPoint(loop.body):
            idx = apply_indexing_op(map_text, [tid, bid, loop.induction_variable]).results[0]
            memref.store(arith.constant(f32, 1.0), block.arguments[0], [idx])
            scf.YieldOp([])
        gpu.ReturnOp([])
    return module


def _ptx(module: ir.Module) -> str:
    compiler = pytest.importorskip("heron.runtime.cuda.compiler")
    return compiler.compile_to_ptx(module, "sm_90", ptx_version=80).ptx


def _index_instructions(ptx: str) -> list[str]:
    return re.findall(r"\b(?:mul|mad)\.(?:lo|wide|hi)\.[su](?:32|64)\b", ptx)


def test_small_index_math_is_32_bit_in_ptx(ctx):
    # 375 and 3 are not powers of two, so LLVM keeps real multiplies
    module = _index_kernel(
        "(th_x, bl_x, v) -> (bl_x * 375 + th_x * 3 + v), "
        "domain: th_x in [0, 124], bl_x in [0, 24575], v in [0, 2]",
        12582912,
        24576,
    )
    simplify_indexing.PASS.run(module, PipelineOptions())
    PASS.run(module, PipelineOptions())
    module.operation.verify()
    ptx = _ptx(module)
    instructions = _index_instructions(ptx)
    assert any(i in ("mul.lo.s32", "mad.lo.s32", "mul.lo.u32", "mad.lo.u32") for i in instructions)
    # only the byte offset is widened; no 64-bit multiply of the index itself
    assert not [i for i in instructions if i.startswith(("mul.lo.s64", "mad.lo.s64"))]
    products = re.findall(r"(?:mul|mad)\.\w+\.[su](?:32|64)\s+(%\w+), [^;]*\b375\b", ptx)
    assert products and all(re.fullmatch(r"%r\d+", p) for p in products), ptx


def test_huge_tensor_keeps_64_bit_math(ctx):
    # 2^33 elements: bl_x * 375 exceeds every 32-bit range
    module = _index_kernel(
        "(th_x, bl_x, v) -> (bl_x * 375 + th_x * 3 + v), "
        "domain: th_x in [0, 124], bl_x in [0, 22906492], v in [0, 2]",
        2**33,
        22906493,
    )
    simplify_indexing.PASS.run(module, PipelineOptions())
    PASS.run(module, PipelineOptions())
    i64_ops = [
        op
        for op in walk_ops(module.operation, "arith.muli")
        if isinstance(op.results[0].type, ir.IndexType)
    ]
    assert i64_ops, str(module)
    ptx = _ptx(module)
    # the bl_x product (375, or 1500 with the f32 byte size folded in) has a 64-bit result
    products = re.findall(r"(?:mul|mad)\.\w+\.[su](?:32|64)\s+(%\w+), [^;]*\b(?:375|1500)\b", ptx)
    assert products and all(p.startswith("%rd") for p in products), ptx


# -- narrowing keeps the values ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("map_text", "fits"),
    [
        (
            "(d0, d1) -> ((d0 floordiv 3) * 7 + d1 mod 5, (d0 + d1 * 1000) ceildiv 9), "
            "domain: d0 in [0, 300], d1 in [0, 40]",
            True,
        ),
        (
            "(d0, d1) -> (d0 * 100000 + d1, d0 floordiv 7 - d1), "
            "domain: d0 in [0, 50], d1 in [-3, 9]",
            True,
        ),
        # between 2^31 and 2^32: whatever the pass picks, the values must be right
        ("(d0) -> (d0 * 3000000 + 7), domain: d0 in [0, 1000]", None),
        ("(d0) -> (d0 * 3000000000 + 7), domain: d0 in [0, 5]", False),  # needs 64 bits
    ],
)
def test_narrowed_math_computes_the_same(ctx, map_text, fits):
    m = parse_indexing_map(map_text)
    index, i64 = ir.IndexType.get(), ir.IntegerType.get_signless(64)
    module = ir.Module.create()
    out_type = ir.MemRefType.get([m.num_results], i64)
    with ir.InsertionPoint(module.body):
        f = func.FuncOp("f", ir.FunctionType.get([index] * m.num_dims + [out_type], []))
    with ir.InsertionPoint(f.add_entry_block()):
        *args, out = f.arguments
        # the dims' ranges reach the narrowing through the ops' own semantics: clamp them
        clamped = [
            arith.minui(a, arith.constant(index, v.bounds.upper))
            if v.bounds.lower >= 0
            else arith.maxsi(
                arith.minsi(a, arith.constant(index, v.bounds.upper)),
                arith.constant(index, v.bounds.lower),
            )
            for a, v in zip(args, m.dimensions)
        ]
        for i, value in enumerate(apply_indexing_op(m, clamped).results):
            memref.store(arith.index_cast(i64, value), out, [arith.constant(index, i)])
        func.ReturnOp([])
    simplify_indexing.PASS.run(module, PipelineOptions())
    PASS.run(module, PipelineOptions())
    module.operation.verify()
    narrowed = any(
        op.results[0].type == ir.IntegerType.get_signless(32)
        for op in walk_ops(module.operation, "arith.muli")
    )
    assert fits is None or narrowed == fits, str(module)
    fn = ctypes.CFUNCTYPE(None, *([ctypes.c_int64] * m.num_dims), ctypes.c_void_p)(jit(module, "f"))
    result = np.zeros(m.num_results, np.int64)
    for dims, _ in m.domain_points():
        fn(*dims, result.ctypes.data)
        assert tuple(result.tolist()) == m.evaluate(dims), (dims, str(module))


# -- shifts: the narrow width, not the wide one, bounds the amount ----------------------------


def _shift_module(index: ir.Type, i64: ir.Type) -> ir.Module:
    """``f(d0, out)``: d0 in [0, 300] as i64, shifted right (logically and arithmetically)
    by 32 and by ``d0 mod 64``; every result fits 32 bits, so narrowing takes them all."""
    module = ir.Module.create()
    out_type = ir.MemRefType.get([4], i64)
    with ir.InsertionPoint(module.body):
        f = func.FuncOp("f", ir.FunctionType.get([index, out_type], []))
    with ir.InsertionPoint(f.add_entry_block()):
        d0, out = f.arguments
        x = arith.index_cast(i64, arith.minui(d0, arith.constant(index, 300)))
        thirty_two = arith.constant(i64, 32)
        amount = arith.andi(x, arith.constant(i64, 63))
        results = [
            arith.shrui(x, thirty_two),
            arith.shrsi(x, thirty_two),
            arith.shrui(x, amount),
            arith.shrsi(x, amount),
        ]
        for i, value in enumerate(results):
            memref.store(value, out, [arith.constant(index, i)])
        func.ReturnOp([])
    return module


def test_a_narrowed_shift_keeps_its_64_bit_result(ctx):
    """JAX's threefry takes the high word of a 64-bit iota, ``convert(iota >> 32)``.
    Upstream narrows that shift to i32 by 32 (llvm-project#218191), which is poison: LLVM
    dropped the store of a whole output (issue 26, dropout_threefry on an H100/H200)."""
    index, i64 = ir.IndexType.get(), ir.IntegerType.get_signless(64)
    module = _shift_module(index, i64)
    PASS.run(module, PipelineOptions())
    module.operation.verify()
    i32 = ir.IntegerType.get_signless(32)
    for name in ("arith.shli", "arith.shrui", "arith.shrsi"):
        for op in walk_ops(module.operation, name):
            assert "heron.wide_shift" not in op.attributes
            amount = op.operands[1].owner
            if op.results[0].type == i32 and amount.name == "arith.constant":
                assert ir.IntegerAttr(amount.attributes["value"]).value < 32, str(module)
    fn = ctypes.CFUNCTYPE(None, ctypes.c_int64, ctypes.c_void_p)(jit(module, "f"))
    result = np.zeros(4, np.int64)
    for d0 in (0, 1, 5, 31, 32, 33, 63, 64, 100, 255, 300):
        fn(d0, result.ctypes.data)
        amount = d0 % 64
        assert result.tolist() == [0, 0, d0 >> amount, d0 >> amount], (d0, str(module))
