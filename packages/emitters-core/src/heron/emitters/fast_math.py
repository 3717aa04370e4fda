"""XLA:GPU's fast f32 forms of division, square root and reciprocal square root.

XLA:GPU computes these f32 operations approximately on NVIDIA GPUs: every
division with ``div.full.f32`` (its NVPTX initialisation sets LLVM's
``-nvptx-prec-divf32=1``: at most 2 ulp from the exact quotient, full range),
``sqrt`` with ``sqrt.approx.f32`` and ``rsqrt`` with ``rsqrt.approx.f32`` (one
MUFU instruction each, relative error about 2^-23). The IEEE forms heron used
before are a fast path, a check and a called slow path: 25 more SASS
instructions per division, most of the gap between heron's GELU, logistic and
rsqrt kernels and XLA's (2.5-6.5x XLA's SASS, ``benchmarks/sass_vs_xla.py``,
issue 29).

heron marks the operations it allows those errors, and each backend computes
them its own way:

- :func:`approximate_divide`: an f32 ``arith.divf`` with the fastmath flag
  ``arcp`` (LLVM's licence to divide through a reciprocal). CUDA's lowering
  calls ``llvm.nvvm.div.full`` for it (``heron.runtime.cuda.compiler_fast_math``;
  no fastmath flag selects div.full for one division) and ``rcp.approx.f32`` for
  a ``1 / y`` (1 ulp; XLA's NVPTX backend selects it so), ROCm's LLVM uses its
  reciprocal.
- :func:`approximate_sqrt` and :func:`approximate_rsqrt`: an f32 ``math.sqrt`` /
  ``math.rsqrt`` with ``afn``, which expand-math turns into ``llvm.sqrt`` (and a
  division by it) with ``afn``: NVPTX selects ``sqrt.approx.f32`` and
  ``rsqrt.approx.f32``, AMDGPU ``v_sqrt_f32`` / ``v_rsq_f32``.

These are XLA's forms on CUDA only: on ROCm XLA links OCML with correctly
rounded square roots and no unsafe math, so there expand-math removes the
marks first (:func:`keeps_fast_math`, :func:`remove_marks`) and all three
are correctly rounded. The interpreter and the host compute all three correctly rounded, as the
reference evaluator does, so they never show the error; the check's
tolerance allows it (:data:`heron.emitters.math_accuracy.FAST_MATH`). The
elemental emitter applies this to HLO ``divide``, ``logistic``, ``sqrt`` and
``rsqrt``, and expand-math to the quotient inside f32 ``tanh``; square roots
inside other approximations, and those complex arithmetic lowers to, stay
correctly rounded (their bounds rely on it). f64 is computed correctly rounded
throughout (XLA's f64 division and square root are ``.rn`` too); f16/bf16
operations are computed in f32 and rounded, so they inherit the f32 forms.
"""

from __future__ import annotations

from mlir import ir
from mlir.dialects import arith, math

__all__ = [
    "DIVISION_FLAG",
    "FUNCTION_FLAG",
    "approximate_divide",
    "approximate_rsqrt",
    "approximate_sqrt",
    "is_approximate",
    "is_approximate_division",
    "keeps_fast_math",
    "remove_marks",
]

#: The fastmath flag that marks a division allowed to be 2 ulp off.
DIVISION_FLAG = "arcp"
#: The fastmath flag that marks a square root or reciprocal square root allowed the
#: hardware's approximation.
FUNCTION_FLAG = "afn"


def _element(value_type: ir.Type) -> ir.Type:
    return value_type.element_type if isinstance(value_type, ir.VectorType) else value_type


def _is_f32(value_type: ir.Type) -> bool:
    return isinstance(_element(value_type), ir.F32Type)


def _computed_in_f32(value_type: ir.Type) -> bool:
    """f32, and f16/bf16, which expand-math computes in f32 and rounds."""
    return isinstance(_element(value_type), ir.F32Type | ir.F16Type | ir.BF16Type)


def _flag(name: str) -> ir.Attribute:
    return ir.Attribute.parse(f"#arith.fastmath<{name}>")


def approximate_divide(a: ir.Value, b: ir.Value) -> ir.Value:
    """``a / b``, marked as allowed within 2 ulp when f32 (correctly rounded otherwise)."""
    if not _is_f32(a.type):
        return arith.DivFOp(a, b).result
    return arith.DivFOp(a, b, fastmath=_flag(DIVISION_FLAG)).result


def approximate_sqrt(x: ir.Value) -> ir.Value:
    """``sqrt(x)``, marked as allowed the hardware's approximation when computed in f32."""
    if not _computed_in_f32(x.type):
        return math.SqrtOp(x).result
    return math.SqrtOp(x, fastmath=_flag(FUNCTION_FLAG)).result


def approximate_rsqrt(x: ir.Value) -> ir.Value:
    """``1 / sqrt(x)``, marked as allowed the hardware's approximation when computed in f32."""
    if not _computed_in_f32(x.type):
        return math.RsqrtOp(x).result
    return math.RsqrtOp(x, fastmath=_flag(FUNCTION_FLAG)).result


def _has_flag(op: ir.Operation, flag: str) -> bool:
    return "fastmath" in op.attributes and flag in str(op.attributes["fastmath"])


def is_approximate(op: ir.Operation) -> bool:
    """Whether ``op`` (a ``math.sqrt``/``math.rsqrt``) was marked by :func:`approximate_sqrt`
    or :func:`approximate_rsqrt`."""
    return _has_flag(op, FUNCTION_FLAG) and _computed_in_f32(op.results[0].type)


def is_approximate_division(op: ir.Operation) -> bool:
    """Whether ``op`` is a division :func:`approximate_divide` marked (scalar f32)."""
    if op.name != "arith.divf" or not isinstance(op.results[0].type, ir.F32Type):
        return False
    return _has_flag(op, DIVISION_FLAG)


def keeps_fast_math(backend: str) -> bool:
    """Whether kernels for ``backend`` compute the marked operations in XLA's fast forms
    (CUDA; ROCm's XLA rounds them correctly, and so does heron there)."""
    return backend == "cuda"


def remove_marks(module: ir.Module) -> None:
    """Drop every mark this module's functions put (the ops then round correctly)."""
    from heron.emitters.ir_utils import walk_ops

    none = _flag("none")
    for op in walk_ops(module.operation):
        marked = op.name == "arith.divf" and _has_flag(op, DIVISION_FLAG)
        marked |= op.name in ("math.sqrt", "math.rsqrt") and _has_flag(op, FUNCTION_FLAG)
        if marked:
            op.attributes["fastmath"] = none
