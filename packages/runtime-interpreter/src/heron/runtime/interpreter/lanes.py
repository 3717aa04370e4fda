"""Lanes: the threads of a batch of blocks, one numpy element each.

The interpreter runs a launch in batches of whole blocks; within a batch,
every SSA value is a numpy array with one element per thread (a *lane*),
vector values with the vector's shape as trailing axes, or a 0-d array when
every thread holds the same value (constants, and arithmetic on them).
Lane ``k`` of a batch is thread ``k % T`` of the batch's block ``k // T``
(``T`` threads a block), threads numbered x fastest, then y, then z, and
blocks likewise; a warp is 32 consecutive threads of one block (64 on
AMD's wavefronts when a launch asks for it), as on the hardware.
"""

from __future__ import annotations

import functools

import attrs
import numpy as np

from heron.runtime.core.device import Dim3

__all__ = ["LaneSpace", "batches"]


@attrs.frozen
class LaneSpace:
    grid: Dim3
    block: Dim3
    #: Linear index (x fastest) of the batch's first block, and the batch's block count.
    first_block: int
    block_count: int
    warp_size: int = 32

    @functools.cached_property
    def threads_per_block(self) -> int:
        return self.block[0] * self.block[1] * self.block[2]

    @functools.cached_property
    def size(self) -> int:
        return self.block_count * self.threads_per_block

    @functools.cached_property
    def thread_linear(self) -> np.ndarray:
        """Each lane's thread index within its block (x fastest)."""
        return np.tile(np.arange(self.threads_per_block, dtype=np.int64), self.block_count)

    @functools.cached_property
    def block_in_batch(self) -> np.ndarray:
        """Each lane's block, counted from the batch's first block."""
        return np.repeat(np.arange(self.block_count, dtype=np.int64), self.threads_per_block)

    @functools.cached_property
    def block_linear(self) -> np.ndarray:
        return self.block_in_batch + self.first_block

    def thread_id(self, dimension: int) -> np.ndarray:
        return _unravel(self.thread_linear, self.block, dimension)

    def block_id(self, dimension: int) -> np.ndarray:
        return _unravel(self.block_linear, self.grid, dimension)

    @functools.cached_property
    def lane_in_warp(self) -> np.ndarray:
        return self.thread_linear % self.warp_size

    @functools.cached_property
    def warp_in_batch(self) -> np.ndarray:
        """A number for each lane's warp, unique within the batch."""
        warps_per_block = -(-self.threads_per_block // self.warp_size)
        return self.block_in_batch * warps_per_block + self.thread_linear // self.warp_size

    def describe(self, lane: int) -> str:
        """``block (3, 0, 0) thread (17, 0, 0)`` for lane ``lane``."""
        block = tuple(int(self.block_id(d)[lane]) for d in range(3))
        thread = tuple(int(self.thread_id(d)[lane]) for d in range(3))
        return f"block {block} thread {thread}"


def _unravel(linear: np.ndarray, sizes: Dim3, dimension: int) -> np.ndarray:
    if dimension == 0:
        return linear % sizes[0]
    if dimension == 1:
        return (linear // sizes[0]) % sizes[1]
    return linear // (sizes[0] * sizes[1])


def batches(grid: Dim3, block: Dim3, max_lanes: int, warp_size: int = 32):
    """LaneSpaces covering the grid in order, each of at most ``max_lanes`` lanes (or one block)."""
    threads = block[0] * block[1] * block[2]
    blocks = grid[0] * grid[1] * grid[2]
    per_batch = max(1, max_lanes // threads)
    for first in range(0, blocks, per_batch):
        yield LaneSpace(grid, block, first, min(per_batch, blocks - first), warp_size)
