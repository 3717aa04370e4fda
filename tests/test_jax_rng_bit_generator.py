"""jax's rng-bit-generator through heron: ``lax.rng_bit_generator`` and ``jax.random`` with
``rbg`` / ``unsafe_rbg`` keys, equal to ``jax.jit`` on the CPU bit for bit.

XLA expands ``rng-bit-generator`` into Philox-4x32-10 (``rng_default``,
``rng_philox``) or Threefry-2x32-20 (``rng_three_fry``) before code generation,
so the bits jax returns on the CPU are fixed by that expansion; heron's
``rng-bit-generator-expander`` builds the same one early in the simplification
pipeline. ``heron.jax.jit`` on the interpreter runs the compiled pipeline (the
expansion, fusion, the interpreter's kernels) and is compared with ``jax.jit``.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from heron_test_support.jax_config import jax_x64
from jax import lax

import heron.jax as heron_jax

#: erf_inv's ulps: heron's approximation against XLA:CPU's (jax.random.normal).
ULPS = 4

ALGORITHMS = {
    "default": lax.RandomAlgorithm.RNG_DEFAULT,
    "philox": lax.RandomAlgorithm.RNG_PHILOX,
    "three_fry": lax.RandomAlgorithm.RNG_THREE_FRY,
}


@pytest.fixture(autouse=True)
def jax_32_bit():
    """jax's default 32-bit types, whatever another suite in the process set (a global):
    with x64 on, the loop's uint32 carry would meet uint64 bits."""
    with jax_x64(False):
        yield


@pytest.fixture
def x64(jax_32_bit):
    """u64 bits and u64 keys need jax_enable_x64 (a process-wide flag, restored after)."""
    with jax_x64(True):
        yield


def _same_bits(actual, expected) -> None:
    """Equal leaf by leaf: dtype, shape and every byte."""
    actual_leaves = jax.tree_util.tree_leaves(actual)
    expected_leaves = jax.tree_util.tree_leaves(expected)
    assert len(actual_leaves) == len(expected_leaves)
    for a, e in zip(actual_leaves, expected_leaves):
        a, e = np.asarray(a), np.asarray(e)
        assert a.dtype == e.dtype and a.shape == e.shape
        assert a.tobytes() == e.tobytes(), (a, e)


def _check(fn, *args) -> None:
    expected = jax.jit(fn)(*args)
    actual = heron_jax.jit(fn, backend="interpreter")(*args)
    _same_bits(actual, expected)


#: (shape, dtype) drawn one after the other, each from the state the last one left:
#: scalars, sizes that fill no whole Philox block (4 words) or Threefry pair, shapes
#: with no even dimension (Threefry splits the longest), 8- to 64-bit words, no bits.
DRAWS = (
    ((), jnp.uint32),
    ((7,), jnp.uint32),
    ((3, 5), jnp.uint32),
    ((4, 6), jnp.uint32),
    ((5,), jnp.uint64),
    ((2, 3, 3), jnp.uint64),
    ((9,), jnp.uint8),
    ((3, 3), jnp.uint16),
    ((0, 2), jnp.uint32),
)


@pytest.mark.parametrize("algorithm", sorted(ALGORITHMS))
def test_rng_bit_generator_bits_and_states_equal_jax(x64, algorithm):
    key = np.array([0x0123456789ABCDEF, 0xFFFFFFFFFFFFFFF0], np.uint64)

    def fn(state):
        out = []
        for shape, dtype in DRAWS:
            state, bits = lax.rng_bit_generator(
                state, shape, dtype=dtype, algorithm=ALGORITHMS[algorithm]
            )
            out.append((state, bits))
        return out

    _check(fn, key)


def test_rng_bit_generator_with_a_u32_key_carries_into_the_counter_high_half():
    # A u32[4] key is bitcast to u64[2] (key, counter); counter 2**64 - 1 wraps.
    key = np.array([7, 9, 0xFFFFFFFF, 0xFFFFFFFF], np.uint32)

    def fn(k):
        state, bits = lax.rng_bit_generator(k, (10,), dtype=jnp.uint32)
        return lax.rng_bit_generator(state, (6,), dtype=jnp.uint32)[1], bits, state

    _check(fn, key)


