"""Tree reduction rewriter: a reduction too long for one block becomes two (issue 29).

A reduce's emitter gives each output element (or each row of them) to one
block, which sums its whole row or column. A reduction to a scalar of 256M
elements was one block of 512 threads on a 132-SM H100: 60x slower than
XLA's. XLA:GPU's ``TreeReductionRewriter`` splits every reduction longer than
its emitters take in one block into two reductions, and so does this pass,
with XLA's rules (so that heron launches what XLA launches):

- **row** (the reduced dimensions the most minor: ``[K, R]`` after collapsing
  adjacent dimensions, ``K`` possibly absent): when ``R`` exceeds
  :func:`row_bound`, ``R`` is split into ``[R / n, n]`` with ``n =
  ceil(sqrt(R))`` (padded with the init value to ``n * n`` when ``n`` does not
  divide it): the first reduce sums the ``n``-long rows (``K * R / n`` of them,
  enough blocks to fill the device), the second the ``R / n`` partial sums;
- **column** (``[K1, R, K2]``, ``K2`` present): when ``R`` exceeds
  :func:`column_bound`, the same split, the first reduce over the ``R / n``
  part (keeping ``n * K2`` columns), the second over ``n``;
- **batched row** (``[R1, K, R2]``): when ``R1`` exceeds
  :data:`BATCH_BOUND`, ``R2`` is reduced first, then ``R1`` (each new reduce
  is looked at again).

The split changes the order a float sum is taken in, which the check's
reassociation bounds allow (any order is within ``(n - 1) u sum|x|``); min,
max and integer reductions give the same bits. Every shape it makes is
row-major, its reshapes bitcasts: it runs after layout assignment, as XLA's.
"""

from __future__ import annotations

import math

from heron.hlo.attributes import PadDim, PaddingConfig
from heron.hlo.ir import Instruction, Module
from heron.hlo.passes.manager import HloPass
from heron.hlo.passes.rewrite import Inserter, rewrite_each
from heron.hlo.shapes import ArrayShape, TupleShape
from heron.target import Target

__all__ = [
    "BATCH_BOUND",
    "column_bound",
    "row_bound",
    "split_long_reductions",
    "tree_reduction_rewriter",
]

#: Rows of a batched row reduction one block takes (XLA's
#: ``BatchedReductionRaceFreeBound``).
BATCH_BOUND = 8
#: Elements each thread of a row reduction's block sums (XLA's row tile).
_ROW_TILE = 16
#: Rows each thread of a column reduction's block sums (XLA's column tile).
_COLUMN_TILE = 128


def row_bound(target: Target) -> int:
    """The longest row one block reduces: a full block's threads (1024 on CUDA, as XLA's
    ``MinThreadsXRowReduction``) times :data:`_ROW_TILE` elements each: 16384."""
    return target.threads_per_block_limit * _ROW_TILE


def column_bound(target: Target) -> int:
    """The longest column one block reduces: a warp's lanes times :data:`_COLUMN_TILE`
    rows (XLA's ``WarpSize() * tile``): 4096 on CUDA."""
    return target.warp_size * _COLUMN_TILE


def _row_major(shape: object) -> bool:
    return isinstance(shape, ArrayShape) and shape.is_row_major


def _array(like: ArrayShape, dims: list[int]) -> ArrayShape:
    return ArrayShape.row_major(like.element_type, tuple(dims))


def _runs(dims: tuple[int, ...], reduced: set[int]) -> list[tuple[bool, int]]:
    """Adjacent dimensions merged: (reduced, size) runs, size-1 dimensions dropped."""
    runs: list[tuple[bool, int]] = []
    for d, size in enumerate(dims):
        if size == 1:
            continue
        is_reduced = d in reduced
        if runs and runs[-1][0] == is_reduced:
            runs[-1] = (is_reduced, runs[-1][1] * size)
        else:
            runs.append((is_reduced, size))
    return runs


