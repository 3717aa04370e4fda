"""heron's whole compile of real-size flax models' training steps beside XLA:GPU's.

Each model of ``flax_models.MODELS`` (GPT-2 small, ResNet-50, ViT-B/16, ConvNeXt-T, a
diffusion UNet; f32, or bf16 activations with ``--bf16``) is lowered for CUDA without a
device and compiled whole for the h100 preset, to cubins (``opt_time.py --full``'s
compile: the HLO pipeline, scheduling, buffer assignment, thunks and every kernel
through LLVM and ptxas), the median of ``--runs`` runs after an untimed warm-up
compile; with ``--xla``, XLA:GPU's deviceless compile of the same text in the same run
(heron[xla], docs/xla.md). A model heron refuses prints the refusal in its row.

Run: ``python benchmarks/flax_compile.py [--bf16] [--runs 1] [--xla] [--only NAME,...]``
(needs ``pip install flax optax`` beside heron[jax]).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from benchlib.selection import selected  # noqa: E402
from flax_models import MODELS  # noqa: E402
from opt_time import heron_pipeline, time_heron, warm_up_heron, xla_columns  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bf16", action="store_true", help="activations in bf16")
    parser.add_argument("--runs", type=int, default=1)
    parser.add_argument("--xla", action="store_true", help="also time XLA:GPU's compile")
    parser.add_argument("--only", help="comma-separated model names")
    args = parser.parse_args(argv)
    names = selected(parser, args.only, MODELS, "model")

    installation = None
    if args.xla:
        from heron.xla_compare import find_xla

        installation = find_xla()
    warm_up_heron(True)
    precision = "bf16 activations" if args.bf16 else "f32"
    print(f"flax training steps, {precision}; whole compile for h100, median of {args.runs}")
    header = f"{'model':<12} {'lines':>6} {'heron s':>8} {'kernels':>7}"
    print(header + (f" {'XLA s':>8} {'heron/XLA':>9}" if installation else ""))
    for name in names:
        text = MODELS[name](args.bf16)
        lines = len(text.splitlines())
        try:
            parse_s, heron_s, kernels, _, _ = time_heron(
                text, args.runs, lambda: heron_pipeline()[1], full=True
            )
        except Exception as exc:  # a refusal is this benchmark's finding: print it
            print(f"{name:<12} {lines:>6} refused: {exc}", flush=True)
            continue
        seconds = parse_s + heron_s
        line = f"{name:<12} {lines:>6} {seconds:>8.2f} {kernels:>7}"
        print(line + xla_columns(text, installation, args.runs, seconds), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
