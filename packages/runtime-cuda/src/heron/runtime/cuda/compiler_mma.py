"""bf16 ``nvgpu.mma.sync`` -> ``nvvm.mma.sync``: the one MMA upstream's conversion misses.

heron's GEMM emitter writes its tensor-core products as ``nvgpu.mma.sync``
(vector operands, which the interpreter runs and heron's passes carry
unchanged). Upstream's ``convert-nvgpu-to-nvvm`` lowers the f16 form but
refuses bf16 operands ("failed to deduce operand PTX types"): NVVM takes a
bf16 pair as one ``i32`` register, which it does not build. This rewrite does
what that pattern would: each ``vector<2xbf16>`` row of a fragment is
bitcast to an ``i32``, the accumulators are extracted, ``nvvm.mma.sync`` is
called with bf16 PTX types, and its struct result is put back into the
``vector<2x2xf32>`` the op returned. It runs on the CUDA side only, before
``convert-nvgpu-to-nvvm`` (``compiler_mlir.nvvm_steps``).
"""

from __future__ import annotations

from typing import Any

__all__ = ["lower_bf16_mma"]


def _is_bf16_mma(op: Any, ir: Any) -> bool:
    if op.name != "nvgpu.mma.sync":
        return False
    element = ir.VectorType(op.operands[0].type).element_type
    return isinstance(element, ir.BF16Type) or str(element) == "bf16"


def _registers(value: Any, ir: Any, vector: Any) -> list[Any]:
    """Each ``vector<2xbf16>`` row of fragment ``value`` as the ``i32`` NVVM takes."""
    word = ir.VectorType.get([1], ir.IntegerType.get_signless(32))
    packed = []
    for r in range(ir.VectorType(value.type).shape[0]):
        row = vector.extract(value, [], [r])
        packed.append(vector.extract(vector.bitcast(word, row), [], [0]))
    return packed


def lower_bf16_mma(module: Any) -> None:
    """Rewrite every bf16 ``nvgpu.mma.sync`` of ``module`` (in place) as ``nvvm.mma.sync``."""
    from mlir import ir
    from mlir.dialects import llvm, nvvm, vector

    from heron.emitters.ir_utils import walk_ops

    found = [
        op
        for op in walk_ops(module.operation, frozenset({"nvgpu.mma.sync"}))
        if _is_bf16_mma(op, ir)
    ]
    for op in found:
        m, n, k = (int(v) for v in ir.ArrayAttr(op.attributes["mmaShape"]))
        a, b, c = op.operands
        f32 = ir.F32Type.get()
        with ir.InsertionPoint(op), op.location:
            c_rows, c_cols = ir.VectorType(c.type).shape
            c_regs = [vector.extract(c, [], [r, e]) for r in range(c_rows) for e in range(c_cols)]
            bf16 = ir.Attribute.parse("#nvvm.mma_type<bf16>")
            result = nvvm.mma_sync(
                llvm.StructType.get_literal([f32] * len(c_regs)),
                ir.Attribute.parse(f"#nvvm.shape<m = {m}, n = {n}, k = {k}>"),
                ir.Attribute.parse("#nvvm.mma_layout<row>"),
                ir.Attribute.parse("#nvvm.mma_layout<col>"),
                _registers(a, ir, vector),
                _registers(b, ir, vector),
                c_regs,
                multiplicand_a_ptx_type=bf16,
                multiplicand_b_ptx_type=bf16,
            )
            values = [llvm.extractvalue(f32, result, [i]) for i in range(len(c_regs))]
            replaced = vector.from_elements(c.type, values)
        op.results[0].replace_all_uses_with(replaced)
        op.erase()
