"""The GEMM emitter's tensor-core path: ``mma.sync`` on shared-memory tiles.

Two instructions: m16n8k16 for f16 and bf16 operands (f32 accumulators) and
m16n8k32 for s8 operands (s32 accumulators, wrapping). A block of 8 warps
computes a 64 x 64 tile of C; its warps form a 4 x 2 grid and each computes
a 16 x 32 warp tile: one 16 x K A fragment and four K x 8 B fragments per K
step, four ``nvgpu.mma.sync``, so a thread holds four ``vector<2x2>``
accumulators (16 elements of C, as the scalar path's register tile).

The staged tiles are 1-D shared tensors (``SharedTiles``): A row-major
(``TM`` rows of ``K``), B n-major (``TN`` rows of ``K``: staged transposed,
so that both operands' fragments are pairs, or quads for s8, of consecutive
elements), each row padded by 16 bytes. The fragments are read from them with
``ldmatrix.x4`` (``heron_gpu.ldmatrix``; ``fragment_indices`` says which row each
lane supplies): three a K step, one for A and one for each pair of B fragments,
each register landing where the PTX ISA puts it ("Matrix Fragments for
mma.m16n8k16 with floating point type", "... mma.m16n8k32"): with ``g = lane / 4``,
``t = lane % 4`` and ``p = K / 8`` elements a 32-bit register (2 for 16-bit
types, 4 for s8), element ``[r, e]`` of

- A (``vector<4xp>``, row-major 16 x K) is ``A[g + 8 (r % 2), p t + e + (K/2) (r / 2)]``;
- B (``vector<2xp>``, K x 8) is ``B[p t + e + (K/2) r, g]``;
- C and D (``vector<2x2>``, 16 x 8) are ``C[g + 8 r, 2 t + e]``.

Why the padding: each matrix of an ``ldmatrix`` reads 8 rows x 16 bytes.
Unpadded rows of 32 bytes are 8 banks apart, so rows ``i`` and ``i + 4`` share
banks (2-way conflicts); rows of 48 bytes are 12 banks apart and the 32 words
fall in 32 different banks. 16 bytes keep every row 16-byte
aligned (what ``ldmatrix`` needs of its row addresses).

``fragment_positions`` is the one statement of these layouts here; the
interpreter's ``nvgpu.mma.sync`` (``heron.runtime.interpreter.semantics.mma``)
states the same table for the hardware side, and the tests check that the two
agree and spot-check both against the PTX ISA's figures.
"""

from __future__ import annotations

import attrs
from mlir import ir
from mlir.dialects import arith, nvgpu, vector

from heron.emitters.dialect import ldmatrix_op
from heron.emitters.ir_utils import index_constant

__all__ = [
    "MMA_M",
    "MMA_N",
    "MmaTiles",
    "SharedTiles",
    "fragment_positions",
    "mma_k",
    "mma_shape_name",
]

#: The instructions' M and N (m16n8kK).
MMA_M, MMA_N = 16, 8
#: K of the instruction by operand type: 256 bits of a row of A.
_MMA_K = {"f16": 16, "bf16": 16, "s8": 32}
#: Warps of a block along M and N, and MMA tiles of a warp along N.
WARPS_M, WARPS_N, TILES_N = 4, 2, 4
WARP_SIZE = 32

Values = list[ir.Value]


def mma_k(element: str) -> int:
    """K of the MMA instruction for operands of type ``element`` (``"f16"``, ``"s8"``)."""
    return _MMA_K[element]


def mma_shape_name(element: str) -> str:
    """``"m16n8k16.f16"``: how ``Target.mma_shapes`` names the instruction for ``element``."""
    return f"m{MMA_M}n{MMA_N}k{mma_k(element)}.{element}"


