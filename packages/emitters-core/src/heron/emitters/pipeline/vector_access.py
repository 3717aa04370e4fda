"""The vector reads and writes the vectorizing passes build, and their clean-up.

``vectorize-loads-stores`` (:mod:`.vectorize`, loops) and its adjacent-extract
half (:mod:`.vectorize_adjacent`, straight-line code) both make
``vector.transfer_read`` / ``transfer_write`` ops of one shape (one dimension,
in bounds, identity map) and erase the scalar accesses they replace; those
builders live here so that neither pass imports the other to build them.
"""

from __future__ import annotations

from mlir import ir
from mlir.dialects import arith, vector

__all__ = [
    "erase_with_unused_index",
    "in_bounds",
    "identity_map",
    "transfer_read",
    "transfer_write",
]


def erase_with_unused_index(op: ir.Operation) -> None:
    """Erase ``op`` and then its index computation if nothing else uses it."""
    index = op.operands[len(op.operands) - 1]
    op.erase()
    if isinstance(index, ir.OpResult) and not list(index.uses):
        index.owner.operation.erase()


def in_bounds() -> ir.ArrayAttr:
    return ir.ArrayAttr.get([ir.BoolAttr.get(True)])


def identity_map() -> ir.AffineMapAttr:
    return ir.AffineMapAttr.get(ir.AffineMap.get_minor_identity(1, 1))


def transfer_read(vector_type: ir.VectorType, tensor: ir.Value, base: ir.Value) -> ir.Value:
    element = vector_type.element_type
    if isinstance(element, ir.IntegerType):
        pad = arith.ConstantOp(element, 0).result
    else:
        pad = arith.ConstantOp(element, 0.0).result
    return vector.TransferReadOp(
        vector_type, tensor, [base], identity_map(), pad, in_bounds()
    ).result


def transfer_write(vec: ir.Value, tensor: ir.Value, base: ir.Value) -> ir.Value:
    return vector.TransferWriteOp(
        tensor.type, vec, tensor, [base], identity_map(), in_bounds()
    ).result
