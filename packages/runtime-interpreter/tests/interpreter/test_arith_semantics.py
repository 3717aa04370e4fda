"""The interpreter's arith semantics, on hand-written kernels, against independent references.

References are Python integers (exact, then wrapped to the width) and
fractions.Fraction (exact rationals, then rounded once by hand), never the
interpreter's own helpers.
"""

from __future__ import annotations

import math
from fractions import Fraction

import ml_dtypes
import numpy as np
import pytest

from heron.runtime.interpreter.errors import SanitizerError

RNG = np.random.default_rng(1234)


def _wrap(value: int, width: int) -> int:
    value &= (1 << width) - 1
    return value - (1 << width) if value >> (width - 1) else value


def _ints(width: int, count: int = 200) -> np.ndarray:
    """Values of an ``i{width}`` (sign-extended), with the edges."""
    low, high = -(1 << (width - 1)), (1 << (width - 1)) - 1
    edges = [low, high, 0, 1, -1 if width > 1 else 0, low + 1, high - 1]
    values = [int(v) for v in RNG.integers(low, high, count, endpoint=True)]
    return np.array([_wrap(v, width) for v in edges + values])


def _container(width: int):
    for bits in (8, 16, 32, 64):
        if width <= bits:
            return np.dtype(f"int{bits}")


def _unsigned(v: int, width: int) -> int:
    return v & ((1 << width) - 1)


def _trunc_div(a: int, b: int) -> int:
    q = abs(a) // abs(b)
    return q if (a < 0) == (b < 0) else -q


INTEGER_OPS = {
    "addi": lambda a, b, w: a + b,
    "subi": lambda a, b, w: a - b,
    "muli": lambda a, b, w: a * b,
    "andi": lambda a, b, w: a & b,
    "ori": lambda a, b, w: a | b,
    "xori": lambda a, b, w: a ^ b,
    "maxsi": lambda a, b, w: max(a, b),
    "minsi": lambda a, b, w: min(a, b),
    "maxui": lambda a, b, w: max(_unsigned(a, w), _unsigned(b, w)),
    "minui": lambda a, b, w: min(_unsigned(a, w), _unsigned(b, w)),
    # Shifts by amounts below the width; larger ones are poison-shift findings (below).
    "shli": lambda a, b, w: a << _unsigned(b, w),
    "shrui": lambda a, b, w: _unsigned(a, w) >> _unsigned(b, w),
    "shrsi": lambda a, b, w: a >> _unsigned(b, w),
}
SHIFTS = ("shli", "shrui", "shrsi")


