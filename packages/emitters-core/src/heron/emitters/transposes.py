"""Transposes as hero selection and the transpose emitter see them: normalised, then tiled or not.

A transpose is *normalised* in physical (major-to-minor) order: size-1
dimensions are dropped and input dimensions that stay adjacent in the output
are merged, so ``f32[20,160,170]{0,2,1}`` is the 3-D 021 transpose
``[20,160,170] -> [20,170,160]``. The normalised input is a row-major reshape
of the operand's physical order and the normalised output one of the
result's, which is what the transpose emitter tiles. Normalising in physical
order is what XLA does too, after its layout normalisation has made every
layout the default one; heron keeps layouts, so it normalises physically
here, once, for both hero selection and the emitter. A transpose whose
normalised form is the identity moves no data: it is a bitcast.

``tiled_transpose`` is XLA's ``GetDescriptionForTiledTransposeEmitter``: the
shared-memory emitter is only worth it when both swapped dimensions are big
enough and a kept minor dimension is small.
"""

from __future__ import annotations

import math

import attrs

from heron.hlo.ir import Instruction
from heron.hlo.shapes import ArrayShape

__all__ = [
    "MAX_BITS_IN_MOST_MINOR_DIMENSION",
    "NormalisedTranspose",
    "TransposeDescription",
    "normalise_transpose",
    "tiled_transpose",
]

#: Shared-memory banks and their width in bits (transpose tiles are 32 x 33).
NUM_SHMEM_BANKS = 32
BANK_BITWIDTH = 32
#: ``kMinDimensionToTransposeTiled``: both swapped dims must be at least this.
MIN_DIMENSION_TO_TRANSPOSE_TILED = 4
#: ``kMinTotalDimensionsToTransposeTiled``: swapped dims' product at least this.
MIN_TOTAL_DIMENSIONS_TO_TRANSPOSE_TILED = 16 * 16
#: ``kMaxBitsInMostMinorDimension``: the kept minor dim of a 102 transpose, carried
#: whole through the tile, is at most this wide (8 bytes).
MAX_BITS_IN_MOST_MINOR_DIMENSION = 8 * 8
#: A 021 transpose with a swapped dim below this is left to the loop emitter.
MIN_DIMENSION_TO_LAST_TWO_DIMENSIONS_TRANSPOSE_TILED = 8
#: Element width whose transposes of the minor dimension are tiled only when
#: packed (XLA's b/415741994); otherwise the loop emitter takes them.
UNTILED_MINOR_SWAP_BITS = 4


@attrs.frozen
class NormalisedTranspose:
    """A transpose in normalised form: ``output[j] = input[permutation[j]]``.

    ``dims`` are the normalised input dims, major first (see the module docstring).
    """

    dims: tuple[int, ...]
    permutation: tuple[int, ...]

    @property
    def output_dims(self) -> tuple[int, ...]:
        return tuple(self.dims[p] for p in self.permutation)

    @property
    def rank(self) -> int:
        return len(self.dims)


def normalise_transpose(transpose: Instruction) -> NormalisedTranspose | None:
    """The normalised form of a transpose, or None when it moves no data (a bitcast)."""
    operand = transpose.operands[0].shape
    result = transpose.shape
    if not isinstance(operand, ArrayShape) or not isinstance(result, ArrayShape):
        return None
    dimensions = tuple(transpose.attr("dimensions", ()))
    in_order = operand.major_to_minor
    position = {d: k for k, d in enumerate(in_order)}
    sizes = [operand.dims[d] for d in in_order]
    # Physical positions of the input dims read, in the output's physical order.
    moved = [position[dimensions[d]] for d in result.major_to_minor]
    kept = [k for k in moved if sizes[k] != 1]
    groups: list[list[int]] = []
    for k in kept:
        if groups and groups[-1][-1] + 1 == k:
            groups[-1].append(k)
        else:
            groups.append([k])
    by_input = sorted(range(len(groups)), key=lambda g: groups[g][0])
    dims = tuple(math.prod(sizes[k] for k in groups[g]) for g in by_input)
    rank_of = {g: n for n, g in enumerate(by_input)}
    permutation = tuple(rank_of[g] for g in range(len(groups)))
    if permutation == tuple(range(len(dims))):
        return None
    return NormalisedTranspose(dims, permutation)


