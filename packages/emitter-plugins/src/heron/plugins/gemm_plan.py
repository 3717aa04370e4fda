"""How the GEMM emitter tiles a canonical dot: block and register tiles, and MMA.

A block of :data:`THREADS` threads computes a ``TM x TN`` tile of C, walking K
in steps of ``TK``; where M and N both span at least ``TILE *
REGISTER_TILE`` each thread keeps a ``REGISTER_TILE x REGISTER_TILE`` register
tile; on a Target with the matching MMA shape the products are tensor-core
``mma.sync`` (:mod:`heron.plugins.gemm_mma`). :func:`plan_gemm` decides all
of it from the dot and the Target, once; :mod:`heron.plugins.gemm` emits what
the plan says (the module docstring there describes the kernel).
"""

from __future__ import annotations

import math

import attrs

from heron.hlo.element_types import ElementType
from heron.hlo.errors import UnsupportedError
from heron.hlo.ir import Instruction
from heron.hlo.passes.dot_decomposer import dimension_lists
from heron.indexing.thread_maps import LaunchDimensions
from heron.plugins import gemm_mma
from heron.plugins.gemm_hero import accumulates_in_floats
from heron.target import Target

__all__ = ["REGISTER_TILE", "THREADS", "TILE", "TK", "GemmPlan", "plan_gemm"]

#: Threads of a block: 256 is 8 warps of 32 (4 of 64), enough to hide a
#: barrier's latency while leaving room for several blocks an SM.
THREADS = 256
#: The square output tile a block computes when both sides have a free
#: dimension (16 x 16 = THREADS, one element per thread).
TILE = 16
#: The K step: a TILE x TK tile of A and a TK x TILE tile of B staged per
#: barrier pair; each thread stages one element of each.
TK = 16
#: Rows and columns of C a thread computes when both M and N span at least
#: TILE * REGISTER_TILE: a 64 x 64 block tile, 16 accumulators a thread, and
#: 8 shared loads for 16 multiply-adds per K element instead of 2 for 1.
REGISTER_TILE = 4


@attrs.frozen
class GemmPlan:
    """Sizes of a canonical dot and the tiles it is computed in."""

    batch: tuple[int, ...]  #: the batch dimensions' sizes (may be empty)
    m: int  #: rows of C (1 without a left free dimension)
    n: int  #: columns of C (1 without a right free dimension)
    k: int  #: the contracted length (1 without a contracting dimension)
    has_m: bool
    has_n: bool
    has_k: bool
    tm: int
    tn: int
    tk: int
    #: Rows and columns of C each thread computes (its register tile): thread
    #: (ty, tx) of a ``tm/rm x tn/rn`` grid owns rows ``ty + i * tm/rm`` and
    #: columns ``tx + j * tn/rn`` of the block's tile.
    rm: int = 1
    rn: int = 1
    #: The MMA instruction the products use (``"m16n8k16.f16"``), or None for the
    #: scalar multiply-add; with one, the threads are warps of ``gemm_mma.MmaTiles``.
    mma: str | None = None

    @property
    def threads_m(self) -> int:
        return self.tm // self.rm

    @property
    def threads_n(self) -> int:
        return self.tn // self.rn

    @property
    def threads(self) -> int:
        if self.mma is not None:
            return gemm_mma.MmaTiles().threads
        return self.threads_m * self.threads_n

    @property
    def tiles_m(self) -> int:
        return math.ceil(self.m / self.tm)

    @property
    def tiles_n(self) -> int:
        return math.ceil(self.n / self.tn)

    @property
    def k_steps(self) -> int:
        return math.ceil(self.k / self.tk)

    @property
    def batches(self) -> int:
        return math.prod(self.batch)

    @property
    def launch(self) -> LaunchDimensions:
        return LaunchDimensions(
            block_x=self.tiles_m * self.tiles_n, thread_x=self.threads, block_y=self.batches
        )


