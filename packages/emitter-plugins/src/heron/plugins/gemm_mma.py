"""The GEMM emitter's tensor-core path: ``mma.sync`` m16n8k16 on shared-memory tiles.

A block of 8 warps computes a 64 x 64 tile of C; its warps form a 4 x 2 grid
and each computes a 16 x 32 warp tile: one 16 x 16 A fragment and four 16 x 8
B fragments per K step of 16, four ``nvgpu.mma.sync`` (m16n8k16, f16 or bf16
in, f32 accumulators), so a thread holds four ``vector<2x2xf32>`` accumulators
(16 elements of C, as the scalar path's register tile).

The fragments are read from the staged shared tiles with plain loads, element by
element, where the PTX ISA puts them ("Matrix Fragments for mma.m16n8k16 with
floating point type"): with ``g = lane / 4`` and ``t = lane % 4``, element
``[r, e]`` of

- A (``vector<4x2>``, row-major 16 x 16) is ``A[g + 8 (r % 2), 2 t + e + 8 (r / 2)]``;
- B (``vector<2x2>``, 16 x 8) is ``B[2 t + e + 8 r, g]``;
- C and D (``vector<2x2xf32>``, 16 x 8) are ``C[g + 8 r, 2 t + e]``.

``fragment_positions`` is the one statement of these layouts; the interpreter's
``nvgpu.mma.sync`` (``heron.runtime.interpreter.semantics.mma``) states the
same table for the hardware side, and the tests check the two agree through
the results.
"""

from __future__ import annotations

import attrs
from mlir import ir
from mlir.dialects import arith, nvgpu, tensor, vector

from heron.emitters.ir_utils import index_constant

__all__ = ["MMA_M", "MMA_N", "MMA_K", "MmaTiles", "fragment_positions", "mma_shape_name"]

#: The instruction's shape: m16n8k16.
MMA_M, MMA_N, MMA_K = 16, 8, 16
#: Warps of a block along M and N, and MMA tiles of a warp along N.
WARPS_M, WARPS_N, TILES_N = 4, 2, 4
WARP_SIZE = 32

Values = list[ir.Value]


def mma_shape_name(element: str) -> str:
    """``"m16n8k16.f16"``: how ``Target.mma_shapes`` names the instruction for ``element``."""
    return f"m{MMA_M}n{MMA_N}k{MMA_K}.{element}"


def fragment_positions(operand: str, lane: int) -> list[list[tuple[int, int]]]:
    """(row, column) in the operand's tile of each fragment element ``[r][e]`` of ``lane``."""
    g, t = divmod(lane, 4)
    if operand == "a":
        return [[(g + 8 * (r % 2), 2 * t + e + 8 * (r // 2)) for e in range(2)] for r in range(4)]
    if operand == "b":
        return [[(2 * t + e + 8 * r, g) for e in range(2)] for r in range(2)]
    if operand == "c":
        return [[(g + 8 * r, 2 * t + e) for e in range(2)] for r in range(2)]
    raise ValueError(f"unknown mma operand {operand!r}")


@attrs.frozen
class MmaTiles:
    """The block and warp tiles of the tensor-core path (see the module docstring)."""

    tm: int = MMA_M * WARPS_M
    tn: int = MMA_N * TILES_N * WARPS_N
    tk: int = MMA_K
    threads: int = WARPS_M * WARPS_N * WARP_SIZE
    tiles_n: int = TILES_N


def _lane_terms(lane: ir.Value) -> tuple[ir.Value, ir.Value]:
    return arith.divui(lane, index_constant(4)), arith.remui(lane, index_constant(4))


def _offset(base: ir.Value, constant: int) -> ir.Value:
    return arith.addi(base, index_constant(constant)) if constant else base


def warp_origin(thread: ir.Value) -> tuple[ir.Value, ir.Value, ir.Value]:
    """(lane, first row, first column) of the thread's warp tile within the block tile."""
    warp = arith.divui(thread, index_constant(WARP_SIZE))
    lane = arith.remui(thread, index_constant(WARP_SIZE))
    row = arith.muli(arith.divui(warp, index_constant(WARPS_N)), index_constant(MMA_M))
    col = arith.muli(arith.remui(warp, index_constant(WARPS_N)), index_constant(MMA_N * TILES_N))
    return lane, row, col


def zero_accumulator() -> ir.Value:
    kind = ir.VectorType.get([2, 2], ir.F32Type.get())
    splat = ir.DenseElementsAttr.get_splat(kind, ir.FloatAttr.get_f32(0.0))
    return arith.ConstantOp(kind, splat).result


def warp_step(
    a_tile: ir.Value, b_tile: ir.Value, accs: Values, lane: ir.Value, row: ir.Value, col: ir.Value
) -> Values:
    """The warp's four MMAs of one K step on the staged tiles: the new accumulators."""
    element = ir.RankedTensorType(a_tile.type).element_type
    g, t = _lane_terms(lane)
    two_t = arith.muli(t, index_constant(2))
    a_row = arith.addi(row, g)
    a_values = [
        tensor.extract(a_tile, [_offset(a_row, 8 * (r % 2)), _offset(two_t, e + 8 * (r // 2))])
        for r in range(4)
        for e in range(2)
    ]
    a = vector.from_elements(ir.VectorType.get([4, 2], element), a_values)
    out = []
    for j, acc in enumerate(accs):
        b_col = arith.addi(col, _offset(g, MMA_N * j))
        b_values = [
            tensor.extract(b_tile, [_offset(two_t, e + 8 * r), b_col])
            for r in range(2)
            for e in range(2)
        ]
        b = vector.from_elements(ir.VectorType.get([2, 2], element), b_values)
        out.append(nvgpu.mma_sync(acc.type, a, b, acc, [MMA_M, MMA_N, MMA_K]))
    return out


def accumulator_elements(
    acc: ir.Value, j: int, lane: ir.Value, row: ir.Value, col: ir.Value
) -> list[tuple[ir.Value, ir.Value, ir.Value]]:
    """(row, column within the block tile, f32 value) of each element of accumulator ``j``."""
    g, t = _lane_terms(lane)
    two_t = arith.muli(t, index_constant(2))
    first_col = _offset(arith.addi(col, two_t), MMA_N * j)
    first_row = arith.addi(row, g)
    return [
        (
            _offset(first_row, 8 * r),
            _offset(first_col, e),
            vector.extract(acc, [], [r, e]),
        )
        for r in range(2)
        for e in range(2)
    ]
