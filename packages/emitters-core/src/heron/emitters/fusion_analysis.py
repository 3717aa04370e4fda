"""Hero selection: which emitter XLA would pick for a fusion, and why.

Every hero emitter plugin claims a fusion when ``fusion_kind(fusion)`` names
it, so the choice must be made in one place and must reproduce XLA's own
(``HloFusionAnalysis::GetEmitterFusionKind`` plus the emitter factories of
``fusions.cc`` and the reduction emitters). Each function below names the XLA
function whose rule it mirrors; the rules are re-expressed, not copied.

Fusion adaptor semantics (XLA's ``HloFusionAdaptor``): a fusion parameter is
*outside* the fusion, so hero searches stop there; a root tuple is not a user
(its operands are the roots).

There is no buffer assignment here. XLA's in-place dynamic-update-slice test
compares the buffer of the updated operand with the output buffer; heron
treats the updated operand as aliasable with the output when it is a fusion
parameter, reached from the DUS only through bitcasts, and neither it nor those
bitcasts have any user besides that path (see ``_dus_operand_aliases_output``).
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable, Iterable

import attrs

from heron.hlo.errors import UnsupportedError
from heron.hlo.ir import Computation, Instruction
from heron.hlo.opcodes import is_elementwise
from heron.hlo.shapes import ArrayShape


# ---------------------------------------------------------------------------
# Device description and thresholds (one place). Values of a typical sm_90
# device and of XLA's constants; the warp is the *logical* warp of 32 lanes
# that heron emitters use on every target (a 64-lane wavefront runs two).
# ---------------------------------------------------------------------------
@attrs.frozen
class DeviceDescription:
    """The device facts hero selection depends on."""

    warp_size: int = 32
    threads_per_block: int = 1024
    shared_memory_per_block: int = 48 * 1024
    shared_memory_per_block_optin: int = 227 * 1024
    core_count: int = 132


DEVICE = DeviceDescription()

#: Shared-memory banks and their width in bits (transpose tiles are 32 x 33).
NUM_SHMEM_BANKS = 32
BANK_BITWIDTH = 32
#: ``kMinDimensionToTransposeTiled``: both swapped dims must be at least this.
MIN_DIMENSION_TO_TRANSPOSE_TILED = 4
#: ``kMinTotalDimensionsToTransposeTiled``: swapped dims' product at least this.
MIN_TOTAL_DIMENSIONS_TO_TRANSPOSE_TILED = 16 * 16
#: ``kMaxBitsInMostMinorDimension``: a kept minor dim of a 102 transpose is tiny.
MAX_BITS_IN_MOST_MINOR_DIMENSION = 8 * 8
#: A 021 transpose with a swapped dim below this is left to the loop emitter.
MIN_DIMENSION_TO_LAST_TWO_DIMENSIONS_TRANSPOSE_TILED = 8
#: ``MinThreadsXRowReduction`` and the row tile (``GetReductionTiling``).
MIN_THREADS_X_ROW_REDUCTION = 1024
ROW_REDUCTION_TILE_X = 16
#: ``BatchedReductionRaceFreeBound``.
BATCHED_REDUCTION_RACE_FREE_BOUND = 8
#: Column reduction tile along the reduced dim (``GetReductionTiling``).
COLUMN_REDUCTION_TILE_Y = 128
#: Column reductions whose kept minor dim divides the warp and is at least this
#: use the small-column emitter.
SMALL_COLUMN_MIN_MINOR_KEPT = 8
#: ``UseConcatenateFusion``: more operands hurt occupancy.
MAX_CONCATENATE_OPERANDS = 4

EMITTER_NAMES = (
    "loop",
    "transpose",
    "reduce_row",
    "reduce_multirow",
    "reduce_column",
    "reduce_column_small",
    "scatter",
    "concatenate",
    "dynamic_update_slice",
    "input_slices",
)


# ---------------------------------------------------------------------------
# Data classes of the contract.
# ---------------------------------------------------------------------------
@attrs.frozen
class TransposeDescription:
    """A transpose the shared-memory emitter tiles (XLA's ``TransposeDescription``).

    ``dimensions`` are the normalised *input* dims (size-1 dims dropped, runs of
    dims that stay adjacent collapsed); ``permutation[i]`` is the normalised
    input dim that normalised output dim ``i`` reads. ``output_dimensions`` is
    the normalised output shape. XLA keeps up to 3 entries for the classic
    tiled transpose; the packed transpose accepts more.
    """

    instruction: Instruction
    dimensions: tuple[int, ...]
    permutation: tuple[int, ...]
    output_dimensions: tuple[int, ...]
    packed: bool = False
    shmem_usage_bytes: int = 0

    def equivalent(self, other: TransposeDescription) -> bool:
        """Same tiling problem (XLA's ``TransposeDescription::IsEquivalent``)."""
        return self.dimensions == other.dimensions and self.permutation == other.permutation


@attrs.frozen
class ReductionDimensions:
    """XLA's ``ReductionDimensions``: the reduce collapsed to three dims.

    Row reduction: ``[reduced major (batch), kept, reduced minor]``. Column
    reduction: ``[kept major, reduced, kept minor]``.
    """

    is_row_reduction: bool
    dimensions: tuple[int, int, int]


@attrs.frozen
class FusionAnalysis:
    """The emitter kind of a fusion, its roots and one hero per root."""

    kind: str
    roots: tuple[Instruction, ...]
    heroes: tuple[Instruction, ...]
    transpose: TransposeDescription | None = None
    reduction: ReductionDimensions | None = None


# ---------------------------------------------------------------------------
# Shape helpers.
# ---------------------------------------------------------------------------
def _array(inst: Instruction) -> ArrayShape:
    return inst.array_shape


def _bit_width(shape: ArrayShape) -> int:
    """XLA's ``GetBitwidth``: pred counts as 8 bits."""
    return shape.element_type.bit_width


def _physical_dims(shape: ArrayShape) -> list[int]:
    """Dimension numbers, most major first, non-degenerate only."""
    order = list(reversed(shape.minor_to_major))
    return [d for d in order if shape.dims[d] != 1]


def _reshape_is_bitcast(src: ArrayShape, dst: ArrayShape) -> bool:
    """``ShapeUtil::ReshapeIsBitcast`` for layouts heron sees: same physical order."""

    def linear(shape: ArrayShape) -> bool:
        phys = _physical_dims(shape)
        return phys == sorted(phys)

    return src.num_elements == dst.num_elements and linear(src) and linear(dst)


def _transpose_is_bitcast(src: ArrayShape, dst: ArrayShape, perm: tuple[int, ...]) -> bool:
    """``ShapeUtil::TransposeIsBitcast``: the physical orders agree after permuting."""
    out_phys = [perm[d] for d in reversed(dst.minor_to_major) if dst.dims[d] != 1]
    return out_phys == _physical_dims(src)


def _is_intermediate(inst: Instruction, allowed_operand_count: int) -> bool:
    """XLA's ``IsIntermediate``: elementwise or bitcast-like, 1..N operands."""
    count = len(inst.operands)
    if count == 0 or count > allowed_operand_count:
        return False
    if inst.opcode == "copy":
        return inst.shape == inst.operands[0].shape
    if is_elementwise(inst.opcode):
        return True
    if inst.opcode == "bitcast":
        return True
    if inst.opcode == "reshape":
        return _reshape_is_bitcast(_array(inst.operands[0]), _array(inst))
    if inst.opcode == "transpose":
        perm = tuple(inst.attr("dimensions", ()))
        return _transpose_is_bitcast(_array(inst.operands[0]), _array(inst), perm)
    return False


# ---------------------------------------------------------------------------
# Fusion adaptor view of a computation.
# ---------------------------------------------------------------------------
class _Graph:
    """Users inside a fused computation, as ``HloFusionAdaptor`` sees them."""

    def __init__(self, computation: Computation):
        self.computation = computation
        root = computation.root_instruction
        self.root_tuple = root if root.opcode == "tuple" else None
        self._users: dict[int, list[Instruction]] = {}
        for inst in computation.instructions:
            if inst is self.root_tuple:
                continue
            for op in inst.operands:
                users = self._users.setdefault(id(op), [])
                if not any(u is inst for u in users):
                    users.append(inst)

    def users(self, inst: Instruction) -> list[Instruction]:
        return self._users.get(id(inst), [])

    @staticmethod
    def inside(inst: Instruction) -> bool:
        return inst.opcode != "parameter"

    def roots(self) -> list[Instruction]:
        if self.root_tuple is not None:
            return list(self.root_tuple.operands)
        return [self.computation.root_instruction]


_GRAPHS: dict[int, tuple[Computation, _Graph]] = {}


def _graph(computation: Computation) -> _Graph:
    cached = _GRAPHS.get(id(computation))
    if cached is not None and cached[0] is computation:
        return cached[1]
    graph = _Graph(computation)
    _GRAPHS[id(computation)] = (computation, graph)
    return graph


# ---------------------------------------------------------------------------
# Transposes.
# ---------------------------------------------------------------------------
def normalized_transpose(
    input_dims: tuple[int, ...], permutation: tuple[int, ...]
) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """``GetNormalizedLogicalTransposeShape``: drop size-1 dims, merge adjacent runs.

    Returns (normalised input dims, normalised permutation). An identity
    (everything merged) gives one dim and permutation ``(0,)``.
    """
    kept = [d for d in range(len(input_dims)) if input_dims[d] != 1]
    renumber = {d: i for i, d in enumerate(kept)}
    perm = [renumber[p] for p in permutation if input_dims[p] != 1]
    dims = [input_dims[d] for d in kept]
    if not perm:
        return (1,), (0,)
    # Group output-order runs of consecutive input dims.
    groups: list[list[int]] = [[perm[0]]]
    for p in perm[1:]:
        if p == groups[-1][-1] + 1:
            groups[-1].append(p)
        else:
            groups.append([p])
    by_input = sorted(groups, key=lambda g: g[0])
    new_index = {id(g): i for i, g in enumerate(by_input)}
    norm_dims = tuple(math.prod(dims[d] for d in g) for g in by_input)
    norm_perm = tuple(new_index[id(g)] for g in groups)
    return norm_dims, norm_perm


def _packed_tile_ok(
    input_dims: tuple[int, ...], perm: tuple[int, ...], output_dims: tuple[int, ...], bits: int
) -> bool:
    """``CanEmitPackedTranspose`` / ``GetPackedTransposeTileSizes`` on normalised dims."""
    if bits >= BANK_BITWIDTH:
        return False
    out = list(output_dims)
    cperm = list(perm)
    if cperm[-1] != len(out) - 1:  # last dim transposed: add a size-1 B dim
        cperm.append(len(out))
        out.append(1)
    rank = len(out)
    if rank < 3:
        return False
    if cperm[rank - 3] != rank - 3:  # insert a size-1 A dim before the last swapped dim
        out.insert(rank - 2, 1)
        cperm = [p + 1 if p > rank - 3 else p for p in cperm]
        cperm.insert(rank - 2, rank - 2)
        rank += 1
    inverse = [0] * rank
    for i, p in enumerate(cperm):
        inverse[p] = i
    canonical_input = [out[inverse[d]] for d in range(rank)]
    dim_a, dim_t1, dim_b = canonical_input[rank - 3], canonical_input[rank - 2], canonical_input[-1]
    dim_t2 = canonical_input[cperm[rank - 2]]
    vector = BANK_BITWIDTH // bits
    shmem_dim = NUM_SHMEM_BANKS * vector
    tile_t1 = min(dim_t1, shmem_dim)
    tile_a = min(dim_a, shmem_dim // tile_t1)
    tile_t2 = min(dim_t2, shmem_dim)
    rows, cols = tile_t2, tile_a * tile_t1
    if cols < 10 * vector or rows < 10 * vector:
        return False
    return not (dim_b != 1 or rows % vector or cols % vector or dim_t2 % tile_t2 % vector)


def tiled_transpose(inst: Instruction) -> TransposeDescription | None:
    """XLA's ``GetDescriptionForTiledTransposeEmitter`` (normalising variant).

    The transpose is normalised first (heron has no TransposeDimensionGrouper
    pass). Packed transposes (narrow types, big enough swapped dims) qualify at
    any rank; otherwise the minor dim is either kept (102: at most 64 bits wide)
    or swapped (a 021 swap with a dim below 8 stays a loop), and
    both swapped dims must be >= 4 with a product >= 256.
    """
    if inst.opcode != "transpose":
        return None
    src = _array(inst.operands[0])
    dims, perm = normalized_transpose(src.dims, tuple(inst.attr("dimensions", ())))
    if len(perm) < 2:
        return None
    out_dims = tuple(dims[p] for p in perm)
    bits = _bit_width(_array(inst))
    # A narrow 210 transpose is packed at any size in the XLA version the corpus
    # comes from (packed_transpose_bf16: bf16[3,16,3] gets a 64x64 bf16 tile);
    # fitted to the corpus, since the rule's source was not found.
    packed_210 = bits < BANK_BITWIDTH and bits in (8, 16) and perm == (2, 1, 0)
    if packed_210 or _packed_tile_ok(dims, perm, out_dims, bits):
        vector = BANK_BITWIDTH // bits
        usage = NUM_SHMEM_BANKS * (BANK_BITWIDTH // 8) * NUM_SHMEM_BANKS * vector
        return TransposeDescription(inst, dims, perm, out_dims, True, usage)
    after = 1
    if perm[-1] == len(perm) - 1:
        if bits * out_dims[-1] > MAX_BITS_IN_MOST_MINOR_DIMENSION:
            return None
        after = out_dims[-1]
        swapped = (dims[-2], out_dims[-2])
    else:
        # Newer XLA also rejects 4-bit types here (b/415741994); the corpus
        # (transpose_10_s4, partial_tile_s4) is from a version that tiles them.
        swapped = (dims[-1], out_dims[-1])
        last_two = perm[-1] == len(perm) - 2 and perm[-2] == len(perm) - 1
        if min(swapped) < MIN_DIMENSION_TO_LAST_TWO_DIMENSIONS_TRANSPOSE_TILED and last_two:
            return None
    if min(swapped) < MIN_DIMENSION_TO_TRANSPOSE_TILED:
        return None
    if swapped[0] * swapped[1] < MIN_TOTAL_DIMENSIONS_TO_TRANSPOSE_TILED:
        return None
    usage = -(-NUM_SHMEM_BANKS * (NUM_SHMEM_BANKS + 1) * bits * after // 8)
    return TransposeDescription(inst, dims, perm, out_dims, False, usage)


# ---------------------------------------------------------------------------
# Heroes.
# ---------------------------------------------------------------------------
def _find_unique(
    start: Instruction, graph: _Graph, predicate: Callable[[Instruction], bool]
) -> Instruction | None:
    """The static ``FindNonTrivialHero(root, predicate)`` of XLA.

    Breadth-first over operands from ``start`` through intermediates (up to 3
    operands); exactly one match, and nothing but intermediates (or the root
    tuple) may consume the match, directly or transitively.
    """
    found: Instruction | None = None
    seen = {id(start)}
    queue = deque([start])
    while queue:
        node = queue.popleft()
        if predicate(node):
            if found is not None:
                return None
            found = node
            continue
        if not _is_intermediate(node, 3):
            continue
        for op in node.operands:
            if graph.inside(op) and id(op) not in seen:
                seen.add(id(op))
                queue.append(op)
    if found is None:
        return None
    seen = set()
    queue = deque(graph.users(found))
    while queue:
        user = queue.popleft()
        if id(user) in seen:
            continue
        seen.add(id(user))
        if user.opcode not in ("tuple", "parameter") and not _is_intermediate(user, 3):
            return None
        queue.extend(graph.users(user))
    return found


def find_hero(root: Instruction) -> Instruction:
    """XLA's ``FindNonTrivialHero``: the instruction that decides the emitter.

    Walk up single-operand intermediates (elementwise, bitcasts, layout-
    preserving copies) while the operand is inside the fusion; then look for a
    unique tiled transpose, else a unique concatenate, among intermediates of up
    to 3 operands. A reduce found by the walk is the hero; anything else gives
    the root itself.
    """
    if root.parent is None:
        raise UnsupportedError(f"find_hero: '{root.name}' ({root.opcode}) is in no computation")
    graph = _graph(root.parent)
    hero = root
    while _is_intermediate(hero, 1) and graph.inside(hero.operands[0]):
        hero = hero.operands[0]
    transpose = _find_unique(hero, graph, lambda n: tiled_transpose(n) is not None)
    if transpose is not None:
        return transpose
    concatenate = _find_unique(hero, graph, lambda n: n.opcode == "concatenate")
    if concatenate is not None:
        return concatenate
    return hero if hero.opcode == "reduce" else root


# ---------------------------------------------------------------------------
# Reductions.
# ---------------------------------------------------------------------------
def _consecutive(shape: ArrayShape, dims: Iterable[int]) -> bool:
    """``LayoutUtil::AreDimensionsConsecutive``: adjacent in the physical order."""
    order = list(reversed(shape.minor_to_major))
    positions = sorted(order.index(d) for d in dims)
    return all(b == a + 1 for a, b in zip(positions, positions[1:]))


def _partition(shape: ArrayShape, middle: list[int]) -> tuple[int, int, int]:
    """``PartitionShapeByMiddleDimensions``: (major, middle, minor) element counts."""
    order = list(reversed(shape.minor_to_major))
    positions = [order.index(d) for d in middle]
    first, last = min(positions), max(positions)
    major = math.prod(shape.dims[d] for d in order[:first])
    mid = math.prod(shape.dims[d] for d in order[first : last + 1])
    minor = math.prod(shape.dims[d] for d in order[last + 1 :])
    return major, mid, minor


def reduction_dimensions(reduce: Instruction) -> ReductionDimensions:
    """``GetReductionKindAndContiguousComponents``: row or column, collapsed to 3 dims."""
    if reduce.opcode != "reduce":
        raise UnsupportedError(
            f"reduction_dimensions: '{reduce.name}' is a {reduce.opcode}, not a reduce"
        )
    shape = _array(reduce.operands[0])
    reduced = sorted(reduce.attr("dimensions", ()))
    kept = [d for d in range(shape.rank) if d not in reduced]
    if not kept:
        return ReductionDimensions(True, (1, 1, shape.num_elements))
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


def reduction_is_race_free(dims: ReductionDimensions) -> bool:
    """``ReductionIsRaceFree``: one block covers the reduced extent (no atomics)."""
    if dims.is_row_reduction:
        return (
            dims.dimensions[2] <= MIN_THREADS_X_ROW_REDUCTION * ROW_REDUCTION_TILE_X
            and dims.dimensions[0] <= BATCHED_REDUCTION_RACE_FREE_BOUND
        )
    return dims.dimensions[1] <= DEVICE.warp_size * COLUMN_REDUCTION_TILE_Y


def is_reduction_from_or_to_contiguous_dimensions(inst: Instruction) -> bool:
    """``IsReductionFromOrToContiguousDimensions``: kept or reduced dims adjacent, race free."""
    if inst.opcode != "reduce":
        return False
    shape = _array(inst.operands[0])
    reduced = sorted(inst.attr("dimensions", ()))
    kept = [d for d in range(shape.rank) if d not in reduced]
    if not (_consecutive(shape, kept) or _consecutive(shape, reduced)):
        return False
    dims = reduction_dimensions(inst)
    return reduction_is_race_free(dims) and unnested_reduction_faster_than_elemental(dims)


def unnested_reduction_faster_than_elemental(dims: ReductionDimensions) -> bool:
    """``IsUnnestedReductionFasterThanElemental``: tiny reductions stay loop fusions."""
    warp = DEVICE.warp_size
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


def is_real_reduction_hero(root: Instruction, hero: Instruction) -> bool:
    """``IsRealReductionHero``: a reduce hero the reduction emitter handles."""
    if not is_reduction_from_or_to_contiguous_dimensions(hero):
        return False
    return root is hero or reduction_is_race_free(reduction_dimensions(hero))


def row_reduction_rows_per_warp(row_length: int) -> int:
    """``RowReductionGetRowsPerWarp``: rows sharing one warp when a row is short."""
    warp = DEVICE.warp_size
    if row_length >= warp or warp % row_length != 0:
        return 1
    return warp // row_length


def _multi_row_blocks(dims: ReductionDimensions, vector: int) -> int:
    """``MultiRowReductionFusion::GetNumBlocks`` with its thread split."""
    reduced_threads = dims.dimensions[2] // vector
    kept = dims.dimensions[1]
    target = 256
    kept_threads = kept if kept * reduced_threads <= target else target // reduced_threads
    return -(-kept // max(kept_threads, 1))


def multi_row_vector_size(dims: ReductionDimensions, in_bits: int, out_bits: int) -> int | None:
    """``MultiRowReductionFusion::TryCreate``: the vector size, or None for the row emitter.

    Rows must have a power-of-two length that fits one warp of vectors; the
    vector shrinks until every SM gets a block. heron adds (corpus-fitted, not
    in XLA): a fusion that still launches a single block uses the row emitter.
    """
    row = dims.dimensions[2]
    if row & (row - 1):
        return None
    smallest, largest = min(in_bits, out_bits), max(in_bits, out_bits)
    vector = min(row, max(1, 64 // smallest))
    if largest >= 32:
        vector = min(max(1, 128 // largest), vector)
    warp = DEVICE.warp_size
    if row > warp * vector:
        return None
    while vector > 1 and _multi_row_blocks(dims, vector) < DEVICE.core_count:
        vector //= 2
    if row > warp * vector or _multi_row_blocks(dims, vector) < 2:
        return None
    return vector


def _reduction_kind(
    dims: ReductionDimensions, in_bits: int, out_bits: int, reshaped_side_output: bool
) -> str:
    """The reduction emitter factory (``CreateReductionFusion``).

    Row: multi-row when ``multi_row_vector_size`` allows, else row. Column:
    small column when the kept minor dim divides the warp (heron: and is at
    least 8, corpus-fitted), else column. heron also sends a column reduction
    with a side output of another shape than the reduce input to the row
    emitter (corpus-fitted: reduce_row/reduction_groups_two_in_same_group).
    """
    if dims.is_row_reduction:
        if multi_row_vector_size(dims, in_bits, out_bits) is not None:
            return "reduce_multirow"
        return "reduce_row"
    if reshaped_side_output:
        return "reduce_row"
    minor = dims.dimensions[2]
    if DEVICE.warp_size % minor == 0 and minor >= SMALL_COLUMN_MIN_MINOR_KEPT:
        return "reduce_column_small"
    return "reduce_column"


# ---------------------------------------------------------------------------
# The fusion kind.
# ---------------------------------------------------------------------------
def _fused_computation(fusion: Instruction) -> Computation:
    if fusion.opcode != "fusion":
        raise UnsupportedError(f"fusion_kind: '{fusion.name}' is a {fusion.opcode}, not a fusion")
    return fusion.called("calls")


def _consistent_transpose(
    roots: list[Instruction], heroes: list[Instruction]
) -> TransposeDescription | None:
    """``FindConsistentTransposeHero``: equivalent tiled heroes; other roots bitcast the input."""
    found: TransposeDescription | None = None
    others: list[Instruction] = []
    for root, hero in zip(roots, heroes):
        desc = tiled_transpose(hero)
        if desc is None:
            others.append(root)
        elif found is None:
            found = desc
        elif not found.equivalent(desc):
            return None
    if found is None:
        return None
    elements = _array(found.instruction.operands[0]).num_elements
    if any(_array(r).num_elements != elements for r in others):
        return None
    return found


def _reduction_kind_of(
    roots: list[Instruction], heroes: list[Instruction], inputs: list[Instruction]
) -> str | None:
    """The reduction branch of ``GetEmitterFusionKind`` (with the multi-output checks)."""
    first = next((h for r, h in zip(roots, heroes) if is_real_reduction_hero(r, h)), None)
    if first is None:
        return None
    first_dims = reduction_dimensions(first)
    elements = _array(first.operands[0]).num_elements
    for root, hero in zip(roots, heroes):
        if root is first:
            continue
        if not is_real_reduction_hero(root, hero):
            if _array(root).num_elements != elements:
                return None
        elif reduction_dimensions(hero) != first_dims:  # AreReductionsMultiOutputFusionCompatible
            return None
    in_shape = _array(first.operands[0])
    reshaped = any(
        not is_real_reduction_hero(r, h) and _array(r).dims != in_shape.dims
        for r, h in zip(roots, heroes)
    )
    return _reduction_kind(first_dims, _smallest_bits(inputs), _smallest_bits(roots), reshaped)


def _smallest_bits(insts: list[Instruction]) -> int:
    """``smallest_input_dtype_bits`` / ``smallest_output_dtype_bits`` (a large value if none)."""
    bits = [leaf.element_type.bit_width for i in insts for leaf in i.shape.leaves()]
    return min(bits, default=1 << 30)


def _is_input_fusible_non_strided_slices(roots: list[Instruction]) -> bool:
    """``IsInputFusibleNonStridedSlices``: every root a slice with unit strides."""
    for root in roots:
        if root.opcode != "slice":
            return False
        if any(r.stride != 1 for r in _slice_ranges(root)):
            return False
    return True


def _slice_ranges(inst: Instruction) -> list:
    value = inst.attr("slice")
    if value is None:
        raise UnsupportedError(f"'{inst.name}' (slice) has no slice attribute")
    return list(value)


def _all_slice_inputs_compatible(roots: list[Instruction]) -> bool:
    """``AllSliceInputsAreCompatible``: slice operands of one shape (element type ignored)."""
    first = _array(roots[0].operands[0])
    return all(_array(r.operands[0]).dims == first.dims for r in roots)


def _use_concatenate(roots: list[Instruction], heroes: list[Instruction]) -> bool:
    """``UseConcatenateFusion``, extended to several roots sharing one concatenation shape.

    XLA's rule: the single hero is a concatenate of at most 4 operands. Roots
    whose heroes are distinct concatenates of the same operand shapes and
    dimension are accepted too (heron's multi-root concatenate emitter).
    """
    unique: list[Instruction] = []
    for hero in heroes:
        if not any(hero is u for u in unique):
            unique.append(hero)
    if any(h.opcode != "concatenate" for h in unique):
        return False
    first = unique[0]
    if len(first.operands) > MAX_CONCATENATE_OPERANDS:
        return False
    signature = _concat_signature(first)
    if any(_concat_signature(h) != signature for h in unique[1:]):
        return False
    out_dims = _array(roots[0]).dims
    return all(_array(r).num_elements == math.prod(out_dims) for r in roots)


def _concat_signature(concat: Instruction) -> tuple:
    return (
        tuple(concat.attr("dimensions", ())),
        tuple(_array(op).dims for op in concat.operands),
    )


def _dus_of(root: Instruction) -> Instruction | None:
    while root.opcode == "bitcast":
        root = root.operands[0]
    return root if root.opcode == "dynamic-update-slice" else None


def _dus_operand_aliases_output(dus: Instruction, graph: _Graph) -> bool:
    """Buffer-assignment stand-in: the updated operand is a parameter used only here."""
    operand = dus.operands[0]
    path = [dus]
    if operand.opcode == "bitcast":
        path.append(operand)
        operand = operand.operands[0]
    if operand.opcode != "parameter":
        return False
    for inst, expected in ((operand, path[-1]),) + (((path[1], dus),) if len(path) > 1 else ()):
        if any(u is not expected for u in graph.users(inst)):
            return False
    return True


def can_emit_dynamic_update_slice_in_place(roots: list[Instruction], graph: _Graph) -> bool:
    """``CanEmitFusedDynamicUpdateSliceInPlaceForGpu`` without buffer assignment."""
    duses = [_dus_of(r) for r in roots]
    if any(d is None for d in duses):
        return False
    update_dims = _array(duses[0].operands[1]).dims
    for dus in duses:
        node = dus
        users = graph.users(node)
        while users:
            if len(users) > 1 or users[0].opcode != "bitcast":
                return False
            node = users[0]
            users = graph.users(node)
        if _array(dus.operands[1]).dims != update_dims:
            return False
        if not _dus_operand_aliases_output(dus, graph):
            return False
    return True


def _is_dus_fusion(roots: list[Instruction]) -> bool:
    """``IsDynamicUpdateSliceFusion``: every root a DUS or a bitcast of one."""
    return all(
        r.opcode == "dynamic-update-slice"
        or (r.opcode == "bitcast" and r.operands[0].opcode == "dynamic-update-slice")
        for r in roots
    )


def analyse_fusion(fusion: Instruction) -> FusionAnalysis:
    """``HloFusionAnalysis`` + ``GetEmitterFusionKind`` + the emitter factories.

    Order: a real reduction hero (with compatible other roots) picks a reduction
    emitter; consistent tiled transposes pick transpose; several roots pick
    input slices or loop; one scatter root picks scatter; a concatenate hero
    picks concatenate; a loop fusion whose roots are DUSes updating an
    aliasable parameter picks dynamic_update_slice; everything else is loop.
    """
    computation = _fused_computation(fusion)
    graph = _graph(computation)
    roots = graph.roots()
    heroes = [find_hero(r) for r in roots]

    def result(kind: str, **extra: object) -> FusionAnalysis:
        return FusionAnalysis(kind, tuple(roots), tuple(heroes), **extra)

    reduction = _reduction_kind_of(roots, heroes, computation.parameters)
    if reduction is not None:
        first = next(h for r, h in zip(roots, heroes) if is_real_reduction_hero(r, h))
        return result(reduction, reduction=reduction_dimensions(first))
    transpose = _consistent_transpose(roots, heroes)
    if transpose is not None:
        return result("transpose", transpose=transpose)
    if len(roots) > 1:
        if _is_input_fusible_non_strided_slices(roots) and _all_slice_inputs_compatible(roots):
            return result("input_slices")
        if _use_concatenate(roots, heroes):
            return result("concatenate")
    elif roots[0].opcode == "scatter":
        return result("scatter")
    elif _use_concatenate(roots, heroes):
        return result("concatenate")
    if _is_dus_fusion(roots) and can_emit_dynamic_update_slice_in_place(roots, graph):
        return result("dynamic_update_slice")
    return result("loop")


def fusion_kind(fusion: Instruction) -> str:
    """The emitter name XLA would use for ``fusion`` (one of ``EMITTER_NAMES``)."""
    return analyse_fusion(fusion).kind


def is_kind(fusion: object, name: str) -> bool:
    """Whether ``fusion`` is a fusion instruction XLA would emit with ``name``.

    What an emitter plugin's ``claims`` returns: anything that is not a fusion
    instruction is claimed by nobody (the registry then names it), never an
    exception from the analysis.
    """
    return getattr(fusion, "opcode", None) == "fusion" and fusion_kind(fusion) == name
