"""Complex arithmetic, math functions, compare and complex/real/imag vs the reference evaluator.

The complex lowerings (``heron.emitters.elemental.complex_ops``, reached
through the shared opcodes of ``float_ops``) run on the host, where the
complex dialect is lowered by upstream convert-complex-to-standard, and are
compared with ``heron.hlo.evaluate_module``, which evaluates in complex128
and rounds per component. Exact ops (add, subtract, negate, complex, real,
imag, compare) must match bit for bit; the others within the evaluator's
documented tolerance: a relative error of 2^-17 (c64) / 2^-45 (c128) of
max(|z|, 1), atan2 2^-13 / 2^-43, power and cbrt 16 times that. Random
inputs stay off the branch cuts (both components at least 0.05 from zero).
"""

from __future__ import annotations

import numpy as np
import pytest
from heron_test_support.elemental_cases import rng_for, run_both
from heron_test_support.elemental_jit import run_hlo

from heron.hlo import UnsupportedError
from heron.hlo.element_types import ElementType as E

COMPLEX = [E.C64, E.C128]

UNARY = [
    "negate",
    "sign",
    "exponential",
    "exponential-minus-one",
    "log",
    "log-plus-one",
    "logistic",
    "sqrt",
    "rsqrt",
    "cbrt",
    "tanh",
    "sine",
    "cosine",
    "tan",
    "acos",
    "acosh",
    "asin",
    "asinh",
    "atanh",
    "cosh",
    "sinh",
]
BINARY = ["add", "subtract", "multiply", "divide", "power", "atan2"]
EXACT = {"negate", "add", "subtract"}

#: Relative tolerance (of max(|want|, 1)) per complex type, and the ops that get more.
TOLERANCE = {E.C64: 2.0**-17, E.C128: 2.0**-45}
LOOSER = {"atan2": 16.0, "power": 16.0, "cbrt": 16.0}


def hlo(root: str, params: list[tuple[E, int]], result: str) -> str:
    lines = [f"  %p{k} = {et.value}[{n}] parameter({k})" for k, (et, n) in enumerate(params)]
    signature = ", ".join(f"p{k}: {et.value}[{n}]" for k, (et, n) in enumerate(params))
    body = "\n".join(lines)
    return f"%f ({signature}) -> {result} {{\n{body}\n  ROOT %r = {result} {root}\n}}\n"


def off_cuts(et: E, n: int, rng: np.random.Generator, scale: float = 3.0) -> np.ndarray:
    """Random complex values whose components are at least 0.05 away from zero."""
    parts = []
    for _ in range(2):
        magnitude = rng.uniform(0.05, scale, n)
        parts.append(magnitude * rng.choice([-1.0, 1.0], n))
    return (parts[0] + 1j * parts[1]).astype(et.numpy_dtype)


def specials(et: E) -> np.ndarray:
    """Zeros, units, infinities and NaN in both components (for the exact ops)."""
    values = [0.0, -0.0, 1.0, -2.5, np.inf, -np.inf, np.nan, 1e-40]
    grid = [complex(a, b) for a in values for b in values]
    return np.array(grid, dtype=et.numpy_dtype)


def assert_close(got, want, et: E, op: str, inputs) -> None:
    got, want = np.asarray(got), np.asarray(want)
    assert got.dtype == want.dtype
    if op in EXACT:
        for part in (np.real, np.imag):
            g, w = part(got), part(want)
            same = (g == w) & (np.signbit(g) == np.signbit(w)) | (np.isnan(g) & np.isnan(w))
            bad = np.flatnonzero(~same)
            assert bad.size == 0, [(tuple(x[i] for x in inputs), got[i], want[i]) for i in bad[:6]]
        return
    tolerance = TOLERANCE[et] * LOOSER.get(op, 1.0)
    scale = np.maximum(np.abs(want.astype(np.complex128)), 1.0)
    error = np.abs(got.astype(np.complex128) - want.astype(np.complex128))
    limit = tolerance * scale
    bad = np.flatnonzero(~(error <= limit))
    assert bad.size == 0, (
        f"{op} {et.value}: {bad.size} mismatches",
        [(tuple(x[i] for x in inputs), got[i], want[i]) for i in bad[:6]],
    )


@pytest.mark.parametrize("et", COMPLEX, ids=lambda e: e.value)
@pytest.mark.parametrize("op", UNARY)
def test_unary(op: str, et: E):
    x = off_cuts(et, 300, rng_for(op, et))
    if op in EXACT:
        x = np.concatenate([specials(et), x])
    text = hlo(f"{op}(%p0)", [(et, x.size)], f"{et.value}[{x.size}]")
    (got,), (want,) = run_both(text, [x])
    assert_close(got, want, et, op, [x])


