"""XLA:GPU's fast f32 instructions that no LLVM flag selects one op at a time (CUDA only).

Three rewrites, before ``convert-gpu-to-nvvm`` (``compiler_mlir.nvvm_steps``):

- **Marked f32 divisions -> ``div.full.f32``.** heron's emitters mark the f32
  divisions that may be 2 ulp off (:mod:`heron.emitters.fast_math`:
  ``arith.divf`` with ``arcp``). NVPTX has no fastmath flag that selects
  ``div.full.f32`` for one division (``afn`` gives ``div.approx.f32``, wrong for
  divisors above 2^126; XLA sets the whole compile's ``-nvptx-prec-divf32=1``),
  so each marked scalar division calls ``llvm.nvvm.div.full``, except a marked
  ``1 / y``: it takes ``afn``, which NVPTX selects as ``rcp.approx.f32`` (1 ulp,
  subnormals kept), what XLA's ``-nvptx-prec-divf32=1`` makes of ``1 / y``
  (its logistic's one division). Unmarked divisions stay ``div.rn.f32``; a
  marked vector division (none is made today) would too.
- **The approximate exp2 -> ``ex2.approx.ftz.f32``.** expand-math's f32
  exponentials take ``2^t`` from ``llvm.exp2`` with ``afn``
  (``Kit.exp2_approx``), which NVPTX selects as ``ex2.approx.f32``: for a
  subnormal result that form scales the argument and squares the result, three
  more SASS instructions around the MUFU.EX2. expand-math keeps ``t >= -24``,
  so the result is normal and a subnormal ``t`` gives 1 either way: the
  flushing form (XLA's, libdevice's ``__nv_expf``) computes the same, in one
  instruction.
- **The approximate log2 -> ``lg2.approx.f32``.** ``llvm.log2`` with ``afn``
  (``Kit.log2_approx``, f32 cbrt's seed, as libdevice's ``cbrtf``) has no
  NVPTX selection at all ("no libcall available for flog2"): it calls
  ``llvm.nvvm.lg2.approx.f``, the non-flushing form (subnormal arguments).
"""

from __future__ import annotations

from typing import Any

__all__ = ["lower_fast_math"]

#: ``llvm.call_intrinsic`` names: what expand-math writes -> what this step calls.
_EXP2 = "llvm.exp2"
_EX2_FTZ = "llvm.nvvm.ex2.approx.ftz.f"
_LOG2 = "llvm.log2"
#: Not flushing: f32 cbrt seeds subnormal arguments with it.
_LG2 = "llvm.nvvm.lg2.approx.f"
#: The ops this step may rewrite: marked divisions and the intrinsic calls above.
_REWRITTEN = frozenset({"arith.divf", "llvm.call_intrinsic"})


def _is_approximate_exp2(op: Any, ir: Any, name: str = _EXP2) -> bool:
    if op.name != "llvm.call_intrinsic" or "intrin" not in op.attributes:
        return False
    if ir.StringAttr(op.attributes["intrin"]).value != name:
        return False
    if not isinstance(op.results[0].type, ir.F32Type):
        return False
    flags = op.attributes["fastmathFlags"] if "fastmathFlags" in op.attributes else None
    return flags is not None and "afn" in str(flags)


def _call(ir: Any, llvm: Any, op: Any, name: str) -> None:
    with ir.InsertionPoint(op), op.location:
        result = llvm.CallIntrinsicOp(
            op.results[0].type, ir.StringAttr.get(name), list(op.operands), [], []
        ).results[0]
    op.results[0].replace_all_uses_with(result)
    op.erase()


def _is_one(value: Any, ir: Any) -> bool:
    """Whether ``value`` is the f32 constant 1.0 (an ``arith.constant``)."""
    owner = value.owner
    if not isinstance(owner, ir.Operation | ir.OpView):
        return False
    owner = owner.operation if isinstance(owner, ir.OpView) else owner
    if owner.name != "arith.constant":
        return False
    attr = owner.attributes["value"]
    return isinstance(attr, ir.FloatAttr) and ir.FloatAttr(attr).value == 1.0


def _reciprocal(ir: Any, op: Any) -> None:
    """A marked ``1 / x``: the division with ``afn``, which NVPTX selects as
    ``rcp.approx.f32`` (1 ulp, subnormals kept), XLA's form of it."""
    op.attributes["fastmath"] = ir.Attribute.parse("#arith.fastmath<afn>")


def lower_fast_math(module: Any) -> None:
    """Rewrite ``module``'s marked f32 divisions and approximate exp2s and log2s (in place)."""
    from mlir import ir
    from mlir.dialects import llvm

    from heron.emitters.fast_math import is_approximate_division
    from heron.emitters.ir_utils import walk_ops

    for op in walk_ops(module.operation, _REWRITTEN):
        if is_approximate_division(op) and _is_one(op.operands[0], ir):
            _reciprocal(ir, op)
        elif is_approximate_division(op):
            _call(ir, llvm, op, "llvm.nvvm.div.full")
        elif _is_approximate_exp2(op, ir):
            _call(ir, llvm, op, _EX2_FTZ)
        elif _is_approximate_exp2(op, ir, _LOG2):
            _call(ir, llvm, op, _LG2)
