"""Marked f32 divisions -> ``div.full.f32``: XLA:GPU's division, on the CUDA side only.

heron's emitters mark the f32 divisions that may be 2 ulp off
(:mod:`heron.emitters.fast_math`: ``arith.divf`` with ``arcp``). NVPTX has
no fastmath flag that selects ``div.full.f32`` for one division (``afn`` gives
``div.approx.f32``, wrong for divisors above 2^126; XLA sets the whole
compile's ``-nvptx-prec-divf32=1``), so this step calls the intrinsic
``llvm.nvvm.div.full`` for each marked scalar division, before
``convert-gpu-to-nvvm`` (``compiler_mlir.nvvm_steps``). Unmarked divisions stay
``div.rn.f32``; a marked vector division (none is made today) would too.
"""

from __future__ import annotations

from typing import Any

__all__ = ["lower_approximate_division"]


def _walk(operation: Any):
    for region in operation.regions:
        for block in region.blocks:
            for op in list(block.operations):
                yield op.operation
                yield from _walk(op.operation)


def lower_approximate_division(module: Any) -> None:
    """Rewrite every marked scalar f32 ``arith.divf`` of ``module`` (in place) as
    ``llvm.nvvm.div.full``."""
    from mlir import ir
    from mlir.dialects import llvm

    from heron.emitters.fast_math import is_approximate_division

    found = [op for op in _walk(module.operation) if is_approximate_division(op)]
    for op in found:
        with ir.InsertionPoint(op), op.location:
            quotient = llvm.CallIntrinsicOp(
                op.results[0].type,
                ir.StringAttr.get("llvm.nvvm.div.full"),
                list(op.operands),
                [],
                [],
            ).results[0]
        op.results[0].replace_all_uses_with(quotient)
        op.erase()
