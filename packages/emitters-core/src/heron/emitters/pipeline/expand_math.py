"""The ``expand-math`` pass: math ops become arith code, so no vendor math library is needed.

Why: both GPU backends turn almost every ``math`` op into a library call.
NVVM calls libdevice for all of them, even ``math.absf`` (``__nv_fabsf``) and
``math.sqrt`` (``__nv_sqrtf``, which libdevice's default reflection makes
``sqrt.approx.f32``, not correctly rounded), and linking libdevice costs
about 120 ms per kernel. ROCDL calls OCML, which heron does not ship.
``arith.remf`` (C fmod) is a library call on both backends too
(``__nv_fmodf``, ``__ocml_fmod_f32``): it becomes the exact integer fmod of
``math_fmod``.

What the pass does, in order:

1. ``convert-complex-to-standard`` lowers complex arithmetic to real
   arith/math (it produces math.atan2, log, exp, sqrt...); the
   ``complex.re``/``im`` of a ``complex.create`` that it leaves are folded.
2. Every math op outside :data:`NATIVE_MATH` is replaced by arith code
   written in ``math_exp_log``, ``math_trig``, ``math_special`` (f32 and f64,
   scalar or vector; f16 and bf16 are computed in f32 and rounded back, as XLA
   does). ``math.sqrt`` and ``math.fma`` become the LLVM intrinsics
   ``llvm.sqrt`` (through ``llvm.call_intrinsic``) and ``llvm.intr.fma``: both
   backends and the host lower them to instructions (checked: no ``__nv_``,
   no ``__ocml_``; NVVM rejects the typed ``llvm.intr.sqrt``, hence the
   generic call). ``math.absf`` and ``math.copysign`` become sign-bit
   operations.

Accuracy (max error in ulps of the result type on the GPU, measured by
``tests/test_math_accuracy.py`` and ``tests/test_pass_expand_math.py``
against numpy in float64 for f32 and in x87 long double for f64, over wide
random ranges, near 0, near the range-reduction edges and with special
values; "exact" means bit-identical). Polynomials are evaluated with one
explicit fma per coefficient. The f32 exponentials take ``2^r`` from the
GPU's approximate instruction (``llvm.exp2`` afn: ``ex2.approx.f32``, at
most 2 ulp; AMDGPU ``v_exp_f32``), as XLA's ``__nv_expf`` does: their f32
bounds (marked *) include its 2 ulp, which the host (libm's ``exp2f``) and
the interpreter (correctly rounded) do not show. f32 tanh and erf are XLA:GPU's
own rational approximations, to the operation (heron adopts XLA's numerics where
XLA has its own: ``heron.emitters.math_accuracy.XLA_FORMS``), whose quotients
may be 2 ulp off (``div.full.f32``, as XLA divides:
``heron.emitters.fast_math``), which the host and the interpreter do not show
either; docs/pipeline.md, "Accuracy contract: what heron shares with XLA":

==============  =========  =========  ==================================================
op              f32        f64        notes
==============  =========  =========  ==================================================
exp, exp2       3*         2          overflow to inf, subnormal results rounded once
expm1           2          2          sign of -0 kept; f32: one fma
                                      2^k expm1(r) + (2^k - 1), 1.44 measured
log             1          2          < 0 -> NaN, 0 -> -inf (f64: 1.12 measured)
log2, log10     3          3          integer part exact (log2(8) == 3)
log1p           2          3          < -1 -> NaN, -1 -> -inf (1.61 / 2.21 measured);
                                      f32: log's polynomial on f = (1+x)/2^k - 1
                                      computed from x (libdevice's reduction)
sin, cos        2          2          f32: every finite x (f32 Cody-Waite below
                                      2^17, 1.49 measured; Payne-Hanek above);
                                      f64: every finite x (Cody-Waite below 2^20,
                                      Payne-Hanek above, behind a branch; 1.23
                                      measured up to f64 max)
tan             4          3          f32: Payne-Hanek from 2^20 on; f64 as sin
atan            1          1
atan2           2          2          every IEEE zero/inf quadrant case; f32: one
                                      polynomial on [0, 1] (1.64 measured)
asin, acos      3          3          |x| > 1 -> NaN
sinh            4*         3          overflow exactly at the true threshold
cosh            4*         3          f32: its 1/(4h) within 2 ulp (div.full)
tanh            7          3          f32: XLA:GPU's own (clamp, odd rational
                                      13/6, x below 4e-4), 4.90 measured on
                                      every f32, plus div.full's 2 ulp
asinh, acosh,   3          3          acosh(x < 1), atanh(|x| > 1) -> NaN
atanh
erf             8          2          f32: XLA:GPU's own (clamp, rational 9/12),
                                      5.92 measured, plus div.full's 2 ulp
erfc            6*         4          relative, down to the underflow threshold
cbrt            2          2          f32: libdevice's lg2/ex2.approx seed and one
                                      correction, no division (0.99 measured)
powf            4          2          f32 in f32 with double-f32 log2 and product
                                      (libdevice's powf structure; grows with
                                      |y log2 x|: 0.97 measured below 16, 1.73
                                      below 64, 3.38 near 128); f64 in f64 with a
                                      double-double log and y*ln|x| as a pair into
                                      exp (__nv_pow's structure; 0.79 measured up
                                      to |y ln x| = 745); numpy's special cases
fpowi           1          as powf    computed in f64 (exponent converted to f64)
rsqrt           1          1          1 / (correctly rounded sqrt); HLO's f32 rsqrt:
                                      3 ulp, rsqrt.approx (XLA's), see below
sqrt            0          0          llvm.sqrt, correctly rounded; HLO's f32 sqrt:
                                      2 ulp, sqrt.approx (XLA's), see below
floor, ceil,    exact      exact      also round (half away from 0) and roundeven;
trunc                                 signs of zero kept
absf, copysign  exact      exact      sign-bit operations
remf (fmod)     exact      exact      arith.remf; integer mantissa remainder in an
                                      scf.while; C's special cases
ipowi           exact      exact      integers, wrapping; negative exponent -> 0
                                      except for bases 1 and -1
==============  =========  =========  ==================================================

f16/bf16 results are the f32 result rounded once more (at most 1 ulp of the
narrow type plus a double-rounding tie in rare cases).

The ``math.sqrt``/``math.rsqrt`` ops the elemental emitter marks ``afn`` for HLO's
f32 (and f16/bf16) ``sqrt`` and ``rsqrt`` (:mod:`heron.emitters.fast_math`, XLA:GPU's
forms) become ``llvm.sqrt`` with ``afn`` (``sqrt.approx.f32``: relative error
2^-23, 2 ulp) and a division by it with ``afn`` (``rsqrt.approx.f32``: 2^-22.9,
3 ulp): ``math_accuracy.FAST_MATH``. The host and the interpreter compute them
correctly rounded.
"""

