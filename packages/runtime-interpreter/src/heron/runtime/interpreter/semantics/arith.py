"""The ``arith`` dialect: what LLVM computes for each op on an NVIDIA GPU, bit for bit.

Values follow :mod:`~..types`: an ``iN`` is held sign-extended in the next
signed numpy container (``i1`` as ``bool``, ``index`` as ``int64``), floats
in their own dtype (``bf16`` via ml_dtypes). Every op works on scalars and,
elementwise over the trailing axes, on vectors of them.

Exactness: IEEE operations (+ - * / sqrt, conversions) are correctly rounded
with round-to-nearest-even, denormals kept (no fast-math, no flush to zero):
numpy's float32/float64 arithmetic is the hardware's. f16 and bf16 values are
computed in f32 and rounded once more, which is exact for + - * / (f32 has
more than twice their precision plus two bits). Conversions that could round
twice (f64 -> f16/bf16, 64-bit integers -> narrow floats) go through
*round-to-odd* in the wider format first, so they round once.

Where LLVM says *poison* or *undefined behaviour*, the interpreter picks a
deterministic value or reports a finding:

- ``shli``/``shrui``/``shrsi`` by an amount >= the width (the amount read as
  unsigned) in an *active* lane: a sanitizer finding ``poison-shift``. The
  result is poison in MLIR and LLVM, and LLVM's optimiser deletes what
  depends on it: a narrowed 64-bit shift by 32 lost a kernel's store and made
  dropout_threefry change from run to run on an H200, while computing the
  value a PTX shift gives (it clamps the amount) hid it here. heron's own
  shift lowering clamps the amount first, so a finding is a compiler bug.
  Inactive lanes give the PTX value: ``0`` for ``shli`` and ``shrui``, the
  sign fill for ``shrsi``.
- ``fptosi``/``fptoui`` of a value out of range: saturated to the
  destination's minimum or maximum, NaN -> 0 (what PTX ``cvt.rzi`` does).
- ``divsi``/``divui``/``remsi``/``remui``/``ceildiv*``/``floordivsi`` by zero,
  and the signed ones of INT_MIN by -1, in an *active* lane: a sanitizer
  finding ``division-by-zero``. Inactive lanes divide by 1 instead.

NaN results: an op on a NaN operand returns that NaN quieted (the first NaN
operand when both are), as x86 does (f32/f64 ops are numpy's, i.e. the host
CPU's instructions; f16/bf16 results are fixed up to the same rule); an
invalid op (inf - inf, 0 * inf) returns the host's default NaN. LLVM leaves
the sign and payload of an arithmetic NaN result unspecified (LangRef,
"Behavior of Floating-Point NaN values"); a GPU returns its canonical NaN.
NaN payloads of constants (``{"bits": ...}``) and of bitwise ops (``negf``,
``absf``, ``copysign``, bitcasts, selects) are kept exactly.
"""

from __future__ import annotations

import base64
from collections.abc import Callable
from typing import Any

import numpy as np

from heron.runtime.interpreter import memory
from heron.runtime.interpreter.engine import Frame, Handler, prepares, semantics
from heron.runtime.interpreter.program import Op
from heron.runtime.interpreter.types import (
    ComplexType,
    FloatType,
    IndexType,
    IntegerType,
    VectorType,
    parse_type,
)

__all__ = [
    "element_type",
    "float_to_float",
    "int_to_float",
    "round_to_odd",
    "signed",
    "unsigned",
    "wrap",
]

Value = Any

# -- integer representation ------------------------------------------------------------


def element_type(type_text: str):
    """The scalar type of ``type_text`` (its element for a vector)."""
    t = parse_type(type_text)
    return t.element if isinstance(t, VectorType) else t


def _width(t) -> int:
    return t.width


def wrap(value: Value, t) -> np.ndarray:
    """``value`` (any integer array) reduced to ``t``'s width, held as :mod:`~..types` says."""
    value = np.asarray(value)
    if t.width == 1:
        return (value.astype(np.int64, copy=False) & 1).astype(np.bool_)
    dtype = t.dtype
    out = value.astype(dtype)  # wraps modulo 2**container
    bits = dtype.itemsize * 8
    if t.width != bits:
        shift = dtype.type(bits - t.width)
        out = (out << shift) >> shift
    return out


def signed(value: Value, t) -> np.ndarray:
    """The signed value of ``value`` (``i1`` true is -1) in ``t``'s signed container."""
    value = np.asarray(value)
    if t.width == 1:
        return np.where(value, np.int8(-1), np.int8(0))
    return value