@pytest.mark.parametrize("impl", ["rbg", "unsafe_rbg"])
def test_jax_random_with_rbg_keys_equals_jax(impl):
    def fn(seed):
        key = jax.random.key(seed, impl=impl)
        k1, k2, k3 = jax.random.split(key, 3)
        k4 = jax.random.fold_in(k3, 17)
        return (
            jax.random.bits(k1, (5, 3)),
            jax.random.bits(k1, (7,), dtype=jnp.uint8),
            jax.random.uniform(k2, (4, 5)),
            jax.random.randint(k4, (11,), -50, 1000),
            jax.random.bernoulli(k2, 0.3, (13,)),
            jax.random.permutation(k4, 9),
            jax.random.key_data(k4),
        )

    _check(fn, np.int32(2026))


@pytest.mark.parametrize("impl", ["rbg", "unsafe_rbg"])
def test_jax_random_normal_with_rbg_keys_is_jax_within_erf_inv_ulps(impl):
    """The uniforms are bit for bit jax's; the normals go through erf_inv, whose
    approximation heron computes in its own way: within a few ulps."""

    def fn(seed):
        key = jax.random.key(seed, impl=impl)
        return jax.random.uniform(key, (3, 7), minval=-1.0), jax.random.normal(key, (3, 7))

    seed = np.int32(5)
    (uniform, normal) = heron_jax.jit(fn, backend="interpreter")(seed)
    (jax_uniform, jax_normal) = jax.jit(fn)(seed)
    _same_bits(uniform, jax_uniform)
    normal, jax_normal = np.asarray(normal), np.asarray(jax_normal)
    ulps = np.abs(normal.view(np.int32).astype(np.int64) - jax_normal.view(np.int32))
    assert ulps.max() <= ULPS, ulps


def test_rbg_keys_under_vmap_and_in_a_loop_equal_jax():
    def fn(seeds):
        keys = jax.vmap(lambda s: jax.random.key(s, impl="rbg"))(seeds)

        def body(_, carry):
            key, total = carry
            key, sub = jax.random.split(key)
            return key, total ^ jax.random.bits(sub, (4,))

        def one(key):
            return lax.fori_loop(0, 5, body, (key, jnp.zeros(4, jnp.uint32)))[1]

        return jax.vmap(one)(keys)

    _check(fn, np.arange(3, dtype=np.int32))


@pytest.mark.parametrize("impl", ["threefry2x32", "rbg"])
def test_typed_keys_go_in_and_come_out_as_keys(impl):
    """A typed key (``jax.random.key``, jax's recommended form) is an argument and a
    result as jax.jit takes and gives it: the entry reads and returns the key's data
    (``u32[2]`` for threefry, ``u32[4]`` for rbg), heron.jax unwraps and wraps it. An
    optimizer state holding a key (``optax.noisy_sgd``) is such a pytree."""

    def fn(key, x):
        k1, k2 = jax.random.split(key)
        return {
            "noisy": x + jax.random.uniform(k1, x.shape),
            "next": k2,
            "folded": jax.random.fold_in(key, 7),
        }

    key = jax.random.key(11, impl=impl)
    x = np.arange(6, dtype=np.float32)
    expected = jax.jit(fn)(key, x)
    actual = heron_jax.jit(fn, backend="interpreter")(key, x)
    for name in ("next", "folded"):
        assert actual[name].dtype == expected[name].dtype  # a key of the same implementation
        _same_bits(jax.random.key_data(actual[name]), jax.random.key_data(expected[name]))
    _same_bits(actual["noisy"], expected["noisy"])
    # the key a call returned is the next call's argument
    again = heron_jax.jit(fn, backend="interpreter")(actual["next"], x)
    _same_bits(again["noisy"], jax.jit(fn)(expected["next"], x)["noisy"])
