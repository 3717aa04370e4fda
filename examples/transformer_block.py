"""A transformer block written in JAX, compiled by heron and run on the default backend.

    python examples/transformer_block.py [--backend auto] [--out DIR]

The block is what a user writes (pre-norm, causal multi-head attention, a GELU
MLP, two residuals) over a parameter pytree. ``heron.jax.jit`` lowers it with
jax on the CPU, compiles it with heron into an executable (fusions, thunks,
buffer assignment, kernel images), runs it on the chosen device (the
interpreter when no GPU is here), and the result is checked against jax's
own CPU result. The executable is saved as an artefact that ``heron-run``
runs in an install without the compiler:

    heron-run DIR/transformer_block.heron --inputs DIR/inputs.npz --output DIR/out.npz

``--report PAGE.html`` also writes the ``heron report`` page of the block (the
module ``heron.jax.lower`` gives, compiled for the default target): the fusion
graph, each kernel, the thunks and memory over time, in one HTML file.

Exit status 0 when heron agrees with jax, 1 when not.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

import heron.jax
from heron.hlo.npz_io import save_inputs

D_MODEL, HEADS, SEQUENCE, HIDDEN = 64, 4, 16, 128


def layernorm(x, gamma, beta, eps=1e-5):
    mean = jnp.mean(x, axis=-1, keepdims=True)
    var = jnp.mean(jnp.square(x - mean), axis=-1, keepdims=True)
    return (x - mean) * jax.lax.rsqrt(var + eps) * gamma + beta


def attention(x, p):
    q, k, v = (x @ p[name] for name in ("wq", "wk", "wv"))
    split = lambda t: t.reshape(SEQUENCE, HEADS, D_MODEL // HEADS).transpose(1, 0, 2)  # noqa: E731
    q, k, v = split(q), split(k), split(v)
    scores = q @ k.transpose(0, 2, 1) / np.sqrt(D_MODEL // HEADS).astype(np.float32)
    mask = jnp.tril(jnp.ones((SEQUENCE, SEQUENCE), bool))
    weights = jax.nn.softmax(jnp.where(mask, scores, -1e9), axis=-1)
    heads = (weights @ v).transpose(1, 0, 2).reshape(SEQUENCE, D_MODEL)
    return heads @ p["wo"]


def block(params, x):
    x = x + attention(layernorm(x, params["ln1_g"], params["ln1_b"]), params["attn"])
    h = layernorm(x, params["ln2_g"], params["ln2_b"])
    mlp = params["mlp"]
    return x + jax.nn.gelu(h @ mlp["w1"] + mlp["b1"]) @ mlp["w2"] + mlp["b2"]


def parameters(rng: np.random.Generator):
    def normal(*shape, scale=0.1):
        return (rng.standard_normal(shape) * scale).astype(np.float32)

    params = {
        "ln1_g": 1 + normal(D_MODEL),
        "ln1_b": normal(D_MODEL),
        "ln2_g": 1 + normal(D_MODEL),
        "ln2_b": normal(D_MODEL),
        "attn": {name: normal(D_MODEL, D_MODEL) for name in ("wq", "wk", "wv", "wo")},
        "mlp": {
            "w1": normal(D_MODEL, HIDDEN),
            "b1": normal(HIDDEN),
            "w2": normal(HIDDEN, D_MODEL),
            "b2": normal(D_MODEL),
        },
    }
    return params, normal(SEQUENCE, D_MODEL, scale=1.0)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", default="auto", help="auto, interpreter, cuda or rocm")
    parser.add_argument("--out", type=Path, default=Path("transformer-block-out"))
    parser.add_argument("--report", type=Path, help="write the heron report page here")
    args = parser.parse_args(argv)

    params, x = parameters(np.random.default_rng(0))
    jitted = heron.jax.jit(block, backend=args.backend)
    start = time.perf_counter()
    result = np.asarray(jitted(params, x))
    first = time.perf_counter() - start
    start = time.perf_counter()
    jitted(params, x)
    second = time.perf_counter() - start
    expected = np.asarray(jax.jit(block)(params, x))

    stats = jitted.last_run(params, x)
    artefact = jitted.artefact(params, x)
    print(f"heron.jax.jit(block) on {jitted.backend}: {SEQUENCE}x{D_MODEL}, {HEADS} heads")
    print(f"  first call {first:.2f} s (lower, compile, load, run); second {second:.3f} s")
    print(
        f"  {stats.kernel_launches} kernel launches a call, {len(artefact.program)} thunks,"
        f" {sum(a.size for a in artefact.allocations):,} bytes of device memory"
    )
    error = float(np.max(np.abs(result - expected)))
    scale = float(np.max(np.abs(expected)))
    agrees = error <= 1e-4 * scale
    print(f"  max |heron - jax| = {error:.3g} (jax's max |value| {scale:.3g}):", end=" ")
    print("agrees" if agrees else "DISAGREES")

    args.out.mkdir(parents=True, exist_ok=True)
    artefact_path = args.out / "transformer_block.heron"
    artefact.save(artefact_path)
    leaves = [np.asarray(leaf) for leaf in jax.tree_util.tree_leaves((params, x))]
    save_inputs(args.out / "inputs.npz", leaves)
    print(f"  artefact: {artefact_path} (heron-run {artefact_path} --inputs {args.out}/inputs.npz)")
    if args.report is not None:
        write_report(heron.jax.lower(block, params, x).module, args.report)
    return 0 if agrees else 1


def write_report(module, path: Path) -> None:
    """The ``heron report`` page of ``module`` for the default target, at ``path``."""
    from heron.compiler import Target
    from heron.report import build_report

    built = build_report(module, Target.resolve(None, None), source="examples/transformer_block.py")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(built.html)
    report = built.report
    print(
        f"  report: {path} ({len(report.fusion_nodes)} fusions, {len(report.kernels)} kernels,"
        f" peak memory {report.memory.peak_bytes:,} bytes): open it in a browser"
    )


if __name__ == "__main__":
    sys.exit(main())
