"""How precisely a dot multiplies on a GPU: XLA:GPU's precision rules, in one table.

A dot's ``operand_precision`` (jax's ``precision=``) and ``algorithm``
(jax's ``DotAlgorithmPreset``) say how much of its operands' precision the
products may drop. XLA:GPU's GEMM rewriter turns them into a BLAS compute
type (``GetBlasComputationType``); heron decides the same, here, once, for
the library call's ``compute`` (:mod:`heron.runtime.core.gemm`) and for the
tolerance a check allows (:func:`heron.harness.tolerance.output_tolerance`):

==========================================  ================  ==================
the dot says                                operands (f32)    compute
==========================================  ================  ==================
nothing, ``default`` or ``high`` (f32 in    f32               ``tf32`` where the
and out, a device with TF32: sm_80+)                          device has TF32
``highest`` on either operand               f32               f32 (no rounding)
``algorithm=dot_tf32_tf32_f32``             f32               ``tf32``
``algorithm=dot_bf16_bf16_f32``             f32 or bf16       ``bf16``
``dot_bf16_bf16_f32_x3`` / ``_x6`` / ``_x9``,  f32            f32: XLA's cuBLAS
``dot_tf32_tf32_f32_x3``, ``dot_f32_f32_f32``                  path computes these
                                                              in full f32
other element types (f16, bf16, f64, s8)    -                 their own type
==========================================  ================  ==================

fp8 dots multiply exactly (every fp8 product is an f32); how they *sum* is
the one choice: XLA:GPU lets cuBLASLt accumulate fast (``FAST_ACCUM``, fewer
bits than f32) where the dot has no ``algorithm`` and every operand
precision is ``default``, or its algorithm is
``dot_any_f8_any_f8_f32_fast_accum`` (:func:`fp8_fast_accumulation`).

A convolution follows the same rules (XLA:GPU's cuDNN calls take TF32 for
f32 convolutions at default precision; heron lowers convolutions to dots that
keep the attributes).

Products are summed in f32 for every float type narrower than f64
(:data:`heron.runtime.core.gemm.ACCUMULATION`). TF32 keeps 10 of f32's 23
fraction bits, bf16 7: a product's relative error grows from 2^-24 to about
2^-10 (2^-7). :func:`check_tolerance` is what a check allows for that.
"""

from __future__ import annotations

import math

from heron.hlo.errors import UnsupportedError
from heron.hlo.ir import Instruction

__all__ = [
    "ALGORITHMS",
    "ROUNDING_SPREAD",
    "check_tolerance",
    "contraction_length",
    "default_precision",
    "dot_compute",
    "fp8_fast_accumulation",
    "rounding_unit",
]

#: ``algorithm=`` -> the compute it asks for (``""``: the operands' own precision).
ALGORITHMS = {
    "dot_tf32_tf32_f32": "tf32",
    "dot_bf16_bf16_f32": "bf16",
    "dot_bf16_bf16_f32_x3": "",
    "dot_bf16_bf16_f32_x6": "",
    "dot_bf16_bf16_f32_x9": "",
    "dot_tf32_tf32_f32_x3": "",
    "dot_f32_f32_f32": "",
    "dot_f16_f16_f32": "",
    "dot_f16_f16_f16": "",
    "dot_bf16_bf16_bf16": "",
    "dot_f64_f64_f64": "",
    "dot_any_f8_any_f8_f32": "",
    "dot_any_f8_any_f8_f32_fast_accum": "",
}
#: ``operand_precision`` names, weakest first (XLA's PrecisionConfig enum order).
_PRECISIONS = ("default", "high", "highest")
#: compute -> the relative rounding error of one operand rounded to it (to nearest).
_ROUNDING_UNITS = {"tf32": 2.0**-11, "bf16": 2.0**-8}


def _operand_precisions(dot: Instruction) -> tuple[str, ...]:
    raw = dot.attributes.get("operand_precision")
    if raw is None:
        return ()
    text = getattr(raw, "text", raw)
    names = tuple(
        part.strip().lower() for part in str(text).strip("{} ").split(",") if part.strip()
    )
    unknown = [name for name in names if name not in _PRECISIONS]
    if unknown:
        raise UnsupportedError(
            f"dot {dot.name}: operand_precision {unknown[0]!r} (XLA's are {', '.join(_PRECISIONS)})"
        )
    return names


