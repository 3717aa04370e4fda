"""Atomic updates: ``memref.atomic_rmw`` and ``memref.generic_atomic_rmw``.

A GPU serialises the atomic updates of one address in some order; the
interpreter picks the lane order (lanes of a batch are numbered block by
block, and batches run one after the other, so this is also block order):
the updates of one element are applied one after the other, each seeing the
result of the one before, and each lane gets the value it saw. That makes
floating-point sums exact for that order (sequential, not pairwise), which a
test can reproduce with a loop.

How it is vectorised: the active lanes are grouped by the element they
update (:func:`_schedule`). Round ``r`` applies the ``r``-th update of every
group at once (the elements of one round are distinct), so a launch with
little contention takes a few rounds. A group with more than
:data:`ROUND_LIMIT` updates is instead run on its own with one pass over its
values: ``ufunc.accumulate`` for the kinds that have one (sequential, hence
exact, for floats too), a doubling scan for the float minimum/maximum kinds
(associative with the tie rules below). ``generic_atomic_rmw`` always runs
in rounds, its region once per round under the mask of that round's lanes.

Integer values are held sign-extended (:mod:`~..types`); arithmetic wraps to
the element's width, ``maxu``/``minu`` compare the low bits as unsigned, and
``i1`` is the signed 1-bit integer (true is -1: ``maxs`` of true and false is
false). ``maximumf``/``minimumf`` propagate NaN (the first NaN operand, in
update order) and order -0 below +0; ``maxnumf``/``minnumf`` return the other
operand when one is NaN, and order zeros the same way.

Global memory counts one write of the element per update
(:func:`~..memory.atomic_targets`); an ``andi`` on ``i8`` (how a packed
sub-byte element is cleared before ``ori`` sets its bits) also counts a write
of each bit its mask clears, so that writes of packed elements can be
counted exactly.
"""

from __future__ import annotations

from collections.abc import Callable

import attrs
import numpy as np

from heron.runtime.interpreter import memory
from heron.runtime.interpreter.engine import Frame, semantics
from heron.runtime.interpreter.program import Op
from heron.runtime.interpreter.types import (
    FloatType,
    IndexType,
    IntegerType,
    MemRefType,
    parse_type,
)

__all__ = ["KIND_NAMES", "ROUND_LIMIT"]

#: ``arith::AtomicRMWKind`` as MLIR 22 numbers it (capture gives the integer).
KIND_NAMES = (
    "addf",
    "addi",
    "andi",
    "assign",
    "maximumf",
    "maxnumf",
    "maxs",
    "maxu",
    "minimumf",
    "minnumf",
    "mins",
    "minu",
    "mulf",
    "muli",
    "ori",
    "xori",
)
#: Groups (updates of one element) longer than this run on their own, with one scan.
ROUND_LIMIT = 32

_FLOAT_KINDS = frozenset({"addf", "mulf", "maximumf", "maxnumf", "minimumf", "minnumf"})

Combine = Callable[[np.ndarray, np.ndarray], np.ndarray]


# -- values -------------------------------------------------------------------------------


@attrs.frozen
class _Element:
    """How the elements of an atomic update are held while combining them."""

    dtype: np.dtype
    #: Integer width (None for floats); ``i1`` is worked on as int8 0 / -1.
    width: int | None

    @property
    def work_dtype(self) -> np.dtype:
        return np.dtype(np.int8) if self.dtype == np.bool_ else self.dtype

    def to_work(self, values: np.ndarray) -> np.ndarray:
        values = np.asarray(values)
        if self.dtype == np.bool_:
            return np.where(values.astype(np.bool_), np.int8(-1), np.int8(0))
        return values.astype(self.dtype, copy=False)

    def from_work(self, values: np.ndarray) -> np.ndarray:
        if self.dtype == np.bool_:
            return values != 0
        return self.wrap(values)

    def wrap(self, values: np.ndarray) -> np.ndarray:
        """Integers: the low ``width`` bits, sign-extended in the container."""
        values = np.asarray(values).astype(self.work_dtype, copy=False)
        if self.width is None:
            return values
        spare = self.work_dtype.itemsize * 8 - self.width
        if spare == 0:
            return values
        shift = self.work_dtype.type(spare)
        return (values << shift) >> shift

    def unsigned(self, values: np.ndarray) -> np.ndarray:
        """The low ``width`` bits as an unsigned number."""
        udtype = np.dtype(f"u{self.work_dtype.itemsize}")
        mask = udtype.type((1 << self.width) - 1)
        return values.view(udtype) & mask


def _element_of(frame: Frame, op: Op, ref_type: MemRefType, kind: str) -> _Element:
    element = ref_type.element
    if isinstance(element, FloatType):
        if kind not in _FLOAT_KINDS and kind != "assign":
            raise frame.unsupported(op, f"atomic '{kind}' on {element} elements")
        return _Element(element.dtype, None)
    if isinstance(element, (IntegerType, IndexType)):
        if kind in _FLOAT_KINDS:
            raise frame.unsupported(op, f"atomic '{kind}' on {element} elements")
        return _Element(element.dtype, element.width)
    raise frame.unsupported(op, f"atomic updates of {element} elements")


