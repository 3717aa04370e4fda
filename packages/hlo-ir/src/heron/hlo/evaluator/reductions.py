"""Operations that combine values with a called computation.

reduce, reduce-window, select-and-scatter, map and sort all apply a small
scalar computation (reducer, selector, comparator) many times. Here it is
applied to whole arrays at once (``Evaluator.call_vectorized``): one
evaluation of the computation per tree level, window position, merge step or
update round, never one per element. When the computation is a single
recognised binary op (``add(p0, p1)``...) on a numpy-native type, the numpy
ufunc is used directly.

Numerics of ``reduce`` (a documented choice; XLA leaves the order open):
values are combined by a pairwise tree over the reduced elements in
row-major order -- (0,1), (2,3), ... then pairs of pairs, an odd last
element carried up a level -- and the init value is combined last, as the
left operand: ``f(init, tree(values))``. Every step rounds to the element
type, as XLA's reducer does (a bf16 add is a bf16 add). Integer, pred and
max/min reductions, where order cannot change the result, use numpy's own
``ufunc.reduce`` (float max/min then fix the sign of a zero result: XLA
orders -0 below +0, numpy returns whichever zero it met first).

sort: comparators that order by per-operand keys -- ``compare(g(a), g(b))``,
or jax's lexicographic ``or(less_0, and(equal_0, ...))`` chains, g any
elementwise function of one value -- become a stable numpy argsort/lexsort of
the keys g(x) (floats mapped to integers in the comparison's order). Any
other comparator drives a vectorised merge sort (``_merge_sort``); one that
is not a strict weak order falls back to Python's sort per row.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from heron.hlo.attributes import Window
from heron.hlo.element_types import ElementType
from heron.hlo.errors import UnsupportedError
from heron.hlo.evaluator.common import instruction_error
from heron.hlo.evaluator.data_movement import pad_array, required
from heron.hlo.ir import Computation, Instruction, Literal, literals_identical

if TYPE_CHECKING:
    from heron.hlo.evaluator.interpreter import Evaluator

_UFUNCS: dict[str, np.ufunc] = {
    "add": np.add,
    "multiply": np.multiply,
    "maximum": np.maximum,
    "minimum": np.minimum,
    "and": np.bitwise_and,
    "or": np.bitwise_or,
    "xor": np.bitwise_xor,
}


def _native(dtype: np.dtype) -> bool:
    """numpy's own dtypes (ml_dtypes ones go through the elementwise module)."""
    return dtype.kind in "biufc"


def _param_numbers(inst: Instruction) -> list[int | None]:
    return [op.parameter_number if op.opcode == "parameter" else None for op in inst.operands]


def recognize_binary_ufunc(comp: Computation) -> np.ufunc | None:
    """The numpy ufunc ``comp`` computes, if it is one binary op on its two parameters."""
    params = comp.parameters
    root = comp.root_instruction
    if len(params) != 2 or root.opcode not in _UFUNCS or len(root.operands) != 2:
        return None
    if sorted(n for n in _param_numbers(root) if n is not None) != [0, 1]:
        return None
    shapes = [p.shape for p in params] + [root.shape]
    if any(s.is_tuple or not s.is_scalar for s in shapes):
        return None
    types = {s.element_type for s in shapes}
    if len(types) != 1:
        return None
    (et,) = types
    if et.is_token or not _native(et.numpy_dtype):
        return None
    kind = et.numpy_dtype.kind
    if root.opcode in ("and", "or", "xor") and kind not in "biu":
        return None
    if root.opcode in ("add", "multiply") and kind == "b":
        return None
    if root.opcode in ("maximum", "minimum") and kind == "c":
        return None
    return _UFUNCS[root.opcode]


def _orders_zeros(ufunc: np.ufunc | None, dtype: np.dtype) -> bool:
    """maximum/minimum of floats: XLA orders -0 below +0, numpy's result depends on order."""
    return ufunc in (np.maximum, np.minimum) and dtype.kind in "fc"


