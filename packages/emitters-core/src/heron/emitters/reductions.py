"""Reductions as hero selection sees them: collapsed to three dims, then one of four emitters.

Each function names the XLA function whose rule it mirrors (reduction_utils.cc
and the reduction emitters' factories); the rules are re-expressed, not copied.
Where XLA reads ``WarpSize(device)`` or the device's core count, these read the
target (``heron.emitters.target.Target``), so a 64-lane wavefront may
choose differently from a 32-lane warp, as XLA's ROCm backend does.

The variant's parameters are decided here, once, with the variant itself:
``ReductionDescription`` carries what the emitter needs (the collapsed
dimensions, the reduce heroes, the multi-row vector size), and the emitter
builds exactly that variant.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence

import attrs

from heron.hlo.errors import UnsupportedError
from heron.hlo.ir import Instruction
from heron.hlo.shapes import ArrayShape
from heron.target import Target

__all__ = [
    "REDUCTION_KINDS",
    "ReductionDescription",
    "ReductionDimensions",
    "is_contiguous_reduction",
    "is_real_reduction_hero",
    "reduction_dimensions",
    "reduction_is_race_free",
]

#: The kind strings of the four reduction emitters XLA chooses between.
REDUCTION_KINDS = ("reduce_row", "reduce_multirow", "reduce_column", "reduce_column_small")

#: ``MinThreadsXRowReduction`` and the row tile (``GetReductionTiling``).
MIN_THREADS_X_ROW_REDUCTION = 1024
ROW_REDUCTION_TILE_X = 16
#: ``BatchedReductionRaceFreeBound``.
BATCHED_REDUCTION_RACE_FREE_BOUND = 8
#: Column reduction tile along the reduced dim (``GetReductionTiling``).
COLUMN_REDUCTION_TILE_Y = 128
#: ``MultiRowReductionFusion``'s threads per block target.
MULTI_ROW_THREADS_PER_BLOCK = 256


@attrs.frozen
class ReductionDimensions:
    """XLA's ``ReductionDimensions``: the reduce collapsed to three dims.

    Row reduction: ``[reduced major (batch), kept, reduced minor]``. Column
    reduction: ``[kept major, reduced, kept minor]``.
    """

    is_row_reduction: bool
    dimensions: tuple[int, int, int]


@attrs.frozen(eq=False)
class ReductionDescription:
    """A reduction fusion as the chosen reduction emitter builds it.

    ``dimensions`` are every hero's collapsed dims (they agree: XLA's
    ``AreReductionsMultiOutputFusionCompatible``); ``heroes`` the distinct
    reduce heroes in root order (a root whose hero is none of them is a side
    output); ``vector_size`` the elements a thread reads along a row, decided
    with the variant for ``reduce_multirow`` (None for the other variants,
    whose emitters choose their own).
    """

    dimensions: ReductionDimensions
    heroes: tuple[Instruction, ...]
    vector_size: int | None = None

    @property
    def is_row_reduction(self) -> bool:
        return self.dimensions.is_row_reduction


def _nontrivial_order(shape: ArrayShape) -> list[int]:
    """The physical order without size-1 dimensions, which hold no data to reduce or keep.

    XLA removes them before hero selection (``ReductionDegenerateDimRemover``);
    heron has no such pass, so its reduction rules ignore them instead.
    """
    return [d for d in shape.major_to_minor if shape.dims[d] != 1]


def _consecutive(shape: ArrayShape, dims: Iterable[int]) -> bool:
    """``LayoutUtil::AreDimensionsConsecutive``: adjacent in the physical order."""
    order = _nontrivial_order(shape)
    positions = sorted(order.index(d) for d in dims)
    return all(b == a + 1 for a, b in zip(positions, positions[1:]))


def _partition(shape: ArrayShape, middle: list[int]) -> tuple[int, int, int]:
    """``PartitionShapeByMiddleDimensions``: (major, middle, minor) element counts."""
    order = _nontrivial_order(shape)
    positions = [order.index(d) for d in middle]
    first, last = min(positions), max(positions)
    major = math.prod(shape.dims[d] for d in order[:first])
    mid = math.prod(shape.dims[d] for d in order[first : last + 1])
    minor = math.prod(shape.dims[d] for d in order[last + 1 :])
    return major, mid, minor


def _kept_and_reduced(shape: ArrayShape, dimensions: Iterable[int]) -> tuple[list[int], list[int]]:
    """The kept and reduced dimensions of ``shape`` reduced over ``dimensions``, size-1
    ones left out."""
    reduced = set(dimensions)
    kept = [d for d in range(shape.rank) if d not in reduced and shape.dims[d] != 1]
    return kept, sorted(d for d in reduced if shape.dims[d] != 1)


def reduction_dimensions(reduce: Instruction) -> ReductionDimensions:
    """``GetReductionKindAndContiguousComponents``: row or column, collapsed to 3 dims."""
    if reduce.opcode != "reduce":
        raise UnsupportedError(
            f"reduction_dimensions: '{reduce.name}' is a {reduce.opcode}, not a reduce"
        )
    return _collapsed(reduce.operands[0].array_shape, reduce.attr("dimensions", ()))


def _collapsed(shape: ArrayShape, dimensions: Iterable[int]) -> ReductionDimensions:
    kept, reduced = _kept_and_reduced(shape, dimensions)
    if not kept:
        return ReductionDimensions(True, (1, 1, shape.num_elements))
    if not reduced:  # only size-1 dimensions reduced: every element is kept
        return ReductionDimensions(False, (1, 1, shape.num_elements))
    if _consecutive(shape, kept):
        major, mid, minor = _partition(shape, kept)
        if mid == 1:
            return ReductionDimensions(True, (1, 1, major * minor))
        if minor == 1:
            return ReductionDimensions(False, (1, major, mid))
        return ReductionDimensions(True, (major, mid, minor))
    major, mid, minor = _partition(shape, reduced)
    if minor == 1:
        return ReductionDimensions(True, (1, major, mid))
    return ReductionDimensions(False, (major, mid, minor))


def reduction_is_race_free(dims: ReductionDimensions, target: Target) -> bool:
    """``ReductionIsRaceFree``: one block covers the reduced extent (XLA needs no atomics)."""
    if dims.is_row_reduction:
        return (
            dims.dimensions[2] <= MIN_THREADS_X_ROW_REDUCTION * ROW_REDUCTION_TILE_X
            and dims.dimensions[0] <= BATCHED_REDUCTION_RACE_FREE_BOUND
        )
    return dims.dimensions[1] <= target.warp_size * COLUMN_REDUCTION_TILE_Y


def unnested_reduction_faster_than_elemental(dims: ReductionDimensions, target: Target) -> bool:
    """``IsUnnestedReductionFasterThanElemental``: tiny reductions stay loop fusions."""
    warp = target.warp_size
    if dims.is_row_reduction:
        return dims.dimensions[2] >= warp or warp % dims.dimensions[2] == 0
    major, minor = dims.dimensions[1], dims.dimensions[2]
    prefer_loop = (
        major < warp
        or (major < 2 * warp and minor < warp)
        or (major < 4 * warp and minor < 8)
        or (major < 8 * warp and minor < 3)
    )
    return not prefer_loop


def is_reduction_from_or_to_contiguous_dimensions(inst: Instruction, target: Target) -> bool:
    """``IsReductionFromOrToContiguousDimensions``: kept or reduced dims adjacent, not tiny.

    Whether the reduction is race free is not part of this test (XLA keeps it
    for ``IsRealReductionHero``): a reduce of every dimension to a scalar is a
    row reduction however long it is.

    A reduce of an input with zero elements is not one either: it has nothing
    to reduce (every output element is the init value, or there is no output
    element), which the loop emitter writes with no reduction plan at all.
    """
    if inst.opcode != "reduce":
        return False
    return is_contiguous_reduction(
        inst.operands[0].array_shape, inst.attr("dimensions", ()), target
    )


def is_contiguous_reduction(shape: ArrayShape, dimensions: Iterable[int], target: Target) -> bool:
    """:func:`is_reduction_from_or_to_contiguous_dimensions` of an operand of ``shape``
    reduced over ``dimensions``: asked of a reduce before it is made (the reduction
    splitter's first half)."""
    if shape.num_elements == 0:
        return False
    kept, reduced = _kept_and_reduced(shape, dimensions)
    if not (_consecutive(shape, kept) or _consecutive(shape, reduced)):
        return False
    return unnested_reduction_faster_than_elemental(_collapsed(shape, dimensions), target)


def is_real_reduction_hero(root: Instruction, hero: Instruction, target: Target) -> bool:
    """``IsRealReductionHero``: a reduce hero the reduction emitters handle.

    A reduce that is its own root always is; one with an epilogue only when
    race free (XLA's emitters could not otherwise write the epilogue once).
    heron's reduction emitters give every output element to one block and walk
    a long reduced extent with more iterations, so a root reduce that XLA would
    first split (its tree-reduction rewrite) is emitted whole.
    """
    if not is_reduction_from_or_to_contiguous_dimensions(hero, target):
        return False
    return root is hero or reduction_is_race_free(reduction_dimensions(hero), target)


def _multi_row_blocks(dims: ReductionDimensions, vector: int) -> int:
    """``MultiRowReductionFusion::GetNumBlocks`` with its thread split."""
    reduced_threads = dims.dimensions[2] // vector
    kept = dims.dimensions[1]
    target = MULTI_ROW_THREADS_PER_BLOCK
    kept_threads = kept if kept * reduced_threads <= target else target // reduced_threads
    return -(-kept // max(kept_threads, 1))


def multi_row_vector_size(
    dims: ReductionDimensions,
    in_bits: int,
    out_bits: int,
    heroes: Sequence[Instruction],
    target: Target,
) -> int | None:
    """``MultiRowReductionFusion::TryCreate``: the vector size, or None for the row emitter.

    Rows must have a power-of-two length that fits one warp of vectors; the
    vector shrinks until every core gets a block (however few blocks that
    leaves: f64[4] -> f64[] is one block of 4 threads). A variadic reduce is
    never multi-row: XLA 0.12 gives it the row emitter (measured with ``heron
    xla``: (f32, f32) reduces of f32[3,2] and f32[4096,4] rows launch 1x96 and
    512x256, where the same plain reduces launch 1x6 and 64x256).
    """
    row = dims.dimensions[2]
    if row & (row - 1) or any(h.shape.is_tuple for h in heroes):
        return None
    smallest, largest = min(in_bits, out_bits), max(in_bits, out_bits)
    vector = min(row, max(1, 64 // smallest))
    if largest >= 32:
        vector = min(max(1, 128 // largest), vector)
    vector = 1 << (vector.bit_length() - 1)  # a power of two: rows are
    warp = target.warp_size
    if row > warp * vector:
        return None
    while vector > 1 and _multi_row_blocks(dims, vector) < target.core_count:
        vector //= 2
    if row > warp * vector:
        return None
    return vector


def _smallest_bits(insts: Sequence[Instruction]) -> int:
    """``smallest_input_dtype_bits`` / ``smallest_output_dtype_bits`` (a large value if none)."""
    bits = [leaf.element_type.bit_width for i in insts for leaf in i.shape.leaves()]
    return min(bits, default=1 << 30)


def describe_reduction(
    roots: Sequence[Instruction],
    heroes: Sequence[Instruction],
    inputs: Sequence[Instruction],
    target: Target,
) -> tuple[str, ReductionDescription] | None:
    """The reduction branch of ``GetEmitterFusionKind`` and ``CreateReductionFusion``.

    None when the fusion is not a reduction fusion: no real reduction hero, or
    roots that cannot share its loop (another reduction shape, or a side output
    with another element count than the reduce input). Otherwise the variant:
    multi-row when ``multi_row_vector_size`` allows, else row; small column
    when the kept minor dim divides the warp (``CreateReductionFusion``: a
    kept minor dim of 4 is a small column too, 32 reduced rows of 4 in one
    128-thread block), else column.
    """
    real = [is_real_reduction_hero(r, h, target) for r, h in zip(roots, heroes, strict=True)]
    if not any(real):
        return None
    first = heroes[real.index(True)]
    dims = reduction_dimensions(first)
    elements = first.operands[0].array_shape.num_elements
    unique: list[Instruction] = []
    for root, hero, is_real in zip(roots, heroes, real, strict=True):
        if not is_real:
            if root.array_shape.num_elements != elements:
                return None
        elif reduction_dimensions(hero) != dims:  # AreReductionsMultiOutputFusionCompatible
            return None
        elif not any(hero is u for u in unique):
            unique.append(hero)
    if dims.is_row_reduction:
        vector = multi_row_vector_size(
            dims, _smallest_bits(inputs), _smallest_bits(roots), unique, target
        )
        if vector is not None:
            return "reduce_multirow", ReductionDescription(dims, tuple(unique), vector)
        return "reduce_row", ReductionDescription(dims, tuple(unique))
    minor = dims.dimensions[2]
    kind = "reduce_column_small" if target.warp_size % minor == 0 else "reduce_column"
    return kind, ReductionDescription(dims, tuple(unique))
