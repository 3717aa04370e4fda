"""Sorts whose order HLO leaves open: which orders a kernel may give.

HLO's ``sort`` promises an order only as far as its comparator decides one:

- an unstable sort (``is_stable=false``, HLO's default) may put elements the
  comparator finds equivalent (neither before the other) in any order: the indices
  of equal keys in an argsort, a key's values in a sort of (keys, values);
- a comparator that is not a strict weak order over a row leaves that row's order
  undefined (XLA's sort says so): a plain ``LT`` over floats with a NaN in the row,
  where NaN is equivalent to every number while the numbers are not to each other.

The reference evaluator sorts in one order (stably, by its own algorithm); a GPU
kernel's network ends in another, as XLA:GPU's does, and both are right.
:func:`sort_freedom` finds an output of such a sort and, from the reference's sorted
keys, the runs of positions whose keys are equivalent (the whole row where the
comparator is not a strict weak order on it); :class:`SortFreedom` accepts a
kernel's row where each run holds the same values as the reference's, bit for bit,
in any order. The keys are what the comparator reads: only comparators that read
the first operand alone are handled (jax's sorts with ``num_keys=1``, argsort, a
sort of (keys, values)); any other keeps the exact comparison.

A slice of such a sort (a top-k as ``jax.lax.approx_max_k`` lowers it: the sort's
first k of each row) keeps a part of a run: which of the run's values land in it is
as open as their order, so each run's values in the slice must be some of the run's
values in the reference's whole sort (a sub-multiset), bit for bit. Over a row with
a NaN under a plain ``GT``, XLA:GPU's bitonic network, and heron's, which is the
same network, keep other values than the reference's stable sort does.
"""

from __future__ import annotations

import attrs
import numpy as np

from heron.harness.reference_values import value_of
from heron.hlo.errors import HloError
from heron.hlo.ir import Computation, Instruction

__all__ = ["SortFreedom", "sort_freedom"]


@attrs.frozen(eq=False)
class SortFreedom:
    """For an output of a sort along ``dimension`` (or a slice of one): each element's
    group (``groups``, in the output's row-major order), the positions of a run of
    equivalent keys of one row sharing a group; ``whole``: for a slice, every group's
    values in the reference's whole sort (group numbers and values, flat), the values
    the slice's positions of that group may hold."""

    groups: np.ndarray
    whole: tuple[np.ndarray, np.ndarray] | None = None

    def accepts(self, kernel: np.ndarray, reference: np.ndarray) -> np.ndarray:
        """Per element of the flat outputs: its group holds some of the values the group
        has in the reference, bit for bit, as a multiset (all of them, for a sort's
        whole output: as many positions as values)."""
        kernel, reference = np.asarray(kernel).reshape(-1), np.asarray(reference).reshape(-1)
        bits_k = _bits(kernel)
        if self.whole is None:
            pool_groups, bits_r = self.groups, _bits(reference)
        else:
            pool_groups, bits_r = self.whole[0], _bits(self.whole[1])
        if (
            bits_k is None
            or bits_r is None
            or bits_k.dtype != bits_r.dtype
            or kernel.shape != self.groups.shape
            or reference.shape != self.groups.shape
        ):
            return np.zeros(kernel.shape[0], np.bool_)
        bad_groups = _groups_with_extra_values(self.groups, bits_k, pool_groups, bits_r)
        return ~np.isin(self.groups, bad_groups)


def _groups_with_extra_values(
    groups: np.ndarray, bits: np.ndarray, pool_groups: np.ndarray, pool_bits: np.ndarray
) -> np.ndarray:
    """The groups some value of which ``bits`` holds more times than ``pool_bits`` does."""
    all_groups = np.concatenate([groups, pool_groups])
    all_bits = np.concatenate([bits, pool_bits])
    weights = np.concatenate(
        [np.ones(groups.shape[0], np.int64), -np.ones(pool_groups.shape[0], np.int64)]
    )
    order = np.lexsort((all_bits, all_groups))
    sorted_groups, sorted_bits = all_groups[order], all_bits[order]
    new_pair = np.ones(order.shape[0], np.bool_)
    new_pair[1:] = (sorted_groups[1:] != sorted_groups[:-1]) | (sorted_bits[1:] != sorted_bits[:-1])
    starts = np.flatnonzero(new_pair)
    excess = np.add.reduceat(weights[order], starts) > 0
    return np.unique(sorted_groups[starts][excess])


def sort_freedom(
    source: Instruction, computation: Computation, args, leaf: int = 0
) -> SortFreedom | None:
    """The freedom an output of the fused ``computation`` given ``args`` has: ``source``'s
    result, or its ``leaf``-th when it is a tuple (a sort of several operands), when
    ``source`` is a sort whose comparator reads its first operand alone, and some row
    has a run of two or more equivalent keys that the sort may order freely (an
    unstable sort's, or any row the comparator is not a strict weak order on); else
    None. A ``slice`` of such an output is free as far as it keeps a part of a run
    (:class:`SortFreedom`'s ``whole``)."""
    if source.opcode == "slice":
        return _sliced(source, computation, args)
    if source.opcode == "get-tuple-element":
        source = source.operands[0]  # every operand's output is ordered as the keys are
    if source.opcode != "sort":
        return None
    comparator = source.called("to_apply")
    if not _reads_first_operand_only(comparator):
        return None
    stable = bool(source.attributes.get("is_stable", False))
    dimension = int(source.attr("dimensions")[0])
    try:
        from heron.hlo.evaluator.interpreter import Evaluator

        evaluator = Evaluator()
        if not evaluator.is_vector_safe(comparator):
            return None  # compared element by element: too slow over whole rows
        result = value_of(computation, source, args)
        keys = np.asarray(result[0] if isinstance(result, tuple) else result)
        rows = np.moveaxis(keys, dimension, -1).reshape(-1, keys.shape[dimension])
        groups = _runs(rows, _comparing(evaluator, comparator), stable)
    except HloError:  # e.g. over the memory budget: the exact comparison
        return None
    if groups is None:
        return None
    shape = list(np.moveaxis(keys, dimension, -1).shape)
    # Back to the output's own element order (the sorted dimension where it was).
    flat = np.moveaxis(groups.reshape(shape), -1, dimension).reshape(-1)
    return SortFreedom(flat)