class _Splitter:
    """Rewrites the reduces of one computation (see the module docstring)."""

    def __init__(self, inserter: Inserter, target: Target) -> None:
        self.add = inserter.add
        self.target = target

    def split(self, reduce: Instruction) -> Instruction | None:
        """The two reduces (and bitcasts) computing ``reduce``, or None to keep it."""
        count = len(reduce.operands) // 2
        inputs, inits = reduce.operands[:count], reduce.operands[count:]
        if not all(_row_major(i.shape) for i in inputs):
            return None
        if not all(_row_major(leaf) for leaf in reduce.shape.leaves()):
            return None
        reduced = set(reduce.attributes.get("dimensions", ()))
        runs = _runs(inputs[0].array_shape.dims, reduced)
        pattern = tuple(is_reduced for is_reduced, _ in runs)
        sizes = [size for _, size in runs]
        if pattern in ((True,), (False, True)):
            if sizes[-1] <= row_bound(self.target):
                return None
            return self._split_run(reduce, inputs, inits, sizes, len(sizes) - 1, row=True)
        if pattern in ((True, False), (False, True, False)):
            at = pattern.index(True)
            if sizes[at] <= column_bound(self.target):
                return None
            return self._split_run(reduce, inputs, inits, sizes, at, row=False)
        if pattern == (True, False, True) and sizes[0] > BATCH_BOUND:
            return self._split_batch(reduce, inputs, inits, sizes)
        return None

    def _reduce(
        self, like: Instruction, operands: list[Instruction], inits, dims: list[int], reduced: int
    ) -> Instruction:
        """``reduce(operands) over {reduced}`` with ``like``'s reducer, row-major."""
        kept = [size for d, size in enumerate(dims) if d != reduced]
        leaves = [_array(o.array_shape, kept) for o in operands]
        shape = leaves[0] if len(leaves) == 1 else TupleShape(tuple(leaves))
        attributes = dict(like.attributes)
        attributes["dimensions"] = (reduced,)
        return self.add("reduce", shape, [*operands, *inits], attributes, like=like, suffix="split")

    def _bitcast(self, like: Instruction, value: Instruction, dims: list[int]) -> Instruction:
        if list(value.array_shape.dims) == dims:
            return value
        return self.add(
            "bitcast", _array(value.array_shape, dims), [value], like=like, suffix="bitcast"
        )

    def _split_run(self, reduce, inputs, inits, sizes: list[int], at: int, *, row: bool):
        """Split run ``at`` (the reduced one) of the collapsed ``sizes`` in two."""
        length = sizes[at]
        n = math.isqrt(length - 1) + 1  # ceil(sqrt(length))
        padded = length if length % n == 0 else n * n
        outer = padded // n
        pieces = []
        for value, init in zip(inputs, inits, strict=True):
            flat = self._bitcast(reduce, value, sizes)
            if padded != length:
                config = [PadDim(0, 0)] * len(sizes)
                config[at] = PadDim(0, padded - length)
                wide = [*sizes[:at], padded, *sizes[at + 1 :]]
                flat = self.add(
                    "pad",
                    _array(value.array_shape, wide),
                    [flat, init],
                    {"padding": PaddingConfig(tuple(config))},
                    like=reduce,
                    suffix="pad",
                )
            pieces.append(self._bitcast(reduce, flat, [*sizes[:at], outer, n, *sizes[at + 1 :]]))
        dims = [*sizes[:at], outer, n, *sizes[at + 1 :]]
        # a row reduction sums the n-long rows first; a column one the outer part first
        first = at + 1 if row else at
        partial = self._reduce(reduce, pieces, inits, dims, first)
        rest = [size for d, size in enumerate(dims) if d != first]
        partials = self._leaves(reduce, partial)
        final = self._reduce(reduce, partials, inits, rest, at)
        return self._reshaped(reduce, final)

    def _split_batch(self, reduce, inputs, inits, sizes: list[int]):
        """``[R1, K, R2]``: reduce ``R2`` (a row reduction), then ``R1`` (a column one)."""
        pieces = [self._bitcast(reduce, value, sizes) for value in inputs]
        rows = self._reduce(reduce, pieces, inits, sizes, 2)
        final = self._reduce(reduce, self._leaves(reduce, rows), inits, sizes[:2], 0)
        return self._reshaped(reduce, final)

    def _leaves(self, like: Instruction, value: Instruction) -> list[Instruction]:
        """A variadic reduce's results as values (its get-tuple-elements)."""
        if not isinstance(value.shape, TupleShape):
            return [value]
        return [
            self.add("get-tuple-element", leaf, [value], {"index": i}, like=like, suffix="part")
            for i, leaf in enumerate(value.shape.elements)
        ]

    def _reshaped(self, reduce: Instruction, final: Instruction) -> Instruction:
        """``final`` in ``reduce``'s output shape (bitcasts of each result)."""
        if not isinstance(reduce.shape, TupleShape):
            return self._bitcast(reduce, final, list(reduce.array_shape.dims))
        parts = [
            self._bitcast(reduce, leaf, list(target.dims))
            for leaf, target in zip(self._leaves(reduce, final), reduce.shape.elements, strict=True)
        ]
        return self.add("tuple", reduce.shape, parts, like=reduce, suffix="results")


def split_long_reductions(module: Module, target: Target) -> bool:
    """Split every reduce of ``module`` longer than one block takes (module docstring)."""
    return rewrite_each(
        module, "reduce", lambda inserter, reduce: _Splitter(inserter, target).split(reduce)
    )


def tree_reduction_rewriter(target: Target) -> HloPass:
    """The ``tree-reduction-rewriter`` pass for ``target``."""
    return HloPass(
        "tree-reduction-rewriter",
        lambda module: split_long_reductions(module, target),
        "a reduction longer than one block takes becomes two (XLA's TreeReductionRewriter)",
    )
