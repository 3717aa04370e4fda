"""Negative tests: each rule of the heron_gpu dialect rejects what it should.

IRDL rules fail inside MLIR's verifier (``MLIRError``, already when parsing);
the Python rules fail in ``verify_xla_ops`` with ``DialectVerificationError``
naming the op and its location.
"""

from __future__ import annotations

import pytest
from mlir import ir
from mlir.dialects import arith, func, tensor

from heron.emitters.dialect import (
    DialectVerificationError,
    allocate_shared_op,
    apply_indexing_op,
    atomic_rmw_op,
    ldmatrix_op,
    loop_op,
    make_context,
    map_attr,
    predicated_extract_op,
    predicated_insert_op,
    pure_call_op,
    shuffle_reduce_op,
    sync_threads_op,
    verify_xla_ops,
)
from heron.emitters.dialect.irdl_source import MAX_CALL_OPERANDS
from heron.hlo.errors import UnsupportedError

LOC = ("kernel.py", 7, 3)
MAP_1D = "(d0)[s0] -> (d0 * 4 + s0), domain: d0 in [0, 31], s0 in [0, 3]"


@pytest.fixture(scope="module")
def ctx():
    context = make_context()
    with context, ir.Location.unknown(context):
        yield context


class Kernel:
    """A module with ``@add : (f32, f32) -> f32`` and an open kernel body to add ops to."""

    def __init__(self) -> None:
        self.f32 = ir.F32Type.get()
        self.index = ir.IndexType.get()
        self.tensor = ir.RankedTensorType.get([8, 4], self.f32)
        i1 = ir.IntegerType.get_signless(1)
        self.module = ir.Module.create()
        with ir.InsertionPoint(self.module.body):
            add = func.FuncOp("add", ir.FunctionType.get([self.f32, self.f32], [self.f32]))
            kernel = func.FuncOp(
                "kernel", ir.FunctionType.get([self.tensor, self.index, i1, self.f32], [])
            )
        with ir.InsertionPoint(add.add_entry_block()):
            func.ReturnOp([arith.addf(*add.arguments)])
        self.block = kernel.add_entry_block()
        self.t, self.i, self.cond, self.x = kernel.arguments

    def add(self, build):
        """Build ops with ``build(self)`` at the kernel's end, located at LOC."""
        with ir.InsertionPoint(self.block), ir.Location.file(*LOC):
            return build(self)

    def close(self) -> ir.Module:
        with ir.InsertionPoint(self.block):
            func.ReturnOp([])
        return self.module


def _expect(kernel: Kernel, op_name: str, fragment: str) -> None:
    module = kernel.close()
    with pytest.raises(DialectVerificationError) as info:
        verify_xla_ops(module)
    message = str(info.value)
    assert f"'heron_gpu.{op_name}' op" in message
    assert "kernel.py" in message and ":7:3" in message
    assert fragment in message, message


# -- IRDL rules (MLIR verifier) --------------------------------------------------


@pytest.mark.parametrize(
    ("body", "fragment"),
    [
        (
            '%0 = "heron_gpu.apply_indexing"(%x) {indexing_map = "(d0) -> (d0)"} : (f32) -> index',
            "expected 'index'",
        ),
        ('%0 = "heron_gpu.allocate_shared"() : () -> f32', "builtin.tensor"),
        ('%0 = "heron_gpu.apply_indexing"(%i) : (index) -> index', '"indexing_map"'),
        (
            '%0 = "heron_gpu.predicated_insert"(%x, %x, %t, %i, %i)'
            " : (f32, f32, tensor<8x4xf32>, index, index) -> tensor<8x4xf32>",
            "'i1'",
        ),
        (
            '%0 = "heron_gpu.shuffle_reduce"(%x) {max_distance = 16 : i64, reducer = "add",'
            " operandSegmentSizes = array<i32: 1, 0, 0, 0, 0, 0, 0, 0>,"
            " resultSegmentSizes = array<i32: 1, 0, 0, 0, 0, 0, 0, 0>} : (f32) -> f32",
            "builtin.symbol_ref",
        ),
    ],
)
def test_irdl_rules_reject_at_parse(ctx, body, fragment):
    text = f"func.func @k(%x: f32, %i: index, %t: tensor<8x4xf32>) {{\n  {body}\n  return\n}}"
    with pytest.raises(ir.MLIRError) as info:
        ir.Module.parse(text)
    assert fragment in str(info.value) or any(
        fragment in d.message for d in info.value.error_diagnostics
    ), str(info.value)


