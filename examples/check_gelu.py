"""Check `heron run examples/gelu.hlo` against GELU computed independently in float64.

Usage: python examples/check_gelu.py OUT.npz [--seed N]   (OUT.npz from `heron run ... --output`)

The run used random arguments drawn from the seed; this script draws the same
ones, evaluates 0.5 x (1 + tanh(0.79785 (x + 0.044708 x^3))) in float64 with
numpy, and compares. The module computes in bf16, rounding after every one of
its eight operations, so agreement is to a few bf16 ulps, not bit for bit.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

from heron.hlo.evaluator import random_arguments
from heron.hlo.npz_io import load_outputs
from heron.hlo.parser import parse_module_file

HERE = Path(__file__).resolve().parent


def gelu_reference(x: np.ndarray) -> np.ndarray:
    x = x.astype(np.float64)
    return 0.5 * x * (1.0 + np.tanh(0.79785 * (x + 0.044708 * x**3)))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("outputs", help="the .npz that `heron run --output` wrote")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    module = parse_module_file(HERE / "gelu.hlo")
    (x,) = random_arguments(module, seed=args.seed)
    (y,) = load_outputs(args.outputs)
    if y.shape != x.shape or y.dtype != x.dtype:
        print(f"FAIL: output is {y.dtype}{list(y.shape)}, expected {x.dtype}{list(x.shape)}")
        return 1
    reference = gelu_reference(x)
    error = np.abs(y.astype(np.float64) - reference)
    # Eight bf16 roundings (2**-9 relative each), plus tanh's rounding scaled by 0.5 |x|.
    allowed = 2.0**-5 * np.abs(reference) + 2.0**-8 * np.maximum(1.0, np.abs(x.astype(np.float64)))
    worst = int(np.argmax(error - allowed))
    print(
        f"{x.size} values; max |heron - float64 reference| = {error.max():.3g};"
        f" x in [{float(x.min()):.3g}, {float(x.max()):.3g}]"
    )
    if error.reshape(-1)[worst] > allowed.reshape(-1)[worst]:
        index = np.unravel_index(worst, x.shape)
        print(
            f"FAIL at {tuple(int(i) for i in index)}: x = {float(x[index])},"
            f" heron {float(y[index])}, reference {reference[index]:.6g}"
        )
        return 1
    print("OK: every value within bf16 rounding of the float64 reference")
    return 0


if __name__ == "__main__":
    sys.exit(main())
