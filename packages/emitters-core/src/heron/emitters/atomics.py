"""What an ``heron_gpu.atomic_rmw`` body computes, and the mark of a vector atomic add.

Two passes read an atomic's body: ``lower-tensors``, which turns ``current <op>
x`` into one native atomic instead of a compare-and-swap loop, and
``vectorize-loads-stores``, which turns a run of atomic adds to consecutive
elements into one vector ``atomic_rmw`` where the device has vector atomic adds
(``Target.vector_atomic_add_bytes``: PTX's ``red.global.add.v4.f32`` on sm_90).
:func:`simple_atomic` is their one reading of a body.

No upstream dialect below tensors has a vector atomic: ``memref.atomic_rmw``
updates one scalar. So ``lower-tensors`` writes a vector add as one scalar
``memref.atomic_rmw`` per lane, each marked with its lane and the vector's
length (:func:`mark_lane`); a backend with the instruction joins the marked
run again (CUDA: ``heron.runtime.cuda.compiler_vector_atomics``), and every
other consumer (the interpreter, a backend without it) runs the scalar adds,
which compute the same: each lane's add is atomic on its own either way.
"""

from __future__ import annotations

from mlir import ir

__all__ = [
    "ATOMIC_KINDS",
    "LANE_ATTR",
    "lane_of",
    "mark_lane",
    "simple_atomic",
]

#: Combiner ops that have an ``arith.AtomicRMWKind`` (a native atomic), by op name.
ATOMIC_KINDS = {
    "arith.addf": "addf",
    "arith.addi": "addi",
    "arith.maximumf": "maximumf",
    "arith.minimumf": "minimumf",
    "arith.maxnumf": "maxnumf",
    "arith.minnumf": "minnumf",
    "arith.maxsi": "maxs",
    "arith.maxui": "maxu",
    "arith.minsi": "mins",
    "arith.minui": "minu",
    "arith.andi": "andi",
    "arith.ori": "ori",
}

#: ``[lane, lanes]`` on a ``memref.atomic_rmw`` that is lane ``lane`` of a vector add
#: of ``lanes`` consecutive, aligned elements (the lanes follow one another in a block).
LANE_ATTR = "heron.vector_atomic_lane"


def simple_atomic(body: ir.Block) -> tuple[str, ir.Value] | None:
    """``(kind, operand)`` when ``body`` is ``yield(current <op> operand)`` or ``yield(x)``.

    ``current`` is the body's argument, ``<op>`` one of :data:`ATOMIC_KINDS` without
    fastmath flags, ``operand`` a value from outside the body. ``yield(x)`` with ``x``
    computed outside the body is an exchange (``assign``): the update ignores the
    current value. None for anything else (a compare-and-swap loop's job).

    An f16 or bf16 combiner computed in f32, ``truncf(extf(current) <op> extf(x))``
    (how heron's elemental emitter writes half-precision arithmetic), is the
    half-precision ``<op>`` itself: the f32 result of two half operands rounds to the
    correctly rounded half result (f32's 24 bits are at least twice the 11 of f16
    plus two, so rounding twice changes nothing), which is what the device's native
    half atomic computes.
    """
    (current,) = body.arguments
    ops = [op.operation for op in body.operations]
    if len(ops) == 1:
        (yielded,) = ops[0].operands
        if yielded != current and not _defined_in(yielded, body):
            return "assign", yielded
        return None
    if len(ops) == 2:
        combine, terminator = ops
        if terminator.operands[0] != combine.results[0]:
            return None
        return _combination(combine, current, body)
    return _widened_combination(ops, current, body)


def _combination(
    combine: ir.Operation, current: ir.Value, body: ir.Block
) -> tuple[str, ir.Value] | None:
    """``(kind, other)`` when ``combine`` is ``current <op> other``, other from outside."""
    kind = ATOMIC_KINDS.get(combine.name)
    if kind is None or not _no_flags(combine):
        return None
    lhs, rhs = combine.operands
    other = rhs if lhs == current else lhs if rhs == current else None
    if other is None or other == current or _defined_in(other, body):
        return None
    return kind, other


def _widened_combination(
    ops: list[ir.Operation], current: ir.Value, body: ir.Block
) -> tuple[str, ir.Value] | None:
    """``truncf(extf(current) <op> extf(x))`` of an f16/bf16 element, computed in f32."""
    if len(ops) != 5 or not isinstance(current.type, ir.F16Type | ir.BF16Type):
        return None
    *widen, combine, narrow, terminator = ops
    if narrow.name != "arith.truncf" or terminator.operands[0] != narrow.results[0]:
        return None
    if "roundingmode" in narrow.attributes or narrow.operands[0] != combine.results[0]:
        return None
    if not isinstance(combine.results[0].type, ir.F32Type):
        return None
    if any(op.name != "arith.extf" or not _no_flags(op) for op in widen):
        return None
    sources = {op.results[0]: op.operands[0] for op in widen}
    lhs, rhs = (sources.get(v) for v in combine.operands)
    if lhs is None or rhs is None or current not in (lhs, rhs):
        return None
    other = rhs if lhs == current else lhs
    if other == current or other.type != current.type or _defined_in(other, body):
        return None
    kind = ATOMIC_KINDS.get(combine.name)
    return (kind, other) if kind is not None and _no_flags(combine) else None


def _no_flags(op: ir.Operation) -> bool:
    if "fastmath" not in op.attributes:
        return True
    return str(op.attributes["fastmath"]) == "#arith.fastmath<none>"


def _defined_in(value: ir.Value, block: ir.Block) -> bool:
    """Whether ``value`` is an argument of ``block`` or the result of an op in it."""
    if isinstance(value, ir.BlockArgument):
        return value.owner == block
    return value.owner.operation.block == block


def mark_lane(op: ir.Operation, lane: int, lanes: int) -> None:
    """Mark scalar atomic ``op`` as lane ``lane`` of a vector add of ``lanes`` elements."""
    i64 = ir.IntegerType.get_signless(64)
    op.attributes[LANE_ATTR] = ir.ArrayAttr.get(
        [ir.IntegerAttr.get(i64, lane), ir.IntegerAttr.get(i64, lanes)]
    )


def lane_of(op: ir.Operation) -> tuple[int, int] | None:
    """``(lane, lanes)`` of a marked atomic, None for an unmarked op."""
    if LANE_ATTR not in op.attributes:
        return None
    lane, lanes = (ir.IntegerAttr(a).value for a in ir.ArrayAttr(op.attributes[LANE_ATTR]))
    return lane, lanes
