"""Tree reduction rewriter: a reduction too long for one block becomes two (issue 29).

A reduce's emitter gives each output element (or each row of them) to one
block, which sums its whole row or column. A reduction to a scalar of 256M
elements was one block of 512 threads on a 132-SM H100: 60x slower than
XLA's. XLA:GPU's ``TreeReductionRewriter`` splits every reduction longer than
its emitters take in one block into two reductions, and so does this pass,
with XLA's rules (so that heron launches what XLA launches):

- **row** (the reduced dimensions the most minor: ``[K, R]`` after collapsing
  adjacent dimensions, ``K`` possibly absent; or ``[B, K, R]`` with a batch ``B``
  of at most :data:`BATCH_BOUND` reduced too): when ``R`` exceeds
  :func:`row_bound`, ``R`` becomes ``[k1, k2]`` (:func:`split_factors`, padded
  with the init value when ``k1 * k2`` exceeds ``R``): the first reduce sums the
  ``k2``-long minor runs (and the batch), the second the ``k1`` partial sums;
- **column** (``[K1, R, K2]``, ``K2`` present): when ``R`` exceeds
  :func:`column_bound`, the same split, the first reduce again over the minor
  ``k2`` part (keeping ``k1 * K2`` columns), the second over ``k1``;
- **batched row** (``[B, K, R]``): when ``B`` exceeds :data:`BATCH_BOUND`,
  ``R`` is reduced first, then ``B`` (each new reduce is looked at again).

An input of another layout than row-major is looked at as the row-major array its
bytes are (a bitcast), its reduced dimensions among those, as XLA normalises a
reduction's layout before its rewriter runs (ViT's bias gradients read through a
transpose that only relabels dimensions were one kernel of 96 blocks, XLA's two of
3,072 and 6).

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
    "split_factors",
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


def split_factors(length: int, bound: int, *, row: bool) -> tuple[int, int]:
    """``(k1, k2)``: a reduced run of ``length`` as ``[k1, k2]`` (``k1 * k2 - length``
    elements of padding), the minor ``k2`` reduced first. XLA's choice, so that heron
    launches XLA's kernels: ``k2`` near ``sqrt(length)`` (at most ``bound``, what one block
    takes), searched down to half of that for the least padding, a power of two on ties; the
    two then swap for a column (the first kernel reads the longer runs) and for a row where
    that keeps the minor part even (vectorised loads), if the outer part still fits a block.
    """
    k2 = min(math.isqrt(length), bound)
    padding = -length % k2
    k1 = (length + padding) // k2
    for size in range(k2 - 1, k2 // 2, -1):
        pad = -length % size
        if pad < padding or (pad == padding and size & (size - 1) == 0):
            padding, k1 = pad, (length + pad) // size
    k2 = (length + padding) // k1
    if k1 <= bound and (not row or _row_swap(k1, k2, length)):
        return k2, k1
    return k1, k2


def _row_swap(k1: int, k2: int, length: int) -> bool:
    """Whether a row split is better with its parts swapped (``k1 >= k2``): keep an even
    minor part where the row could load two elements at a time."""
    if k2 % 2 == 0 and length % 2 == 0:
        return k2 * 2 < k1 or k1 % 2 == 0
    return length % 2 == 0 or k1 % 2 != 0


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
        if not all(_row_major(leaf) for leaf in reduce.shape.leaves()):
            return None
        reduced = set(reduce.attributes.get("dimensions", ()))
        if not all(_row_major(i.shape) for i in inputs):
            physical = self._physical(reduce, inputs, reduced)
            if physical is None:
                return None
            inputs, reduced = physical
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
        if pattern == (True, False, True):
            if sizes[0] > BATCH_BOUND:
                return self._split_batch(reduce, inputs, inits, sizes)
            if sizes[2] > row_bound(self.target):
                return self._split_run(reduce, inputs, inits, sizes, 2, row=True)
        return None

    def _physical(
        self, reduce: Instruction, inputs: list[Instruction], reduced: set[int]
    ) -> tuple[list[Instruction], set[int]] | None:
        """Inputs of another layout as the row-major arrays their bytes are (bitcasts),
        and the reduced dimensions among those, as XLA normalises a reduction's layout
        before splitting it: a bias gradient read through a transpose that only
        relabels dimensions (``bf16[32,197,12,64]{1,3,2,0}``, p's ``[32,12,64,197]``)
        summed over batch and tokens is a batched row reduction ``[32, 768, 197]``. None
        where the inputs' layouts differ or the kept dimensions would come out in
        another order than the (row-major) result has them."""
        first = inputs[0].array_shape
        if any(tuple(i.array_shape.minor_to_major) != first.minor_to_major for i in inputs):
            return None
        order = list(reversed(first.minor_to_major))  # major to minor
        kept = [d for d in order if d not in reduced]
        if kept != sorted(kept):
            return None
        dims = [first.dims[d] for d in order]
        bitcasts = [
            self.add("bitcast", _array(i.array_shape, dims), [i], like=reduce, suffix="bitcast")
            for i in inputs
        ]
        return bitcasts, {position for position, d in enumerate(order) if d in reduced}

    def _reduce(
        self,
        like: Instruction,
        operands: list[Instruction],
        inits,
        dims: list[int],
        reduced: int | tuple[int, ...],
    ) -> Instruction:
        """``reduce(operands) over reduced`` with ``like``'s reducer, row-major."""
        over = (reduced,) if isinstance(reduced, int) else reduced
        kept = [size for d, size in enumerate(dims) if d not in over]
        leaves = [_array(o.array_shape, kept) for o in operands]
        shape = leaves[0] if len(leaves) == 1 else TupleShape(tuple(leaves))
        attributes = dict(like.attributes)
        attributes["dimensions"] = over
        return self.add("reduce", shape, [*operands, *inits], attributes, like=like, suffix="split")

    def _bitcast(self, like: Instruction, value: Instruction, dims: list[int]) -> Instruction:
        if list(value.array_shape.dims) == dims:
            return value
        return self.add(
            "bitcast", _array(value.array_shape, dims), [value], like=like, suffix="bitcast"
        )

    def _split_run(self, reduce, inputs, inits, sizes: list[int], at: int, *, row: bool):
        """Split run ``at`` (the reduced one) of the collapsed ``sizes`` into ``[k1, k2]``;
        a batch run (run 0 of ``[B, K, R]``) is reduced with the ``k2`` part."""
        length = sizes[at]
        bound = row_bound(self.target) if row else column_bound(self.target)
        k1, k2 = split_factors(length, bound, row=row)
        padded = k1 * k2
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
            pieces.append(self._bitcast(reduce, flat, [*sizes[:at], k1, k2, *sizes[at + 1 :]]))
        dims = [*sizes[:at], k1, k2, *sizes[at + 1 :]]
        batch = (0,) if row and len(sizes) == 3 else ()
        first = (*batch, at + 1)
        partial = self._reduce(reduce, pieces, inits, dims, first)
        rest = [size for d, size in enumerate(dims) if d not in first]
        final = self._reduce(reduce, self._leaves(reduce, partial), inits, rest, at - len(batch))
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
