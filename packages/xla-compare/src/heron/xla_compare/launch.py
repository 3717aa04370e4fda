"""What both sides' kernels share: a launch, and the sizes a comparison reads from it."""

from __future__ import annotations


class LaunchShape:
    """Mixin for a kernel record with ``grid`` and ``block`` (x, y, z) fields."""

    grid: tuple[int, int, int]
    block: tuple[int, int, int]

    @property
    def blocks(self) -> int:
        return self.grid[0] * self.grid[1] * self.grid[2]

    @property
    def threads(self) -> int:
        return self.block[0] * self.block[1] * self.block[2]
