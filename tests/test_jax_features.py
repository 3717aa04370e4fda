"""heron.jax on jax features and library functions real code uses, none of them written for heron.

Each case is a small jax function (control flow under ``vmap``, autodiff transforms,
``jax.random`` samplers, ``jax.nn`` and ``jnp`` library functions, integer and
narrow-float edge cases) run through ``heron.jax.jit`` on the interpreter and
compared with ``jax.jit`` on the CPU (XLA:CPU):

- ``EXACT``: bit for bit (NaN positions equal) where XLA:CPU is exact: integer
  ops, comparisons, selects, data movement, RNG bits, sorting, argmax, and float
  arithmetic done in the same order by both;
- ``ulps(n)``: within ``n`` ulps of the result type, for transcendental math, where
  heron's approximations have their own documented bounds
  (:mod:`heron.emitters.math_accuracy`) and XLA:CPU has its own;
- ``rel(r)``: within a relative ``r`` (scaled by the largest magnitude), for sums and
  dots, whose summation order is each compiler's choice.

A case heron gets wrong or refuses is an ``xfail(strict=True)`` with the op, the
dtype and what differs, so that it stays visible and a fix turns it green. Where
XLA:CPU itself departs from the HLO's semantics (it flushes subnormals, keeps bf16
products in f32, folds ``(x * 1e30) * 1e30``, computes s4 in a wider type, divides
by a constant as a multiplication by its reciprocal) heron agrees with its
reference evaluator; the cases leave those inputs out or widen the bound, and
say so.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from pathlib import Path
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest
from heron_test_support.jax_config import jax_x64
from jax import lax

import heron.jax as heron_jax

BF16 = jnp.bfloat16


@pytest.fixture(autouse=True)
def jax_32_bit():
    """jax's default 32-bit types; other suites in the process may turn jax_enable_x64 on."""
    with jax_x64(False):
        yield


