"""Tensor constants on the host: what the host JIT needs that the GPU pipeline does differently.

The elemental emitter reads array constants with ``tensor.extract`` from an
``arith.constant dense<...>`` tensor; on the GPU, lower-tensors makes them
globals. For host tests one-shot-bufferize does the same, after widening
sub-byte and i1 tensors to i8 (LLVM's translation of an ``[N x i4]`` global
does not match how it loads one element, and an i1 one aborts).
"""

from __future__ import annotations

from mlir import ir
from mlir.dialects import arith, tensor

from heron.emitters.ir_utils import walk_ops


def lower_tensor_constants(module: ir.Module) -> None:
    """Make ``arith.constant`` tensors and their ``tensor.extract``s runnable on the host.

    Sub-byte tensors (i1 too) are widened to i8 first (LLVM's translation
    of an ``[N x i4]`` global does not match how it loads one element, an i1 one aborts), then
    one-shot-bufferize turns the constants into globals and the extracts into
    loads.
    """
    for op in walk_ops(module.operation, "arith.constant"):
        result_type = op.results[0].type
        if not isinstance(result_type, ir.RankedTensorType):
            continue
        element = result_type.element_type
        width = getattr(element, "width", 8)
        if width >= 8:
            continue
        text = ir.StringAttr(op.attributes["heron.dense_constant"]).value
        wide_type = ir.RankedTensorType.get(result_type.shape, ir.IntegerType.get_signless(8))
        body = text.rsplit(" : ", 1)[0]
        body = body.replace("true", "1").replace("false", "0")
        with ir.InsertionPoint(op), op.location:
            wide = arith.ConstantOp(wide_type, ir.Attribute.parse(f"{body} : {wide_type}")).result
        for use in list(op.results[0].uses):
            user = use.owner
            with ir.InsertionPoint(user), user.location:
                value = tensor.ExtractOp(wide, list(user.operands[1:])).result
                narrow = arith.TruncIOp(ir.IntegerType.get_signless(width), value).result
                if not isinstance(element, ir.IntegerType):
                    narrow = arith.BitcastOp(element, narrow).result
            user.results[0].replace_all_uses_with(narrow)
            user.erase()
        op.erase()
    from heron.emitters.pipeline import run_upstream

    run_upstream(module, "builtin.module(one-shot-bufferize)")