from __future__ import annotations

from collections.abc import Callable

from mlir import ir
from mlir.dialects import arith
from mlir.dialects import llvm as llvm_dialect

from heron.emitters.fast_math import is_approximate, keeps_fast_math, remove_marks
from heron.emitters.ir_utils import walk_ops
from heron.emitters.pipeline import math_exp_log as el
from heron.emitters.pipeline import math_fmod
from heron.emitters.pipeline import math_special as sp
from heron.emitters.pipeline import math_trig as tr
from heron.emitters.pipeline.manager import Pass, PipelineOptions, run_upstream
from heron.emitters.pipeline.math_common import Kit, element_of
from heron.hlo.errors import UnsupportedError

#: Math ops left in place: both backends lower them to plain instructions
#: without a library (checked by compiling through NVVM and ROCDL and finding no
#: ``__nv_``/``__ocml_`` symbol). Every other math op (including absf, sqrt,
#: fma and copysign, which NVVM sends to libdevice) is rewritten by this pass.
NATIVE_MATH: frozenset[str] = frozenset({"math.isnan", "math.isinf", "math.isfinite"})

Unary = Callable[[Kit, ir.Value], ir.Value]

_UNARY: dict[str, Unary] = {
    "math.exp": el.exp,
    "math.exp2": el.exp2,
    "math.expm1": el.expm1,
    "math.log": el.log,
    "math.log2": el.log2,
    "math.log10": el.log10,
    "math.log1p": el.log1p,
    "math.sinh": el.sinh,
    "math.cosh": el.cosh,
    "math.tanh": el.tanh,
    "math.asinh": el.asinh,
    "math.acosh": el.acosh,
    "math.atanh": el.atanh,
    "math.cbrt": el.cbrt,
    "math.sin": tr.sin,
    "math.cos": tr.cos,
    "math.tan": tr.tan,
    "math.atan": tr.atan,
    "math.asin": tr.asin,
    "math.acos": tr.acos,
    "math.erf": sp.erf,
    "math.erfc": sp.erfc,
    "math.floor": sp.floor,
    "math.ceil": sp.ceil,
    "math.trunc": sp.trunc,
    "math.round": sp.round_half_away,
    "math.roundeven": sp.round_even,
    "math.absf": lambda kit, x: kit.abs(x),
    "math.sqrt": lambda kit, x: kit.sqrt(x),
    "math.rsqrt": lambda kit, x: kit.div(kit.c(1.0), kit.sqrt(x)),
}

