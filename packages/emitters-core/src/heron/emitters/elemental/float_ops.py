"""Elemental lowerings of the arithmetic, comparison and math opcodes, dispatched on type.

The opcodes here (add, compare, select, clamp, tanh, ...) exist for several
type families, so each lowering looks at the operands' HLO element type and
hands the work to the family's code: real floats are computed here, complex
values in :mod:`.complex_ops`, integers and pred in :mod:`.int_ops`.

Real floats follow the reference evaluator (``heron.hlo.evaluator``), which
follows XLA: f32 and f64 compute in their own type; f16, bf16, the fp8
family and f4 compute in f32 and round the result back once per op (f16 and
bf16 with ``arith.extf``/``arith.truncf``, the fp8/f4 bit patterns through
:func:`heron.emitters.elemental.conversions.to_f32`/``from_f32``).
Transcendental functions are ``math`` ops; the expand-math pass replaces
them with approximations for the GPU, so none are written here.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from mlir import ir
from mlir.dialects import arith, math
from mlir.dialects import llvm as llvm_dialect

from heron.emitters.elemental.core import ElementalContext, Values, lowering, unsupported
from heron.emitters.fast_math import approximate_divide, approximate_rsqrt, approximate_sqrt
from heron.emitters.mlir_types import scalar_type
from heron.hlo.element_types import ElementType
from heron.hlo.ir import Instruction

_WIDE = (ElementType.F32, ElementType.F64)
_HALF = (ElementType.F16, ElementType.BF16)


def _extremum(a: ir.Value, b: ir.Value, maximum: bool) -> ir.Value:
    """XLA's maximum/minimum: NaN when either operand is, and -0 < +0 (IEEE 754-2019
    maximum/minimum, ``llvm.maximum``/``llvm.minimum``), as XLA:GPU emits them.

    NVPTX makes each one ``max.NaN``/``min.NaN`` on sm_80 and later (f32, f16,
    bf16) and expands it elsewhere; the interpreter computes it as the evaluator
    does (a NaN operand's value, quieted). Written out as compares and selects
    (NaN first, then the signed zeros), a maximum was ten instructions that
    LLVM's InstCombine walked again at every step of a reduction's chain of
    them: 13 of the 22 ms a max reduction's kernel spent in the O3 pipeline.
    """
    if maximum:
        return llvm_dialect.intr_maximum(a, b)
    return llvm_dialect.intr_minimum(a, b)


_FLOAT_BINARY: dict[str, Callable[[ir.Value, ir.Value], ir.Value]] = {
    "add": lambda a, b: arith.AddFOp(a, b).result,
    "subtract": lambda a, b: arith.SubFOp(a, b).result,
    "multiply": lambda a, b: arith.MulFOp(a, b).result,
    "divide": approximate_divide,  # f32: within 2 ulp, as XLA:GPU divides
    "remainder": lambda a, b: arith.RemFOp(a, b).result,  # C fmod, like the evaluator
    "maximum": lambda a, b: _extremum(a, b, maximum=True),
    "minimum": lambda a, b: _extremum(a, b, maximum=False),
    "power": lambda a, b: math.PowFOp(a, b).result,
    "atan2": lambda a, b: math.Atan2Op(a, b).result,
}

_INTEGER_BINARY = frozenset(
    {"add", "subtract", "multiply", "divide", "remainder", "maximum", "minimum", "power"}
)
_INTEGER_UNARY = frozenset({"abs", "negate", "sign"})


def _sign(x: ir.Value) -> ir.Value:
    """-1 or +1 with x's sign; zeros (keeping -0) and NaN are returned unchanged."""
    one = arith.ConstantOp(x.type, 1.0).result
    zero = arith.ConstantOp(x.type, 0.0).result
    nonzero = arith.CmpFOp(arith.CmpFPredicate.ONE, x, zero).result  # false for 0 and NaN
    return arith.SelectOp(nonzero, math.CopySignOp(one, x).result, x).result


def _logistic(x: ir.Value) -> ir.Value:
    """1 / (1 + exp(-x)) in the evaluator's overflow-free form.

    e = exp(-|x|); x >= 0 gives 1 / (1 + e), otherwise e / (1 + e), so a large
    negative x yields a tiny result instead of 1 / inf; NaN takes the second
    branch and stays NaN. f32 divides within 2 ulp (``heron.emitters.fast_math``):
    the reciprocal once (CUDA: ``rcp.approx.f32``, XLA's one division of its
    ``1 / (1 + exp(-x))``), ``e / (1 + e)`` as ``e`` times it.
    """
    one = arith.ConstantOp(x.type, 1.0).result
    zero = arith.ConstantOp(x.type, 0.0).result
    e = math.ExpOp(arith.NegFOp(math.AbsFOp(x).result).result).result
    denominator = arith.AddFOp(one, e).result
    positive = approximate_divide(one, denominator)
    if isinstance(x.type, ir.F32Type):
        negative = arith.MulFOp(e, positive).result
    else:
        negative = approximate_divide(e, denominator)
    non_negative = arith.CmpFOp(arith.CmpFPredicate.OGE, x, zero).result
    return arith.SelectOp(non_negative, positive, negative).result


_FLOAT_UNARY: dict[str, Callable[[ir.Value], ir.Value]] = {
    "abs": lambda x: math.AbsFOp(x).result,
    "negate": lambda x: arith.NegFOp(x).result,
    "sign": _sign,
    "exponential": lambda x: math.ExpOp(x).result,
    "exponential-minus-one": lambda x: math.ExpM1Op(x).result,
    "log": lambda x: math.LogOp(x).result,
    "log-plus-one": lambda x: math.Log1pOp(x).result,
    "logistic": _logistic,
    "sqrt": approximate_sqrt,  # f32: XLA:GPU's sqrt.approx (heron.emitters.fast_math)
    "rsqrt": approximate_rsqrt,
    "cbrt": lambda x: math.CbrtOp(x).result,
    "tanh": lambda x: math.TanhOp(x).result,
    "sine": lambda x: math.SinOp(x).result,
    "cosine": lambda x: math.CosOp(x).result,
    "tan": lambda x: math.TanOp(x).result,
    "erf": lambda x: math.ErfOp(x).result,
    "floor": lambda x: math.FloorOp(x).result,
    "ceil": lambda x: math.CeilOp(x).result,
    "round-nearest-afz": lambda x: math.RoundOp(x).result,
    "round-nearest-even": lambda x: math.RoundEvenOp(x).result,
    "acos": lambda x: math.AcosOp(x).result,
    "acosh": lambda x: math.AcoshOp(x).result,
    "asin": lambda x: math.AsinOp(x).result,
    "asinh": lambda x: math.AsinhOp(x).result,
    "atanh": lambda x: math.AtanhOp(x).result,
    "cosh": lambda x: math.CoshOp(x).result,
    "sinh": lambda x: math.SinhOp(x).result,
}

#: Complex operands support a subset (no rounding, no erf); abs gives a real result.
_COMPLEX_UNARY_OK = frozenset(_FLOAT_UNARY) - {
    "erf",
    "floor",
    "ceil",
    "round-nearest-afz",
    "round-nearest-even",
}

_FLOAT_PREDICATES = {
    "EQ": arith.CmpFPredicate.OEQ,
    "NE": arith.CmpFPredicate.UNE,  # true when either side is NaN, as IEEE != is
    "LT": arith.CmpFPredicate.OLT,
    "LE": arith.CmpFPredicate.OLE,
    "GT": arith.CmpFPredicate.OGT,
    "GE": arith.CmpFPredicate.OGE,
}

_SIGNED_PREDICATES = {
    "EQ": arith.CmpIPredicate.eq,
    "NE": arith.CmpIPredicate.ne,
    "LT": arith.CmpIPredicate.slt,
    "LE": arith.CmpIPredicate.sle,
    "GT": arith.CmpIPredicate.sgt,
    "GE": arith.CmpIPredicate.sge,
}

_FNUZ = frozenset({ElementType.F8E4M3FNUZ, ElementType.F8E5M2FNUZ, ElementType.F8E4M3B11FNUZ})


# -- compute type ---------------------------------------------------------------


def operand_type(inst: Instruction, number: int = 0) -> ElementType:
    """The HLO element type of operand ``number``."""
    return inst.operands[number].array_shape.element_type


def _conversions(inst: Instruction, ctx: ElementalContext):
    from heron.emitters.elemental import conversions

    if not hasattr(conversions, "to_f32") or not hasattr(conversions, "from_f32"):
        raise unsupported(
            ctx, inst, "fp8/f4 arithmetic needs conversions.to_f32/from_f32, not available"
        )
    return conversions


def to_compute(value: ir.Value, element: ElementType, inst: Instruction, ctx) -> ir.Value:
    """A real float scalar of ``element`` in the type XLA computes it in (f32, or f64)."""
    if element in _WIDE:
        return value
    if element in _HALF:
        return arith.ExtFOp(ir.F32Type.get(), value).result
    if element.is_floating:
        return _conversions(inst, ctx).to_f32(value, element)
    raise unsupported(ctx, inst, f"element type {element.value} is not a real float")


def from_compute(value: ir.Value, element: ElementType, inst: Instruction, ctx) -> ir.Value:
    """A compute-type result rounded back to ``element`` (one rounding, nearest-even)."""
    if element in _WIDE:
        return value
    if element in _HALF:
        return arith.TruncFOp(scalar_type(element), value).result
    return _conversions(inst, ctx).from_f32(value, element)


def in_compute_type(
    inst: Instruction,
    ctx: ElementalContext,
    element: ElementType,
    values: Sequence[ir.Value],
    function: Callable[..., ir.Value],
) -> ir.Value:
    """``function`` applied to ``values`` in the compute type, the result rounded to ``element``."""
    wide = [to_compute(v, element, inst, ctx) for v in values]
    return from_compute(function(*wide), element, inst, ctx)


def broadcast_operand(
    inst: Instruction, number: int, indices: Sequence[ir.Value], ctx: ElementalContext
) -> ir.Value:
    """Operand ``number``, which may be a scalar standing for every element (select, clamp)."""
    if inst.operands[number].array_shape.rank == 0:
        return ctx.operand(inst, number, [])
    return ctx.operand(inst, number, indices)


def _int_ops():
    from heron.emitters.elemental import int_ops

    return int_ops


def _complex_ops():
    from heron.emitters.elemental import complex_ops

    return complex_ops


# -- arithmetic -------------------------------------------------------------------


@lowering(*_FLOAT_BINARY)
def _binary(inst: Instruction, indices: Sequence[ir.Value], ctx: ElementalContext) -> Values:
    """Binary arithmetic on every type family that defines the op."""
    element = operand_type(inst)
    lhs = ctx.operand(inst, 0, indices)
    rhs = ctx.operand(inst, 1, indices)
    if element.is_floating:
        return [in_compute_type(inst, ctx, element, [lhs, rhs], _FLOAT_BINARY[inst.opcode])]
    if element.is_complex:
        return [_complex_ops().complex_binary(inst.opcode, inst, ctx, lhs, rhs)]
    if (element.is_integral or element.is_pred) and inst.opcode in _INTEGER_BINARY:
        return [_int_ops().integer_binary(inst.opcode, inst, ctx, lhs, rhs)]
    raise unsupported(ctx, inst, f"{inst.opcode} is not defined for {element.value}")


@lowering(*_FLOAT_UNARY)
def _unary(inst: Instruction, indices: Sequence[ir.Value], ctx: ElementalContext) -> Values:
    """Unary arithmetic and math functions on every type family that defines them."""
    element = operand_type(inst)
    x = ctx.operand(inst, 0, indices)
    if element.is_floating:
        return [in_compute_type(inst, ctx, element, [x], _FLOAT_UNARY[inst.opcode])]
    if element.is_complex and inst.opcode in _COMPLEX_UNARY_OK:
        return [_complex_ops().complex_unary(inst.opcode, inst, ctx, x)]
    if element.is_integral and inst.opcode in _INTEGER_UNARY:
        return [_int_ops().integer_unary(inst.opcode, inst, ctx, x)]
    if element.is_pred and inst.opcode in _INTEGER_UNARY:
        return [_int_ops().integer_unary(inst.opcode, inst, ctx, x)]
    raise unsupported(ctx, inst, f"{inst.opcode} is not defined for {element.value}")


@lowering("is-finite")
def _is_finite(inst: Instruction, indices: Sequence[ir.Value], ctx: ElementalContext) -> Values:
    """Neither infinite nor NaN: |x| compares ordered and unequal to infinity."""
    element = operand_type(inst)
    if not element.is_floating:
        raise unsupported(ctx, inst, f"is-finite is not defined for {element.value}")
    x = to_compute(ctx.operand(inst, 0, indices), element, inst, ctx)
    infinity = arith.ConstantOp(x.type, float("inf")).result
    magnitude = math.AbsFOp(x).result
    return [arith.CmpFOp(arith.CmpFPredicate.ONE, magnitude, infinity).result]


# -- compare, select, clamp ----------------------------------------------------------


def _total_order_key(bits: ir.Value, element: ElementType) -> ir.Value:
    """A signed integer whose order is TOTALORDER (see the evaluator's total_order_keys).

    -NaN < -inf < ... < -0 < +0 < ... < inf < NaN: flipping the magnitude bits
    of negative sign-magnitude patterns makes them two's complement. The fnuz
    formats' lone NaN (the -0 pattern) sorts below everything; f8e8m0fnu has
    no sign bit, so its codes are already ordered. The key is at least 32 bits
    wide so that those special keys fit.
    """
    width = element.bit_width
    key_width = max(32, width)
    key_type = ir.IntegerType.get_signless(key_width)
    if element is ElementType.F8E8M0FNU:
        return arith.ExtUIOp(key_type, bits).result
    signed = bits if width == key_width else arith.ExtSIOp(key_type, bits).result
    zero = arith.ConstantOp(key_type, 0).result
    mask = arith.ConstantOp(key_type, (1 << (width - 1)) - 1).result
    negative = arith.CmpIOp(arith.CmpIPredicate.slt, signed, zero).result
    key = arith.SelectOp(negative, arith.XOrIOp(signed, mask).result, signed).result
    if element in _FNUZ:
        nan_bits = arith.ConstantOp(key_type, -(1 << (width - 1))).result
        is_nan = arith.CmpIOp(arith.CmpIPredicate.eq, signed, nan_bits).result
        lowest = arith.ConstantOp(key_type, -(1 << width)).result
        key = arith.SelectOp(is_nan, lowest, key).result
    return key


def _float_bits(value: ir.Value, element: ElementType) -> ir.Value:
    """The encoding of a real float scalar as a same-width integer (fp8/f4 already are)."""
    if isinstance(value.type, ir.IntegerType):
        return value
    return arith.BitcastOp(ir.IntegerType.get_signless(element.bit_width), value).result


@lowering("compare")
def _compare(inst: Instruction, indices: Sequence[ir.Value], ctx: ElementalContext) -> Values:
    """compare with its direction and comparison type (FLOAT, TOTALORDER, SIGNED, UNSIGNED)."""
    element = operand_type(inst)
    direction = str(inst.attributes.get("direction", ""))
    kind = inst.attributes.get("type")
    kind = None if kind is None else str(kind)
    if direction not in _FLOAT_PREDICATES:
        raise unsupported(ctx, inst, f"unknown compare direction '{direction}'")
    lhs = ctx.operand(inst, 0, indices)
    rhs = ctx.operand(inst, 1, indices)
    if element.is_floating:
        if kind == "TOTALORDER":
            keys = [_total_order_key(_float_bits(v, element), element) for v in (lhs, rhs)]
            return [arith.CmpIOp(_SIGNED_PREDICATES[direction], *keys).result]
        if kind not in (None, "FLOAT"):
            raise unsupported(ctx, inst, f"compare type {kind} does not apply to {element.value}")
        wide = [to_compute(v, element, inst, ctx) for v in (lhs, rhs)]
        return [arith.CmpFOp(_FLOAT_PREDICATES[direction], *wide).result]
    if element.is_complex:
        if kind not in (None, "FLOAT"):
            raise unsupported(ctx, inst, f"compare type {kind} does not apply to {element.value}")
        return [_complex_ops().complex_compare(direction, inst, ctx, lhs, rhs)]
    if element.is_integral or element.is_pred:
        # int_ops checks the type attribute (SIGNED/UNSIGNED must fit the operands).
        return [_int_ops().integer_compare(direction, inst, ctx, lhs, rhs)]
    raise unsupported(ctx, inst, f"compare is not defined for {element.value}")


def select_scalar(condition: ir.Value, on_true: ir.Value, on_false: ir.Value) -> ir.Value:
    """``arith.select`` for any scalar type; complex values are selected per component.

    Complex values are split so that no ``arith.select`` on a complex type
    reaches the LLVM conversions, which do not all accept one.
    """
    if isinstance(on_true.type, ir.ComplexType):
        from mlir.dialects import complex as complex_dialect

        parts = [
            arith.SelectOp(condition, part(on_true).result, part(on_false).result).result
            for part in (complex_dialect.ReOp, complex_dialect.ImOp)
        ]
        return complex_dialect.CreateOp(on_true.type, *parts).result
    return arith.SelectOp(condition, on_true, on_false).result


@lowering("select")
def _select(inst: Instruction, indices: Sequence[ir.Value], ctx: ElementalContext) -> Values:
    """select(pred, on_true, on_false); the predicate may be a scalar."""
    if operand_type(inst) is not ElementType.PRED:
        raise unsupported(ctx, inst, "select needs a pred predicate")
    if inst.shape.is_tuple:
        raise unsupported(ctx, inst, "tuple-shaped select is not supported")
    condition = broadcast_operand(inst, 0, indices, ctx)
    on_true = ctx.operand(inst, 1, indices)
    on_false = ctx.operand(inst, 2, indices)
    return [select_scalar(condition, on_true, on_false)]


@lowering("clamp")
def _clamp(inst: Instruction, indices: Sequence[ir.Value], ctx: ElementalContext) -> Values:
    """clamp(min, x, max) = minimum(maximum(x, min), max); the bounds may be scalars.

    With XLA's NaN-propagating maximum/minimum a NaN anywhere gives NaN.
    """
    element = operand_type(inst, 1)
    low = broadcast_operand(inst, 0, indices, ctx)
    x = ctx.operand(inst, 1, indices)
    high = broadcast_operand(inst, 2, indices, ctx)
    if element.is_floating:

        def clamp(low_: ir.Value, x_: ir.Value, high_: ir.Value) -> ir.Value:
            return _extremum(_extremum(x_, low_, maximum=True), high_, maximum=False)

        return [in_compute_type(inst, ctx, element, [low, x, high], clamp)]
    if element.is_integral or element.is_pred:
        int_ops = _int_ops()
        raised = int_ops.integer_binary("maximum", inst, ctx, x, low)
        return [int_ops.integer_binary("minimum", inst, ctx, raised, high)]
    raise unsupported(ctx, inst, f"clamp is not defined for {element.value}")
