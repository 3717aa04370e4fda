"""Small helpers over the upstream MLIR bindings that every heron pass needs.

The bindings give ops, values and blocks but no rewriter with value mapping;
these few functions supply that (cloning with remapped operands, walking, the
usual constant builders) so each pass reads as its transformation only.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping

from mlir import ir
from mlir.dialects import arith

from heron.emitters.callbacks import collect_ops, walk

ValueMap = Mapping[ir.Value, ir.Value]


def walk_ops(
    root: ir.Operation | ir.OpView, name: str | frozenset[str] | None = None
) -> list[ir.Operation]:
    """Every op nested in ``root`` (``root`` included), pre-order, optionally of one name
    or of a set of names.

    Returns a list (not a generator) so callers may change the IR while iterating.
    """
    return collect_ops(root, name, label="walk_ops")


def block_ops(block: ir.Block) -> list[ir.Operation]:
    """The ops of ``block`` as a list of ``ir.Operation`` (safe to mutate the block meanwhile)."""
    return [op.operation for op in block.operations]


def remap_operands(root: ir.Operation, mapping: ValueMap) -> None:
    """Replace, in ``root`` and everything nested in it, each operand found in ``mapping``."""
    if not mapping:
        return

    def visit(op: ir.Operation) -> ir.WalkResult:
        operands = op.operands
        for i in range(len(operands)):
            replacement = mapping.get(operands[i])
            if replacement is not None:
                operands[i] = replacement
        return ir.WalkResult.ADVANCE

    if len(root.operation.regions):
        walk(root, visit, name="remap_operands")
    else:  # most ops: no walk (its setup costs more than the remapping)
        visit(root.operation)


def clone_with_mapping(
    op: ir.Operation | ir.OpView, mapping: ValueMap, ip: ir.InsertionPoint | None = None
) -> ir.Operation:
    """A deep copy of ``op`` at ``ip`` (default: the current one), operands remapped.

    Values defined inside ``op`` are remapped by the clone itself; ``mapping``
    covers the values ``op`` uses from outside.
    """
    new = op.operation.clone(ip=ip).operation
    remap_operands(new, mapping)
    return new


def clone_block_into(
    block: ir.Block, mapping: dict[ir.Value, ir.Value], skip_terminator: bool = True
) -> ir.Operation | None:
    """Clone ``block``'s ops at the current insertion point, extending ``mapping``.

    ``mapping`` must map the block's arguments. Returns the (uncloned)
    terminator when ``skip_terminator``, so the caller can map what it yields
    with :func:`mapped`.
    """
    ops = block_ops(block)
    terminator = ops[-1] if skip_terminator and ops else None
    for op in ops if terminator is None else ops[:-1]:
        new = clone_with_mapping(op, mapping)
        for old_result, new_result in zip(op.results, new.results, strict=True):
            mapping[old_result] = new_result
    return terminator


def mapped(values: Iterator[ir.Value] | list[ir.Value], mapping: ValueMap) -> list[ir.Value]:
    """``values`` with each one found in ``mapping`` replaced."""
    return [mapping.get(v, v) for v in values]


def index_constant(value: int) -> ir.Value:
    """``arith.constant value : index`` at the current insertion point."""
    return arith.ConstantOp(ir.IndexType.get(), value).result


def int_constant(value: int, width: int) -> ir.Value:
    """``arith.constant value : iN``, ``value`` wrapped to ``width`` bits two's complement."""
    value &= (1 << width) - 1
    if width > 1 and value >= 1 << (width - 1):
        value -= 1 << width
    if width == 1:
        value = -value  # i1 true prints as -1 in two's complement; MLIR wants 1 or -1
    return arith.ConstantOp(ir.IntegerType.get_signless(width), value).result


def both(a: ir.Value | None, b: ir.Value | None) -> ir.Value | None:
    """``a and b`` for ``i1`` conditions, where None stands for one that always holds."""
    if a is None or b is None:
        return b if a is None else a
    return arith.andi(a, b)


def bit_width(t: ir.Type) -> int:
    """The width in bits of an integer or float type (TypeError for anything else)."""
    if isinstance(t, ir.IntegerType):
        return ir.IntegerType(t).width
    if isinstance(t, ir.FloatType):
        return ir.FloatType(t).width
    raise TypeError(t)