#: The forms of the ops heron.emitters.fast_math marks (XLA:GPU's f32 sqrt and rsqrt).
_APPROXIMATE: dict[str, Callable[[Kit, ir.Value], ir.Value]] = {
    "math.sqrt": lambda kit, x: kit.sqrt_approx(x),
    "math.rsqrt": lambda kit, x: kit.rsqrt_approx(x),
}

_BINARY: dict[str, Callable[[Kit, ir.Value, ir.Value], ir.Value]] = {
    "math.atan2": tr.atan2,
    "math.copysign": lambda kit, x, y: kit.copysign(x, y),
}

#: Every math op this pass rewrites (and ``arith.remf``).
EXPANDED_MATH: frozenset[str] = frozenset(
    {
        *_UNARY,
        *_BINARY,
        "math.powf",
        "math.fpowi",
        "math.ipowi",
        "math.fma",
        "math.ctpop",
        "math.ctlz",
        "arith.remf",
    }
)


def _with_element(t: ir.Type, element: ir.Type) -> ir.Type:
    if isinstance(t, ir.VectorType):
        return ir.VectorType.get(list(t.shape), element)
    return element


def _compute_type(t: ir.Type) -> ir.Type | None:
    """The type the approximation computes in: f32/f64 themselves, f16/bf16 -> f32."""
    element = element_of(t)
    if isinstance(element, ir.F32Type | ir.F64Type):
        return t
    if isinstance(element, ir.F16Type | ir.BF16Type):
        return _with_element(t, ir.F32Type.get())
    return None


def _widen(value: ir.Value, wide: ir.Type) -> ir.Value:
    return value if value.type == wide else arith.ExtFOp(wide, value).result


def _narrow(value: ir.Value, narrow: ir.Type) -> ir.Value:
    return value if value.type == narrow else arith.TruncFOp(narrow, value).result


def _pow_float(x: ir.Value, y: ir.Value) -> ir.Value:
    """powf at the type of ``x``: f64 in f64, f32 in f32 (f16 and bf16 widened to f32 and
    rounded back)."""
    compute = _compute_type(x.type)
    kit = Kit(compute)
    power = el.pow_f64 if kit.is_f64 else el.pow_f32
    return _narrow(power(kit, _widen(x, compute), _widen(y, compute)), x.type)


def _ipowi(base: ir.Value, exponent: ir.Value) -> ir.Value:
    """Integer power by squaring over every exponent bit; negative exponents give 0,
    except for bases 1 and -1 (XLA's integer pow)."""
    t = base.type
    width = ir.IntegerType(element_of(t)).width

    def const(v: int) -> ir.Value:
        attr = ir.IntegerAttr.get(element_of(t), v)
        if isinstance(t, ir.VectorType):
            attr = ir.DenseElementsAttr.get_splat(t, attr)
        return arith.ConstantOp(t, attr).result

    one, zero = const(1), const(0)
    result, square, e = one, base, exponent
    for _ in range(width - 1):
        bit = arith.CmpIOp(arith.CmpIPredicate.ne, arith.AndIOp(e, one).result, zero).result
        result = arith.SelectOp(bit, arith.MulIOp(result, square).result, result).result
        square = arith.MulIOp(square, square).result
        e = arith.ShRUIOp(e, one).result
    negative = arith.CmpIOp(arith.CmpIPredicate.slt, exponent, zero).result
    odd = arith.CmpIOp(arith.CmpIPredicate.ne, arith.AndIOp(exponent, one).result, zero).result
    minus_one = const(-1)
    neg_result = arith.SelectOp(
        arith.CmpIOp(arith.CmpIPredicate.eq, base, one).result,
        one,
        arith.SelectOp(
            arith.CmpIOp(arith.CmpIPredicate.eq, base, minus_one).result,
            arith.SelectOp(odd, minus_one, one).result,
            zero,
        ).result,
    ).result
    return arith.SelectOp(negative, neg_result, result).result


def _function_name(op: ir.Operation) -> str:
    parent = op.parent
    while parent is not None:
        if parent.name in ("func.func", "gpu.func") and "sym_name" in parent.attributes:
            return ir.StringAttr(parent.attributes["sym_name"]).value
        parent = parent.parent
    return "<unknown>"


