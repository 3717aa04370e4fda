"""Building blocks for the math approximations: typed arith builders and IEEE bit tricks.

Every approximation in ``math_*`` is written once for f32 and f64, scalar or
vector: :class:`Kit` holds the float type being computed in (and the integer
type of the same width and shape) and builds splat constants, arithmetic,
comparisons and the bit manipulations (exponent extraction, ``2^k``
construction) that range reductions need. Keeping these in one place is what
lets each function read as its algorithm.

Only ``arith`` ops are built here, plus two LLVM intrinsics that both GPU
backends and the host lower to instructions without any library
(``llvm.sqrt`` and ``llvm.fma``; see ``expand_math`` for why ``math.sqrt``
itself is not used).
"""

from __future__ import annotations

from collections.abc import Sequence

import attrs
from mlir import ir
from mlir.dialects import arith
from mlir.dialects import llvm as llvm_dialect

from heron.emitters.fast_math import approximate_divide

Value = ir.Value


@attrs.frozen
class FloatFormat:
    """The IEEE parameters of a binary float format."""

    width: int
    mantissa: int  # stored fraction bits

    @property
    def bias(self) -> int:
        return (1 << (self.width - self.mantissa - 2)) - 1

    @property
    def exponent_mask(self) -> int:
        return ((1 << (self.width - 1 - self.mantissa)) - 1) << self.mantissa


F32 = FloatFormat(32, 23)
F64 = FloatFormat(64, 52)


def _shape_like(template: ir.Type, element: ir.Type) -> ir.Type:
    if isinstance(template, ir.VectorType):
        return ir.VectorType.get(list(template.shape), element)
    return element


def element_of(t: ir.Type) -> ir.Type:
    """The element type of a vector type, or ``t`` itself."""
    return ir.VectorType(t).element_type if isinstance(t, ir.VectorType) else t


def _approximate_intrinsic(name: str, a: Value) -> Value:
    """The LLVM intrinsic ``name`` of ``a`` with ``afn``: the backend's approximate form."""
    return llvm_dialect.CallIntrinsicOp(
        a.type, ir.StringAttr.get(name), [a], [], [],
        fastmathFlags=ir.Attribute.parse("#llvm.fastmath<afn>"),
    ).results[0]  # fmt: skip