# -- loop ---------------------------------------------------------------------


def test_loop_dim_operand_count(ctx):
    k = Kernel()
    k.add(lambda k: loop_op(MAP_1D, [k.i, k.i], [k.t], lambda s, r, it: [it[0]]))
    _expect(k, "loop", "2 dim operand(s) but its map needs 1 dimension(s)")


def test_loop_block_argument_count(ctx):
    k = Kernel()
    loop = k.add(lambda k: loop_op(MAP_1D, [k.i], [k.t], lambda s, r, it: [it[0]]))
    two_symbols = "(d0)[s0, s1] -> (d0 + s0 + s1), domain: d0 in [0, 3], s0 in [0, 3], s1 in [0, 1]"
    loop.attributes["indexing_map"] = map_attr(two_symbols)
    _expect(k, "loop", "needs 4: 2 range symbol(s) + 1 map result(s) + 1 iter_arg(s)")


def test_loop_yield_types(ctx):
    k = Kernel()
    k.add(lambda k: loop_op(MAP_1D, [k.i], [k.t, k.x], lambda s, r, it: [it[0], it[0]]))
    _expect(k, "loop", "body yields")


def test_loop_bad_map_text(ctx):
    k = Kernel()
    loop = k.add(lambda k: loop_op(MAP_1D, [k.i], [k.t], lambda s, r, it: [it[0]]))
    loop.attributes["indexing_map"] = ir.StringAttr.get("(d0) -> (d0 +")
    _expect(k, "loop", "bad indexing map")


# -- apply_indexing -----------------------------------------------------------


def test_apply_indexing_operand_count(ctx):
    k = Kernel()
    k.add(lambda k: apply_indexing_op(MAP_1D, [k.i]))
    _expect(k, "apply_indexing", "1 operand(s) but its map has 1 dimension(s) + 1 symbol(s)")


def test_apply_indexing_result_count(ctx):
    k = Kernel()
    op = k.add(lambda k: apply_indexing_op(MAP_1D, [k.i], [k.i]))
    op.attributes["indexing_map"] = map_attr(
        "(d0)[s0] -> (d0, s0), domain: d0 in [0, 31], s0 in [0, 3]"
    )
    _expect(k, "apply_indexing", "1 result(s) but its map has 2")


# -- pure_call ----------------------------------------------------------------


def test_pure_call_missing_callee(ctx):
    k = Kernel()
    k.add(lambda k: pure_call_op("nowhere", [k.x], [k.f32]))
    _expect(k, "pure_call", "callee @nowhere does not exist")


def test_pure_call_signature_mismatch(ctx):
    k = Kernel()
    k.add(lambda k: pure_call_op("add", [k.x], [k.f32]))
    _expect(k, "pure_call", "does not match the callee's type")


def test_builder_arity_limit(ctx):
    k = Kernel()
    # A dialect limit is an unsupported fusion (a fusion pass's "no"), not a crash.
    with pytest.raises(UnsupportedError, match=f"limit of {MAX_CALL_OPERANDS}"):
        k.add(lambda k: pure_call_op("add", [k.x] * (MAX_CALL_OPERANDS + 1), [k.f32]))


# -- memory, synchronisation, predication ------------------------------------------------


