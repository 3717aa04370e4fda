"""convert between every ordered pair of the 26 array element types, against the evaluator.

One HLO computation per source type converts one input array to all 26
types at once (a tuple root), so each source costs one JIT compile. The
inputs are every bit pattern for types of at most 16 bits, and for the wide
types the values where conversions go wrong: zeros, infinities, NaN, the
extremes and subnormals, every rounding midpoint of f16/bf16/fp8/f4 (and a
sample of f32's) with their neighbours one ulp away (for f64 sources these
are the double-rounding traps), the integer bounds of every integer type
converted to the source type and their neighbours, and random bit patterns.
Results must be bitwise equal to ``heron.hlo.evaluate_module``; where the
evaluator gives a NaN of f16/bf16/f32/f64 (or a complex part), any NaN passes,
while fp8/f4 NaN encodings must match exactly.
"""

from __future__ import annotations

import numpy as np
import pytest
from heron_test_support.elemental_jit import run_hlo

from heron.hlo import evaluate_module, parse_module
from heron.hlo.element_types import ElementType as E
from heron.hlo.evaluator import float_semantics as fs

ALL_TYPES = [
    E.PRED, E.S2, E.S4, E.S8, E.S16, E.S32, E.S64, E.U2, E.U4, E.U8, E.U16, E.U32, E.U64,
    E.F16, E.BF16, E.F32, E.F64, E.C64, E.C128, E.F8E4M3FN, E.F8E5M2, E.F8E4M3FNUZ,
    E.F8E5M2FNUZ, E.F8E4M3B11FNUZ, E.F8E8M0FNU, E.F4E2M1FN,
]  # fmt: skip
SMALL_FLOATS = [t for t in ALL_TYPES if t.is_floating and t.bit_width <= 16]
WIDE_NATIVE = (E.F16, E.BF16, E.F32, E.F64)

_UINT = {8: np.uint8, 16: np.uint16, 32: np.uint32, 64: np.uint64}


def all_patterns(et: E) -> np.ndarray:
    """Every value of a type of at most 16 bits (one per bit pattern)."""
    width = et.bit_width
    if et.is_pred:
        return np.array([False, True])
    if et.is_floating:
        codes = np.arange(1 << width, dtype=_UINT[max(8, width)])
        return codes.view(et.numpy_dtype)
    if et.is_signed_integral:
        return np.arange(-(1 << (width - 1)), 1 << (width - 1)).astype(et.numpy_dtype)
    return np.arange(1 << width).astype(et.numpy_dtype)


def finite_values(et: E) -> np.ndarray:
    """The sorted distinct finite values of a float type of at most 16 bits, as float64."""
    with np.errstate(all="ignore"):
        values = all_patterns(et).astype(np.float64)
    return np.unique(values[np.isfinite(values)])


def midpoints(values: np.ndarray) -> np.ndarray:
    return (values[:-1] + values[1:]) / 2  # exact in float64 for these formats


def integer_edges() -> list[int]:
    edges: list[int] = []
    for et in ALL_TYPES:
        if et.is_integral:
            w = et.bit_width
            lo, hi = (
                (-(1 << (w - 1)), (1 << (w - 1)) - 1)
                if et.is_signed_integral
                else (0, (1 << w) - 1)
            )
            edges += [lo - 1, lo, lo + 1, hi - 1, hi, hi + 1]
    return edges


