"""Column and small-column reductions: the reduced dimension is not the minor one.

Column (XLA's ``ColumnReductionFusion``): a block is a 32 x 32 tile of
threads over 32 * vector_size columns; thread (y, x) walks rows y, y + 32,
... of its column(s), so a warp reads 32 consecutive columns (coalesced).
The partial sums go to a shared tile transposed (``tile[x][y]``); after the
barrier warp y reads row y of the tile, i.e. the 32 partials of one column,
and a warp shuffle reduces them; lane 0 writes. The tile's rows are padded by
one element against bank conflicts. With V columns a thread, a row holds the
partials vector-element-major (``tile[x][vi * 32 + y]``): lane x of a reading
warp then reads word ``row + vi * 32 + x``, conflict-free, where the
thread-major order (``tile[x][y * V + vi]``) put lanes x and x + 16 on one
bank (2-way for V = 2, measured by ``heron profile``).

Small column (XLA's ``SmallColumnReductionFusion``, when the kept minor
dimension divides the warp): 128 threads walk the flattened [reduced, minor]
plane linearly, each thread always seeing the same column(s); partials go to
a ``[shared_rows, minor]`` tile, and segments of ``shared_rows`` lanes
reduce one column each with a shuffle.
"""

from __future__ import annotations

from mlir import ir

from heron.indexing import Interval
from heron.plugins.reduction_base import (
    BLOCK,
    LOGICAL_WARP_SIZE,
    THREAD,
    GroupState,
    ReductionEmitterBase,
    ThreadMap,
    sym,
    vector_size_for,
)

__all__ = ["ColumnReductionEmitter", "SmallColumnReductionEmitter"]

#: The column tile's edge: one logical warp of threads per tile row and column.
TILE = LOGICAL_WARP_SIZE