def _sliced(source: Instruction, computation: Computation, args) -> SortFreedom | None:
    """The freedom of ``source``, a slice of a sort's output (or of a tuple element of
    one), from the sort's own: its groups at the positions the slice keeps, and every
    group's values in the whole output."""
    (sliced,) = source.operands
    leaf = 0
    if sliced.opcode == "get-tuple-element":
        leaf = int(sliced.attr("index"))
        sort = sliced.operands[0]
    else:
        sort = sliced
    if sort.opcode != "sort":
        return None
    freedom = sort_freedom(sort, computation, args, leaf=leaf)
    if freedom is None:
        return None
    try:
        result = value_of(computation, sort, args)
    except HloError:
        return None
    values = np.asarray(result[leaf] if isinstance(result, tuple) else result)
    positions = np.arange(values.size).reshape(values.shape)
    kept = positions[_slice_index(source)].reshape(-1)
    return SortFreedom(freedom.groups[kept], whole=(freedom.groups, values.reshape(-1)))


def _slice_index(source: Instruction) -> tuple[slice, ...]:
    """``source``'s slice as numpy's index (HLO's ``slice={[start:limit:stride], ...}``)."""
    return tuple(slice(r.start, r.limit, r.stride) for r in source.attr("slice"))


def _reads_first_operand_only(comparator: Computation) -> bool:
    read = {id(operand) for inst in comparator.instructions for operand in inst.operands}
    used = {
        inst.parameter_number
        for inst in comparator.instructions
        if inst.opcode == "parameter" and (id(inst) in read or inst is comparator.root)
    }
    return used <= {0, 1}


def _comparing(evaluator, comparator: Computation):
    """``before(a, b)``: the comparator over arrays of first-operand values, elementwise
    (other operands' parameters, which it does not read, given zeros)."""
    parameters = comparator.parameters

    def before(a: np.ndarray, b: np.ndarray) -> np.ndarray:
        args = [a, b] + [np.zeros((), p.shape.element_type.numpy_dtype) for p in parameters[2:]]
        return np.asarray(evaluator.call_vectorized(comparator, args), np.bool_)

    return before


def _runs(rows: np.ndarray, before, stable: bool) -> np.ndarray | None:
    """A group number per element of ``rows`` (the reference's sorted keys): positions of
    one row whose keys are equivalent and adjacent share one, as does a whole row the
    comparator is not a strict weak order on; a stable sort's other positions each get
    their own. None when no group has two positions."""
    count, length = rows.shape
    if length < 2:
        return None
    undefined = _not_a_strict_weak_order(rows, before)
    if stable:
        joined = np.zeros((count, length - 1), np.bool_)
    else:
        joined = ~before(rows[:, :-1], rows[:, 1:]) & ~before(rows[:, 1:], rows[:, :-1])
    joined[undefined] = True
    if not joined.any():
        return None
    # A new group starts wherever a position is not joined to the one before it.
    starts = np.concatenate([np.ones((count, 1), np.bool_), ~joined], axis=1)
    return np.cumsum(starts.reshape(-1)) - 1


#: Keys of a row each key is compared with to find a comparator that is not a strict weak
#: order there (:func:`_not_a_strict_weak_order`).
SAMPLES = 8


def _not_a_strict_weak_order(rows: np.ndarray, before) -> np.ndarray:
    """Per row: some key is equivalent to two keys of the row that are ordered (so
    equivalence is not transitive there: a NaN under a plain LT, equivalent to every
    number). The two are looked for among :data:`SAMPLES` keys spread over the row."""
    length = rows.shape[1]
    picks = np.unique(np.linspace(0, length - 1, min(SAMPLES, length)).astype(np.int64))
    samples = rows[:, picks]
    keys, sampled = rows[:, :, None], samples[:, None, :]
    equivalent = (~before(keys, sampled) & ~before(sampled, keys)).astype(np.int64)
    ordered = before(samples[:, :, None], samples[:, None, :])
    both = np.einsum("cei,cej->cij", equivalent, equivalent) > 0
    return (both & ordered).any(axis=(1, 2))


def _bits(values: np.ndarray) -> np.ndarray | None:
    """Values as unsigned integers of their width: equal exactly when bitwise equal (None
    for a width with no such integer, complex128's: compared exactly)."""
    values = np.ascontiguousarray(values)
    if values.dtype == np.bool_:
        return values.astype(np.uint8)
    unsigned = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}.get(values.dtype.itemsize)
    return None if unsigned is None else values.view(unsigned)
