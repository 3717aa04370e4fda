"""Data movement, indexing, reductions, linear algebra and control flow against XLA:CPU.

Float reductions and dots may sum in a different order than XLA does, so
their tolerance is an absolute bound derived from the instance itself:
(number of terms) x (largest term) x (epsilon of the type).
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from jax import lax
from oracle_harness import EXACT, Tolerance, random_array, run_oracle

DTYPES = ["float32", "bfloat16", "float16", "float64", "int32", "int8", "uint32", "bool"]
NUMERIC = ["float32", "bfloat16", "float16", "float64", "int32", "int8", "uint32"]
seeds = st.integers(0, 2**31 - 1)


def _dtype(name: str) -> np.dtype:
    return np.dtype(getattr(ml_dtypes, name, None) or name)


def _sum_tolerance(dtype: np.dtype, terms: int, magnitude: float) -> Tolerance:
    if not (dtype.kind == "f" or dtype.name.startswith("bfloat")):
        return EXACT
    eps = float(ml_dtypes.finfo(dtype).eps)
    return Tolerance(ulps=2, atol=terms * max(magnitude, 1.0) * eps * 2)


@st.composite
def arrays(draw, dtypes=DTYPES, min_rank=0, max_rank=3, max_dim=5, specials=True):
    dtype = _dtype(draw(st.sampled_from(dtypes)))
    shape = tuple(draw(st.lists(st.integers(1, max_dim), min_size=min_rank, max_size=max_rank)))
    rng = np.random.default_rng(draw(seeds))
    return random_array(rng, shape, dtype, specials=specials)


def _j(*arrays_):
    return [jnp.asarray(a) for a in arrays_]


# -- pure data movement -------------------------------------------------------


@settings(max_examples=25, deadline=None)
@given(x=arrays(), data=st.data())
def test_broadcast_reshape_transpose_reverse(x: np.ndarray, data: st.DataObject) -> None:
    rank = x.ndim
    perm = data.draw(st.permutations(range(rank)))
    extra = data.draw(st.integers(0, 2))
    out_rank = rank + extra
    # broadcast_in_dim: operand dim k lands at positions[k] (increasing).
    positions = sorted(data.draw(st.permutations(range(out_rank)))[:rank])
    full = [data.draw(st.integers(1, 3)) for _ in range(out_rank)]
    for k, p in enumerate(positions):
        full[p] = x.shape[k]
    rev = tuple(data.draw(st.sets(st.integers(0, max(rank - 1, 0)), max_size=rank))) if rank else ()

    def f(a):
        b = lax.broadcast_in_dim(a, tuple(full), tuple(positions))
        t = lax.transpose(a, tuple(perm))
        r = lax.reshape(a, (math.prod(a.shape),))
        v = lax.rev(a, rev)
        return b, t, r, v

    run_oracle(f, _j(x))


@settings(max_examples=25, deadline=None)
@given(x=arrays(min_rank=1), data=st.data())
def test_slice_and_pad(x: np.ndarray, data: st.DataObject) -> None:
    starts, limits, strides, pads = [], [], [], []
    for d in x.shape:
        s = data.draw(st.integers(0, d - 1))
        starts.append(s)
        limits.append(data.draw(st.integers(s + 1, d)))
        strides.append(data.draw(st.integers(1, 3)))
        lo = data.draw(st.integers(-1, 2)) if d > 2 else data.draw(st.integers(0, 2))
        hi = data.draw(st.integers(-1, 2)) if d > 2 else data.draw(st.integers(0, 2))
        pads.append((lo, hi, data.draw(st.integers(0, 2))))
    pad_value = random_array(np.random.default_rng(1), (), x.dtype)

    def f(a, v):
        return lax.slice(a, starts, limits, strides), lax.pad(a, v, pads)

    run_oracle(f, _j(x, pad_value))


@settings(max_examples=25, deadline=None)
@given(x=arrays(min_rank=1), data=st.data())
def test_dynamic_slice_and_update_clamp(x: np.ndarray, data: st.DataObject) -> None:
    sizes = [data.draw(st.integers(1, d)) for d in x.shape]
    # Offsets deliberately out of range on both sides: XLA clamps them.
    offsets = [np.int32(data.draw(st.integers(-3, d + 3))) for d in x.shape]
    update = random_array(np.random.default_rng(2), tuple(sizes), x.dtype)

    def f(a, u, *idx):
        return lax.dynamic_slice(a, idx, sizes), lax.dynamic_update_slice(a, u, idx)

    run_oracle(f, _j(x, update, *offsets))


@settings(max_examples=20, deadline=None)
@given(data=st.data())
def test_concatenate_and_iota(data: st.DataObject) -> None:
    dtype = _dtype(data.draw(st.sampled_from(DTYPES)))
    rank = data.draw(st.integers(1, 3))
    base = [data.draw(st.integers(1, 4)) for _ in range(rank)]
    dim = data.draw(st.integers(0, rank - 1))
    rng = np.random.default_rng(data.draw(seeds))
    parts = []
    for _ in range(data.draw(st.integers(1, 4))):
        shape = list(base)
        shape[dim] = data.draw(st.integers(1, 4))
        parts.append(random_array(rng, tuple(shape), dtype))
    iota_dtype = _dtype(data.draw(st.sampled_from(NUMERIC)))

    def f(*xs):
        return lax.concatenate(xs, dim), lax.broadcasted_iota(iota_dtype, tuple(base), dim)

    run_oracle(f, _j(*parts))


# -- gather and scatter -------------------------------------------------------


@settings(max_examples=25, deadline=None)
@given(x=arrays(min_rank=2, max_rank=3, specials=False), data=st.data())
def test_take_along_axis_gather(x: np.ndarray, data: st.DataObject) -> None:
    axis = data.draw(st.integers(0, x.ndim - 1))
    n = data.draw(st.integers(1, 6))
    rng = np.random.default_rng(data.draw(seeds))
    idx = rng.integers(-2, x.shape[axis] + 2, size=n).astype(np.int32)

    def f(a, i):
        return jnp.take(a, i, axis=axis, mode="clip"), a[i.clip(0, a.shape[axis] - 1)]

    run_oracle(f, _j(x, idx))


@settings(max_examples=25, deadline=None)
@given(x=arrays(dtypes=NUMERIC, min_rank=1, max_rank=3, specials=False), data=st.data())
def test_scatter_combiners(x: np.ndarray, data: st.DataObject) -> None:
    n = data.draw(st.integers(1, 6))
    rng = np.random.default_rng(data.draw(seeds))
    # Out-of-range rows are dropped by XLA's scatter; repeated rows combine.
    idx = rng.integers(-1, x.shape[0] + 2, size=n).astype(np.int32)
    upd = random_array(rng, (n, *x.shape[1:]), x.dtype, specials=False)
    kind = data.draw(st.sampled_from(["set", "add", "min", "max", "mul"]))
    if kind == "set":
        idx = np.unique(idx)  # 'set' with duplicates is order-dependent in XLA
        upd = upd[: len(idx)]

    def f(a, i, u):
        return getattr(a.at[i], kind)(u, mode="drop")

    magnitude = float(np.max(np.abs(upd.astype(np.float64)), initial=0)) + float(
        np.max(np.abs(x.astype(np.float64)), initial=0)
    )
    run_oracle(f, _j(x, idx, upd), _sum_tolerance(x.dtype, n + 1, magnitude**2))


# -- reductions ---------------------------------------------------------------


@settings(max_examples=30, deadline=None)
@given(x=arrays(dtypes=NUMERIC + ["bool"], min_rank=1, specials=False), data=st.data())
def test_reduce(x: np.ndarray, data: st.DataObject) -> None:
    axes = tuple(sorted(data.draw(st.sets(st.integers(0, x.ndim - 1), min_size=1))))
    if x.dtype == np.bool_:
        run_oracle(lambda a: (jnp.all(a, axis=axes), jnp.any(a, axis=axes)), _j(x))
        return
    terms = math.prod(x.shape[a] for a in axes)
    tol = _sum_tolerance(x.dtype, terms, float(np.max(np.abs(x.astype(np.float64)))))

    def f(a):
        return (
            jnp.sum(a, axis=axes, dtype=a.dtype),
            jnp.max(a, axis=axes),
            jnp.min(a, axis=axes),
        )

    run_oracle(f, _j(x), tol)


@settings(max_examples=20, deadline=None)
@given(x=arrays(dtypes=["float32", "int32", "bfloat16"], min_rank=1), data=st.data())
def test_variadic_argmax_reduce(x: np.ndarray, data: st.DataObject) -> None:
    axis = data.draw(st.integers(0, x.ndim - 1))
    run_oracle(lambda a: (jnp.argmax(a, axis=axis), jnp.argmin(a, axis=axis)), _j(x))


@settings(max_examples=20, deadline=None)
@given(x=arrays(dtypes=["float32", "int32", "float64"], min_rank=2, max_rank=2, max_dim=6,
                specials=False), data=st.data())  # fmt: skip
def test_reduce_window(x: np.ndarray, data: st.DataObject) -> None:
    window = tuple(data.draw(st.integers(1, d)) for d in x.shape)
    strides = tuple(data.draw(st.integers(1, 2)) for _ in x.shape)
    padding = tuple((data.draw(st.integers(0, 1)), data.draw(st.integers(0, 1))) for _ in x.shape)
    base_dilation = tuple(data.draw(st.integers(1, 2)) for _ in x.shape)
    window_dilation = tuple(data.draw(st.integers(1, 2)) for _ in x.shape)
    init = np.array(0, x.dtype)

    def f(a):
        total = lax.reduce_window(a, init, lax.add, window, strides, padding,
                                  base_dilation, window_dilation)  # fmt: skip
        peak = lax.reduce_window(a, np.array(-1000, x.dtype), lax.max, window, strides, padding)
        return total, peak

    terms = math.prod(window)
    run_oracle(f, _j(x), _sum_tolerance(x.dtype, terms, float(np.max(np.abs(x)))))


@settings(max_examples=15, deadline=None)
@given(x=arrays(dtypes=["float32"], min_rank=2, max_rank=2, max_dim=6, specials=False))
def test_select_and_scatter_from_maxpool_gradient(x: np.ndarray) -> None:
    def pooled_sum(a):
        return lax.reduce_window(a, -jnp.inf, lax.max, (2, 2), (1, 1), "VALID").sum()

    if min(x.shape) < 2:
        return
    run_oracle(jax.grad(pooled_sum), _j(x))


@settings(max_examples=20, deadline=None)
@given(x=arrays(dtypes=["float32", "int32", "bfloat16", "float64"], min_rank=1, max_rank=2),
       data=st.data())  # fmt: skip
def test_sort_multi_operand(x: np.ndarray, data: st.DataObject) -> None:
    dim = data.draw(st.integers(0, x.ndim - 1))
    num_keys = data.draw(st.integers(1, 2))
    payload = np.arange(x.size, dtype=np.int32).reshape(x.shape)
    keys2 = (x.astype(np.float64) * 0).astype(np.int32) + (payload % 3)
    stable = data.draw(st.booleans())

    def f(a, p, k2):
        operands = (a, k2, p) if num_keys == 2 else (a, p)
        return lax.sort(operands, dimension=dim, is_stable=stable, num_keys=num_keys)

    if not stable and num_keys == 1:
        # Unstable order of equal keys is unspecified: only compare the keys.
        run_oracle(lambda a: lax.sort(a, dimension=dim), _j(x))
        return
    run_oracle(f, _j(x, payload, keys2))


# -- linear algebra -----------------------------------------------------------


@settings(max_examples=25, deadline=None)
@given(data=st.data())
def test_dot_general(data: st.DataObject) -> None:
    dtype = _dtype(data.draw(st.sampled_from(["float32", "float64", "int32", "bfloat16"])))
    batch = data.draw(st.lists(st.integers(1, 3), max_size=1))
    m, k, n = (data.draw(st.integers(1, 5)) for _ in range(3))
    rng = np.random.default_rng(data.draw(seeds))
    lhs = random_array(rng, (*batch, m, k), dtype, specials=False)
    rhs = random_array(rng, (*batch, k, n), dtype, specials=False)
    nb = len(batch)
    dims = (((nb + 1,), (nb,)), (tuple(range(nb)), tuple(range(nb))))
    magnitude = float(np.max(np.abs(lhs.astype(np.float64)), initial=1)) * float(
        np.max(np.abs(rhs.astype(np.float64)), initial=1)
    )
    run_oracle(
        lambda a, b: lax.dot_general(a, b, dims), _j(lhs, rhs), _sum_tolerance(dtype, k, magnitude)
    )


@settings(max_examples=20, deadline=None)
@given(data=st.data())
def test_convolution(data: st.DataObject) -> None:
    groups = data.draw(st.integers(1, 2))
    batch = data.draw(st.integers(1, 2))
    cin = groups * data.draw(st.integers(1, 2))
    cout = groups * data.draw(st.integers(1, 2))
    spatial = [data.draw(st.integers(3, 6)) for _ in range(2)]
    kernel = [data.draw(st.integers(1, 3)) for _ in range(2)]
    strides = [data.draw(st.integers(1, 2)) for _ in range(2)]
    padding = [(data.draw(st.integers(0, 1)), data.draw(st.integers(0, 1))) for _ in range(2)]
    lhs_dil = [data.draw(st.integers(1, 2)) for _ in range(2)]
    rhs_dil = [data.draw(st.integers(1, 2)) for _ in range(2)]
    rng = np.random.default_rng(data.draw(seeds))
    lhs = random_array(rng, (batch, cin, *spatial), np.float32, specials=False)
    rhs = random_array(rng, (cout, cin // groups, *kernel), np.float32, specials=False)

    def f(a, b):
        return lax.conv_general_dilated(
            a, b, strides, padding, lhs_dil, rhs_dil, feature_group_count=groups
        )

    terms = (cin // groups) * math.prod(kernel)
    run_oracle(f, _j(lhs, rhs), _sum_tolerance(np.dtype(np.float32), terms, 16.0))


# -- control flow -------------------------------------------------------------


@settings(max_examples=15, deadline=None)
@given(x=arrays(dtypes=["float32", "int32"], specials=False), steps=st.integers(0, 5),
       branch=st.integers(-2, 4))  # fmt: skip
def test_while_cond_switch_call(x: np.ndarray, steps: int, branch: int) -> None:
    @jax.jit
    def inner(a):
        return a * 2 + 1

    def f(a, n, b):
        looped = lax.fori_loop(0, n, lambda i, v: v + inner(v), a)
        chosen = lax.cond(n > 2, lambda v: v - 1, lambda v: v + 1, a)
        switched = lax.switch(b, [lambda v: v, lambda v: v * 3, lambda v: -v], a)
        return looped, chosen, switched

    run_oracle(f, _j(x, np.int32(steps), np.int32(branch)))
