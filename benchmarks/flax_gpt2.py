"""A GPT-2 training step as flax and optax users write it, for ``model_compile.py --flax``.

``model_compile.py``'s own step is plain jax; this one is built from flax.linen's
layers (``Embed``, ``LayerNorm``, ``Dense`` and the embedding's ``attend`` for tied
logits) and optax's ``adamw`` and cross-entropy, so the compilers see the HLO those
libraries lower to: their layer norms, their optimizer's pytree of updates and bias
corrections. It found what the plain step did not: multi-output fusion merging every
layer's AdamW update of one shape through the scalars they read (docs/benchmarks.md,
"No sibling merges through a scalar"). Needs ``pip install flax optax`` beside jax.
"""

from __future__ import annotations


def flax_training_step_hlo(
    layers: int, d_model: int, heads: int, seq: int, batch: int, vocab: int, bf16: bool
) -> str:
    """The step's HLO text as jax lowers it for CUDA (no device needed)."""
    import flax.linen as nn
    import jax
    import jax.numpy as jnp
    import optax

    from heron.jax.lowering import lower

    dtype = jnp.bfloat16 if bf16 else jnp.float32
    head = d_model // heads

    class Attention(nn.Module):
        @nn.compact
        def __call__(self, x):
            b, s, d = x.shape
            q, k, v = jnp.split(nn.Dense(3 * d, dtype=dtype)(x), 3, axis=-1)

            def split_heads(t):
                return t.reshape(b, s, heads, head).transpose(0, 2, 1, 3)

            q, k, v = split_heads(q), split_heads(k), split_heads(v)
            scores = (q @ k.transpose(0, 1, 3, 2)) * (1.0 / head**0.5)
            causal = jnp.tril(jnp.ones((s, s), bool))
            scores = jnp.where(causal, scores, jnp.finfo(scores.dtype).min)
            weights = jax.nn.softmax(scores.astype(jnp.float32), axis=-1).astype(dtype)
            attended = (weights @ v).transpose(0, 2, 1, 3).reshape(b, s, d)
            return nn.Dense(d, dtype=dtype)(attended)

    class Block(nn.Module):
        @nn.compact
        def __call__(self, x):
            x = x + Attention()(nn.LayerNorm(dtype=dtype)(x))
            h = nn.Dense(4 * d_model, dtype=dtype)(nn.LayerNorm(dtype=dtype)(x))
            return x + nn.Dense(d_model, dtype=dtype)(nn.gelu(h))

    class GPT(nn.Module):
        @nn.compact
        def __call__(self, tokens):
            embed = nn.Embed(vocab, d_model, dtype=dtype)
            positions = nn.Embed(seq, d_model, dtype=dtype)(jnp.arange(tokens.shape[1]))
            x = embed(tokens) + positions
            for _ in range(layers):
                x = Block()(x)
            return embed.attend(nn.LayerNorm(dtype=dtype)(x))

    model = GPT()
    optimizer = optax.adamw(3e-4)
    tokens = jax.ShapeDtypeStruct((batch, seq), jnp.int32)
    params = jax.eval_shape(lambda: model.init(jax.random.key(0), jnp.zeros((batch, seq), "int32")))
    state = jax.eval_shape(optimizer.init, params)

    def step(params, state, tokens, targets):
        def loss(p):
            logits = model.apply(p, tokens).astype(jnp.float32)
            return optax.softmax_cross_entropy_with_integer_labels(logits, targets).mean()

        value, grads = jax.value_and_grad(loss)(params)
        updates, state = optimizer.update(grads, state, params)
        return optax.apply_updates(params, updates), state, value

    return lower(step, params, state, tokens, tokens, platform="cuda").hlo_text