def float_extreme(ufunc: np.ufunc, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``maximum``/``minimum`` with NaN propagation and -0 < +0, as XLA computes them."""
    result = np.asarray(ufunc(a, b))
    both_zero = (a == 0) & (b == 0)
    if np.any(both_zero):
        negative = (
            np.signbit(a) & np.signbit(b) if ufunc is np.maximum else np.signbit(a) | np.signbit(b)
        )
        zero = np.where(negative, -0.0, 0.0).astype(result.dtype)
        result = np.where(both_zero, zero, result)
    return result


def _extreme_reduce(ufunc: np.ufunc, x: np.ndarray, axes: tuple[int, ...]) -> np.ndarray:
    """``ufunc.reduce`` for float maximum/minimum, with XLA's -0 < +0 among zeros."""
    result = np.asarray(ufunc.reduce(x, axis=axes))
    at_zero = result == 0
    if np.any(at_zero):
        # The extreme is a zero: +0 for maximum if any +0 is there, -0 for minimum
        # if any -0 is there; the other zero otherwise.
        wanted_negative = ufunc is np.minimum
        wanted = np.logical_or.reduce((x == 0) & (np.signbit(x) == wanted_negative), axis=axes)
        sign = np.where(wanted == wanted_negative, -0.0, 0.0).astype(result.dtype)
        result = np.where(at_zero, sign, result)
    return result


class Combiner:
    """``f(lhs..., rhs...)`` of a reducer-like computation, on arrays."""

    def __init__(self, ev: Evaluator, comp: Computation, count: int):
        self.ev = ev
        self.comp = comp
        self.count = count
        self.ufunc = recognize_binary_ufunc(comp) if count == 1 else None

    def __call__(self, lhs: Sequence[np.ndarray], rhs: Sequence[np.ndarray]) -> list[np.ndarray]:
        if self.ufunc is not None:
            if _orders_zeros(self.ufunc, np.asarray(lhs[0]).dtype):
                return [float_extreme(self.ufunc, lhs[0], rhs[0])]
            return [np.asarray(self.ufunc(lhs[0], rhs[0]))]
        result = self.ev.call_vectorized(self.comp, [*lhs, *rhs])
        values = list(result) if isinstance(result, tuple) else [result]
        if len(values) != self.count:
            raise ValueError(
                f"computation '{self.comp.name}' returns {len(values)} value(s),"
                f" {self.count} expected"
            )
        return values


def _take(a: np.ndarray, axis: int, index: slice) -> np.ndarray:
    key = [slice(None)] * a.ndim
    key[axis] = index
    return a[tuple(key)]


def tree_fold(combine: Combiner, arrays: list[np.ndarray], axis: int) -> list[np.ndarray]:
    """Fold ``arrays`` along ``axis`` pairwise: (0,1), (2,3), ...; keeps left-to-right order."""
    while arrays[0].shape[axis] > 1:
        k = arrays[0].shape[axis]
        m = k // 2
        even = [_take(a, axis, slice(0, 2 * m, 2)) for a in arrays]
        odd = [_take(a, axis, slice(1, 2 * m, 2)) for a in arrays]
        merged = combine(even, odd)
        if k % 2:
            merged = [
                np.concatenate([x, _take(a, axis, slice(2 * m, k))], axis=axis)
                for x, a in zip(merged, arrays)
            ]
        arrays = merged
    return [np.take(a, 0, axis=axis) for a in arrays]


def _result(values: Sequence[np.ndarray], inst: Instruction) -> Literal:
    if inst.shape.is_tuple:
        return tuple(values)
    return values[0]


# -- reduce --------------------------------------------------------------------------


def _reduce(ev: Evaluator, inst: Instruction, ops: list[Literal]) -> Literal:
    n = len(ops) // 2
    if n == 0 or len(ops) != 2 * n:
        raise instruction_error(
            inst, f"reduce needs inputs and as many init values, got {len(ops)}"
        )
    inputs, inits = ops[:n], ops[n:]
    dims = sorted(set(required(inst, "dimensions")))
    rank = inputs[0].ndim
    if any(not 0 <= d < rank for d in dims):
        raise instruction_error(inst, f"dimensions={dims} out of range for rank {rank}")
    kept = [d for d in range(rank) if d not in dims]
    out_dims = tuple(inputs[0].shape[d] for d in kept)
    size = math.prod(inputs[0].shape[d] for d in dims)
    combine = Combiner(ev, inst.called("to_apply"), n)

    if size == 0:
        return _result([np.broadcast_to(init, out_dims) for init in inits], inst)
    ufunc = combine.ufunc
    if ufunc is not None and (inputs[0].dtype.kind in "biu" or ufunc in (np.maximum, np.minimum)):
        # Order-independent: numpy's own reduction is exact here.
        if _orders_zeros(ufunc, inputs[0].dtype):
            reduced = _extreme_reduce(ufunc, inputs[0], tuple(dims))
        else:
            reduced = ufunc.reduce(inputs[0], axis=tuple(dims), dtype=inputs[0].dtype)
        return _result(combine([inits[0]], [reduced]), inst)

    if dims == list(range(rank - len(dims), rank)):
        arrays = [x.reshape(out_dims + (size,)) for x in inputs]
        axis = len(out_dims)
    elif dims == list(range(len(dims))):
        arrays = [x.reshape((size,) + out_dims) for x in inputs]
        axis = 0
    else:
        arrays = [np.transpose(x, dims + kept).reshape((size,) + out_dims) for x in inputs]
        axis = 0
    folded = tree_fold(combine, arrays, axis)
    return _result(combine(list(inits), folded), inst)


# -- windows -------------------------------------------------------------------------------


def _window(inst: Instruction, rank: int) -> Window:
    window = required(inst, "window")
    if not isinstance(window, Window) or len(window.dims) != rank:
        raise instruction_error(inst, f"window={window!r} does not fit rank {rank}")
    return window


def window_slices(
    window: Window, out_dims: Sequence[int]
) -> list[tuple[tuple[int, ...], tuple[slice, ...]]]:
    """For each position in the window (row-major): the strided slice of the padded
    input that holds that window element for every output position."""
    result = []
    for kpos in np.ndindex(*(d.size for d in window.dims)):
        key = []
        for k, d, o in zip(kpos, window.dims, out_dims):
            start = k * d.window_dilation
            key.append(slice(start, start + (o - 1) * d.stride + 1, d.stride) if o else slice(0, 0))
        result.append((kpos, tuple(key)))
    return result


def _reduce_window(ev: Evaluator, inst: Instruction, ops: list[Literal]) -> Literal:
    """Each output is ``init`` combined, in window order, with the window's elements.

    Padding and base-dilation holes are not elements: they are skipped (a mask
    keeps the accumulator), as XLA's evaluator does.
    """
    n = len(ops) // 2
    inputs, inits = ops[:n], ops[n:]
    rank = inputs[0].ndim
    window = _window(inst, rank)
    out_dims = next(iter(inst.shape.leaves())).dims
    config = [(d.pad_low, d.pad_high, d.base_dilation - 1) for d in window.dims]
    padded = [pad_array(x, init[()], config) for x, init in zip(inputs, inits)]
    has_holes = any(lo > 0 or hi > 0 or it > 0 for lo, hi, it in config)
    mask = pad_array(np.ones(inputs[0].shape, bool), False, config) if has_holes else None
    combine = Combiner(ev, inst.called("to_apply"), n)
    acc = [np.broadcast_to(init, out_dims) for init in inits]
    for _, key in window_slices(window, out_dims):
        new = combine(acc, [p[key] for p in padded])
        if mask is not None:
            valid = mask[key]
            new = [np.where(valid, a_new, a_old) for a_new, a_old in zip(new, acc)]
        acc = new
    return _result(acc, inst)


def _select_and_scatter(ev: Evaluator, inst: Instruction, ops: list[Literal]) -> Literal:
    """Pick one operand element per window with ``select``; combine the window's
    source value into it with ``scatter``.

    The selected element starts as the window's first valid element; a later
    valid element ``e`` replaces it when ``select(selected, e)`` is false.
    """
    operand, source, init = ops
    window = _window(inst, operand.ndim)
    if any(d.base_dilation != 1 for d in window.dims):
        raise instruction_error(inst, "select-and-scatter with base dilation")
    config = [(d.pad_low, d.pad_high, 0) for d in window.dims]
    padded = pad_array(operand, np.zeros((), operand.dtype)[()], config)
    positions = pad_array(
        np.arange(operand.size, dtype=np.int64).reshape(operand.shape), -1, config
    )
    select = inst.called("select")
    out_dims = source.shape
    best_val: np.ndarray | None = None
    best_pos = np.full(out_dims, -1, dtype=np.int64)
    for _, key in window_slices(window, out_dims):
        cand = padded[key]
        cand_pos = positions[key]
        valid = cand_pos >= 0
        if best_val is None:
            best_val, best_pos = cand, np.where(valid, cand_pos, -1)
            continue
        keep = np.asarray(ev.call_vectorized(select, [best_val, cand]), dtype=bool)
        take = valid & ((best_pos < 0) | ~keep)
        best_val = np.where(take, cand, best_val)
        best_pos = np.where(take, cand_pos, best_pos)
    result = np.full(operand.size, init[()], dtype=init.dtype)
    chosen = best_pos >= 0
    scatter_combine(ev, inst.called("scatter"), [result], best_pos[chosen], [source[chosen]])
    return result.reshape(operand.shape)


# -- combining updates into a buffer (scatter, select-and-scatter) ----------------------


def _is_overwrite(comp: Computation, count: int) -> bool:
    """Whether the combiner returns the update unchanged (``ROOT p1``)."""
    root = comp.root_instruction
    if count == 1:
        return root.opcode == "parameter" and root.parameter_number == 1
    return root.opcode == "tuple" and [
        op.parameter_number if op.opcode == "parameter" else None for op in root.operands
    ] == list(range(count, 2 * count))


def occurrence_rounds(targets: np.ndarray) -> list[np.ndarray]:
    """Split update positions into rounds where each target appears at most once.

    Round r holds, for every target, its r-th update (in update order). Applying
    the rounds in order gives exactly the result of applying updates one by
    one, since updates to different targets do not interact.
    """
    count = targets.size
    order = np.argsort(targets, kind="stable")
    ordered = targets[order]
    first = np.ones(count, dtype=bool)
    first[1:] = ordered[1:] != ordered[:-1]
    group_start = np.maximum.accumulate(np.where(first, np.arange(count), 0))
    rank = np.empty(count, dtype=np.int64)
    rank[order] = np.arange(count) - group_start
    by_round = np.argsort(rank, kind="stable")
    bounds = np.cumsum(np.bincount(rank))
    return np.split(by_round, bounds[:-1])


def scatter_combine(
    ev: Evaluator,
    comp: Computation,
    outs: list[np.ndarray],
    targets: np.ndarray,
    values: list[np.ndarray],
) -> None:
    """``outs[t] = comp(outs[t], v)`` for each (t, v) in order, in place (1-D outs)."""
    if targets.size == 0:
        return
    count = len(outs)
    if _is_overwrite(comp, count):
        # The last update of each target wins.
        _, last_reversed = np.unique(targets[::-1], return_index=True)
        last = targets.size - 1 - last_reversed
        for out, value in zip(outs, values):
            out[targets[last]] = value[last]
        return
    ufunc = recognize_binary_ufunc(comp) if count == 1 else None
    if (
        ufunc is not None
        and outs[0].dtype == values[0].dtype
        and not _orders_zeros(ufunc, outs[0].dtype)
    ):
        ufunc.at(outs[0], targets, values[0])  # sequential, in update order
        return
    combine = Combiner(ev, comp, count)
    for chosen in occurrence_rounds(targets):
        where = targets[chosen]
        new = combine([out[where] for out in outs], [value[chosen] for value in values])
        for out, value in zip(outs, new):
            out[where] = value


# -- map -------------------------------------------------------------------------------------


def _map(ev: Evaluator, inst: Instruction, ops: list[Literal]) -> Literal:
    return ev.call_vectorized(inst.called("to_apply"), ops)


# -- sort ------------------------------------------------------------------------------------


_INT_MAX = {np.dtype(np.int32): np.int32(0x7FFFFFFF), np.dtype(np.int64): np.int64(2**63 - 1)}


def _order_key(x: np.ndarray, compare_type: str) -> np.ndarray | None:
    """An integer array whose ascending order is the order ``compare`` of type
    ``compare_type`` (TOTALORDER, FLOAT, SIGNED, UNSIGNED or "" for the default
    of the element type) puts the values of ``x`` in; None if there is none here."""
    et = ElementType.from_numpy(x.dtype)
    if et.is_pred:
        return x.astype(np.uint8)
    if et.is_integral:
        wanted_signed = {"SIGNED": True, "UNSIGNED": False}.get(compare_type, et.is_signed_integral)
        if compare_type in ("FLOAT", "TOTALORDER"):
            return None
        if et.is_sub_byte:
            if wanted_signed != et.is_signed_integral:
                return None
            return x.astype(np.int8 if et.is_signed_integral else np.uint8)
        if wanted_signed != et.is_signed_integral:
            return x.view(np.dtype(f"{'i' if wanted_signed else 'u'}{x.dtype.itemsize}"))
        return x
    if not et.is_floating or compare_type in ("SIGNED", "UNSIGNED"):
        return None
    wide = x.astype(np.float64 if et is ElementType.F64 else np.float32)
    if compare_type != "TOTALORDER":
        wide = wide + wide.dtype.type(0)  # -0.0 == +0.0 under the partial order
    bits = wide.view(np.int64 if wide.dtype == np.float64 else np.int32)
    return np.where(bits < 0, bits ^ _INT_MAX[bits.dtype], bits)


def _parameters_used(inst: Instruction, memo: dict[int, frozenset[int]]) -> frozenset[int]:
    cached = memo.get(id(inst))
    if cached is not None:
        return cached
    if inst.opcode == "parameter":
        result = frozenset({inst.parameter_number if inst.parameter_number is not None else -1})
    else:
        result = frozenset().union(*(_parameters_used(op, memo) for op in inst.operands))
    memo[id(inst)] = result
    return result


_IGNORED_ATTRIBUTES = frozenset({"metadata"})


def _same_function(a: Instruction, b: Instruction, lhs: int, rhs: int, seen: set) -> bool:
    """Whether the sub-DAG at ``a`` computes of parameter ``lhs`` what ``b`` does of ``rhs``."""
    if a is b or (id(a), id(b)) in seen:
        return True
    if a.opcode != b.opcode or a.shape != b.shape or len(a.operands) != len(b.operands):
        return False
    if a.opcode == "parameter":
        return a.parameter_number == lhs and b.parameter_number == rhs
    keys = set(a.attributes) | set(b.attributes)
    if any(a.attributes.get(k) != b.attributes.get(k) for k in keys - _IGNORED_ATTRIBUTES):
        return False
    if not literals_identical(a.literal, b.literal):
        return False
    seen.add((id(a), id(b)))
    return all(_same_function(x, y, lhs, rhs, seen) for x, y in zip(a.operands, b.operands))


def _compare_key(node: Instruction, count: int) -> tuple[Instruction, int, bool, str] | None:
    """``compare(g(p_2k), g(p_2k+1)), direction=LT|GT``: (g's instruction, k, ascending,
    comparison type)."""
    if node.opcode != "compare" or len(node.operands) != 2:
        return None
    direction = str(node.attributes.get("direction", ""))
    if direction not in ("LT", "GT"):
        return None
    left, right = node.operands
    memo: dict[int, frozenset[int]] = {}
    used_left, used_right = _parameters_used(left, memo), _parameters_used(right, memo)
    if len(used_left) != 1 or len(used_right) != 1:
        return None
    (a,), (b,) = used_left, used_right
    if min(a, b) < 0 or min(a, b) % 2 or abs(a - b) != 1 or max(a, b) >= 2 * count:
        return None
    if not _same_function(left, right, a, b, set()):
        return None
    ascending = (direction == "LT") == (a < b)
    return left, min(a, b) // 2, ascending, str(node.attributes.get("type", ""))


def _is_tie(node: Instruction, order: Instruction) -> bool:
    """``compare(x, y), direction=EQ`` on the operands of ``order`` (same comparison type)."""
    return (
        node.opcode == "compare"
        and str(node.attributes.get("direction", "")) == "EQ"
        and node.attributes.get("type") == order.attributes.get("type")
        and {id(op) for op in node.operands} == {id(op) for op in order.operands}
    )


def lexicographic_keys(
    comp: Computation, count: int
) -> list[tuple[Instruction, int, bool, str]] | None:
    """Recognise comparators that order by keys g_i(operand k_i), lexicographically.

    ``compare(g(p_2k), g(p_2k+1))`` is one key; ``or(less_0, and(equal_0, rest))``
    is key 0 followed by the keys of ``rest`` (jax's multi-key comparator). g may
    be any elementwise function of one parameter (jax canonicalises NaN and -0
    that way); the same g on both sides is checked structurally. Sorting then
    means a stable lexicographic sort by the keys g_i(x).
    """
    if len(comp.parameters) != 2 * count:
        return None
    keys = []
    node = comp.root_instruction
    while node.opcode == "or" and len(node.operands) == 2:
        for order, tie_and_rest in (node.operands, node.operands[::-1]):
            if tie_and_rest.opcode != "and" or len(tie_and_rest.operands) != 2:
                continue
            tie, rest = tie_and_rest.operands
            if not _is_tie(tie, order):
                tie, rest = rest, tie
            key = _compare_key(order, count) if _is_tie(tie, order) else None
            if key is not None:
                keys.append(key)
                node = rest
                break
        else:
            return None
    key = _compare_key(node, count)
    return None if key is None else [*keys, key]


def _sort_keys(
    ev: Evaluator, comp: Computation, count: int, rows: list[np.ndarray]
) -> list[np.ndarray] | None:
    """Integer keys, most significant first, whose stable lexicographic ascending order
    is the comparator's, when it has them."""
    specs = lexicographic_keys(comp, count)
    if specs is None:
        return None
    keys = []
    for key_inst, operand, ascending, compare_type in specs:
        if key_inst.opcode == "parameter":
            values = rows[operand]
        else:
            memo_key = ("sort-key", id(comp), id(key_inst))
            cached = ev.memo.get(memo_key)
            if cached is None or cached[0] is not comp:
                derived = Computation(f"{comp.name}.key", list(comp.instructions), root=key_inst)
                cached = (comp, derived)
                ev.memo[memo_key] = cached
            if not ev.is_vector_safe(cached[1]):
                return None
            args = [rows[n // 2] for n in range(2 * count)]
            values = np.asarray(ev.call_vectorized(cached[1], args))
        key = _order_key(values, compare_type)
        if key is None:
            return None
        keys.append(key if ascending else ~key)
    return keys


def _merge_sort(ev: Evaluator, comp: Computation, rows: list[np.ndarray]) -> np.ndarray | None:
    """Stable bottom-up merge sort of each row, evaluating ``comp`` on arrays.

    Merging runs A and B of width w: an element of A moves forward by the number
    of B elements ordered before it, an element of B by the number of A elements
    not ordered after it. Both counts come from one binary search per element,
    all elements at once: log2(w)+1 comparator evaluations per level. Returns
    None when the comparator is not a strict weak order (the new positions do
    not form a permutation).
    """
    num_rows, length = rows[0].shape
    index = np.int32 if num_rows * length < 2**31 else np.int64
    base = (np.arange(num_rows, dtype=index) * length)[:, None]
    flat = [np.ascontiguousarray(r).reshape(-1) for r in rows]
    perm = np.broadcast_to(np.arange(length, dtype=index), (num_rows, length)).copy()
    pos = np.arange(length, dtype=index)
    width = 1
    while width < length:
        run = pos // width
        pair_start = (run // 2) * 2 * width
        is_a = run % 2 == 0
        b_start = pair_start + width
        partner_start = np.where(is_a, b_start, pair_start)
        partner_len = np.where(is_a, np.clip(length - b_start, 0, width), width)
        offset = pos - np.where(is_a, pair_start, b_start)
        current = [f[perm + base].reshape(-1) for f in flat]
        mine = [c.reshape(num_rows, length) for c in current]
        # count = how many partner elements precede this one (a prefix of the run).
        count = np.zeros((num_rows, length), dtype=index)
        step = 1 << (width.bit_length() - 1)
        while step:
            probe = count + step
            fits = probe <= partner_len
            where = np.minimum(partner_start + probe - 1, length - 1) + base
            other = [c[where] for c in current]
            args: list[np.ndarray] = []
            for own, theirs in zip(mine, other):
                # A elements ask "partner < me", B elements "not me < partner".
                args += [np.where(is_a, theirs, own), np.where(is_a, own, theirs)]
            less = np.asarray(ev.call_vectorized(comp, args), dtype=bool)
            count = np.where(fits & (less == is_a), probe, count)
            step >>= 1
        new_pos = pair_start + offset + count
        new_perm = np.full((num_rows, length), -1, dtype=index)
        np.put_along_axis(new_perm, new_pos, perm, axis=1)
        if (new_perm < 0).any():
            return None
        perm = new_perm
        width *= 2
    return perm


def _sort_rows_one_by_one(ev: Evaluator, comp: Computation, rows: list[np.ndarray]) -> np.ndarray:
    """Fallback for comparators that are not strict weak orders: Python's sort per row."""
    num_rows, length = rows[0].shape
    perm = np.empty((num_rows, length), dtype=np.int64)
    for r in range(num_rows):

        def less(i: int, j: int, r: int = r) -> bool:
            args: list[Any] = []
            for values in rows:
                args += [np.asarray(values[r, i]), np.asarray(values[r, j])]
            return bool(np.asarray(ev.call(comp, args)))

        def compare(i: int, j: int, less: Callable[[int, int], bool] = less) -> int:
            return -1 if less(i, j) else (1 if less(j, i) else 0)

        perm[r] = sorted(range(length), key=functools.cmp_to_key(compare))
    return perm


def _sort(ev: Evaluator, inst: Instruction, ops: list[Literal]) -> Literal:
    (dim,) = tuple(required(inst, "dimensions"))
    first = ops[0]
    if first.ndim == 0 or first.shape[dim] <= 1:
        return _result(list(ops), inst)
    rows, lead, length = _sort_rows(ops, dim)
    perm = _row_permutation(ev, inst.called("to_apply"), rows)
    out = [
        np.moveaxis(np.take_along_axis(r, perm, axis=1).reshape(lead + (length,)), -1, dim)
        for r in rows
    ]
    return _result(out, inst)


def sort_permutation(ev: Evaluator, inst: Instruction, ops: list[Literal]) -> np.ndarray:
    """The order ``inst`` (a sort) puts ``ops`` in: for each row along its dimension (the
    other dimensions flattened, row-major), the positions its results take their elements
    from. The random roundings of ``heron run --check`` compare it across evaluations,
    since a sort of floats decides an order that rounding may change."""
    (dim,) = tuple(required(inst, "dimensions"))
    rows, _, length = _sort_rows(ops, dim)
    if length <= 1:
        return np.zeros((rows[0].shape[0], length), np.int64)
    return _row_permutation(ev, inst.called("to_apply"), rows)


def _sort_rows(ops: list[Literal], dim: int) -> tuple[list[np.ndarray], tuple, int]:
    """Each operand as rows along ``dim``, with the other dimensions and the row length."""
    moved = [np.moveaxis(np.asarray(o), dim, -1) for o in ops]
    lead = moved[0].shape[:-1]
    length = moved[0].shape[-1]
    return [m.reshape(-1, length) for m in moved], lead, length


def _row_permutation(ev: Evaluator, comp: Computation, rows: list[np.ndarray]) -> np.ndarray:
    """The stable order of each row under comparator ``comp``."""
    count = len(rows)
    perm = None
    keys = _sort_keys(ev, comp, count, rows)
    if keys is not None:
        if len(keys) == 1:
            perm = np.argsort(keys[0], axis=1, kind="stable")
        else:
            perm = np.lexsort(keys[::-1], axis=1)  # lexsort: last key is primary; stable
    if perm is None:
        perm = _merge_sort(ev, comp, rows)
    if perm is None:
        perm = _sort_rows_one_by_one(ev, comp, rows)
    return perm


def _topk(ev: Evaluator, inst: Instruction, ops: list[Literal]) -> Literal:
    """The k largest (or smallest) along the last dimension, and their s32 indices.

    Order as XLA's decomposition into a stable sort: total order (NaN above +inf,
    -0 below +0), equal values by increasing index.
    """
    (x,) = ops
    k = required(inst, "k")
    largest = inst.attributes.get("largest", True)
    if x.ndim == 0 or not 0 <= k <= x.shape[-1]:
        raise instruction_error(inst, f"k={k} does not fit operand dimensions {list(x.shape)}")
    floating = ElementType.from_numpy(x.dtype).is_floating
    key = _order_key(x, "TOTALORDER" if floating else "")
    if key is None:
        raise instruction_error(inst, f"topk of {x.dtype} values", UnsupportedError)
    perm = np.argsort(~key if largest else key, axis=-1, kind="stable")[..., :k]
    return np.take_along_axis(x, perm, axis=-1), perm.astype(np.int32)


HANDLERS = {
    "topk": _topk,
    "reduce": _reduce,
    "reduce-window": _reduce_window,
    "select-and-scatter": _select_and_scatter,
    "map": _map,
    "sort": _sort,
}
