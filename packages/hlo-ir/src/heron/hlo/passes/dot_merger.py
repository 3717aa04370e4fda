"""Dots that share an operand become one dot over the other operands' concatenation.

XLA's ``DotMerger``. An LSTM cell computes its four gates as four products of the
same input with four weight matrices (and four of the same hidden state); a GEMM
each is eight launches a step, each too small to fill the device. Two dots that
read the same operand on the same side, with the same dimension numbers and
precision, whose other operands differ only in their one free dimension, are one
dot of the shared operand with those two concatenated along that dimension; each
old result is a slice of the new one. Applied pairwise until nothing merges, the
four gates' products are one GEMM (``flax_lstm_fori_loop``: eight GEMMs a step
become two, as in XLA:GPU's optimized module, whose concatenations of the weights
stay in the loop body as XLA leaves them).

A pair is merged only when neither reaches the other (the merged dot would
depend on itself), neither is ordered by a control edge, both results are at most
:data:`MAX_SIZE_TO_MERGE` bytes (XLA:GPU's ``--xla_gpu_dot_merger_threshold_mb``,
32 MiB: past that a dot fills the device alone), and the unshared operands have one
free dimension each (what is concatenated) and the same element type, layout and
other dimensions. Each output element sums the same products as before; a GEMM
(a device's, or the reference evaluator's f32 matmul, a BLAS call) may take them in
another order for the wider product, within the reassociation bounds every dot has.

Runs on dots as the program has them after canonicalisation (``dot-decomposer``):
after ``dot-strength-reduction`` has made the vector-side dots multiplies, so only
GEMMs are merged.
"""

from __future__ import annotations

from heron.hlo.attributes import SliceRange
from heron.hlo.builder import NameUniquer
from heron.hlo.ir import Computation, Instruction, Module
from heron.hlo.passes.dot_decomposer import dimension_lists, free_dimensions
from heron.hlo.passes.registry import hlo_pass
from heron.hlo.passes.rewrite import (
    CONTROL,
    Inserter,
    module_names,
    non_fusion_computations,
    remove_instructions,
)
from heron.hlo.shapes import ArrayShape

__all__ = ["MAX_SIZE_TO_MERGE", "merge_dots"]

#: The largest dot result, in bytes, a merge takes (XLA:GPU's default threshold).
MAX_SIZE_TO_MERGE = 32 << 20


@hlo_pass("dot-merger", "dots sharing an operand become one dot over the others' concatenation")
def merge_dots(module: Module) -> bool:
    names = module_names(module)
    changed = False
    for computation in non_fusion_computations(module):
        while _merge_one_pair(computation, names):
            changed = True
    return changed


def _merge_one_pair(computation: Computation, names: NameUniquer) -> bool:
    """Merge the first mergeable pair of dots of ``computation`` (in its order); False
    when there is none."""
    dots = [i for i in computation.instructions if i.opcode == "dot" and _mergeable(i)]
    if len(dots) < 2:
        return False
    ordered_after = _control_ordered(computation)
    by_operand: dict[tuple[int, int], list[Instruction]] = {}
    for dot in dots:
        if dot.name in ordered_after:
            continue
        for side in (0, 1):
            by_operand.setdefault((id(dot.operands[side]), side), []).append(dot)
    for (_, shared), group in by_operand.items():
        for i, a in enumerate(group):
            for b in group[i + 1 :]:
                if _compatible(a, b, shared) and not _connected(a, b):
                    _merge(computation, names, a, b, shared)
                    return True
    return False


def _mergeable(dot: Instruction) -> bool:
    shape = dot.shape
    return (
        isinstance(shape, ArrayShape)
        and CONTROL not in dot.attributes
        and shape.num_elements * shape.element_type.byte_width <= MAX_SIZE_TO_MERGE
        and all(isinstance(o.shape, ArrayShape) for o in dot.operands)
    )


def _control_ordered(computation: Computation) -> set[str]:
    """Names of the instructions another instruction is ordered after."""
    names: set[str] = set()
    for inst in computation.instructions:
        refs = inst.attributes.get(CONTROL)
        if refs is not None:
            names.update(getattr(refs, "names", refs))
    return names


def _outer_dimension(dot: Instruction, side: int) -> int | None:
    """The one free dimension of ``dot``'s operand ``side``, or None (none or several)."""
    lb, rb, lc, rc = dimension_lists(dot)
    batch, contracting = (lb, lc) if side == 0 else (rb, rc)
    free = free_dimensions(len(dot.operands[side].array_shape.dims), batch, contracting)
    return free[0] if len(free) == 1 else None


