"""Throughput of the reference evaluator against plain numpy.

Two figures, each the median of several runs:

1. a chain of ten elementwise ops (add, multiply, tanh, exponential, maximum,
   convert to bf16 and back, subtract, multiply, add) on f32[4096,4096]
   (16M elements), evaluated with ``evaluate_module`` and, as the baseline
   measured in the same process, written directly in numpy;
2. a reduce (sum over the minor dimension) of an f32[4096,4096] input, against
   ``numpy.add.reduce``.

The modules are written as HLO text and parsed (parse time is not counted).

The ratio says what the interpreter costs over the numpy it is made of: the
driver's per-instruction work, the shape checks, and numerics choices (the
pairwise reduction tree).

Run: ``python benchmarks/evaluator_throughput.py [--size N] [--repeats R]``.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

import ml_dtypes
import numpy as np
from benchlib.progress import tracked

from heron.hlo.evaluator import evaluate_module
from heron.hlo.ir import Module
from heron.hlo.parser import parse_module


def elementwise_chain_module(n: int) -> Module:
    return parse_module(
        f"""HloModule elementwise_chain

ENTRY chain {{
  x = f32[{n},{n}] parameter(0)
  y = f32[{n},{n}] parameter(1)
  a = f32[{n},{n}] add(x, y)
  m = f32[{n},{n}] multiply(a, x)
  t = f32[{n},{n}] tanh(m)
  e = f32[{n},{n}] exponential(t)
  mx = f32[{n},{n}] maximum(e, y)
  lo = bf16[{n},{n}] convert(mx)
  hi = f32[{n},{n}] convert(lo)
  s = f32[{n},{n}] subtract(hi, x)
  sq = f32[{n},{n}] multiply(s, s)
  ROOT r = f32[{n},{n}] add(sq, y)
}}
"""
    )


def elementwise_chain_numpy(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    a = x + y
    m = a * x
    t = np.tanh(m)
    e = np.exp(t)
    mx = np.maximum(e, y)
    hi = mx.astype(ml_dtypes.bfloat16).astype(np.float32)
    s = hi - x
    return s * s + y


def reduce_module(n: int) -> Module:
    return parse_module(
        f"""HloModule reduce

add {{
  p = f32[] parameter(0)
  q = f32[] parameter(1)
  ROOT s = f32[] add(p, q)
}}

ENTRY main {{
  x = f32[{n},{n}] parameter(0)
  zero = f32[] constant(0)
  ROOT r = f32[{n}] reduce(x, zero), dimensions={{1}}, to_apply=add
}}
"""
    )


def median_seconds(fn: Callable[[], object], repeats: int) -> float:
    times = []
    for _ in tracked(range(repeats), "runs"):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def report(label: str, elements: int, evaluator_s: float, numpy_s: float) -> None:
    print(
        f"{label}: evaluator {elements / evaluator_s / 1e6:8.1f} M elements/s"
        f" ({evaluator_s * 1e3:7.1f} ms), numpy {elements / numpy_s / 1e6:8.1f} M elements/s"
        f" ({numpy_s * 1e3:7.1f} ms), evaluator/numpy time ratio {evaluator_s / numpy_s:5.2f}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=4096, help="n for the f32[n,n] inputs")
    parser.add_argument("--repeats", type=int, default=5, help="runs per figure (median)")
    args = parser.parse_args()
    n = args.size
    repeats = max(3, args.repeats)
    rng = np.random.default_rng(0)
    x = rng.uniform(-1, 1, (n, n)).astype(np.float32)
    y = rng.uniform(-1, 1, (n, n)).astype(np.float32)

    chain = elementwise_chain_module(n)
    got = evaluate_module(chain, [x, y])
    want = elementwise_chain_numpy(x, y)
    # numpy's f32 tanh/exp may differ from the evaluator's correctly rounded ones by
    # an ulp, which the bf16 round trip can turn into one bf16 ulp (2**-8 relative).
    if not np.allclose(got, want, rtol=2e-2, atol=2e-2):
        raise SystemExit("elementwise chain: evaluator and numpy disagree")
    differ = np.count_nonzero(got != want)
    print(f"elementwise chain: {differ} of {n * n} results differ from numpy's (by <= a bf16 ulp)")
    report(
        f"elementwise chain (10 ops, f32[{n},{n}])",
        n * n,
        median_seconds(lambda: evaluate_module(chain, [x, y]), repeats),
        median_seconds(lambda: elementwise_chain_numpy(x, y), repeats),
    )

    reduce = reduce_module(n)
    got = evaluate_module(reduce, [x])
    want = np.add.reduce(x, axis=1, dtype=np.float64)
    if not np.allclose(got, want, rtol=1e-4, atol=1e-3):
        raise SystemExit("reduce: evaluator and numpy disagree")
    report(
        f"reduce (sum over dim 1, f32[{n},{n}])",
        n * n,
        median_seconds(lambda: evaluate_module(reduce, [x]), repeats),
        median_seconds(lambda: np.add.reduce(x, axis=1), repeats),
    )


if __name__ == "__main__":
    main()