# -- combining ------------------------------------------------------------------------------


def _ordered(a: np.ndarray, b: np.ndarray, larger: bool) -> np.ndarray:
    """The larger (smaller) of two non-NaN floats, with -0 below +0."""
    a_bit, b_bit = np.signbit(a), np.signbit(b)
    if larger:
        pick_b = (b > a) | ((b == a) & a_bit & ~b_bit)
    else:
        pick_b = (b < a) | ((b == a) & ~a_bit & b_bit)
    return np.where(pick_b, b, a)


def _float_extremum(larger: bool, propagate_nan: bool) -> Combine:
    def combine(a: np.ndarray, b: np.ndarray) -> np.ndarray:
        out = _ordered(a, b, larger)
        a_nan, b_nan = np.isnan(a), np.isnan(b)
        if propagate_nan:
            return np.where(a_nan, a, np.where(b_nan, b, out))
        return np.where(a_nan, b, np.where(b_nan, a, out))

    return combine


def _unsigned_extremum(element: _Element, larger: bool) -> Combine:
    def combine(a: np.ndarray, b: np.ndarray) -> np.ndarray:
        ua, ub = element.unsigned(a), element.unsigned(b)
        return np.where(ub > ua if larger else ub < ua, b, a)

    return combine


def _ufunc_combine(ufunc: np.ufunc, element: _Element) -> Combine:
    return lambda a, b: element.wrap(ufunc(a, b))


def _combine(kind: str, element: _Element) -> Combine:
    """``new = current <kind> value`` on work values."""
    table: dict[str, Combine] = {
        "addf": np.add,
        "mulf": np.multiply,
        "addi": _ufunc_combine(np.add, element),
        "muli": _ufunc_combine(np.multiply, element),
        "andi": np.bitwise_and,
        "ori": np.bitwise_or,
        "xori": np.bitwise_xor,
        "maxs": np.maximum,
        "mins": np.minimum,
        "assign": lambda a, b: b,
        "maximumf": _float_extremum(larger=True, propagate_nan=True),
        "minimumf": _float_extremum(larger=False, propagate_nan=True),
        "maxnumf": _float_extremum(larger=True, propagate_nan=False),
        "minnumf": _float_extremum(larger=False, propagate_nan=False),
    }
    if kind in ("maxu", "minu"):
        return _unsigned_extremum(element, larger=kind == "maxu")
    return table[kind]


_ACCUMULATING = {
    "addf": np.add,
    "mulf": np.multiply,
    "addi": np.add,
    "muli": np.multiply,
    "andi": np.bitwise_and,
    "ori": np.bitwise_or,
    "xori": np.bitwise_xor,
    "maxs": np.maximum,
    "mins": np.minimum,
}


def _running(kind: str, element: _Element, combine: Combine, sequence: np.ndarray) -> np.ndarray:
    """Inclusive running results of ``sequence`` (its first entry: the memory's value)."""
    ufunc = _ACCUMULATING.get(kind)
    if ufunc is not None:
        # accumulate applies the ufunc left to right, rounding each step: exact for floats.
        return element.wrap(ufunc.accumulate(sequence, dtype=sequence.dtype))
    if kind == "assign":
        return sequence
    return _doubling_scan(sequence, combine)


def _doubling_scan(sequence: np.ndarray, combine: Combine) -> np.ndarray:
    """Inclusive scan for an associative ``combine`` in log2(n) passes (Hillis-Steele)."""
    out = sequence.copy()
    step = 1
    while step < out.size:
        out[step:] = combine(out[:-step], out[step:])
        step *= 2
    return out


# -- scheduling ------------------------------------------------------------------------------


@attrs.frozen
class _Schedule:
    """Updates grouped by element: ``groups`` of update indices, each in lane order."""

    #: Update indices of the rounds (small groups): round r holds their r-th updates.
    rounds: list[np.ndarray]
    #: Update indices of each large group, in order.
    large: list[np.ndarray]


def _schedule(keys: np.ndarray, round_limit: int) -> _Schedule:
    """Rounds for the groups of at most ``round_limit`` updates; the longer ones apart."""
    count = keys.size
    if count == 0:
        return _Schedule([], [])
    order = np.argsort(keys, kind="stable")
    sorted_keys = keys[order]
    starts_mask = np.empty(count, np.bool_)
    starts_mask[0] = True
    np.not_equal(sorted_keys[1:], sorted_keys[:-1], out=starts_mask[1:])
    starts = np.flatnonzero(starts_mask)
    sizes = np.diff(np.append(starts, count))
    group = np.cumsum(starts_mask) - 1
    rank = np.arange(count) - starts[group]
    small = sizes[group] <= round_limit
    by_rank = np.argsort(np.where(small, rank, count), kind="stable")
    small_ranks = rank[by_rank][: int(small.sum())]
    bounds = np.flatnonzero(np.diff(small_ranks)) + 1
    rounds = np.split(order[by_rank[: small_ranks.size]], bounds) if small_ranks.size else []
    large = [order[s : s + n] for s, n in zip(starts, sizes, strict=True) if n > round_limit]
    return _Schedule(rounds, large)


