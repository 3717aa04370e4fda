"""Integer arithmetic of the reference evaluator, exact to the bit width of the type.

Every integer op works on *codes*: the element's two's-complement bit pattern
held in a uint64, masked to the type's width. Addition, subtraction and
multiplication are then plain uint64 arithmetic followed by a mask, which is
wrap-around at any width (s2/s4/u2/u4 included) without numpy overflow
surprises; ops whose meaning depends on signedness (division, comparison,
arithmetic shift, min/max) reinterpret the code as a signed int64 first.

The edge cases follow XLA's elemental IR emitter, which is what the compiled
backends (XLA:CPU checked through jax; XLA:GPU shares the emitter) execute:

* ``x / 0 = -1`` (all ones, also for unsigned), ``x % 0 = x``;
  ``INT_MIN / -1 = INT_MIN``, ``INT_MIN % -1 = 0``; division truncates.
* Shift amounts are read as unsigned; an amount >= the width gives 0 for
  shift-left and shift-right-logical and the sign fill for
  shift-right-arithmetic. shift-right-arithmetic on an unsigned type still
  copies the top bit (it is an ``ashr`` on the bits).
* power: exponentiation by squaring over the exponent's low 6 bits only
  (``3^64 == 1`` in s32), and an exponent whose top bit is set counts as
  negative — also for unsigned types, so ``3^200 == 0`` in u8 — giving
  ``1`` for base 1, ``+-1`` for base -1 (all ones) and ``0`` otherwise.
  XLA's HloEvaluator differs here (full exponent, unsigned never negative);
  we follow the compiled code.
* popcnt / count-leading-zeros count within the type's width; the count is
  stored back into the same type (so popcnt(s2 -1) = 2 wraps to -2).
"""

from __future__ import annotations

import numpy as np

from heron.hlo.element_types import ElementType

_U64 = np.uint64


def mask_of(width: int) -> np.uint64:
    return _U64((1 << width) - 1)


def to_codes(x: np.ndarray, et: ElementType) -> np.ndarray:
    """Bit pattern of each integer (or pred) element as uint64, masked to the width."""
    arr = np.asarray(x)
    if et.is_pred:
        return arr.astype(np.uint64)
    wide = arr.astype(np.int64) if et.is_signed_integral else arr.astype(np.uint64)
    return wide.astype(np.uint64) & mask_of(et.bit_width)


def signed_values(codes: np.ndarray, width: int) -> np.ndarray:
    """Interpret ``width``-bit codes as two's complement, as int64."""
    codes = np.asarray(codes, dtype=np.uint64) & mask_of(width)
    if width == 64:
        return codes.astype(np.int64)  # numpy's unsafe cast reinterprets the top bit
    as_int = codes.astype(np.int64)
    return np.where(as_int >= (1 << (width - 1)), as_int - (1 << width), as_int)


def from_codes(codes: np.ndarray, et: ElementType) -> np.ndarray:
    """Array of type ``et`` holding the given bit patterns (extra high bits are dropped)."""
    codes = np.asarray(codes, dtype=np.uint64) & mask_of(et.bit_width)
    if et.is_pred:
        return codes != 0
    if et.is_signed_integral:
        return signed_values(codes, et.bit_width).astype(et.numpy_dtype)
    return codes.astype(et.numpy_dtype)


def values(x: np.ndarray, et: ElementType) -> np.ndarray:
    """Numeric values for ordering: int64 for signed types, uint64 otherwise."""
    codes = to_codes(x, et)
    return signed_values(codes, et.bit_width) if et.is_signed_integral else codes


# -- arithmetic ---------------------------------------------------------------


def add(a, b, et):
    return from_codes(to_codes(a, et) + to_codes(b, et), et)


def subtract(a, b, et):
    return from_codes(to_codes(a, et) - to_codes(b, et), et)


def multiply(a, b, et):
    return from_codes(to_codes(a, et) * to_codes(b, et), et)


def mulhi(a, b, et):
    """The high half of the exact product (signed for signed types): jax's ``lax.mulhi``,
    XLA's ``mulhi``. Python integers carry the product exactly.

    Every width's own half, as jax defines it: XLA:CPU gives s2/u2 theirs but shifts
    s4/u4 products by 8 (their byte's half: 0 or -1), which looks like its storage
    showing through; heron's kernels compute the defined half on every backend."""
    width = et.bit_width
    if et.is_signed_integral:
        x = signed_values(to_codes(a, et), width).astype(object)
        y = signed_values(to_codes(b, et), width).astype(object)
    else:
        x, y = to_codes(a, et).astype(object), to_codes(b, et).astype(object)
    high = np.asarray((x * y) >> width, dtype=object)  # floor: the two's complement word
    mask = (1 << width) - 1
    codes = np.array([int(v) & mask for v in high.ravel()], np.uint64)
    return from_codes(codes.reshape(high.shape), et)


def negate(a, et):
    return from_codes(_U64(0) - to_codes(a, et), et)


def abs_(a, et):
    if not et.is_signed_integral:
        return np.asarray(a).copy()
    codes = to_codes(a, et)
    negative = signed_values(codes, et.bit_width) < 0
    return from_codes(np.where(negative, _U64(0) - codes, codes), et)


def sign(a, et):
    v = values(a, et)
    if et.is_signed_integral:
        return np.sign(v).astype(et.numpy_dtype)
    return (v != 0).astype(et.numpy_dtype)


