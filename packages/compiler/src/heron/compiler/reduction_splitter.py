"""Reduction splitter: a reduce of dimensions that do not lie together becomes two.

The reduction emitters take a reduce whose reduced dimensions or whose kept
ones are adjacent in memory (a row, a column, a batched row:
:func:`heron.emitters.reductions.is_reduction_from_or_to_contiguous_dimensions`).
Any other reduce (a group norm's statistics over ``[N, H, W, G, C/G]``, reduced
over ``H, W`` and ``C/G``) was left to the loop emitter: one thread per output
element walking its whole reduced set alone, 16 threads for a 2,048-element
input in flax's GroupNorm, one block of 256 threads each summing 65,536 elements
at a diffusion model's size. XLA:GPU's ``ReductionSplitter`` (after its
``ReductionDimensionGrouper``, before the tree-reduction rewriter) splits such a
reduce in two, and so does this pass, with its rule:

- the reduced dimensions are grouped into runs adjacent in the physical order
  (size-1 dimensions hold nothing and are passed over, as XLA's
  ``ReductionDegenerateDimRemover`` removes them first);
- with two runs or more, the longest run (the first of equal ones, in physical
  order) is reduced first, which shrinks the data most, then the rest; again
  while what is left is not contiguous (each new reduce is looked at again);
- but only where that first reduce is one the reduction emitters take (a
  contiguous reduction, not a tiny one): XLA splits every such reduce, and its
  priority fusion fuses two loop-emitted halves back into one loop kernel
  (``[16, 32, 8, 64]`` summed over the 16 and the 8: one kernel in XLA, as
  before its split); heron's prices them apart, so it splits only where the
  split makes a reduction kernel, the split's purpose (haiku's bicubic resize's
  ``[6, 4, 4, 6]`` mean over the 6s stays one loop kernel).

Only a reduce of one operand is split (XLA leaves variadic reduces alone). The
first reduce's result keeps the operand's layout without the dimensions it
reduces; the second's is the original's. A float sum is taken in another order
(each reduction emitter sums in its own anyway: the check's reassociation
bounds); integers, min and max keep every bit. Every decision is checked against
XLA:GPU's own split of the same modules in the tests.
"""

from __future__ import annotations

import math

from heron.emitters.reductions import (
    is_contiguous_reduction,
    is_reduction_from_or_to_contiguous_dimensions,
)
from heron.hlo.ir import Instruction, Module
from heron.hlo.passes.manager import HloPass
from heron.hlo.passes.rewrite import Inserter, rewrite_each
from heron.hlo.shapes import ArrayShape, Layout
from heron.target import Target

__all__ = ["first_reduced_run", "reduction_splitter", "split_scattered_reductions"]


def first_reduced_run(reduce: Instruction) -> tuple[int, ...] | None:
    """The dimensions ``reduce`` should reduce first (XLA's choice), or None when its
    reduced dimensions make fewer than two runs adjacent in memory."""
    shape = reduce.operands[0].array_shape
    reduced = set(reduce.attributes.get("dimensions", ()))
    runs: list[list[int]] = []
    previous_reduced = False
    for d in shape.major_to_minor:
        if shape.dims[d] == 1:
            continue  # holds nothing: neither joins nor separates runs
        if d in reduced:
            if previous_reduced:
                runs[-1].append(d)
            else:
                runs.append([d])
        previous_reduced = d in reduced
    if len(runs) < 2:
        return None
    sizes = [math.prod(shape.dims[d] for d in run) for run in runs]
    longest = sizes.index(max(sizes))
    return tuple(sorted(runs[longest]))


def _without(shape: ArrayShape, dropped: tuple[int, ...], element_type) -> ArrayShape:
    """``shape`` without the ``dropped`` dimensions, in ``element_type``, its layout kept
    for the others (renumbered)."""
    kept = [d for d in range(shape.rank) if d not in dropped]
    number = {d: n for n, d in enumerate(kept)}
    minor_to_major = tuple(number[d] for d in shape.minor_to_major if d in number)
    return ArrayShape(element_type, tuple(shape.dims[d] for d in kept), Layout(minor_to_major))


def _split(inserter: Inserter, reduce: Instruction, target: Target) -> Instruction | None:
    """The two reduces computing ``reduce``, or None to keep it."""
    if len(reduce.operands) != 2 or not isinstance(reduce.shape, ArrayShape):
        return None
    operand, init = reduce.operands
    if operand.array_shape.num_elements == 0:
        return None
    if is_reduction_from_or_to_contiguous_dimensions(reduce, target):
        return None
    first = first_reduced_run(reduce)
    if first is None or not is_contiguous_reduction(operand.array_shape, first, target):
        return None
    rest = tuple(
        d - sum(1 for f in first if f < d)
        for d in reduce.attributes["dimensions"]
        if d not in first
    )
    partial_shape = _without(operand.array_shape, first, reduce.array_shape.element_type)
    partial = inserter.add(
        "reduce",
        partial_shape,
        [operand, init],
        {**reduce.attributes, "dimensions": first},
        like=reduce,
        suffix="split",
    )
    return inserter.add(
        "reduce",
        reduce.shape,
        [partial, init],
        {**reduce.attributes, "dimensions": rest},
        like=reduce,
        suffix="rest",
    )


def split_scattered_reductions(module: Module, target: Target) -> bool:
    """Split every reduce of ``module`` whose reduced dimensions make several runs in
    memory (the module docstring); whether any was."""
    return rewrite_each(module, "reduce", lambda inserter, reduce: _split(inserter, reduce, target))


def reduction_splitter(target: Target) -> HloPass:
    """The ``reduction-splitter`` pass for ``target``."""
    return HloPass(
        "reduction-splitter",
        lambda module: split_scattered_reductions(module, target),
        "a reduce of dimensions apart in memory becomes two (XLA's ReductionSplitter)",
    )