def unsigned(value: Value, t) -> np.ndarray:
    """The low ``t.width`` bits of ``value`` as an unsigned number (uint container)."""
    value = np.asarray(value)
    if t.width == 1:
        return value.astype(np.uint8)
    udtype = np.dtype(f"u{t.dtype.itemsize}")
    out = value.astype(udtype)
    if t.width != udtype.itemsize * 8:
        out = out & udtype.type((1 << t.width) - 1)
    return out


def _int_min(t) -> int:
    return -(1 << (t.width - 1))


# -- float helpers ---------------------------------------------------------------------------


def _bits_dtype(dtype: np.dtype) -> np.dtype:
    return np.dtype(f"u{np.dtype(dtype).itemsize}")


def round_to_odd(total: np.ndarray, error: np.ndarray) -> np.ndarray:
    """``total`` (a float64 rounded to nearest) made the round-to-odd result.

    ``total + error`` is the exact value. Where it was inexact and ``total``'s
    last significand bit is even, the odd neighbour on the side of the exact
    value is the truncated value with the sticky bit set. A later
    round-to-nearest to a format with at least two bits less precision then
    rounds the exact value once.
    """
    total = np.asarray(total, np.float64)
    error = np.asarray(error, np.float64)
    even = (total.view(np.uint64) & np.uint64(1)) == 0
    fix = (error != 0) & even & np.isfinite(total)
    if not fix.any():
        return total
    toward = np.where(error > 0, np.inf, -np.inf)
    return np.where(fix, np.nextafter(total, toward), total)


