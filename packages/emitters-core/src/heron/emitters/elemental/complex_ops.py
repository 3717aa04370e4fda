"""Elemental lowerings for complex values: complex/real/imag and the complex arithmetic.

The opcodes shared with real types (add, exponential, compare, ...) are
registered in :mod:`.float_ops`, which calls :func:`complex_binary`,
:func:`complex_unary` and :func:`complex_compare` here for c64/c128 operands.
Where the upstream ``complex`` dialect has the op it is used (expand-math
lowers it with ``convert-complex-to-standard``); the rest are compositions
that follow the reference evaluator's definitions: XLA's power formula (with
its zero-base cases), XLA's atan2 = -i log((x + iy) / sqrt(x^2 + y^2)),
cbrt = z^(1/3), logistic = 1 / (1 + exp(-z)), and the inverse trigonometric
and hyperbolic functions through complex log and sqrt (principal branches,
which agree with numpy's off the branch cuts).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from mlir import ir
from mlir.dialects import arith, math
from mlir.dialects import complex as cx

from heron.emitters.elemental.core import ElementalContext, Values, lowering, unsupported
from heron.emitters.mlir_types import scalar_type
from heron.hlo.element_types import ElementType
from heron.hlo.ir import Instruction

# -- small builders -------------------------------------------------------------------


def _re(z: ir.Value) -> ir.Value:
    return cx.ReOp(z).result


def _im(z: ir.Value) -> ir.Value:
    return cx.ImOp(z).result


def _create(complex_type: ir.Type, re: ir.Value, im: ir.Value) -> ir.Value:
    return cx.CreateOp(complex_type, re, im).result


def _real_constant(real_type: ir.Type, value: float) -> ir.Value:
    return arith.ConstantOp(real_type, value).result


def _constant(complex_type: ir.Type, re: float, im: float = 0.0) -> ir.Value:
    part = ir.ComplexType(complex_type).element_type
    return _create(complex_type, _real_constant(part, re), _real_constant(part, im))


def _times_i(z: ir.Value) -> ir.Value:
    """i z = -im + i re (exact, no multiplication)."""
    return _create(z.type, arith.NegFOp(_im(z)).result, _re(z))


def _times_minus_i(z: ir.Value) -> ir.Value:
    """-i z = im - i re."""
    return _create(z.type, _im(z), arith.NegFOp(_re(z)).result)


def _add(a: ir.Value, b: ir.Value) -> ir.Value:
    return cx.AddOp(a, b).result


def _sub(a: ir.Value, b: ir.Value) -> ir.Value:
    return cx.SubOp(a, b).result


def _mul(a: ir.Value, b: ir.Value) -> ir.Value:
    return cx.MulOp(a, b).result


def _div(a: ir.Value, b: ir.Value) -> ir.Value:
    return cx.DivOp(a, b).result


def _log(z: ir.Value) -> ir.Value:
    return cx.LogOp(z).result


def _log1p(z: ir.Value) -> ir.Value:
    """log(1 + z), upstream's formula but at ``z = -1``: its modulus ``max * (1 + (min /
    max)^2)`` is ``0 * NaN`` there and falls back to ``min``, 0, where the logarithm is
    ``-inf`` (XLA:CPU's value; numpy's)."""
    part = ir.ComplexType(z.type).element_type
    result = cx.Log1pOp(z).result
    at_minus_one = arith.AndIOp(
        arith.CmpFOp(arith.CmpFPredicate.OEQ, _re(z), _real_constant(part, -1.0)).result,
        arith.CmpFOp(arith.CmpFPredicate.OEQ, _im(z), _real_constant(part, 0.0)).result,
    ).result
    re = arith.SelectOp(at_minus_one, _real_constant(part, float("-inf")), _re(result)).result
    return _create(z.type, re, _im(result))


def _sqrt(z: ir.Value) -> ir.Value:
    """The principal square root, upstream's formula but on the negative real axis: its
    real part is ``|z|^(1/2) cos(arg(z) / 2)``, and the f32 ``cos`` of half of pi is
    -4.4e-8, not 0 (``sqrt(-2.5 - 0i)`` was ``-6.9e-8 - 1.58i``). The square root of a
    negative number is imaginary: its real part is +0 there. Else the compositions
    through sqrt (acosh, asin, acos, asinh) land on the wrong side of their branch
    cuts: ``acosh(-2.5 - 0i)`` had the sign of ``-pi`` flipped."""
    part = ir.ComplexType(z.type).element_type
    result = cx.SqrtOp(z).result
    zero = _real_constant(part, 0.0)
    negative_real = arith.AndIOp(
        arith.CmpFOp(arith.CmpFPredicate.OLT, _re(z), zero).result,
        arith.CmpFOp(arith.CmpFPredicate.OEQ, _im(z), zero).result,
    ).result
    re = arith.SelectOp(negative_real, zero, _re(result)).result
    return _create(z.type, re, _im(result))


def _scale(z: ir.Value, factor: float) -> ir.Value:
    part = ir.ComplexType(z.type).element_type
    k = _real_constant(part, factor)
    return _create(z.type, arith.MulFOp(_re(z), k).result, arith.MulFOp(_im(z), k).result)


# -- compositions -------------------------------------------------------------------


def _power(x: ir.Value, y: ir.Value) -> ir.Value:
    """XLA's complex power, as the evaluator writes it.

    |x|^c e^(-d arg x) cis(c arg x + d ln|x|) for x = a + ib, y = c + id, with
    upstream ``convert-complex-to-standard``'s special cases: 0^y = 1 for y = 0 and 0
    for real y > 0; x^0 = 1 and 1^y = 1 whatever the other is (NaN too); inf^c = inf
    for real c > 0 and 0 for real c < 0.

    |x| is taken apart as m = max(|a|, |b|) and s = (a/m)^2 + (b/m)^2 in [1, 2]:
    |x|^c = m^c s^(c/2), ln|x| = ln m + ln(s) / 2. Squared in the component type,
    ``a^2 + b^2`` overflows f32 from |x| of 1.8e19 and vanishes under 1e-19, which
    made ``sqrt`` as a power (``z ** 0.5``, ``cbrt``) NaN or 0 there (a helper's sweep;
    the evaluator squares in complex128).
    """
    part = ir.ComplexType(x.type).element_type
    a, b, c, d = _re(x), _im(x), _re(y), _im(y)
    zero = _real_constant(part, 0.0)
    one = _real_constant(part, 1.0)
    half = _real_constant(part, 0.5)
    largest = arith.MaximumFOp(math.AbsFOp(a).result, math.AbsFOp(b).result).result
    scaled_a = arith.DivFOp(a, largest).result
    scaled_b = arith.DivFOp(b, largest).result
    sum_of_squares = arith.AddFOp(
        arith.MulFOp(scaled_a, scaled_a).result, arith.MulFOp(scaled_b, scaled_b).result
    ).result
    # an infinite part: |x| is infinite, as m alone says (s would be NaN)
    infinite = arith.CmpFOp(
        arith.CmpFPredicate.OEQ, largest, _real_constant(part, float("inf"))
    ).result
    sum_of_squares = arith.SelectOp(infinite, one, sum_of_squares).result
    arg = math.Atan2Op(b, a).result
    magnitude = arith.MulFOp(
        math.PowFOp(largest, c).result,
        math.PowFOp(sum_of_squares, arith.MulFOp(half, c).result).result,
    ).result
    log_magnitude = arith.AddFOp(
        math.LogOp(largest).result,
        arith.MulFOp(half, math.LogOp(sum_of_squares).result).result,
    ).result
    decay = math.ExpOp(arith.MulFOp(arith.NegFOp(d).result, arg).result).result
    coeff = arith.MulFOp(magnitude, decay).result
    q = arith.AddFOp(arith.MulFOp(c, arg).result, arith.MulFOp(d, log_magnitude).result).result
    re = arith.MulFOp(coeff, math.CosOp(q).result).result
    im = arith.MulFOp(coeff, math.SinOp(q).result).result
    zero_base = arith.AndIOp(
        arith.AndIOp(
            arith.CmpFOp(arith.CmpFPredicate.OEQ, largest, zero).result,
            arith.CmpFOp(arith.CmpFPredicate.OEQ, d, zero).result,
        ).result,
        arith.CmpFOp(arith.CmpFPredicate.OGE, c, zero).result,
    ).result
    exponent_zero = arith.CmpFOp(arith.CmpFPredicate.OEQ, c, zero).result
    special_re = arith.SelectOp(exponent_zero, one, zero).result
    re = arith.SelectOp(zero_base, special_re, re).result
    im = arith.SelectOp(zero_base, zero, im).result
    # upstream's other cases: x^0 = 1 and 1^y = 1 (NaN or not), inf^c = inf for real
    # c > 0 and 0 for real c < 0 (the formula gave NaN for each)
    d_zero = arith.CmpFOp(arith.CmpFPredicate.OEQ, d, zero).result
    b_zero = arith.CmpFOp(arith.CmpFPredicate.OEQ, b, zero).result
    unit = arith.OrIOp(
        arith.AndIOp(exponent_zero, d_zero).result,
        arith.AndIOp(arith.CmpFOp(arith.CmpFPredicate.OEQ, a, one).result, b_zero).result,
    ).result
    inf = _real_constant(part, float("inf"))
    infinite_base = arith.AndIOp(
        arith.AndIOp(arith.CmpFOp(arith.CmpFPredicate.OEQ, a, inf).result, b_zero).result,
        d_zero,
    ).result
    grows = arith.AndIOp(
        infinite_base, arith.CmpFOp(arith.CmpFPredicate.OGT, c, zero).result
    ).result
    vanishes = arith.AndIOp(
        infinite_base, arith.CmpFOp(arith.CmpFPredicate.OLT, c, zero).result
    ).result
    re = arith.SelectOp(unit, one, re).result
    im = arith.SelectOp(unit, zero, im).result
    re = arith.SelectOp(grows, inf, arith.SelectOp(vanishes, zero, re).result).result
    im = arith.SelectOp(arith.OrIOp(grows, vanishes).result, zero, im).result
    return _create(x.type, re, im)


def _atan2(y: ir.Value, x: ir.Value) -> ir.Value:
    """atan2(y, x) = -i log((x + iy) / sqrt(x^2 + y^2)) (XLA's definition for complex)."""
    numerator = _add(x, _times_i(y))
    denominator = _sqrt(_add(_mul(x, x), _mul(y, y)))
    return _times_minus_i(_log(_div(numerator, denominator)))


def _asinh(z: ir.Value) -> ir.Value:
    """asinh(z) = log(z + sqrt(z^2 + 1)), evaluated on the half plane Re z >= 0.

    asinh is odd, so a z with negative real part uses -asinh(-z); that keeps
    z + sqrt(z^2 + 1) free of cancellation.
    """
    part = ir.ComplexType(z.type).element_type
    negative = arith.CmpFOp(arith.CmpFPredicate.OLT, _re(z), _real_constant(part, 0.0)).result
    flipped = cx.NegOp(z).result
    w = _create(
        z.type,
        arith.SelectOp(negative, _re(flipped), _re(z)).result,
        arith.SelectOp(negative, _im(flipped), _im(z)).result,
    )
    one = _constant(z.type, 1.0)
    r = _log(_add(w, _sqrt(_add(_mul(w, w), one))))
    neg_r = cx.NegOp(r).result
    return _create(
        z.type,
        arith.SelectOp(negative, _re(neg_r), _re(r)).result,
        arith.SelectOp(negative, _im(neg_r), _im(r)).result,
    )


def _asin(z: ir.Value) -> ir.Value:
    """asin(z) = -i asinh(i z)."""
    return _times_minus_i(_asinh(_times_i(z)))


def _acos(z: ir.Value) -> ir.Value:
    """acos(z) = pi/2 - asin(z)."""
    return _sub(_constant(z.type, float(np.pi / 2)), _asin(z))


def _acosh(z: ir.Value) -> ir.Value:
    """acosh(z) = log(z + sqrt(z + 1) sqrt(z - 1)) (Kahan's principal-branch form)."""
    one = _constant(z.type, 1.0)
    root = _mul(_sqrt(_add(z, one)), _sqrt(_sub(z, one)))
    return _log(_add(z, root))


def _atanh(z: ir.Value) -> ir.Value:
    """atanh(z) = (log1p(z) - log1p(-z)) / 2."""
    plus = _log1p(z)
    minus = _log1p(cx.NegOp(z).result)
    return _scale(_sub(plus, minus), 0.5)


def _cosh(z: ir.Value) -> ir.Value:
    """cosh(a + ib) = cosh a cos b + i sinh a sin b."""
    a, b = _re(z), _im(z)
    re = arith.MulFOp(math.CoshOp(a).result, math.CosOp(b).result).result
    im = arith.MulFOp(math.SinhOp(a).result, math.SinOp(b).result).result
    return _create(z.type, re, im)


def _sinh(z: ir.Value) -> ir.Value:
    """sinh(a + ib) = sinh a cos b + i cosh a sin b."""
    a, b = _re(z), _im(z)
    re = arith.MulFOp(math.SinhOp(a).result, math.CosOp(b).result).result
    im = arith.MulFOp(math.CoshOp(a).result, math.SinOp(b).result).result
    return _create(z.type, re, im)


def _logistic(z: ir.Value) -> ir.Value:
    """1 / (1 + exp(-z))."""
    one = _constant(z.type, 1.0)
    return _div(one, _add(one, cx.ExpOp(cx.NegOp(z).result).result))


def _cbrt(z: ir.Value) -> ir.Value:
    """z^(1/3) with XLA's power formula, as the evaluator defines complex cbrt."""
    return _power(z, _constant(z.type, 1.0 / 3.0))


_UNARY = {
    "abs": lambda z: cx.AbsOp(z).result,
    "negate": lambda z: cx.NegOp(z).result,
    "sign": lambda z: cx.SignOp(z).result,
    "exponential": lambda z: cx.ExpOp(z).result,
    "exponential-minus-one": lambda z: cx.Expm1Op(z).result,
    "log": _log,
    "log-plus-one": _log1p,
    "logistic": _logistic,
    "sqrt": _sqrt,
    "rsqrt": lambda z: cx.RsqrtOp(z).result,
    "cbrt": _cbrt,
    "tanh": lambda z: cx.TanhOp(z).result,
    "sine": lambda z: cx.SinOp(z).result,
    "cosine": lambda z: cx.CosOp(z).result,
    "tan": lambda z: cx.TanOp(z).result,
    "acos": _acos,
    "acosh": _acosh,
    "asin": _asin,
    "asinh": _asinh,
    "atanh": _atanh,
    "cosh": _cosh,
    "sinh": _sinh,
}

_BINARY = {
    "add": _add,
    "subtract": _sub,
    "multiply": _mul,
    "divide": _div,
    "power": _power,
    "atan2": _atan2,
}


# -- entry points for float_ops -----------------------------------------------------


def complex_binary(
    opcode: str, inst: Instruction, ctx: ElementalContext, a: ir.Value, b: ir.Value
) -> ir.Value:
    """``a opcode b`` for complex scalars (add, subtract, multiply, divide, power, atan2)."""
    function = _BINARY.get(opcode)
    if function is None:
        raise unsupported(ctx, inst, f"{opcode} is not defined for complex operands")
    return function(a, b)


def complex_unary(opcode: str, inst: Instruction, ctx: ElementalContext, x: ir.Value) -> ir.Value:
    """``opcode(x)`` for a complex scalar; abs returns the real magnitude."""
    function = _UNARY.get(opcode)
    if function is None:
        raise unsupported(ctx, inst, f"{opcode} is not defined for complex operands")
    return function(x)


def complex_compare(
    direction: str, inst: Instruction, ctx: ElementalContext, a: ir.Value, b: ir.Value
) -> ir.Value:
    """EQ (both parts equal) or NE (either part unequal, or NaN) on complex scalars, as i1."""
    if direction == "EQ":
        return cx.EqualOp(a, b).result
    if direction == "NE":
        return cx.NotEqualOp(a, b).result
    raise unsupported(ctx, inst, f"complex operands allow only EQ and NE, not {direction}")


# -- complex, real, imag ---------------------------------------------------------------


def _operand_type(inst: Instruction, number: int = 0) -> ElementType:
    return inst.operands[number].array_shape.element_type


@lowering("complex")
def _complex(inst: Instruction, indices: Sequence[ir.Value], ctx: ElementalContext) -> Values:
    """complex(re, im) from two f32 (c64) or f64 (c128) operands."""
    element = inst.array_shape.element_type
    if not element.is_complex:
        raise unsupported(ctx, inst, f"complex cannot produce {element.value}")
    re = ctx.operand(inst, 0, indices)
    im = ctx.operand(inst, 1, indices)
    return [_create(scalar_type(element), re, im)]


@lowering("real", "imag")
def _part(inst: Instruction, indices: Sequence[ir.Value], ctx: ElementalContext) -> Values:
    """A complex value's real or imaginary part; of a real float, the value itself or zero."""
    element = _operand_type(inst)
    x = ctx.operand(inst, 0, indices)
    if element.is_complex:
        return [_re(x) if inst.opcode == "real" else _im(x)]
    if not element.is_floating:
        raise unsupported(ctx, inst, f"{inst.opcode} is not defined for {element.value}")
    if inst.opcode == "real":
        return [x]
    scalar = scalar_type(element)
    if isinstance(scalar, ir.IntegerType):  # fp8/f4 bits: the encoding of +0
        bits = int(np.zeros(1, element.numpy_dtype).view(np.uint8)[0])
        return [arith.ConstantOp(scalar, bits).result]
    return [_real_constant(scalar, 0.0)]
