"""What a gradient through ``heron.jax.jit`` costs a call, by where the transformation is.

``jax.grad(heron.jax.jit(loss))`` stages the heron-jitted loss as ``heron_call`` and runs
two heron programs a call (the loss, and the transpose of its derivative, which
recomputes the forward: docs/runtime.md, "heron.jax.jit under jax's transformations");
``heron.jax.jit(jax.grad(loss))`` compiles the gradient as one program. Both are timed
warm (compiled, derived jaxprs kept) on the interpreter for an MLP loss, beside
``jax.grad(jax.jit(loss))`` and ``jax.jit(jax.grad(loss))`` on XLA:CPU in the same run,
so that the ratios say what the transformation around the call costs on each side.
Each figure is the median of ``--runs`` batches of ``--calls`` calls.

Run: ``python benchmarks/jax_transform_cost.py [--width 64] [--calls 20] [--runs 5]``.
"""

from __future__ import annotations

import argparse
import statistics
import time

import jax
import jax.numpy as jnp

import heron.jax as heron_jax


def _loss(params, x, y):
    hidden = jnp.tanh(x @ params["w1"] + params["b1"])
    return jnp.mean((hidden @ params["w2"] - y) ** 2)


def _data(width: int):
    keys = jax.random.split(jax.random.key(0), 4)
    params = {
        "w1": jax.random.normal(keys[0], (width, width)) / width**0.5,
        "b1": jnp.zeros(width),
        "w2": jax.random.normal(keys[1], (width, 8)) / width**0.5,
    }
    return params, jax.random.normal(keys[2], (32, width)), jax.random.normal(keys[3], (32, 8))


def _time(function, args, calls: int, runs: int) -> float:
    """Seconds a call: the median of ``runs`` batches, results waited for."""
    jax.block_until_ready(function(*args))  # compile, trace and derive once
    batches = []
    for _ in range(runs):
        start = time.perf_counter()
        for _ in range(calls):
            out = function(*args)
        jax.block_until_ready(out)
        batches.append((time.perf_counter() - start) / calls)
    return statistics.median(batches)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--width", type=int, default=64)
    parser.add_argument("--calls", type=int, default=20)
    parser.add_argument("--runs", type=int, default=5)
    options = parser.parse_args(argv)
    args = _data(options.width)
    heron_loss = heron_jax.jit(_loss, backend="interpreter", cache_dir=False)
    rows = {
        "jax.grad(heron.jax.jit(loss))": jax.grad(heron_loss),
        "heron.jax.jit(jax.grad(loss))": heron_jax.jit(
            jax.grad(_loss), backend="interpreter", cache_dir=False
        ),
        "jax.grad(jax.jit(loss)) (XLA:CPU)": jax.grad(jax.jit(_loss)),
        "jax.jit(jax.grad(loss)) (XLA:CPU)": jax.jit(jax.grad(_loss)),
    }
    seconds = {name: _time(f, args, options.calls, options.runs) for name, f in rows.items()}
    print(
        f"MLP loss, width {options.width}, batch 32; jax {jax.__version__}; ms a call"
        f" (median of {options.runs} batches of {options.calls})"
    )
    one_program = seconds["heron.jax.jit(jax.grad(loss))"]
    for name, value in seconds.items():
        print(f"{name:40s} {value * 1e3:9.3f}   {value / one_program:6.2f}x heron's one program")
    print(f"heron programs compiled for jax.grad(heron.jax.jit(loss)): {heron_loss.compiles}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