@pytest.mark.parametrize("et", COMPLEX, ids=lambda e: e.value)
@pytest.mark.parametrize("op", BINARY)
def test_binary(op: str, et: E):
    rng = rng_for(op, et)
    a, b = off_cuts(et, 300, rng), off_cuts(et, 300, rng)
    if op == "power":  # the zero-base special cases
        zero = np.zeros(4, et.numpy_dtype)
        a = np.concatenate([zero, off_cuts(et, 300, rng, scale=2.0)])
        b = np.concatenate([np.array([0, 2, 0.5, 1 + 0j], et.numpy_dtype), b / 2])
    if op in EXACT:
        s = specials(et)
        a = np.concatenate([np.repeat(s, s.size), a])
        b = np.concatenate([np.tile(s, s.size), b])
    text = hlo(f"{op}(%p0, %p1)", [(et, a.size), (et, b.size)], f"{et.value}[{a.size}]")
    (got,), (want,) = run_both(text, [a, b])
    assert_close(got, want, et, op, [a, b])


def test_power_of_zero_base():
    a = np.zeros(3, np.complex64)
    b = np.array([0, 2, 0.5], np.complex64)
    (got,) = run_hlo(hlo("power(%p0, %p1)", [(E.C64, 3), (E.C64, 3)], "c64[3]"), [a, b])
    np.testing.assert_array_equal(got, np.array([1, 0, 0], np.complex64))


@pytest.mark.parametrize("et", COMPLEX, ids=lambda e: e.value)
def test_power_keeps_upstreams_special_cases(et: E):
    # MLIR's convert-complex-to-standard, which XLA lowers complex power with, and
    # XLA:CPU: x^0 = 1 and 1^y = 1 whatever the other (NaN too), inf^c = inf for real
    # c > 0 and 0 for real c < 0. heron's kernels and evaluator gave NaN for each
    # (a helper's sweep 9).
    inf, nan = np.inf, np.nan
    a = np.array([inf, inf, nan, inf, 1, 1, inf, complex(nan, nan), 2 + 1j], et.numpy_dtype)
    b = np.array(
        [0.5, -0.5, 0, 0, complex(inf, 1), complex(nan, nan), 2, complex(0, 0), 2],
        et.numpy_dtype,
    )
    want = np.array([inf, 0, 1, 1, 1, 1, inf, 1, 3 + 4j], et.numpy_dtype)
    text = hlo("power(%p0, %p1)", [(et, a.size), (et, a.size)], f"{et.value}[{a.size}]")
    (got,), (evaluated,) = run_both(text, [a, b])
    for values in (got, evaluated):
        np.testing.assert_array_equal(values[:-1], want[:-1])
        np.testing.assert_allclose(values[-1], want[-1], rtol=TOLERANCE[et])


@pytest.mark.parametrize("op", ["power", "cbrt"])
def test_power_of_bases_whose_square_leaves_the_component_range(op: str):
    # |z|^2 in f32 overflows from |z| of 1.8e19 and vanishes under 1e-19: sqrt as a
    # power was NaN at 1e20 + 1e20i and 0 at 1e-30 (a helper's sweep); the exact
    # values are far from either limit.
    a = np.array(
        [1e20 + 1e20j, 3e19, 2e19 - 1e19j, 1e-25 + 1e-25j, 1e-30, -4e-30j, 1e30 - 1e-30j, 2.5],
        np.complex64,
    )
    if op == "power":
        b = np.full(a.size, 0.5 + 0j, np.complex64)
        text = hlo("power(%p0, %p1)", [(E.C64, a.size), (E.C64, a.size)], f"c64[{a.size}]")
        arguments = [a, b]
        exact = a.astype(np.complex128) ** 0.5
    else:
        text = hlo("cbrt(%p0)", [(E.C64, a.size)], f"c64[{a.size}]")
        arguments = [a]
        exact = a.astype(np.complex128) ** (1 / 3)
    (got,) = run_hlo(text, arguments)
    assert np.all(np.isfinite(got)) and np.all(got != 0)
    np.testing.assert_allclose(got, exact, rtol=2.0**-20)


@pytest.mark.parametrize("et", COMPLEX, ids=lambda e: e.value)
def test_abs_is_real(et: E):
    x = np.concatenate([off_cuts(et, 200, rng_for("abs", et)), np.array([3 + 4j, 0, -0.0])])
    x = x.astype(et.numpy_dtype)
    part = et.component_type
    text = hlo("abs(%p0)", [(et, x.size)], f"{part.value}[{x.size}]")
    (got,), (want,) = run_both(text, [x])
    assert got.dtype == part.numpy_dtype
    np.testing.assert_allclose(got, want, rtol=TOLERANCE[et], atol=0)
    assert got[-3] == 5.0 and got[-1] == 0.0