def float_pool(et: E, rng: np.random.Generator) -> np.ndarray:
    """Edge values of the wide float ``et`` (f32 or f64)."""
    dtype = et.numpy_dtype
    info = np.finfo(dtype)
    specials = [0.0, -0.0, np.inf, -np.inf, np.nan, -np.nan, info.max, -info.max, info.tiny,
                -info.tiny, info.smallest_subnormal, -info.smallest_subnormal,
                info.tiny - info.smallest_subnormal, 1.0, -1.0, 0.5, -0.5, 0.25, 0.75, 1.5,
                -1.5, 2.5, -2.5, 0.9999, -0.9999, 7.5, 6.5, -6.5]  # fmt: skip
    base = [np.array(specials)]
    for target in SMALL_FLOATS:
        values = finite_values(target)
        if et is E.F32 and target in (E.F16, E.BF16):
            values = values[rng.choice(len(values), 4000, replace=False)]
            values = np.unique(np.concatenate([values, finite_values(target)[[0, 1, -2, -1]]]))
        base += [values, midpoints(values)]
    edges = np.array(integer_edges(), dtype=object)
    base.append(np.array([float(v) for v in edges]))
    base.append(np.array([float(v) + d for v in edges for d in (0.5, -0.5)]))
    with np.errstate(all="ignore"):
        pool = np.concatenate(base).astype(dtype)
        # The exact neighbours one ulp away (the double-rounding traps for f64).
        up = np.nextafter(pool, dtype.type(np.inf))
        down = np.nextafter(pool, dtype.type(-np.inf))
    width = dtype.itemsize * 8
    random_bits = rng.integers(0, 1 << 63, 6000, dtype=np.uint64, endpoint=True)
    random_bits = (random_bits >> np.uint64(64 - width)).astype(_UINT[width]).view(dtype)
    # Values around 1 and the integer bounds with small random offsets.
    scaled = (rng.standard_normal(3000) * 10.0 ** rng.integers(-3, 20, 3000)).astype(dtype)
    parts = [pool, up, down, random_bits, scaled]
    if et is E.F64:  # f32's rounding midpoints in f64, and one ulp around them
        f32s = rng.integers(0, 0x7F7FFFFF, 3000, dtype=np.uint32).view(np.float32)
        mids = (f32s.astype(np.float64) + np.nextafter(f32s, np.float32(np.inf))) / 2
        mids = np.concatenate([mids, -mids])
        parts += [mids, np.nextafter(mids, np.inf), np.nextafter(mids, -np.inf)]
    return np.concatenate(parts).astype(dtype)


def integer_pool(et: E, rng: np.random.Generator) -> np.ndarray:
    """Edge values of a 32/64-bit integer type."""
    w = et.bit_width
    signed = et.is_signed_integral
    lo, hi = (-(1 << (w - 1)), (1 << (w - 1)) - 1) if signed else (0, (1 << w) - 1)
    values = {0, 1, 2, 3, lo, lo + 1, hi, hi - 1, -1, -2}
    for k in range(1, w + 1):
        for d in (-3, -1, 0, 1, 3):
            values |= {(1 << k) + d, -(1 << k) + d}
        # Rounding midpoints of f32 (24 bits), bf16 (8) and f16 (11) at this magnitude.
        for bits in (24, 11, 8):
            if k > bits:
                half = 1 << (k - bits - 1)
                for d in (-1, 0, 1):
                    values |= {(1 << k) + half + d, (1 << k) + 3 * half + d}
                    values |= {-((1 << k) + half + d)}
    values |= {
        int(v)
        for v in rng.integers(lo, hi, 4000, endpoint=True, dtype=np.int64 if signed else np.uint64)
    }
    for shift in range(0, w, 3):
        values |= {
            int(v) >> shift
            for v in rng.integers(
                lo, hi, 50, endpoint=True, dtype=np.int64 if signed else np.uint64
            )
        }
    kept = sorted(v for v in values if lo <= v <= hi)
    return np.array(kept, dtype=object).astype(et.numpy_dtype)


def source_values(src: E) -> np.ndarray:
    rng = np.random.default_rng(1234 + ALL_TYPES.index(src))
    if src.bit_width <= 16:
        return all_patterns(src)
    if src in (E.F32, E.F64):
        return float_pool(src, rng)
    if src.is_integral:
        return integer_pool(src, rng)
    component = src.component_type
    real = float_pool(component, rng)
    real = real[rng.choice(len(real), min(len(real), 60_000), replace=False)]  # time
    imag = rng.permutation(real)
    out = np.empty(len(real), dtype=src.numpy_dtype)
    out.real, out.imag = real, imag
    return out


def conversion_module(src: E, n: int, targets: list[E]) -> str:
    lines = [f"  p0 = {src.value}[{n}] parameter(0)"]
    for k, dst in enumerate(targets):
        lines.append(f"  c{k} = {dst.value}[{n}] convert(p0)")
    shapes = ", ".join(f"{dst.value}[{n}]" for dst in targets)
    names = ", ".join(f"c{k}" for k in range(len(targets)))
    lines.append(f"  ROOT t = ({shapes}) tuple({names})")
    return "fused_convert {\n" + "\n".join(lines) + "\n}\n"


