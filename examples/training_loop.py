"""A training loop whose parameters and optimizer state stay on heron's device.

    python examples/training_loop.py [--backend auto] [--steps 20]

An MLP regression trained with Adam (written out, no optax), as a JAX user writes
it: ``step(params, state, x, y) -> (params, state, loss)``. ``heron.jax.jit``
compiles the step once with ``donate_argnums=(0, 1)``: the new parameters and
moments are written into the buffers of the old ones (the module's
``input_output_alias``), and ``results="device"`` keeps them on the device between
steps, so that a step takes last step's arrays in place (no copy to or from the
host) and only the loss is read back. The same loop under ``jax.jit`` is the
reference: the losses must agree step by step.

On a GPU (``--backend cuda``) the arrays are heron's device arrays in GPU memory
(``jax.Array`` values with ``results="auto"`` where jax has the GPU); on the
interpreter, host memory. Exit status 0 when heron's losses are jax's, 1 when not.
"""

from __future__ import annotations

import argparse
import sys

import jax
import jax.numpy as jnp
import numpy as np

import heron.jax

LEARNING_RATE, BETA1, BETA2, EPSILON = 1e-2, 0.9, 0.999, 1e-8
SIZES = (8, 32, 32, 2)


def init(seed: int = 0) -> list[dict[str, np.ndarray]]:
    rng = np.random.default_rng(seed)
    return [
        {
            "w": (rng.standard_normal((m, n)) / np.sqrt(m)).astype(np.float32),
            "b": np.zeros(n, np.float32),
        }
        for m, n in zip(SIZES[:-1], SIZES[1:], strict=True)
    ]


def predict(params, x):
    for layer in params[:-1]:
        x = jax.nn.gelu(x @ layer["w"] + layer["b"])
    return x @ params[-1]["w"] + params[-1]["b"]


def step(params, state, x, y):
    """One Adam step (bias-corrected moments) on the mean squared error."""
    loss, grads = jax.value_and_grad(lambda p: jnp.mean((predict(p, x) - y) ** 2))(params)
    count = state["count"] + 1
    mu = jax.tree_util.tree_map(lambda m, g: BETA1 * m + (1 - BETA1) * g, state["mu"], grads)
    nu = jax.tree_util.tree_map(lambda v, g: BETA2 * v + (1 - BETA2) * g * g, state["nu"], grads)
    scale = jnp.sqrt(1 - BETA2**count) / (1 - BETA1**count)
    params = jax.tree_util.tree_map(
        lambda p, m, v: p - LEARNING_RATE * scale * m / (jnp.sqrt(v) + EPSILON), params, mu, nu
    )
    return params, {"count": count, "mu": mu, "nu": nu}, loss


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", default="auto", help="auto, cuda, rocm or interpreter")
    parser.add_argument("--steps", type=int, default=20)
    args = parser.parse_args(argv)

    rng = np.random.default_rng(1)
    x = rng.standard_normal((64, SIZES[0])).astype(np.float32)
    y = np.stack([np.sin(x.sum(axis=1)), np.cos(x[:, 0])], axis=1).astype(np.float32)
    params = init()
    zeros = jax.tree_util.tree_map(np.zeros_like, params)
    state = {"count": np.int32(0), "mu": zeros, "nu": jax.tree_util.tree_map(np.copy, zeros)}

    compiled = heron.jax.jit(step, backend=args.backend, donate_argnums=(0, 1), results="device")
    reference = jax.jit(step)
    heron_params, heron_state = params, state
    jax_params, jax_state = params, state
    worst = 0.0
    for number in range(args.steps):
        heron_params, heron_state, heron_loss = compiled(heron_params, heron_state, x, y)
        jax_params, jax_state, jax_loss = reference(jax_params, jax_state, x, y)
        ours, theirs = float(np.asarray(heron_loss)), float(jax_loss)
        worst = max(worst, abs(ours - theirs) / max(abs(theirs), 1e-12))
        if number in (0, args.steps - 1):
            ways = compiled.inputs_taken(heron_params, heron_state, x, y).ways
            print(
                f"step {number}: loss {ours:.6f} (jax {theirs:.6f}); arguments taken:"
                f" {', '.join(sorted(set(ways)))}"
            )
    print(
        f"{args.steps} steps on {compiled.backend}, compiled {compiled.compiles} time(s);"
        f" largest relative difference from jax's loss: {worst:.2e}"
    )
    return 0 if worst <= 1e-4 else 1


if __name__ == "__main__":
    sys.exit(main())