@pytest.mark.parametrize("et", COMPLEX, ids=lambda e: e.value)
def test_compare_eq_ne(et: E):
    s = specials(et)
    a, b = np.repeat(s, s.size), np.tile(s, s.size)
    for direction in ("EQ", "NE"):
        root = f"compare(%p0, %p1), direction={direction}"
        text = hlo(root, [(et, a.size), (et, b.size)], f"pred[{a.size}]")
        (got,), (want,) = run_both(text, [a, b])
        np.testing.assert_array_equal(got, want)
    assert want.sum() > s.size  # NE: NaN pairs and different values


def test_compare_order_on_complex_is_unsupported():
    text = hlo("compare(%p0, %p1), direction=LT", [(E.C64, 2), (E.C64, 2)], "pred[2]")
    z = np.zeros(2, np.complex64)
    with pytest.raises(UnsupportedError, match="EQ and NE"):
        run_hlo(text, [z, z])


@pytest.mark.parametrize("op", ["floor", "remainder", "erf", "maximum"])
def test_real_only_ops_on_complex_are_unsupported(op: str):
    binary = op in ("remainder", "maximum")
    params = [(E.C64, 2)] * (2 if binary else 1)
    operands = "%p0, %p1" if binary else "%p0"
    text = hlo(f"{op}({operands})", params, "c64[2]")
    z = np.zeros(2, np.complex64)
    with pytest.raises(UnsupportedError, match=op):
        run_hlo(text, [z] * len(params))


@pytest.mark.parametrize("et", COMPLEX, ids=lambda e: e.value)
def test_complex_real_imag(et: E):
    part = et.component_type
    values = np.array([0.0, -0.0, 1.5, -np.inf, np.nan, 1e-40, -3.0], part.numpy_dtype)
    re, im = np.repeat(values, values.size), np.tile(values, values.size)
    n = re.size
    text = hlo("complex(%p0, %p1)", [(part, n), (part, n)], f"{et.value}[{n}]")
    (z,), (want,) = run_both(text, [re, im])
    np.testing.assert_array_equal(z.view(part.numpy_dtype), want.view(part.numpy_dtype))
    for op, expected in (("real", re), ("imag", im)):
        (got,), (want,) = run_both(hlo(f"{op}(%p0)", [(et, n)], f"{part.value}[{n}]"), [z])
        np.testing.assert_array_equal(got, want)
        np.testing.assert_array_equal(np.signbit(got), np.signbit(expected))


@pytest.mark.parametrize("et", [E.F16, E.BF16, E.F32, E.F64, E.F8E4M3FN, E.F8E8M0FNU, E.F4E2M1FN])
def test_real_imag_of_real_floats(et: E):
    x = np.arange(16, dtype=np.uint8).view(et.numpy_dtype) if et.bit_width <= 8 else None
    if x is None:
        x = np.array([0.0, -0.0, 1.5, -np.inf, np.nan, -3.0], et.numpy_dtype)
    for op in ("real", "imag"):
        text = hlo(f"{op}(%p0)", [(et, x.size)], f"{et.value}[{x.size}]")
        (got,), (want,) = run_both(text, [x])
        width = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}[got.dtype.itemsize]
        np.testing.assert_array_equal(got.view(width), want.view(width))


def test_select_and_arithmetic_compose():
    """select on complex values feeding a complex multiply: components stay paired."""
    n = 4
    text = (
        f"%f (p: pred[{n}], a: c64[{n}], b: c64[{n}]) -> c64[{n}] {{\n"
        f"  %p = pred[{n}] parameter(0)\n"
        f"  %a = c64[{n}] parameter(1)\n"
        f"  %b = c64[{n}] parameter(2)\n"
        f"  %s = c64[{n}] select(%p, %a, %b)\n"
        f"  ROOT %m = c64[{n}] multiply(%s, %a)\n"
        "}\n"
    )
    p = np.array([True, False, True, False])
    a = np.array([1 + 2j, 3 - 1j, -2j, 0.5], np.complex64)
    b = np.array([5j, 2 + 2j, 1, -1], np.complex64)
    (got,), (want,) = run_both(text, [p, a, b])
    np.testing.assert_allclose(got, want, rtol=1e-6)
    np.testing.assert_allclose(got, np.where(p, a, b) * a, rtol=1e-6)


#: Parts of the special-value grid: signed zeros, units, values whose exponentials or
#: squares overflow f32 (50, 89, 100, 3e38), a tiny one, infinities and NaN.
EDGE_PARTS = [0.0, -0.0, 1.0, -1.0, -2.5, 0.3, 50.0, 89.0, -100.0, 3e38, 1e-30]
EDGE_PARTS += [np.inf, -np.inf, np.nan]
#: heron's own compositions through complex log and sqrt, which the evaluator defines by
#: numpy's principal branches (C99's special values): no XLA opcode has them (XLA expands
#: them from CHLO before its kernels see them).
COMPOSED = {"acos", "acosh", "asin", "asinh", "atanh", "cosh", "sinh", "cbrt"}