def target_groups(src: E) -> list[list[E]]:
    """One module for all targets, except that f64 -> f16 goes alone.

    The host JIT refuses any module whose LLVM IR has both an ``fptrunc
    double`` and a `` to half`` (its guard against ``__truncdfhf2``), and
    f64 -> f32 needs the former while any f16 result needs the latter. Our
    f64 -> f16 is integer code, so alone it passes the guard.
    """
    if src.component_type is not E.F64:
        return [ALL_TYPES]
    return [[t for t in ALL_TYPES if t is not E.F16], [E.F16]]


def assert_same(got: np.ndarray, want: np.ndarray, et: E, inputs: np.ndarray, what: str) -> None:
    """Bitwise equality; any NaN passes where the evaluator's f16..f64 result is NaN."""
    if et.is_complex:
        assert_same(got.real, want.real, et.component_type, inputs, what + " (real)")
        assert_same(got.imag, want.imag, et.component_type, inputs, what + " (imag)")
        return
    assert got.dtype == want.dtype, what
    if et.is_floating:
        got_bits, want_bits = fs.float_bits(got, et), fs.float_bits(want, et)
        same = got_bits == want_bits
        if et in WIDE_NATIVE:
            with np.errstate(invalid="ignore"):
                nan = np.isnan(want.astype(np.float64))
                same |= nan & np.isnan(got.astype(np.float64))
    else:
        same = got == want
    bad = np.nonzero(~same)[0]
    if len(bad):
        rows = [f"{inputs[i]!r} -> {got[i]!r}, want {want[i]!r}" for i in bad[:8]]
        raise AssertionError(f"{what}: {len(bad)} of {len(same)} differ:\n" + "\n".join(rows))


@pytest.mark.parametrize("src", ALL_TYPES, ids=lambda t: t.value)
def test_convert_to_every_type(src: E) -> None:
    values = source_values(src)
    checked = set()
    for targets in target_groups(src):
        text = conversion_module(src, len(values), targets)
        got = run_hlo(text, [values])
        want = evaluate_module(parse_module(text), [values])
        assert len(got) == len(want) == len(targets)
        for dst, g, w in zip(targets, got, want, strict=True):
            assert_same(g, np.asarray(w), dst, values, f"{src.value} -> {dst.value}")
            checked.add(dst)
    assert checked == set(ALL_TYPES)


def test_pools_cover_the_edges() -> None:
    """The wide pools really hold the cases the module docstring promises."""
    f64 = source_values(E.F64)
    assert np.isnan(f64).any() and np.isinf(f64).any() and (f64 == 0).any()
    assert (np.abs(f64) == np.finfo(np.float64).smallest_subnormal).any()
    # A f16 midpoint just above the tie: f64 -> f32 -> f16 would round it to even.
    tie = (1.0 + (1.0 + 2.0**-10)) / 2
    assert (f64 == np.nextafter(tie, np.inf)).any()
    s64 = source_values(E.S64)
    assert {np.iinfo(np.int64).min, np.iinfo(np.int64).max, (1 << 24) + 1} <= set(s64.tolist())


def test_f64_to_f16_rounds_once() -> None:
    """The double-rounding traps give the single-rounded result (numpy rounds f64 -> f16 once)."""
    ties = midpoints(finite_values(E.F16))
    ties = ties[np.abs(ties) < 65504]
    values = np.concatenate([np.nextafter(ties, np.inf), np.nextafter(ties, -np.inf), ties])
    text = (
        f"fused_convert {{\n  p0 = f64[{len(values)}] parameter(0)\n"
        f"  ROOT c = f16[{len(values)}] convert(p0)\n}}\n"
    )
    (got,) = run_hlo(text, [values])
    assert np.array_equal(got.view(np.uint16), values.astype(np.float16).view(np.uint16))
    via_f32 = values.astype(np.float32).astype(np.float16)
    assert not np.array_equal(got.view(np.uint16), via_f32.view(np.uint16))  # the trap is real
