"""Recurrent cells scanned over a batch-major sequence give XLA:CPU's answers (issue 26).

flax's ``nn.scan``/``nn.RNN`` and a vmapped ``lax.scan`` feed their while loop
the batch/time transpose of the sequence, which jax lays out as a bitcast of its
input (``f32[T,B,F]{2,0,1}``), while the loop body's parameter is row-major.
heron's compiled loop read the body's layout from bytes laid out the other way,
so every step but the first was wrong (only batch row 0 of step 0 was right)
while the reference evaluator, which computes on logical arrays, was right.

Here the same shapes of program, written with jax alone (the model corpus has
the flax and equinox originals), run through ``heron.jax.jit`` on the
interpreter and are compared with ``jax.jit`` on the CPU.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from heron_test_support.programs import assert_close

import heron.jax as heron_jax

HIDDEN, FEATURES, STEPS, BATCH = 6, 5, 7, 4


pytestmark = pytest.mark.usefixtures("jax_32_bit")


def _gru_step(params, h, x):
    w_i, w_h, b = params
    gates_x, gates_h = x @ w_i, h @ w_h
    r = jax.nn.sigmoid(gates_x[..., :HIDDEN] + gates_h[..., :HIDDEN] + b[:HIDDEN])
    z = jax.nn.sigmoid(gates_x[..., HIDDEN : 2 * HIDDEN] + gates_h[..., HIDDEN : 2 * HIDDEN])
    n = jnp.tanh(gates_x[..., 2 * HIDDEN :] + r * gates_h[..., 2 * HIDDEN :] + b[2 * HIDDEN :])
    return (1 - z) * n + z * h


def _lstm_step(params, carry, x):
    w_i, w_h, b = params
    h, c = carry
    gates = x @ w_i + h @ w_h + b
    i, f, g, o = jnp.split(gates, 4, axis=-1)
    c = jax.nn.sigmoid(f) * c + jax.nn.sigmoid(i) * jnp.tanh(g)
    return jnp.tanh(c) * jax.nn.sigmoid(o), c


def gru_batch_major(params, xs):
    """A batch of sequences [B,T,F] scanned over time: the loop gets xs transposed."""

    def step(h, x):
        h = _gru_step(params, h, x)
        return h, h

    h0 = jnp.zeros((xs.shape[0], HIDDEN), xs.dtype)
    h, hs = jax.lax.scan(step, h0, jnp.swapaxes(xs, 0, 1))
    return h, jnp.swapaxes(hs, 0, 1)


def gru_vmapped(params, xs):
    """One sequence per batch row, vmapped: jax moves the batch inside the scan."""

    def one(sequence):
        def step(h, x):
            return _gru_step(params, h, x), None

        return jax.lax.scan(step, jnp.zeros(HIDDEN, xs.dtype), sequence)[0]

    return jax.vmap(one)(xs)


def lstm_batch_major(params, xs):
    def step(carry, x):
        carry = _lstm_step(params, carry, x)
        return carry, carry[0]

    zeros = jnp.zeros((xs.shape[0], HIDDEN), xs.dtype)
    (h, c), hs = jax.lax.scan(step, (zeros, zeros), jnp.swapaxes(xs, 0, 1))
    return h, c, hs


CELLS = {
    "gru_batch_major": (gru_batch_major, 3),
    "gru_vmapped": (gru_vmapped, 3),
    "lstm_batch_major": (lstm_batch_major, 4),
}


def _arguments(gates: int):
    rng = np.random.default_rng(26)
    params = (
        (rng.standard_normal((FEATURES, gates * HIDDEN)) * 0.5).astype(np.float32),
        (rng.standard_normal((HIDDEN, gates * HIDDEN)) * 0.5).astype(np.float32),
        (rng.standard_normal(gates * HIDDEN) * 0.1).astype(np.float32),
    )
    return params, rng.standard_normal((BATCH, STEPS, FEATURES)).astype(np.float32)


@pytest.mark.parametrize("name", sorted(CELLS))
def test_jax_feeds_the_loop_a_sequence_laid_out_otherwise_than_its_body_reads_it(name) -> None:
    """The premise: without it this file tests nothing the program corpus does not."""
    function, gates = CELLS[name]
    text = heron_jax.lower(function, *_arguments(gates)).hlo_text
    loop_operands = [line for line in text.splitlines() if " while(" in line]
    assert loop_operands and any("{2,0,1}" in line for line in loop_operands), text


@pytest.mark.parametrize("command_buffers", [True, False], ids=["graphs", "no-graphs"])
@pytest.mark.parametrize("name", sorted(CELLS))
def test_the_scanned_cell_equals_jax_on_the_cpu(name: str, command_buffers: bool) -> None:
    function, gates = CELLS[name]
    arguments = _arguments(gates)
    got = heron_jax.jit(
        function, backend="interpreter", cache_dir=False, command_buffers=command_buffers
    )(*arguments)
    expected = jax.jit(function)(*arguments)
    got, expected = jax.tree.leaves(got), jax.tree.leaves(expected)
    assert len(got) == len(expected)
    for i, (a, b) in enumerate(zip(got, expected, strict=True)):
        assert_close(np.asarray(a), np.asarray(b), f"{name} output {i}")
