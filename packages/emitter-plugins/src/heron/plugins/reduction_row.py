"""Row and multi-row reductions: the reduced dimension is the minor (contiguous) one.

Row (XLA's ``RowReductionFusion``): ``threads_reduced`` threads (a multiple
of the warp) walk a row with a stride, reading ``vector_size`` neighbours at
a time; one warp shuffle reduces each warp to one value; when a row has
several warps, lane 0 of each writes it to shared memory, and after a barrier
the first warp of the row reduces those (another shuffle). Small rows leave
room in the block for several rows (``threads_kept``, up to 256 threads).

Multi-row (XLA's ``MultiRowReductionFusion``): a row (a power of two of at
most warp * vector_size elements) is one segment of ``R / vector_size`` lanes;
the shuffle reduces within segments only, and lane 0 of each segment writes.
No shared memory. The vector size is the analysis's (hero selection chose
the variant with it), so a segment spans at most the target's warp: up to 64
lanes on a 64-lane wavefront, where the lowering shuffles across the whole
wavefront.
"""

from __future__ import annotations

from mlir import ir

from heron.indexing import Interval
from heron.plugins.reduction_base import (
    BLOCK,
    LOGICAL_WARP_SIZE,
    MAX_ROW_THREADS,
    THREAD,
    THREADS_PER_BLOCK_TARGET,
    GroupState,
    ReductionEmitterBase,
    ThreadMap,
    sym,
    vector_size_for,
)

__all__ = ["MultiRowReductionEmitter", "RowReductionEmitter"]


def _round_up(value: int, multiple: int) -> int:
    return -(-value // multiple) * multiple


def _threads_kept(kept: int, threads_reduced: int) -> int:
    if kept * threads_reduced <= THREADS_PER_BLOCK_TARGET:
        return kept
    return max(1, THREADS_PER_BLOCK_TARGET // threads_reduced)


class RowReductionEmitter(ReductionEmitterBase):
    """Warp shuffles along rows, shared memory between the warps of a row."""

    name = "reduce_row"

    def plan(self) -> None:
        if not self.dims.is_row_reduction:
            raise self.shape_error("it is a column reduction, not a row one")
        _, kept, minor = self.dims.dimensions
        reduced_threads = min(MAX_ROW_THREADS, _round_up(-(-minor // 16), LOGICAL_WARP_SIZE))
        kept_threads = 1
        if reduced_threads * 2 <= THREADS_PER_BLOCK_TARGET:
            kept_threads = _threads_kept(kept, reduced_threads)
        self.vector_size = vector_size_for(
            self.computation, self.all_heroes, minor, reduced_threads
        )
        self.reduced_threads = reduced_threads
        self.kept_threads = kept_threads
        # One block covers whole rows (no atomics): the tile is as long as the row.
        self.minor_tile = -(-(minor // self.vector_size) // reduced_threads)
        self.threads = kept_threads * reduced_threads
        self.blocks = -(-kept // kept_threads)
        self.warps_per_row = reduced_threads // LOGICAL_WARP_SIZE
        self.vector_in_loop = True

    def input_map(self) -> ThreadMap:
        major, kept, minor = self.dims.dimensions
        v = self.vector_size
        kept_id = THREAD // self.reduced_threads
        reduced_id = THREAD % self.reduced_threads
        row = BLOCK * self.kept_threads + kept_id
        column = sym(1) * self.reduced_threads + reduced_id
        return ThreadMap(
            self.threads,
            self.blocks,
            (major, self.minor_tile, v),
            (sym(0), row, column * v + sym(2)),
            ((row, Interval(0, kept - 1)), (column, Interval(0, minor // v - 1))),
        )

    def combine(self, state: GroupState) -> list[ir.Value]:
        reduced = self._partials_combined(state)
        reduced = state.shuffle(reduced, LOGICAL_WARP_SIZE // 2)
        reduced_id = THREAD % self.reduced_threads
        kept_id = THREAD // self.reduced_threads
        if self.warps_per_row > 1:
            width = self.warps_per_row + (1 if self.warps_per_row % LOGICAL_WARP_SIZE == 0 else 0)
            tiles = state.tiles((self.kept_threads, width))
            write_index = state.apply([kept_id, reduced_id // LOGICAL_WARP_SIZE])
            lane_zero = state.condition([(THREAD % LOGICAL_WARP_SIZE, Interval(0, 0))])
            state.write_tiles(tiles, reduced, write_index, lane_zero)
            tiles = state.sync(tiles)
            read_index = state.apply([kept_id, reduced_id % LOGICAL_WARP_SIZE])
            has_value = state.condition([(reduced_id, Interval(0, self.warps_per_row - 1))])
            reduced = state.read_tiles(tiles, read_index, has_value)
            reduced = state.shuffle(reduced, LOGICAL_WARP_SIZE // 2)
        row = BLOCK * self.kept_threads + kept_id
        state.write_results(reduced, row, [(reduced_id, Interval(0, 0))])
        return state.outputs

    def _partials_combined(self, state: GroupState) -> dict[int, list[ir.Value]]:
        """A thread's vector-element partials combined into one value per hero leaf."""
        combined = {}
        for hero in state.heroes:
            values = state.partials[id(hero)][0]
            for more in state.partials[id(hero)][1:]:
                values = state.combine_values(hero, list(values), list(more))
            combined[id(hero)] = list(values)
        return combined


class MultiRowReductionEmitter(RowReductionEmitter):
    """Several rows per warp, each reduced by a shuffle within its lane segment."""

    name = "reduce_multirow"

    def plan(self) -> None:
        vector = self.reduction.vector_size
        if not self.dims.is_row_reduction or vector is None:
            raise self.shape_error(
                f"hero selection chose {self.analysis.kind!r}, not a multi-row reduction with"
                " its vector size"
            )
        _, kept, minor = self.dims.dimensions
        self.vector_size = vector
        self.reduced_threads = minor // vector
        self.kept_threads = _threads_kept(kept, self.reduced_threads)
        self.threads = self.kept_threads * self.reduced_threads
        self.blocks = -(-kept // self.kept_threads)
        self.minor_tile = 1
        self.warps_per_row = 1
        self.vector_in_loop = True

    def input_map(self) -> ThreadMap:
        major, kept, _ = self.dims.dimensions
        v = self.vector_size
        row = BLOCK * self.kept_threads + THREAD // self.reduced_threads
        column = THREAD % self.reduced_threads
        return ThreadMap(
            self.threads,
            self.blocks,
            (major, v),
            (sym(0), row, column * v + sym(1)),
            ((row, Interval(0, kept - 1)),),
        )

    def combine(self, state: GroupState) -> list[ir.Value]:
        reduced = self._partials_combined(state)
        reduced = state.shuffle(reduced, self.reduced_threads // 2)
        row = BLOCK * self.kept_threads + THREAD // self.reduced_threads
        state.write_results(reduced, row, [(THREAD % self.reduced_threads, Interval(0, 0))])
        return state.outputs
