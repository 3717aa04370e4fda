"""The tensor-core GEMM's staging in 16-byte chunks: one vector global load a thread.

A K step's tiles of A (``TM x TK``) and B (``TK x TN``) are 2 KiB each on the
MMA path (f16/bf16: 64 x 16 and 16 x 64 elements; s8: 64 x 32 and 32 x 64),
which is 128 chunks of 16 bytes each: 256 threads stage them one chunk a
thread, the first half of the block (warps 0-3) A's, the second half B's, so
the choice of side is uniform within a warp. A chunk is ``V = 16 / element
bytes`` consecutive elements of a tile row (A: along K; B: along N), which is
one vector load where

- the operand is read straight from a kernel parameter (a fused producer is
  computed element by element: nothing to vectorise);
- the chunk's dimension is the minor one of the operand's physical layout
  (``ArrayShape.major_to_minor``, heron's one definition of memory order), so
  its V elements are adjacent in memory;
- its first element's offset is a multiple of V: the row length (K for A, N
  for B) is a multiple of V (and each chunk starts at a multiple of V within
  its row), and the buffer itself starts at ``BUFFER_ALIGNMENT`` (16) bytes,
  the same guarantee the pipeline's vector reads use
  (``heron.emitters.pipeline.vectorize_adjacent``, ``lower_tensors``).

Under those conditions a chunk is inside the operand or outside it as a whole
(the edge check of its first element is the check of all), so one guard
covers it. The V element reads are emitted together in one block with
indices that differ by a constant, built as one ``apply_indexing`` each over
(thread, block, K step, batch), so the vectorize pass can prove the
alignment and replace them by one vector read. Where the conditions fail the
emitter keeps its 32-bit word staging (``GemmEmitter._slots``).

B is staged transposed (n-major tiles): a thread's 8 (16) elements of a row
of B go to 8 (16) tile rows. B's threads take K rows in groups of half a
warp (``b_group``), each group one chunk of each of its rows, so a warp reads
two consecutive chunks (32 bytes, a whole sector) of 16 rows, and its stores
of one element fall in at most 2 words a bank (1.33 conflicts a store request
for f16, 1.18 for s8, where the word staging had 2; the row-major
assignment, consecutive threads along N, would put 8 of a warp's stores in
one bank).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import attrs
from mlir import ir
from mlir.dialects import vector as vector_dialect

from heron.emitters.kernel_arguments import BUFFER_ALIGNMENT
from heron.hlo.ir import Instruction
from heron.indexing import Dim, IndexingMap, Interval, Variable
from heron.indexing.affine import AffineExpr

if TYPE_CHECKING:
    from heron.plugins.gemm_plan import GemmPlan

__all__ = ["REGISTERS_PER_THREAD", "VectorStaging", "vector_staging", "write_vector"]

#: Registers a thread of a chunk-staged MMA kernel is planned to hold: 16
#: accumulators, a K step's fragments (4 words of A, 8 of B), its prefetched
#: chunk (4 words), indices and pointers; what ptxas allocates for sm_80
#: unprompted. The kernel asks for the occupancy this allows
#: (``GemmEmitter.min_blocks_per_core``, ``.minnctapersm`` in the PTX): unprompted,
#: ptxas for sm_90 took 55-56 for f16/bf16, one block an SM fewer, where 48
#: needs no spill. Word staging asks nothing: its edge kernels need 58-64.
REGISTERS_PER_THREAD = 48


@attrs.frozen
class VectorStaging:
    """How a K step's tiles are staged in chunks: ``vector`` elements a chunk, the
    first ``a_threads`` threads A's chunks (``a_per_row`` to a row of the tile), the
    next ``b_threads`` B's."""

    vector: int
    a_threads: int
    b_threads: int
    tm: int
    tn: int
    tk: int
    tiles_n: int
    tiles: int
    k_steps: int
    batch: tuple[int, ...]
    #: B's threads take K rows in groups of this many (half a warp), each group a chunk
    #: of each row: a warp reads two consecutive chunks (32 bytes) of 16 rows, and its
    #: transposed stores of one element fall in 2 words a bank.
    b_group: int

    @property
    def a_per_row(self) -> int:
        return self.tk // self.vector

    def _dims(self, threads: int) -> list[Variable]:
        return [
            Variable("th", Interval(0, threads - 1)),
            Variable("bl", Interval(0, self.tiles - 1)),
            Variable("step", Interval(0, self.k_steps - 1)),
            *(Variable(f"b{i}", Interval(0, size - 1)) for i, size in enumerate(self.batch)),
        ]

    def a_map(self, e: int) -> IndexingMap:
        """(batch..., m, k) of element ``e`` of the A chunk of thread ``th`` (< a_threads)
        for tile ``bl`` and K step ``step``."""
        th, bl, step = Dim(0), Dim(1), Dim(2)
        batch = [Dim(3 + i) for i in range(len(self.batch))]
        row = (bl // self.tiles_n) * self.tm + th // self.a_per_row
        col = step * self.tk + (th % self.a_per_row) * self.vector + e
        return IndexingMap(tuple(self._dims(self.a_threads)), (*batch, row, col))

    def b_map(self, e: int) -> IndexingMap:
        """(batch..., k, n) of element ``e`` of the B chunk of thread ``a_threads + th``."""
        th, bl, step = Dim(0), Dim(1), Dim(2)
        batch = [Dim(3 + i) for i in range(len(self.batch))]
        row = step * self.tk + self.b_row(th)
        col = (bl % self.tiles_n) * self.tn + self.b_chunk(th) * self.vector + e
        return IndexingMap(tuple(self._dims(self.b_threads)), (*batch, row, col))

    @property
    def b_per_row(self) -> int:
        return self.tn // self.vector

    def b_row(self, th: AffineExpr) -> AffineExpr:
        """The K row of B's thread ``th`` (counted from ``a_threads``): groups of
        ``b_group`` consecutive threads take consecutive rows."""
        return (th // (self.b_group * self.b_per_row)) * self.b_group + th % self.b_group

    def b_chunk(self, th: AffineExpr) -> AffineExpr:
        """The chunk of its row B's thread ``th`` stages."""
        return (th // self.b_group) % self.b_per_row


def _contiguous_rows(operand: Instruction, vector: int) -> bool:
    """Whether ``operand`` is a parameter whose last (logical) dimension is its physical
    minor one, with a length a multiple of ``vector``."""
    if operand.opcode != "parameter" or not hasattr(operand, "array_shape"):
        return False
    shape = operand.array_shape
    last = shape.rank - 1
    return shape.major_to_minor[-1] == last and shape.dims[last] % vector == 0


def vector_staging(
    dot: Instruction, plan: GemmPlan, threads: int, element_bytes: int, warp_size: int
) -> VectorStaging | None:
    """The chunked staging of ``dot``'s MMA tiles (``plan``), or None where a chunk would
    not be one aligned vector load (see the module docstring)."""
    if plan.mma is None or BUFFER_ALIGNMENT % element_bytes:
        return None
    vector = BUFFER_ALIGNMENT // element_bytes
    if plan.tk % vector or plan.tn % vector:
        return None
    a_threads = plan.tm * plan.tk // vector
    b_threads = plan.tk * plan.tn // vector
    b_group = min(plan.tk, warp_size // 2)
    if a_threads + b_threads != threads or plan.tk % b_group:
        return None
    if not all(_contiguous_rows(op, vector) for op in dot.operands):
        return None
    return VectorStaging(
        vector,
        a_threads,
        b_threads,
        plan.tm,
        plan.tn,
        plan.tk,
        plan.tiles_n,
        plan.tiles_m * plan.tiles_n,
        plan.k_steps,
        plan.batch,
        b_group,
    )


def write_vector(value: ir.Value, tile: ir.Value, index: ir.Value) -> ir.Value:
    """``tile`` (a 1-D shared tensor) with ``value``'s elements at ``index ...``: one
    vector store (``lower-tensors`` aligns it to the vector's size, 16 bytes here; A's
    chunks start 16-byte aligned in its padded rows, ``gemm_mma.SharedTiles``)."""
    in_bounds = ir.ArrayAttr.get([ir.BoolAttr.get(True)])
    identity = ir.AffineMapAttr.get(ir.AffineMap.get_minor_identity(1, 1))
    return vector_dialect.TransferWriteOp(
        tile.type, value, tile, [index], identity, in_bounds
    ).result