def dot_compute(dot: Instruction, *, tf32: bool) -> str:
    """The type ``dot``'s operands are rounded to before they are multiplied: ``"tf32"``,
    ``"bf16"``, or ``""`` (their own precision). See the module docstring's table.

    ``tf32``: whether the device multiplies f32 in TF32 by default (the Target's
    fact: a CUDA device since sm_80).
    """
    if dot.opcode not in ("dot", "convolution"):
        return ""
    lhs, rhs = (operand.array_shape.element_type.value for operand in dot.operands)
    out = dot.array_shape.element_type.value
    algorithm = dot.attributes.get("algorithm")
    if algorithm is not None:
        name = str(algorithm).lower()
        if name not in ALGORITHMS:
            raise UnsupportedError(
                f"dot {dot.name}: algorithm {name!r} is not one of XLA's"
                f" ({', '.join(sorted(ALGORITHMS))})"
            )
        compute = ALGORITHMS[name]
        return compute if lhs in ("f32", "bf16") and rhs in ("f32", "bf16") else ""
    precisions = _operand_precisions(dot)
    highest = bool(precisions) and max(_PRECISIONS.index(p) for p in precisions) == 2
    if tf32 and not highest and lhs == rhs == out == "f32":
        return "tf32"
    return ""


def default_precision(dot: Instruction) -> bool:
    """Whether no operand precision of ``dot`` is above ``default`` (XLA's compute
    precision 0; an absent ``operand_precision`` is all default)."""
    return all(precision == "default" for precision in _operand_precisions(dot))


def fp8_fast_accumulation(dot: Instruction) -> bool:
    """Whether XLA:GPU has cuBLASLt sum an fp8 ``dot`` fast (``FAST_ACCUM``): with an
    ``algorithm``, only for ``dot_any_f8_any_f8_f32_fast_accum``; without one, where no
    operand precision is above ``default`` (XLA's compute precision 0). XLA asks it for
    any dot with an fp8 operand; this says it for any dot (the caller knows its types)."""
    algorithm = dot.attributes.get("algorithm")
    if algorithm is not None:
        return str(algorithm).lower() == "dot_any_f8_any_f8_f32_fast_accum"
    return default_precision(dot)


def rounding_unit(compute: str) -> float:
    """The relative error of rounding one operand to ``compute`` (0 for ``""``)."""
    return _ROUNDING_UNITS.get(compute, 0.0)


def contraction_length(dot: Instruction) -> int:
    """How many products each output element of a dot or convolution sums (1 for a dot
    that contracts nothing).

    The one definition: the check's tolerance (:func:`check_tolerance`) and the
    fusion cost model's multiply-adds (``heron.compiler.fusion.cost_model``) read it.
    """
    if dot.opcode == "dot":
        lhs = dot.operands[0].array_shape
        return math.prod(lhs.dims[d] for d in dot.attributes.get("lhs_contracting_dims", ()))
    rhs = dot.operands[1].array_shape
    numbers = dot.attributes.get("dim_labels")
    output_features = rhs.dims[numbers.kernel_output_feature] if numbers is not None else 1
    # the kernel holds each output feature's window x (input features / groups)
    return max(1, rhs.num_elements // max(1, output_features))


#: How many rounding units a narrowed dot's output may be off, times sqrt of its
#: contraction length, relative to ``max(1, |reference|)``: each operand's rounding
#: error is independent of the others', so the sum's error grows as a random walk
#: (sqrt(k) of the per-product error, about 2 units for the two operands) with a
#: margin of 4 for the largest of many outputs. Measured on standard-normal
#: operands: k = 64 to 16384 needed 1.4 to 3.3 units times sqrt(k) for TF32.
ROUNDING_SPREAD = 8.0


def check_tolerance(dot: Instruction, *, tf32: bool) -> float:
    """The relative (and absolute) error a check allows an output of ``dot`` for the
    rounding of its operands to its compute type (0 where it multiplies in its
    operands' own precision); see :data:`ROUNDING_SPREAD`."""
    unit = rounding_unit(dot_compute(dot, tf32=tf32))
    if not unit:
        return 0.0
    return ROUNDING_SPREAD * unit * math.sqrt(contraction_length(dot))