@attrs.frozen(eq=False)
class TransposeDescription:
    """A transpose the shared-memory emitter tiles (XLA's ``TransposeDescription``).

    ``instruction`` is the (first) transpose hero and ``normalised`` its
    normalised form; ``heroes`` are all the fusion's tiled transpose heroes, in
    root order (equivalent to ``instruction``: one tile shape covers them all).
    ``packed`` is XLA's packed transpose (narrow types, any rank);
    ``shmem_usage_bytes`` the shared memory XLA's tile for one hero takes.
    """

    instruction: Instruction
    normalised: NormalisedTranspose
    packed: bool = False
    shmem_usage_bytes: int = 0
    heroes: tuple[Instruction, ...] = attrs.field(
        default=attrs.Factory(lambda self: (self.instruction,), takes_self=True)
    )

    @property
    def dimensions(self) -> tuple[int, ...]:
        return self.normalised.dims

    @property
    def permutation(self) -> tuple[int, ...]:
        return self.normalised.permutation

    @property
    def output_dimensions(self) -> tuple[int, ...]:
        return self.normalised.output_dims

    def equivalent(self, other: TransposeDescription) -> bool:
        """Same tiling problem (XLA's ``TransposeDescription::IsEquivalent``)."""
        return self.normalised == other.normalised


def _packed_tile_ok(spec: NormalisedTranspose, bits: int) -> bool:
    """``CanEmitPackedTranspose`` / ``GetPackedTransposeTileSizes`` on normalised dims."""
    if bits >= BANK_BITWIDTH:
        return False
    out = list(spec.output_dims)
    cperm = list(spec.permutation)
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
    """XLA's ``GetDescriptionForTiledTransposeEmitter`` on the normalised transpose.

    Packed transposes (narrow types, big enough swapped dims) qualify at any
    rank; otherwise the minor dim is either kept (102: at most
    ``MAX_BITS_IN_MOST_MINOR_DIMENSION`` wide) or swapped (a 021 swap with a
    dim below 8 stays a loop, and so does an unpacked 4-bit one), and both
    swapped dims must be >= 4 with a product >= 256.
    """
    if inst.opcode != "transpose" or inst.array_shape.num_elements == 0:
        return None  # a transpose of nothing moves nothing: never a tiled hero
    spec = normalise_transpose(inst)
    if spec is None:
        return None
    dims, perm, out_dims = spec.dims, spec.permutation, spec.output_dims
    bits = inst.array_shape.element_type.bit_width  # XLA's GetBitwidth: pred is 8 bits
    # A narrow 210 transpose is packed at any size in the XLA version the corpus
    # comes from (packed_transpose_bf16: bf16[3,16,3] gets a 64x64 bf16 tile);
    # fitted to the corpus, since the rule's source was not found.
    packed_210 = bits in (8, 16) and perm == (2, 1, 0)
    if packed_210 or _packed_tile_ok(spec, bits):
        vector = BANK_BITWIDTH // bits
        usage = NUM_SHMEM_BANKS * (BANK_BITWIDTH // 8) * NUM_SHMEM_BANKS * vector
        return TransposeDescription(inst, spec, True, usage)
    after = 1
    if perm[-1] == len(perm) - 1:
        if bits * out_dims[-1] > MAX_BITS_IN_MOST_MINOR_DIMENSION:
            return None
        after = out_dims[-1]
        swapped = (dims[-2], out_dims[-2])
    else:
        # A 4-bit transpose of the minor dimension stays a loop (XLA's
        # b/415741994: its tiled version regressed on bank conflicts); the loop
        # emitter writes it two elements, one whole byte, per thread.
        if bits == UNTILED_MINOR_SWAP_BITS:
            return None
        swapped = (dims[-1], out_dims[-1])
        last_two = perm[-1] == len(perm) - 2 and perm[-2] == len(perm) - 1
        if min(swapped) < MIN_DIMENSION_TO_LAST_TWO_DIMENSIONS_TRANSPOSE_TILED and last_two:
            return None
    if min(swapped) < MIN_DIMENSION_TO_TRANSPOSE_TILED:
        return None
    if swapped[0] * swapped[1] < MIN_TOTAL_DIMENSIONS_TO_TRANSPOSE_TILED:
        return None
    usage = -(-NUM_SHMEM_BANKS * (NUM_SHMEM_BANKS + 1) * bits * after // 8)
    return TransposeDescription(inst, spec, False, usage)
