"""bitcast-convert, reduce-precision and stochastic-convert against the reference evaluator.

bitcast-convert: every same-width pair (all bit patterns up to 16 bits,
random and NaN patterns beyond), and splitting/packing across widths
(little-endian along the new minor dimension, sub-byte types and pred
included, in 1-D and 2-D). reduce-precision: every float type under a set of
(exponent, mantissa) budgets, all patterns of the 16-bit and smaller types.
stochastic-convert: every float source XLA allows, with random bits and
values at the saturation bounds. All comparisons are bitwise.
"""

from __future__ import annotations

import numpy as np
import pytest
from heron_test_support.elemental_cases import NARROW_FLOATS, WIDE_FLOATS, run_both
from heron_test_support.elemental_jit import run_hlo

from heron.hlo.element_types import ElementType as E
from heron.hlo.errors import UnsupportedError
from heron.hlo.evaluator import float_semantics as fs
from heron.hlo.evaluator import integer_semantics as ints

_UINT = {8: np.uint8, 16: np.uint16, 32: np.uint32, 64: np.uint64}
RNG_SEED = 99


def bits_of(x: np.ndarray, et: E) -> np.ndarray:
    if et.is_floating:
        return fs.float_bits(x, et)
    return ints.to_codes(x, et)


def values_from_bits(codes: np.ndarray, et: E) -> np.ndarray:
    """An array of ``et`` holding the bit patterns ``codes`` (masked to the width)."""
    codes = np.asarray(codes, dtype=np.uint64) & np.uint64((1 << et.bit_width) - 1)
    if et.is_pred:
        return (codes & np.uint64(1)).astype(bool)
    if et.is_floating:
        raw = codes.astype(_UINT[max(8, et.bit_width)])
        return raw.view(et.numpy_dtype)
    return ints.from_codes(codes, et)


def patterns(et: E, rng: np.random.Generator, count: int = 4000) -> np.ndarray:
    """Every pattern of a type of at most 16 bits; random ones (plus specials) beyond."""
    width = et.bit_width
    if et.is_pred:
        return np.array([False, True, True, False])
    if width <= 16:
        return values_from_bits(np.arange(1 << width, dtype=np.uint64), et)
    codes = rng.integers(0, 1 << 63, count, dtype=np.uint64) << np.uint64(1)
    codes |= rng.integers(0, 2, count, dtype=np.uint64)
    codes >>= np.uint64(64 - width)
    values = values_from_bits(codes, et)
    if et.is_floating:
        info = np.finfo(et.numpy_dtype)
        extra = [0.0, -0.0, np.inf, -np.inf, np.nan, info.max, -info.max, info.tiny,
                 info.smallest_subnormal, -info.smallest_subnormal, 1.0, 1.5]  # fmt: skip
        values = np.concatenate([values, np.array(extra, dtype=et.numpy_dtype)])
    return values


def check(text: str, inputs: list[np.ndarray], result_types: list[E]) -> None:
    got, want = run_both(text, inputs)
    assert len(got) == len(want) == len(result_types)
    for g, w, et in zip(got, want, result_types, strict=True):
        w = np.asarray(w)
        assert g.shape == w.shape, (et, g.shape, w.shape)
        if et.is_complex:
            same = np.asarray(g).view(np.uint8) == w.view(np.uint8)
        else:
            same = bits_of(g, et) == bits_of(w, et)
        bad = np.argwhere(~same)
        assert not len(bad), f"{et.value}: {len(bad)} differ, first at {bad[:4].tolist()}"


# -- bitcast-convert: same width ----------------------------------------------

SAME_WIDTH = {
    2: [E.S2, E.U2],
    4: [E.S4, E.U4, E.F4E2M1FN],
    8: [
        E.PRED,
        E.S8,
        E.U8,
        E.F8E4M3FN,
        E.F8E5M2,
        E.F8E4M3FNUZ,
        E.F8E5M2FNUZ,
        E.F8E4M3B11FNUZ,
        E.F8E8M0FNU,
    ],  # fmt: skip
    16: [E.S16, E.U16, E.F16, E.BF16],
    32: [E.S32, E.U32, E.F32],
    64: [E.S64, E.U64, E.F64],
}
SOURCES = [t for group in SAME_WIDTH.values() for t in group]


