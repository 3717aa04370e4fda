"""The interpreter device's speed on the seeds' GELU loop fusion, against the reference evaluator.

For each shape (the seeds' bf16[6,512,4096], 12.6M elements, and a
1M-element bf16[1024,1024]) the GELU module of examples/gelu.hlo is compiled
once for the interpreter emulating the h100 preset (compile time reported
apart), then run ``--runs``
times through :func:`heron.compiler.device_kernels.run_on_device` (upload,
launch, download: what ``heron run`` pays per kernel). The figure is the
median, also as elements per second (issue 14 asks for at least 5M/s on a
2-core machine); the reference evaluator's median on the same input, measured in the
same process, is the baseline: the interpreter simulates every thread of the
GPU launch (index arithmetic, masks, vector loads and stores) with numpy, the
evaluator runs one numpy call per HLO instruction, so the ratio is what the
SIMT simulation costs.

A shape that cannot run (an op the interpreter does not support yet) prints
why in its row instead of stopping the table.

Run: ``python benchmarks/interpreter.py [--runs N] [--only-small]``.
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

from benchlib.progress import tracked

from heron.compiler import Target, compile_fusion, fusions_of, run_on_device
from heron.hlo.evaluator import evaluate_module, random_arguments
from heron.hlo.parser import parse_module
from heron.runtime.core.registry import default_backends

ROOT = Path(__file__).resolve().parents[1]
SEED_SHAPE = (6, 512, 4096)
#: (label, dims): the seeds' shape, and 2**20 elements.
SHAPES = (("seeds' GELU", SEED_SHAPE), ("1M elements", (1024, 1024)))
#: The device the interpreter emulates (warps of 32).
TARGET = "h100"


def gelu_text(dims: tuple[int, ...]) -> str:
    """examples/gelu.hlo with its bf16[6,512,4096] replaced by ``dims``."""
    text = (ROOT / "examples" / "gelu.hlo").read_text()
    return text.replace(",".join(map(str, SEED_SHAPE)), ",".join(map(str, dims)))


def _median_seconds(action, runs: int) -> float:
    times = []
    for _ in tracked(range(runs), "runs"):
        start = time.perf_counter()
        action()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def measure(dims: tuple[int, ...], runs: int) -> dict[str, object]:
    module = parse_module(gelu_text(dims))
    arguments = random_arguments(module, seed=0)
    elements = arguments[0].size
    row: dict[str, object] = {"dims": dims, "elements": elements}
    row["reference"] = _median_seconds(lambda: evaluate_module(module, arguments), runs)
    try:
        target = Target.preset(TARGET)
        kernel = compile_fusion(fusions_of(module)[0], target, "interpreter")
        row["compile"] = kernel.seconds
        row["launch"] = f"{kernel.grid[0]}x{kernel.block[0]}"
        device = default_backends().create_device("interpreter", target)
        loaded = device.load_kernel(kernel.image)
        row["interpreter"] = _median_seconds(
            lambda: run_on_device(device, kernel, arguments, loaded=loaded), runs
        )
    except Exception as exc:  # a row that cannot run says why; the others still run
        row["error"] = f"{type(exc).__name__}: {exc}"
    return row


def print_table(rows: list[dict[str, object]], runs: int) -> None:
    print(f"GELU (examples/gelu.hlo) on the interpreter, median of {runs} runs")
    print(
        "| shape | elements | launch (blocks x threads) | compile s | interpreter s"
        " | elements/s | ns/element | reference s | interpreter / reference |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    for row in rows:
        shape = "bf16[" + ",".join(map(str, row["dims"])) + "]"
        reference = row["reference"]
        if "error" in row:
            print(
                f"| {shape} | {row['elements']} | - | - | not runnable: {row['error']}"
                f" | - | - | {reference:.3f} | - |"
            )
            continue
        seconds = row["interpreter"]
        print(
            f"| {shape} | {row['elements']} | {row['launch']} | {row['compile']:.2f}"
            f" | {seconds:.3f} | {row['elements'] / seconds / 1e6:.1f}M"
            f" | {seconds / row['elements'] * 1e9:.0f} | {reference:.3f}"
            f" | {seconds / reference:.0f}x |"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5, help="runs per figure (median)")
    parser.add_argument(
        "--only-small", action="store_true", help="skip the 12.6M-element seeds' shape"
    )
    args = parser.parse_args()
    shapes = [dims for label, dims in SHAPES if not (args.only_small and dims == SEED_SHAPE)]
    print_table([measure(dims, args.runs) for dims in shapes], args.runs)


if __name__ == "__main__":
    main()
