"""Elementwise ops: heron's evaluator against XLA:CPU on random instances.

Every case draws a dtype, a shape and a seed; inputs mix ordinary values with
the awkward ones (NaN, infinities, signed zeros, integer extremes), because
that is where evaluators go wrong.
"""

from __future__ import annotations

import attrs
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from jax import lax
from oracle_harness import EXACT, Tolerance, random_array, run_oracle

FLOATS = ["float32", "float16", "bfloat16", "float64"]
SIGNED = ["int8", "int16", "int32", "int64"]
UNSIGNED = ["uint8", "uint16", "uint32", "uint64"]
INTS = SIGNED + UNSIGNED
COMPLEX = ["complex64", "complex128"]

#: Few-ulp bound for ops XLA:CPU computes with its own approximations.
APPROX = Tolerance(ulps=4, atol=1e-6)


@attrs.frozen
class Case:
    name: str
    fn: object
    arity: int
    dtypes: tuple[str, ...]
    tol: Tolerance = EXACT
    low: float = -4.0
    high: float = 4.0


def _cases() -> list[Case]:
    return [
        Case("add", lax.add, 2, (*FLOATS, *INTS, *COMPLEX)),
        Case("subtract", lax.sub, 2, (*FLOATS, *INTS)),
        Case("multiply", lax.mul, 2, (*FLOATS, *INTS, *COMPLEX)),
        Case("divide", lax.div, 2, (*FLOATS, *INTS)),
        Case("remainder", lax.rem, 2, (*FLOATS, *INTS)),
        Case("maximum", lax.max, 2, (*FLOATS, *INTS)),
        Case("minimum", lax.min, 2, (*FLOATS, *INTS)),
        Case("power", lax.pow, 2, ("float32", "float64"), APPROX, 0.0, 3.0),
        Case("atan2", lax.atan2, 2, ("float32", "float64"), APPROX),
        Case("and", lax.bitwise_and, 2, ("bool", *INTS)),
        Case("or", lax.bitwise_or, 2, ("bool", *INTS)),
        Case("xor", lax.bitwise_xor, 2, ("bool", *INTS)),
        Case("shift-left", lax.shift_left, 2, tuple(INTS)),
        Case("shift-right-arithmetic", lax.shift_right_arithmetic, 2, tuple(INTS)),
        Case("shift-right-logical", lax.shift_right_logical, 2, tuple(INTS)),
        Case("mulhi", lax.mulhi, 2, tuple(INTS)),
        Case("negate", lax.neg, 1, (*FLOATS, *INTS, *COMPLEX)),
        Case("abs", lax.abs, 1, (*FLOATS, *SIGNED, *COMPLEX), APPROX),
        Case("sign", lax.sign, 1, (*FLOATS, *SIGNED)),
        Case("floor", lax.floor, 1, tuple(FLOATS)),
        Case("ceil", lax.ceil, 1, tuple(FLOATS)),
        Case(
            "round-nearest-afz",
            lambda x: lax.round(x, lax.RoundingMethod.AWAY_FROM_ZERO),
            1,
            tuple(FLOATS),
        ),
        Case(
            "round-nearest-even",
            lambda x: lax.round(x, lax.RoundingMethod.TO_NEAREST_EVEN),
            1,
            tuple(FLOATS),
        ),
        Case("is-finite", lax.is_finite, 1, tuple(FLOATS)),
        Case("not", lax.bitwise_not, 1, ("bool", *INTS)),
        Case("popcnt", lax.population_count, 1, tuple(INTS)),
        Case("count-leading-zeros", lax.clz, 1, tuple(INTS)),
        Case("exponential", lax.exp, 1, tuple(FLOATS), APPROX),
        Case("exponential-minus-one", lax.expm1, 1, tuple(FLOATS), APPROX),
        Case("log", lax.log, 1, tuple(FLOATS), APPROX, 0.0, 8.0),
        Case("log-plus-one", lax.log1p, 1, tuple(FLOATS), APPROX, -0.9, 4.0),
        Case("logistic", lax.logistic, 1, tuple(FLOATS), APPROX),
        Case("tanh", lax.tanh, 1, tuple(FLOATS), APPROX),
        Case("sine", lax.sin, 1, tuple(FLOATS), APPROX),
        Case("cosine", lax.cos, 1, tuple(FLOATS), APPROX),
        Case("tan", lax.tan, 1, ("float32", "float64"), APPROX, -1.5, 1.5),
        Case("sqrt", lax.sqrt, 1, tuple(FLOATS), APPROX, 0.0, 8.0),
        Case("rsqrt", lax.rsqrt, 1, tuple(FLOATS), APPROX, 0.0, 8.0),
        Case("cbrt", lax.cbrt, 1, ("float32", "float64"), APPROX),
        Case("erf", lax.erf, 1, ("float32", "float64"), APPROX),
        Case("real", lax.real, 1, tuple(COMPLEX)),
        Case("imag", lax.imag, 1, tuple(COMPLEX)),
        Case("complex", lax.complex, 2, ("float32", "float64")),
    ]


CASES = {c.name: c for c in _cases()}

shapes = st.lists(st.integers(1, 5), min_size=0, max_size=3).map(tuple)


def _instance(case: Case, dtype: str, shape: tuple[int, ...], seed: int) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    dt = np.dtype(getattr(ml_dtypes, dtype, None) or dtype)
    args = [random_array(rng, shape, dt, True, case.low, case.high) for _ in range(case.arity)]
    if case.name.startswith("shift"):
        # Shift amounts around and beyond the bit width are the interesting ones.
        bits = dt.itemsize * 8
        amounts = rng.integers(-2, bits + 3, size=shape)
        args[1] = amounts.astype(dt) if dt.kind == "i" else (amounts % (2 * bits)).astype(dt)
    return args