def _compatible(a: Instruction, b: Instruction, shared: int) -> bool:
    """Whether ``a`` and ``b``, which read the same operand ``shared``, merge: the same
    attributes (dimension numbers, precision, algorithm), and other operands that differ
    in their one free dimension only."""
    if a is b or a.attributes != b.attributes:
        return False
    if a.array_shape.element_type != b.array_shape.element_type:
        return False
    if a.array_shape.minor_to_major != b.array_shape.minor_to_major:
        return False
    other = 1 - shared
    outer = _outer_dimension(a, other)
    if outer is None:
        return False
    x, y = a.operands[other].array_shape, b.operands[other].array_shape
    if x.element_type != y.element_type or x.minor_to_major != y.minor_to_major:
        return False
    return all(d == e for k, (d, e) in enumerate(zip(x.dims, y.dims, strict=True)) if k != outer)


def _connected(a: Instruction, b: Instruction) -> bool:
    """Whether one of ``a`` and ``b`` reads the other, directly or through others."""
    return _reaches(a, b) or _reaches(b, a)


def _reaches(start: Instruction, target: Instruction) -> bool:
    """Whether ``target`` is among the operands of ``start``, or theirs, and so on."""
    stack, seen = list(start.operands), set()
    while stack:
        inst = stack.pop()
        if inst is target:
            return True
        if id(inst) in seen:
            continue
        seen.add(id(inst))
        stack.extend(inst.operands)
    return False


def _output_dimension(dot: Instruction, side: int) -> int:
    """Where operand ``side``'s one free dimension is in ``dot``'s result: after the
    batch dimensions, the lhs free dimensions first."""
    lb, rb, lc, _ = dimension_lists(dot)
    if side == 0:
        return len(lb)
    lhs_free = free_dimensions(len(dot.operands[0].array_shape.dims), lb, lc)
    return len(lb) + len(lhs_free)


def _merged_operand(x: Instruction, dot: Instruction, outer: int, inserter: Inserter) -> bool:
    """Whether ``x`` is a concatenation along ``outer`` that only ``dot`` reads."""
    return (
        x.opcode == "concatenate"
        and tuple(x.attributes.get("dimensions", ())) == (outer,)
        and inserter.uses.users(x) == [dot]
    )


def _merge(
    computation: Computation, names: NameUniquer, a: Instruction, b: Instruction, shared: int
) -> None:
    other = 1 - shared
    outer = _outer_dimension(a, other)
    assert outer is not None  # _compatible checked it
    x, y = a.operands[other], b.operands[other]
    inserter = Inserter(computation, names)
    dims = list(x.array_shape.dims)
    dims[outer] += y.array_shape.dims[outer]
    # A third dot merged into a merged pair extends its concatenation (one kernel, as
    # XLA's four LSTM gates' weights are one concatenate).
    spliced = [v for v, dot in ((x, a), (y, b)) if _merged_operand(v, dot, outer, inserter)]
    parts = [p for v in (x, y) for p in (v.operands if v in spliced else [v])]
    joined = inserter.add(
        "concatenate",
        ArrayShape(x.array_shape.element_type, tuple(dims), x.array_shape.layout),
        parts,
        {"dimensions": (outer,)},
        like=a,
        suffix="merged_operand",
    )
    out = _output_dimension(a, other)
    result = list(a.array_shape.dims)
    split = result[out]
    result[out] += b.array_shape.dims[out]
    operands = [a.operands[0], joined] if shared == 0 else [joined, a.operands[1]]
    merged = inserter.add(
        "dot",
        ArrayShape(a.array_shape.element_type, tuple(result), a.array_shape.layout),
        operands,
        dict(a.attributes),
        like=a,
        suffix="merged",
    )
    for old, start, stop in ((a, 0, split), (b, split, result[out])):
        ranges = tuple(
            SliceRange(start, stop, 1) if k == out else SliceRange(0, size, 1)
            for k, size in enumerate(result)
        )
        part = inserter.add(
            "slice", old.shape, [merged], {"slice": ranges}, like=old, suffix="part"
        )
        inserter.replace(old, part)
        inserter.uses.forget(old)
    remove_instructions(computation, [a, b])
    for v in spliced:  # its operands now feed the wider concatenation
        inserter.uses.forget(v)
    remove_instructions(computation, spliced)
