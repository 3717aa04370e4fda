"""Elemental lowerings of integer and pred arithmetic, with the evaluator's edge cases.

HLO integers are signless ``iN`` in MLIR (``i1`` for pred, ``i2``/``i4`` for
the sub-byte types), so an op's signedness comes from the HLO element type of
its operand, never from the MLIR type. Arithmetic at ``iN`` wraps at N bits,
which is exactly the reference evaluator's model (integer_semantics.py works
on N-bit codes); what needs care is what LLVM leaves undefined or poison and
XLA defines:

* ``x / 0 = -1`` (all ones, unsigned too) and ``x % 0 = x``; ``INT_MIN / -1 =
  INT_MIN`` and ``INT_MIN % -1 = 0``: the divisor is replaced by 1 where it is
  0 or the pair overflows, and the result fixed up with a select;
* shift amounts are read unsigned; an amount >= the width gives 0 for
  shift-left and shift-right-logical and the sign fill for
  shift-right-arithmetic (an ``ashr`` on the bits, also for unsigned types);
  the amount fed to the shift is always in range, so no poison appears;
* power squares over the exponent's low 6 bits and treats an exponent whose
  top bit is set as negative (also unsigned): 1 for base 1, +-1 for base -1,
  0 otherwise;
* popcnt and count-leading-zeros count within the width and wrap the count
  into the type.

pred takes only what the evaluator allows: and/or/xor/not (logical), add and
maximum (or), multiply and minimum (and), and compare (unsigned 0 < 1).

The shared opcodes (add, divide, compare, ...) are registered by
:mod:`.float_ops`, which calls :func:`integer_binary`, :func:`integer_unary`
and :func:`integer_compare` for integer and pred operands; this module
registers the integer-only opcodes.
"""

from __future__ import annotations

from collections.abc import Sequence

from mlir import ir
from mlir.dialects import arith, math

from heron.emitters.elemental.core import ElementalContext, Values, lowering, unsupported
from heron.emitters.ir_utils import int_constant
from heron.hlo.element_types import ElementType
from heron.hlo.errors import UnsupportedError
from heron.hlo.ir import Instruction

__all__ = ["integer_binary", "integer_compare", "integer_unary"]

#: pred arithmetic as XLA's emitter (and the evaluator) defines it.
_PRED_BINARY = {"add": "or", "maximum": "or", "multiply": "and", "minimum": "and"}

#: HLO comparison direction -> (signed predicate, unsigned predicate).
_DIRECTIONS = {
    "EQ": (arith.CmpIPredicate.eq, arith.CmpIPredicate.eq),
    "NE": (arith.CmpIPredicate.ne, arith.CmpIPredicate.ne),
    "LT": (arith.CmpIPredicate.slt, arith.CmpIPredicate.ult),
    "LE": (arith.CmpIPredicate.sle, arith.CmpIPredicate.ule),
    "GT": (arith.CmpIPredicate.sgt, arith.CmpIPredicate.ugt),
    "GE": (arith.CmpIPredicate.sge, arith.CmpIPredicate.uge),
}

#: Exponent bits power looks at (XLA's elemental emitter unrolls six squarings).
_POWER_BITS = 6


# -- small builders -------------------------------------------------------------


def _error(ctx: ElementalContext | None, inst: Instruction, why: str) -> UnsupportedError:
    return unsupported(ctx if ctx is not None else "?", inst, why)


def _operand_element(inst: Instruction, ctx: ElementalContext | None, k: int = 0) -> ElementType:
    """The HLO element type of operand ``k``, which must be an integer or pred."""
    if len(inst.operands) <= k:
        raise _error(ctx, inst, f"operand {k} is missing")
    element = inst.operands[k].array_shape.element_type
    if not (element.is_integral or element.is_pred):
        raise _error(ctx, inst, f"operand type {element} is not an integer or pred type")
    return element


def _width(value: ir.Value) -> int:
    return ir.IntegerType(value.type).width


def _const(value: int, like: ir.Value) -> ir.Value:
    return int_constant(value, _width(like))


def _cmp(predicate: arith.CmpIPredicate, lhs: ir.Value, rhs: ir.Value) -> ir.Value:
    return arith.CmpIOp(predicate, lhs, rhs).result


def _eq(lhs: ir.Value, rhs: ir.Value) -> ir.Value:
    return _cmp(arith.CmpIPredicate.eq, lhs, rhs)


def _select(condition: ir.Value, on_true: ir.Value, on_false: ir.Value) -> ir.Value:
    return arith.SelectOp(condition, on_true, on_false).result


def _bitwise(opcode: str, lhs: ir.Value, rhs: ir.Value) -> ir.Value:
    op = {"and": arith.AndIOp, "or": arith.OrIOp, "xor": arith.XOrIOp}[opcode]
    return op(lhs, rhs).result


# -- arithmetic -------------------------------------------------------------------


