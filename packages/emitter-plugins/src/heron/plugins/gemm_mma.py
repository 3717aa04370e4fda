"""The GEMM emitter's tensor-core path: ``mma.sync`` on shared-memory tiles.

Two instructions: m16n8k16 for f16 and bf16 operands (f32 accumulators) and
m16n8k32 for s8 operands (s32 accumulators, wrapping). A block of 8 warps
computes a 64 x 64 tile of C; its warps form a 4 x 2 grid and each computes
a 16 x 32 warp tile: one 16 x K A fragment and four K x 8 B fragments per K
step, four ``nvgpu.mma.sync``, so a thread holds four ``vector<2x2>``
accumulators (16 elements of C, as the scalar path's register tile).

The fragments are read from the staged shared tiles with plain loads, element
by element, where the PTX ISA puts them ("Matrix Fragments for mma.m16n8k16
with floating point type", "... mma.m16n8k32"): with ``g = lane / 4``,
``t = lane % 4`` and ``p = K / 8`` elements a 32-bit register (2 for 16-bit
types, 4 for s8), element ``[r, e]`` of

- A (``vector<4xp>``, row-major 16 x K) is ``A[g + 8 (r % 2), p t + e + (K/2) (r / 2)]``;
- B (``vector<2xp>``, K x 8) is ``B[p t + e + (K/2) r, g]``;
- C and D (``vector<2x2>``, 16 x 8) are ``C[g + 8 r, 2 t + e]``.

``fragment_positions`` is the one statement of these layouts here; the
interpreter's ``nvgpu.mma.sync`` (``heron.runtime.interpreter.semantics.mma``)
states the same table for the hardware side, and the tests check that the two
agree and spot-check both against the PTX ISA's figures.
"""

from __future__ import annotations

import attrs
from mlir import ir
from mlir.dialects import arith, nvgpu, tensor, vector

from heron.emitters.ir_utils import index_constant

__all__ = [
    "MMA_M",
    "MMA_N",
    "MmaTiles",
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


def _offset(base: ir.Value, constant: int) -> ir.Value:
    return arith.addi(base, index_constant(constant)) if constant else base


def warp_origin(thread: ir.Value) -> tuple[ir.Value, ir.Value, ir.Value]:
    """(lane, first row, first column) of the thread's warp tile within the block tile."""
    warp = arith.divui(thread, index_constant(WARP_SIZE))
    lane = arith.remui(thread, index_constant(WARP_SIZE))
    row = arith.muli(arith.divui(warp, index_constant(WARPS_N)), index_constant(MMA_M))
    col = arith.muli(arith.remui(warp, index_constant(WARPS_N)), index_constant(MMA_N * TILES_N))
    return lane, row, col


def zero_accumulator(accumulator: ir.Type) -> ir.Value:
    """A ``vector<2x2>`` of zeros of the accumulation type (f32 or i32)."""
    kind = ir.VectorType.get([2, 2], accumulator)
    zero = (
        ir.FloatAttr.get(accumulator, 0.0)
        if isinstance(accumulator, ir.FloatType)
        else ir.IntegerAttr.get(accumulator, 0)
    )
    return arith.ConstantOp(kind, ir.DenseElementsAttr.get_splat(kind, zero)).result


def warp_step(
    a_tile: ir.Value, b_tile: ir.Value, accs: Values, lane: ir.Value, row: ir.Value, col: ir.Value
) -> Values:
    """The warp's four MMAs of one K step on the staged tiles: the new accumulators."""
    element = ir.RankedTensorType(a_tile.type).element_type
    k = ir.RankedTensorType(a_tile.type).shape[1]
    p, half = k // 8, k // 2
    g = arith.divui(lane, index_constant(4))
    pt = arith.muli(arith.remui(lane, index_constant(4)), index_constant(p))
    a_row = arith.addi(row, g)
    a_values = [
        tensor.extract(a_tile, [_offset(a_row, 8 * (r % 2)), _offset(pt, e + half * (r // 2))])
        for r in range(4)
        for e in range(p)
    ]
    a = vector.from_elements(ir.VectorType.get([4, p], element), a_values)
    out = []
    for j, acc in enumerate(accs):
        b_col = arith.addi(col, _offset(g, MMA_N * j))
        b_values = [
            tensor.extract(b_tile, [_offset(pt, e + half * r), b_col])
            for r in range(2)
            for e in range(p)
        ]
        b = vector.from_elements(ir.VectorType.get([2, p], element), b_values)
        out.append(nvgpu.mma_sync(acc.type, a, b, acc, [MMA_M, MMA_N, k]))
    return out


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