def divide(a, b, et):
    width = et.bit_width
    if not et.is_signed_integral:
        ua, ub = to_codes(a, et), to_codes(b, et)
        zero = ub == 0
        q = ua // np.where(zero, _U64(1), ub)
        return from_codes(np.where(zero, mask_of(width), q), et)
    sa, sb = values(a, et), values(b, et)
    int_min = -(1 << (width - 1))
    zero = sb == 0
    overflow = (sa == int_min) & (sb == -1)
    safe_b = np.where(zero | overflow, 1, sb)
    # C division truncates towards zero; a - fmod(a, b) is an exact multiple of b.
    r = np.fmod(sa, safe_b)
    q = (sa - r) // safe_b
    q = np.where(overflow, int_min, np.where(zero, -1, q))
    return from_codes(q.astype(np.int64).astype(np.uint64), et)


def remainder(a, b, et):
    width = et.bit_width
    if not et.is_signed_integral:
        ua, ub = to_codes(a, et), to_codes(b, et)
        zero = ub == 0
        r = ua % np.where(zero, _U64(1), ub)
        return from_codes(np.where(zero, ua, r), et)
    sa, sb = values(a, et), values(b, et)
    int_min = -(1 << (width - 1))
    zero = sb == 0
    overflow = (sa == int_min) & (sb == -1)
    safe_b = np.where(zero | overflow, 1, sb)
    r = np.fmod(sa, safe_b)
    r = np.where(zero, sa, np.where(overflow, 0, r))
    return from_codes(r.astype(np.int64).astype(np.uint64), et)


def power(a, b, et):
    width = et.bit_width
    base = to_codes(a, et)
    exp = to_codes(b, et)
    acc = np.ones_like(base)
    square = base.copy()
    bits = exp.copy()
    for _ in range(6):
        acc = np.where((bits & _U64(1)) == 1, acc * square, acc)
        square = square * square
        bits = bits >> _U64(1)
    all_ones = mask_of(width)
    negative_exp = ((exp >> _U64(width - 1)) & _U64(1)) == 1
    odd = (exp & _U64(1)) == 1
    for_negative = np.where(
        base == 1,
        _U64(1),
        np.where(base == all_ones, np.where(odd, all_ones, _U64(1)), _U64(0)),
    )
    return from_codes(np.where(negative_exp, for_negative, acc), et)


def maximum(a, b, et):
    va, vb = values(a, et), values(b, et)
    return from_codes(np.where(va >= vb, to_codes(a, et), to_codes(b, et)), et)


def minimum(a, b, et):
    va, vb = values(a, et), values(b, et)
    return from_codes(np.where(va <= vb, to_codes(a, et), to_codes(b, et)), et)


# -- bits ---------------------------------------------------------------------


def bitwise(op: str, a, b, et):
    ca, cb = to_codes(a, et), to_codes(b, et)
    if op == "and":
        r = ca & cb
    elif op == "or":
        r = ca | cb
    elif op == "xor":
        r = ca ^ cb
    else:  # pragma: no cover - callers pass one of the three
        raise ValueError(op)
    return from_codes(r, et)


def not_(a, et):
    if et.is_pred:
        return ~np.asarray(a, dtype=np.bool_)
    return from_codes(~to_codes(a, et), et)


def shift_left(a, b, et):
    width = et.bit_width
    amount = to_codes(b, et)
    in_range = amount < width
    shifted = to_codes(a, et) << np.where(in_range, amount, _U64(0))
    return from_codes(np.where(in_range, shifted, _U64(0)), et)


def shift_right_logical(a, b, et):
    width = et.bit_width
    amount = to_codes(b, et)
    in_range = amount < width
    shifted = to_codes(a, et) >> np.where(in_range, amount, _U64(0))
    return from_codes(np.where(in_range, shifted, _U64(0)), et)


def shift_right_arithmetic(a, b, et):
    width = et.bit_width
    amount = to_codes(b, et)
    in_range = amount < width
    as_signed = signed_values(to_codes(a, et), width)
    shifted = as_signed >> np.where(in_range, amount, _U64(0)).astype(np.int64)
    fill = np.where(as_signed < 0, -1, 0)
    result = np.where(in_range, shifted, fill).astype(np.int64)
    return from_codes(result.astype(np.uint64), et)


def popcnt(a, et):
    return from_codes(np.bitwise_count(to_codes(a, et)).astype(np.uint64), et)


def count_leading_zeros(a, et):
    width = et.bit_width
    v = to_codes(a, et)
    length = np.zeros(v.shape, dtype=np.uint64)
    for step in (32, 16, 8, 4, 2, 1):
        high = (v >> _U64(step)) != 0
        length = length + np.where(high, _U64(step), _U64(0))
        v = np.where(high, v >> _U64(step), v)
    length = length + (v != 0).astype(np.uint64)
    return from_codes(_U64(width) - length, et)


# -- comparison ---------------------------------------------------------------


def compare(direction: str, a, b, et) -> np.ndarray:
    va, vb = values(a, et), values(b, et)
    return compare_values(direction, va, vb)


def compare_values(direction: str, va, vb) -> np.ndarray:
    if direction == "EQ":
        return np.asarray(va == vb)
    if direction == "NE":
        return np.asarray(va != vb)
    if direction == "LT":
        return np.asarray(va < vb)
    if direction == "LE":
        return np.asarray(va <= vb)
    if direction == "GT":
        return np.asarray(va > vb)
    if direction == "GE":
        return np.asarray(va >= vb)
    raise ValueError(f"unknown comparison direction '{direction}'")