@pytest.fixture(scope="module")
def cache_dir(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("heron-jax-features")


# -- comparisons -----------------------------------------------------------------------

Compare = Callable[[np.ndarray, np.ndarray, str], None]


def _float_parts(a: np.ndarray) -> list[np.ndarray]:
    if np.iscomplexobj(a):
        return [np.ascontiguousarray(a.real), np.ascontiguousarray(a.imag)]
    return [a]


def _is_float(a: np.ndarray) -> bool:
    """numpy's floats and every ml_dtypes float (bf16, the float8/6/4 formats, e8m0): their
    NaNs compare by position, not with ``==`` (which ml_dtypes 0.6 does not make NaN-aware
    for its types in ``assert_array_equal``)."""
    if np.issubdtype(a.dtype, np.inexact):
        return True
    try:
        ml_dtypes.finfo(a.dtype)
    except ValueError:
        return False
    return True


def _same_kind(got: np.ndarray, expected: np.ndarray, label: str) -> None:
    assert got.dtype == expected.dtype and got.shape == expected.shape, (
        f"{label}: heron {got.dtype}{list(got.shape)}, jax {expected.dtype}{list(expected.shape)}"
    )


def _same_specials(g: np.ndarray, e: np.ndarray, label: str) -> np.ndarray:
    """NaN and inf positions (and inf signs) equal; returns the mask of finite values."""
    gw, ew = g.astype(np.float64), e.astype(np.float64)
    assert np.array_equal(np.isnan(gw), np.isnan(ew)), (
        f"{label}: NaN positions differ: heron {gw[np.isnan(gw) != np.isnan(ew)]},"
        f" jax {ew[np.isnan(gw) != np.isnan(ew)]}"
    )
    assert np.array_equal(np.isposinf(gw), np.isposinf(ew)), f"{label}: +inf positions differ"
    assert np.array_equal(np.isneginf(gw), np.isneginf(ew)), f"{label}: -inf positions differ"
    return np.isfinite(ew)


def EXACT(got: np.ndarray, expected: np.ndarray, label: str) -> None:
    _same_kind(got, expected, label)
    if not _is_float(expected):
        np.testing.assert_array_equal(got, expected, err_msg=label)
        return
    for g, e in zip(_float_parts(got), _float_parts(expected), strict=True):
        finite = ~np.isnan(e.astype(np.float64))
        _same_specials(g, e, label)
        bits = np.dtype(f"u{e.dtype.itemsize}")
        np.testing.assert_array_equal(
            g.view(bits)[finite], e.view(bits)[finite], err_msg=f"{label} (bits)"
        )


def _ordered(a: np.ndarray) -> np.ndarray:
    """Float bits as Python integers ordered like the values (so that ulps are differences)."""
    signed = a.view(np.dtype(f"i{a.dtype.itemsize}")).astype(np.int64)
    magnitude = signed & np.int64(2 ** (8 * a.dtype.itemsize - 1) - 1)
    return np.where(signed < 0, -magnitude, magnitude).astype(object)


def ulps(bound: int) -> Compare:
    def compare(got: np.ndarray, expected: np.ndarray, label: str) -> None:
        _same_kind(got, expected, label)
        if not _is_float(expected):
            np.testing.assert_array_equal(got, expected, err_msg=label)
            return
        for g, e in zip(_float_parts(got), _float_parts(expected), strict=True):
            finite = _same_specials(g, e, label)
            distance = np.abs(_ordered(g) - _ordered(e))[finite].astype(np.float64)
            worst = int(distance.max()) if distance.size else 0
            assert worst <= bound, (
                f"{label}: {worst} ulps apart (bound {bound}): heron"
                f" {g[finite][distance.argmax()]!r}, jax {e[finite][distance.argmax()]!r}"
            )

    return compare


def rel(tolerance: float) -> Compare:
    def compare(got: np.ndarray, expected: np.ndarray, label: str) -> None:
        _same_kind(got, expected, label)
        if not _is_float(expected):
            np.testing.assert_array_equal(got, expected, err_msg=label)
            return
        for g, e in zip(_float_parts(got), _float_parts(expected), strict=True):
            finite = _same_specials(g, e, label)
            gf, ef = g.astype(np.float64)[finite], e.astype(np.float64)[finite]
            scale = float(np.max(np.abs(ef))) if ef.size else 0.0
            error = float(np.max(np.abs(gf - ef))) if ef.size else 0.0
            assert error <= tolerance * max(scale, 1e-30), (
                f"{label}: max error {error:.3g} > {tolerance} x {scale:.3g}"
            )

    return compare


# -- the cases -------------------------------------------------------------------------

_RNG_SEED = 20240611


def _rng(*salt: int) -> np.random.Generator:
    return np.random.default_rng([_RNG_SEED, *salt])


def _f32(*shape: int, scale: float = 1.0, seed: int = 0) -> np.ndarray:
    """Normal values; arguments of one shape differ by ``seed``."""
    return (_rng(seed, *shape).standard_normal(shape) * scale).astype(np.float32)


def _i32(*shape: int, low: int = -50, high: int = 50, seed: int = 0) -> np.ndarray:
    return _rng(seed + 1000, *shape).integers(low, high, size=shape).astype(np.int32)


KEY = np.asarray(jax.random.key_data(jax.random.PRNGKey(7)))  # uint32[2], a plain array

CASES: list[Any] = []


X64_CASES: list[Any] = []


def case(
    name: str,
    make_args: Callable[[], tuple[Any, ...]],
    compare: Compare = EXACT,
    *marks,
    x64: bool = False,
):
    """Register the decorated function as a case (``marks``: e.g. an xfail); an ``x64`` one
    is lowered and run with ``jax_enable_x64``."""

    def register(function: Callable[..., Any]) -> Callable[..., Any]:
        cases = X64_CASES if x64 else CASES
        cases.append(pytest.param(function, make_args, compare, id=name, marks=list(marks)))
        return function

    return register


# control flow ----------------------------------------------------------------------------


@case(
    "switch_4_branches_vmapped_and_clamped",
    lambda: (np.array([-3, 0, 1, 2, 3, 9], np.int32), _f32(6, 4), np.int32(11)),
    ulps(2),  # sin: heron's bound is 2 ulps
)
def switch_branches(index, x, scalar_index):
    branches = [jnp.sin, lambda v: v * 2.0, lambda v: -v[::-1], jnp.floor]
    batched = jax.vmap(lambda i, v: lax.switch(i, branches, v))(index, x)
    # an out-of-range index is clamped to the nearest branch
    return batched, lax.switch(scalar_index, branches, x[0])


@case("cond_under_vmap_becomes_select", lambda: (_i32(7), _i32(7, 5)))
def cond_under_vmap(p, x):
    return jax.vmap(
        lambda pi, xi: lax.cond(pi > 0, lambda v: jnp.cumsum(v), lambda v: v[::-1] * 3 - pi, xi)
    )(p, x)


@case("while_loop_vmapped_data_dependent_trip_count", lambda: (_i32(9, low=1, high=60),))
def collatz_steps(n):
    def steps(v):
        def body(carry):
            value, count = carry
            return jnp.where(value % 2 == 0, value // 2, 3 * value + 1), count + 1

        return lax.while_loop(lambda carry: carry[0] > 1, body, (v, jnp.int32(0)))

    return jax.vmap(steps)(n)


@case("fori_loop_dynamic_upper_bound", lambda: (np.int32(13), _i32(4)))
def fori_dynamic(n, x):
    # int32 multiply-add wraps: exact
    return lax.fori_loop(0, n, lambda i, acc: acc * 7 + i * acc[::-1], x)


@case(
    "scan_reverse_unroll2_mixed_dtype_carry",
    lambda: (_f32(7, 3), _rng().random((7, 3)) > 0.4),
)
def scan_mixed(xs, flags):
    def body(carry, inputs):
        total, count, seen = carry
        x, f = inputs
        total = total + jnp.where(f, x, 0.0)  # the same sequential order in both: exact
        count = count + f.astype(jnp.int32)
        seen = seen | (x > 1.0)
        return (total, count, seen), (total * 2.0, count.astype(jnp.int8), seen)

    init = (jnp.zeros(3, jnp.float32), jnp.zeros(3, jnp.int32), jnp.zeros(3, bool))
    return lax.scan(body, init, (xs, flags), reverse=True, unroll=2)


@case("lax_map_batched_over_nested_scans", lambda: (_i32(5, 4, 3, low=-9, high=9),))
def map_nested_scans(x):
    def per_matrix(m):
        def outer(c, row):
            def inner(c2, e):
                return c2 * 2 + e, c2 - e

            return lax.scan(inner, c, row)

        return lax.scan(outer, jnp.int32(1), m)

    return lax.map(per_matrix, x, batch_size=2)


@case("associative_scan_forward_and_reverse", lambda: (_i32(3, 10), _f32(10)))
def associative_scans(x, y):
    def affine(a, b):  # composition of x -> a0 * x + a1 maps (not commutative)
        return a[0] * b[0], a[1] * b[0] + b[1]

    return (
        lax.associative_scan(jnp.add, x, axis=1),
        lax.associative_scan(jnp.maximum, x, axis=1, reverse=True),
        lax.associative_scan(affine, (x[0], x[1]))[1],
        lax.associative_scan(jnp.minimum, y),
    )


# autodiff ---------------------------------------------------------------------------------


@case(
    "checkpoint_static_argnums_with_policy_grad",
    lambda: (_f32(4, 8), _f32(8, 8, scale=0.5)),
    rel(1e-4),  # dots (summation order) through tanh (heron: 7 ulps)
)
def checkpoint_grad(x, w):
    @functools.partial(
        jax.checkpoint, static_argnums=(2,), policy=jax.checkpoint_policies.dots_saveable
    )
    def layers(x, w, n):
        for _ in range(n):
            x = jnp.tanh(x @ w)
        return x

    return jax.value_and_grad(lambda w: jnp.sum(layers(x, w, 3) ** 2))(w)


@jax.custom_vjp
def _scaled_sin(x, scale):
    return jnp.sin(x) * scale


def _scaled_sin_fwd(x, scale):
    s, c = jnp.sin(x), jnp.cos(x)
    return s * scale, (c, s, scale)


def _scaled_sin_bwd(residuals, g):
    c, s, scale = residuals
    return jnp.clip(g * c * scale, -0.5, 0.5), jnp.sum(g * s)


_scaled_sin.defvjp(_scaled_sin_fwd, _scaled_sin_bwd)


@case(
    "custom_vjp_with_residuals",
    lambda: (_f32(16, scale=2.0), np.float32(1.7)),
    rel(1e-5),  # sin/cos within a few ulps, a sum
)
def custom_vjp_grad(x, scale):
    return jax.value_and_grad(lambda x, s: jnp.sum(_scaled_sin(x, s) ** 2), argnums=(0, 1))(
        x, scale
    )


@case(
    "linearize_and_jvp",
    lambda: (_f32(6), _f32(6, seed=1), _f32(6, seed=2)),
    rel(1e-5),  # sin, exp: a few ulps; cumprod's products
)
def linearize_jvp(x, t1, t2):
    y, f_jvp = jax.linearize(lambda v: jnp.sin(v) * jnp.exp(v[::-1]), x)
    return y, f_jvp(t1), f_jvp(t2), jax.jvp(jnp.cumprod, (x,), (t1,))


@case(
    "hessian_of_a_small_function",
    lambda: (_f32(5), _f32(3, 5)),
    rel(1e-4),  # tanh (7 ulps in heron) through second derivatives and dots
)
def hessian(x, a):
    return jax.hessian(lambda v: jnp.sum(jnp.tanh(a @ v) ** 2) + jnp.prod(v) + jnp.sum(v**3))(x)


@case(
    "jacfwd_and_jacrev",
    lambda: (np.abs(_f32(5)) + 0.1,),
    rel(1e-5),  # exp, log: a few ulps; softmax's sum
)
def jacobians(x):
    def f(v):
        return jax.nn.softmax(v) * jnp.log(v)

    return jax.jacfwd(f)(x), jax.jacrev(f)(x)


# linear algebra helpers ------------------------------------------------------------------


@case(
    "einsum_three_operands_with_a_diagonal_index_int32",
    lambda: (_i32(4, 4, low=-5, high=5), _i32(4, 3, low=-5, high=5), _i32(3, 2, low=-5, high=5)),
)
def einsum_int(a, b, c):
    return jnp.einsum("ii,ij,jk->ik", a, b, c), jnp.einsum("iji->j", a.reshape(4, 1, 4))


@case(
    "einsum_three_operands_with_a_diagonal_index_f32",
    lambda: (_f32(4, 4), _f32(4, 4, 3), _f32(3, 5)),
    rel(1e-5),
)
def einsum_f32(a, b, c):
    return jnp.einsum("ii,iij,jk->ki", a, b, c)


@case(
    "bf16_vector_dots_and_batched_matvec",
    lambda: tuple(
        _f32(*shape, seed=i).astype(BF16) for i, shape in enumerate([(8,), (8,), (4, 6, 8)])
    ),
)
def bf16_vector_dots(a, b, m):
    """Dots with a vector side become a multiply and a reduce; XLA's rewrite rounds each
    product to bf16 and so lost cancelling terms (24 of 50 random bf16[8] dots differed
    from XLA:CPU's, by up to 4%); heron's multiplies in f32, and equals XLA:CPU here."""
    return jnp.dot(a, b), jnp.einsum("...ij,...j->...i", m, b), jnp.vdot(a[::-1], b)


@case(
    "tensordot_kron_outer",
    lambda: (_f32(3, 4, 5), _f32(4, 3, 2), _f32(2, 3), _f32(3, 2)),
    rel(1e-5),
)
def tensordot_kron(a, b, p, q):
    return (
        jnp.tensordot(a, b, axes=((0, 1), (1, 0))),
        jnp.kron(p, q),
        jnp.outer(p, q[:, ::-1]),
    )


@case("trace_offsets_tril_triu", lambda: (_i32(4, 5, 6),))
def trace_tril(x):
    return (
        jnp.trace(x, offset=1, axis1=0, axis2=2),
        jnp.trace(x[0], offset=-2),
        jnp.tril(x, k=-1),
        jnp.triu(x, k=2),
    )


# jax.random ------------------------------------------------------------------------------


@case("random_randint_int8_bernoulli_bits", lambda: (KEY, _rng().random(12).astype(np.float32)))
def random_ints(key, p):
    k1, k2, k3, k4 = jax.random.split(key, 4)
    return (
        jax.random.randint(k1, (20,), -128, 127, dtype=jnp.int8),
        jax.random.randint(k2, (3, 5), jnp.int8(-5), jnp.int8(100), dtype=jnp.int8),
        jax.random.bernoulli(k3, p),
        jax.random.bits(k4, (6,), dtype=jnp.uint8),
    )


@case("random_permutation_and_choice_without_replacement", lambda: (KEY, _i32(4, 6)))
def random_permutation(key, x):
    k1, k2, k3, k4 = jax.random.split(key, 4)
    weights = jnp.arange(1.0, 11.0)
    return (
        jax.random.permutation(k1, x, axis=1, independent=True),
        jax.random.permutation(k2, 9),
        jax.random.choice(k3, 10, shape=(5,), replace=False),
        jax.random.choice(k4, 10, shape=(4,), replace=False, p=weights / weights.sum()),
    )


@case(
    "random_categorical_and_gumbel",
    lambda: (KEY, _f32(4, 6)),
    ulps(4),  # gumbel is -log(-log(u)): a few ulps of log each; categorical's ints exact
)
def random_categorical(key, logits):
    k1, k2, k3 = jax.random.split(key, 3)
    return (
        jax.random.categorical(k1, logits, axis=-1, shape=(5, 4)),
        jax.random.categorical(k2, logits, axis=0),
        jax.random.gumbel(k3, (8,)),
    )


@case(
    "random_truncated_normal_and_beta_from_a_typed_key",
    lambda: (np.int32(3),),
    rel(1e-5),  # erf, erf_inv, log, exp (the gamma sampler's rejection loop)
)
def random_samplers(seed):
    key = jax.random.key(seed)
    k1, k2 = jax.random.split(key)
    return (
        jax.random.truncated_normal(k1, -1.5, 2.0, (10,)),
        jax.random.beta(k2, 2.0, 0.7, (6,)),
    )


# jax.nn ----------------------------------------------------------------------------------


@case(
    "softmax_where_and_log_softmax_with_minus_inf",
    lambda: (_f32(3, 6), np.array([[1, 0, 1, 1, 0, 1], [0] * 6, [1] * 6], bool)),
    rel(1e-5),  # exp: a few ulps, the row sums
)
def masked_softmax(x, mask):
    with_inf = jnp.where(mask, x, -jnp.inf)
    return (
        jax.nn.softmax(x, where=mask),
        jax.nn.log_softmax(with_inf[jnp.array([0, 2])]),
        jax.nn.log_softmax(with_inf[0].at[1].set(jnp.inf)),
    )


@case("one_hot_out_of_range_labels", lambda: (np.array([-1, 0, 3, 4, 100, 2], np.int32),))
def one_hot(labels):
    return (
        jax.nn.one_hot(labels, 4, dtype=jnp.int8),
        jax.nn.one_hot(labels, 5, axis=0),
        jax.nn.one_hot(labels.reshape(2, 3), 3, dtype=BF16),
    )


@case(
    "gelu_exact_bf16",
    lambda: (_rng().uniform(-1.0, 4.0, 64).astype(jnp.bfloat16),),
    # jax's erfc/tanh in f32, rounded to bf16. XLA:CPU keeps bf16 products in f32 (excess
    # precision: its x * 0.707 is not rounded to bf16 before erfc, as the HLO says and heron
    # does), so it differs from heron by up to 2 bf16 ulps where erfc is well conditioned
    # (x > -1); below about -4 erfc's argument rounding changes the result by 10%.
    ulps(2),
)
def gelu_bf16(x):
    return jax.nn.gelu(x, approximate=False), jax.nn.gelu(x, approximate=True)


@case(
    "logsumexp_with_b_and_return_sign",
    lambda: (_f32(3, 5), np.array([[1, -2, 0.5, 0, 1], [0] * 5, [-1, -1, 0, 0, -1]], np.float32)),
    rel(1e-5),  # exp, log and a sum
)
def logsumexp_signed(x, b):
    return jax.nn.logsumexp(x, axis=1, b=b, return_sign=True), jax.nn.logsumexp(x, b=b[0])


@case("glu_and_standardize", lambda: (_f32(4, 8),), rel(1e-5))  # sigmoid, mean and variance
def glu_standardize(x):
    return jax.nn.glu(x, axis=-1), jax.nn.standardize(x, axis=0), jax.nn.standardize(x[:, :1])


# jnp -------------------------------------------------------------------------------------


@case(
    "argmax_argmin_with_ties_and_nan",
    lambda: (
        np.array(
            [[1, 3, 3, 0], [np.nan, 2, np.nan, 9], [-1, -1, -1, -1], [5, np.inf, np.nan, np.inf]],
            np.float32,
        ),
        np.array([[4, 4, 1], [-7, 2, -7]], np.int32),
    ),
)
def argmax_ties(x, y):
    return (
        jnp.argmax(x, axis=1),
        jnp.argmin(x, axis=1),
        jnp.argmax(x, axis=0),
        jnp.argmin(y, axis=1),
        jnp.argmax(y),
        jnp.nanargmax(x[:, 1:], axis=1),
    )


@case(
    "nan_reductions_on_all_nan_rows",
    lambda: (
        np.array([[np.nan] * 4, [1, np.nan, 3, 4], [np.nan, -2, np.nan, np.nan]], np.float32),
    ),
)
def nan_reductions(x):
    return (
        jnp.nanmean(x, axis=1),
        jnp.nanmax(x, axis=1),
        jnp.nanmin(x, axis=0),
        jnp.nansum(x, axis=1),
        jnp.nanstd(x[1:], axis=1),
    )


@case("median_and_percentile_nearest", lambda: (_f32(5, 8), _i32(11)))
def order_statistics(x, n):
    return (
        jnp.median(x, axis=1),
        jnp.median(x),
        jnp.percentile(x, jnp.array([0.0, 30.0, 50.0, 99.0, 100.0]), axis=1, method="nearest"),
        jnp.quantile(n, 0.5, method="lower"),
        jnp.percentile(n.astype(jnp.float32), 25.0, method="midpoint"),
    )


@case(
    "unique_size_fill_bincount_length_digitize",
    lambda: (
        np.array([3, 1, 3, 7, 1, 0, 9, 3], np.int32),
        np.array([-1, 0.5, 1, 2.5, 3, 10, np.nan], np.float32),
    ),
)
def unique_bincount(x, y):
    values, counts = jnp.unique(x, size=6, fill_value=-1, return_counts=True)
    return (
        values,
        counts,
        jnp.unique(x, size=3),
        jnp.bincount(x, length=5),
        jnp.bincount(x, weights=x.astype(jnp.float32) * 0.5, length=12),
        jnp.digitize(y, jnp.array([0.0, 1.0, 2.5, 4.0])),
        jnp.digitize(y, jnp.array([0.0, 1.0, 2.5, 4.0]), right=True),
        jnp.searchsorted(jnp.array([1, 3, 3, 7]), x, side="right"),
    )


@case(
    "take_along_axis_negative_indices_and_take_modes",
    lambda: (_i32(3, 5), np.array([[-1, 0, -5], [4, -2, 1], [2, 2, -3]], np.int32)),
)
def take_negative(x, idx):
    return (
        jnp.take_along_axis(x, idx, axis=1),
        jnp.take(x, jnp.array([-7, 0, 6, 14]), mode="wrap"),
        jnp.take(x, jnp.array([-7, 0, 6, 14]), mode="clip"),
        jnp.take(x, jnp.array([-1, 2, 9]), axis=1, mode="fill", fill_value=-99),
        x[jnp.array([-1, 0]), -2],
    )


@case(
    "round_halves_and_integer_division_by_zero_and_negatives",
    lambda: (
        np.array([-2.5, -1.5, -0.5, 0.5, 1.5, 2.5, 3.5, 1.25, -0.0, 8388609.0], np.float32),
        np.array([7, -7, 7, -7, 0, 5, -2147483648, -2147483648, 3, -3], np.int32),
        np.array([2, 2, -2, -2, 3, 0, -1, 1, 0, 0], np.int32),
    ),
    # ints exact; floats: XLA:CPU divides round(x * 10) by 10 (jnp.round with decimals) as a
    # multiplication by 0.1, 1 ulp from the correctly rounded quotient heron computes
    ulps(1),
)
def rounding_division(x, a, b):
    return (
        jnp.round(x),
        jnp.round(x * 10, 1),
        jnp.rint(x),
        jnp.floor_divide(a, b),
        jnp.remainder(a, b),
        jnp.fmod(a, b),
        lax.div(a, b),
        lax.rem(a, b),
        jnp.floor_divide(a.astype(jnp.uint8), b.astype(jnp.uint8)),
        jnp.divmod(a.astype(jnp.int8), b.astype(jnp.int8)),
    )


@case(
    "integer_power_with_negative_exponents",
    lambda: (
        np.array([2, -2, 1, -1, 0, 3, 7], np.int32),
        np.array([3, -1, -4, -3, 2, 0, 11], np.int32),
    ),
)
def integer_power(x, e):
    return jnp.power(x, e), lax.integer_pow(x, 3), x**2, jnp.power(x.astype(jnp.uint8), 5)


@case(
    "unsigned_wrap_shifts_past_the_width_popcount_clz",
    lambda: (
        np.array([250, 3, 128, 255, 0, 17], np.uint8),
        np.array([-8, 1, -1, 2**30, -(2**31), 12345], np.int32),
        np.array([1, 8, 9, 31, 32, 40], np.int32),
    ),
)
def bit_ops(u, s, shift):
    return (
        u + np.uint8(10),
        u - np.uint8(251),
        u * np.uint8(3),
        jnp.left_shift(s, shift),
        jnp.right_shift(s, shift),
        lax.shift_right_logical(s, shift),
        jnp.left_shift(u, shift.astype(jnp.uint8)),
        jnp.right_shift(u, shift.astype(jnp.uint8)),
        lax.population_count(s),
        lax.clz(s),
        lax.clz(u),
    )


@case(
    "mulhi_of_32_bit_integers",
    lambda: (
        np.array([7, -3, 2**30, -(2**31), 2**31 - 1, -1, 0, 65537], np.int32),
        np.array([5, 9, 8, 3, 2**31 - 1, -(2**31), 12345, -65537], np.int32),
    ),
)
def mulhi_widths(a, b):
    """lax.mulhi (XLA's mulhi): the high half of the exact product, signed or unsigned.
    (XLA:CPU refuses 8- and 16-bit mulhi of several elements; the oracle's elementwise
    table checks the evaluator's on every width.)"""
    return lax.mulhi(a, b), lax.mulhi(a.astype(jnp.uint32), b.astype(jnp.uint32))


@case(
    "clip_maximum_fmax_with_nan",
    lambda: (np.array([np.nan, -3, 0.5, 4, np.inf, -np.inf, -0.0], np.float32),),
)
def nan_clipping(x):
    return (
        jnp.clip(x, -1.0, 1.0),
        jnp.clip(x, jnp.float32(np.nan), 1.0),
        jnp.maximum(x, 0.0),
        jnp.minimum(x, x[::-1]),
        jnp.fmax(x, x[::-1]),
        jnp.fmin(x, 0.0),
        jnp.sign(x),
        jnp.nan_to_num(x),
    )


@case(
    "f16_overflow_bf16_rounding_float_to_int",
    lambda: (
        np.array([65504, 65519, 65520, 1e6, -7e4, 6e-8, 2e-8, np.nan], np.float32),
        np.array([16777217, 257, 259, 2**31 - 1, -(2**31), 384, 65535, 33], np.int32),
    ),
)
def narrow_conversions(x, n):
    return (
        x.astype(jnp.float16),
        x.astype(BF16),
        n.astype(BF16),
        n.astype(jnp.float16),
        n.astype(jnp.float32),
        n.astype(jnp.uint8),
        n.astype(BF16).astype(jnp.int32),
        (x * 1e5).astype(jnp.int32),
        x.astype(jnp.uint16),
        (x / 100).astype(jnp.int8),  # out of range: saturated; NaN: 0
        (x / 100 - 200).astype(jnp.uint8),
        x.astype(BF16).astype(jnp.float16),
    )


@case(
    "complex64_abs_angle_exp_sqrt",
    lambda: (_f32(8, scale=3.0), _f32(8, scale=3.0, seed=1)),
    ulps(4),  # hypot, atan2, exp, sin/cos, sqrt: a few ulps each
)
def complex_math(re, im):
    z = lax.complex(re, im)
    return (
        jnp.abs(z),
        jnp.angle(z),
        jnp.exp(z),
        jnp.sqrt(-jnp.abs(re).astype(jnp.complex64)),
        jnp.sqrt(z),
        jnp.conj(z) + 1j,
    )


@case(
    "complex64_multiply_divide",
    lambda: (_f32(8, scale=3.0), _f32(8, scale=3.0, seed=1)),
    # XLA:CPU contracts a*c - b*d into a fused multiply-add: z * z[::-1]'s real part is
    # -1.6e-7 where the exact (and heron's) is 0; so relative to the largest part
    rel(1e-6),
)
def complex_arithmetic(re, im):
    z = lax.complex(re, im)
    return z * z[::-1], z / z[::-1], z * 2j - 1


@case(
    "argsort_descending_stable_lexsort_multi_operand_sort",
    lambda: (
        np.array([3, 1, 3, 2, 1, 3, 0, 2], np.int32),
        np.array([0.5, np.nan, -0.0, 0.0, 2, -1, np.nan, 0.5], np.float32),
    ),
)
def sorting(x, y):
    return (
        jnp.argsort(x, stable=True, descending=True),
        jnp.argsort(y),
        jnp.sort(y),
        jnp.lexsort((y, x)),
        lax.sort((x, y, jnp.arange(8)), num_keys=2),
    )


@case(
    "scatter_modes_duplicates_out_of_bounds",
    lambda: (_i32(8), np.array([1, 3, 1, -1, 9, -9, 3], np.int32), _i32(7, low=-9, high=9)),
)
def scatter_modes(x, idx, v):
    return (
        x.at[idx].add(v),  # negative indices count from the end; out-of-range ones are dropped
        x.at[idx].set(v, mode="drop"),
        x.at[idx].min(v, mode="clip"),
        x.at[idx].max(v, mode="promise_in_bounds")[:2],
        x.at[jnp.array([0, 0, 2])].multiply(jnp.array([3, -2, 5], jnp.int32)),
        x.at[idx].get(mode="fill", fill_value=-1),
        jnp.zeros((3, 4), jnp.int32).at[jnp.array([[0, 1], [2, 3], [0, 1]])[:, 0], 1:].add(7),
    )


@case(
    "dynamic_slices_out_of_bounds_and_traced_roll",
    lambda: (_i32(6, 7), np.int32(4), np.int32(-3), np.int32(9)),
)
def dynamic_slices(x, i, j, shift):
    return (
        lax.dynamic_slice(x, (i, j), (3, 4)),  # starts clamped into the array
        lax.dynamic_update_slice(x, jnp.full((4, 2), -1, jnp.int32), (i, shift)),
        lax.dynamic_slice_in_dim(x, shift, 2, axis=1),
        jnp.roll(x, shift, axis=1),
        jnp.roll(x, (i, j), axis=(0, 1)),
    )


@case("pad_modes_and_dilated_reduce_window", lambda: (_i32(5, 6),))
def pad_and_windows(x):
    return (
        jnp.pad(x, ((1, 2), (3, 0)), mode="reflect"),
        jnp.pad(x, ((2, 2), (0, 1)), mode="symmetric"),
        jnp.pad(x, ((0, 3), (4, 1)), mode="wrap"),
        jnp.pad(x, ((1, 1), (2, 2)), mode="edge"),
        lax.reduce_window(
            x, -(2**31), lax.max, (2, 3), (1, 2), ((1, 0), (2, 1)), window_dilation=(2, 1)
        ),
        lax.reduce_window(x, 0, lax.add, (2, 2), (2, 1), "SAME", base_dilation=(1, 2)),
    )


@case(
    "nonzero_argwhere_with_size_and_fill",
    lambda: (np.array([[0, 3, 0], [2, 0, 0], [0, 0, 5]], np.int32),),
)
def nonzero_sized(x):
    return (
        jnp.nonzero(x, size=5, fill_value=-1),
        jnp.argwhere(x > 1, size=2),
        jnp.where(x.ravel(), size=4, fill_value=9),
        jnp.flatnonzero(x, size=1),
        jnp.count_nonzero(x, axis=0),
    )


@case(
    "searchsorted_every_method",
    lambda: (
        np.array([-3.0, 0.0, 0.0, 1.5, 2.0, 7.0, np.nan], np.float32),
        np.array([[-4, 0, 1.5], [7, 8, np.nan]], np.float32),
    ),
)
def searchsorted_methods(a, v):
    out = []
    for method in ("scan", "scan_unrolled", "sort", "compare_all"):
        for side in ("left", "right"):
            out.append(jnp.searchsorted(a, v, side=side, method=method))
    return out


@case(
    "bitcast_with_shape_change_frexp_ldexp_nextafter",
    # no subnormal input: XLA:CPU flushes them to zero (frexp(3.5e-39) is (0.5, -149) in
    # jax, (0.595, -127) in heron, numpy and heron's reference evaluator)
    lambda: (
        np.array([1.0, -0.0, 3.5e-30, np.inf, -2.5, 6e7], np.float32),
        np.array([3, -150, 1, 0, 200, -3], np.int32),
    ),
)
def bit_level_floats(x, e):
    return (
        lax.bitcast_convert_type(x, jnp.int32),
        lax.bitcast_convert_type(x, jnp.uint8),  # f32[6] -> u8[6, 4]
        lax.bitcast_convert_type(lax.bitcast_convert_type(x, jnp.uint16), jnp.float32),
        jnp.frexp(x),
        jnp.ldexp(x, e),
        jnp.nextafter(x, jnp.float32(0)),
        jnp.nextafter(x, x[::-1]),
        lax.reduce_precision(x * 1.001, exponent_bits=5, mantissa_bits=10),
    )


@case(
    "float8_and_int4_conversions",
    # no int4 arithmetic: XLA:CPU computes s4 add in a wider type without wrapping
    # (int4(7) + int4(3) is 10 in jax, -6 in heron and heron's reference evaluator)
    lambda: (
        np.array([0.0, 1.0625, 448.0, 460.0, 500.0, -1e4, 2e-3, 1e-9, np.nan, 57344.0], np.float32),
        np.array([-9, -8, -1, 0, 7, 8, 15, 100], np.int32),
    ),
)
def narrow_formats(x, n):
    return (
        x.astype(jnp.float8_e4m3fn).astype(jnp.float32),
        x.astype(jnp.float8_e5m2).astype(jnp.float32),
        x.astype(jnp.float8_e4m3fn),
        n.astype(jnp.int4).astype(jnp.int32),
        n.astype(jnp.uint4).astype(jnp.int32),
        (x / 3).astype(jnp.float8_e4m3fnuz).astype(jnp.float32),
        (x / 3).astype(jnp.float8_e5m2fnuz).astype(jnp.float32),
        (x / 3).astype(jnp.float8_e4m3b11fnuz).astype(jnp.float32),
        (x / 100).astype(jnp.float4_e2m1fn).astype(jnp.float32),
        jnp.abs(x).astype(jnp.float8_e8m0fnu).astype(jnp.float32),
        x.astype(jnp.float8_e4m3).astype(jnp.float32),  # IEEE-like: inf and NaNs
        (x / 30).astype(jnp.float8_e3m4).astype(jnp.float32),
        (x.astype(jnp.float8_e4m3) * jnp.float8_e4m3(3)).astype(jnp.float32),
        jnp.maximum((x / 30).astype(jnp.float8_e3m4), jnp.float8_e3m4(0.5)),
    )


@case(
    "rbg_keys_rng_bit_generator",
    lambda: (np.int32(11),),
    EXACT,
)
def rbg_random(seed):
    key = jax.random.key(seed, impl="rbg")
    k1, k2 = jax.random.split(key)
    return (
        jax.random.bits(k1, (4, 3), dtype=jnp.uint32),
        jax.random.randint(k2, (6,), 0, 1000),
        jax.random.key_data(k2),
    )


@case(
    "integer_reductions_that_wrap",
    lambda: (
        np.array([[100, 90, -128, 5], [127, 127, 1, -3]], np.int8),
        _i32(2, 9, low=2, high=40),
    ),
)
def wrapping_reductions(x, y):
    return (
        jnp.sum(x, axis=1, dtype=jnp.int8),
        jnp.sum(x, axis=0),
        jnp.prod(x.astype(jnp.uint8), axis=1, dtype=jnp.uint8),
        jnp.cumprod(y, axis=1),
        jnp.cumsum(x, axis=1, dtype=jnp.int8),
        jnp.bitwise_xor.reduce(y, axis=1),
        jnp.bitwise_or.reduce(x, axis=0),
        jnp.max(x.astype(jnp.uint8), axis=1),
    )


@case(
    "vmap_in_axes_out_axes_select_n_cross",
    lambda: (_i32(3, 4, 2), _i32(2, 3), np.array([0, 2, 1, 2, 0, 1], np.int32)),
)
def vmap_axes(x, y, which):
    mixed = jax.vmap(lambda a, b: a * b[:, None] - a[::-1], in_axes=(2, 0), out_axes=1)(x, y)
    picked = lax.select_n(which, jnp.arange(6), -jnp.arange(6), jnp.full(6, 100))
    return mixed, picked, jnp.cross(x[..., 0][:, :3], y.T), jnp.cross(x[0, :2, 0], y[:, 0])


@case(
    "special_functions",
    lambda: (
        np.abs(_f32(12, scale=3.0)) + 0.05,
        _rng().uniform(-0.99, 0.99, 12).astype(np.float32),
    ),
    rel(1e-5),  # jax expands lgamma, digamma, erf_inv, i0e into f32 arithmetic and exp/log
)
def special_functions(x, u):
    s = jax.scipy.special
    return (
        lax.lgamma(x),
        lax.digamma(x),
        lax.erf_inv(u),
        s.logit((u + 1) / 2),
        s.expit(x - 2),
        s.xlogy(u, x),
        s.xlog1py(x, u),
        lax.bessel_i0e(x),
        s.gammaln(x + 10),
    )


@case(
    "atan2_signed_zeros_logaddexp_infinities_tiny_expm1",
    lambda: (
        np.array([0.0, -0.0, 0.0, -0.0, 1.0, -1.0, np.inf, -np.inf], np.float32),
        np.array([-0.0, -0.0, 0.0, 0.0, -np.inf, np.inf, np.inf, -1.0], np.float32),
        np.array([1e-30, -1e-8, 3e-4, 0.0, -0.0, 88.0, 90.0, -100.0], np.float32),
    ),
    ulps(4),  # atan2, log1p, expm1, exp, log, cbrt: a few ulps each
)
def signed_zeros(y, x, t):
    return (
        jnp.arctan2(y, x),
        jnp.logaddexp(x, y),
        jnp.logaddexp(x, x),
        jnp.expm1(t),
        jnp.log1p(t),
        jnp.cbrt(t),
        jnp.hypot(x, y),
        jnp.exp2(t * 1.5),
        jnp.copysign(t, y),
    )


@case(
    "nn_activations",
    lambda: (_f32(32, scale=4.0),),
    ulps(8),  # tanh (7 ulps in heron), exp, log1p, erf: a few ulps each
)
def activations(x):
    nn = jax.nn
    return (
        nn.celu(x, 0.5),
        nn.selu(x),
        nn.mish(x),
        nn.squareplus(x),
        nn.hard_swish(x),
        nn.relu6(x),
        nn.sparse_plus(x),
        nn.log_sigmoid(x),
        nn.soft_sign(x),
        nn.elu(x),
        nn.silu(x),
    )


@case(
    "dot_product_attention_with_mask_and_bias",
    lambda: (_f32(2, 5, 3, 8), _f32(2, 6, 3, 8), _f32(2, 6, 3, 8, seed=1), _f32(2, 3, 5, 6)),
    rel(1e-5),  # dots, softmax's exp and sum
)
def attention(q, k, v, bias):
    mask = jnp.tril(jnp.ones((5, 6), bool), k=1)
    return (
        jax.nn.dot_product_attention(q, k, v, bias=bias, mask=mask, implementation="xla"),
        jax.nn.dot_product_attention(q, k, v, is_causal=True, implementation="xla"),
    )


@case(
    "interp_and_histogram",
    lambda: (
        np.array([-1.0, 0.0, 0.3, 1.0, 2.5, 4.0, 9.0, np.nan], np.float32),
        _f32(40, scale=2.0),
    ),
    rel(1e-6),  # interpolation arithmetic; the counts are exact
)
def interp_hist(x, samples):
    xp = jnp.array([0.0, 1.0, 2.0, 4.0])
    fp = jnp.array([1.0, -1.0, 3.0, 0.5])
    counts, edges = jnp.histogram(samples, bins=5, range=(-3.0, 3.0))
    return jnp.interp(x, xp, fp), jnp.interp(x, xp, fp, left=-9.0, right=9.0), counts, edges


@case(
    "int8_and_bf16_dots_with_preferred_element_type",
    lambda: (
        _rng(1).integers(-128, 128, (5, 7)).astype(np.int8),
        _rng(2).integers(-128, 128, (7, 3)).astype(np.int8),
        _f32(4, 6).astype(jnp.bfloat16),
        _f32(6, 5).astype(jnp.bfloat16),
    ),
    rel(1e-5),  # the int dots exact; the bf16 products are exact in f32, the sums not ordered
)
def narrow_dots(a, b, p, q):
    return (
        lax.dot(a, b, preferred_element_type=jnp.int32),
        jnp.matmul(a, b),  # int8 accumulation wraps
        lax.dot(p, q, preferred_element_type=jnp.float32),
        jnp.einsum("ij,jk->ki", p, q, preferred_element_type=jnp.float32),
        jnp.matmul(a.astype(jnp.uint8), b.astype(jnp.uint8)),
    )


@case(
    "dot_general_batch_dimensions_not_leading",
    lambda: (_i32(3, 4, 5, low=-9, high=9), _i32(5, 4, 2, low=-9, high=9)),
)
def batched_dots(x, y):
    return (
        jnp.einsum("ibj,jbk->kib", x, y),
        jnp.einsum("...j,j...->...", x[:, 0, :], y[:, :3, 0]),
        lax.dot_general(x, y, (((2,), (0,)), ((1,), (1,)))),
    )


@case(
    "advanced_indexing_separated_by_a_slice",
    lambda: (_i32(4, 5, 6), np.array([[3, -1], [0, 2]], np.int32), np.array([5, 0], np.int32)),
)
def advanced_indexing(x, i, j):
    return (
        x[i, :, j],  # the advanced dimensions go first
        x[:, i, ::2],
        x[1:, j][..., None, 1],
        x[i[:, :1], 2, j],
        x[np.array([True, False, True, True])][:, -1],  # a concrete mask
    )


@case(
    "variadic_reduce_and_cumulative_ops",
    lambda: (
        np.array([[1.0, np.nan, 3.0, -1.0], [2.0, 2.0, -np.inf, 0.5]], np.float32),
        _i32(3, 6),
    ),
    ulps(4),  # cumlogsumexp's exp and log; the rest exact
)
def variadic_reduce(x, n):
    def pick(a, b):  # argmin by value, then by index
        (av, ai), (bv, bi) = a, b
        take_a = (av < bv) | ((av == bv) & (ai < bi))
        return jnp.where(take_a, av, bv), jnp.where(take_a, ai, bi)

    idx = lax.broadcasted_iota(jnp.int32, n.shape, 1)
    return (
        lax.reduce((n, idx), (jnp.int32(2**31 - 1), jnp.int32(0)), pick, (1,)),
        lax.cummax(x, axis=1),
        lax.cummin(n, axis=1, reverse=True),
        lax.cumlogsumexp(x[1], axis=0),
        jnp.cumsum(n > 0, axis=0),
    )


@case(
    "while_loop_decode_with_dynamic_update_slice",
    lambda: (_i32(6, low=0, high=6), np.int32(2)),
)
def decode_loop(table, start):
    def cond(carry):
        step, token, out = carry
        return (step < 8) & (token != 0)

    def body(carry):
        step, token, out = carry
        out = lax.dynamic_update_slice(out, token[None], (step,))
        return step + 1, table[token], out

    return lax.while_loop(cond, body, (jnp.int32(0), start, jnp.full(8, -1, jnp.int32)))


@case(
    "gcd_lcm_and_integer_edge_values",
    lambda: (
        np.array([12, -18, 0, 7, -2147483648, 100, 0], np.int32),
        np.array([18, 12, 5, 0, -1, -75, 0], np.int32),
    ),
)
def integer_edges(a, b):
    return (
        jnp.gcd(a, b),
        jnp.lcm(a % 1000, b),
        jnp.abs(a),
        -a,
        jnp.sign(a),
        jnp.abs(a.astype(jnp.int8)),
        a * b,
        jnp.packbits(a > 0),
        jnp.unpackbits(a.astype(jnp.uint8)),
    )


@case(
    "float_remainder_and_floor_divide_edges",
    lambda: (
        np.array([5.5, -5.5, 5.5, -0.0, 0.0, np.inf, 3.0, 1e30, 7.0], np.float32),
        np.array([2.0, 2.0, -2.0, 3.0, -3.0, 2.0, np.inf, 3.0, 0.0], np.float32),
    ),
)
def float_division_edges(x, y):
    return (
        jnp.remainder(x, y),
        jnp.fmod(x, y),
        jnp.floor_divide(x, y),
        jnp.divmod(x, y),
        lax.rem(x, y),
        jnp.signbit(x),
        jnp.heaviside(x, jnp.float32(0.5)),
    )


@case(
    "unique_floats_setops_isin",
    lambda: (
        np.array([1.5, np.nan, -0.0, 0.0, 1.5, np.nan, 3.0], np.float32),
        np.array([4, 1, 7, 1, 9], np.int32),
        np.array([1, 2, 9, 9, 11], np.int32),
    ),
)
def set_operations(x, a, b):
    values, inverse = jnp.unique(x, size=6, fill_value=99.0, return_inverse=True)
    return (
        values,
        inverse,
        jnp.unique(x, size=6, equal_nan=False, fill_value=0.0),
        jnp.isin(a, b),
        jnp.setdiff1d(a, b, size=4, fill_value=-1),
        jnp.intersect1d(a, b, size=3, fill_value=-1),
        jnp.union1d(a, b, size=8, fill_value=-1),
    )


@case(
    "top_k_ties_and_nan_argsort_bf16",
    lambda: (
        np.array(
            [[3.0, 1.0, 3.0, np.nan, 2.0, 3.0], [0.0, -0.0, -1.0, 5.0, 5.0, -np.inf]], np.float32
        ),
    ),
)
def top_k_ties(x):
    values, indices = lax.top_k(x, 4)
    return (
        values,
        indices,
        jnp.argsort(x.astype(BF16), axis=1),
        jnp.sort(x.astype(jnp.float16), axis=1, descending=True),
        jnp.argsort(-x, axis=1, stable=True),
        jnp.argpartition(x[1], 2),
    )


@case(
    "convolve_correlate_int32_and_f32",
    lambda: (_i32(9, low=-9, high=9), _i32(4, low=-9, high=9), _f32(10), _f32(3)),
    rel(1e-5),  # the f32 convolutions' sums; the int32 ones exact
)
def convolutions_1d(a, v, x, w):
    return (
        jnp.convolve(a, v),
        jnp.convolve(a, v, mode="same"),
        jnp.correlate(a, v, mode="valid"),
        jnp.convolve(x, w, mode="same"),
        jnp.correlate(x, w, mode="full"),
    )


@case(
    "image_resize_methods",
    lambda: (_f32(1, 5, 6, 2),),
    rel(1e-5),  # the interpolation weights' dots (lanczos: sin, a few ulps)
)
def image_resize(x):
    return (
        jax.image.resize(x, (1, 8, 3, 2), "nearest"),
        jax.image.resize(x, (1, 9, 11, 2), "bilinear"),
        jax.image.resize(x, (1, 3, 4, 2), "lanczos3"),
        jax.image.resize(x, (1, 7, 7, 2), "cubic"),
    )


@case(
    "diff_gradient_cov_corrcoef_polyval",
    lambda: (_f32(4, 7), _f32(5)),
    rel(1e-5),  # sums and products
)
def statistics(x, c):
    return (
        jnp.diff(x, n=2, axis=1),
        jnp.gradient(x[0]),
        jnp.cov(x),
        jnp.corrcoef(x[:2]),
        jnp.polyval(c, x[1]),
        jnp.var(x, axis=1, ddof=1),
    )


@case(
    "zero_size_arrays",
    lambda: (np.zeros((0, 3), np.float32), np.zeros((3, 0), np.float32), _f32(2, 3)),
)
def zero_size(e, f, x):
    return (
        jnp.sum(e, axis=0),
        jnp.max(e, axis=0, initial=-1.0),
        jnp.cumsum(e, axis=0),
        f @ e,  # f32[3, 3] of zeros
        jnp.concatenate([x, e], axis=0),
        jnp.argsort(e[:, 0]),
        lax.fori_loop(0, 0, lambda i, c: c + 1.0, x),
        lax.scan(lambda c, r: (c + r, r * 2), jnp.zeros(3), e),
    )


@case("outputs_aliasing_arguments_and_constants", lambda: (_f32(3), np.int32(5)))
def aliasing_outputs(x, n):
    return x, x, n, jnp.float32(2.5), jnp.arange(4), {"again": x, "n": n + 0}


@case(
    "uint32_and_uint16_beyond_the_signed_range",
    lambda: (
        np.array([0, 1, 2**31, 2**32 - 1, 3_000_000_000, 12345], np.uint32),
        np.array([3e9, -1.0, 4.3e9, 2.5e9, np.nan, 65535.7], np.float32),
    ),
)
def unsigned_ranges(u, f):
    return (
        u.astype(jnp.float32),
        u.astype(BF16),
        u.astype(jnp.int32),
        f.astype(jnp.uint32),
        u // jnp.uint32(7),
        u % jnp.array([0, 3, 5, 7, 11, 0], jnp.uint32),
        u // jnp.array([0, 3, 5, 7, 11, 0], jnp.uint32),
        u >> jnp.uint32(31),
        jnp.maximum(u, jnp.uint32(2**31 + 1)),
        u > jnp.uint32(2**31),
        u.astype(jnp.uint16) * jnp.uint16(40000),
        (u.astype(jnp.uint16) >> 3).astype(jnp.float16),
    )


@case(
    "float16_arithmetic_and_bool_arithmetic",
    lambda: (
        np.array([60000, 1e-4, -2.0, 0.1, 65504, 3.0, 6e-5, -0.0], np.float16),
        _rng(3).random(8) > 0.5,
    ),
    ulps(1),  # f16 ops: XLA:CPU computes them in f32 and rounds once, as heron does
)
def f16_and_bool(h, b):
    return (
        h + h,
        h * jnp.float16(3.0),
        h / jnp.float16(3.0),
        h - h[::-1],
        jnp.sqrt(jnp.abs(h)),
        jnp.sum(h[2:4]),
        jnp.sum(b),
        b * b[::-1],
        ~b,
        b ^ b[::-1],
        jnp.logical_xor(b, h > 0),
        b.astype(jnp.float16) - 1,
        jnp.max(b),
        jnp.argmax(b),
        jnp.cumsum(b),
    )


@case(
    "vmap_of_dynamic_slice_and_update_with_batched_indices",
    lambda: (_i32(4, 10), np.array([0, 3, 8, -2], np.int32), _i32(4, 3, seed=1)),
)
def vmap_dynamic(x, starts, updates):
    sliced = jax.vmap(lambda row, s: lax.dynamic_slice(row, (s,), (3,)))(x, starts)
    updated = jax.vmap(lambda row, u, s: lax.dynamic_update_slice(row, u, (s,)))(x, updates, starts)
    taken = jax.vmap(lambda row, s: jnp.take(row, s + jnp.arange(3), mode="clip"))(x, starts)
    trip = jax.vmap(lambda s, row: lax.fori_loop(0, s, lambda i, c: c + row[i % 10], 0))(starts, x)
    return sliced, updated, taken, trip


@case(
    "grads_through_sort_max_ties_where_top_k_and_gather",
    lambda: (np.array([1.0, 3.0, 3.0, -2.0, 0.5, 3.0], np.float32), _f32(6)),
    rel(1e-6),
)
def grads_of_selections(x, w):
    def loss(v):
        safe = jnp.where(v > 0, jnp.sqrt(jnp.where(v > 0, v, 1.0)), 0.0)
        return (
            jnp.sum(jnp.sort(v) * w)
            + jnp.max(v)
            + jnp.sum(lax.top_k(v, 2)[0])
            + jnp.sum(safe)
            + jnp.sum(v[jnp.array([0, 0, 5, 2])] * w[:4])
            + jnp.linalg.norm(v - v)
        )

    return jax.grad(loss)(x)


@jax.custom_jvp
def _soft_clip(x):
    return jnp.tanh(x) * 2.0


@_soft_clip.defjvp
def _soft_clip_jvp(primals, tangents):
    (x,), (t,) = primals, tangents
    return _soft_clip(x), t * jnp.where(jnp.abs(x) < 1.0, 2.0, 0.1)


@case(
    "custom_jvp_under_grad_and_vmap",
    lambda: (_f32(3, 5, scale=2.0),),
    ulps(8),  # tanh: 7 ulps in heron
)
def custom_jvp_grad(x):
    return jax.vmap(jax.grad(lambda v: jnp.sum(_soft_clip(v) ** 2)))(x), jax.nn.relu(x)


@case(
    "optimization_barrier_and_stop_gradient",
    lambda: (_f32(4), _f32(4, seed=1)),
    rel(1e-6),
)
def barriers(x, y):
    a, b = lax.optimization_barrier((x * 2.0, y + 1.0))
    g = jax.grad(lambda v: jnp.sum(lax.stop_gradient(v) * v + v**2))(x)
    return a + b, g


@case(
    "scan_with_remat_body_and_cond_inside",
    lambda: (_f32(6, 3), _f32(3, 3, scale=0.5)),
    rel(1e-5),  # sin and dots in a loop, and their gradients
)
def remat_scan(xs, w):
    @jax.checkpoint
    def body(h, x):
        h = lax.cond(jnp.sum(x) > 0, lambda: jnp.sin(h @ w + x), lambda: h * 0.5 - x)
        return h, jnp.sum(h)

    def loss(w_):
        del w_
        return jnp.sum(lax.scan(body, jnp.ones(3), xs)[1])

    return loss(w), jax.grad(lambda w_: jnp.sum(lax.scan(body, jnp.ones(3) * w_[0], xs)[1]))(w)


@case(
    "approx_max_k_and_min_k",
    lambda: (_f32(3, 40),),
)
def approx_top_k(x):
    values, indices = lax.approx_max_k(x, 4, recall_target=1.0)
    low, where = lax.approx_min_k(x, 2, reduction_dimension=0)
    return values, indices, low, where


@case(
    "map_coordinates_orders_and_modes",
    lambda: (_f32(5, 6), _rng(4).uniform(-2, 8, (2, 10)).astype(np.float32)),
    rel(1e-5),  # linear interpolation weights
)
def map_coordinates(image, coords):
    nd = jax.scipy.ndimage
    return [
        nd.map_coordinates(image, list(coords), order=order, mode=mode, cval=-1.0)
        for order in (0, 1)
        for mode in ("constant", "nearest", "wrap", "mirror", "reflect")
    ]


@case(
    "incomplete_gamma_beta_polygamma_zeta",
    lambda: (np.abs(_f32(8, scale=3.0)) + 0.3, np.abs(_f32(8, scale=2.0, seed=1)) + 0.2),
    rel(1e-4),  # series and continued fractions of exp, log and lgamma, each a few ulps
)
def special_series(a, x):
    s = jax.scipy.special
    return (
        lax.igamma(a, x),
        lax.igammac(a, x),
        s.betainc(a, x, jnp.clip(x / 5.0, 0.0, 1.0)),
        s.polygamma(1, a),
        s.zeta(a + 1.5, x),
        lax.bessel_i1e(x),
        s.erfcx(a - 1.0),
        s.ndtri(jnp.clip(x / 6.0, 0.01, 0.99)),
        s.log_ndtr(-a),
    )


@case(
    "complex64_transcendentals_and_sorting",
    lambda: (_f32(8, scale=2.0), _f32(8, scale=2.0, seed=1)),
    # several real ops of a few ulps each (log, atan2, exp, sin, cos); relative to the largest
    # value, as a part near zero is ill-conditioned: z ** 2.5's real part is r cos(2.5 arg z),
    # where arg's 2 ulps make 40 ulps of a real part 0.1 of |z|
    rel(1e-5),
)
def complex_transcendental(re, im):
    z = lax.complex(re, im)
    return (
        jnp.log(z),
        jnp.tanh(z),
        jnp.arctan(z),
        jnp.power(z, 2.5),
        jnp.sin(z),
        jnp.sort(z.at[2].set(z[5])),
        jnp.argsort(jnp.round(z)),
        jnp.abs(z.at[0].set(complex(np.inf, np.nan))),
        jnp.isfinite(z / z.at[1].set(0)),
    )


@case("iota_wrap_and_rank_7_transpose", lambda: (_i32(2, 1, 3, 2, 1, 2, 3),))
def high_rank(x):
    return (
        lax.iota(jnp.int8, 300)[-10:],
        jnp.arange(0.0, 1.0, 0.15),
        jnp.transpose(x, (6, 0, 3, 5, 1, 4, 2)),
        jnp.broadcast_to(x[:, :, :1], (2, 4, 1, 2, 1, 2, 3)).reshape(16, 6)[::3],
        lax.clamp(jnp.int32(5), x, jnp.int32(-5)),  # min above max
        lax.rev(x, (0, 2, 6)),
    )


@case("debug_print", lambda: (_f32(3),), EXACT)  # heron.jax.host_callbacks
def debug_print(x):
    jax.debug.print("x = {}", x)
    return x * 2


@case("pure_callback", lambda: (_f32(3),), EXACT)  # heron.jax.host_callbacks
def pure_callback(x):
    shape = jax.ShapeDtypeStruct((3,), jnp.float32)
    return jax.pure_callback(lambda v: np.asarray(v) * 2, shape, x) + 1


@case(
    "with_sharding_constraint_on_one_device",
    lambda: (_f32(4, 2),),
    EXACT,
)
def sharding_constraint(x):
    # custom-call 'Sharding': on one device its operand (the sharding-remover pass)
    sharding = jax.sharding.SingleDeviceSharding(jax.devices("cpu")[0])
    return lax.with_sharding_constraint(x * 2, sharding) + 1


@case(
    "named_sharding_constraint_on_a_one_device_mesh",
    lambda: (_f32(4, 4),),
    rel(1e-6),  # sine: a few ulps
)
def named_sharding_constraint(x):
    mesh = jax.sharding.Mesh(np.array(jax.devices("cpu")[:1]), ("x",))
    sharding = jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec("x", None))
    return lax.with_sharding_constraint(jnp.sin(x), sharding) * 3


@case(
    "ragged_dot_composite_split_platform_dependent",
    lambda: (_f32(10, 4), _f32(3, 4, 5), np.array([3, 0, 7], np.int32), _i32(3, 6)),
    rel(1e-5),  # the dots' sums; log1p and exp a few ulps
)
def newer_primitives(a, b, groups, n):
    @functools.partial(lax.composite, name="test.softplus")
    def softplus(x):
        return jnp.log1p(jnp.exp(x))

    return (
        lax.ragged_dot(a, b, groups),  # a group of 0 rows
        softplus(a[0]),
        lax.split(n, (2, 3, 1), axis=1),
        lax.platform_dependent(n, cpu=lambda v: v * 2, cuda=lambda v: v * 3, default=lambda v: -v),
    )


@case("pallas_kernels_in_interpret_mode", lambda: (_i32(8, 8, low=-9, high=9), _i32(8, 8, seed=1)))
def pallas_interpret(x, y):
    from jax.experimental import pallas as pl

    def add(x_ref, y_ref, o_ref):
        o_ref[...] = x_ref[...] * 2 + y_ref[...]

    def blocked(x_ref, o_ref):
        o_ref[...] = jnp.cumsum(x_ref[...], axis=1) + pl.program_id(0)

    block = pl.BlockSpec((4, 8), lambda i: (i, 0))
    shape = jax.ShapeDtypeStruct(x.shape, x.dtype)
    return (
        pl.pallas_call(add, out_shape=shape, interpret=True)(x, y),
        pl.pallas_call(
            blocked, out_shape=shape, grid=(2,), in_specs=[block], out_specs=block, interpret=True
        )(x),
    )


@case(
    "unsigned_and_narrow_index_types",
    lambda: (
        np.arange(10, dtype=np.int32),
        np.uint32(4_000_000_000),
        np.array([200, 3, 9, 255], np.uint8),
    ),
)
def unsigned_indices(x, i, j):
    return (
        lax.dynamic_slice(x, (i,), (3,)),  # an unsigned start past the end: clamped
        x[j],  # out of range: clamped (jax's default gather mode)
        lax.dynamic_update_slice(x, jnp.full(2, -1, x.dtype), (i,)),
        jnp.take(x, j.astype(jnp.int8)),  # negative int8: from the end
        x.at[j].add(1),  # out of range: dropped
    )


@case(
    "grouped_and_integer_convolutions",
    lambda: (
        _f32(2, 4, 7, 7),
        _f32(6, 2, 3, 3),
        _i32(2, 3, 9, 8, low=-5, high=5),
        _i32(4, 3, 3, 2),
    ),
    rel(1e-5),  # the f32 sums; the int32 convolution exact
)
def convolutions_2d(x, w, n, k):
    return (
        lax.conv_general_dilated(x, w, (1, 1), "SAME", feature_group_count=2),
        lax.conv_general_dilated(n, k % 5, (2, 1), ((1, 1), (0, 2)), rhs_dilation=(1, 2)),
    )


@case(
    "float_identities_a_simplifier_must_not_apply",
    lambda: (
        np.array([np.nan, np.inf, -np.inf, -0.0, 0.0, 1.0, -2.0, 3e38, 1e-30, 0.1], np.float32),
        np.float32(1.0),
        np.float32(0.0),
    ),
)
def float_identities(x, one, zero):
    # only those XLA:CPU keeps: it folds (x * 1e30) * 1e30, (x + 1e30) - 1e30, log(exp(x)),
    # (2x) / 2 and sqrt(x * x) (heron and its reference evaluator do not), and flushes
    # subnormal results
    return (
        x + zero,  # -0.0 + 0.0 is 0.0
        zero - x,  # 0.0 - 0.0 is 0.0, not -0.0
        x * zero,  # NaN for inf and NaN
        x - x,
        x / x,
        x == x,
        x != x,
        lax.pow(x, zero + 0.5),  # pow(-0.0, 0.5) is 0, pow(-inf, 0.5) inf: not sqrt
        lax.pow(x, zero + 2.0),
        lax.pow(x, zero),  # 1 even for NaN
        lax.pow(one, x),  # 1 even for NaN
        jnp.maximum(x, x),
        jnp.where(x < x[::-1], x, x[::-1]),  # not min: NaN is not propagated
        ~(x < x[::-1]),  # not >=: NaN
        lax.clamp(-one, x, one),
        x.astype(BF16).astype(jnp.float32),
        x.astype(jnp.float16).astype(jnp.float32),
        jnp.negative(jnp.negative(x)),
        jnp.abs(-x),
        x.astype(jnp.int32).astype(jnp.float32),
    )


@case(
    "integer_identities_a_simplifier_must_not_apply",
    lambda: (np.array([0, 1, -1, 2**31 - 1, -(2**31), 7, -7, 2**30], np.int32), np.int32(1)),
)
def integer_identities(n, one):
    return (
        (n * 2) // 2,  # wraps first
        n // n,  # 0 // 0 is -1 in XLA
        n % one,
        (n + 5) - 5,
        n.astype(jnp.float32).astype(jnp.int32),
        n * -one,
        n // -one,  # INT_MIN // -1
        n % -one,
        lax.div(n, -one),
        lax.rem(n, -one),
        (n + 1) > n,  # false at INT_MAX
        (n.astype(jnp.int8) * 2).astype(jnp.int32),
    )


@case(
    "linalg_eigh",
    lambda: (np.eye(3, dtype=np.float32) * 2 + 0.5,),
    rel(1e-5),  # LAPACK ssyevd through scipy on both sides (heron.jax.cpu_lapack)
)
def linalg_eigh(s):
    return jnp.linalg.eigh(s)[0]


@case(
    "linalg_svd",
    lambda: (_f32(4, 3),),
    rel(1e-5),  # LAPACK sgesdd through scipy on both sides
)
def linalg_svd(a):
    return jnp.linalg.svd(a, compute_uv=False)


@case(
    "linalg_qr",
    lambda: (_f32(4, 3),),
    rel(1e-5),  # LAPACK sgeqrf through scipy on both sides
)
def linalg_qr(a):
    return jnp.abs(jnp.linalg.qr(a)[1])


_SINES = np.sin(np.arange(40, dtype=np.float32) / 7).reshape(5, 8)


@case("closes_over_a_constant_table", lambda: (_f32(5, 8),))
def closes_over_a_constant_table(x):
    # jax prints a constant of more than a few elements as {...} unless asked not to (a
    # rotary embedding's table of sines and cosines: equinox's RotaryPositionalEmbedding)
    return x * jnp.asarray(_SINES) + jnp.asarray(np.arange(40, dtype=np.int32).reshape(5, 8))


@case(
    "linalg_inv_and_det",
    lambda: (_f32(4, 4) + 4 * np.eye(4, dtype=np.float32),),
    rel(1e-5),  # LAPACK sgetrf through scipy on both sides
)
def linalg_inv_and_det(a):
    # det's singularity test (any zero on the LU diagonal) beside the pivots' iota: a
    # reduction fusion whose first root is a side output (multi-output fusion crashed)
    return jnp.linalg.inv(a), jnp.linalg.det(a)


class _State(NamedTuple):
    w: Any
    step: Any
    extra: Any


@case(
    "pytrees_namedtuples_none_leaves_and_python_scalars",
    lambda: (_State(_f32(3), 5, None), {"b": _i32(2, 2), "a": (np.float32(2.5), True)}, 300, 0.5),
)
def pytrees(state, params, n, x):
    out = {"w": state.w * params["a"][0] + n, "sum": params["b"].sum(), "none": None}
    flag = params["a"][1]
    return _State(out["w"], state.step + 1, None), out, (n * 2, x * 3, jnp.where(flag, n, -n))


# with jax_enable_x64 (real code often turns it on): 64-bit ints and floats -------------------


@case(
    "x64_int64_uint64_wrap_division_shifts",
    lambda: (
        np.array([2**62, -(2**63), 7, -7, 3, 2**40 + 1], np.int64),
        np.array([4, -1, -2, 0, 65, 63], np.int64),
    ),
    x64=True,
)
def int64_ops(a, b):
    u = a.astype(jnp.uint64)
    return (
        a * 3,
        a + a,
        a // b,
        a % b,
        jnp.left_shift(a, b),
        jnp.right_shift(a, b),
        u >> b.astype(jnp.uint64),
        u * jnp.uint64(2**63 + 5),
        lax.population_count(a),
        lax.clz(a),
        a.astype(jnp.int32),
        a.astype(jnp.float32),
        a.astype(jnp.float64),
    )


@case(
    "x64_mulhi_of_64_bit_integers",
    lambda: (
        np.array([2**62, -(2**63), 2**63 - 1, -7, 3, 2**40 + 1, -1], np.int64),
        np.array([4, -1, 2**63 - 1, 2**63 - 1, -(2**63), 2**33 - 3, -1], np.int64),
    ),
    x64=True,
)
def mulhi_64(a, b):
    """The 128-bit product's high word (mul.hi.s64 / mul.hi.u64)."""
    return lax.mulhi(a, b), lax.mulhi(a.astype(jnp.uint64), b.astype(jnp.uint64))


@case(
    "x64_float64_math_and_conversions",
    lambda: (
        _rng(5).uniform(-3, 3, 16),
        np.array([2.0**53 + 1, 1e300, -1e-310, 0.1, np.nan, 3.4028235e38, 3.4028236e38]),
    ),
    ulps(3),  # f64 exp, log, sin, tanh, erf: heron's f64 bounds are 2 or 3 ulps
    x64=True,
)
def float64_math(x, y):
    return (
        jnp.exp(x),
        jnp.log(jnp.abs(x)),
        jnp.sin(x * 100),
        jnp.tanh(x),
        lax.erf(x),
        x / 3.0,
        jnp.sqrt(jnp.abs(x)),
        y.astype(jnp.float32),
        y.astype(jnp.int64),
        y.astype(BF16),
    )


@case(
    "x64_random_bits_and_samplers",
    lambda: (KEY,),
    rel(1e-12),  # uniform and normal from the same bits: erf_inv in f64
    x64=True,
)
def random_x64(key):
    k1, k2, k3 = jax.random.split(key, 3)
    return (
        jax.random.bits(k1, (5,), dtype=jnp.uint64),
        jax.random.uniform(k2, (5,), dtype=jnp.float64),
        jax.random.normal(k3, (4,), dtype=jnp.float64),
        jax.random.randint(k3, (4,), -(2**40), 2**40, dtype=jnp.int64),
    )


@case(
    "x64_sums_cumsum_argsort",
    lambda: (_rng(6).standard_normal((3, 50)), _rng(7).integers(-(2**40), 2**40, (3, 8))),
    rel(1e-14),  # f64 sums
    x64=True,
)
def x64_reductions(x, n):
    return (
        jnp.sum(x, axis=1),
        jnp.cumsum(x, axis=1),
        jnp.argsort(n, axis=1),
        jnp.sum(n, axis=1),
        jnp.max(n, axis=0),
        x @ x.T,
    )


# -- the test ------------------------------------------------------------------------------


def _leaves(tree: Any) -> list[np.ndarray]:
    return [np.asarray(leaf) for leaf in jax.tree_util.tree_leaves(tree)]


@pytest.mark.parametrize(("function", "make_args", "compare"), CASES)
def test_heron_jit_equals_jax_jit_on_the_cpu(
    function: Callable[..., Any], make_args: Callable[[], tuple], compare: Compare, cache_dir
) -> None:
    _check(function, make_args, compare, cache_dir)


@pytest.mark.parametrize(("function", "make_args", "compare"), X64_CASES)
def test_heron_jit_equals_jax_jit_on_the_cpu_with_x64(
    function: Callable[..., Any], make_args: Callable[[], tuple], compare: Compare, cache_dir
) -> None:
    with jax_x64(True):
        _check(function, make_args, compare, cache_dir)


def _check(function, make_args, compare: Compare, cache_dir: Path) -> None:
    """heron.jax.jit on the interpreter against jax.jit on the CPU, leaf by leaf."""
    args = make_args()
    expected = jax.jit(function)(*args)
    got = heron_jax.jit(function, backend="interpreter", cache_dir=cache_dir)(*args)
    assert jax.tree_util.tree_structure(got) == jax.tree_util.tree_structure(expected)
    got_leaves, expected_leaves = _leaves(got), _leaves(expected)
    assert got_leaves, "the case returns nothing to compare"
    for i, (g, e) in enumerate(zip(got_leaves, expected_leaves, strict=True)):
        compare(g, e, f"{function.__name__} leaf {i}")


def test_the_comparisons_can_fail() -> None:
    """The comparators reject what they must: a bit flip, a moved NaN, an ulp too many."""
    one = np.array([1.0, np.nan], np.float32)
    other = np.array([np.nextafter(np.float32(1), np.float32(2)), np.nan], np.float32)
    with pytest.raises(AssertionError):
        EXACT(other, one, "bits")
    ulps(1)(other, one, "one ulp")
    with pytest.raises(AssertionError):
        ulps(0)(other, one, "zero ulps")
    with pytest.raises(AssertionError):
        rel(1e-9)(other, one, "relative")
    with pytest.raises(AssertionError):
        EXACT(np.array([1.0, 2.0], np.float32), one, "NaN moved")
    with pytest.raises(AssertionError):
        EXACT(np.array([1, 2], np.int32), np.array([1, 3], np.int32), "ints")
    with pytest.raises(AssertionError):
        EXACT(np.array([0.0], np.float32), np.array([-0.0], np.float32), "signed zero")
    wide = np.array([1.0, -3.0])
    ulps(1)(np.nextafter(wide, 0.0), wide, "f64 one ulp")
    with pytest.raises(AssertionError):
        ulps(1)(-wide, wide, "f64 sign")
    with pytest.raises(AssertionError):
        ulps(4)(np.array([1 + 1e-3j], np.complex64), np.array([1 + 0j], np.complex64), "imag")
    with pytest.raises(AssertionError):
        rel(1e-3)(np.array([np.inf], np.float32), np.array([1.0], np.float32), "inf")
