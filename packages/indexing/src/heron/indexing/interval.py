"""Closed integer intervals and their arithmetic: the ranges of index variables.

``Interval(lo, hi)`` holds every integer from ``lo`` to ``hi`` inclusive, the
way the seeds write domains (``th_x in [0, 127]``). An interval with
``lo > hi`` is empty. Arithmetic gives the tightest interval containing every
result, which is what range analysis of affine expressions needs.
"""

from __future__ import annotations

import attrs


@attrs.frozen
class Interval:
    lower: int
    upper: int

    @property
    def is_empty(self) -> bool:
        return self.lower > self.upper

    @property
    def is_point(self) -> bool:
        return self.lower == self.upper

    @property
    def size(self) -> int:
        """Number of integers in the interval (0 when empty)."""
        return max(0, self.upper - self.lower + 1)

    def contains(self, value: int) -> bool:
        return self.lower <= value <= self.upper

    def contains_interval(self, other: Interval) -> bool:
        return other.is_empty or (self.lower <= other.lower and other.upper <= self.upper)

    def intersect(self, other: Interval) -> Interval:
        return Interval(max(self.lower, other.lower), min(self.upper, other.upper))

    def union(self, other: Interval) -> Interval:
        """The smallest interval holding both."""
        if self.is_empty:
            return other
        if other.is_empty:
            return self
        return Interval(min(self.lower, other.lower), max(self.upper, other.upper))

    def __add__(self, other: Interval) -> Interval:
        return Interval(self.lower + other.lower, self.upper + other.upper)

    def __mul__(self, other: Interval) -> Interval:
        products = (
            self.lower * other.lower,
            self.lower * other.upper,
            self.upper * other.lower,
            self.upper * other.upper,
        )
        return Interval(min(products), max(products))

    def floordiv(self, divisor: int) -> Interval:
        """Range of ``x floordiv divisor`` for x in the interval (divisor != 0)."""
        a, b = self.lower // divisor, self.upper // divisor
        return Interval(min(a, b), max(a, b))

    def ceildiv(self, divisor: int) -> Interval:
        a, b = -((-self.lower) // divisor), -((-self.upper) // divisor)
        return Interval(min(a, b), max(a, b))

    def __str__(self) -> str:
        return f"[{self.lower}, {self.upper}]"
