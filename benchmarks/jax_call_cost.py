"""Host time of one ``heron.jax.jit`` call, beside the executor's run it makes.

jax.jit's dispatch is C++: a call costs microseconds whatever its arguments. A
heron.jax call is Python: it computes the call's signature (the key of its
compiled program: each leaf's shape, dtype and weak type), takes each argument
(a jax array through DLPack, in place), issues the run and wraps the results. On
a GPU the device work of a small step is tens of microseconds, so this host work
decides whether back-to-back steps keep the device busy (issue 30: the resident
runner cost about 50 us a call over the executor on the H200).

A program of ``--leaves`` parameters (f32[8] jax CPU arrays, as a model's weights
are the same arrays call after call; one kernel reads the first, so that the
device work is the same for every count) runs on the interpreter, whose memory
is host memory, so jax's CPU arrays are taken in place as jax's GPU arrays are on
CUDA. Each figure is the median of ``--runs`` batches
of ``--calls`` calls, all in this process:

- ``heron.jax call``: ``jitted(*leaves)``, results left as device arrays;
- ``resident run``: the runner alone on the leaves (no signature, no pytree);
- ``resident run, asking each array``: the same with jax arrays not known to be
  immutable (every argument asked for a DLPack capsule every call, as before the
  forty-first session);
- ``executor run``: the executable on buffers already bound (the device work as
  the interpreter does it, and the executor's own host work);
- ``signature``: :func:`heron.jax.lowering.signature_of` alone.

The differences from the executor's run are heron.jax's host work per call; per
leaf, what a model with hundreds of parameters pays.

Run: ``python benchmarks/jax_call_cost.py [--leaves 1,16,128] [--calls 50] [--runs 5]``.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

import jax
import jax.numpy as jnp

import heron.jax as heron_jax
from heron.jax.lowering import signature_of
from heron.runtime.core.resident import ResidentRunner


def _median_us(call: Callable[[], object], calls: int, runs: int) -> float:
    batches = []
    for _ in range(runs):
        begun = time.perf_counter()
        for _ in range(calls):
            call()
        batches.append((time.perf_counter() - begun) / calls)
    return statistics.median(batches) * 1e6


def measure(leaves: int, calls: int, runs: int) -> dict[str, float]:
    """Microseconds a call for a program of ``leaves`` parameters (see the module doc)."""
    weights = [jnp.full((8,), float(n), jnp.float32) for n in range(leaves)]
    jitted = heron_jax.jit(
        lambda *ws: ws[0] * 2.0, backend="interpreter", cache_dir=False, results="device"
    )
    jitted(*weights)  # compiled, and every argument adopted once
    program = jitted._program(tuple(weights), {})[0]
    runner, executable = program.runner, program.executable
    asking = ResidentRunner(executable, runner.pool)  # no type known to be immutable
    buffers = [runner._import(n, w) for n, w in enumerate(weights)]
    figures = {
        "heron.jax call": _median_us(lambda: jitted(*weights), calls, runs),
        "resident run": _median_us(lambda: runner(weights), calls, runs),
        "resident run, asking each array": _median_us(lambda: asking(weights), calls, runs),
        "executor run": _median_us(lambda: executable.execute(buffers), calls, runs),
        "signature": _median_us(lambda: signature_of(weights, {}), calls, runs),
    }
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--leaves", default="1,16,128", help="parameter counts, comma-separated")
    parser.add_argument("--calls", type=int, default=50)
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    counts = [int(n) for n in args.leaves.split(",")]
    print(
        f"heron.jax on the interpreter, jax {jax.__version__}; us a call (median of"
        f" {args.runs} batches of {args.calls})"
    )
    rows = {n: measure(n, args.calls, args.runs) for n in counts}
    names = list(next(iter(rows.values())))
    print(f"{'':34s}" + "".join(f"{f'{n} leaves':>14s}" for n in counts))
    for name in names:
        print(f"{name:34s}" + "".join(f"{rows[n][name]:14.1f}" for n in counts))
    print(
        f"{'heron.jax over the executor':34s}"
        + "".join(f"{rows[n]['heron.jax call'] - rows[n]['executor run']:14.1f}" for n in counts)
    )
    print(
        f"{'  the same, per leaf':34s}"
        + "".join(
            f"{(rows[n]['heron.jax call'] - rows[n]['executor run']) / n:14.2f}" for n in counts
        )
    )


if __name__ == "__main__":
    main()