def _agree_at_edges(got: np.ndarray, want: np.ndarray) -> np.ndarray:
    """Per element: each part the same infinity or both NaN, and finite parts within
    2^-17 of the larger finite part's magnitude (or 1)."""
    g, w = got.astype(np.complex128), want.astype(np.complex128)
    finite_parts = [np.where(np.isfinite(p), np.abs(p), 0) for p in (w.real, w.imag)]
    scale = np.maximum(np.maximum(*finite_parts), 1.0)
    same = np.ones(g.shape, np.bool_)
    for a, b in ((g.real, w.real), (g.imag, w.imag)):
        with np.errstate(invalid="ignore"):
            close = np.isfinite(a) & np.isfinite(b) & (np.abs(a - b) <= 2.0**-17 * scale)
        same &= (a == b) | (np.isnan(a) & np.isnan(b)) | close
    return same


@pytest.mark.parametrize("op", sorted(set(UNARY) - COMPOSED - EXACT))
def test_unary_at_infinities_nan_and_overflow_is_the_evaluator_s(op: str):
    """heron run --check compares kernels with the evaluator, so where a part is
    infinite or NaN, or overflows f32 on the way, the two must say the same: a sweep of
    jax.numpy found ``tanh(0 + inf i)``, ``expm1(inf + 0i)`` and nine more ops where the
    evaluator gave C99's values and the kernels (and XLA) their formulas'."""
    z = np.array([complex(a, b) for a in EDGE_PARTS for b in EDGE_PARTS], np.complex64)
    text = hlo(f"{op}(%p0)", [(E.C64, z.size)], f"c64[{z.size}]")
    (got,), (want,) = run_both(text, [z])
    bad = np.flatnonzero(~_agree_at_edges(got, want))
    assert bad.size == 0, [(z[i], got[i], want[i]) for i in bad[:6]]


def test_products_past_f32_are_the_evaluator_s():
    """(inf + 3e38 i)^2 is ``nan + inf i`` in a kernel (3e38^2 overflows f32 before the
    subtraction), ``inf + inf i`` in complex128: the evaluator now says the kernel's."""
    parts = [complex(a, b) for a in EDGE_PARTS for b in EDGE_PARTS]
    z = np.array([p for p in parts for _ in parts], np.complex64)
    w = np.array([q for _ in parts for q in parts], np.complex64)
    text = hlo("multiply(%p0, %p1)", [(E.C64, z.size), (E.C64, z.size)], f"c64[{z.size}]")
    (got,), (want,) = run_both(text, [z, w])
    bad = np.flatnonzero(~_agree_at_edges(got, want))
    assert bad.size == 0, [(z[i], w[i], got[i], want[i]) for i in bad[:6]]


def test_square_roots_of_negative_numbers_are_imaginary():
    """Upstream's formula multiplies ``|z|^(1/2)`` by the f32 cosine of half of pi,
    -4.4e-8: ``sqrt(-2.5 - 0i)`` was ``-6.9e-8 - 1.58i``, and acosh, computed through
    it, took ``acosh(-2.5 - 0i)`` to the other side of its branch cut."""
    z = np.array([-2.5 - 0j, complex(-2.5, 0.0), -1e30 + 0j, -4 - 0j, 2 + 0j], np.complex64)
    text = hlo("sqrt(%p0)", [(E.C64, z.size)], f"c64[{z.size}]")
    (got,), (want,) = run_both(text, [z])
    assert got.real[:4].tolist() == [0.0] * 4 and not np.signbit(got.real[:4]).any()
    np.testing.assert_array_equal(np.signbit(got.imag), np.signbit(want.imag))
    np.testing.assert_allclose(got, want, rtol=2**-22)


def test_log1p_of_minus_one_is_minus_infinity():
    """Upstream's log1p computes the modulus of ``1 + z`` as ``max * sqrt(1 + (min /
    max)^2)``: ``0 * NaN`` at ``z = -1``, where it falls back to ``min``, 0, and gave
    ``log1p(-1 + 0i) = 0`` (XLA:CPU and numpy: ``-inf``), so ``atanh(1)`` was 0.35."""
    z = np.array([-1 + 0j, complex(-1, -0.0), 1 + 0j, -0.5 + 0j], np.complex64)
    for op, infinite in (("log-plus-one", [0, 1]), ("atanh", [0, 1, 2])):
        text = hlo(f"{op}(%p0)", [(E.C64, z.size)], f"c64[{z.size}]")
        (got,), (want,) = run_both(text, [z])
        assert np.isinf(got.real[infinite]).all(), (op, got)
        np.testing.assert_array_equal(got.real[infinite], want.real[infinite])
        assert np.isfinite(got.real[3])
