"""heron's compile of a whole model's training step, beside XLA:GPU's deviceless compile.

The corpora are small programs; a user compiles models. This lowers a GPT-style
training step written in plain jax (token and position embeddings, ``--layers``
pre-norm blocks of causal multi-head attention and a GELU MLP, a final layer
norm, logits tied to the embedding, softmax cross-entropy, gradients and an
AdamW update of every parameter), as jax lowers it for CUDA, and times heron on
it as ``opt_time.py`` times a corpus program: parsing and heron's HLO pipeline
for the h100 preset (``--full``: the whole compile to cubins, CUDA only), the
median of ``--runs`` runs after an untimed warm-up compile; with ``--xla``,
XLA:GPU's deviceless compile of the same text (heron[xla], docs/xla.md). Both
compilers see the same module: about 10,000 instructions at GPT-2 small's 12
layers, 3,000 dots. A quadratic step anywhere in the fusion passes shows here
first (it did: 54 s of HLO passes on GPT-2 small before the twenty-ninth
session's fixes, docs/benchmarks.md).

Run: ``python benchmarks/model_compile.py [--layers 12] [--d-model 768] [--heads 12]
[--seq 1024] [--batch 8] [--vocab 50257] [--bf16] [--runs 3] [--full] [--xla]
[--stages] [--save FILE.hlo] [--flax]``; ``--flax`` builds the step from flax's layers and
optax's AdamW instead (``flax_models.py``; needs flax and optax); ``--layers 1,4,12``
times several depths in one run (the growth with depth tells a quadratic step from a
slow linear one).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from opt_time import heron_pipeline, print_stages, time_heron, warm_up_heron, xla_columns  # noqa: E402


def training_step_hlo(
    layers: int, d_model: int, heads: int, seq: int, batch: int, vocab: int, bf16: bool
) -> str:
    """The step's HLO text as jax lowers it for CUDA (no device needed)."""
    import jax
    import jax.numpy as jnp

    from heron.jax.lowering import lower

    dtype = jnp.bfloat16 if bf16 else jnp.float32
    head = d_model // heads

    def layer_norm(x, scale, bias):
        x32 = x.astype(jnp.float32)
        mean = x32.mean(-1, keepdims=True)
        var = ((x32 - mean) ** 2).mean(-1, keepdims=True)
        return ((x32 - mean) * jax.lax.rsqrt(var + 1e-5) * scale + bias).astype(dtype)

    def block(x, p):
        h = layer_norm(x, p["ln1_scale"], p["ln1_bias"])
        q, k, v = ((h @ p[name].astype(dtype)).reshape(batch, seq, heads, head) for name in "qkv")
        scores = jnp.einsum("bqhd,bkhd->bhqk", q, k).astype(jnp.float32) / head**0.5
        causal = jnp.tril(jnp.ones((seq, seq), bool))
        scores = jnp.where(causal, scores, -1e9)
        weights = jax.nn.softmax(scores, axis=-1).astype(dtype)
        attended = jnp.einsum("bhqk,bkhd->bqhd", weights, v).reshape(batch, seq, d_model)
        x = x + attended @ p["o"].astype(dtype)
        h = layer_norm(x, p["ln2_scale"], p["ln2_bias"])
        h = jax.nn.gelu(h @ p["up"].astype(dtype) + p["up_bias"].astype(dtype))
        return x + h @ p["down"].astype(dtype) + p["down_bias"].astype(dtype)

    def loss(params, tokens, targets):
        x = (params["wte"][tokens] + params["wpe"][None]).astype(dtype)
        for p in params["blocks"]:
            x = block(x, p)
        x = layer_norm(x, params["lnf_scale"], params["lnf_bias"])
        logits = (x @ params["wte"].T.astype(dtype)).astype(jnp.float32)
        picked = jnp.take_along_axis(jax.nn.log_softmax(logits), targets[..., None], -1)
        return -picked.mean()

    def adamw(param, grad, m, v, count):
        m = 0.9 * m + 0.1 * grad
        v = 0.999 * v + 0.001 * grad * grad
        m_hat = m / (1 - 0.9**count)
        v_hat = v / (1 - 0.999**count)
        return param - 3e-4 * (m_hat / (jnp.sqrt(v_hat) + 1e-8) + 0.01 * param), m, v

    def step(params, m, v, count, tokens, targets):
        value, grads = jax.value_and_grad(loss)(params, tokens, targets)
        count = count + 1
        flat = jax.tree_util.tree_map(
            lambda p, g, m_, v_: adamw(p, g, m_, v_, count), params, grads, m, v
        )
        parts = [
            jax.tree_util.tree_map(lambda t, i=i: t[i], flat, is_leaf=_triple) for i in range(3)
        ]
        return (*parts, count, value)

    def _triple(node) -> bool:
        return isinstance(node, tuple) and len(node) == 3

    f32 = jnp.float32

    def spec(*shape):
        return jax.ShapeDtypeStruct(shape, f32)

    block_params = {
        "ln1_scale": spec(d_model),
        "ln1_bias": spec(d_model),
        "q": spec(d_model, d_model),
        "k": spec(d_model, d_model),
        "v": spec(d_model, d_model),
        "o": spec(d_model, d_model),
        "ln2_scale": spec(d_model),
        "ln2_bias": spec(d_model),
        "up": spec(d_model, 4 * d_model),
        "up_bias": spec(4 * d_model),
        "down": spec(4 * d_model, d_model),
        "down_bias": spec(d_model),
    }
    params = {
        "wte": spec(vocab, d_model),
        "wpe": spec(seq, d_model),
        "blocks": [dict(block_params) for _ in range(layers)],
        "lnf_scale": spec(d_model),
        "lnf_bias": spec(d_model),
    }
    tokens = jax.ShapeDtypeStruct((batch, seq), jnp.int32)
    count = jax.ShapeDtypeStruct((), jnp.int32)
    return lower(step, params, params, params, count, tokens, tokens, platform="cuda").hlo_text


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--layers", default="12", help="a depth, or several: 1,4,12")
    parser.add_argument("--d-model", type=int, default=768)
    parser.add_argument("--heads", type=int, default=12)
    parser.add_argument("--seq", type=int, default=1024)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--vocab", type=int, default=50257)
    parser.add_argument("--bf16", action="store_true", help="activations in bf16")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--full", action="store_true", help="the whole compile, to cubins")
    parser.add_argument("--xla", action="store_true", help="also time XLA:GPU's compile")
    parser.add_argument("--stages", action="store_true", help="with --full: where time goes")
    parser.add_argument("--save", type=Path, help="write the (last) module's HLO text here")
    parser.add_argument(
        "--flax", action="store_true", help="the step from flax's layers and optax's adamw"
    )
    args = parser.parse_args(argv)

    installation = None
    if args.xla:
        from heron.xla_compare import find_xla

        installation = find_xla()
    warm_up_heron(args.full)
    what = "whole compile" if args.full else "HLO passes"
    kind = "flax GPT-2" if args.flax else "GPT-style"
    print(f"{kind} training step, d_model {args.d_model}, {args.heads} heads, seq {args.seq},")
    precision = "bf16" if args.bf16 else "f32"
    print(f"batch {args.batch}, vocab {args.vocab}, {precision}; heron: {what}")
    header = f"{'layers':>6} {'instructions':>12} {'parse s':>8} {'heron s':>8} {'out':>7}"
    print(header + (f" {'XLA s':>8} {'heron/XLA':>9}" if args.xla else ""))
    profiles = []
    for layers in (int(n) for n in args.layers.split(",")):
        make = training_step_hlo
        if args.flax:
            from flax_models import gpt2_step_hlo as make
        text = make(layers, args.d_model, args.heads, args.seq, args.batch, args.vocab, args.bf16)
        if args.save:
            args.save.write_text(text)
        instructions = sum(1 for line in text.splitlines() if " = " in line)
        parse_s, heron_s, count, _, profile = time_heron(
            text, args.runs, lambda: heron_pipeline()[1], full=args.full
        )
        if profile is not None:
            profiles.append(profile)
        heron_total = parse_s + heron_s
        line = f"{layers:>6} {instructions:>12} {parse_s:>8.2f} {heron_total:>8.2f} {count:>7}"
        print(line + xla_columns(text, installation, args.runs, heron_total), flush=True)
    if args.stages and profiles:
        print_stages(profiles)
    print("(out: instructions after the passes; with --full, kernels)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