def fragment_positions(operand: str, lane: int, k: int = 16) -> list[list[tuple[int, int]]]:
    """(row, column) in the operand's tile of each fragment element ``[r][e]`` of ``lane``
    for the m16n8``k`` instruction."""
    g, t = divmod(lane, 4)
    p, half = k // 8, k // 2
    if operand == "a":
        return [
            [(g + 8 * (r % 2), p * t + e + half * (r // 2)) for e in range(p)] for r in range(4)
        ]
    if operand == "b":
        return [[(p * t + e + half * r, g) for e in range(p)] for r in range(2)]
    if operand == "c":
        return [[(g + 8 * r, 2 * t + e) for e in range(2)] for r in range(2)]
    raise ValueError(f"unknown mma operand {operand!r}")


@attrs.frozen
class MmaTiles:
    """The block and warp tiles of the tensor-core path (see the module docstring)."""

    tm: int = MMA_M * WARPS_M
    tn: int = MMA_N * TILES_N * WARPS_N
    threads: int = WARPS_M * WARPS_N * WARP_SIZE
    tiles_n: int = TILES_N


#: Bytes of the word a thread stages at once (consecutive elements of a tile row).
WORD_BYTES = 4
#: Bytes each staged tile row is padded by (see the module docstring).
PAD_BYTES = 16
#: Shared-memory stages of each tile: K step i + 1 is staged into one while the
#: MMAs of step i read the other (one barrier a K step).
STAGES = 2


@attrs.frozen
class SharedTiles:
    """Where the staged tiles keep their elements: ``STAGES`` stages of each operand,
    A's ``(m, k)`` at ``m * stride + k``, B's ``(k, n)`` at ``n * stride + k`` of its
    stage; ``stride`` is K plus 16 bytes of padding."""

    tm: int
    tn: int
    tk: int
    element_bytes: int
    stages: int = STAGES

    @property
    def stride(self) -> int:
        return self.tk + PAD_BYTES // self.element_bytes

    @property
    def a_stage(self) -> int:
        return self.tm * self.stride

    @property
    def b_stage(self) -> int:
        return self.tn * self.stride

    @property
    def a_size(self) -> int:
        return self.stages * self.a_stage

    @property
    def b_size(self) -> int:
        return self.stages * self.b_stage

    @property
    def bytes(self) -> int:
        return (self.a_size + self.b_size) * self.element_bytes

    def a_index(self, m: ir.Value, k: ir.Value) -> ir.Value:
        """Element ``(m, k)`` of A's first stage (add ``a_stage`` for the second)."""
        return arith.addi(arith.muli(m, index_constant(self.stride)), k)

    def b_index(self, k: ir.Value, n: ir.Value) -> ir.Value:
        """Element ``(k, n)`` of B's first stage (add ``b_stage`` for the second)."""
        return arith.addi(arith.muli(n, index_constant(self.stride)), k)


def _offset(base: ir.Value, constant: int) -> ir.Value:
    return arith.addi(base, index_constant(constant)) if constant else base


def warp_origin(thread: ir.Value) -> tuple[ir.Value, ir.Value, ir.Value]:
    """(lane, first row, first column) of the thread's warp tile within the block tile."""
    warp = arith.divui(thread, index_constant(WARP_SIZE))
    lane = arith.remui(thread, index_constant(WARP_SIZE))
    row = arith.muli(arith.divui(warp, index_constant(WARPS_N)), index_constant(MMA_M))
    col = arith.muli(arith.remui(warp, index_constant(WARPS_N)), index_constant(MMA_N * TILES_N))
    return lane, row, col


def zeros(kind: ir.VectorType) -> ir.Value:
    """A vector of zeros of type ``kind`` (float or integer elements)."""
    element = kind.element_type
    zero = (
        ir.FloatAttr.get(element, 0.0)
        if isinstance(element, ir.FloatType)
        else ir.IntegerAttr.get(element, 0)
    )
    return arith.ConstantOp(kind, ir.DenseElementsAttr.get_splat(kind, zero)).result


def zero_accumulator(accumulator: ir.Type) -> ir.Value:
    """A ``vector<2x2>`` of zeros of the accumulation type (f32 or i32)."""
    return zeros(ir.VectorType.get([2, 2], accumulator))


@attrs.frozen
class FragmentIndices:
    """The tile index of the row each lane supplies to the K step's ``ldmatrix`` loads:
    the same every K step, so computed once, before the K loop (``fragment_indices``)."""

    a: ir.Value  #: A's ``.x4`` load (the whole A fragment)
    b: Values  #: one ``.x4`` load for each pair of B fragments


def fragment_indices(
    tiles: SharedTiles, lane: ir.Value, row: ir.Value, col: ir.Value
) -> FragmentIndices:
    """The row address (tile index) of ``lane`` for each ``ldmatrix.x4`` of a K step, whose
    warp tile starts at (``row``, ``col``) of the block tile.

    ``ldmatrix.x4`` gives lane ``l`` word ``l % 4`` of row ``l / 4`` of each of its four
    8 x 8 (16-bit) matrices, matrix ``i``'s rows supplied by lanes ``8i ... 8i + 7``: the
    fragment register layout above, when matrix ``i`` is register ``i``'s 8 rows x 16
    bytes. A: lane ``l`` supplies row ``l % 8 + 8 ((l / 8) % 2)``, column
    ``(K/2) (l / 16)`` of the warp's 16 x K rows. B (n-major): one load holds fragments
    ``2q`` and ``2q + 1``, lane ``l`` supplying n-row ``8 (2q + l / 16) + l % 8`` at
    column ``(K/2) ((l / 8) % 2)``. Rows are 16 bytes (8 f16, 16 s8: s8 is loaded as
    b16 words, which moves the same bytes) and start 16-byte aligned (``SharedTiles``'s
    padding keeps every row so)."""
    half = tiles.tk // 2
    in_matrix = arith.remui(lane, index_constant(8))
    second = arith.remui(arith.divui(lane, index_constant(8)), index_constant(2))
    upper = arith.divui(lane, index_constant(16))
    a_row = arith.addi(arith.addi(row, in_matrix), arith.muli(second, index_constant(8)))
    a = tiles.a_index(a_row, arith.muli(upper, index_constant(half)))
    b_row = arith.addi(arith.addi(col, in_matrix), arith.muli(upper, index_constant(MMA_N)))
    b_col = arith.muli(second, index_constant(half))
    b = [tiles.b_index(b_col, _offset(b_row, 2 * MMA_N * q)) for q in range(TILES_N // 2)]
    return FragmentIndices(a, b)


def _rows(loaded: ir.Value, first: int) -> ir.Value:
    """Rows ``first`` and ``first + 1`` of an ``ldmatrix.x4`` result: one B fragment."""
    return vector.shuffle(loaded, loaded, [first, first + 1])


def warp_step(
    tiles: SharedTiles,
    a_tile: ir.Value,
    b_tile: ir.Value,
    accs: Values,
    at: FragmentIndices,
    a_offset: int,
    b_offset: int,
) -> Values:
    """The warp's four MMAs of one K step on the stage of the tiles that starts at
    ``a_offset`` (``b_offset``): three ``ldmatrix.x4`` loads, the new accumulators."""
    k = tiles.tk
    a = ldmatrix_op(a_tile, [_offset(at.a, a_offset)], 4).results[0]
    b = []
    for index in at.b:
        loaded = ldmatrix_op(b_tile, [_offset(index, b_offset)], 4).results[0]
        b += [_rows(loaded, 0), _rows(loaded, 2)]
    return [
        nvgpu.mma_sync(acc.type, a, fragment, acc, [MMA_M, MMA_N, k])
        for acc, fragment in zip(accs, b, strict=True)
    ]


def accumulator_elements(
    acc: ir.Value, j: int, lane: ir.Value, row: ir.Value, col: ir.Value
) -> list[tuple[ir.Value, ir.Value, ir.Value]]:
    """(row, column within the block tile, value) of each element of accumulator ``j``."""
    g = arith.divui(lane, index_constant(4))
    two_t = arith.muli(arith.remui(lane, index_constant(4)), index_constant(2))
    first_col = _offset(arith.addi(col, two_t), MMA_N * j)
    first_row = arith.addi(row, g)
    return [
        (_offset(first_row, 8 * r), _offset(first_col, e), vector.extract(acc, [], [r, e]))
        for r in range(2)
        for e in range(2)
    ]