def _unsupported(op: ir.Operation, why: str) -> UnsupportedError:
    types = ", ".join(str(v.type) for v in op.operands)
    return UnsupportedError(
        f"expand-math: {op.name} on ({types}) in function {_function_name(op)}: {why}"
    )


def expand_op(op: ir.Operation) -> ir.Value:
    """Build the replacement of one math op before it (the insertion point must be set)."""
    name = op.name
    operands = list(op.operands)
    result_type = op.results[0].type
    if name == "math.ipowi":
        return _ipowi(operands[0], operands[1])
    # Bit counts are instructions on both backends (popc/clz, v_bcnt/v_ffbh) through
    # LLVM's intrinsics; NVVM's math conversion would otherwise call libdevice.
    if name == "math.ctpop":
        return llvm_dialect.intr_ctpop(operands[0])
    if name == "math.ctlz":
        return llvm_dialect.intr_ctlz(operands[0], False)
    compute = _compute_type(result_type)
    if compute is None:
        raise _unsupported(op, "only f16, bf16, f32 and f64 (scalars or vectors) are handled")
    if name == "math.powf":
        return _pow_float(operands[0], operands[1])
    if name == "math.fpowi":
        exponent = arith.SIToFPOp(_with_element(result_type, ir.F64Type.get()), operands[1]).result
        wide = _with_element(result_type, ir.F64Type.get())
        result = el.pow_f64(Kit(wide), _widen(operands[0], wide), exponent)
        return _narrow(result, result_type)
    kit = Kit(compute)
    wide = [_widen(v, compute) for v in operands]
    if name in _APPROXIMATE and not kit.is_f64 and is_approximate(op):
        result = _APPROXIMATE[name](kit, wide[0])
    elif name in _UNARY:
        result = _UNARY[name](kit, wide[0])
    elif name in _BINARY:
        result = _BINARY[name](kit, wide[0], wide[1])
    elif name == "math.fma":
        result = llvm_dialect.intr_fma(*wide)
    elif name == "arith.remf":
        result = math_fmod.fmod(kit, wide[0], wide[1])
    else:
        raise _unsupported(op, "no approximation is written for this op")
    return _narrow(result, result_type)


def _fold_complex_parts(module: ir.Module) -> None:
    """``complex.re/im(complex.create(a, b))`` -> ``a``/``b`` (what complex lowering leaves)."""
    for op in walk_ops(module.operation):
        if op.name not in ("complex.re", "complex.im"):
            continue
        source = op.operands[0].owner
        if isinstance(source, ir.OpView):
            source = source.operation
        if not isinstance(source, ir.Operation) or source.name != "complex.create":
            continue
        part = source.operands[0 if op.name == "complex.re" else 1]
        op.results[0].replace_all_uses_with(part)
        op.erase()
    for op in walk_ops(module.operation, "complex.create"):
        if not list(op.results[0].uses):
            op.erase()


def expand_module(module: ir.Module) -> None:
    """Run the pass body on ``module`` (must be inside its context).

    An expansion writes its own constants and the parts of its formula it does not
    need for this type or range; after any, ``canonicalize`` and ``cse`` fold and
    share them (a Dirichlet model's lgamma and digamma kernel grew from 450 ops to
    6,400, half of them constants repeated per expansion, which lower-tensors and
    the lowering to LLVM then copied and converted op by op).
    """
    ops = walk_ops(module.operation)
    if any(op.name.startswith("complex.") for op in ops):
        run_upstream(module, "builtin.module(convert-complex-to-standard)")
        _fold_complex_parts(module)
        ops = walk_ops(module.operation)  # the conversion made new ops
    expanded = False
    for op in ops:
        if op.name != "arith.remf" and (not op.name.startswith("math.") or op.name in NATIVE_MATH):
            continue
        if op.name not in EXPANDED_MATH:
            raise _unsupported(op, "no approximation is written for this op")
        with ir.InsertionPoint(op), op.location:
            replacement = expand_op(op)
        op.results[0].replace_all_uses_with(replacement)
        op.erase()
        expanded = True
    if expanded:
        run_upstream(module, "builtin.module(canonicalize,cse)")


def run(module: ir.Module, options: PipelineOptions) -> None:
    fast = keeps_fast_math(options.backend)  # XLA's fast f32 forms are CUDA's only
    if not fast:
        remove_marks(module)
    expand_module(module)
    if not fast:
        remove_marks(module)  # the quotients the expansions marked (f32 tanh's)


PASS = Pass(
    name="expand-math",
    run=run,
    description="complex -> arith/math; math ops -> arith approximations (no vendor library)",
)