def two_sum(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Knuth's TwoSum: ``s = fl(a + b)`` and the exact error ``a + b - s``."""
    s = a + b
    bb = s - a
    return s, (a - (s - bb)) + (b - bb)


def _f64_to_f32_odd(value: np.ndarray) -> np.ndarray:
    """A float64 rounded to odd at float32 precision (still float64), for a later narrowing."""
    value = np.asarray(value, np.float64)
    near = value.astype(np.float32)
    back = near.astype(np.float64)
    inexact = (back != value) & np.isfinite(value)
    even = (near.view(np.uint32) & np.uint32(1)) == 0
    fix = inexact & even
    if not fix.any():
        return near.astype(np.float64) if not inexact.any() else np.where(inexact, back, value)
    toward = np.where(value > back, np.float32(np.inf), np.float32(-np.inf))
    odd = np.where(fix, np.nextafter(near, toward), near)
    return np.where(np.isnan(value), value, odd.astype(np.float64))


def float_to_float(value: Value, target: np.dtype) -> np.ndarray:
    """Round floats to ``target`` once (to nearest even); NaNs keep their payload, quieted."""
    value = np.asarray(value)
    target = np.dtype(target)
    source = value.dtype
    if source == target:
        return value
    if source == np.float64 and target.itemsize == 2:
        # f64 -> f16/bf16: round to odd at f32 precision, then once to the target.
        narrowed = _f64_to_f32_odd(value).astype(np.float32)
        value = np.where(np.isnan(value), value.astype(np.float32), narrowed)
    elif source.itemsize == 2 and target.itemsize == 2:
        value = value.astype(np.float32)  # f16 <-> bf16 through f32, which holds both exactly
    out = np.asarray(value.astype(target))
    return _quiet(out) if np.isnan(out).any() else out


#: The largest integer magnitude up to which every integer is a float64.
_EXACT_IN_F64 = 2**53


def int_to_float(value: Value, t, target: np.dtype, is_signed: bool) -> np.ndarray:
    """``value`` (integers of type ``t``) converted to ``target`` with one rounding."""
    target = np.dtype(target)
    whole = signed(value, t) if is_signed else unsigned(value, t)
    # Integers of at most 53 bits are exact in f64, so rounding from there is the one
    # rounding: every narrower type, and the 64-bit values of a launch (indices) when all
    # of them are that small.
    if t.width <= 53 or (
        whole.size and -_EXACT_IN_F64 <= whole.min() <= whole.max() <= _EXACT_IN_F64
    ):
        return np.asarray(float_to_float(whole.astype(np.float64), target), target)
    if is_signed:
        wide = whole.astype(np.int64)
        negative = wide < 0
        magnitude = np.where(negative, -wide, wide).astype(np.uint64)  # INT64_MIN -> 2**63
    else:
        magnitude = whole.astype(np.uint64)
        negative = np.zeros(magnitude.shape, np.bool_)
    high = (magnitude >> np.uint64(32)).astype(np.float64) * 4294967296.0
    low = (magnitude & np.uint64(0xFFFFFFFF)).astype(np.float64)
    total = high + low
    error = low - (total - high)  # Fast2Sum: |high| >= |low| whenever high != 0
    if target == np.float64:
        result = total
    else:
        result = float_to_float(round_to_odd(total, error), target)
    return np.where(negative, -result, result).astype(target)


def _contiguous(value: Any) -> np.ndarray:
    """``value`` as a C-contiguous array of its own shape, a 0-d one (a uniform value)
    included: ``np.ascontiguousarray`` makes a 0-d array 1-d, and a uniform f32 bitcast
    to i32 then indexed memory as one element for every lane (jax-cosmo's halofit)."""
    value = np.asarray(value)
    return np.ascontiguousarray(value).reshape(value.shape)


def _quiet(value: np.ndarray) -> np.ndarray:
    """NaNs with their quiet bit set (what an arithmetic op returns for a NaN operand)."""
    dtype = value.dtype
    bits = _bits_dtype(dtype)
    width = dtype.itemsize * 8
    mantissa = {2: 10 if dtype == np.float16 else 7, 4: 23, 8: 52}[dtype.itemsize]
    del width
    quiet_bit = bits.type(1 << (mantissa - 1))
    raw = _contiguous(value).view(bits)
    return np.where(np.isnan(value), (raw | quiet_bit).view(dtype), value)


def propagate_nan(result: np.ndarray, *operands: np.ndarray) -> np.ndarray:
    """``result`` with each NaN replaced by the first NaN operand, quieted (x86's choice)."""
    result = np.asarray(result)
    nan = np.isnan(result)
    if not nan.any():
        return result
    chosen = result
    for operand in reversed(operands):
        operand = np.broadcast_to(np.asarray(operand, result.dtype), np.broadcast(result).shape)
        chosen = np.where(np.isnan(operand), _quiet(np.asarray(operand)), chosen)
    return np.where(nan, chosen, result)


def _compute_dtype(dtype: np.dtype) -> np.dtype:
    """Where f16/bf16 arithmetic is done (f32: one more rounding back is exact for + - * /)."""
    return np.dtype(np.float32) if np.dtype(dtype).itemsize == 2 else np.dtype(dtype)


def float_binary(a: Value, b: Value, dtype: np.dtype, function: Callable) -> np.ndarray:
    """``function`` on ``a, b`` of float ``dtype``, rounded once to ``dtype``, NaNs propagated."""
    a = np.asarray(a, dtype)
    b = np.asarray(b, dtype)
    work = _compute_dtype(dtype)
    if work == dtype:  # numpy runs the hardware's IEEE op: NaN operands propagate as on x86
        return function(a, b)
    result = function(a.astype(work), b.astype(work))
    result = float_to_float(np.asarray(result, work), dtype)
    return propagate_nan(result, a, b)


def sign_bit(value: np.ndarray) -> np.ndarray:
    """Whether each float's sign bit is set (-0.0 and negative NaNs included)."""
    value = _contiguous(value)
    bits = _bits_dtype(value.dtype)
    top = bits.type(1 << (value.dtype.itemsize * 8 - 1))
    return (value.view(bits) & top) != 0


def with_sign(value: np.ndarray, negative: np.ndarray) -> np.ndarray:
    """``value`` with its sign bit set where ``negative`` and cleared elsewhere (bitwise)."""
    value = _contiguous(value)
    dtype = value.dtype
    bits = _bits_dtype(dtype)
    top = bits.type(1 << (dtype.itemsize * 8 - 1))
    raw = value.view(bits) & bits.type(~int(top) & ((1 << (dtype.itemsize * 8)) - 1))
    raw = np.where(negative, raw | top, raw).astype(bits)
    return _contiguous(raw).view(dtype)


# -- constants ------------------------------------------------------------------------


def constant_value(attribute: Any, type_text: str) -> np.ndarray:
    """The value an ``arith.constant``'s ``value`` attribute means for ``type_text``."""
    t = parse_type(type_text)
    if isinstance(attribute, dict) and "dense" in attribute:
        element = t.element if isinstance(t, VectorType) else t
        raw = np.frombuffer(base64.b64decode(attribute["dense"]), element.dtype)
        shape = t.shape if isinstance(t, VectorType) else ()
        if attribute["splat"]:
            return np.full(shape, raw[0], element.dtype)
        return raw.reshape(shape).copy()
    element = t.element if isinstance(t, VectorType) else t
    scalar = scalar_constant(attribute, element)
    if isinstance(t, VectorType):
        return np.full(t.shape, scalar, element.dtype)
    return scalar


def scalar_constant(attribute: Any, element) -> np.ndarray:
    if isinstance(element, ComplexType):
        real, imag = (scalar_constant(p, element.element) for p in attribute)
        out = np.zeros((), element.dtype)
        out.real, out.imag = real, imag
        return out
    if isinstance(attribute, dict) and "bits" in attribute:
        bits = int(attribute["bits"], 16)
        dtype = element.dtype
        return np.array(bits, _bits_dtype(dtype)).view(dtype)
    if isinstance(element, FloatType):
        return np.asarray(float(attribute)).astype(element.dtype)
    if isinstance(attribute, bool):
        attribute = int(attribute)
    return wrap(np.asarray(int(attribute) & ((1 << 64) - 1), np.uint64), element)


@prepares("arith.constant")
def prepare_constant(op: Op) -> Handler | None:
    """The constant decoded once per program (a kernel's loops run their constants every
    iteration); its array is read-only, since every handler sees the same one. None where
    it cannot be decoded: :func:`constant` then says why when it runs."""
    if "value" not in op.attributes:
        return None
    try:
        value = constant_value(op.attributes["value"], op.result_types[0])
    except (TypeError, ValueError, KeyError):
        return None
    if isinstance(value, np.ndarray):
        value.flags.writeable = False
    result = op.results[0]

    def set_constant(frame: Frame, op: Op) -> None:
        frame.values[result] = value

    return set_constant


@semantics("arith.constant")
def constant(frame: Frame, op: Op) -> None:
    if "value" not in op.attributes:
        raise frame.unsupported(op, "no 'value' attribute")
    try:
        frame.set_result(op, constant_value(op.attributes["value"], op.result_types[0]))
    except (TypeError, ValueError, KeyError) as exc:
        raise frame.unsupported(
            op, f"cannot read the constant {op.attributes['value']!r}: {exc}"
        ) from None


# -- integer arithmetic -----------------------------------------------------------------


def _int_operands(frame: Frame, op: Op):
    t = element_type(op.operand_types[0])
    if not isinstance(t, IntegerType | IndexType):
        raise frame.unsupported(op, f"integer op on {op.operand_types[0]}")
    return t, frame.operands(op)


def _int_binary(function: Callable[[np.ndarray, np.ndarray, Any], np.ndarray]):
    def handler(frame: Frame, op: Op) -> None:
        t, (a, b) = _int_operands(frame, op)
        frame.set_result(op, wrap(function(signed(a, t), signed(b, t), t), t))

    return handler


def _container(t) -> np.dtype:
    return np.dtype(np.int8) if t.width == 1 else t.dtype


semantics("arith.addi")(_int_binary(lambda a, b, t: a + b))
semantics("arith.subi")(_int_binary(lambda a, b, t: a - b))
semantics("arith.muli")(_int_binary(lambda a, b, t: a * b))
semantics("arith.andi")(_int_binary(lambda a, b, t: a & b))
semantics("arith.ori")(_int_binary(lambda a, b, t: a | b))
semantics("arith.xori")(_int_binary(lambda a, b, t: a ^ b))
semantics("arith.maxsi")(_int_binary(lambda a, b, t: np.maximum(a, b)))
semantics("arith.minsi")(_int_binary(lambda a, b, t: np.minimum(a, b)))


def _unsigned_binary(function: Callable[[np.ndarray, np.ndarray], np.ndarray]):
    def handler(frame: Frame, op: Op) -> None:
        t, (a, b) = _int_operands(frame, op)
        frame.set_result(op, wrap(function(unsigned(a, t), unsigned(b, t)), t))

    return handler


semantics("arith.maxui")(_unsigned_binary(np.maximum))
semantics("arith.minui")(_unsigned_binary(np.minimum))


def _check_shift_amount(frame: Frame, op: Op, t, amount: np.ndarray) -> None:
    """``poison-shift`` where an active lane shifts by the width or more (module docstring)."""

    def detail(lane: int) -> str:
        return (
            f"'{op.name}' shifts an {t} by its width or more: the result is poison, which"
            " LLVM may optimise away together with what depends on it"
        )

    frame.fail("poison-shift", op, lane_any(amount >= t.width, op.operand_types[1]), detail)


@semantics("arith.shli")
def shli(frame: Frame, op: Op) -> None:
    t, (a, b) = _int_operands(frame, op)
    amount = unsigned(b, t)
    _check_shift_amount(frame, op, t, amount)
    big = amount >= t.width
    clipped = np.minimum(amount, t.width - 1).astype(_container(t))
    result = signed(a, t).astype(_container(t)) << clipped
    frame.set_result(op, wrap(np.where(big, 0, result), t))


@semantics("arith.shrui")
def shrui(frame: Frame, op: Op) -> None:
    t, (a, b) = _int_operands(frame, op)
    amount = unsigned(b, t)
    _check_shift_amount(frame, op, t, amount)
    value = unsigned(a, t)
    big = amount >= t.width
    clipped = np.minimum(amount, t.width - 1).astype(value.dtype)
    frame.set_result(op, wrap(np.where(big, 0, value >> clipped), t))


@semantics("arith.shrsi")
def shrsi(frame: Frame, op: Op) -> None:
    t, (a, b) = _int_operands(frame, op)
    amount = unsigned(b, t)
    _check_shift_amount(frame, op, t, amount)
    value = signed(a, t)
    clipped = np.minimum(amount, t.width - 1).astype(value.dtype)
    frame.set_result(op, wrap(value >> clipped, t))


def lane_any(mask: Value, type_text: str) -> np.ndarray:
    """Per lane: whether any element of ``mask`` (shaped like a ``type_text`` value) is set."""
    mask = np.asarray(mask, np.bool_)
    t = parse_type(type_text)
    rank = len(t.shape) if isinstance(t, VectorType) else 0
    if mask.ndim == rank:  # uniform across lanes
        return np.asarray(mask.any())
    return mask.reshape(mask.shape[0], -1).any(axis=1) if rank else mask


def _divisor(frame: Frame, op: Op, t, a, b, is_signed: bool):
    """The divisor with unsafe lanes made 1; a finding for an active unsafe lane."""
    zero = np.asarray(b == 0)
    overflow = (a == _int_min(t)) & (b == -1) if is_signed else np.zeros((), np.bool_)
    bad = zero | overflow
    if not bad.any():
        return b
    lane_zero = np.broadcast_to(lane_any(zero, op.operand_types[1]), (frame.lanes.size,))

    def detail(lane: int) -> str:
        if lane_zero[lane]:
            return f"'{op.name}' divides by zero"
        return f"'{op.name}' divides the minimum {t} ({_int_min(t)}) by -1, which overflows"

    frame.fail("division-by-zero", op, lane_any(bad, op.operand_types[1]), detail)
    return np.where(bad, b.dtype.type(1), b)


def _signed_division(kind: str):
    def handler(frame: Frame, op: Op) -> None:
        t, (a, b) = _int_operands(frame, op)
        a, b = signed(a, t), signed(b, t)
        b = _divisor(frame, op, t, a, b, True)
        remainder = np.fmod(a, b)
        quotient = (a - remainder) // b
        if kind == "rem":
            result = remainder
        elif kind == "div":
            result = quotient
        elif kind == "ceil":
            result = quotient + ((remainder != 0) & ((a < 0) == (b < 0)))
        else:  # floor
            result = quotient - ((remainder != 0) & ((a < 0) != (b < 0)))
        frame.set_result(op, wrap(result, t))

    return handler


def _unsigned_division(kind: str):
    def handler(frame: Frame, op: Op) -> None:
        t, (a, b) = _int_operands(frame, op)
        a, b = unsigned(a, t), unsigned(b, t)
        b = _divisor(frame, op, t, a, b, False)
        if kind == "rem":
            result = a % b
        elif kind == "div":
            result = a // b
        else:  # ceil
            result = a // b + (a % b != 0)
        frame.set_result(op, wrap(result, t))

    return handler


semantics("arith.divsi")(_signed_division("div"))
semantics("arith.remsi")(_signed_division("rem"))
semantics("arith.ceildivsi")(_signed_division("ceil"))
semantics("arith.floordivsi")(_signed_division("floor"))
semantics("arith.divui")(_unsigned_division("div"))
semantics("arith.remui")(_unsigned_division("rem"))
semantics("arith.ceildivui")(_unsigned_division("ceil"))


def _product_128(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(high, low)`` uint64 halves of the 128-bit product of two uint64 arrays."""
    mask = np.uint64(0xFFFFFFFF)
    k32 = np.uint64(32)
    a0, a1 = a & mask, a >> k32
    b0, b1 = b & mask, b >> k32
    p00, p01, p10, p11 = a0 * b0, a0 * b1, a1 * b0, a1 * b1
    middle = (p00 >> k32) + (p01 & mask) + (p10 & mask)
    low = (p00 & mask) | (middle << k32)
    high = p11 + (p01 >> k32) + (p10 >> k32) + (middle >> k32)
    return high, low


def _extended_product(t, a, b, is_signed: bool) -> tuple[np.ndarray, np.ndarray]:
    """The low and high ``t.width`` bits of the double-width product (as uint64 arrays)."""
    if is_signed:
        x = signed(a, t).astype(np.int64)
        y = signed(b, t).astype(np.int64)
    else:
        x = unsigned(a, t).astype(np.int64)
        y = unsigned(b, t).astype(np.int64)
    ux, uy = x.astype(np.uint64), y.astype(np.uint64)
    high, low = _product_128(ux, uy)
    if is_signed:  # the signed high half of the 64x64 product of the sign-extended values
        high = high - np.where(x < 0, uy, np.uint64(0)) - np.where(y < 0, ux, np.uint64(0))
    width = t.width
    if width == 64:
        return low, high
    upper = (low >> np.uint64(width)) | (high << np.uint64(64 - width))
    return low, upper


def _mul_extended(is_signed: bool):
    def handler(frame: Frame, op: Op) -> None:
        t, (a, b) = _int_operands(frame, op)
        low, high = _extended_product(t, a, b, is_signed)
        frame.set_results(op, wrap(low, t), wrap(high, t))

    return handler


semantics("arith.mulsi_extended")(_mul_extended(True))
semantics("arith.mului_extended")(_mul_extended(False))


@semantics("arith.addui_extended")
def addui_extended(frame: Frame, op: Op) -> None:
    t, (a, b) = _int_operands(frame, op)
    ua, ub = unsigned(a, t).astype(np.uint64), unsigned(b, t).astype(np.uint64)
    total = ua + ub
    if t.width == 64:
        carry = total < ua
    else:
        carry = (total >> np.uint64(t.width)) != 0
    frame.set_results(op, wrap(total, t), np.asarray(carry, np.bool_))


_CMPI = {
    0: (np.equal, False),
    1: (np.not_equal, False),
    2: (np.less, True),
    3: (np.less_equal, True),
    4: (np.greater, True),
    5: (np.greater_equal, True),
    6: (np.less, False),
    7: (np.less_equal, False),
    8: (np.greater, False),
    9: (np.greater_equal, False),
}
_CMPI_NAMES = ("eq", "ne", "slt", "sle", "sgt", "sge", "ult", "ule", "ugt", "uge")


def _predicate(frame: Frame, op: Op, names: tuple[str, ...]) -> int:
    value = op.attributes.get("predicate")
    if isinstance(value, str):  # enum text such as "#arith<cmpi slt>" or "slt"
        word = value.rstrip(">").split()[-1].split("<")[-1]
        if word in names:
            return names.index(word)
    if isinstance(value, int) and 0 <= value < len(names):
        return value
    raise frame.unsupported(op, f"unknown predicate {value!r}")


@semantics("arith.cmpi")
def cmpi(frame: Frame, op: Op) -> None:
    t, (a, b) = _int_operands(frame, op)
    compare, is_signed = _CMPI[_predicate(frame, op, _CMPI_NAMES)]
    if is_signed:
        frame.set_result(op, compare(signed(a, t), signed(b, t)))
    else:
        frame.set_result(op, compare(unsigned(a, t), unsigned(b, t)))


# -- casts between integers ---------------------------------------------------------------


@semantics("arith.extsi", "arith.trunci", "arith.index_cast")
def sign_cast(frame: Frame, op: Op) -> None:
    source = element_type(op.operand_types[0])
    target = element_type(op.result_types[0])
    value = signed(frame.operand(op, 0), source).astype(np.int64)
    frame.set_result(op, wrap(value, target))


@semantics("arith.extui", "arith.index_castui")
def zero_cast(frame: Frame, op: Op) -> None:
    source = element_type(op.operand_types[0])
    target = element_type(op.result_types[0])
    value = unsigned(frame.operand(op, 0), source).astype(np.uint64)
    frame.set_result(op, wrap(value, target))


# -- floats -------------------------------------------------------------------------------


def _float_type(frame: Frame, op: Op, type_text: str) -> FloatType:
    t = element_type(type_text)
    if not isinstance(t, FloatType):
        raise frame.unsupported(op, f"float op on {type_text}")
    return t


def _float_binary(function: Callable):
    def handler(frame: Frame, op: Op) -> None:
        t = _float_type(frame, op, op.result_types[0])
        a, b = frame.operands(op)
        frame.set_result(op, float_binary(a, b, t.dtype, function))

    return handler


semantics("arith.addf")(_float_binary(np.add))
semantics("arith.subf")(_float_binary(np.subtract))
semantics("arith.mulf")(_float_binary(np.multiply))
semantics("arith.divf")(_float_binary(np.divide))


def fmod(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """C's fmod (exact: the remainder of floats is representable)."""
    return np.fmod(a, b)


semantics("arith.remf")(_float_binary(fmod))


@semantics("arith.negf")
def negf(frame: Frame, op: Op) -> None:
    value = np.asarray(frame.operand(op, 0))
    frame.set_result(op, with_sign(value, ~sign_bit(value)))


def maximum(a: np.ndarray, b: np.ndarray, largest: bool) -> np.ndarray:
    """IEEE 754-2019 maximum/minimum: NaN if either is (the first NaN, quieted); -0 < +0."""
    a, b = np.broadcast_arrays(np.asarray(a), np.asarray(b))
    pick_a = a > b if largest else a < b
    equal = a == b  # +0 / -0: the sign decides
    sign_a = sign_bit(a)
    pick_a = pick_a | (equal & (~sign_a if largest else sign_a))
    result = np.where(pick_a, a, b)
    nan = np.isnan(a) | np.isnan(b)
    if nan.any():
        first = np.where(np.isnan(a), a, b)
        result = np.where(nan, _quiet(_contiguous(first)), result)
    return result


def maximum_number(a: np.ndarray, b: np.ndarray, largest: bool) -> np.ndarray:
    """maxnum/minnum: a NaN operand is ignored (both NaN: the first, quieted); -0 < +0."""
    a, b = np.broadcast_arrays(np.asarray(a), np.asarray(b))
    result = maximum(a, b, largest)
    a_nan, b_nan = np.isnan(a), np.isnan(b)
    result = np.where(a_nan & ~b_nan, b, result)
    return np.where(b_nan & ~a_nan, a, result)


@semantics("arith.maximumf", "arith.minimumf", "arith.maxnumf", "arith.minnumf")
def min_max_float(frame: Frame, op: Op) -> None:
    a, b = frame.operands(op)
    largest = op.name in ("arith.maximumf", "arith.maxnumf")
    if op.name.endswith("numf"):
        frame.set_result(op, maximum_number(a, b, largest))
    else:
        frame.set_result(op, maximum(a, b, largest))


_CMPF_NAMES = (
    "false", "oeq", "ogt", "oge", "olt", "ole", "one", "ord",
    "ueq", "ugt", "uge", "ult", "ule", "une", "uno", "true",
)  # fmt: skip
_ORDERED_COMPARE = {
    "eq": np.equal,
    "gt": np.greater,
    "ge": np.greater_equal,
    "lt": np.less,
    "le": np.less_equal,
    "ne": np.not_equal,
}


def compare_floats(predicate: int, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``arith.cmpf`` predicate number ``predicate`` (0..15, see :data:`_CMPF_NAMES`)."""
    name = _CMPF_NAMES[predicate]
    a, b = np.asarray(a), np.asarray(b)
    shape = np.broadcast(a, b).shape
    unordered = np.isnan(a) | np.isnan(b)
    if name == "false":
        return np.zeros(shape, np.bool_)
    if name == "true":
        return np.ones(shape, np.bool_)
    if name == "ord":
        return ~unordered
    if name == "uno":
        return unordered
    relation = _ORDERED_COMPARE[name[1:]]
    holds = relation(a, b) & ~unordered  # numpy's ne is True for NaN: order it first
    return holds if name[0] == "o" else holds | unordered


@semantics("arith.cmpf")
def cmpf(frame: Frame, op: Op) -> None:
    a, b = frame.operands(op)
    frame.set_result(op, compare_floats(_predicate(frame, op, _CMPF_NAMES), a, b))


@semantics("arith.extf", "arith.truncf")
def float_cast(frame: Frame, op: Op) -> None:
    if "roundingmode" in op.attributes:
        raise frame.unsupported(
            op, f"rounding mode {op.attributes['roundingmode']!r} (only to-nearest-even)"
        )
    t = _float_type(frame, op, op.result_types[0])
    frame.set_result(op, float_to_float(frame.operand(op, 0), t.dtype))


def float_to_int(value: np.ndarray, t, is_signed: bool) -> np.ndarray:
    """Truncate toward zero; out of range saturates, NaN -> 0 (PTX ``cvt.rzi``)."""
    x = np.asarray(value).astype(np.float64)
    nan = np.isnan(x)
    x = np.trunc(np.where(nan, 0.0, x))
    width = t.width
    if is_signed:
        low, high = -(2.0 ** (width - 1)), 2.0 ** (width - 1)
        too_low, too_high = x < low, x >= high
        safe = np.where(too_low | too_high, 0.0, x).astype(np.int64)
        result = np.where(too_low, np.int64(_int_min(t)), safe)
        result = np.where(too_high, np.int64((1 << (width - 1)) - 1), result)
        return wrap(result, t)
    high = 2.0**width
    too_low, too_high = x <= -1.0, x >= high
    safe = np.where(too_low | too_high | (x < 0), 0.0, x).astype(np.uint64)
    result = np.where(too_high, np.uint64((1 << width) - 1), safe)
    return wrap(result, t)


@semantics("arith.fptosi", "arith.fptoui")
def fptoint(frame: Frame, op: Op) -> None:
    t = element_type(op.result_types[0])
    frame.set_result(op, float_to_int(frame.operand(op, 0), t, op.name == "arith.fptosi"))


@semantics("arith.sitofp", "arith.uitofp")
def inttofp(frame: Frame, op: Op) -> None:
    source = element_type(op.operand_types[0])
    target = _float_type(frame, op, op.result_types[0])
    value = frame.operand(op, 0)
    frame.set_result(op, int_to_float(value, source, target.dtype, op.name == "arith.sitofp"))


@semantics("arith.bitcast")
def bitcast(frame: Frame, op: Op) -> None:
    value = frame.operand(op, 0)
    if isinstance(value, memory.MemRef):  # a buffer seen with another element type
        frame.set_result(op, memory.reinterpret(value, op.result_types[0]))
        return
    source = element_type(op.operand_types[0])
    target = element_type(op.result_types[0])
    frame.set_result(op, bitcast_value(frame.operand(op, 0), source, target))


def bitcast_value(value: Value, source, target) -> np.ndarray:
    """The same bits seen as ``target`` (both scalars of one width)."""
    if source.width != target.width:
        raise ValueError(f"bitcast between {source} and {target} of different widths")
    value = np.asarray(value)
    if isinstance(source, IntegerType | IndexType):
        raw = unsigned(value, source)
    else:
        raw = _contiguous(value).view(_bits_dtype(value.dtype))
    if isinstance(target, IntegerType | IndexType):
        return wrap(raw, target)
    bits = _bits_dtype(target.dtype)
    return _contiguous(raw.astype(bits)).view(target.dtype)


# -- select -----------------------------------------------------------------------------


def lane_aligned(value: Value, type_text: str, result_type: str) -> np.ndarray:
    """A scalar-typed per-lane value reshaped to broadcast against a vector-typed one."""
    value = np.asarray(value)
    scalar = not isinstance(parse_type(type_text), VectorType)
    vector = parse_type(result_type)
    if scalar and isinstance(vector, VectorType) and value.ndim == 1:
        return value.reshape(value.shape + (1,) * len(vector.shape))
    return value


@semantics("arith.select")
def select(frame: Frame, op: Op) -> None:
    condition, a, b = frame.operands(op)
    result_type = op.result_types[0]
    if type(condition) is np.bool_ and _uniform_pair(a, b):
        frame.set_result(op, np.asarray(a if condition else b))  # np.where's result, sooner
        return
    if parse_type(result_type).__class__.__name__ == "MemRefType":
        raise frame.unsupported(op, "select of memrefs")
    condition = lane_aligned(condition, op.operand_types[0], result_type)
    a_aligned = _vector_aligned(a, result_type)
    b_aligned = _vector_aligned(b, result_type)
    frame.set_result(op, np.where(np.asarray(condition, np.bool_), a_aligned, b_aligned))


def _uniform_pair(a: Value, b: Value) -> bool:
    """Whether ``a`` and ``b`` are uniform (0-d) numpy values of one dtype."""
    kinds = np.ndarray | np.generic
    return (
        isinstance(a, kinds)
        and isinstance(b, kinds)
        and a.ndim == b.ndim == 0
        and a.dtype == b.dtype
    )


def _vector_aligned(value: Value, type_text: str) -> np.ndarray:
    """A value as is (vectors broadcast against their per-lane forms already)."""
    return np.asarray(value)