def plan_gemm(dot: Instruction, target: Target) -> GemmPlan:
    """The tiles of canonical ``dot`` on ``target`` (see the module docstring)."""
    lb, _, lc, _ = dimension_lists(dot)
    lhs = dot.operands[0].array_shape
    rhs = dot.operands[1].array_shape
    nb = len(lb)
    has_k = bool(lc)
    has_m = lhs.rank - nb - len(lc) == 1
    has_n = rhs.rank - nb - len(lc) == 1
    m = lhs.dims[nb] if has_m else 1
    k = lhs.dims[-1] if has_k else 1
    n = rhs.dims[-1] if has_n else 1
    threads = min(THREADS, target.threads_per_block_limit)
    rm = rn = 1
    mma = _mma_instruction(dot, target) if has_m and has_n and has_k else None
    if mma is not None:
        tiles = gemm_mma.MmaTiles()
        tm, tn = tiles.tm, tiles.tn
    elif has_m and has_n:
        side = math.isqrt(threads)
        tm = tn = side
        if m >= side * REGISTER_TILE and n >= side * REGISTER_TILE:
            rm = rn = REGISTER_TILE
            tm = tn = side * REGISTER_TILE
    elif has_m:  # matrix-vector: a thread per row of the tile
        tm, tn = threads, 1
    elif has_n:  # vector-matrix: a thread per column
        tm, tn = 1, threads
    else:  # a dot product: one thread sums it
        tm = tn = 1
    tk = max(1, min(TK, k))
    if mma is not None:
        tk = gemm_mma.mma_k(MMA_INPUTS[lhs.element_type])
    plan = GemmPlan(tuple(lhs.dims[:nb]), m, n, k, has_m, has_n, has_k, tm, tn, tk, rm, rn, mma)
    accumulator_bytes = 8 if dot.array_shape.element_type is ElementType.F64 else 4
    tile_bytes = (tm * tk + tk * tn) * accumulator_bytes
    if mma is not None:  # the tiles keep the inputs, in padded rows
        tile_bytes = gemm_mma.SharedTiles(tm, tn, tk, lhs.element_type.bit_width // 8).bytes
    if tile_bytes > target.shared_memory_per_block:
        raise UnsupportedError(
            f"dot '{dot.name}' ({dot.shape}): its tiles need {tile_bytes} bytes of shared"
            f" memory, a block has {target.shared_memory_per_block}",
            dot.location,
        )
    return plan


#: Operand types the tensor-core path takes, by their name in ``Target.mma_shapes``.
MMA_INPUTS = {ElementType.F16: "f16", ElementType.BF16: "bf16", ElementType.S8: "s8"}


def _mma_instruction(dot: Instruction, target: Target) -> str | None:
    """The MMA instruction for ``dot``'s products on ``target`` (both operands f16, both
    bf16 or both s8, 32-lane warps, the shape in the Target's ``mma_shapes``), else None.

    An f64 result accumulates in f64 (as XLA computes it), which no MMA shape does:
    those dots keep the vector path."""
    inputs = {op.array_shape.element_type for op in dot.operands}
    if len(inputs) != 1 or target.warp_size != gemm_mma.WARP_SIZE:
        return None
    if dot.array_shape.element_type is ElementType.F64:
        return None
    (element,) = inputs
    if element not in MMA_INPUTS or accumulates_in_floats(dot) is None:
        return None
    if element is ElementType.S8 and _s8_sum_may_overflow(dot):
        return None
    name = gemm_mma.mma_shape_name(MMA_INPUTS[element])
    return name if name in target.mma_shapes else None


def _s8_sum_may_overflow(dot: Instruction) -> bool:
    """Whether a partial sum of the s8 dot may leave s32.

    The s8 MMA saturates (``nvgpu.mma.sync`` lowers to ``mma.sync ... .satfinite``),
    XLA's s32 accumulation wraps: the two agree while no sum overflows, which
    holds when K products of at most ``(-128)^2 = 2^14`` each fit in s32."""
    k = dot.operands[0].array_shape.dims[-1]
    return k * 128 * 128 > 2**31 - 1
