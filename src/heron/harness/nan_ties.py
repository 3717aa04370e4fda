"""Arg-reductions over several NaNs: which NaN's index a kernel may give.

``jnp.argmax`` is a variadic reduce of (values, indices) whose reducer keeps the
first operand when both values are NaN (``x > y or x != x``): over two NaNs it is
not commutative, so the index it ends with depends on the order the elements are
combined in. The reference evaluator combines them in index order and gives the
first NaN's index, as XLA:CPU does; a GPU kernel combines each thread's strided
elements, then the threads' partial results in a tree, and ends with another NaN's
index, as XLA:GPU's kernels do. HLO leaves the order open, so both are right.

:func:`nan_ties` finds such an output and the NaNs of each of its rows, and
:class:`NanTies` accepts a kernel's index where the kernel's and the reference's
indices both name a NaN of the row: anything else (a number's index, an index
outside the row) still differs. The reducer itself is asked whether a pair of NaNs
is order-dependent, so a reducer that breaks such ties by index (commutative) keeps
the exact comparison.
"""

from __future__ import annotations

import attrs
import numpy as np

from heron.harness.reference_values import value_of
from heron.hlo.errors import HloError
from heron.hlo.ir import Computation, Instruction
from heron.hlo.shapes import ArrayShape

__all__ = ["NanTies", "nan_ties"]


@attrs.frozen(eq=False)
class NanTies:
    """For each element of an arg-reduction's index output (row-major), the indices of
    its row (``indices[o, k]``) and which of them hold a NaN (``nan[o, k]``)."""

    indices: np.ndarray
    nan: np.ndarray

    def accepts(self, kernel: np.ndarray, reference: np.ndarray) -> np.ndarray:
        """Per element of the flat outputs: both indices name a NaN of the element's row."""
        kernel = np.asarray(kernel).reshape(-1, 1)
        reference = np.asarray(reference).reshape(-1, 1)
        if kernel.shape[0] != self.indices.shape[0]:
            return np.zeros(kernel.shape[0], np.bool_)
        at_nan = self.nan & (self.indices == kernel)
        return at_nan.any(axis=1) & (self.nan & (self.indices == reference)).any(axis=1)


def nan_ties(source: Instruction, computation: Computation, args, leaf: int = 0) -> NanTies | None:
    """The NaN ties of an output of the fused ``computation`` given ``args``: ``source``'s
    result, or its ``leaf``-th when it is a tuple (a multi-output fusion's reduce), when
    that is the index output of an arg-reduction (a reduce of float values and integer
    indices whose reducer keeps either of two NaNs by their order) and some row holds
    two NaNs or more; else None."""
    if source.opcode == "get-tuple-element":
        source, leaf = source.operands[0], int(source.attr("index"))
    reduce = source
    if reduce.opcode != "reduce" or len(reduce.operands) != 4 or leaf != 1:
        return None
    values, indices = reduce.operands[:2]
    value_type = values.array_shape.element_type
    index_type = indices.array_shape.element_type
    if not value_type.is_floating or not index_type.is_integral:
        return None
    if not _nan_pairs_depend_on_order(reduce.called("to_apply"), value_type, index_type):
        return None
    dims = tuple(int(d) for d in reduce.attr("dimensions"))
    try:
        value_array = np.asarray(value_of(computation, values, args))
        index_array = np.asarray(value_of(computation, indices, args))
    except HloError:  # e.g. over the memory budget: the exact comparison
        return None
    kept = [d for d in range(value_array.ndim) if d not in dims]
    rows = int(np.prod([value_array.shape[d] for d in kept], dtype=np.int64))
    order = [*kept, *dims]
    nan = np.isnan(value_array.astype(np.float32)).transpose(order).reshape(rows, -1)
    if not (nan.sum(axis=1) >= 2).any():
        return None
    return NanTies(index_array.transpose(order).reshape(rows, -1), nan)


def _nan_pairs_depend_on_order(reducer: Computation, value_type, index_type) -> bool:
    """Whether ``reducer`` of (value, index) pairs gives another index for two NaNs
    when the pairs are swapped: the order the kernel combines them in decides."""
    from heron.hlo.evaluator import evaluate_computation

    if len(reducer.parameters) != 4 or any(
        not isinstance(p.shape, ArrayShape) or p.array_shape.rank for p in reducer.parameters
    ):
        return False
    nan = np.array(np.nan, value_type.numpy_dtype)
    first, second = np.array(0, index_type.numpy_dtype), np.array(1, index_type.numpy_dtype)
    try:
        forward = evaluate_computation(reducer, [nan, first, nan, second])
        backward = evaluate_computation(reducer, [nan, second, nan, first])
    except HloError:
        return False
    return int(np.asarray(forward[1])) != int(np.asarray(backward[1]))