@pytest.mark.parametrize("name", sorted(CASES))
@settings(max_examples=8, deadline=None)
@given(data=st.data())
def test_elementwise_matches_xla(name: str, data: st.DataObject) -> None:
    case = CASES[name]
    dtype = data.draw(st.sampled_from(case.dtypes), label="dtype")
    shape = data.draw(shapes, label="shape")
    seed = data.draw(st.integers(0, 2**31 - 1), label="seed")
    args = _instance(case, dtype, shape, seed)
    tol = APPROX if dtype.startswith("complex") and case.tol == EXACT else case.tol
    run_oracle(case.fn, [jnp.asarray(a) for a in args], tol)


@pytest.mark.parametrize("direction", ["eq", "ne", "lt", "le", "gt", "ge"])
@settings(max_examples=8, deadline=None)
@given(data=st.data())
def test_compare_matches_xla(direction: str, data: st.DataObject) -> None:
    dtype = data.draw(st.sampled_from(FLOATS + INTS + ["bool"]))
    shape = data.draw(shapes)
    rng = np.random.default_rng(data.draw(st.integers(0, 2**31 - 1)))
    dt = np.dtype(getattr(ml_dtypes, dtype, None) or dtype)
    a = random_array(rng, shape, dt)
    # Reuse some of a's values in b so equality is actually exercised.
    b = np.where(rng.random(shape) < 0.3, a, random_array(rng, shape, dt))
    run_oracle(getattr(lax, direction), [jnp.asarray(a), jnp.asarray(b)])


@settings(max_examples=10, deadline=None)
@given(data=st.data())
def test_select_and_clamp_match_xla(data: st.DataObject) -> None:
    dtype = data.draw(st.sampled_from(FLOATS + INTS))
    shape = data.draw(shapes)
    rng = np.random.default_rng(data.draw(st.integers(0, 2**31 - 1)))
    dt = np.dtype(getattr(ml_dtypes, dtype, None) or dtype)
    pred = rng.random(shape) < 0.5
    a, b = random_array(rng, shape, dt, specials=False), random_array(rng, shape, dt)
    run_oracle(lax.select, [jnp.asarray(pred), jnp.asarray(a), jnp.asarray(b)])
    lo = random_array(rng, (), dt, specials=False, low=-2, high=0)
    hi = random_array(rng, (), dt, specials=False, low=0, high=2)
    run_oracle(lax.clamp, [jnp.asarray(lo), jnp.asarray(a), jnp.asarray(hi)])


CONVERT_TYPES = [
    "bool", *FLOATS, *INTS, "complex64",
    "int4", "uint4", "int2", "uint2",
    "float8_e4m3fn", "float8_e5m2", "float8_e4m3fnuz", "float8_e5m2fnuz",
    "float8_e4m3b11fnuz", "float4_e2m1fn",
]  # fmt: skip


def _dtype(name: str) -> np.dtype:
    return np.dtype(getattr(ml_dtypes, name, None) or name)


@settings(max_examples=80, deadline=None)
@given(
    src=st.sampled_from(CONVERT_TYPES),
    dst=st.sampled_from(CONVERT_TYPES),
    shape=shapes,
    seed=st.integers(0, 2**31 - 1),
)
def test_convert_matches_xla(src: str, dst: str, shape: tuple[int, ...], seed: int) -> None:
    if src == "complex64" and dst != "complex64":
        return  # jax refuses complex -> real conversion without an explicit real()
    rng = np.random.default_rng(seed)
    a = random_array(rng, shape, _dtype(src), low=-300, high=300)
    run_oracle(lambda x: lax.convert_element_type(x, _dtype(dst)), [jnp.asarray(a)])


BITCAST_PAIRS = [
    ("float32", "int32"), ("int32", "float32"), ("float32", "uint8"), ("uint8", "float32"),
    ("bfloat16", "int16"), ("float16", "uint16"), ("float64", "int32"), ("int8", "int8"),
    ("float64", "uint64"),
]  # fmt: skip


@pytest.mark.parametrize("src,dst", BITCAST_PAIRS)
@settings(max_examples=4, deadline=None)
@given(
    shape=st.lists(st.integers(1, 4), min_size=1, max_size=2).map(tuple), seed=st.integers(0, 99)
)
def test_bitcast_convert_matches_xla(src: str, dst: str, shape, seed: int) -> None:
    s, d = _dtype(src), _dtype(dst)
    if s.itemsize < d.itemsize:
        shape = (*shape, d.itemsize // s.itemsize)
    a = random_array(np.random.default_rng(seed), shape, s)
    run_oracle(lambda x: lax.bitcast_convert_type(x, d), [jnp.asarray(a)])


@settings(max_examples=15, deadline=None)
@given(
    exponent_bits=st.integers(1, 8),
    mantissa_bits=st.integers(0, 23),
    seed=st.integers(0, 2**31 - 1),
)
def test_reduce_precision_matches_xla(exponent_bits: int, mantissa_bits: int, seed: int) -> None:
    a = random_array(np.random.default_rng(seed), (4, 5), np.float32, low=-1e5, high=1e5)
    run_oracle(lambda x: lax.reduce_precision(x, exponent_bits, mantissa_bits), [jnp.asarray(a)])