def _divide(lhs: ir.Value, rhs: ir.Value, signed: bool, remainder: bool) -> ir.Value:
    """Division or remainder with XLA's results for a zero divisor and INT_MIN / -1.

    The divisor becomes 1 in both cases, so the hardware op never traps; with
    a divisor of 1, INT_MIN / 1 and INT_MIN % 1 are already the wanted
    INT_MIN and 0, and only the zero divisor needs a fix-up.
    """
    width = _width(lhs)
    zero = _eq(rhs, _const(0, rhs))
    avoid = zero
    if signed:
        int_min = _const(1 << (width - 1), lhs)
        overflow = arith.AndIOp(_eq(lhs, int_min), _eq(rhs, _const(-1, rhs))).result
        avoid = arith.OrIOp(zero, overflow).result
    safe = _select(avoid, _const(1, rhs), rhs)
    if remainder:
        result = (arith.RemSIOp if signed else arith.RemUIOp)(lhs, safe).result
        return _select(zero, lhs, result)
    result = (arith.DivSIOp if signed else arith.DivUIOp)(lhs, safe).result
    return _select(zero, _const(-1, lhs), result)


def _power(base: ir.Value, exponent: ir.Value) -> ir.Value:
    """XLA's integer power: squaring over the exponent's low 6 bits, top bit = negative."""
    width = _width(base)
    one = _const(1, base)
    all_ones = _const(-1, base)
    acc, square, bits = one, base, exponent
    for step in range(min(_POWER_BITS, width)):  # exponent bits at or above the width are 0
        odd_bit = _eq(arith.AndIOp(bits, one).result, one)
        acc = _select(odd_bit, arith.MulIOp(acc, square).result, acc)
        if step + 1 < min(_POWER_BITS, width):
            square = arith.MulIOp(square, square).result
            bits = arith.ShRUIOp(bits, one).result
    negative = _cmp(arith.CmpIPredicate.slt, exponent, _const(0, exponent))
    odd = _eq(arith.AndIOp(exponent, one).result, one)
    minus_one_power = _select(odd, all_ones, one)
    for_negative = _select(
        _eq(base, one), one, _select(_eq(base, all_ones), minus_one_power, _const(0, base))
    )
    return _select(negative, for_negative, acc)


def integer_binary(
    opcode: str,
    inst: Instruction,
    ctx: ElementalContext | None,
    lhs: ir.Value,
    rhs: ir.Value,
) -> ir.Value:
    """``lhs opcode rhs`` for integer or pred operands, as the evaluator computes it.

    ``opcode`` is one of add, subtract, multiply, divide, remainder, maximum,
    minimum, power; signedness comes from ``inst``'s first operand's element
    type. pred allows add/maximum (or) and multiply/minimum (and) only.
    """
    element = _operand_element(inst, ctx)
    if element.is_pred:
        if opcode not in _PRED_BINARY:
            raise _error(ctx, inst, f"{opcode} is not defined for element type pred")
        return _bitwise(_PRED_BINARY[opcode], lhs, rhs)
    signed = element.is_signed_integral
    if opcode == "add":
        return arith.AddIOp(lhs, rhs).result
    if opcode == "subtract":
        return arith.SubIOp(lhs, rhs).result
    if opcode == "multiply":
        return arith.MulIOp(lhs, rhs).result
    if opcode in ("divide", "remainder"):
        return _divide(lhs, rhs, signed, remainder=opcode == "remainder")
    if opcode in ("maximum", "minimum"):
        # Ties pick lhs, as the evaluator does; the values are equal then anyway.
        keep = arith.CmpIPredicate.sge if opcode == "maximum" else arith.CmpIPredicate.sle
        if not signed:
            keep = arith.CmpIPredicate.uge if opcode == "maximum" else arith.CmpIPredicate.ule
        return _select(_cmp(keep, lhs, rhs), lhs, rhs)
    if opcode == "power":
        return _power(lhs, rhs)
    raise _error(ctx, inst, f"{opcode} is not an integer binary op ({element})")


def integer_unary(
    opcode: str, inst: Instruction, ctx: ElementalContext | None, x: ir.Value
) -> ir.Value:
    """abs, negate or sign of an integer; pred has none of them (the evaluator refuses)."""
    element = _operand_element(inst, ctx)
    if element.is_pred:
        raise _error(ctx, inst, f"{opcode} is not defined for element type pred")
    zero = _const(0, x)
    signed = element.is_signed_integral
    if opcode == "negate":
        return arith.SubIOp(zero, x).result
    if opcode == "abs":
        if not signed:
            return x
        negative = _cmp(arith.CmpIPredicate.slt, x, zero)
        return _select(negative, arith.SubIOp(zero, x).result, x)
    if opcode == "sign":
        if not signed:
            return arith.ExtUIOp(x.type, _cmp(arith.CmpIPredicate.ne, x, zero)).result
        # (x > 0) - (x < 0), each comparison widened as 0/1
        positive = arith.ExtUIOp(x.type, _cmp(arith.CmpIPredicate.sgt, x, zero)).result
        negative = arith.ExtUIOp(x.type, _cmp(arith.CmpIPredicate.slt, x, zero)).result
        return arith.SubIOp(positive, negative).result
    raise _error(ctx, inst, f"{opcode} is not an integer unary op ({element})")


