"""What the loop-like hero emitters share: launches over a shape, maps and small index helpers.

Concatenate, in-place dynamic-update-slice and input slices are the loop
emitter with a different iteration space (the RFC's "Emitters" section): the
threads walk the largest concatenate operand, the update, or the sliced input
instead of the output. This module computes the launch and thread map for such
a space, the map from a hero's index to a root's index through an epilogue,
and the index arithmetic (clamping, comparisons) the emitters need.

The elements per thread of every loop-like kernel (loop, concatenate,
dynamic-update-slice, and the scatter's vector) are XLA's loop unroll factor
(``ComputeLoopFusionConfig`` in ``xla/service/gpu/gpu_fusible.cc``), computed
once here by :func:`loop_unroll_factor` from the element count and the
target: 4 or 2, whichever divides the element count, once the loop has at
least as many elements as the device keeps threads resident
(``threads_per_core_limit x core_count``: 2048 x 132 = 270,336 on an H100);
then at least enough sub-byte elements to fill a byte. A vector may straddle
rows of the shape: the thread map delinearises every element exactly and the
last partial vector is bounds-checked, as in XLA.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import attrs
from mlir import ir
from mlir.dialects import arith

from heron.emitters.dialect.irdl_source import MAX_ITER_ARGS
from heron.emitters.emitter_base import EntryFunction
from heron.emitters.fusion_analysis import FusionAnalysis
from heron.hlo.errors import UnsupportedError
from heron.hlo.ir import Computation, Instruction
from heron.hlo.shapes import ArrayShape
from heron.indexing import IndexingMap, Interval, compose, input_to_output_map, simplify
from heron.indexing.affine import AffineExpr
from heron.indexing.thread_maps import (
    DEFAULT_THREADS_PER_BLOCK,
    MAX_BLOCKS_X,
    LaunchDimensions,
    fusion_vectorization_limits,
    loop_thread_to_output_map,
)
from heron.partitioner.subgraph import leaf_shapes
from heron.target import Target

__all__ = [
    "Iteration",
    "Write",
    "add_constraints",
    "chunks",
    "clamp_index",
    "epilogue_map",
    "fusion_writes",
    "index_constant",
    "loop_iteration",
    "loop_launch",
    "loop_unroll_factor",
    "resident_threads",
]

#: XLA's largest loop unroll factor (``ComputeMaxUnrollFactor``): 4, then 2.
MAX_UNROLL_FACTOR = 4


@attrs.frozen
class Iteration:
    """A loop kernel over ``shape``: its launch, elements per thread and thread map."""

    shape: ArrayShape
    launch: LaunchDimensions
    vector_size: int
    thread_map: IndexingMap


def resident_threads(target: Target) -> int:
    """Threads the device keeps resident at once: ``threads_per_core_limit x core_count``.

    Below this many elements a loop does not fill the device, so XLA gives
    each thread one element (registers are worth more than vector loads).
    """
    return target.threads_per_core_limit * target.core_count


def loop_unroll_factor(
    elements: int,
    target: Target,
    *,
    may_vectorize: bool = True,
    smallest_output_bits: int = 0,
) -> int:
    """Elements per thread of a loop over ``elements`` elements: XLA's unroll factor.

    ``ComputeLoopFusionConfig``: the largest of 4 and 2 dividing ``elements``
    when there are at least :func:`resident_threads` of them and no op of the
    fusion prevents vectorisation (``may_vectorize``, from
    ``fusion_vectorization_limits``); else 1. Then at least ``ceil(8 /
    smallest_output_bits)`` for a sub-byte output, so that one thread writes a
    whole byte (the bounds check covers an odd element count).
    """
    factor = 1
    if may_vectorize and elements >= resident_threads(target):
        factor = next(
            (f for f in (MAX_UNROLL_FACTOR, 2) if elements % f == 0),
            1,
        )
    if 0 < smallest_output_bits < 8:
        factor = max(factor, math.ceil(8 / smallest_output_bits))
    return factor


def loop_launch(elements: int, vector_size: int, target: Target) -> LaunchDimensions:
    """XLA's ``CalculateLaunchDimensions``: one thread per vector, 128-thread blocks.

    Blocks have the loop emitter's 128 threads (fewer on a target that allows
    fewer, or when there are fewer vectors); beyond what x may hold, the
    blocks grow a y dimension.
    """
    work_items = max(1, math.ceil(elements / vector_size))
    per_block = min(DEFAULT_THREADS_PER_BLOCK, target.threads_per_block_limit)
    threads = max(1, min(per_block, work_items))
    blocks = math.ceil(work_items / threads)
    block_y = math.ceil(blocks / MAX_BLOCKS_X)
    return LaunchDimensions(block_x=math.ceil(blocks / block_y), thread_x=threads, block_y=block_y)


def loop_iteration(
    shape: ArrayShape,
    computation: Computation,
    target: Target,
    *,
    vector_divisor: int | None = None,
    vector_size: int | None = None,
) -> Iteration:
    """The loop emitter's launch and thread map, but over ``shape`` instead of the output.

    The vector size is the loop unroll factor for ``shape``
    (:func:`loop_unroll_factor`: the element count, the target and the
    fusion's vectorisation blockers and narrowest output), reduced to a
    divisor of ``vector_divisor`` when given (a concatenate's vectors must not
    straddle two operands), or exactly ``vector_size`` when given. Blocks have
    the loop emitter's 128 threads, fewer on a target that allows fewer.
    """
    if shape.num_elements == 0:
        raise UnsupportedError(f"cannot launch a loop over the empty shape {shape}")
    if vector_size is None:
        _, narrowest, may_vectorize = fusion_vectorization_limits(computation)
        vector_size = loop_unroll_factor(
            shape.num_elements,
            target,
            may_vectorize=may_vectorize,
            smallest_output_bits=narrowest,
        )
        if vector_divisor is not None:
            vector_size = math.gcd(vector_size, vector_divisor)
    launch = loop_launch(shape.num_elements, vector_size, target)
    thread_map = loop_thread_to_output_map(
        shape.dims, launch, vector_size, 1, minor_to_major=shape.minor_to_major
    )
    return Iteration(shape, launch, vector_size, thread_map)


def add_constraints(
    indexing_map: IndexingMap, constraints: Sequence[tuple[AffineExpr, Interval]]
) -> IndexingMap:
    """``indexing_map`` restricted to where every ``(expr, interval)`` holds, simplified."""
    if not constraints:
        return indexing_map
    return simplify(
        attrs.evolve(indexing_map, constraints=(*indexing_map.constraints, *constraints))
    )


def epilogue_map(hero: Instruction, root: Instruction) -> IndexingMap:
    """Map from ``hero``'s index to the index of ``root`` that it produces.

    The epilogue between them must be a bijection on elements (elementwise
    ops, bitcasts, reshapes, transposes, ...): the emitter writes one root
    element per hero element, so an epilogue that broadcasts, slices or
    reduces the hero's value cannot be emitted this way and is refused.

    Every path from the hero up to the root is followed, and all must map the
    hero's index alike: the emitter injects the hero's value at one index, so a
    root reading it at two (``add(r, transpose(r))`` of a square ``r``) would
    read that one value twice, and is refused.
    """
    hero_shape = _array_shape(hero)
    identity = IndexingMap.identity(hero_shape.dims)
    if root is hero:
        return identity
    maps: dict[Instruction, IndexingMap | None] = {hero: identity}
    for inst in _operands_first(root):
        if inst in maps:
            continue
        found: IndexingMap | None = None
        for k, operand in enumerate(inst.operands):
            below = maps.get(operand)
            if below is None:
                continue
            step = input_to_output_map(inst, k)
            if step.range_vars or step.runtime_vars or step.constraints:
                raise UnsupportedError(
                    f"{inst.opcode} '{inst.name}' after the hero '{hero.name}' does not map"
                    f" each hero element to one element of '{root.name}' ({step.format()})",
                    inst.location,
                )
            through = simplify(compose(below, step))
            if found is None:
                found = through
            elif through.results != found.results:
                raise UnsupportedError(
                    f"{inst.opcode} '{inst.name}' reads the hero {hero.opcode} '{hero.name}'"
                    f" at two indices ({found.format()} and {through.format()}); its epilogue"
                    " is given the hero's value at one",
                    inst.location,
                )
        maps[inst] = found
    result = maps.get(root)
    if result is None:
        raise UnsupportedError(
            f"root '{root.name}' does not use the hero {hero.opcode} '{hero.name}'", root.location
        )
    if _array_shape(root).num_elements != hero_shape.num_elements:
        raise UnsupportedError(
            f"root '{root.name}' ({root.shape}) does not have the element count of its hero"
            f" '{hero.name}' ({hero.shape})",
            root.location,
        )
    return result


def _operands_first(root: Instruction) -> list[Instruction]:
    """``root`` and every instruction it depends on, each after its operands."""
    order: list[Instruction] = []
    seen: set[Instruction] = set()
    stack: list[tuple[Instruction, bool]] = [(root, False)]
    while stack:
        inst, expanded = stack.pop()
        if expanded:
            order.append(inst)
            continue
        if inst in seen:
            continue
        seen.add(inst)
        stack.append((inst, True))
        stack.extend((operand, False) for operand in reversed(inst.operands))
    return order


def _array_shape(inst: Instruction) -> ArrayShape:
    leaves = leaf_shapes(inst.shape)
    if len(leaves) != 1:
        raise UnsupportedError(
            f"{inst.opcode} '{inst.name}' has shape {inst.shape}; an array is needed here",
            inst.location,
        )
    return leaves[0]


@attrs.frozen
class Write:
    """One root of the fusion and the output positions (leaf indices) it fills."""

    root: Instruction
    positions: tuple[int, ...]


def fusion_writes(analysis: FusionAnalysis) -> list[Write]:
    """The fusion's roots with the output positions they fill, in order (from the analysis)."""
    return [
        Write(root, positions)
        for root, positions in zip(analysis.roots, analysis.output_positions, strict=True)
    ]


def chunks(writes: Sequence[Write], entry: EntryFunction) -> list[list[Write]]:
    """``writes`` split into groups of at most ``MAX_ITER_ARGS`` outputs (one loop each)."""
    groups: list[list[Write]] = [[]]
    count = 0
    for write in writes:
        if len(write.positions) > MAX_ITER_ARGS:
            raise entry.error(
                write.root, f"{len(write.positions)} outputs from one root exceed {MAX_ITER_ARGS}"
            )
        if count + len(write.positions) > MAX_ITER_ARGS:
            groups.append([])
            count = 0
        groups[-1].append(write)
        count += len(write.positions)
    return [group for group in groups if group]


def index_constant(value: int) -> ir.Value:
    return arith.constant(ir.IndexType.get(), value)


def clamp_index(value: ir.Value, upper: int, unsigned: bool) -> ir.Value:
    """An integer start index as an ``index`` clamped to ``[0, upper]``, as HLO specifies.

    Unsigned indices are never negative, so only the upper bound applies
    (and they are zero-extended, not sign-extended).
    """
    index_type = ir.IndexType.get()
    if unsigned:
        index = arith.index_castui(index_type, value)
        return arith.minui(index, index_constant(upper))
    index = arith.index_cast(index_type, value)
    return arith.maxsi(arith.minsi(index, index_constant(upper)), index_constant(0))
