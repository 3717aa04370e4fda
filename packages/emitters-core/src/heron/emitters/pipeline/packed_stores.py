"""Whole-byte packed stores: which sub-byte ``tensor.insert``s fill a byte together.

lower-tensors stores one sub-byte element (i4, i2, f4E2M1FN) with two atomics
on its byte (``andi`` then ``ori``), because another thread may own the other
elements of that byte. When one thread itself inserts every element of a byte
(the loop emitter hands each thread whole bytes: two s4 values at ``2k`` and
``2k + 1``), nobody else writes that byte and the thread can store it plainly,
as XLA's kernels do. This module proves that from the IR, before lowering, so
the lowering only follows the plan:

- the inserts form a chain in one block (each result's only use is the next
  insert's destination), so no op reads the tensor between them;
- their indices are one root plus the constant offsets ``o .. o + k - 1``
  (``k`` elements a byte, ``o`` a multiple of ``k``), peeled through
  ``arith.addi`` with constants and integer casts;
- the root is provably a multiple of ``k`` (constants, sums, products, shifts,
  casts, induction variables of loops with such bounds and steps): modular
  arithmetic on powers of two keeps that through wrap-around, and in-bounds
  indices make the offsets exact;
- the group's inserts are adjacent in the chain and the ops between them are
  plain (no regions, calls or ``heron_gpu`` ops, no use of the tensor the
  chain started from), so delaying the first stores to the last is invisible.

Where any of this cannot be proved (scatter's data-dependent indices, a
thread's partial byte at a tensor's edge), the inserts keep their atomics.
"""

from __future__ import annotations

from collections.abc import Callable

import attrs
from mlir import ir

from heron.emitters import ir_utils

_CASTS = frozenset(
    {"arith.index_cast", "arith.index_castui", "arith.extui", "arith.extsi", "arith.trunci"}
)
#: Ops that may sit between the inserts of one group: they read no tensor that is written.
_OPAQUE_PREFIXES = ("heron_gpu.", "func.call", "scf.", "gpu.barrier", "memref.")


@attrs.frozen(eq=False)
class ByteGroup:
    """The ``per_byte`` ``tensor.insert``s (in chain order) that together write one byte.

    ``offsets[i]`` is insert ``i``'s element position within the byte (0 is the low bits).
    """

    inserts: tuple[ir.Operation, ...]
    offsets: tuple[int, ...]
    per_byte: int

    @property
    def base(self) -> ir.Operation:
        """The insert at offset 0: its index is the (aligned) index of the first element."""
        return self.inserts[self.offsets.index(0)]


def _constant_int(value: ir.Value) -> int | None:
    owner = value.owner
    if not isinstance(owner, ir.OpView | ir.Operation):
        return None
    op = owner.operation
    if op.name != "arith.constant":
        return None
    attr = op.attributes["value"]
    if not isinstance(attr, ir.IntegerAttr):
        return None
    return ir.IntegerAttr(attr).value


def _root_and_offset(value: ir.Value) -> tuple[ir.Value, int]:
    """``value`` as ``root + offset``, peeling constant additions and integer casts."""
    offset = 0
    while True:
        owner = value.owner
        if not isinstance(owner, ir.OpView | ir.Operation):
            return value, offset
        op = owner.operation
        if op.name in _CASTS:
            value = op.operands[0]
            continue
        if op.name == "arith.addi":
            lhs, rhs = op.operands
            c = _constant_int(rhs)
            if c is not None:
                value, offset = lhs, offset + c
                continue
            c = _constant_int(lhs)
            if c is not None:
                value, offset = rhs, offset + c
                continue
        return value, offset


def _divisible(value: ir.Value, k: int, depth: int = 0) -> bool:
    """Whether ``value`` is provably a multiple of ``k`` (a power of two), modulo 2**width."""
    if depth > 32:
        return False
    c = _constant_int(value)
    if c is not None:
        return c % k == 0
    owner = value.owner
    if isinstance(owner, ir.Block):
        return _divisible_induction_variable(value, owner, k, depth)
    op = owner.operation
    operands = list(op.operands)
    if op.name in _CASTS:
        return _divisible(operands[0], k, depth + 1)
    if op.name in ("arith.addi", "arith.subi"):
        return all(_divisible(v, k, depth + 1) for v in operands)
    if op.name in ("arith.muli", "arith.andi"):
        if op.name == "arith.andi":
            mask = next((m for m in map(_constant_int, operands) if m is not None), None)
            if mask is not None and mask % k == 0:
                return True
        return any(_divisible(v, k, depth + 1) for v in operands)
    if op.name == "arith.shli":
        shift = _constant_int(operands[1])
        if shift is not None and (1 << shift) % k == 0:
            return True
        return _divisible(operands[0], k, depth + 1)
    return False