@pytest.mark.parametrize("src", SOURCES, ids=lambda t: t.value)
def test_bitcast_same_width(src: E) -> None:
    targets = [t for t in SAME_WIDTH[src.bit_width] if not (t.is_pred and not src.is_pred)]
    x = patterns(src, np.random.default_rng(RNG_SEED))
    n = len(x)
    lines = [f"  p0 = {src.value}[{n}] parameter(0)"]
    lines += [f"  b{k} = {t.value}[{n}] bitcast-convert(p0)" for k, t in enumerate(targets)]
    shapes = ", ".join(f"{t.value}[{n}]" for t in targets)
    names = ", ".join(f"b{k}" for k in range(len(targets)))
    lines.append(f"  ROOT t = ({shapes}) tuple({names})")
    check("fused_bitcast {\n" + "\n".join(lines) + "\n}\n", [x], targets)


def test_bitcast_complex_to_itself() -> None:
    rng = np.random.default_rng(RNG_SEED)
    for et in (E.C64, E.C128):
        x = (rng.standard_normal(16) + 1j * rng.standard_normal(16)).astype(et.numpy_dtype)
        text = (
            f"fused_bitcast {{\n  p0 = {et.value}[16] parameter(0)\n"
            f"  ROOT b = {et.value}[16] bitcast-convert(p0)\n}}\n"
        )
        check(text, [x], [et])


# -- bitcast-convert: across widths -------------------------------------------

ACROSS = [
    (E.S32, E.U8), (E.F32, E.S16), (E.F64, E.S16), (E.U64, E.F32), (E.S64, E.U2),
    (E.U8, E.S4), (E.S8, E.U2), (E.F16, E.F8E5M2), (E.BF16, E.F4E2M1FN), (E.F32, E.F8E8M0FNU),
    (E.F8E4M3FN, E.F4E2M1FN), (E.S4, E.U2), (E.F64, E.F32), (E.PRED, E.S4),
]  # fmt: skip


@pytest.mark.parametrize("wide,narrow", ACROSS, ids=lambda t: t.value)
def test_bitcast_split(wide: E, narrow: E) -> None:
    """Wide -> narrow: a new minor dimension, index 0 the least significant bits."""
    x = patterns(wide, np.random.default_rng(RNG_SEED), 500)[:600]
    ratio = wide.bit_width // narrow.bit_width
    n = len(x)
    text = (
        f"fused_bitcast {{\n  p0 = {wide.value}[{n}] parameter(0)\n"
        f"  ROOT b = {narrow.value}[{n},{ratio}] bitcast-convert(p0)\n}}\n"
    )
    check(text, [x], [narrow])


@pytest.mark.parametrize(
    "wide,narrow", [p for p in ACROSS if not p[0].is_pred], ids=lambda t: t.value
)
def test_bitcast_pack(wide: E, narrow: E) -> None:
    """Narrow -> wide: the operand's minor dimension packs, element 0 lowest."""
    rng = np.random.default_rng(RNG_SEED)
    ratio = wide.bit_width // narrow.bit_width
    codes = rng.integers(0, 1 << narrow.bit_width, (300, ratio), dtype=np.uint64)
    x = values_from_bits(codes, narrow)
    text = (
        f"fused_bitcast {{\n  p0 = {narrow.value}[300,{ratio}] parameter(0)\n"
        f"  ROOT b = {wide.value}[300] bitcast-convert(p0)\n}}\n"
    )
    check(text, [x], [wide])


def test_bitcast_two_dimensional() -> None:
    rng = np.random.default_rng(RNG_SEED)
    x = rng.integers(-(2**31), 2**31, (3, 5), dtype=np.int64).astype(np.int32)
    text = """fused_bitcast {
  p0 = s32[3,5] parameter(0)
  b = u8[3,5,4] bitcast-convert(p0)
  ROOT back = f32[3,5] bitcast-convert(b)
}
"""
    check(text, [x], [E.F32])
    text = (
        "fused_bitcast {\n  p0 = s32[3,5] parameter(0)\n"
        "  ROOT b = u4[3,5,8] bitcast-convert(p0)\n}\n"
    )
    check(text, [x], [E.U4])