def integer_compare(
    direction: str,
    inst: Instruction,
    ctx: ElementalContext | None,
    lhs: ir.Value,
    rhs: ir.Value,
) -> ir.Value:
    """The i1 result of comparing integers (signed or unsigned by type) or preds (unsigned).

    A ``type=`` attribute other than the operand type's own (SIGNED for signed
    integers, UNSIGNED for unsigned ones and pred) is refused, as the
    evaluator refuses it.
    """
    element = _operand_element(inst, ctx)
    signed = element.is_signed_integral
    kind = inst.attr("type")
    if kind is not None and str(kind) != ("SIGNED" if signed else "UNSIGNED"):
        raise _error(ctx, inst, f"compare type {kind} does not apply to {element} operands")
    predicates = _DIRECTIONS.get(direction)
    if predicates is None:
        raise _error(ctx, inst, f"unknown comparison direction '{direction}' ({element})")
    return _cmp(predicates[0] if signed else predicates[1], lhs, rhs)


# -- integer-only opcodes -----------------------------------------------------------


def _integral_operands(
    inst: Instruction, indices: Sequence[ir.Value], ctx: ElementalContext, allow_pred: bool
) -> tuple[ElementType, list[ir.Value]]:
    element = _operand_element(inst, ctx)
    if element.is_pred and not allow_pred:
        raise _error(ctx, inst, f"{inst.opcode} is not defined for element type pred")
    values = [ctx.operand(inst, k, indices) for k in range(len(inst.operands))]
    return element, values


@lowering("and", "or", "xor")
def _logical_binary(
    inst: Instruction, indices: Sequence[ir.Value], ctx: ElementalContext
) -> Values:
    """Bitwise on integers, logical on pred (the same op on i1)."""
    _, (lhs, rhs) = _integral_operands(inst, indices, ctx, allow_pred=True)
    return [_bitwise(inst.opcode, lhs, rhs)]


@lowering("not")
def _not(inst: Instruction, indices: Sequence[ir.Value], ctx: ElementalContext) -> Values:
    """Complement of every bit (logical not on pred): xor with all ones."""
    _, (x,) = _integral_operands(inst, indices, ctx, allow_pred=True)
    return [arith.XOrIOp(x, _const(-1, x)).result]


@lowering("shift-left", "shift-right-logical", "shift-right-arithmetic")
def _shift(inst: Instruction, indices: Sequence[ir.Value], ctx: ElementalContext) -> Values:
    """Shifts whose amount is read unsigned; amounts >= the width give 0 or the sign fill."""
    _, (x, amount) = _integral_operands(inst, indices, ctx, allow_pred=False)
    width = _width(x)
    in_range = _cmp(arith.CmpIPredicate.ult, amount, _const(width, amount))
    if inst.opcode == "shift-right-arithmetic":
        # Shifting by width - 1 is the sign fill, so only the amount needs a select.
        safe = _select(in_range, amount, _const(width - 1, amount))
        return [arith.ShRSIOp(x, safe).result]
    safe = _select(in_range, amount, _const(0, amount))
    op = arith.ShLIOp if inst.opcode == "shift-left" else arith.ShRUIOp
    return [_select(in_range, op(x, safe).result, _const(0, x))]


@lowering("mulhi")
def _mulhi(inst: Instruction, indices: Sequence[ir.Value], ctx: ElementalContext) -> Values:
    """The high half of the full product (signed for signed types): ``mul.hi`` in PTX;
    every width its own half (the evaluator's ``integer_semantics.mulhi``)."""
    element, (lhs, rhs) = _integral_operands(inst, indices, ctx, allow_pred=False)
    op = arith.MulSIExtendedOp if element.is_signed_integral else arith.MulUIExtendedOp
    return [op(lhs, rhs).high]


@lowering("popcnt")
def _popcnt(inst: Instruction, indices: Sequence[ir.Value], ctx: ElementalContext) -> Values:
    """Set bits within the type's width, wrapped into the type (math.ctpop at iN)."""
    _, (x,) = _integral_operands(inst, indices, ctx, allow_pred=False)
    return [math.CtPopOp(x).result]


@lowering("count-leading-zeros", "clz")
def _count_leading_zeros(
    inst: Instruction, indices: Sequence[ir.Value], ctx: ElementalContext
) -> Values:
    """Leading zeros within the type's width (the width for 0), wrapped into the type."""
    _, (x,) = _integral_operands(inst, indices, ctx, allow_pred=False)
    return [math.CountLeadingZerosOp(x).result]
