"""What heron and XLA:GPU launch for the ops of common layers at GPU size (issue 29).

    python benchmarks/launches_vs_xla.py [--target h100] [NAME ...]

Issue 29 asks that no heron kernel leave the device idle where XLA's fills it. The
GPU bundle's workloads are one set of GPU-size programs; this is a second, of the
reductions, normalisations, pools, scans and index ops that flax, equinox and haiku
layers and their losses lower to, each at a size a training step meets. Each is
lowered by jax from shapes alone and compiled by both compilers without a GPU
(``heron xla``'s machinery: XLA:GPU's deviceless compile through the ``heron[xla]``
extra or ``HERON_XLA_PYTHON``; without it the script says so and compares nothing),
and its kernels' launches (blocks x threads) are printed side by side, with the
largest kernel's thread count of each and a verdict:

- ``same``: each of heron's launches is one of XLA's (heron may make fewer kernels:
  XLA's small loop kernels between reductions are often fused in heron's);
- ``fewer threads``: heron's largest kernel has under a quarter of XLA's threads, the
  mark of a reduction or scan a loop emitter computes alone (a group norm's statistics
  before the reduction splitter: 2,048 threads against XLA's 524,288);
- ``differs``: anything else (another split, another unroll factor).

Nothing is timed; the launch shape is what predicted the GPU gaps issue 29 measured.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable


def _workloads() -> dict[str, tuple[Callable, list]]:
    import jax
    import jax.numpy as jnp
    from jax import lax

    shape = jax.ShapeDtypeStruct
    f32, bf16, s32 = jnp.float32, jnp.bfloat16, jnp.int32

    def normalised(x, axes):
        mean = jnp.mean(x, axis=axes, keepdims=True)
        var = jnp.var(x, axis=axes, keepdims=True)
        return (x - mean) * lax.rsqrt(var + 1e-5)

    def group_norm_nhwc(x):
        n, h, w, c = x.shape
        return normalised(x.reshape(n, h, w, 32, c // 32), (1, 2, 4)).reshape(x.shape)

    def group_norm_nchw(x):
        n, c, h, w = x.shape
        return normalised(x.reshape(n, 32, c // 32, h, w), (2, 3, 4)).reshape(x.shape)

    def cross_entropy(logits, labels):
        picked = jnp.take_along_axis(jax.nn.log_softmax(logits), labels[:, None], axis=1)
        return -jnp.mean(picked)

    def window(op, init, size, stride):
        return lambda x: lax.reduce_window(x, init, op, size, stride, "SAME")

    return {
        "batch_norm_nhwc": (lambda x: normalised(x, (0, 1, 2)), [shape((64, 56, 56, 256), f32)]),
        "instance_norm_nhwc": (lambda x: normalised(x, (1, 2)), [shape((64, 64, 64, 256), f32)]),
        "layer_norm_hwc": (lambda x: normalised(x, (1, 2, 3)), [shape((64, 32, 32, 512), f32)]),
        "group_norm_nhwc": (group_norm_nhwc, [shape((64, 64, 64, 512), f32)]),
        "group_norm_nchw": (group_norm_nchw, [shape((64, 512, 64, 64), f32)]),
        "global_avg_pool": (lambda x: jnp.mean(x, axis=(1, 2)), [shape((128, 56, 56, 512), f32)]),
        "max_pool": (
            window(lax.max, -jnp.inf, (1, 3, 3, 1), (1, 2, 2, 1)),
            [shape((64, 112, 112, 128), f32)],
        ),
        "avg_pool": (
            lambda x: window(lax.add, 0.0, (1, 2, 2, 1), (1, 2, 2, 1))(x) / 4,
            [shape((64, 112, 112, 128), f32)],
        ),
        "softmax_axis0": (lambda x: jax.nn.softmax(x, axis=0), [shape((8192, 8192), f32)]),
        "softmax_middle": (lambda x: jax.nn.softmax(x, axis=1), [shape((64, 1024, 1024), f32)]),
        "logsumexp_axis0": (lambda x: jax.nn.logsumexp(x, axis=0), [shape((16384, 8192), f32)]),
        "argmax_rows": (lambda x: jnp.argmax(x, axis=-1), [shape((32768, 4096), f32)]),
        "argmax_columns": (lambda x: jnp.argmax(x, axis=0), [shape((4096, 32768), f32)]),
        "argmax_all": (lambda x: jnp.argmax(x), [shape((1 << 26,), f32)]),
        "cumsum_axis0": (lambda x: jnp.cumsum(x, axis=0), [shape((4096, 4096), f32)]),
        "cumsum_flat": (lambda x: jnp.cumsum(x), [shape((1 << 24,), f32)]),
        "variance_all": (lambda x: jnp.var(x), [shape((1 << 26,), f32)]),
        "sum_squares_axes02": (
            lambda x: jnp.sum(x * x, axis=(0, 2)),
            [shape((64, 256, 4096), f32)],
        ),
        "mean_axes02": (lambda x: jnp.mean(x, axis=(0, 2)), [shape((512, 64, 512), f32)]),
        "cross_entropy": (cross_entropy, [shape((16384, 32000), f32), shape((16384,), s32)]),
        "one_hot": (
            lambda i: jax.nn.one_hot(i, 32000, dtype=bf16),
            [shape((16384,), s32)],
        ),
        "segment_sum": (
            lambda d, s: jax.ops.segment_sum(d, s, num_segments=4096),
            [shape((1 << 20, 64), f32), shape((1 << 20,), s32)],
        ),
        "sort_axis0": (lambda x: jnp.sort(x, axis=0), [shape((16384, 256), f32)]),
        "product_middle": (lambda x: jnp.prod(x, axis=1), [shape((4096, 4096, 4), f32)]),
        "any_nan": (lambda x: jnp.any(jnp.isnan(x)), [shape((1 << 26,), f32)]),
        "global_norm": (
            lambda a, b: jnp.sqrt(jnp.sum(a * a) + jnp.sum(b * b)),
            [shape((4096, 4096), f32), shape((8192, 1024), f32)],
        ),
        "layer_norm_bf16": (
            lambda x: normalised(x.astype(f32), (-1,)).astype(bf16),
            [shape((32768, 4096), bf16)],
        ),
        "top_k": (lambda x: jax.lax.top_k(x, 8), [shape((16384, 1024), f32)]),
        "concatenate": (
            lambda a, b: jnp.concatenate([a, b], axis=1),
            [shape((8192, 2048), f32), shape((8192, 1024), f32)],
        ),
        "pad_edge": (
            lambda x: jnp.pad(x, ((0, 0), (1, 1), (1, 1), (0, 0)), mode="edge"),
            [shape((64, 112, 112, 64), f32)],
        ),
        "dynamic_update_slice": (
            lambda cache, row, i: jax.lax.dynamic_update_slice(cache, row, (0, i, 0)),
            [shape((32, 4096, 1024), bf16), shape((32, 1, 1024), bf16), shape((), s32)],
        ),
        "gather_rows": (
            lambda table, ids: table[ids],
            [shape((65536, 1024), bf16), shape((131072,), s32)],
        ),
        "transpose_heads": (
            lambda x: jnp.transpose(x, (0, 2, 1, 3)) * 2,
            [shape((32, 2048, 16, 128), bf16)],
        ),
        "reverse": (lambda x: x[:, ::-1] + 1, [shape((8192, 8192), f32)]),
    }


def _threads(launch: str) -> int:
    blocks, threads = launch.split("x")
    return int(blocks) * int(threads)


def verdict(heron: list[str], xla: list[str]) -> str:
    """``same``, ``fewer threads`` or ``differs`` (the module docstring)."""
    if set(heron) <= set(xla):
        return "same"
    largest_heron = max(map(_threads, heron), default=0)
    largest_xla = max(map(_threads, xla), default=0)
    if largest_heron * 4 < largest_xla:
        return "fewer threads"
    return "differs"


def compare(name: str, function: Callable, shapes: list, target: str, installation) -> dict:
    """Both compilers' launches for ``function`` at ``shapes`` (heron stops after emission:
    the launches are decided by then)."""
    from heron.hlo.parser import parse_module
    from heron.jax.lowering import lower
    from heron.xla_compare.compare import compare_module

    module = parse_module(lower(function, *shapes).hlo_text)
    comparison = compare_module(module, name, target, installation=installation, heron_full=False)
    if comparison.xla_error:
        return {"name": name, "error": f"XLA: {comparison.xla_error}"}
    heron = [f"{p.heron.blocks}x{p.heron.threads}" for p in comparison.pairs if p.heron]
    xla = [f"{p.xla.blocks}x{p.xla.threads}" for p in comparison.pairs if p.xla]
    return {"name": name, "heron": heron, "xla": xla, "verdict": verdict(heron, xla)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("names", nargs="*", help="only these workloads")
    parser.add_argument("--target", default="h100", choices=("h100", "a100"))
    args = parser.parse_args(argv)
    workloads = _workloads()
    unknown = [n for n in args.names if n not in workloads]
    if unknown:
        parser.error(f"unknown workloads {unknown}; known: {', '.join(workloads)}")
    from heron.xla_compare.install import XlaNotInstalledError, find_xla

    try:
        installation = find_xla()
    except XlaNotInstalledError as exc:
        print(f"launches_vs_xla: nothing compared: {exc}")
        return 0
    print(f"target {args.target}; launches as blocks x threads, heron's then XLA:GPU's")
    print("| workload | heron | XLA:GPU | largest kernel's threads, heron / XLA | verdict |")
    print("|---|---|---|---|---|")
    for name in args.names or list(workloads):
        function, shapes = workloads[name]
        row = compare(name, function, shapes, args.target, installation)
        if "error" in row:
            print(f"| {name} | {row['error']} | | | |", flush=True)
            continue
        ratio = max(map(_threads, row["heron"]), default=0) / max(
            max(map(_threads, row["xla"]), default=0), 1
        )
        print(
            f"| {name} | {len(row['heron'])}: {', '.join(row['heron'])}"
            f" | {len(row['xla'])}: {', '.join(row['xla'])} | {ratio:.2f} | {row['verdict']} |",
            flush=True,
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
