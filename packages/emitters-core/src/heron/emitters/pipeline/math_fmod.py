"""An exact ``fmod`` (``arith.remf``) in arith + scf: no ``__nv_fmodf``/``__ocml_fmod`` needed.

Why: both GPU backends lower ``arith.remf`` to a vendor library call, and HLO
``remainder`` is exactly ``remf``. The remainder ``x - trunc(x / y) * y`` is
always representable, so it is computed exactly on the integer mantissas:

- ``|x| = mx * 2^ex`` and ``|y| = my * 2^ey`` with integer mantissas below
  ``2^(m+1)`` (subnormals keep their stored fraction and exponent 1, so they
  need no normalisation); ``|x| >= |y|`` implies ``ex >= ey``.
- ``fmod(|x|, |y|) = (mx * 2^(ex-ey) mod my) * 2^ey``. The power of two is
  applied in chunks: ``r = (r << s) urem my`` with ``s <= 63 - m`` keeps
  ``r << s`` inside an unsigned i64 (chunks of 40 bits for f32, 11 for f64:
  at most 7 and 186 steps over the whole exponent range), in an ``scf.while``
  that stops when the exponent difference is used up (for vectors: when it is
  used up in every lane; finished lanes shift by 0, which leaves ``r``).
- The float is rebuilt in integers (no float multiply, so flush-to-zero modes
  cannot touch subnormal results): the exponent of ``r`` comes from its exact
  conversion to float, subnormal results are shifted right (exactly, as the
  result is representable).
- C's special cases: ``x`` inf or NaN, ``y`` NaN or 0 -> NaN (an input NaN is
  passed on); ``|x| < |y|`` (``y`` inf included) -> ``x``; otherwise the sign
  of the result (zero included) is the sign of ``x``.

f16/bf16 are computed in f32 by the caller (``expand_math``) and rounded back,
which is exact: their remainder is representable in them.
"""

from __future__ import annotations

from mlir import ir
from mlir.dialects import arith, scf, vector

from heron.emitters.pipeline.math_common import Kit

Value = ir.Value


def _i64_like(kit: Kit) -> ir.Type:
    i64 = ir.IntegerType.get_signless(64)
    if isinstance(kit.ftype, ir.VectorType):
        return ir.VectorType.get(list(ir.VectorType(kit.ftype).shape), i64)
    return i64


def _const(t: ir.Type, value: int) -> Value:
    element = ir.VectorType(t).element_type if isinstance(t, ir.VectorType) else t
    attr = ir.IntegerAttr.get(element, value)
    if isinstance(t, ir.VectorType):
        attr = ir.DenseElementsAttr.get_splat(t, attr)
    return arith.ConstantOp(t, attr).result


def _to_i64(kit: Kit, v: Value, i64: ir.Type) -> Value:
    return v if kit.is_f64 else arith.ExtUIOp(i64, v).result


def _any(cond: Value) -> Value:
    """One i1 that is true where any lane of ``cond`` is (``cond`` itself for scalars)."""
    if not isinstance(cond.type, ir.VectorType):
        return cond
    i1 = ir.IntegerType.get_signless(1)
    return vector.ReductionOp(i1, vector.CombiningKind.OR, cond).result


def _mantissa_exponent(kit: Kit, magnitude: Value) -> tuple[Value, Value]:
    """``(mantissa, exponent field)`` with ``|v| = mantissa * 2^(exponent - bias - m)``
    for the finite magnitude bits ``magnitude``; subnormals get exponent 1."""
    m = kit.fmt.mantissa
    field = arith.ShRUIOp(magnitude, kit.ci(m)).result
    is_normal = kit.icmp("ne", field, kit.ci(0))
    fraction = kit.iand(magnitude, kit.ci((1 << m) - 1))
    mantissa = kit.select(is_normal, kit.ior(fraction, kit.ci(1 << m)), fraction)
    return mantissa, kit.select(is_normal, field, kit.ci(1))