def test_sync_threads_result_types(ctx):
    k = Kernel()
    op = k.add(lambda k: sync_threads_op([k.t]))
    other = ir.RankedTensorType.get([4, 8], k.f32)
    op.results[0].set_type(other)
    _expect(k, "sync_threads", "result types must equal operand types")


def test_predicated_insert_index_count_and_value_type(ctx):
    k = Kernel()
    k.add(lambda k: predicated_insert_op(k.cond, k.x, k.t, [k.i]))
    _expect(k, "predicated_insert", "1 index(es) for a rank-2 tensor")
    k = Kernel()
    k.add(lambda k: predicated_insert_op(k.cond, k.i, k.t, [k.i, k.i]))
    _expect(k, "predicated_insert", "inserts a index into a tensor of f32")


def test_predicated_extract_fallback_type(ctx):
    k = Kernel()
    k.add(lambda k: predicated_extract_op(k.cond, k.i, k.t, [k.i, k.i]))
    _expect(k, "predicated_extract", "fallback and result must be f32")


def test_allocate_shared_builds(ctx):
    k = Kernel()
    k.add(lambda k: allocate_shared_op(k.tensor))
    verify_xla_ops(k.close())


def test_atomic_rmw_body_type(ctx):
    k = Kernel()
    k.add(lambda k: atomic_rmw_op(k.t, [k.i, k.i], lambda cur: k.i))
    _expect(k, "atomic_rmw", "body yields (index) but (f32) is expected")


def test_atomic_rmw_vector_body_needs_a_1d_tensor(ctx):
    k = Kernel()
    k.add(lambda k: atomic_rmw_op(k.t, [k.i, k.i], lambda cur: cur, lanes=4))
    _expect(k, "atomic_rmw", "a vector body must take a 1-D vector of f32 and update a 1-D")


def test_atomic_rmw_vector_body_length(ctx):
    k = Kernel()
    k.add(lambda k: atomic_rmw_op(tensor.empty([64], k.f32), [k.i], lambda cur: cur, lanes=3))
    _expect(k, "atomic_rmw", "a vector body's length must be a power of two from 2, not 3")


# -- shuffle_reduce -----------------------------------------------------------


def test_shuffle_reduce_distance(ctx):
    k = Kernel()
    k.add(lambda k: shuffle_reduce_op([k.x], 3, "add"))
    _expect(k, "shuffle_reduce", "max_distance 3 must be a power of two")


def test_shuffle_reduce_reducer_signature(ctx):
    k = Kernel()
    k.add(lambda k: shuffle_reduce_op([k.x, k.x], 16, "add"))
    _expect(k, "shuffle_reduce", "reducer type")


# -- ldmatrix -------------------------------------------------------------------


def test_ldmatrix_result_tiles_and_element_width(ctx):
    k = Kernel()
    f16 = ir.RankedTensorType.get([64], ir.F16Type.get())
    shared = k.add(lambda k: allocate_shared_op(f16)).results[0]
    k.add(lambda k: ldmatrix_op(shared, [k.i], 4))
    verify_xla_ops(k.close())
    k = Kernel()
    shared = k.add(lambda k: allocate_shared_op(f16)).results[0]
    k.add(lambda k: ldmatrix_op(shared, [k.i], 3))
    _expect(k, "ldmatrix", "num_tiles 3 must be one of (1, 2, 4)")
    k = Kernel()
    shared = k.add(lambda k: allocate_shared_op(f16)).results[0]
    op = k.add(lambda k: ldmatrix_op(shared, [k.i], 4))
    op.results[0].set_type(ir.VectorType.get([4, 4], ir.F16Type.get()))
    _expect(k, "ldmatrix", "result must be vector<4x2xf16>")
    k = Kernel()
    k.add(lambda k: ldmatrix_op(k.t, [k.i, k.i], 1))
    _expect(k, "ldmatrix", "loads 8- or 16-bit elements, not f32")