def _divisible_induction_variable(value: ir.Value, block: ir.Block, k: int, depth: int) -> bool:
    parent = block.owner
    if parent is None or parent.name != "scf.for" or block.arguments[0] != value:
        return False
    lower, _, step = list(parent.operands)[:3]
    return _divisible(lower, k, depth + 1) and _divisible(step, k, depth + 1)


def _chains(block: ir.Block, is_packed: Callable[[ir.Type], bool]) -> list[list[ir.Operation]]:
    """Maximal chains of packed inserts in ``block``, each result used only by the next."""
    ops = ir_utils.block_ops(block)
    inserts = [
        op
        for op in ops
        if op.name == "tensor.insert"
        and is_packed(ir.RankedTensorType(op.results[0].type).element_type)
    ]
    following: dict[ir.Operation, ir.Operation] = {}
    has_previous: set[ir.Operation] = set()
    members = {_key(op) for op in inserts}
    for op in inserts:
        uses = list(op.results[0].uses)
        if len(uses) != 1:
            continue
        user = uses[0].owner.operation
        if user.name == "tensor.insert" and _key(user) in members and uses[0].operand_number == 1:
            following[_key(op)] = user
            has_previous.add(_key(user))
    chains = []
    for op in inserts:
        if _key(op) in has_previous:
            continue
        chain = [op]
        while _key(chain[-1]) in following:
            chain.append(following[_key(chain[-1])])
        chains.append(chain)
    return chains


def _key(op: ir.Operation) -> ir.Value:
    """A hashable identity of an insert: its result."""
    return op.results[0]


def _plain_between(
    ops: list[ir.Operation],
    first: ir.Operation,
    last: ir.Operation,
    members: set[ir.Value],
    start: ir.Value,
) -> bool:
    """Whether the ops strictly between ``first`` and ``last`` are harmless to reorder past."""
    keys = [_key(op) if op.results else None for op in ops]
    begin, end = keys.index(_key(first)), keys.index(_key(last))
    for op in ops[begin + 1 : end]:
        if op.results and _key(op) in members:
            continue
        if len(op.regions) > 0 or op.name.startswith(_OPAQUE_PREFIXES):
            return False
        if any(v == start for v in op.operands):
            return False
    return True


def plan(
    block: ir.Block, is_packed: Callable[[ir.Type], bool], bit_width: Callable[[ir.Type], int]
) -> dict[ir.Value, ByteGroup]:
    """The byte groups of ``block``'s packed inserts, keyed by each member's result.

    ``is_packed``/``bit_width``: lower-tensors' own answers for an element type,
    so what counts as packed is decided there only.
    """
    groups: dict[ir.Value, ByteGroup] = {}
    ops = ir_utils.block_ops(block)
    for chain in _chains(block, is_packed):
        element = ir.RankedTensorType(chain[0].results[0].type).element_type
        per_byte = 8 // bit_width(element)
        start = chain[0].operands[1]
        positions = [_root_and_offset(op.operands[2]) for op in chain]
        i = 0
        while i + per_byte <= len(chain):
            window = chain[i : i + per_byte]
            roots = [root for root, _ in positions[i : i + per_byte]]
            offsets = [offset for _, offset in positions[i : i + per_byte]]
            low = min(offsets)
            if (
                all(root == roots[0] for root in roots)
                and sorted(o - low for o in offsets) == list(range(per_byte))
                and low % per_byte == 0
                and _divisible(roots[0], per_byte)
                and _plain_between(ops, window[0], window[-1], {_key(o) for o in window}, start)
            ):
                group = ByteGroup(tuple(window), tuple(o - low for o in offsets), per_byte)
                for op in window:
                    groups[_key(op)] = group
                i += per_byte
            else:
                i += 1
    return groups
