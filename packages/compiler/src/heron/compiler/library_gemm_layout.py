"""GEMM operands laid out as the library reads them: XLA:GPU's layout constraints on dots.

cuBLASLt reads each operand of a (batched) GEMM as a strided batch of matrices,
each row- or column-major: the batch dimensions the most major, in order, and
the two matrix dimensions in either order (a column-major matrix is a
row-major one read transposed). XLA:GPU's layout assignment gives every dot
operand such a layout, copying where the producer's is another. heron's layout
assignment instead makes layout-changing transposes free wherever it can (a
``transpose`` whose output layout is its operand's order moves no byte), so a
dot may read an operand whose batch dimension is minor (``f32[4,8,8]{0,2,1}``,
flax's MoE dispatch) or lies between the matrix dimensions.

- :func:`operand_reading`: how the library reads an operand of a given layout:
  as it is, transposed (the last two dimensions swapped), or not at all;
- :func:`readable_operands`: for each canonical dot whose types a library GEMM
  computes, an operand the library cannot read is copied into row-major order
  first (a ``bitcast`` to its physical order and a ``transpose`` back: a kernel
  of its own, XLA's copy), so that the dot becomes a library call instead of
  heron's GEMM kernel reading it in place. It is part of the
  ``library-gemm-operand-layout`` pass (:mod:`.library_gemm_fp8`).
"""

from __future__ import annotations

from heron.hlo.ir import Instruction, Module
from heron.hlo.passes.dot_decomposer import is_canonical_dot
from heron.hlo.passes.rewrite import Inserter, rewrite_each
from heron.hlo.shapes import ArrayShape
from heron.runtime.core.gemm import ACCUMULATION, FP8_TYPES
from heron.target import Target

__all__ = ["TN_TYPES", "operand_reading", "readable_operands"]

#: Operand types whose cuBLASLt kernels read lhs [m, k] and rhs [n, k] only ("TN").
TN_TYPES = (*FP8_TYPES, "s8")


def operand_reading(shape: ArrayShape, batch: int) -> str:
    """How a GEMM library reads an operand of ``shape`` with ``batch`` leading batch
    dimensions: ``"row-major"``, ``"transposed"`` (its last two dimensions swapped in
    memory, the batch dimensions major and in order) or ``""`` (it cannot)."""
    rank = shape.rank
    order = shape.major_to_minor
    if order == tuple(range(rank)):
        return "row-major"
    if rank >= batch + 2 and order == (*range(rank - 2), rank - 1, rank - 2):
        return "transposed"
    return ""


def _row_major_copy(inserter: Inserter, operand: Instruction, like: Instruction) -> Instruction:
    """``operand`` in row-major order: a bitcast to its physical order (moves nothing)
    and a transpose to its own dimensions (moves every element)."""
    shape = operand.array_shape
    physical = shape.major_to_minor
    stored = ArrayShape.row_major(shape.element_type, tuple(shape.dims[d] for d in physical))
    as_stored = inserter.add("bitcast", stored, [operand], like=like, suffix="stored")
    return inserter.add(
        "transpose",
        ArrayShape.row_major(shape.element_type, shape.dims),
        [as_stored],
        {"dimensions": tuple(physical.index(d) for d in range(shape.rank))},
        like=like,
        suffix="row_major",
    )


def _with_readable_operands(inserter: Inserter, dot: Instruction) -> Instruction | None:
    if not is_canonical_dot(dot) or not isinstance(dot.shape, ArrayShape):
        return None
    types = tuple(operand.array_shape.element_type.value for operand in dot.operands)
    if types not in ACCUMULATION:
        return None
    batch = len(dot.attributes.get("lhs_batch_dims", ()))
    # fp8 and s8: cuBLASLt reads the lhs [m, k] only ("TN"), never transposed
    tn = any(t in TN_TYPES for t in types)
    lhs_readings = ("row-major",) if tn else ("row-major", "transposed")
    operands = [
        operand
        if operand_reading(operand.array_shape, batch)
        in (lhs_readings if number == 0 else ("row-major", "transposed"))
        else _row_major_copy(inserter, operand, dot)
        for number, operand in enumerate(dot.operands)
    ]
    if all(new is old for new, old in zip(operands, dot.operands, strict=True)):
        return None
    return inserter.add(
        "dot", dot.shape, operands, dict(dot.attributes), like=dot, suffix="readable"
    )


def readable_operands(module: Module, target: Target) -> bool:
    """Copy into row-major order each operand of a library-typed canonical dot that the
    Target's GEMM library cannot read (module docstring); True when anything changed."""
    if not target.gemm_library:
        return False
    return rewrite_each(module, "dot", _with_readable_operands)