class Kit:
    """Builders for one float type ``ftype`` (f32 or f64, scalar or vector), at the
    current insertion point."""

    def __init__(self, ftype: ir.Type) -> None:
        element = element_of(ftype)
        if isinstance(element, ir.F32Type):
            self.fmt = F32
        elif isinstance(element, ir.F64Type):
            self.fmt = F64
        else:
            raise TypeError(f"Kit computes in f32 or f64, not {element}")
        self.ftype = ftype
        self.felement = element
        self.ielement = ir.IntegerType.get_signless(self.fmt.width)
        self.itype = _shape_like(ftype, self.ielement)
        self.btype = _shape_like(ftype, ir.IntegerType.get_signless(1))
        self.is_f64 = self.fmt.width == 64

    # -- constants ---------------------------------------------------------------------------

    def c(self, value: float) -> Value:
        """A float constant (splat for vectors)."""
        attr = ir.FloatAttr.get(self.felement, float(value))
        if isinstance(self.ftype, ir.VectorType):
            attr = ir.DenseElementsAttr.get_splat(self.ftype, attr)
        return arith.ConstantOp(self.ftype, attr).result

    def ci(self, value: int) -> Value:
        """An integer constant of the float's width (two's complement)."""
        width = self.fmt.width
        value &= (1 << width) - 1
        if value >= 1 << (width - 1):
            value -= 1 << width
        attr = ir.IntegerAttr.get(self.ielement, value)
        if isinstance(self.itype, ir.VectorType):
            attr = ir.DenseElementsAttr.get_splat(self.itype, attr)
        return arith.ConstantOp(self.itype, attr).result

    def from_bits_const(self, bits: int) -> Value:
        return self.bitcast_f(self.ci(bits))

    def inf(self) -> Value:
        return self.c(float("inf"))

    def nan(self) -> Value:
        return self.c(float("nan"))

    # -- float arithmetic --------------------------------------------------------------------

    def add(self, a: Value, b: Value) -> Value:
        return arith.AddFOp(a, b).result

    def sub(self, a: Value, b: Value) -> Value:
        return arith.SubFOp(a, b).result

    def mul(self, a: Value, b: Value) -> Value:
        return arith.MulFOp(a, b).result

    def div(self, a: Value, b: Value) -> Value:
        return arith.DivFOp(a, b).result

    def div_approx(self, a: Value, b: Value) -> Value:
        """``a / b`` within 2 ulp for f32 (``div.full.f32`` on CUDA:
        :mod:`heron.emitters.fast_math`), correctly rounded for f64. For the
        approximations whose bound allows it (``math_accuracy.APPROXIMATE_DIVISION``)."""
        return approximate_divide(a, b)

    def neg(self, a: Value) -> Value:
        return arith.NegFOp(a).result

    def fma(self, a: Value, b: Value, c: Value) -> Value:
        """``a*b + c`` rounded once (``llvm.intr.fma``: an instruction on every target)."""
        return llvm_dialect.intr_fma(a, b, c)

    def sqrt(self, a: Value) -> Value:
        """Correctly rounded square root through the ``llvm.sqrt`` intrinsic."""
        return llvm_dialect.CallIntrinsicOp(
            a.type, ir.StringAttr.get("llvm.sqrt"), [a], [], []
        ).results[0]

    def sqrt_approx(self, a: Value) -> Value:
        """f32 square root by the hardware's approximation (``llvm.sqrt`` with ``afn``:
        ``sqrt.approx.f32``, XLA's f32 sqrt; correctly rounded on the host and in the
        interpreter). Only for what :func:`heron.emitters.fast_math.approximate_sqrt`
        marked: the approximations here rely on :meth:`sqrt` being rounded."""
        return _approximate_intrinsic("llvm.sqrt", a)

    def rsqrt_approx(self, a: Value) -> Value:
        """f32 ``1 / sqrt(a)`` by the hardware's approximation: the ``afn`` division of
        :meth:`sqrt_approx`, which NVPTX selects as ``rsqrt.approx.f32`` (XLA's rsqrt),
        AMDGPU as ``v_rsq_f32``."""
        one = self.c(1.0)
        afn = ir.Attribute.parse("#arith.fastmath<afn>")
        return arith.DivFOp(one, self.sqrt_approx(a), fastmath=afn).result

    def exp2_approx(self, a: Value) -> Value:
        """``2^a`` by the hardware's approximate instruction (f32 only), ``-24 <= a <= 1``.

        ``llvm.exp2`` with the ``afn`` flag: NVPTX selects ``ex2.approx.f32``
        (what libdevice's ``__nv_expf`` and XLA's f32 exponentials use; at most
        2 ulp, CUDA's ``exp2f`` bound), AMDGPU ``v_exp_f32`` (1 ulp), the host
        libm's ``exp2f``. The interpreter computes ``2^a`` correctly rounded;
        the documented error is the instruction's (docs/pipeline.md, "Accuracy
        contract"). Callers keep the argument at least -24 (or scale the result
        to 0 anyway), so the result is normal and flushing subnormals (``.ftz``)
        could not change it: the CUDA lowering calls ``ex2.approx.ftz.f32``, one
        MUFU.EX2 without the subnormal fix-ups (``heron.runtime.cuda.compiler_fast_math``).
        """
        if self.is_f64:
            raise TypeError("exp2_approx is for f32: no GPU has an approximate f64 exp2")
        return _approximate_intrinsic("llvm.exp2", a)

    def log2_approx(self, a: Value) -> Value:
        """``log2(a)`` by the hardware's approximate instruction (f32 only): ``llvm.log2``
        with ``afn``, which NVPTX selects as ``lg2.approx.f32`` (absolute error 2^-22,
        subnormals kept; libdevice's ``cbrtf`` seeds with it), AMDGPU ``v_log_f32``, the
        host libm's ``log2f``; the interpreter computes it correctly rounded. Only for a
        seed that a correction step makes insensitive to its error (f32 cbrt)."""
        if self.is_f64:
            raise TypeError("log2_approx is for f32: no GPU has an approximate f64 log2")
        return _approximate_intrinsic("llvm.log2", a)

    def poly(self, x: Value, coeffs: Sequence[float]) -> Value:
        """Horner evaluation of ``sum(coeffs[i] * x**i)``, one fma per coefficient.

        Explicit fmas, not a multiply and an add that LLVM might contract:
        the kernel then computes exactly what the interpreter computes (an
        fma rounds once), on every backend, and each step costs one
        instruction (libdevice and XLA's own polynomials are written so too).
        """
        acc = self.c(coeffs[-1])
        for coeff in reversed(coeffs[:-1]):
            acc = self.fma(acc, x, self.c(coeff))
        return acc

    def minnum(self, a: Value, b: Value) -> Value:
        """IEEE minNum (a NaN operand gives the other) through ``llvm.minnum``: one
        ``min.f32`` on NVPTX, ``v_min_f32`` on AMDGPU (arith-expand would make
        ``arith.minnumf`` a compare and two selects)."""
        return llvm_dialect.intr_minnum(a, b)

    def maxnum(self, a: Value, b: Value) -> Value:
        """IEEE maxNum through ``llvm.maxnum`` (see :meth:`minnum`)."""
        return llvm_dialect.intr_maxnum(a, b)

    def min(self, a: Value, b: Value) -> Value:
        return arith.MinimumFOp(a, b).result

    def max(self, a: Value, b: Value) -> Value:
        return arith.MaximumFOp(a, b).result

    # -- comparisons and selection -----------------------------------------------------------

    def cmp(self, predicate: str, a: Value, b: Value) -> Value:
        pred = getattr(arith.CmpFPredicate, predicate.upper())
        return arith.CmpFOp(pred, a, b).result

    def lt(self, a: Value, b: Value) -> Value:
        return self.cmp("olt", a, b)

    def le(self, a: Value, b: Value) -> Value:
        return self.cmp("ole", a, b)

    def gt(self, a: Value, b: Value) -> Value:
        return self.cmp("ogt", a, b)

    def ge(self, a: Value, b: Value) -> Value:
        return self.cmp("oge", a, b)

    def eq(self, a: Value, b: Value) -> Value:
        return self.cmp("oeq", a, b)

    def isnan(self, a: Value) -> Value:
        return self.cmp("uno", a, a)

    def select(self, cond: Value, a: Value, b: Value) -> Value:
        return arith.SelectOp(cond, a, b).result

    def band(self, a: Value, b: Value) -> Value:
        return arith.AndIOp(a, b).result

    def bor(self, a: Value, b: Value) -> Value:
        return arith.OrIOp(a, b).result

    def bnot(self, a: Value) -> Value:
        attr = ir.IntegerAttr.get(ir.IntegerType.get_signless(1), 1)
        if isinstance(a.type, ir.VectorType):
            attr = ir.DenseElementsAttr.get_splat(a.type, attr)
        ones = arith.ConstantOp(a.type, attr).result
        return arith.XOrIOp(a, ones).result

    # -- integers and bits -------------------------------------------------------------------

    def bits(self, x: Value) -> Value:
        return arith.BitcastOp(self.itype, x).result

    def bitcast_f(self, i: Value) -> Value:
        return arith.BitcastOp(self.ftype, i).result

    def iadd(self, a: Value, b: Value) -> Value:
        return arith.AddIOp(a, b).result

    def isub(self, a: Value, b: Value) -> Value:
        return arith.SubIOp(a, b).result

    def iand(self, a: Value, b: Value) -> Value:
        return arith.AndIOp(a, b).result

    def ior(self, a: Value, b: Value) -> Value:
        return arith.OrIOp(a, b).result

    def ixor(self, a: Value, b: Value) -> Value:
        return arith.XOrIOp(a, b).result

    def shl(self, a: Value, n: int) -> Value:
        return arith.ShLIOp(a, self.ci(n)).result

    def ashr(self, a: Value, n: int) -> Value:
        return arith.ShRSIOp(a, self.ci(n)).result

    def icmp(self, predicate: str, a: Value, b: Value) -> Value:
        return arith.CmpIOp(getattr(arith.CmpIPredicate, predicate), a, b).result

    def to_int(self, x: Value) -> Value:
        """fptosi to the same-width integer (``x`` must be integral and in range)."""
        return arith.FPToSIOp(self.itype, x).result

    def to_float(self, i: Value) -> Value:
        return arith.SIToFPOp(self.ftype, i).result

    # -- IEEE helpers --------------------------------------------------------------------------

    def abs(self, x: Value) -> Value:
        """|x| by clearing the sign bit (exact, no library)."""
        return self.bitcast_f(self.iand(self.bits(x), self.ci((1 << (self.fmt.width - 1)) - 1)))

    def sign_bit(self, x: Value) -> Value:
        return self.iand(self.bits(x), self.ci(1 << (self.fmt.width - 1)))

    def copysign(self, magnitude: Value, sign_of: Value) -> Value:
        """``magnitude`` with the sign bit of ``sign_of`` (exact, no library)."""
        mag = self.iand(self.bits(magnitude), self.ci((1 << (self.fmt.width - 1)) - 1))
        return self.bitcast_f(self.ior(mag, self.sign_bit(sign_of)))

    def xorsign(self, x: Value, sign_of: Value) -> Value:
        """``x`` with its sign flipped where ``sign_of`` is negative."""
        return self.bitcast_f(self.ixor(self.bits(x), self.sign_bit(sign_of)))

    def signbit_set(self, x: Value) -> Value:
        return self.icmp("slt", self.bits(x), self.ci(0))

    def pow2i(self, k: Value) -> Value:
        """``2**k`` for an integer ``k`` (same-width int) with normal result (exact)."""
        return self.bitcast_f(self.shl(self.iadd(k, self.ci(self.fmt.bias)), self.fmt.mantissa))

    def ldexp(self, x: Value, k: Value) -> Value:
        """``x * 2**k`` for ``|k| <= 2*bias+mantissa`` in two exact steps (one final rounding).

        Splitting ``k`` in halves keeps both factors normal, so results that
        are subnormal or overflow are rounded or saturated once, correctly.
        """
        half = self.ashr(k, 1)
        rest = self.isub(k, half)
        return self.mul(self.mul(x, self.pow2i(half)), self.pow2i(rest))

    def round_int(self, x: Value) -> Value:
        """Nearest integer (ties to even) as a float, for ``|x| < 2**(mantissa-1)``.

        Adding and subtracting 1.5 * 2**mantissa makes the float adder round.
        """
        shifter = self.c(1.5 * 2.0**self.fmt.mantissa)
        return self.sub(self.add(x, shifter), shifter)

    def frexp(self, x: Value) -> tuple[Value, Value]:
        """``(m, e)`` with ``x = m * 2**e``, ``m`` in [1, 2) (``e`` int), for finite ``x > 0``.

        Subnormals are scaled up first, so ``e`` is exact for them too.
        """
        fmt = self.fmt
        tiny = self.lt(x, self.c(2.0 ** (1 - fmt.bias)))
        scaled = self.select(tiny, self.mul(x, self.c(2.0 ** (fmt.mantissa + 1))), x)
        bits = self.bits(scaled)
        exp_field = arith.ShRUIOp(bits, self.ci(fmt.mantissa)).result
        e = self.isub(exp_field, self.ci(fmt.bias))
        e = self.select(tiny, self.isub(e, self.ci(fmt.mantissa + 1)), e)
        m_bits = self.ior(
            self.iand(bits, self.ci((1 << fmt.mantissa) - 1)), self.ci(fmt.bias << fmt.mantissa)
        )
        return self.bitcast_f(m_bits), e

    def split_high(self, x: Value) -> Value:
        """``x`` with the low half of its mantissa cleared: ``hi*hi`` is then exact."""
        drop = (self.fmt.mantissa + 2) // 2  # keep 12 of 24 / 26 of 53 bits
        return self.bitcast_f(self.iand(self.bits(x), self.ci(~((1 << drop) - 1))))

    def keep_zero(self, x: Value, result: Value) -> Value:
        """``x`` itself where ``x`` is +-0 (so odd functions keep the sign of zero)."""
        return self.select(self.eq(x, self.c(0.0)), x, result)

    def nan_if(self, cond: Value, result: Value) -> Value:
        return self.select(cond, self.nan(), result)

    def pass_nan(self, x: Value, result: Value) -> Value:
        """``x`` where it is NaN (propagate the input NaN), else ``result``."""
        return self.select(self.isnan(x), x, result)