@pytest.mark.parametrize("width", [2, 4, 8, 13, 16, 32, 64])
@pytest.mark.parametrize("name", sorted(INTEGER_OPS))
def test_integer_binary_ops_wrap_to_their_width(name, width, elementwise):
    t = f"i{width}"
    a = _ints(width)
    b = np.concatenate(
        [_ints(width)[: len(a) // 2], RNG.integers(0, width + 3, len(a) - len(a) // 2)]
    )
    b = np.array([_wrap(int(v), width) for v in b])
    if name in SHIFTS:  # amounts read unsigned, below the width
        b = np.array([_wrap(_unsigned(int(v), width) % width, width) for v in b])
    dtype = _container(width)
    (got,) = elementwise(
        f"%r0 = arith.{name} %a0, %a1 : {t}", [a.astype(dtype), b.astype(dtype)], [t, t], [t]
    )
    want = [_wrap(INTEGER_OPS[name](int(x), int(y), width), width) for x, y in zip(a, b)]
    assert got.tolist() == want


def test_i1_arithmetic_is_bool_with_true_as_minus_one(elementwise):
    a = np.array([False, False, True, True])
    b = np.array([False, True, False, True])
    body = """
    %r0 = arith.addi %a0, %a1 : i1
    %r1 = arith.muli %a0, %a1 : i1
    %r2 = arith.maxsi %a0, %a1 : i1
    %r3 = arith.maxui %a0, %a1 : i1
    %r4 = arith.extsi %a0 : i1 to i8
    %r5 = arith.extui %a0 : i1 to i8
    %r6 = arith.cmpi slt, %a0, %a1 : i1
    """
    got = elementwise(body, [a, b], ["i1", "i1"], ["i1", "i1", "i1", "i1", "i8", "i8", "i1"])
    assert got[0].tolist() == [False, True, True, False]
    assert got[1].tolist() == [False, False, False, True]
    assert got[2].tolist() == [False, False, False, True]  # max(-1, 0) == 0
    assert got[3].tolist() == [False, True, True, True]
    assert got[4].tolist() == [0, 0, -1, -1]
    assert got[5].tolist() == [0, 0, 1, 1]
    assert got[6].tolist() == [False, False, True, False]  # -1 < 0


@pytest.mark.parametrize("width", [4, 8, 32, 64])
def test_divisions_and_remainders(width, elementwise):
    t = f"i{width}"
    a = _ints(width)
    b = _ints(width)
    low = -(1 << (width - 1))
    keep = (b != 0) & ~((a == low) & (b == -1))
    a, b = a[keep], b[keep]
    body = f"""
    %r0 = arith.divsi %a0, %a1 : {t}
    %r1 = arith.remsi %a0, %a1 : {t}
    %r2 = arith.divui %a0, %a1 : {t}
    %r3 = arith.remui %a0, %a1 : {t}
    %r4 = arith.ceildivsi %a0, %a1 : {t}
    %r5 = arith.floordivsi %a0, %a1 : {t}
    %r6 = arith.ceildivui %a0, %a1 : {t}
    """
    dtype = _container(width)
    got = elementwise(body, [a.astype(dtype), b.astype(dtype)], [t, t], [t] * 7)
    pairs = [(int(x), int(y)) for x, y in zip(a, b)]
    u = [(_unsigned(x, width), _unsigned(y, width)) for x, y in pairs]
    expected = [
        [_trunc_div(x, y) for x, y in pairs],
        [x - _trunc_div(x, y) * y for x, y in pairs],
        [x // y for x, y in u],
        [x % y for x, y in u],
        [-((-x) // y) for x, y in pairs],
        [x // y for x, y in pairs],
        [-((-x) // y) for x, y in u],
    ]
    for k, want in enumerate(expected):
        assert got[k].tolist() == [_wrap(v, width) for v in want], k


def test_division_by_zero_in_an_active_lane_is_a_finding(elementwise):
    a = np.array([7, 8, 9], np.int32)
    b = np.array([1, 0, 3], np.int32)
    with pytest.raises(SanitizerError, match=r"division-by-zero.*thread \(1, 0, 0\)"):
        elementwise("%r0 = arith.divui %a0, %a1 : i32", [a, b], ["i32", "i32"], ["i32"])
    minimum = np.array([-(2**31)], np.int32)
    with pytest.raises(SanitizerError, match="overflows"):
        elementwise(
            "%r0 = arith.remsi %a0, %a1 : i32",
            [minimum, np.array([-1], np.int32)],
            ["i32", "i32"],
            ["i32"],
        )


def test_division_by_zero_in_an_inactive_lane_does_not_fault(elementwise):
    body = """
    %zero = arith.constant 0 : i32
    %nonzero = arith.cmpi ne, %a1, %zero : i32
    %r0 = scf.if %nonzero -> (i32) {
      %q = arith.divsi %a0, %a1 : i32
      scf.yield %q : i32
    } else {
      scf.yield %zero : i32
    }
    """
    a = np.array([7, 8, -9, 10], np.int32)
    b = np.array([2, 0, 2, 0], np.int32)
    (got,) = elementwise(body, [a, b], ["i32", "i32"], ["i32"])
    assert got.tolist() == [3, 0, -4, 0]


CMPI = ("eq", "ne", "slt", "sle", "sgt", "sge", "ult", "ule", "ugt", "uge")


@pytest.mark.parametrize("width", [1, 4, 32, 64])
def test_cmpi_predicates(width, elementwise):
    t = f"i{width}"
    values = _ints(width, 20) if width > 1 else np.array([0, -1])
    a, b = (x.reshape(-1) for x in np.meshgrid(values, values))
    dtype = np.dtype(np.bool_) if width == 1 else _container(width)
    body = "\n".join(f"%r{k} = arith.cmpi {p}, %a0, %a1 : {t}" for k, p in enumerate(CMPI))
    got = elementwise(body, [a.astype(dtype), b.astype(dtype)], [t, t], ["i1"] * 10)
    for k, p in enumerate(CMPI):
        for x, y, result in zip(a.tolist(), b.tolist(), got[k].tolist()):
            if p[0] == "u":
                x, y = _unsigned(int(x), width), _unsigned(int(y), width)
            relation = p[1:] if p[0] in "su" else p
            want = {
                "eq": x == y, "ne": x != y, "lt": x < y, "le": x <= y, "gt": x > y, "ge": x >= y
            }[relation]  # fmt: skip
            assert result == want, (p, x, y)


CMPF = (
    "false", "oeq", "ogt", "oge", "olt", "ole", "one", "ord",
    "ueq", "ugt", "uge", "ult", "ule", "une", "uno", "true",
)  # fmt: skip


def test_cmpf_predicates_with_nan_and_signed_zeros(elementwise):
    values = np.array([0.0, -0.0, 1.0, -1.0, np.inf, -np.inf, np.nan, 1e-45], np.float32)
    a, b = (x.reshape(-1) for x in np.meshgrid(values, values))
    body = "\n".join(f"%r{k} = arith.cmpf {p}, %a0, %a1 : f32" for k, p in enumerate(CMPF))
    got = elementwise(body, [a, b], ["f32", "f32"], ["i1"] * 16)
    for k, p in enumerate(CMPF):
        for x, y, result in zip(a.tolist(), b.tolist(), got[k].tolist()):
            unordered = math.isnan(x) or math.isnan(y)
            if p in ("false", "true"):
                want = p == "true"
            elif p in ("ord", "uno"):
                want = unordered == (p == "uno")
            else:
                relation = {"eq": x == y, "gt": x > y, "ge": x >= y, "lt": x < y, "le": x <= y}
                relation["ne"] = not unordered and x != y
                holds = relation[p[1:]] and not unordered
                want = holds or (unordered and p[0] == "u")
            assert result == want, (p, x, y)


def _bits32(values) -> list[int]:
    return np.asarray(values, np.float32).view(np.uint32).tolist()


def test_float_arithmetic_keeps_denormals_and_nan_payloads(elementwise):
    nan_payload = np.array([0x7FC01234], np.uint32).view(np.float32)[0]
    signalling = np.array([0xFF800001], np.uint32).view(np.float32)[0]
    a = np.array([1e-45, 3e-39, nan_payload, 1.0, signalling, -0.0], np.float32)
    b = np.array([1e-45, -1e-39, 2.0, nan_payload, 1.0, 0.0], np.float32)
    body = """
    %r0 = arith.addf %a0, %a1 : f32
    %r1 = arith.mulf %a0, %a1 : f32
    %r2 = arith.negf %a0 : f32
    """
    added, multiplied, negated = elementwise(body, [a, b], ["f32", "f32"], ["f32"] * 3)
    assert _bits32(added[:2]) == _bits32([2.8e-45, np.float32(3e-39) - np.float32(1e-39)])
    assert _bits32(added[2:5]) == [0x7FC01234, 0x7FC01234, 0xFFC00001]  # quieted, payload kept
    assert _bits32(multiplied[:1]) == [0]  # 2**-149 squared underflows to +0
    assert _bits32(added[5:]) == [0]  # -0 + 0 == +0
    assert _bits32(negated) == [x ^ 0x80000000 for x in _bits32(a)]  # a sign flip, even for NaN


def _round_fraction(value: Fraction, mantissa_bits: int, min_exponent: int) -> Fraction:
    """``value`` rounded to nearest even with ``mantissa_bits`` bits, subnormals below 2**min."""
    if value == 0:
        return value
    sign = -1 if value < 0 else 1
    value = abs(value)
    exponent = value.numerator.bit_length() - value.denominator.bit_length()
    while Fraction(2) ** exponent > value:
        exponent -= 1
    while Fraction(2) ** (exponent + 1) <= value:
        exponent += 1
    exponent = max(exponent, min_exponent)
    ulp = Fraction(2) ** (exponent - mantissa_bits + 1)
    scaled = value / ulp
    floor = scaled.numerator // scaled.denominator
    remainder = scaled - floor
    if remainder > Fraction(1, 2) or (remainder == Fraction(1, 2) and floor % 2 == 1):
        floor += 1
    return sign * floor * ulp


FORMATS = {
    "f16": (np.float16, 11, -14),
    "bf16": (ml_dtypes.bfloat16, 8, -126),
    "f32": (np.float32, 24, -126),
}


def _expected_rounding(values, target: str) -> np.ndarray:
    dtype, bits, min_exponent = FORMATS[target]
    out = []
    for v in values:
        rounded = _round_fraction(Fraction(float(v)), bits, min_exponent)
        # exact in float64 (the cast below is exact or overflows); a Fraction has no -0
        out.append(math.copysign(float(rounded), float(v)))
    with np.errstate(over="ignore"):
        return np.array(out, np.float64).astype(np.float32).astype(dtype)


@pytest.mark.parametrize("target", ["f16", "bf16", "f32"])
def test_truncf_from_f64_rounds_once(target, elementwise):
    dtype = FORMATS[target][0]
    # Values one f64 ulp above a tie of the target: rounding through f32 first would tie.
    tie = np.array([1.0 + 2.0**-12, 1.0 + 2.0**-9, 1.0 + 2.0**-25, 3.0 + 3 * 2.0**-12], np.float64)
    values = np.concatenate([np.nextafter(tie, 2.0), np.nextafter(tie, 0.0), tie])
    rng = np.random.default_rng(7)  # its own generator: the inputs do not depend on test order
    underflows = np.array([-1e-30, 1e-30, -0.0, 0.0, -(2.0**-150), 2.0**-26])
    values = np.concatenate([values, rng.normal(0, 1, 64), rng.normal(0, 1, 32) * 1e-6, underflows])
    (got,) = elementwise(f"%r0 = arith.truncf %a0 : f64 to {target}", [values], ["f64"], [target])
    want = _expected_rounding(values, target)
    assert (
        got.view(f"u{np.dtype(dtype).itemsize}").tolist()
        == want.view(f"u{np.dtype(dtype).itemsize}").tolist()
    )


def test_fptosi_and_fptoui_saturate_and_map_nan_to_zero(elementwise):
    values = np.array(
        [1.9, -1.9, 3e9, -3e9, np.nan, np.inf, -np.inf, -0.5, 255.5, 2**31], np.float32
    )
    body = """
    %r0 = arith.fptosi %a0 : f32 to i32
    %r1 = arith.fptoui %a0 : f32 to i8
    %r2 = arith.fptosi %a0 : f32 to i4
    """
    signed32, unsigned8, signed4 = elementwise(body, [values], ["f32"], ["i32", "i8", "i4"])
    assert signed32.tolist() == [
        1,
        -1,
        2**31 - 1,
        -(2**31),
        0,
        2**31 - 1,
        -(2**31),
        0,
        255,
        2**31 - 1,
    ]
    assert [v & 0xFF for v in unsigned8.tolist()] == [1, 0, 255, 0, 0, 255, 0, 0, 255, 255]
    assert signed4.tolist() == [1, -1, 7, -8, 0, 7, -8, 0, 7, 7]


@pytest.mark.parametrize(
    ("source", "bound"),
    [("i64", None), ("i64", 2**53), ("i64", 2**62), ("i32", None), ("i16", None)],
)
@pytest.mark.parametrize("target", ["f32", "bf16", "f16"])
def test_sitofp_and_uitofp_round_once(source, bound, target, elementwise):
    """64-bit integers are not all exact in f64 (TwoSum and rounding to odd); narrower ones,
    and a launch's 64-bit values all within 2**53, are (converted there, rounded once)."""
    width = int(source[1:])
    big = [2**63 - 1, -(2**63), 2**53 + 1, (1 << 40) + (1 << 16) + 1, (1 << 62) + (1 << 38)]
    big += [2**53, -(2**53), 2**53 - 1, (1 << 52) + (1 << 28) + 1]
    big += [(1 << 61) + (1 << 37) + 1]  # f64 rounds it to an f32 midpoint
    big += [(1 << 24) + 1, (1 << 24) + 3, 2**31 - 1, -(2**31), 65519, 65520, -65521, 3, 0]
    big += [int(v) for v in RNG.integers(-(2**63), 2**63 - 1, 100)]
    big += [int(v) for v in RNG.integers(-(2**31), 2**31 - 1, 100)]
    big = [v for v in big if -(2 ** (width - 1)) <= v < 2 ** (width - 1)]
    if bound is not None:  # a launch of small values only (none negative: uitofp too)
        big = [v for v in big if 0 <= v <= bound]
    values = np.array(big, f"i{width // 8}")
    body = f"""
    %r0 = arith.sitofp %a0 : {source} to {target}
    %r1 = arith.uitofp %a0 : {source} to {target}
    """
    signed_result, unsigned_result = elementwise(body, [values], [source], [target, target])
    dtype, bits, min_exponent = FORMATS[target]
    itemsize = np.dtype(dtype).itemsize
    unsigned_values = [v % 2**width for v in big]
    for source_values, got in ((big, signed_result), (unsigned_values, unsigned_result)):
        want = []
        for v in source_values:
            rounded = _round_fraction(Fraction(v), bits, min_exponent)
            want.append(float(rounded) if abs(rounded) < 2**1000 else math.inf)
        with np.errstate(over="ignore"):
            want_array = np.array(want, np.float64).astype(np.float32).astype(dtype)
        assert got.view(f"u{itemsize}").tolist() == want_array.view(f"u{itemsize}").tolist()


def test_integer_casts_extend_and_truncate(elementwise):
    values = np.array([-1, 5, -8, 7, 0], np.int8)
    body = """
    %r0 = arith.extsi %a0 : i4 to i32
    %r1 = arith.extui %a0 : i4 to i32
    %idx = arith.index_castui %a0 : i4 to index
    %r2 = arith.index_cast %idx : index to i2
    """
    extended, zero_extended, truncated = elementwise(body, [values], ["i4"], ["i32", "i32", "i2"])
    assert extended.tolist() == [-1, 5, -8, 7, 0]
    assert zero_extended.tolist() == [15, 5, 8, 7, 0]
    assert truncated.tolist() == [_wrap(v & 15, 2) for v in [-1, 5, -8, 7, 0]]


def test_bitcast_and_constants_keep_bits(elementwise):
    body = """
    %r0 = arith.bitcast %a0 : f32 to i32
    %c = arith.constant 0x7FA00001 : f32
    %r1 = arith.bitcast %c : f32 to i32
    %h = arith.constant 0xFE01 : bf16
    %r2 = arith.bitcast %h : bf16 to i16
    %v = arith.constant dense<[1.5, -2.0]> : vector<2xf32>
    %vi = arith.bitcast %v : vector<2xf32> to vector<2xi32>
    %r3 = vector.extract %vi[1] : i32 from vector<2xi32>
    """
    values = np.array([-0.0, 1.0], np.float32)
    got = elementwise(body, [values], ["f32"], ["i32", "i32", "i16", "i32"])
    assert got[0].view(np.uint32).tolist() == [0x80000000, 0x3F800000]
    assert got[1].view(np.uint32).tolist() == [0x7FA00001] * 2  # a signalling NaN kept
    assert got[2].view(np.uint16).tolist() == [0xFE01] * 2
    assert got[3].view(np.uint32).tolist() == [0xC0000000] * 2


def test_maximumf_minimumf_maxnumf_minnumf(elementwise):
    payload = np.array([0x7FC00042], np.uint32).view(np.float32)[0]
    a = np.array([0.0, -0.0, payload, 1.0, 2.0, np.nan], np.float32)
    b = np.array([-0.0, 0.0, 1.0, payload, -3.0, np.nan], np.float32)
    body = """
    %r0 = arith.maximumf %a0, %a1 : f32
    %r1 = arith.minimumf %a0, %a1 : f32
    %r2 = arith.maxnumf %a0, %a1 : f32
    %r3 = arith.minnumf %a0, %a1 : f32
    """
    mx, mn, mxn, mnn = elementwise(body, [a, b], ["f32", "f32"], ["f32"] * 4)
    assert _bits32(mx[:2]) == [0, 0] and _bits32(mn[:2]) == [0x80000000] * 2
    assert _bits32(mx[2:4]) == [0x7FC00042] * 2 and _bits32(mn[2:4]) == [0x7FC00042] * 2
    assert mx[4] == 2.0 and mn[4] == -3.0
    assert mxn[2:4].tolist() == [1.0, 1.0] and mnn[2:4].tolist() == [1.0, 1.0]
    assert math.isnan(mxn[5]) and _bits32(mxn[:2]) == [0, 0]


def test_select_with_scalar_and_vector_conditions(elementwise):
    body = """
    %zero = arith.constant 0 : i32
    %c = arith.cmpi sgt, %a0, %zero : i32
    %one = arith.constant dense<[1, 2]> : vector<2xi32>
    %two = vector.broadcast %a0 : i32 to vector<2xi32>
    %s = arith.select %c, %one, %two : vector<2xi32>
    %r0 = vector.extract %s[1] : i32 from vector<2xi32>
    %cv = arith.cmpi slt, %one, %two : vector<2xi32>
    %sv = arith.select %cv, %one, %two : vector<2xi1>, vector<2xi32>
    %r1 = vector.extract %sv[0] : i32 from vector<2xi32>
    """
    values = np.array([5, -5, 0, 1], np.int32)
    scalar, vector = elementwise(body, [values], ["i32"], ["i32", "i32"])
    assert scalar.tolist() == [2, -5, 0, 2]
    assert vector.tolist() == [1, -5, 0, 1]


def test_extended_multiplication_and_addition(elementwise):
    a = _ints(64, 50)
    b = _ints(64, 50)
    body = """
    %r0, %r1 = arith.mulsi_extended %a0, %a1 : i64
    %r2, %r3 = arith.mului_extended %a0, %a1 : i64
    %r4, %r5 = arith.addui_extended %a0, %a1 : i64, i1
    """
    low, high, ulow, uhigh, total, carry = elementwise(
        body, [a, b], ["i64", "i64"], ["i64", "i64", "i64", "i64", "i64", "i1"]
    )
    for k, (x, y) in enumerate(zip(a.tolist(), b.tolist())):
        product = x * y
        unsigned_product = _unsigned(x, 64) * _unsigned(y, 64)
        assert low[k] == _wrap(product, 64) and high[k] == _wrap(product >> 64, 64)
        assert ulow[k] == _wrap(unsigned_product, 64)
        assert uhigh[k] == _wrap(unsigned_product >> 64, 64)
        unsigned_sum = _unsigned(x, 64) + _unsigned(y, 64)
        assert total[k] == _wrap(unsigned_sum, 64) and carry[k] == (unsigned_sum >> 64 == 1)


def test_a_vector_typed_arith_op_runs_elementwise(run_kernel):
    text = """
    module attributes {gpu.container_module} {
      gpu.module @m {
        gpu.func @k(%a: memref<64xf32>, %b: memref<64xf32>) kernel attributes
            {known_block_size = array<i32: 16, 1, 1>, known_grid_size = array<i32: 1, 1, 1>} {
          %t = gpu.thread_id x
          %four = arith.constant 4 : index
          %i = arith.muli %t, %four : index
          %v = vector.load %a[%i] : memref<64xf32>, vector<4xf32>
          %c = arith.constant dense<[1.0, 2.0, 3.0, 4.0]> : vector<4xf32>
          %m = arith.mulf %v, %c : vector<4xf32>
          %s = arith.subf %m, %v : vector<4xf32>
          vector.store %s, %b[%i] : memref<64xf32>, vector<4xf32>
          gpu.return
        }
      }
    }
    """
    values = RNG.normal(size=64).astype(np.float32)
    (raw,) = run_kernel(text, [values], [256], block=(16, 1, 1))
    factors = np.tile(np.array([1, 2, 3, 4], np.float32), 16)
    np.testing.assert_array_equal(raw.view(np.float32), values * factors - values)


@pytest.mark.parametrize("name", SHIFTS)
def test_a_shift_by_the_width_or_more_in_an_active_lane_is_a_finding(name, elementwise):
    """LLVM poison (the narrowed threefry shift that lost a store on an H200, issue 26)."""
    a = np.array([5, 6, 7], np.int32)
    b = np.array([1, 32, 3], np.int32)
    with pytest.raises(SanitizerError, match=r"poison-shift.*thread \(1, 0, 0\).*i32 by its width"):
        elementwise(f"%r0 = arith.{name} %a0, %a1 : i32", [a, b], ["i32", "i32"], ["i32"])


def test_a_shift_by_the_width_in_an_inactive_lane_gives_what_ptx_gives(elementwise):
    body = """
    %width = arith.constant 32 : i32
    %small = arith.cmpi ult, %a1, %width : i32
    %r0 = scf.if %small -> (i32) {
      %s = arith.shli %a0, %a1 : i32
      scf.yield %s : i32
    } else {
      %zero = arith.constant 0 : i32
      scf.yield %zero : i32
    }
    """
    a = np.array([5, 6, 7], np.int32)
    b = np.array([1, 32, 3], np.int32)
    (got,) = elementwise(body, [a, b], ["i32", "i32"], ["i32"])
    assert got.tolist() == [10, 0, 56]


def test_bit_level_ops_keep_a_uniform_value_uniform():
    # A value every lane shares is a 0-d array; np.ascontiguousarray made the bit-level
    # ops' results 1-d, and a kernel indexing memory with a uniform f32 bitcast to i32
    # (jax-cosmo's halofit interpolation) indexed one element for 4,096 lanes: the race
    # checker then failed on the shapes (an internal error for a correct program).
    from heron.runtime.interpreter.semantics import arith
    from heron.runtime.interpreter.types import parse_type

    f32, i32 = parse_type("f32"), parse_type("i32")
    uniform = np.asarray(np.float32(-1.5))
    bits = arith.bitcast_value(uniform, f32, i32)
    assert bits.shape == () and int(bits) == int(np.float32(-1.5).view(np.int32))
    assert arith.bitcast_value(bits, i32, f32).shape == ()
    assert arith.sign_bit(uniform).shape == () and bool(arith.sign_bit(uniform))
    flipped = arith.with_sign(uniform, np.asarray(False))
    assert flipped.shape == () and float(flipped) == 1.5
    nan = np.asarray(np.float32("nan"))
    assert arith.propagate_nan(np.asarray(np.float32(1.0)) * nan, nan).shape == ()