def _remainder_loop(kit: Kit, mx: Value, my: Value, diff: Value) -> Value:
    """``(mx * 2^diff) urem my`` in i64, ``mx, my < 2^(m+1)``, ``my > 0``, ``diff >= 0``."""
    i64 = mx.type
    chunk = _const(i64, 63 - kit.fmt.mantissa)
    zero = _const(i64, 0)
    loop = scf.WhileOp([i64, i64], [mx, diff])
    before = loop.before.blocks.append(i64, i64)
    with ir.InsertionPoint(before):
        r, d = before.arguments
        pending = arith.CmpIOp(arith.CmpIPredicate.ne, d, zero).result
        scf.ConditionOp(_any(pending), [r, d])
    after = loop.after.blocks.append(i64, i64)
    with ir.InsertionPoint(after):
        r, d = after.arguments
        step = arith.MinUIOp(d, chunk).result
        r = arith.RemUIOp(arith.ShLIOp(r, step).result, my).result
        scf.YieldOp([r, arith.SubIOp(d, step).result])
    return arith.RemUIOp(loop.results[0], my).result


def _rebuild(kit: Kit, r: Value, ey: Value) -> Value:
    """The magnitude bits of ``r * 2^(ey - bias - m)`` (``r < 2^(m+1)``, exactly representable)."""
    fmt = kit.fmt
    m = fmt.mantissa
    r_bits = kit.bits(kit.to_float(r))  # exact: r has at most m+1 bits
    fraction = kit.iand(r_bits, kit.ci((1 << m) - 1))
    r_field = arith.ShRUIOp(r_bits, kit.ci(m)).result
    exponent = kit.isub(kit.iadd(r_field, ey), kit.ci(fmt.bias + m))
    is_normal = kit.icmp("sge", exponent, kit.ci(1))
    normal = kit.ior(arith.ShLIOp(exponent, kit.ci(m)).result, fraction)
    # Subnormal: shift the full mantissa right by 1 - exponent (< m+1 for r >= 1).
    shift = kit.select(is_normal, kit.ci(0), kit.isub(kit.ci(1), exponent))
    shift = arith.MinUIOp(shift, kit.ci(fmt.width - 1)).result
    subnormal = arith.ShRUIOp(kit.ior(fraction, kit.ci(1 << m)), shift).result
    magnitude = kit.select(is_normal, normal, subnormal)
    return kit.select(kit.icmp("eq", r, kit.ci(0)), kit.ci(0), magnitude)


def fmod(kit: Kit, x: Value, y: Value) -> Value:
    """C ``fmod(x, y)`` (bit-exact) for f32/f64 scalars or vectors of ``kit``'s type."""
    fmt = kit.fmt
    abs_mask = kit.ci((1 << (fmt.width - 1)) - 1)
    inf_bits = kit.ci(fmt.exponent_mask)
    ax = kit.iand(kit.bits(x), abs_mask)
    ay = kit.iand(kit.bits(y), abs_mask)
    invalid = kit.bor(
        kit.bor(kit.icmp("uge", ax, inf_bits), kit.icmp("ugt", ay, inf_bits)),
        kit.icmp("eq", ay, kit.ci(0)),
    )
    small = kit.icmp("ult", ax, ay)
    skip = kit.bor(invalid, small)

    mx, ex = _mantissa_exponent(kit, ax)
    my, ey = _mantissa_exponent(kit, ay)
    # Lanes whose result is chosen below do no work (and never divide by 0).
    mx = kit.select(skip, kit.ci(0), mx)
    my = kit.select(skip, kit.ci(1), my)
    diff = kit.select(skip, kit.ci(0), kit.isub(ex, ey))
    i64 = _i64_like(kit)
    r = _remainder_loop(kit, _to_i64(kit, mx, i64), _to_i64(kit, my, i64), _to_i64(kit, diff, i64))
    if not kit.is_f64:
        r = arith.TruncIOp(kit.itype, r).result

    result = kit.bitcast_f(kit.ior(_rebuild(kit, r, ey), kit.sign_bit(x)))
    result = kit.select(small, x, result)
    nan = kit.select(kit.isnan(x), x, kit.select(kit.isnan(y), y, kit.nan()))
    return kit.select(invalid, nan, result)