class ColumnReductionEmitter(ReductionEmitterBase):
    """A 32 x 32 thread tile, partials transposed through shared memory."""

    name = "reduce_column"

    def plan(self) -> None:
        if self.dims.is_row_reduction:
            raise self.shape_error("it is a row reduction, not a column one")
        major, reduced, minor = self.dims.dimensions
        self.vector_size = vector_size_for(
            self.computation, self.all_heroes, minor, TILE, variadic=True
        )
        self._fit_tiles()
        self.threads = TILE * TILE
        if self.threads > self.target.threads_per_block_limit:
            raise self.shape_error(
                f"its {TILE} x {TILE} thread tile exceeds the {self.target.arch} limit of"
                f" {self.target.threads_per_block_limit} threads per block"
            )
        self.rows_per_thread = -(-reduced // TILE)
        self.blocks_per_row = -(-minor // (TILE * self.vector_size))
        self.blocks = major * self.blocks_per_row

    def _tile_bytes(self) -> int:
        return TILE * (TILE * self.vector_size + 1) * self.tile_element_bytes()

    def _fit_tiles(self) -> None:
        """Fewer columns a thread until every hero's tile fits the block's shared memory.

        A tile holds a thread's partials for each of its ``vector_size`` columns: three
        f32 sums of bf16 columns four at a time took 48.4 KiB, over the 48 KiB a block
        has (a ResNet-50 step's BatchNorm gradient: ptxas refused the kernel). Two at a
        time they take 24.4 KiB."""
        limit = self.target.shared_memory_per_block
        while self.vector_size > 1 and self._tile_bytes() > limit:
            self.vector_size //= 2
        if self._tile_bytes() > limit:
            raise self.shape_error(
                f"its shared-memory tiles take {self._tile_bytes()} bytes, over the"
                f" {limit} a {self.target.arch} block has"
            )

    def _column(self, tile_column) -> object:
        return (BLOCK % self.blocks_per_row) * TILE + tile_column

    def input_map(self) -> ThreadMap:
        _, reduced, minor = self.dims.dimensions
        v = self.vector_size
        major_id = BLOCK // self.blocks_per_row
        row = THREAD // TILE + sym(0) * TILE
        column = self._column(THREAD % TILE)
        results = []
        for vi in range(v):
            results.extend([major_id, row, column * v + vi])
        return ThreadMap(
            self.threads,
            self.blocks,
            (self.rows_per_thread,),
            tuple(results),
            ((row, Interval(0, reduced - 1)), (column, Interval(0, minor // v - 1))),
        )

    def combine(self, state: GroupState) -> list[ir.Value]:
        v = self.vector_size
        y, x = THREAD // TILE, THREAD % TILE
        tiles = state.tiles((TILE, TILE * v + 1))
        for vi in range(v):
            values = {id(h): state.partials[id(h)][vi] for h in state.heroes}
            state.write_tiles(tiles, values, state.apply([x, vi * TILE + y]))
        tiles = state.sync(tiles)
        major_id = BLOCK // self.blocks_per_row
        minor = self.dims.dimensions[2]
        for vi in range(v):
            values = state.read_tiles(tiles, state.apply([y, vi * TILE + x]))
            reduced = state.shuffle(values, LOGICAL_WARP_SIZE // 2)
            column = self._column(y)
            kept = major_id * minor + column * v + vi
            owner = [(x, Interval(0, 0)), (column, Interval(0, minor // v - 1))]
            state.write_results(reduced, kept, owner)
        return state.outputs


class SmallColumnReductionEmitter(ReductionEmitterBase):
    """Column reductions whose kept minor dimension divides the warp."""

    name = "reduce_column_small"

    def plan(self) -> None:
        if self.dims.is_row_reduction:
            raise self.shape_error("it is a row reduction, not a column one")
        major, reduced, minor = self.dims.dimensions
        threads = 128
        if threads % minor:
            raise self.shape_error(
                f"its kept minor dimension {minor} does not divide the block's {threads}"
                " threads, so a thread would not keep to one column",
            )
        vector = vector_size_for(self.computation, self.all_heroes, reduced * minor, TILE)
        shared_rows = vector * threads // minor
        while shared_rows > TILE and vector > 1:
            vector //= 2
            shared_rows //= 2
        if shared_rows > TILE:
            threads //= shared_rows // TILE
            shared_rows = TILE
        self.vector_size = vector
        self.threads = threads
        self.shared_rows = shared_rows
        self.blocks = major
        self.loop_size = -(-(reduced * minor) // (vector * threads))

    def input_map(self) -> ThreadMap:
        _, reduced, minor = self.dims.dimensions
        v = self.vector_size
        base = THREAD * v + sym(0) * (v * self.threads)
        results = []
        for vi in range(v):
            linear = base + vi
            results.extend([BLOCK, linear // minor, linear % minor])
        return ThreadMap(
            self.threads,
            self.blocks,
            (self.loop_size,),
            tuple(results),
            ((base, Interval(0, reduced * minor - 1)),),
        )

    def combine(self, state: GroupState) -> list[ir.Value]:
        v = self.vector_size
        minor = self.dims.dimensions[2]
        padding = (
            0 if (self.threads == LOGICAL_WARP_SIZE and v == 1) else -(-minor // (self.threads * v))
        )
        tiles = state.tiles((self.shared_rows, minor + padding))
        for vi in range(v):
            position = THREAD * v + vi
            values = {id(h): state.partials[id(h)][vi] for h in state.heroes}
            state.write_tiles(tiles, values, state.apply([position // minor, position % minor]))
        tiles = state.sync(tiles)
        for vi in range(v):
            position = THREAD + vi * self.threads
            column = position // self.shared_rows
            values = state.read_tiles(tiles, state.apply([position % self.shared_rows, column]))
            reduced = state.shuffle(values, self.shared_rows // 2)
            kept = BLOCK * minor + column
            state.write_results(reduced, kept, [(THREAD % self.shared_rows, Interval(0, 0))])
        return state.outputs
