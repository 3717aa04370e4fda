"""fp8 and f4 <-> f32, exhaustively where the space allows, against ml_dtypes/the evaluator.

Every bit pattern of every fp8 format and of f4e2m1fn widens to f32 exactly
(NaN encodings included, as ml_dtypes widens them). Narrowing f32 is checked
on every value of the format, every midpoint between consecutive values
(the ties of round-to-nearest-even), the f32 values one ulp on either side of
each midpoint, the overflow thresholds, and 100k random f32 bit patterns.
The public helpers ``to_f32``/``from_f32`` are exercised directly too.
"""

from __future__ import annotations

import numpy as np
import pytest
from heron_test_support.elemental_jit import run_hlo
from heron_test_support.host_jit import run_elementwise

from heron.emitters.elemental.conv_small_float import FORMATS
from heron.emitters.elemental.conversions import from_f32, to_f32
from heron.hlo import evaluate_module, parse_module
from heron.hlo.element_types import ElementType as E
from heron.hlo.evaluator import float_semantics as fs

SMALL = list(FORMATS)


def patterns(et: E) -> np.ndarray:
    return np.arange(1 << et.bit_width, dtype=np.uint8).view(et.numpy_dtype)


def convert_text(src: E, dst: E, n: int) -> str:
    return (
        f"fused_convert {{\n  p0 = {src.value}[{n}] parameter(0)\n"
        f"  ROOT c = {dst.value}[{n}] convert(p0)\n}}\n"
    )


@pytest.mark.parametrize("et", SMALL, ids=lambda t: t.value)
def test_every_pattern_widens_exactly(et: E) -> None:
    values = patterns(et)
    (got,) = run_hlo(convert_text(et, E.F32, len(values)), [values])
    want = values.astype(np.float32)  # ml_dtypes: exact, NaN with its sign
    assert np.array_equal(got.view(np.uint32), want.view(np.uint32))


def f32_probes(et: E, rng: np.random.Generator) -> np.ndarray:
    with np.errstate(all="ignore"):
        finite = np.unique(patterns(et).astype(np.float64))
    finite = finite[np.isfinite(finite)]
    mids = ((finite[:-1] + finite[1:]) / 2).astype(np.float32)  # exact: few significant bits
    top = finite[-1]
    step = top - finite[-2]
    with np.errstate(over="ignore"):
        overflow = np.array([top + step / 2, top + step, 2 * top, 3.4e38], dtype=np.float32)
    edges = np.concatenate([finite.astype(np.float32), mids, overflow, -overflow])
    edges = np.concatenate([edges, [np.inf, -np.inf, np.nan, -np.nan, 0.0, -0.0]])
    edges = edges.astype(np.float32)
    up = np.nextafter(edges, np.float32(np.inf))
    down = np.nextafter(edges, np.float32(-np.inf))
    random = rng.integers(0, 1 << 32, 100_000, dtype=np.uint64).astype(np.uint32)
    nan_payloads = np.array([0x7F800001, 0xFF800001, 0x7FBFFFFF, 0xFFC00001], dtype=np.uint32)
    return np.concatenate([edges, up, down, random.view(np.float32), nan_payloads.view(np.float32)])


@pytest.mark.parametrize("et", SMALL, ids=lambda t: t.value)
def test_f32_narrows_like_the_evaluator(et: E) -> None:
    values = f32_probes(et, np.random.default_rng(7 + SMALL.index(et)))
    text = convert_text(E.F32, et, len(values))
    (got,) = run_hlo(text, [values])
    want = evaluate_module(parse_module(text), [values])
    got_bits, want_bits = fs.float_bits(got, et), fs.float_bits(np.asarray(want), et)
    bad = np.nonzero(got_bits != want_bits)[0]
    assert not len(bad), [(values[i], hex(got_bits[i]), hex(want_bits[i])) for i in bad[:8]]
    # The evaluator is ml_dtypes (plus XLA's NaN -> -0 for f4e2m1fn, and XLA's rule for
    # f32 subnormals to f8e8m0fnu, where ml_dtypes 0.6 and 0.7 differ): check that
    # directly too.
    with np.errstate(all="ignore"):
        direct = fs.float_bits(values.astype(et.numpy_dtype), et)
    keep = ~np.isnan(values) if et is E.F4E2M1FN else np.ones(len(values), bool)
    if et is E.F8E8M0FNU:
        bits = values.view(np.uint32)
        keep &= ~((bits > 0) & (bits <= 0x007FFFFF))
    assert np.array_equal(got_bits[keep], direct[keep])


@pytest.mark.parametrize("et", [*SMALL, E.F16, E.BF16, E.F32, E.F64, E.S8, E.U4, E.S64, E.PRED])
def test_helpers_round_trip(et: E) -> None:
    """from_f32(to_f32(x)) is x for every value of the small types (and a few others)."""
    if et.bit_width <= 16 and et.is_floating:
        width = et.bit_width
        values = np.arange(1 << width, dtype=np.uint16 if width > 8 else np.uint8)
        values = values.view(et.numpy_dtype)
    elif et is E.PRED:
        values = np.array([True, False])
    elif et.is_integral:
        info = np.iinfo(et.numpy_dtype) if et.bit_width >= 8 else None
        lo, hi = (info.min, info.max) if info else (0, 15)
        values = np.array([lo, hi, 0, 1, 7], dtype=et.numpy_dtype)
    else:
        values = np.array(
            [0.0, -0.0, 1.5, -2.25, np.inf, -np.inf, 2.0**-100, 65504], et.numpy_dtype
        )
    (f32,) = run_elementwise(lambda a: [to_f32(a[0], et)], [et], [E.F32], [values])
    with np.errstate(all="ignore"):
        want = values.astype(np.float64).astype(np.float32)
    assert np.array_equal(f32, want, equal_nan=True)
    (back,) = run_elementwise(lambda a: [from_f32(to_f32(a[0], et), et)], [et], [et], [values])
    if et.is_floating:
        same = fs.float_bits(back, et) == fs.float_bits(values, et)
        with np.errstate(invalid="ignore"):
            same |= np.isnan(values.astype(np.float64)) & np.isnan(back.astype(np.float64))
        assert same.all()
    elif et is E.S64:  # s64 rounds through f32: only the exactly representable survive
        assert back[2] == 0 and back[3] == 1 and back[1] == np.iinfo(np.int64).max
    else:
        assert np.array_equal(back, values)
