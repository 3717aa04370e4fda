"""Dot canonicalisation: every dot as ``[batch..., M, K] x [batch..., K, N] -> [batch..., M, N]``.

XLA's ``DotDecomposer`` form, which GEMM libraries and emitters take: batch
dimensions first and in order on both sides, then at most one free dimension
and one contracting dimension, the left operand's free dimension before its
contracting one and the right operand's after. A dot in any other form gets
its operands transposed (batch, free, contracting) and reshaped (the free
dimensions into one, the contracting dimensions into one), and its result
reshaped back to the shape it had. A side with no free or no contracting
dimension keeps none (a matrix-vector product stays one).

The reference evaluator computes every dot through exactly this form, so
canonicalisation changes no bit of its results; a device library may sum in
another order either way.
"""

from __future__ import annotations

import math

from heron.hlo.ir import Instruction, Module
from heron.hlo.passes.registry import hlo_pass
from heron.hlo.passes.rewrite import (
    Inserter,
    module_names,
    non_fusion_computations,
    remove_instructions,
)
from heron.hlo.shapes import ArrayShape

__all__ = [
    "canonicalise_dots",
    "dimension_lists",
    "free_dimensions",
    "is_canonical_dot",
    "rewrite_size",
]

_DIMENSION_ATTRIBUTES = (
    "lhs_batch_dims",
    "rhs_batch_dims",
    "lhs_contracting_dims",
    "rhs_contracting_dims",
)


def dimension_lists(dot: Instruction) -> tuple[list[int], list[int], list[int], list[int]]:
    """``dot``'s batch and contracting dimensions: lhs batch, rhs batch, lhs contracting,
    rhs contracting (empty lists where the attribute is absent)."""
    return tuple(list(dot.attributes.get(name, ())) for name in _DIMENSION_ATTRIBUTES)  # type: ignore[return-value]


def free_dimensions(rank: int, batch: list[int], contracting: list[int]) -> list[int]:
    """A dot operand's free (non-contracting, non-batch) dimensions, in order."""
    return [d for d in range(rank) if d not in batch and d not in contracting]


def rewrite_size(dot: Instruction) -> int:
    """XLA's measure of whether a dot is worth a GEMM (its
    ``IsMatrixMultiplicationTooSmallForRewriting``): the contraction length times the
    sum of both sides' free sizes (a side without a free dimension counts 1). XLA's dot
    strength reduction rewrites a vector side's dot under 10,000,000 (and so does
    heron's); its GEMM rewriter leaves a dot under ``gemm_rewrite_size_threshold`` (100)
    to a loop kernel of its own, where heron makes it a library call (one kernel
    either way: XLA fuses neither into what reads it)."""
    lb, rb, lc, rc = dimension_lists(dot)
    lhs, rhs = (operand.array_shape.dims for operand in dot.operands)
    lhs_free = math.prod(lhs[d] for d in free_dimensions(len(lhs), lb, lc))
    rhs_free = math.prod(rhs[d] for d in free_dimensions(len(rhs), rb, rc))
    return math.prod(lhs[d] for d in lc) * (lhs_free + rhs_free)


def is_canonical_dot(dot: Instruction) -> bool:
    """Whether ``dot`` already has the canonical form (see the module docstring)."""
    lb, rb, lc, rc = dimension_lists(dot)
    lhs_rank, rhs_rank = len(dot.operands[0].shape.dims), len(dot.operands[1].shape.dims)
    lf, rf = free_dimensions(lhs_rank, lb, lc), free_dimensions(rhs_rank, rb, rc)
    batch = list(range(len(lb)))
    return (
        lb == batch
        and rb == batch
        and len(lf) <= 1
        and len(rf) <= 1
        and len(lc) <= 1
        and lb + lf + lc == list(range(lhs_rank))
        and rb + rc + rf == list(range(rhs_rank))
    )


@hlo_pass("dot-decomposer", "dots in [batch, M, K] x [batch, K, N] form")
def canonicalise_dots(module: Module) -> bool:
    names = module_names(module)
    changed = False
    for computation in non_fusion_computations(module):
        dots = [
            i
            for i in computation.instructions
            if i.opcode == "dot" and isinstance(i.shape, ArrayShape) and not is_canonical_dot(i)
        ]
        if not dots:
            continue
        # One inserter for the computation (its uses kept current): one per dot scanned
        # the computation per dot, 16 s for the 3,000 dots of a GPT-2 training step.
        inserter = Inserter(computation, names)
        for dot in dots:
            inserter.replace(dot, _canonical(inserter, dot))
        remove_instructions(computation, dots)
        changed = True
    return changed


def _canonical(inserter: Inserter, dot: Instruction) -> Instruction:
    lhs, rhs = dot.operands
    lb, rb, lc, rc = dimension_lists(dot)
    lf = free_dimensions(len(lhs.shape.dims), lb, lc)
    rf = free_dimensions(len(rhs.shape.dims), rb, rc)
    batch = [lhs.shape.dims[d] for d in lb]

    def add(name: str, opcode: str, shape: ArrayShape, operands, attributes=None) -> Instruction:
        return inserter.add(opcode, shape, operands, attributes, like=dot, suffix=name)

    def arrange(operand: Instruction, order: list[int], groups: list[list[int]], side: str):
        dims = operand.shape.dims
        if order != list(range(len(dims))):
            moved = ArrayShape(operand.shape.element_type, tuple(dims[d] for d in order))
            operand = add(
                f"{side}_transpose", "transpose", moved, [operand], {"dimensions": tuple(order)}
            )
        collapsed = tuple(batch) + tuple(math.prod(dims[d] for d in g) for g in groups if g)
        if collapsed != operand.shape.dims:
            shape = ArrayShape(operand.shape.element_type, collapsed)
            operand = add(f"{side}_reshape", "reshape", shape, [operand])
        return operand

    new_lhs = arrange(lhs, lb + lf + lc, [lf, lc], "lhs")
    new_rhs = arrange(rhs, rb + rc + rf, [rc, rf], "rhs")
    b = len(lb)
    has_m, has_n = bool(lf), bool(rf)
    attributes = {k: v for k, v in dot.attributes.items() if k not in _DIMENSION_ATTRIBUTES}
    if b:
        attributes["lhs_batch_dims"] = tuple(range(b))
        attributes["rhs_batch_dims"] = tuple(range(b))
    if lc:
        attributes["lhs_contracting_dims"] = (b + int(has_m),)
        attributes["rhs_contracting_dims"] = (b,)
    free_sizes = [math.prod(lhs.shape.dims[d] for d in lf)] if has_m else []
    free_sizes += [math.prod(rhs.shape.dims[d] for d in rf)] if has_n else []
    dims = tuple(batch + free_sizes)
    if dims == dot.shape.dims:  # only the operands moved: the result is the dot's own
        return add("canonical", "dot", dot.shape, [new_lhs, new_rhs], attributes)
    canonical = add(
        "canonical", "dot", ArrayShape(dot.shape.element_type, dims), [new_lhs, new_rhs], attributes
    )
    return add("result", "reshape", dot.shape, [canonical])