def test_bitcast_pred_from_bytes() -> None:
    x = np.array([0, 1, 2, 255, 128, 0], dtype=np.uint8)
    text = "fused_bitcast {\n  p0 = u8[6] parameter(0)\n  ROOT b = pred[6] bitcast-convert(p0)\n}\n"
    check(text, [x], [E.PRED])
    (got,) = run_hlo(text, [x])
    assert got.tolist() == [False, True, True, True, True, False]


# -- reduce-precision ---------------------------------------------------------

BUDGETS = [(5, 10), (8, 7), (5, 2), (4, 3), (2, 1), (1, 0), (8, 23), (11, 52), (3, 5), (6, 0)]
FLOATS = WIDE_FLOATS + NARROW_FLOATS


@pytest.mark.parametrize("et", FLOATS, ids=lambda t: t.value)
def test_reduce_precision(et: E) -> None:
    x = patterns(et, np.random.default_rng(RNG_SEED), 20000)
    n = len(x)
    lines = [f"  p0 = {et.value}[{n}] parameter(0)"]
    for k, (e, m) in enumerate(BUDGETS):
        lines.append(
            f"  r{k} = {et.value}[{n}] reduce-precision(p0), exponent_bits={e}, mantissa_bits={m}"
        )
    shapes = ", ".join([f"{et.value}[{n}]"] * len(BUDGETS))
    names = ", ".join(f"r{k}" for k in range(len(BUDGETS)))
    lines.append(f"  ROOT t = ({shapes}) tuple({names})")
    check("fused_rp {\n" + "\n".join(lines) + "\n}\n", [x], [et] * len(BUDGETS))


# -- stochastic-convert -------------------------------------------------------

STOCHASTIC = [
    (E.F32, E.S32), (E.F32, E.S8), (E.F16, E.S16), (E.BF16, E.S32), (E.F64, E.S64),
    (E.F64, E.S16), (E.F8E4M3FN, E.S8), (E.F8E5M2, E.S4), (E.F32, E.S64),
]  # fmt: skip


@pytest.mark.parametrize("src,dst", STOCHASTIC, ids=lambda t: t.value)
def test_stochastic_convert(src: E, dst: E) -> None:
    rng = np.random.default_rng(RNG_SEED)
    width = dst.bit_width
    lo, hi = -(2 ** (width - 1)), 2 ** (width - 1) - 1
    special = [0.0, -0.0, 0.5, -0.5, 0.25, -0.75, 1.5, -1.5, 2.5, np.inf, -np.inf, np.nan,
               float(lo), float(hi), float(lo) - 1, float(hi) + 1, float(hi) - 0.5,
               float(lo) + 0.5, 1e30, -1e30]  # fmt: skip
    scaled = rng.standard_normal(3000) * 10.0 ** rng.integers(-2, 6, 3000)
    with np.errstate(all="ignore"):
        x = np.concatenate([np.repeat(special, 8), scaled]).astype(src.numpy_dtype)
    if src.bit_width <= 16:  # every pattern too
        x = np.concatenate([x, patterns(src, rng)])
    rnd_t = E(f"u{src.bit_width}")
    info = np.iinfo(rnd_t.numpy_dtype)
    random = rng.integers(0, int(info.max), len(x), dtype=np.uint64, endpoint=True)
    random[:8] = [0, 1, int(info.max), int(info.max) - 1, 1 << (src.bit_width - 1), 0, 0, 5]
    random = random.astype(rnd_t.numpy_dtype)
    n = len(x)
    text = (
        f"fused_sc {{\n  p0 = {src.value}[{n}] parameter(0)\n"
        f"  p1 = {rnd_t.value}[{n}] parameter(1)\n"
        f"  ROOT s = {dst.value}[{n}] stochastic-convert(p0, p1)\n}}\n"
    )
    check(text, [x, random], [dst])


def test_stochastic_convert_to_unsigned_is_unsupported() -> None:
    """XLA defines no float -> unsigned stochastic-convert; the emitter says so clearly."""
    text = (
        "fused_sc {\n  p0 = f32[4] parameter(0)\n  p1 = u32[4] parameter(1)\n"
        "  ROOT s = u32[4] stochastic-convert(p0, p1)\n}\n"
    )
    with pytest.raises(UnsupportedError, match="fused_sc.*signed integer"):
        run_hlo(text, [np.zeros(4, np.float32), np.zeros(4, np.uint32)])
