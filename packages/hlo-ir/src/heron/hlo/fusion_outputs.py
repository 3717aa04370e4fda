"""A fused computation's roots and the outputs each fills: the one definition.

A fusion's *roots* are its root tuple's operands, or its root itself when
that is no tuple. A fusion's *outputs* are the array leaves of its result, in
XLA's flattening order; a root fills one output, or one per leaf when it has
a tuple shape (a variadic reduce, sort or scatter as a root). Everything that
walks a fusion from its outputs asks here: the partitioner and the emitters'
fusion analysis (``heron.partitioner.regions.fusion_roots`` re-exports
``fusion_roots``), the fusion passes' cost model and budget, the fusion
indexing maps, buffer assignment's in-place fusions and the check's
tolerance. It lives in heron.hlo because those below the partitioner
(heron.indexing, heron.hlo.buffers) need it too.
"""

from __future__ import annotations

from heron.hlo.ir import Computation, Instruction

__all__ = ["OUTPUTS_WRITTEN_TOGETHER", "fusion_roots", "output_positions", "output_roots"]

#: The most outputs a loop fusion's kernel computes and writes in one pass over its
#: elements. The loop emitter (``heron.plugins.loop``) computes every root of an element
#: before it stores any of them, for fusions of at most this many outputs (more are
#: split over several loops), so such a fusion may write an output over an input that
#: other roots read element by element: copy insertion relies on it for donated buffers
#: (``heron.hlo.passes.copy_insertion``), as XLA's loop emitter allows its in-place
#: multi-output fusions.
OUTPUTS_WRITTEN_TOGETHER = 16


def fusion_roots(computation: Computation) -> tuple[Instruction, ...]:
    """The roots of a fused computation: the root tuple's operands, else the root itself.

    An instruction listed twice in the root tuple is two roots: each is an
    output. A root of tuple shape (a variadic reduce) is one root filling
    several outputs (:func:`output_positions`).
    """
    root = computation.root_instruction
    return tuple(root.operands) if root.opcode == "tuple" else (root,)


def output_positions(roots: tuple[Instruction, ...]) -> tuple[tuple[int, ...], ...]:
    """For each root, the indices of the fusion outputs (array leaves) it fills, in order.

    A root of tuple shape (a variadic reduce) fills one output per leaf.
    """
    positions: list[tuple[int, ...]] = []
    start = 0
    for root in roots:
        count = sum(1 for _ in root.shape.leaves())
        positions.append(tuple(range(start, start + count)))
        start += count
    return tuple(positions)


def output_roots(computation: Computation) -> tuple[Instruction, ...]:
    """The root that fills each output of a fused computation, one entry per output.

    A root of tuple shape appears once per leaf it fills; its ``k``-th
    appearance is its result ``k``.
    """
    roots = fusion_roots(computation)
    return tuple(root for root, positions in zip(roots, output_positions(roots)) for _ in positions)