def _updates(frame: Frame, op: Op, ref: memory.MemRef, indices, round_limit: int | None):
    """``(lanes, rows, columns, schedule)`` of the active lanes' updates, checked.

    ``round_limit`` None: every group in rounds.
    """
    flat = memory.flat_index(frame, op, ref, indices)
    lanes, rows, cols = memory.atomic_targets(frame, op, ref, flat)
    keys = rows * np.int64(ref.type.size) + cols
    limit = lanes.size if round_limit is None else round_limit
    return lanes, rows, cols, _schedule(keys, limit)


def _memref_type(frame: Frame, op: Op, ref) -> MemRefType:
    if not isinstance(ref, memory.MemRef):
        raise frame.unsupported(op, "the updated value is not a memref")
    return ref.type


# -- memref.atomic_rmw -----------------------------------------------------------------------


def _kind(frame: Frame, op: Op) -> str:
    kind = op.attributes.get("kind")
    if isinstance(kind, int) and 0 <= kind < len(KIND_NAMES):
        return KIND_NAMES[kind]
    if isinstance(kind, str):
        name = kind.removeprefix("#arith.atomic_rmw_kind<").removesuffix(">").strip()
        if name in KIND_NAMES:
            return name
    raise frame.unsupported(op, f"unknown atomic kind {kind!r} (attribute 'kind')")


@semantics("memref.atomic_rmw")
def atomic_rmw(frame: Frame, op: Op) -> None:
    value, ref, *indices = frame.operands(op)
    kind = _kind(frame, op)
    ref_type = _memref_type(frame, op, ref)
    element = _element_of(frame, op, ref_type, kind)
    lanes, rows, cols, schedule = _updates(frame, op, ref, indices, ROUND_LIMIT)
    operands = element.to_work(frame.per_lane(value, op.operand_types[0])[lanes])
    if kind == "andi" and element.width == 8 and ref.memory.counted:
        cleared = (~operands).view(np.uint8)
        memory.count_bit_writes(ref.memory, cols, cleared)
    elements = ref.elements()
    combine = _combine(kind, element)
    seen = np.zeros(lanes.size, element.work_dtype)
    for updates in schedule.rounds:
        current = element.to_work(elements[rows[updates], cols[updates]])
        seen[updates] = current
        new = combine(current, operands[updates])
        elements[rows[updates], cols[updates]] = element.from_work(new)
    for updates in schedule.large:
        row, col = rows[updates[0]], cols[updates[0]]
        initial = element.to_work(elements[row, col : col + 1])
        running = _running(kind, element, combine, np.concatenate([initial, operands[updates]]))
        seen[updates] = running[:-1]
        elements[row, col] = element.from_work(running[-1:])[0]
    old = np.zeros(frame.lanes.size, element.dtype)
    old[lanes] = element.from_work(seen)
    frame.set_result(op, old)


# -- memref.generic_atomic_rmw ------------------------------------------------------------------


@semantics("memref.generic_atomic_rmw")
def generic_atomic_rmw(frame: Frame, op: Op) -> None:
    """The region computes the new value from the current one, one round of lanes at a time.

    Each lane's update is atomic: no other lane's update of the element comes
    between its read and its write. A compare-and-swap loop is this op (its
    region ``select(cur == expected, desired, cur)``) in an ``scf.while``.
    """
    ref, *indices = frame.operands(op)
    ref_type = _memref_type(frame, op, ref)
    dtype = parse_type(op.result_types[0]).dtype
    if dtype != ref_type.dtype:
        raise frame.unsupported(op, f"result {op.result_types[0]} differs from {ref_type}")
    (region,) = op.regions
    lanes, rows, cols, schedule = _updates(frame, op, ref, indices, None)
    elements = ref.elements()
    size = frame.lanes.size
    old = np.zeros(size, dtype)
    for updates in schedule.rounds:
        members = lanes[updates]
        current = elements[rows[updates], cols[updates]]
        old[members] = current
        argument = np.zeros(size, dtype)
        argument[members] = current
        mask = np.zeros(size, np.bool_)
        mask[members] = True
        (new,) = frame.run_region(region, [argument], mask)
        new = np.broadcast_to(np.asarray(new, dtype), (size,))
        elements[rows[updates], cols[updates]] = new[members]
    frame.set_result(op, old)
