"""Training steps of real-size models as flax and optax users write them.

The corpora's models are small so that CI can run them; these are the sizes users
compile (GPT-2 small, ResNet-50, ViT-B/16, ConvNeXt-T at 224x224, a diffusion UNet),
built from flax.linen's layers and optax's optimizers so the compilers see the HLO
those libraries lower to, each lowered for CUDA without a device. They found what the
plain-jax step of ``model_compile.py`` and the corpora did not: multi-output fusion
merging every layer's AdamW update of one shape through the scalars they read, and a
column reduction whose shared-memory tiles ptxas refused (docs/benchmarks.md, "Real-size
flax models"). ``flax_compile.py`` times them; ``model_compile.py --flax`` is the GPT-2
step at other depths. Needs ``pip install flax optax`` beside jax.
"""

from __future__ import annotations


def gpt2_step_hlo(
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


def _classifier_step_hlo(model, optimizer, batch: int, size: int, mutable: bool) -> str:
    """An image classifier's step: cross-entropy, gradients, the optimizer's update (and
    BatchNorm's running statistics where ``mutable``)."""
    import jax
    import jax.numpy as jnp
    import optax

    from heron.jax.lowering import lower

    images = jax.ShapeDtypeStruct((batch, size, size, 3), jnp.float32)
    labels = jax.ShapeDtypeStruct((batch,), jnp.int32)
    variables = jax.eval_shape(lambda: model.init(jax.random.key(0), jnp.zeros((1, size, size, 3))))
    state = jax.eval_shape(optimizer.init, variables["params"])

    def step(variables, state, x, y):
        def loss(params):
            inputs = {**variables, "params": params}
            if mutable:
                logits, new = model.apply(inputs, x, mutable=["batch_stats"])
            else:
                logits, new = model.apply(inputs, x), {}
            value = optax.softmax_cross_entropy_with_integer_labels(logits.astype("float32"), y)
            return value.mean(), new

        (value, new), grads = jax.value_and_grad(loss, has_aux=True)(variables["params"])
        updates, state = optimizer.update(grads, state, variables["params"])
        params = optax.apply_updates(variables["params"], updates)
        return {**variables, **new, "params": params}, state, value

    return lower(step, variables, state, images, labels, platform="cuda").hlo_text


def resnet50_step_hlo(bf16: bool, batch: int = 32) -> str:
    """ResNet-50 (bottleneck blocks, BatchNorm in training mode), SGD with momentum."""
    import flax.linen as nn
    import jax.numpy as jnp
    import optax

    dtype = jnp.bfloat16 if bf16 else jnp.float32

    def norm():
        return nn.BatchNorm(use_running_average=False, dtype=dtype)

    def conv(features, kernel, strides=1):
        return nn.Conv(features, kernel, (strides, strides), dtype=dtype, use_bias=False)

    class Bottleneck(nn.Module):
        filters: int
        strides: int = 1

        @nn.compact
        def __call__(self, x):
            y = nn.relu(norm()(conv(self.filters, (1, 1))(x)))
            y = nn.relu(norm()(conv(self.filters, (3, 3), self.strides)(y)))
            y = norm()(conv(self.filters * 4, (1, 1))(y))
            if x.shape != y.shape:
                x = norm()(conv(self.filters * 4, (1, 1), self.strides)(x))
            return nn.relu(x + y)

    class ResNet50(nn.Module):
        @nn.compact
        def __call__(self, x):
            x = nn.relu(norm()(conv(64, (7, 7), 2)(x)))
            x = nn.max_pool(x, (3, 3), (2, 2), "SAME")
            for stage, blocks in enumerate((3, 4, 6, 3)):
                for block in range(blocks):
                    x = Bottleneck(64 * 2**stage, 2 if stage and not block else 1)(x)
            return nn.Dense(1000, dtype=dtype)(x.mean((1, 2)))

    return _classifier_step_hlo(ResNet50(), optax.sgd(0.1, 0.9), batch, 224, mutable=True)


def vit_step_hlo(bf16: bool, batch: int = 32) -> str:
    """ViT-B/16 (flax's MultiHeadDotProductAttention), AdamW."""
    import flax.linen as nn
    import jax.numpy as jnp
    import optax

    dtype = jnp.bfloat16 if bf16 else jnp.float32

    class Block(nn.Module):
        @nn.compact
        def __call__(self, x):
            x = x + nn.MultiHeadDotProductAttention(12, dtype=dtype)(nn.LayerNorm(dtype=dtype)(x))
            h = nn.gelu(nn.Dense(3072, dtype=dtype)(nn.LayerNorm(dtype=dtype)(x)))
            return x + nn.Dense(768, dtype=dtype)(h)

    class ViT(nn.Module):
        @nn.compact
        def __call__(self, x):
            x = nn.Conv(768, (16, 16), (16, 16), dtype=dtype)(x)
            x = x.reshape(x.shape[0], -1, 768)
            cls = self.param("cls", nn.initializers.zeros, (1, 1, 768)).astype(dtype)
            x = jnp.concatenate([jnp.tile(cls, (x.shape[0], 1, 1)), x], 1)
            position = self.param("position", nn.initializers.normal(0.02), (1, x.shape[1], 768))
            x = x + position.astype(dtype)
            for _ in range(12):
                x = Block()(x)
            return nn.Dense(1000, dtype=dtype)(nn.LayerNorm(dtype=dtype)(x[:, 0]))

    return _classifier_step_hlo(ViT(), optax.adamw(1e-3), batch, 224, mutable=False)


def convnext_step_hlo(bf16: bool, batch: int = 32) -> str:
    """ConvNeXt-T (depthwise 7x7 convolutions, LayerNorm over channels), AdamW."""
    import flax.linen as nn
    import jax.numpy as jnp
    import optax

    dtype = jnp.bfloat16 if bf16 else jnp.float32

    class Block(nn.Module):
        dim: int

        @nn.compact
        def __call__(self, x):
            y = nn.Conv(self.dim, (7, 7), feature_group_count=self.dim, dtype=dtype)(x)
            y = nn.gelu(nn.Dense(4 * self.dim, dtype=dtype)(nn.LayerNorm(dtype=dtype)(y)))
            y = nn.Dense(self.dim, dtype=dtype)(y)
            gamma = self.param("gamma", nn.initializers.constant(1e-6), (self.dim,))
            return x + y * gamma.astype(dtype)

    class ConvNeXt(nn.Module):
        @nn.compact
        def __call__(self, x):
            x = nn.LayerNorm(dtype=dtype)(nn.Conv(96, (4, 4), (4, 4), dtype=dtype)(x))
            for stage, (dim, depth) in enumerate(zip((96, 192, 384, 768), (3, 3, 9, 3))):
                if stage:
                    x = nn.Conv(dim, (2, 2), (2, 2), dtype=dtype)(nn.LayerNorm(dtype=dtype)(x))
                for _ in range(depth):
                    x = Block(dim)(x)
            return nn.Dense(1000, dtype=dtype)(nn.LayerNorm(dtype=dtype)(x.mean((1, 2))))

    return _classifier_step_hlo(ConvNeXt(), optax.adamw(1e-3), batch, 224, mutable=False)


def unet_step_hlo(bf16: bool, batch: int = 16) -> str:
    """A diffusion UNet at 64x64 (GroupNorm, swish, a time embedding, self-attention at
    the bottom, nearest upsampling and skip concatenations), its denoising loss, AdamW."""
    import flax.linen as nn
    import jax
    import jax.numpy as jnp
    import optax

    from heron.jax.lowering import lower

    dtype = jnp.bfloat16 if bf16 else jnp.float32

    def norm():
        return nn.GroupNorm(32, dtype=dtype)

    class ResBlock(nn.Module):
        channels: int

        @nn.compact
        def __call__(self, x, t):
            h = nn.Conv(self.channels, (3, 3), dtype=dtype)(nn.swish(norm()(x)))
            h = h + nn.Dense(self.channels, dtype=dtype)(nn.swish(t))[:, None, None, :]
            h = nn.Conv(self.channels, (3, 3), dtype=dtype)(nn.swish(norm()(h)))
            if x.shape[-1] != self.channels:
                x = nn.Conv(self.channels, (1, 1), dtype=dtype)(x)
            return x + h

    class UNet(nn.Module):
        @nn.compact
        def __call__(self, x, t):
            time = nn.Dense(256, dtype=dtype)(jnp.stack([jnp.sin(t), jnp.cos(t)], -1))
            x = nn.Conv(64, (3, 3), dtype=dtype)(x)
            skips = []
            for channels in (64, 128, 256):
                x = ResBlock(channels)(x, time)
                skips.append(x)
                x = nn.Conv(channels, (3, 3), (2, 2), dtype=dtype)(x)
            x = ResBlock(256)(x, time)
            b, h, w, c = x.shape
            tokens = norm()(x).reshape(b, h * w, c)
            x = x + nn.MultiHeadDotProductAttention(4, dtype=dtype)(tokens).reshape(b, h, w, c)
            for channels in (256, 128, 64):
                x = jax.image.resize(x, (b, 2 * x.shape[1], 2 * x.shape[2], x.shape[3]), "nearest")
                x = ResBlock(channels)(jnp.concatenate([x, skips.pop()], -1), time)
            return nn.Conv(3, (3, 3), dtype=dtype)(nn.swish(norm()(x)))

    model, optimizer, size = UNet(), optax.adamw(1e-3), 64
    images = jax.ShapeDtypeStruct((batch, size, size, 3), jnp.float32)
    times = jax.ShapeDtypeStruct((batch,), jnp.float32)
    params = jax.eval_shape(
        lambda: model.init(jax.random.key(0), jnp.zeros((1, size, size, 3)), jnp.zeros((1,)))
    )
    state = jax.eval_shape(optimizer.init, params)

    def step(params, state, x, t):
        def loss(p):
            return jnp.mean((model.apply(p, x, t).astype(jnp.float32) - x) ** 2)

        value, grads = jax.value_and_grad(loss)(params)
        updates, state = optimizer.update(grads, state, params)
        return optax.apply_updates(params, updates), state, value

    return lower(step, params, state, images, times, platform="cuda").hlo_text


#: The models ``flax_compile.py`` times: name -> step builder (bf16 activations or not).
MODELS = {
    "gpt2": lambda bf16: gpt2_step_hlo(12, 768, 12, 1024, 8, 50257, bf16),
    "resnet50": resnet50_step_hlo,
    "vit_b16": vit_step_hlo,
    "convnext_t": convnext_step_hlo,
    "unet": unet_step_hlo,
}
