"""A plain lowering of ``heron_gpu.apply_indexing`` to arith, for host tests only.

The real lowering is the pipeline's simplify-indexing pass, which simplifies
with ranges first. Host tests of elemental emission need index arithmetic
that is merely correct, with no dependence on that pass: each result
expression is evaluated literally (floor division and modulo with floor
semantics, as affine maps define them).
"""

from __future__ import annotations

from mlir import ir
from mlir.dialects import arith

from heron.emitters.dialect import op_indexing_map
from heron.emitters.ir_utils import index_constant, walk_ops
from heron.indexing.affine import AffineExpr, Binary, BinaryKind, Constant, Dim, Symbol


def _emit(expr: AffineExpr, dims: list[ir.Value], symbols: list[ir.Value]) -> ir.Value:
    if isinstance(expr, Constant):
        return index_constant(expr.value)
    if isinstance(expr, Dim):
        return dims[expr.index]
    if isinstance(expr, Symbol):
        return symbols[expr.index]
    assert isinstance(expr, Binary)
    lhs = _emit(expr.lhs, dims, symbols)
    rhs = _emit(expr.rhs, dims, symbols)
    if expr.kind is BinaryKind.ADD:
        return arith.AddIOp(lhs, rhs).result
    if expr.kind is BinaryKind.MUL:
        return arith.MulIOp(lhs, rhs).result
    if expr.kind is BinaryKind.FLOORDIV:
        return arith.FloorDivSIOp(lhs, rhs).result
    if expr.kind is BinaryKind.CEILDIV:
        return arith.CeilDivSIOp(lhs, rhs).result
    quotient = arith.FloorDivSIOp(lhs, rhs).result
    return arith.SubIOp(lhs, arith.MulIOp(quotient, rhs).result).result


def lower_apply_indexing_naively(module: ir.Module) -> None:
    """Replace every heron_gpu.apply_indexing in ``module`` by literal arith on index."""
    for op in walk_ops(module.operation, "heron_gpu.apply_indexing"):
        indexing_map = op_indexing_map(op)
        operands = list(op.operands)
        n_dims = len(indexing_map.dimensions)
        with ir.InsertionPoint(op), op.location:
            values = [_emit(e, operands[:n_dims], operands[n_dims:]) for e in indexing_map.results]
        for old, new in zip(op.results, values, strict=True):
            old.replace_all_uses_with(new)
        op.erase()
