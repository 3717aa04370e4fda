"""Hoist what both arms of an ``scf.if`` compute equally to before the ``scf.if``.

A concatenate's operands are emitted in the arms of an ``scf.if`` chain, one
operand an arm. Where two operands share their history (the two lanes of a
threefry hash: every round reads both lanes of the round before), each arm
calls the shared subgraphs at the same values, and neither the merge of equal
calls in :mod:`~heron.emitters.pipeline.inline` (it merges within one block)
nor LLVM (it did not hoist out of the branches) made them one: numpyro's
key-splitting kernel computed its three hashes twice over, 401 ALU
instructions where 203 do. An op that both arms compute from the same values
runs on every path through the ``scf.if`` already, so computing it once before
is the same work, whatever it is (a call's body may read a tensor: it did so
on either path). Only ops without effects are moved: ``arith``, ``math``,
``pure_call``, ``apply_indexing`` and ``tensor.extract``.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Callable

from mlir import ir

from heron.emitters.ir_utils import block_ops

__all__ = ["hoist_common_ops"]

_CALL = "heron_gpu.pure_call"
_MOVABLE = frozenset({_CALL, "heron_gpu.apply_indexing", "tensor.extract"})
_MOVABLE_DIALECTS = ("arith.", "math.")


def _movable(op: ir.Operation) -> bool:
    return not len(op.regions) and (op.name in _MOVABLE or op.name.startswith(_MOVABLE_DIALECTS))


def _key(op: ir.Operation) -> tuple:
    """What ``op`` computes: its name, attributes, operands and result types (attributes
    and types are uniqued in their context, so they compare as themselves)."""
    named = op.attributes
    attributes = frozenset((a.name, a.attr) for a in map(named.__getitem__, range(len(named))))
    return (op.name, attributes, tuple(op.operands), tuple(r.type for r in op.results))


def _defined_above(op: ir.Operation, block: ir.Block) -> bool:
    """Whether every operand of ``op`` (an op of ``block``, an arm) is defined before the
    ``scf.if``: not in the arm (what ``op`` reads cannot be nested deeper in it).
    Compared by block, not looked up in a set of the arm's ops: an op's hash follows
    its operands, which a hoist replaces."""
    for value in op.operands:
        owner = value.owner
        defined_in = owner if isinstance(owner, ir.Block) else owner.operation.block
        if defined_in == block:
            return False
    return True


def _arms(if_op: ir.Operation) -> tuple[ir.Block, ir.Block] | None:
    if len(if_op.regions) != 2:
        return None
    then_blocks, else_blocks = list(if_op.regions[0].blocks), list(if_op.regions[1].blocks)
    if len(then_blocks) != 1 or len(else_blocks) != 1:
        return None
    return then_blocks[0], else_blocks[0]


def _hoist_from(if_op: ir.Operation, erasing: Callable[[ir.Operation], None]) -> list[ir.Operation]:
    """Move each op both arms of ``if_op`` compute equally before it; the ops moved
    (``erasing`` hears of each twin before it is erased).

    Rounds until none moves: an op becomes movable once the ops it reads were."""
    arms = _arms(if_op)
    if arms is None:
        return []
    then_block, else_block = arms
    moved: list[ir.Operation] = []
    while True:
        twins: dict[tuple, ir.Operation] = {}
        for op in block_ops(else_block):
            if _movable(op) and _defined_above(op, else_block):
                twins.setdefault(_key(op), op)
        if not twins:
            return moved
        before = len(moved)
        for op in block_ops(then_block):
            if not _movable(op) or not _defined_above(op, then_block):
                continue
            twin = twins.pop(_key(op), None)
            if twin is None:
                continue
            op.move_before(if_op)
            for old, new in zip(twin.results, op.results, strict=True):
                old.replace_all_uses_with(new)
            erasing(twin)
            twin.erase()
            moved.append(op)
        if len(moved) == before:
            return moved


def _arm_of(op: ir.Operation) -> tuple[ir.Operation, int] | None:
    """The ``scf.if`` whose arm ``op`` is directly in, and which arm (0: then, 1: else)."""
    parent = op.parent
    if parent is None or parent.name != "scf.if":
        return None
    if_op = parent.operation
    return if_op, 0 if op.block == if_op.regions[0].blocks[0] else 1


def _depth(op: ir.Operation) -> int:
    depth = 0
    parent = op.parent
    while parent is not None:
        depth += 1
        parent = parent.parent
    return depth


def hoist_common_ops(calls: list[ir.Operation]) -> list[str | None]:
    """Hoist the ops both arms of an ``scf.if`` compute equally, for each ``scf.if`` in
    whose arms two of ``calls`` (a function's ``pure_call`` ops) lie; per op erased (the
    twin of one moved, equal to it), the callee it called (None: not a call).

    An op hoisted out of an inner ``scf.if`` may be erased in turn, as the twin of its
    equal in the other arm of an outer one: what was moved is no answer, and holding
    on to it read an erased op (brax's generalized pipeline aborted the process in
    nanobind, reading a freed op's name).

    Only an ``scf.if`` that calls a subgraph in both arms is searched (the calls are the
    work worth sharing; the ops they read come along): most ``scf.if`` ops of a kernel
    guard one access or pick one operand, and searching each was a tenth of inlining's
    time. Inner ones first, so that what they give up can move on outwards.
    """
    # The arms of each scf.if holding calls, in a list found by equality: an op's hash
    # follows its operands, which a hoist may replace (an inner scf.if's condition).
    arms: list[tuple[ir.Operation, set[int]]] = []
    queue: list[tuple[int, int, ir.Operation]] = []
    order = itertools.count()

    def note(call: ir.Operation) -> None:
        found = _arm_of(call)
        if found is None:
            return
        if_op, arm = found
        seen = next((known for op, known in arms if op == if_op), None)
        if seen is None:
            arms.append((if_op, seen := set()))
        if len(seen) == 1 and arm not in seen:
            heapq.heappush(queue, (-_depth(if_op), next(order), if_op))
        seen.add(arm)

    for call in calls:
        note(call)
    erased: list[str | None] = []

    def erasing(twin: ir.Operation) -> None:
        if twin.name == _CALL:
            erased.append(ir.FlatSymbolRefAttr(twin.attributes["callee"]).value)
        else:
            erased.append(None)

    while queue:
        _, _, if_op = heapq.heappop(queue)
        for op in _hoist_from(if_op, erasing):
            if op.name == _CALL:
                note(op)
    return erased
