"""The model corpus: models and training steps built with flax (linen), equinox, dm-haiku, optax
and Hugging Face transformers' Flax models, and environments of pgx and gymnax played at random.

programs/ holds JAX written by hand; these are what a user of the libraries
writes: ``nn.Dense``, ``eqx.nn.GRUCell``, ``hk.BatchNorm``, ``optax.adamw``
with a cosine schedule. Each is a :class:`programs.definitions.Program` (the
same record, imported): a name, a description, the function JAX lowers, its
example arguments drawn from the program's own seed, and tags saying what it
covers (the library, the layer families, the optimizer).

The parameters and the optimizer state are *arguments* of the function, as a
training loop passes them (their leaves in ``jax.tree.leaves`` order are the
entry's parameters), never constants closed over: a compiler that folded them
would be measured on something no user runs. Shapes are tiny (a batch of 2 to
4, features of 4 to 16): every model is compiled and run by heron's
interpreter in CI, and the programs are about what the compiler decides.

``programs/generate.py --corpus models`` writes the files (``nox -s models``).
"""

from __future__ import annotations

import functools
import importlib.metadata
from collections.abc import Callable
from typing import Any

import equinox as eqx
import flax
import flax.linen as nn
import gymnax
import haiku as hk
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pgx
import transformers
from flax import nnx
from jax import lax
from jax.ad_checkpoint import checkpoint_name
from jax.experimental import sparse
from jax.flatten_util import ravel_pytree
from optax import contrib as optax_contrib

from programs.definitions import Program, integers, normal, uniform

PROGRAMS: list[Program] = []
#: The libraries' versions, written into models/index.json (the noxfile pins them).
LIBRARY_VERSIONS = {
    "flax": flax.__version__,
    "equinox": eqx.__version__,
    "dm-haiku": hk.__version__,
    "optax": optax.__version__,
    "transformers": transformers.__version__,
    "pgx": importlib.metadata.version("pgx"),
    "gymnax": importlib.metadata.version("gymnax"),  # no __version__
}

#: XLA's debug options for the XLA:GPU compiles of programs/generate.py: the optimized
#: module is dumped without metadata, which XLA 0.12 gives every instruction only to
#: repeat its name (``scheduling_name``) and which takes a third of the file's bytes.
XLA_OPTIONS = {"xla_dump_disable_metadata": True}

#: Sizes every model shares: a batch, input features, hidden features, classes.
BATCH, FEATURES, HIDDEN, CLASSES = 4, 8, 16, 4
#: Images: NHWC batches of 8x8 pictures with 3 channels.
IMAGE = (BATCH, 8, 8, 3)
#: The images of the CNN training steps: 10x10, so that the weight gradient's im2col
#: concatenates 100 patches (heron refuses more than a fusion's 96 operands today).
TRAINING_IMAGE = (2, 10, 10, 3)
#: Sequences: steps, a vocabulary for token models.
STEPS, VOCAB = 6, 16


def add(
    name: str,
    library: str,
    description: str,
    function: Callable[..., Any],
    make_arguments: Callable[[np.random.Generator], tuple[Any, ...]],
    *tags: str,
    platform: str = "cpu",
) -> None:
    """Register a model; ``library`` (flax, equinox, haiku, optax) is one of its tags;
    ``platform``: what jax lowers it for (``Program.platform``)."""
    PROGRAMS.append(
        Program(name, description, function, make_arguments, (library, *tags), platform)
    )


# -- what every model's arguments are made of ------------------------------------------------


def init_key(rng: np.random.Generator) -> jax.Array:
    """A raw threefry key (u32[2]) from the program's generator, for a library's init."""
    return jax.random.PRNGKey(int(rng.integers(2**31)))


def key(rng: np.random.Generator) -> np.ndarray:
    """A raw key as an argument, for a model that draws random bits (dropout)."""
    return np.asarray(init_key(rng))


def as_numpy(tree: Any) -> Any:
    """A pytree of jax arrays as numpy arrays: the committed inputs are host data."""
    return jax.tree.map(np.asarray, tree)


def images(rng: np.random.Generator) -> np.ndarray:
    return normal(rng, *IMAGE)


def labels(rng: np.random.Generator) -> np.ndarray:
    return integers(rng, BATCH, high=CLASSES)


def tokens(rng: np.random.Generator, *shape: int) -> np.ndarray:
    return integers(rng, *shape, high=VOCAB)


def cross_entropy(logits: jax.Array, targets: jax.Array) -> jax.Array:
    """Mean softmax cross-entropy of integer class targets (one-hot: no gather, whose
    gradient is a scatter, in every training step; the embedding steps have those)."""
    one_hot = jax.nn.one_hot(targets, logits.shape[-1], dtype=logits.dtype)
    return optax.softmax_cross_entropy(logits, one_hot).mean()


def train_step(
    loss: Callable[..., jax.Array], optimizer: optax.GradientTransformation
) -> Callable[..., tuple[Any, Any, jax.Array]]:
    """One optimizer step: ``step(params, opt_state, *batch) -> (params, opt_state, loss)``,
    the gradient of ``loss(params, *batch)`` through ``optimizer``."""

    def step(params, opt_state, *batch):
        value, grads = jax.value_and_grad(loss)(params, *batch)
        updates, opt_state = optimizer.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, value

    return step


def with_optimizer_state(
    optimizer: optax.GradientTransformation,
    make: Callable[[np.random.Generator], tuple[Any, ...]],
    steps_taken: int = 3,
) -> Callable[[np.random.Generator], tuple[Any, ...]]:
    """``make(rng)`` is ``(params, *batch)``; the step's arguments are ``(params,
    opt_state, *batch)`` with the state of ``optimizer`` after ``steps_taken`` updates of
    small random gradients (so that moments are not zeros and a schedule is past its
    first step)."""

    def arguments(rng: np.random.Generator):
        params, *batch = make(rng)
        state = optimizer.init(params)
        for _ in range(steps_taken):
            grads = jax.tree.map(lambda p: normal(rng, *p.shape, scale=0.1).astype(p.dtype), params)
            _, state = optimizer.update(grads, state, params)
        return (params, as_numpy(state), *batch)

    return arguments


# -- flax (linen) ------------------------------------------------------------------------------


def flax_params(module: nn.Module, rng: np.random.Generator, *inputs: Any, **kwargs: Any) -> Any:
    """``module.init``'s variables for ``inputs``, as numpy."""
    return as_numpy(module.init(init_key(rng), *inputs, **kwargs))


def with_running_statistics(variables: dict[str, Any], rng: np.random.Generator) -> dict:
    """flax variables whose BatchNorm running statistics are drawn (means around 0,
    variances in [0.5, 1.5]) instead of init's zeros and ones, under which a normalisation
    that ignored them would still give the right numbers."""
    statistics = {
        layer: {
            "mean": normal(rng, *moments["mean"].shape, scale=0.5),
            "var": uniform(rng, *moments["var"].shape, low=0.5, high=1.5),
        }
        for layer, moments in variables["batch_stats"].items()
    }
    return {**variables, "batch_stats": statistics}


class FlaxMLP(nn.Module):
    hidden: int = HIDDEN
    classes: int = CLASSES

    @nn.compact
    def __call__(self, x):
        return nn.Dense(self.classes)(nn.relu(nn.Dense(self.hidden)(x)))


class FlaxCNN(nn.Module):
    """Conv 3x3, ReLU, 2x2 pooling, dense head: the smallest image classifier."""

    pool: str = "avg"
    features: int = 8

    @nn.compact
    def __call__(self, x):
        x = nn.relu(nn.Conv(self.features, (3, 3))(x))
        pool = nn.avg_pool if self.pool == "avg" else nn.max_pool
        x = pool(x, (2, 2), strides=(2, 2))
        return nn.Dense(CLASSES)(x.reshape(x.shape[0], -1))


def _flax_apply(module: nn.Module) -> Callable[..., Any]:
    return lambda variables, *inputs: module.apply(variables, *inputs)


def _flax_loss(module: nn.Module) -> Callable[..., jax.Array]:
    return lambda params, x, y: cross_entropy(module.apply({"params": params}, x), y)


def _flax_classifier_batch(module: nn.Module, inputs: Callable[[np.random.Generator], Any]):
    def make(rng):
        x = inputs(rng)
        return flax_params(module, rng, x)["params"], x, labels(rng)

    return make


add(
    "flax_mlp",
    "flax",
    "nn.Dense(16), ReLU, nn.Dense(4) on f32 [4,8]",
    _flax_apply(FlaxMLP()),
    lambda r: (flax_params(FlaxMLP(), r, normal(r, BATCH, FEATURES)), normal(r, BATCH, FEATURES)),
    "mlp",
    "forward",
)
_SGD = optax.sgd(0.05)
_SGD_MOMENTUM = optax.sgd(0.05, momentum=0.9)
add(
    "flax_mlp_sgd_momentum_step",
    "flax",
    "training step of the flax MLP: cross-entropy, optax.sgd(momentum=0.9)",
    train_step(_flax_loss(FlaxMLP()), _SGD_MOMENTUM),
    with_optimizer_state(
        _SGD_MOMENTUM, _flax_classifier_batch(FlaxMLP(), lambda r: normal(r, BATCH, FEATURES))
    ),
    "mlp",
    "training",
    "optimizer",
    "sgd-momentum",
)
add(
    "flax_cnn",
    "flax",
    "nn.Conv(8, 3x3), ReLU, nn.avg_pool 2x2, nn.Dense(4) on NHWC f32 [4,8,8,3]",
    _flax_apply(FlaxCNN()),
    lambda r: (flax_params(FlaxCNN(), r, images(r)), images(r)),
    "cnn",
    "pooling",
    "forward",
)
_ADAM = optax.adam(1e-3)
_FLAX_TRAINED_CNN = FlaxCNN(pool="max", features=4)
add(
    "flax_cnn_adam_step",
    "flax",
    "training step of a flax CNN (nn.Conv(4, 3x3), ReLU, nn.max_pool, nn.Dense) with optax.adam"
    " on NHWC f32 [2,10,10,3]",
    train_step(_flax_loss(_FLAX_TRAINED_CNN), _ADAM),
    with_optimizer_state(
        _ADAM,
        lambda r: (
            flax_params(_FLAX_TRAINED_CNN, r, normal(r, *TRAINING_IMAGE))["params"],
            normal(r, *TRAINING_IMAGE),
            labels(r)[: TRAINING_IMAGE[0]],
        ),
    ),
    "cnn",
    "pooling",
    "training",
    "optimizer",
    "adam",
)


class FlaxBatchNormMLP(nn.Module):
    """Dense (no bias: BatchNorm's offset is one), BatchNorm, ReLU, Dense."""

    @nn.compact
    def __call__(self, x, train: bool):
        x = nn.Dense(HIDDEN, use_bias=False)(x)
        x = nn.BatchNorm(use_running_average=not train, momentum=0.9)(x)
        return nn.Dense(CLASSES)(nn.relu(x))


def _flax_batchnorm_step(optimizer: optax.GradientTransformation):
    """A training step that also updates BatchNorm's running statistics (flax's
    ``mutable=["batch_stats"]``): returns params, optimizer state, statistics, loss."""
    module = FlaxBatchNormMLP()

    def loss(params, batch_stats, x, y):
        logits, updates = module.apply(
            {"params": params, "batch_stats": batch_stats}, x, True, mutable=["batch_stats"]
        )
        return cross_entropy(logits, y), updates["batch_stats"]

    def step(params, opt_state, batch_stats, x, y):
        (value, batch_stats), grads = jax.value_and_grad(loss, has_aux=True)(
            params, batch_stats, x, y
        )
        updates, opt_state = optimizer.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, batch_stats, value

    def make(rng):
        x = normal(rng, BATCH, FEATURES)
        variables = flax_params(module, rng, x, False)
        return variables["params"], variables["batch_stats"], x, labels(rng)

    return step, with_optimizer_state(optimizer, make)


add(
    "flax_batchnorm_sgd_step",
    "flax",
    "training step through nn.BatchNorm in train mode (batch statistics, running averages"
    " updated), optax.sgd",
    *_flax_batchnorm_step(_SGD),
    "batchnorm",
    "normalization",
    "training",
    "optimizer",
    "sgd",
)
add(
    "flax_batchnorm_inference",
    "flax",
    "nn.BatchNorm with its running averages (inference) between two dense layers",
    lambda variables, x: FlaxBatchNormMLP().apply(variables, x, False),
    lambda r: (
        with_running_statistics(
            flax_params(FlaxBatchNormMLP(), r, normal(r, BATCH, FEATURES), False), r
        ),
        normal(r, BATCH, FEATURES),
    ),
    "batchnorm",
    "normalization",
    "forward",
)


class FlaxConvGroupNorm(nn.Module):
    @nn.compact
    def __call__(self, x):
        x = nn.Conv(8, (3, 3))(x)
        return nn.swish(nn.GroupNorm(num_groups=4)(x))


add(
    "flax_conv_groupnorm",
    "flax",
    "nn.Conv(8, 3x3), nn.GroupNorm(4 groups), swish on NHWC f32 [4,8,8,3]",
    _flax_apply(FlaxConvGroupNorm()),
    lambda r: (flax_params(FlaxConvGroupNorm(), r, images(r)), images(r)),
    "cnn",
    "groupnorm",
    "normalization",
    "forward",
)


class FlaxNorms(nn.Module):
    @nn.compact
    def __call__(self, x):
        return nn.RMSNorm()(nn.Dense(HIDDEN)(nn.LayerNorm()(x)))


add(
    "flax_layernorm_rmsnorm",
    "flax",
    "nn.LayerNorm, nn.Dense(16), nn.RMSNorm on f32 [4,8]",
    _flax_apply(FlaxNorms()),
    lambda r: (flax_params(FlaxNorms(), r, normal(r, BATCH, FEATURES)), normal(r, BATCH, FEATURES)),
    "layernorm",
    "rmsnorm",
    "normalization",
    "forward",
)


class FlaxDropoutMLP(nn.Module):
    @nn.compact
    def __call__(self, x):
        x = nn.relu(nn.Dense(HIDDEN)(x))
        x = nn.Dropout(0.3, deterministic=False)(x)
        return nn.Dense(CLASSES)(x)


add(
    "flax_dropout",
    "flax",
    "nn.Dense, ReLU, nn.Dropout(0.3) in train mode with a raw u32[2] key, nn.Dense",
    lambda variables, dropout_key, x: FlaxDropoutMLP().apply(
        variables, x, rngs={"dropout": dropout_key}
    ),
    lambda r: (
        flax_params(FlaxDropoutMLP(), r, normal(r, BATCH, FEATURES)),
        key(r),
        normal(r, BATCH, FEATURES),
    ),
    "dropout",
    "random",
    "forward",
)


class FlaxTransformerBlock(nn.Module):
    """Pre-RMSNorm causal self-attention (2 heads) and a GELU MLP, both residual; the
    projections without biases (as in many current transformers)."""

    @nn.compact
    def __call__(self, x):
        mask = nn.make_causal_mask(jnp.ones(x.shape[:2]))
        h = nn.MultiHeadDotProductAttention(num_heads=2, use_bias=False)(nn.RMSNorm()(x), mask=mask)
        x = x + h
        h = nn.Dense(2 * x.shape[-1], use_bias=False)(nn.RMSNorm()(x))
        return x + nn.Dense(x.shape[-1], use_bias=False)(nn.gelu(h))


#: Transformer inputs: [batch 2, sequence 6, model 8].
_SEQUENCE = (2, STEPS, FEATURES)


def _sequence(rng):
    return normal(rng, *_SEQUENCE)


add(
    "flax_transformer_block",
    "flax",
    "pre-norm transformer block: nn.RMSNorm, nn.MultiHeadDotProductAttention (2 heads,"
    " causal mask), GELU MLP, residuals, on f32 [2,6,8]",
    _flax_apply(FlaxTransformerBlock()),
    lambda r: (flax_params(FlaxTransformerBlock(), r, _sequence(r)), _sequence(r)),
    "transformer",
    "attention",
    "rmsnorm",
    "forward",
)
_ADAMW = optax.adamw(1e-3, weight_decay=0.01)


def _regression_loss(module: nn.Module):
    return lambda params, x, target: jnp.mean(
        jnp.square(module.apply({"params": params}, x) - target)
    )


add(
    "flax_transformer_adamw_step",
    "flax",
    "training step of the transformer block (mean squared error) with optax.adamw",
    train_step(_regression_loss(FlaxTransformerBlock()), _ADAMW),
    with_optimizer_state(
        _ADAMW,
        lambda r: (
            flax_params(FlaxTransformerBlock(), r, _sequence(r))["params"],
            _sequence(r),
            _sequence(r),
        ),
    ),
    "transformer",
    "attention",
    "training",
    "optimizer",
    "adamw",
)


class FlaxBf16CausalAttention(nn.Module):
    """Causal self-attention computed in bf16 (flax's ``dtype=jnp.bfloat16`` projections,
    f32 parameters), 2 heads of 8, through jax.nn.dot_product_attention."""

    @nn.compact
    def __call__(self, x):
        qkv = nn.DenseGeneral((3, 2, 8), dtype=jnp.bfloat16)(x)
        q, k, v = qkv[:, :, 0], qkv[:, :, 1], qkv[:, :, 2]
        out = jax.nn.dot_product_attention(q, k, v, is_causal=True)
        return nn.DenseGeneral(x.shape[-1], axis=(-2, -1), dtype=jnp.bfloat16)(out)


def _wide_sequence(rng):
    """[2, 8, 16]: XLA:GPU 0.12 finds no tile sizes for bf16 projections of 12 rows."""
    return normal(rng, 2, 8, 16)


def _bf16_regression_loss(module: nn.Module):
    return lambda params, x, target: jnp.mean(
        jnp.square(module.apply({"params": params}, x).astype(jnp.float32) - target)
    )


add(
    "flax_bf16_attention_adamw_step",
    "flax",
    "training step of bf16 causal self-attention (nn.DenseGeneral in bf16,"
    " jax.nn.dot_product_attention, 2 heads of 8, [2,8,16]) with optax.adamw on f32"
    " parameters: the"
    " attention's backward pass is one fused call",
    train_step(_bf16_regression_loss(FlaxBf16CausalAttention()), _ADAMW),
    with_optimizer_state(
        _ADAMW,
        lambda r: (
            flax_params(FlaxBf16CausalAttention(), r, _wide_sequence(r))["params"],
            _wide_sequence(r),
            _wide_sequence(r),
        ),
    ),
    "attention",
    "bf16",
    "training",
    "optimizer",
    "adamw",
)


class FlaxResNetBlock(nn.Module):
    """conv-BN-ReLU-conv-BN plus the identity, then ReLU (BatchNorm's running averages)."""

    @nn.compact
    def __call__(self, x):
        norm = lambda: nn.BatchNorm(use_running_average=True)  # noqa: E731
        h = nn.relu(norm()(nn.Conv(3, (3, 3), use_bias=False)(x)))
        h = norm()(nn.Conv(3, (3, 3), use_bias=False)(h))
        return nn.relu(x + h)


add(
    "flax_resnet_block",
    "flax",
    "ResNet basic block: two 3x3 nn.Conv with nn.BatchNorm (running averages), identity"
    " shortcut, ReLU, NHWC f32 [4,8,8,3]",
    _flax_apply(FlaxResNetBlock()),
    lambda r: (with_running_statistics(flax_params(FlaxResNetBlock(), r, images(r)), r), images(r)),
    "resnet",
    "cnn",
    "batchnorm",
    "forward",
)


class FlaxGRUClassifier(nn.Module):
    """Embedding, nn.GRUCell under nn.scan over the time axis, dense head on the last carry."""

    @nn.compact
    def __call__(self, token_ids):
        x = nn.Embed(VOCAB, FEATURES)(token_ids)
        scan = nn.scan(
            nn.GRUCell,
            variable_broadcast="params",
            split_rngs={"params": False},
            in_axes=1,
            out_axes=1,
        )
        carry = jnp.zeros((token_ids.shape[0], HIDDEN))
        carry, hidden = scan(features=HIDDEN)(carry, x)
        return nn.Dense(CLASSES)(carry), hidden


add(
    "flax_gru_scan",
    "flax",
    "nn.Embed, nn.GRUCell(16) under nn.scan over 6 steps (batch-major tokens [4,6]),"
    " nn.Dense head on the final carry; returns the logits and every step's hidden state",
    _flax_apply(FlaxGRUClassifier()),
    lambda r: (
        flax_params(FlaxGRUClassifier(), r, tokens(r, BATCH, STEPS)),
        tokens(r, BATCH, STEPS),
    ),
    "gru",
    "recurrent",
    "scan",
    "embedding",
    "forward",
)


class FlaxLSTM(nn.Module):
    @nn.compact
    def __call__(self, x):
        return nn.RNN(nn.LSTMCell(HIDDEN))(x)


add(
    "flax_lstm_rnn",
    "flax",
    "nn.RNN(nn.LSTMCell(16)) over a batch-major f32 [4,6,8] sequence",
    _flax_apply(FlaxLSTM()),
    lambda r: (
        flax_params(FlaxLSTM(), r, normal(r, BATCH, STEPS, FEATURES)),
        normal(r, BATCH, STEPS, FEATURES),
    ),
    "lstm",
    "recurrent",
    "scan",
    "forward",
)


_FLAX_LSTM_CELL = nn.LSTMCell(HIDDEN)


def _flax_lstm_fori(params, xs):
    """nn.LSTMCell applied step by step by lax.fori_loop over a time-major sequence."""

    def step(t, carry):
        carry, _ = _FLAX_LSTM_CELL.apply({"params": params}, carry, xs[t])
        return carry

    zeros = jnp.zeros((xs.shape[1], HIDDEN))
    return lax.fori_loop(0, xs.shape[0], step, (zeros, zeros))


def _flax_lstm_fori_arguments(rng):
    xs = normal(rng, STEPS, BATCH, FEATURES)
    zeros = np.zeros((BATCH, HIDDEN), np.float32)
    variables = flax_params(_FLAX_LSTM_CELL, rng, (zeros, zeros), xs[0])
    return variables["params"], xs


add(
    "flax_lstm_fori_loop",
    "flax",
    "nn.LSTMCell(16) stepped by lax.fori_loop over a time-major f32 [6,4,8] sequence;"
    " returns the final (c, h)",
    _flax_lstm_fori,
    _flax_lstm_fori_arguments,
    "lstm",
    "recurrent",
    "fori_loop",
    "forward",
)


class FlaxEmbeddingBag(nn.Module):
    """Token embeddings, mean pooled over the sequence, a dense classifier."""

    @nn.compact
    def __call__(self, token_ids):
        return nn.Dense(CLASSES)(nn.Embed(VOCAB, FEATURES)(token_ids).mean(axis=1))


add(
    "flax_embedding_bag",
    "flax",
    "nn.Embed(16, 8) of s32 tokens [4,6], mean over the sequence, nn.Dense(4)",
    _flax_apply(FlaxEmbeddingBag()),
    lambda r: (
        flax_params(FlaxEmbeddingBag(), r, tokens(r, BATCH, STEPS)),
        tokens(r, BATCH, STEPS),
    ),
    "embedding",
    "pooling",
    "forward",
)
add(
    "flax_embedding_sgd_step",
    "flax",
    "training step of the embedding-bag classifier with optax.sgd: the embedding's"
    " gradient is a scatter-add",
    train_step(_flax_loss(FlaxEmbeddingBag()), _SGD),
    with_optimizer_state(
        _SGD, _flax_classifier_batch(FlaxEmbeddingBag(), lambda r: tokens(r, BATCH, STEPS))
    ),
    "embedding",
    "training",
    "optimizer",
    "sgd",
)


class FlaxCrossAttention(nn.Module):
    """Queries from one sequence attend to another under a padding mask (4 heads)."""

    @nn.compact
    def __call__(self, queries, memory, memory_length):
        valid = jnp.arange(memory.shape[1])[None, :] < memory_length[:, None]
        mask = nn.make_attention_mask(jnp.ones(queries.shape[:2], bool), valid)
        return nn.MultiHeadDotProductAttention(num_heads=4)(queries, memory, mask=mask)


def _cross_attention_inputs(rng):
    return normal(rng, 2, 4, FEATURES), normal(rng, 2, STEPS, FEATURES), np.array([6, 3], np.int32)


add(
    "flax_cross_attention_padding_mask",
    "flax",
    "nn.MultiHeadDotProductAttention (4 heads) of f32 [2,4,8] queries over a [2,6,8] memory"
    " with a padding mask from per-row lengths",
    _flax_apply(FlaxCrossAttention()),
    lambda r: (
        flax_params(FlaxCrossAttention(), r, *_cross_attention_inputs(r)),
        *_cross_attention_inputs(r),
    ),
    "attention",
    "forward",
)


class FlaxGroupedQueryAttention(nn.Module):
    """Grouped-query attention: 4 query heads share 2 key/value heads
    (nn.DenseGeneral projections, jax.nn.dot_product_attention, causal)."""

    @nn.compact
    def __call__(self, x):
        q = nn.DenseGeneral((4, 2))(x)
        k = nn.DenseGeneral((2, 2))(x)
        v = nn.DenseGeneral((2, 2))(x)
        out = jax.nn.dot_product_attention(q, k, v, is_causal=True)
        return nn.DenseGeneral(x.shape[-1], axis=(-2, -1))(out)


add(
    "flax_grouped_query_attention",
    "flax",
    "grouped-query causal attention: 4 query heads over 2 key/value heads (nn.DenseGeneral,"
    " jax.nn.dot_product_attention) on f32 [2,6,8]",
    _flax_apply(FlaxGroupedQueryAttention()),
    lambda r: (flax_params(FlaxGroupedQueryAttention(), r, _sequence(r)), _sequence(r)),
    "attention",
    "forward",
)


def _mixed_precision_step(optimizer: optax.GradientTransformation, loss_scale: float = 256.0):
    """bf16 compute with f32 master weights: the masters are cast to bf16 for the forward
    and backward pass (bf16 activations), the loss is scaled before differentiation and the
    bf16 gradients unscaled in f32, and the optimizer updates the f32 masters."""
    module = FlaxMLP()

    def scaled_loss(params_bf16, x, y):
        logits = module.apply({"params": params_bf16}, x.astype(jnp.bfloat16))
        return cross_entropy(logits.astype(jnp.float32), y) * loss_scale

    def step(master, opt_state, x, y):
        params_bf16 = jax.tree.map(lambda p: p.astype(jnp.bfloat16), master)
        value, grads = jax.value_and_grad(scaled_loss)(params_bf16, x, y)
        grads = jax.tree.map(lambda g: g.astype(jnp.float32) / loss_scale, grads)
        updates, opt_state = optimizer.update(grads, opt_state, master)
        return optax.apply_updates(master, updates), opt_state, value / loss_scale

    return step


add(
    "flax_mixed_precision_adam_step",
    "flax",
    "mixed precision: f32 master weights cast to bf16 for the MLP's forward and backward"
    " pass, static loss scaling, optax.adam on the f32 masters",
    _mixed_precision_step(_ADAM),
    with_optimizer_state(
        _ADAM, _flax_classifier_batch(FlaxMLP(), lambda r: normal(r, BATCH, FEATURES))
    ),
    "mixed-precision",
    "mlp",
    "training",
    "optimizer",
    "adam",
)

# -- equinox -----------------------------------------------------------------------------------


class EquinoxModel:
    """An equinox module split into its arrays (the jitted function's argument) and the rest
    (static, closed over): ``eqx.partition(model, eqx.is_array)``. The static part does not
    depend on the initialisation key, so it is taken once from a model built with key 0."""

    def __init__(self, build: Callable[[jax.Array], eqx.Module]) -> None:
        self.build = build
        self.static = eqx.partition(build(jax.random.PRNGKey(0)), eqx.is_array)[1]

    def params(self, rng: np.random.Generator) -> Any:
        model = self.build(init_key(rng))
        return as_numpy(eqx.partition(model, eqx.is_array)[0])

    def __call__(self, params: Any) -> eqx.Module:
        return eqx.combine(params, self.static)


def _batched(model: EquinoxModel) -> Callable[..., Any]:
    """``forward(params, x)``: the model applied to each example of a batch (jax.vmap)."""
    return lambda params, x: jax.vmap(model(params))(x)


_EQX_MLP = EquinoxModel(lambda k: eqx.nn.MLP(FEATURES, CLASSES, HIDDEN, depth=1, key=k))
add(
    "equinox_mlp",
    "equinox",
    "eqx.nn.MLP(8 -> 16 -> 4, ReLU), vmapped over a batch of 4",
    _batched(_EQX_MLP),
    lambda r: (_EQX_MLP.params(r), normal(r, BATCH, FEATURES)),
    "mlp",
    "forward",
)


def _equinox_loss(model: EquinoxModel):
    return lambda params, x, y: cross_entropy(jax.vmap(model(params))(x), y)


add(
    "equinox_mlp_adam_step",
    "equinox",
    "training step of the eqx.nn.MLP with optax.adam (cross-entropy)",
    train_step(_equinox_loss(_EQX_MLP), _ADAM),
    with_optimizer_state(
        _ADAM, lambda r: (_EQX_MLP.params(r), normal(r, BATCH, FEATURES), labels(r))
    ),
    "mlp",
    "training",
    "optimizer",
    "adam",
)


class EquinoxCNN(eqx.Module):
    conv: eqx.nn.Conv2d
    pool: eqx.nn.MaxPool2d
    head: eqx.nn.Linear

    def __init__(self, key, size: int = IMAGE[1]):
        conv_key, head_key = jax.random.split(key)
        self.conv = eqx.nn.Conv2d(3, 8, 3, padding=1, key=conv_key)
        self.pool = eqx.nn.MaxPool2d(2, stride=2)
        self.head = eqx.nn.Linear(8 * (size // 2) ** 2, CLASSES, key=head_key)

    def __call__(self, x):  # CHW: equinox's convolutions are channels-first, unbatched
        return self.head(self.pool(jax.nn.relu(self.conv(x))).reshape(-1))


def _chw_images(rng):
    return normal(rng, BATCH, 3, 8, 8)


_EQX_CNN = EquinoxModel(EquinoxCNN)
add(
    "equinox_cnn",
    "equinox",
    "eqx.nn.Conv2d(3 -> 8, 3x3), ReLU, eqx.nn.MaxPool2d 2x2, eqx.nn.Linear, vmapped over"
    " NCHW f32 [4,3,8,8]",
    _batched(_EQX_CNN),
    lambda r: (_EQX_CNN.params(r), _chw_images(r)),
    "cnn",
    "pooling",
    "forward",
)
_EQX_TRAINED_CNN = EquinoxModel(lambda k: EquinoxCNN(k, size=TRAINING_IMAGE[1]))
add(
    "equinox_cnn_sgd_step",
    "equinox",
    "training step of the equinox CNN with optax.sgd on NCHW f32 [2,3,10,10]",
    train_step(_equinox_loss(_EQX_TRAINED_CNN), _SGD),
    with_optimizer_state(
        _SGD,
        lambda r: (
            _EQX_TRAINED_CNN.params(r),
            normal(r, 2, 3, 10, 10),
            labels(r)[: TRAINING_IMAGE[0]],
        ),
    ),
    "cnn",
    "pooling",
    "training",
    "optimizer",
    "sgd",
)

_EQX_GRU = EquinoxModel(lambda k: eqx.nn.GRUCell(FEATURES, HIDDEN, key=k))


def _equinox_gru(params, xs):
    """eqx.nn.GRUCell under lax.scan over one example's steps, vmapped over the batch."""
    cell = _EQX_GRU(params)

    def run(sequence):
        def step(h, x):
            h = cell(x, h)
            return h, h

        return lax.scan(step, jnp.zeros(HIDDEN), sequence)

    return jax.vmap(run)(xs)


add(
    "equinox_gru_scan_vmap",
    "equinox",
    "eqx.nn.GRUCell(8 -> 16) under lax.scan over 6 steps, vmapped over a batch of 4"
    " (batch-major f32 [4,6,8]); returns the final and every step's hidden state",
    _equinox_gru,
    lambda r: (_EQX_GRU.params(r), normal(r, BATCH, STEPS, FEATURES)),
    "gru",
    "recurrent",
    "scan",
    "forward",
)

_EQX_LSTM = EquinoxModel(lambda k: eqx.nn.LSTMCell(FEATURES, HIDDEN, key=k))


def _equinox_lstm_fori(params, xs):
    """eqx.nn.LSTMCell, vmapped over the batch, stepped by lax.fori_loop over time."""
    cell = jax.vmap(_EQX_LSTM(params))
    zeros = jnp.zeros((xs.shape[1], HIDDEN))
    return lax.fori_loop(0, xs.shape[0], lambda t, carry: cell(xs[t], carry), (zeros, zeros))


add(
    "equinox_lstm_fori_loop",
    "equinox",
    "eqx.nn.LSTMCell(8 -> 16) vmapped over a batch of 4, stepped by lax.fori_loop over a"
    " time-major f32 [6,4,8] sequence; returns the final (h, c)",
    _equinox_lstm_fori,
    lambda r: (_EQX_LSTM.params(r), normal(r, STEPS, BATCH, FEATURES)),
    "lstm",
    "recurrent",
    "fori_loop",
    "forward",
)

_EQX_ATTENTION = EquinoxModel(
    lambda k: eqx.nn.MultiheadAttention(
        2, FEATURES, use_query_bias=True, use_output_bias=True, key=k
    )
)


def _equinox_attention(params, x):
    attention = _EQX_ATTENTION(params)
    causal = jnp.tril(jnp.ones((x.shape[1], x.shape[1]), bool))
    return jax.vmap(lambda s: attention(s, s, s, mask=causal))(x)


add(
    "equinox_multihead_attention",
    "equinox",
    "eqx.nn.MultiheadAttention (2 heads, causal boolean mask) vmapped over f32 [2,6,8]",
    _equinox_attention,
    lambda r: (_EQX_ATTENTION.params(r), _sequence(r)),
    "attention",
    "forward",
)


class EquinoxNorms(eqx.Module):
    layer_norm: eqx.nn.LayerNorm
    linear: eqx.nn.Linear
    rms_norm: eqx.nn.RMSNorm

    def __init__(self, key):
        self.layer_norm = eqx.nn.LayerNorm(FEATURES)
        self.linear = eqx.nn.Linear(FEATURES, HIDDEN, key=key)
        self.rms_norm = eqx.nn.RMSNorm(HIDDEN)

    def __call__(self, x):
        return self.rms_norm(self.linear(self.layer_norm(x)))


_EQX_NORMS = EquinoxModel(EquinoxNorms)
add(
    "equinox_layernorm_rmsnorm",
    "equinox",
    "eqx.nn.LayerNorm, eqx.nn.Linear(8 -> 16), eqx.nn.RMSNorm, vmapped over f32 [4,8]",
    _batched(_EQX_NORMS),
    lambda r: (_EQX_NORMS.params(r), normal(r, BATCH, FEATURES)),
    "layernorm",
    "rmsnorm",
    "normalization",
    "forward",
)


class EquinoxConvGroupNorm(eqx.Module):
    conv: eqx.nn.Conv2d
    norm: eqx.nn.GroupNorm
    pool: eqx.nn.AdaptiveAvgPool2d

    def __init__(self, key):
        self.conv = eqx.nn.Conv2d(3, 8, 3, padding=1, key=key)
        self.norm = eqx.nn.GroupNorm(groups=2, channels=8)
        self.pool = eqx.nn.AdaptiveAvgPool2d((2, 2))

    def __call__(self, x):
        return self.pool(jax.nn.gelu(self.norm(self.conv(x))))


_EQX_GROUPNORM = EquinoxModel(EquinoxConvGroupNorm)
add(
    "equinox_conv_groupnorm",
    "equinox",
    "eqx.nn.Conv2d(3 -> 8), eqx.nn.GroupNorm(2 groups), GELU, eqx.nn.AdaptiveAvgPool2d(2x2),"
    " vmapped over NCHW f32 [4,3,8,8]",
    _batched(_EQX_GROUPNORM),
    lambda r: (_EQX_GROUPNORM.params(r), _chw_images(r)),
    "cnn",
    "groupnorm",
    "normalization",
    "pooling",
    "forward",
)


class EquinoxBatchNormMLP(eqx.Module):
    linear: eqx.nn.Linear
    norm: eqx.nn.BatchNorm
    head: eqx.nn.Linear

    def __init__(self, key):
        first, second = jax.random.split(key)
        self.linear = eqx.nn.Linear(FEATURES, HIDDEN, key=first)
        self.norm = eqx.nn.BatchNorm(HIDDEN, axis_name="batch", mode="batch")
        self.head = eqx.nn.Linear(HIDDEN, CLASSES, key=second)

    def __call__(self, x, state):
        x, state = self.norm(self.linear(x), state)
        return self.head(jax.nn.relu(x)), state


_EQX_BATCHNORM = EquinoxModel(lambda k: eqx.nn.make_with_state(EquinoxBatchNormMLP)(k)[0])


def _equinox_batchnorm(params, state, x):
    """Training-mode BatchNorm: batch statistics over the vmapped axis named "batch",
    the running statistics threaded through eqx.nn.State."""
    model = _EQX_BATCHNORM(params)
    logits, states = jax.vmap(model, in_axes=(0, None), out_axes=(0, None), axis_name="batch")(
        x, state
    )
    return logits, states


def _equinox_batchnorm_arguments(rng):
    """The parameters, the initial eqx.nn.State (running statistics: they do not depend
    on the key), a batch."""
    _, state = eqx.nn.make_with_state(EquinoxBatchNormMLP)(jax.random.PRNGKey(0))
    return _EQX_BATCHNORM.params(rng), as_numpy(state), normal(rng, BATCH, FEATURES)


add(
    "equinox_batchnorm_train",
    "equinox",
    "eqx.nn.BatchNorm in training mode over a vmapped batch axis (axis_name), running"
    " statistics threaded through eqx.nn.State",
    _equinox_batchnorm,
    _equinox_batchnorm_arguments,
    "batchnorm",
    "normalization",
    "forward",
)


class EquinoxEmbeddingBag(eqx.Module):
    embedding: eqx.nn.Embedding
    head: eqx.nn.Linear

    def __init__(self, key):
        first, second = jax.random.split(key)
        self.embedding = eqx.nn.Embedding(VOCAB, FEATURES, key=first)
        self.head = eqx.nn.Linear(FEATURES, CLASSES, key=second)

    def __call__(self, token_ids):
        return self.head(jnp.max(jax.vmap(self.embedding)(token_ids), axis=0))


_EQX_EMBEDDING = EquinoxModel(EquinoxEmbeddingBag)
add(
    "equinox_embedding_maxpool",
    "equinox",
    "eqx.nn.Embedding(16, 8) of s32 tokens [4,6], max over the sequence, eqx.nn.Linear",
    _batched(_EQX_EMBEDDING),
    lambda r: (_EQX_EMBEDDING.params(r), tokens(r, BATCH, STEPS)),
    "embedding",
    "pooling",
    "forward",
)


# -- haiku -------------------------------------------------------------------------------------


def haiku_params(transformed, rng: np.random.Generator, *inputs: Any) -> Any:
    return as_numpy(transformed.init(init_key(rng), *inputs))


def _hk_mlp(x):
    return hk.nets.MLP([HIDDEN, CLASSES])(x)


_HK_MLP = hk.without_apply_rng(hk.transform(_hk_mlp))
add(
    "haiku_mlp",
    "haiku",
    "hk.nets.MLP([16, 4]) on f32 [4,8]",
    _HK_MLP.apply,
    lambda r: (haiku_params(_HK_MLP, r, normal(r, BATCH, FEATURES)), normal(r, BATCH, FEATURES)),
    "mlp",
    "forward",
)


def _haiku_loss(transformed):
    return lambda params, x, y: cross_entropy(transformed.apply(params, x), y)


def _haiku_classifier_batch(transformed, inputs):
    def make(rng):
        x = inputs(rng)
        return haiku_params(transformed, rng, x), x, labels(rng)

    return make


#: What the haiku optimizer steps train: one hk.Linear (a kernel and a bias), so that the
#: optimizer is most of the program.
_HK_LINEAR = hk.without_apply_rng(hk.transform(lambda x: hk.Linear(CLASSES)(x)))
_LAMB = optax.lamb(1e-3, weight_decay=1e-4)
add(
    "haiku_linear_lamb_step",
    "haiku",
    "training step of an hk.Linear softmax classifier with optax.lamb (layer-wise trust ratios)",
    train_step(_haiku_loss(_HK_LINEAR), _LAMB),
    with_optimizer_state(
        _LAMB, _haiku_classifier_batch(_HK_LINEAR, lambda r: normal(r, BATCH, FEATURES))
    ),
    "training",
    "optimizer",
    "lamb",
)
_ADAFACTOR = optax.adafactor(1e-2, min_dim_size_to_factor=4)
add(
    "haiku_linear_adafactor_step",
    "haiku",
    "training step of an hk.Linear softmax classifier with optax.adafactor (the [8,4]"
    " kernel's second moments factored)",
    train_step(_haiku_loss(_HK_LINEAR), _ADAFACTOR),
    with_optimizer_state(
        _ADAFACTOR, _haiku_classifier_batch(_HK_LINEAR, lambda r: normal(r, BATCH, FEATURES))
    ),
    "training",
    "optimizer",
    "adafactor",
)


def _hk_conv_batchnorm(x, is_training):
    x = hk.Conv2D(8, 3)(x)
    x = hk.BatchNorm(create_scale=True, create_offset=True, decay_rate=0.9)(x, is_training)
    x = jax.nn.relu(x)
    x = hk.max_pool(x, window_shape=2, strides=2, padding="VALID")
    return hk.Linear(CLASSES)(hk.Flatten()(x))


_HK_CONV_BN = hk.without_apply_rng(hk.transform_with_state(_hk_conv_batchnorm))


def _haiku_conv_batchnorm_arguments(rng):
    x = images(rng)
    params, state = _HK_CONV_BN.init(init_key(rng), x, True)
    return as_numpy(params), as_numpy(state), x


add(
    "haiku_conv_batchnorm",
    "haiku",
    "hk.Conv2D(8, 3x3), hk.BatchNorm in training mode (state updated), ReLU, hk.max_pool,"
    " hk.Linear on NHWC f32 [4,8,8,3]; returns the logits and the new state",
    lambda params, state, x: _HK_CONV_BN.apply(params, state, x, True),
    _haiku_conv_batchnorm_arguments,
    "cnn",
    "batchnorm",
    "normalization",
    "pooling",
    "forward",
)


def _hk_norms(x):
    x = hk.LayerNorm(axis=-1, create_scale=True, create_offset=True)(x)
    x = hk.Linear(HIDDEN)(x)
    return hk.RMSNorm(axis=-1)(x)


_HK_NORMS = hk.without_apply_rng(hk.transform(_hk_norms))
add(
    "haiku_layernorm_rmsnorm",
    "haiku",
    "hk.LayerNorm, hk.Linear(16), hk.RMSNorm on f32 [4,8]",
    _HK_NORMS.apply,
    lambda r: (haiku_params(_HK_NORMS, r, normal(r, BATCH, FEATURES)), normal(r, BATCH, FEATURES)),
    "layernorm",
    "rmsnorm",
    "normalization",
    "forward",
)


def _hk_lstm(xs):
    core = hk.LSTM(HIDDEN)
    outputs, state = hk.dynamic_unroll(core, xs, core.initial_state(xs.shape[1]))
    return hk.Linear(CLASSES)(outputs[-1]), state


_HK_LSTM = hk.without_apply_rng(hk.transform(_hk_lstm))
add(
    "haiku_lstm_dynamic_unroll",
    "haiku",
    "hk.LSTM(16) under hk.dynamic_unroll (a scan) over a time-major f32 [6,4,8] sequence,"
    " hk.Linear head on the last output",
    _HK_LSTM.apply,
    lambda r: (
        haiku_params(_HK_LSTM, r, normal(r, STEPS, BATCH, FEATURES)),
        normal(r, STEPS, BATCH, FEATURES),
    ),
    "lstm",
    "recurrent",
    "scan",
    "forward",
)


def _hk_gru_classifier(token_ids):
    x = hk.Embed(VOCAB, FEATURES)(token_ids)  # time-major [steps, batch, features]
    core = hk.GRU(HIDDEN)
    outputs, _ = hk.dynamic_unroll(core, x, core.initial_state(x.shape[1]))
    return hk.Linear(CLASSES)(outputs[-1])


_HK_GRU = hk.without_apply_rng(hk.transform(_hk_gru_classifier))
add(
    "haiku_gru_dynamic_unroll",
    "haiku",
    "hk.Embed(16, 8), hk.GRU(16) under hk.dynamic_unroll (a scan) over time-major tokens"
    " [6,4], hk.Linear head on the last output",
    _HK_GRU.apply,
    lambda r: (haiku_params(_HK_GRU, r, tokens(r, STEPS, BATCH)), tokens(r, STEPS, BATCH)),
    "gru",
    "recurrent",
    "scan",
    "embedding",
    "forward",
)


def _hk_attention(x):
    return hk.MultiHeadAttention(num_heads=2, key_size=4, w_init_scale=1.0)(x, x, x)


_HK_ATTENTION = hk.without_apply_rng(hk.transform(_hk_attention))
add(
    "haiku_multihead_attention",
    "haiku",
    "hk.MultiHeadAttention (2 heads of 4) self-attention on f32 [2,6,8]",
    _HK_ATTENTION.apply,
    lambda r: (haiku_params(_HK_ATTENTION, r, _sequence(r)), _sequence(r)),
    "attention",
    "forward",
)


def _hk_embed_pool(token_ids):
    x = hk.Embed(VOCAB, FEATURES)(token_ids)
    x = hk.avg_pool(x, window_shape=(1, 2, 1), strides=(1, 2, 1), padding="VALID")
    return hk.Linear(CLASSES)(hk.Flatten()(x))


_HK_EMBED = hk.without_apply_rng(hk.transform(_hk_embed_pool))
add(
    "haiku_embed_avg_pool",
    "haiku",
    "hk.Embed(16, 8) of s32 tokens [4,6], hk.avg_pool over pairs of steps, hk.Linear",
    _HK_EMBED.apply,
    lambda r: (haiku_params(_HK_EMBED, r, tokens(r, BATCH, STEPS)), tokens(r, BATCH, STEPS)),
    "embedding",
    "pooling",
    "forward",
)


# -- optax: optimizers, clipping and schedules ------------------------------------------------

#: What the optax programs train: softmax regression, one nn.Dense (a kernel and a bias),
#: so that the optimizer is most of the program.
_FLAX_LINEAR = nn.Dense(CLASSES)


def _optax_step(name: str, description: str, optimizer: optax.GradientTransformation, *tags):
    add(
        name,
        "optax",
        f"{description}; a training step of a flax nn.Dense softmax classifier",
        train_step(_flax_loss(_FLAX_LINEAR), optimizer),
        with_optimizer_state(
            optimizer,
            _flax_classifier_batch(_FLAX_LINEAR, lambda r: normal(r, BATCH, FEATURES)),
        ),
        "training",
        "optimizer",
        *tags,
    )


_optax_step(
    "optax_clip_cosine_adamw_step",
    "optax.chain(optax.clip_by_global_norm(1.0), optax.adamw with"
    " optax.warmup_cosine_decay_schedule)",
    optax.chain(
        optax.clip_by_global_norm(1.0),
        optax.adamw(
            optax.warmup_cosine_decay_schedule(0.0, 1e-2, warmup_steps=2, decay_steps=50),
            weight_decay=0.01,
        ),
    ),
    "adamw",
    "gradient-clipping",
    "schedule",
)
_optax_step(
    "optax_sgd_nesterov_exponential_decay_step",
    "optax.sgd with Nesterov momentum and an optax.exponential_decay schedule, after"
    " optax.clip (elementwise)",
    optax.chain(
        optax.clip(0.5),
        optax.sgd(optax.exponential_decay(0.1, 10, 0.5), momentum=0.9, nesterov=True),
    ),
    "sgd-momentum",
    "gradient-clipping",
    "schedule",
)
_optax_step(
    "optax_adamw_accumulate_multisteps_step",
    "optax.MultiSteps accumulating gradients over 2 steps around optax.adamw (the step"
    " counter selects whether the inner update applies)",
    optax.MultiSteps(optax.adamw(1e-3), every_k_schedule=2),
    "adamw",
    "gradient-accumulation",
)


# -- beyond the first corpus: layer stacks, convolution variants, sampling, more optimizers -----


class FlaxResidualLayer(nn.Module):
    """One layer of a stack scanned over depth: pre-LayerNorm GELU MLP, residual. Its
    ``__call__`` has nn.scan's carry signature ``(carry, _) -> (carry, output)``."""

    @nn.compact
    def __call__(self, x, _):
        h = nn.Dense(2 * x.shape[-1], use_bias=False)(nn.LayerNorm(use_bias=False)(x))
        return x + nn.Dense(x.shape[-1], use_bias=False)(nn.gelu(h)), None


class FlaxScannedStack(nn.Module):
    """Three residual layers whose parameters are stacked on a leading axis
    (``nn.scan`` with ``variable_axes={"params": 0}``), each rematerialised in the
    backward pass (``nn.remat``, jax.checkpoint), as large transformers are written."""

    layers: int = 3

    @nn.compact
    def __call__(self, x):
        stack = nn.scan(
            nn.remat(FlaxResidualLayer),
            variable_axes={"params": 0},
            split_rngs={"params": True},
            length=self.layers,
        )
        x, _ = stack()(x, None)
        return nn.Dense(CLASSES)(nn.LayerNorm()(x))


_FLAX_STACK = FlaxScannedStack()
_SGD_CLIPPED = optax.chain(optax.clip_by_global_norm(1.0), optax.sgd(0.05, momentum=0.9))
add(
    "flax_scan_remat_layers_sgd_step",
    "flax",
    "training step of 3 residual LayerNorm-GELU-MLP layers (no biases) stacked under"
    " nn.scan (variable_axes params 0) with nn.remat per layer, optax.sgd with momentum"
    " after clip_by_global_norm, on f32 [4,8]",
    train_step(_flax_loss(_FLAX_STACK), _SGD_CLIPPED),
    with_optimizer_state(
        _SGD_CLIPPED, _flax_classifier_batch(_FLAX_STACK, lambda r: normal(r, BATCH, FEATURES))
    ),
    "scan",
    "remat",
    "layernorm",
    "mlp",
    "training",
    "optimizer",
    "sgd-momentum",
    "gradient-clipping",
)


def rotary(x: jax.Array, base: float = 10000.0) -> jax.Array:
    """Rotary position embedding of ``x`` [batch, steps, heads, dim] (dim even): each pair
    of features (i, i + dim/2) rotated by position * base**(-2i/dim), as LLaMA's."""
    steps, dim = x.shape[1], x.shape[-1]
    frequencies = base ** (-jnp.arange(0, dim, 2, dtype=jnp.float32) / dim)
    angles = jnp.arange(steps, dtype=jnp.float32)[:, None] * frequencies[None, :]
    cos, sin = jnp.cos(angles)[None, :, None, :], jnp.sin(angles)[None, :, None, :]
    first, second = jnp.split(x, 2, axis=-1)
    return jnp.concatenate([first * cos - second * sin, first * sin + second * cos], axis=-1)


class FlaxRoPEAttention(nn.Module):
    """Causal self-attention (2 heads of 4) with rotary position embeddings on the queries
    and keys, written out (einsum scores, a where-mask, softmax)."""

    heads: int = 2
    head_dim: int = 4

    @nn.compact
    def __call__(self, x):
        q, k, v = (
            nn.DenseGeneral((self.heads, self.head_dim), use_bias=False, name=name)(x)
            for name in ("query", "key", "value")
        )
        q, k = rotary(q), rotary(k)
        scores = jnp.einsum("bqhd,bkhd->bhqk", q, k) / jnp.sqrt(self.head_dim)
        causal = jnp.tril(jnp.ones((x.shape[1], x.shape[1]), dtype=bool))
        weights = jax.nn.softmax(jnp.where(causal, scores, -1e9), axis=-1)
        out = jnp.einsum("bhqk,bkhd->bqhd", weights, v)
        return nn.DenseGeneral(x.shape[-1], axis=(-2, -1), use_bias=False, name="out")(out)


add(
    "flax_rope_attention",
    "flax",
    "causal self-attention with rotary position embeddings (cos/sin of position x"
    " frequency, half-split rotation) on queries and keys, 2 heads of 4, nn.DenseGeneral"
    " projections, on f32 [2,8,8] (XLA:GPU 0.12 finds no tile sizes for its projections of"
    " 12 rows)",
    _flax_apply(FlaxRoPEAttention()),
    lambda r: (
        flax_params(FlaxRoPEAttention(), r, normal(r, 2, 8, FEATURES)),
        normal(r, 2, 8, FEATURES),
    ),
    "attention",
    "rope",
    "forward",
)


class FlaxMoE(nn.Module):
    """A top-2 mixture of 4 GELU experts: a router's softmax, ``lax.top_k``, one-hot
    dispatch and combine tensors (einsum), the experts' stacked kernels, and the
    Switch-Transformer load-balancing loss (fraction routed x mean router probability)."""

    experts: int = 4
    top: int = 2
    hidden: int = HIDDEN

    @nn.compact
    def __call__(self, x):  # x: [tokens, features]
        features = x.shape[-1]
        probabilities = jax.nn.softmax(nn.Dense(self.experts, use_bias=False, name="router")(x))
        gates, chosen = lax.top_k(probabilities, self.top)  # [tokens, top]
        gates = gates / gates.sum(-1, keepdims=True)
        dispatch = jax.nn.one_hot(chosen, self.experts, dtype=x.dtype)  # [tokens, top, experts]
        combine = jnp.einsum("tk,tke->te", gates, dispatch)
        w_in = self.param(
            "w_in", nn.initializers.lecun_normal(), (self.experts, features, self.hidden)
        )
        w_out = self.param(
            "w_out", nn.initializers.lecun_normal(), (self.experts, self.hidden, features)
        )
        expert_inputs = jnp.einsum("te,tf->etf", dispatch.sum(1), x)
        hidden = nn.gelu(jnp.einsum("etf,efh->eth", expert_inputs, w_in))
        expert_outputs = jnp.einsum("eth,ehf->etf", hidden, w_out)
        y = jnp.einsum("te,etf->tf", combine, expert_outputs)
        routed = dispatch.sum(1).mean(0) / self.top
        balance = self.experts * jnp.sum(routed * probabilities.mean(0))
        return y, balance


_FLAX_MOE = FlaxMoE()


def _moe_loss(params, x, target):
    y, balance = _FLAX_MOE.apply({"params": params}, x)
    return jnp.mean(jnp.square(y - target)) + 0.01 * balance


_MOE_TOKENS = 8
_SGD_MOMENTUM_DECAY = optax.chain(optax.add_decayed_weights(1e-4), optax.sgd(0.05, momentum=0.9))
add(
    "flax_moe_top2_router_step",
    "flax",
    "training step of a top-2 mixture of 4 GELU experts (softmax router, lax.top_k,"
    " one_hot dispatch, einsum dispatch and combine, load-balancing loss) on 8 tokens of 8,"
    " optax.sgd with momentum after add_decayed_weights",
    train_step(_moe_loss, _SGD_MOMENTUM_DECAY),
    with_optimizer_state(
        _SGD_MOMENTUM_DECAY,
        lambda r: (
            flax_params(_FLAX_MOE, r, normal(r, _MOE_TOKENS, FEATURES))["params"],
            normal(r, _MOE_TOKENS, FEATURES),
            normal(r, _MOE_TOKENS, FEATURES),
        ),
    ),
    "mixture-of-experts",
    "top-k",
    "training",
    "optimizer",
    "sgd-momentum",
)


class NnxCNN(nnx.Module):
    """flax's new API: nnx.Conv, nnx.BatchNorm (train mode, running statistics updated in
    place), ReLU, nnx.Dropout, nnx.Linear, on NHWC [2,6,6,3]."""

    def __init__(self, rngs: nnx.Rngs) -> None:
        self.conv = nnx.Conv(3, 4, (3, 3), use_bias=False, rngs=rngs)  # BatchNorm's offset
        self.norm = nnx.BatchNorm(4, momentum=0.9, rngs=rngs)
        self.dropout = nnx.Dropout(0.25)
        self.head = nnx.Linear(4 * 3 * 3, CLASSES, rngs=rngs)

    def __call__(self, x: jax.Array, dropout_key: jax.Array) -> jax.Array:
        x = nnx.relu(self.norm(self.conv(x)))
        x = nnx.avg_pool(x, (2, 2), strides=(2, 2))
        x = self.dropout(x, rngs=dropout_key)
        return self.head(x.reshape(x.shape[0], -1))


def _nnx_model_and_optimizer(key: jax.Array) -> tuple[NnxCNN, nnx.Optimizer]:
    model = NnxCNN(nnx.Rngs(key))
    return model, nnx.Optimizer(model, optax.sgd(0.05, momentum=0.9), wrt=nnx.Param)


#: The graph of (model, optimizer), static; their state is the step's argument (nnx.split).
_NNX_GRAPH = nnx.split(_nnx_model_and_optimizer(jax.random.PRNGKey(0)))[0]


def _nnx_step(state, dropout_key, x, y):
    """nnx's training step over a split state: merge, nnx.value_and_grad of the model,
    ``optimizer.update`` in place, split again."""
    model, optimizer = nnx.merge(_NNX_GRAPH, state)

    def loss(model):
        return cross_entropy(model(x, dropout_key), y)

    value, grads = nnx.value_and_grad(loss)(model)
    optimizer.update(model, grads)
    return nnx.split((model, optimizer))[1], value


def _nnx_step_arguments(rng):
    model, optimizer = _nnx_model_and_optimizer(init_key(rng))
    x = normal(rng, 2, 6, 6, 3)
    for _ in range(3):  # moments not zero, the step count past 1
        grads = nnx.state(model, nnx.Param)
        grads = jax.tree.map(lambda p: normal(rng, *p.shape, scale=0.1), grads)
        optimizer.update(model, grads)
    return as_numpy(nnx.split((model, optimizer))[1]), key(rng), x, labels(rng)[:2]


add(
    "flax_nnx_cnn_sgd_step",
    "flax",
    "flax nnx training step: nnx.Conv, nnx.BatchNorm (train mode), nnx.avg_pool,"
    " nnx.Dropout(0.25) with a raw key, nnx.Linear, nnx.Optimizer(optax.sgd, momentum) updated in"
    " place, the (model, optimizer) state split and merged, on NHWC f32 [2,6,6,3]",
    _nnx_step,
    _nnx_step_arguments,
    "nnx",
    "cnn",
    "batchnorm",
    "dropout",
    "pooling",
    "random",
    "training",
    "optimizer",
    "sgd-momentum",
)


class FlaxUNet(nn.Module):
    """A two-level U-Net: strided nn.Conv down, nn.ConvTranspose (stride 2) up, a skip
    connection concatenated, and a bilinear jax.image.resize of the bottleneck added."""

    @nn.compact
    def __call__(self, x):  # NHWC [2,8,8,3]
        skip = nn.relu(nn.Conv(4, (3, 3))(x))
        down = nn.relu(nn.Conv(8, (3, 3), strides=(2, 2))(skip))  # [2,4,4,8]
        up = nn.ConvTranspose(4, (2, 2), strides=(2, 2))(down)  # [2,8,8,4]
        resized = jax.image.resize(down, (*x.shape[:3], 8), method="bilinear")
        merged = jnp.concatenate([up, skip], axis=-1) + nn.Dense(8)(resized)
        return nn.Conv(2, (1, 1))(nn.relu(merged))


add(
    "flax_unet_convtranspose",
    "flax",
    "a two-level U-Net: nn.Conv 3x3, a strided nn.Conv down, nn.ConvTranspose(2x2, stride"
    " 2) up, the skip concatenated, a bilinear jax.image.resize of the bottleneck added,"
    " 1x1 nn.Conv head, on NHWC f32 [2,8,8,3]",
    _flax_apply(FlaxUNet()),
    lambda r: (flax_params(FlaxUNet(), r, normal(r, 2, 8, 8, 3)), normal(r, 2, 8, 8, 3)),
    "cnn",
    "conv-transpose",
    "resize",
    "forward",
)


add(
    "flax_unet_sgd_step",
    "flax",
    "training step of the U-Net (mean squared error against a [2,8,8,2] target) with"
    " optax.sgd: XLA:GPU computes the strided convolution's input gradient with cuDNN's"
    " backward-input call and folds the update w - lr * dw into the weight gradients' calls",
    train_step(_regression_loss(FlaxUNet()), _SGD),
    with_optimizer_state(
        _SGD,
        lambda r: (
            flax_params(FlaxUNet(), r, normal(r, 2, 8, 8, 3))["params"],
            normal(r, 2, 8, 8, 3),
            normal(r, 2, 8, 8, 2),
        ),
    ),
    "cnn",
    "conv-transpose",
    "resize",
    "training",
    "optimizer",
    "sgd",
)


class FlaxViT(nn.Module):
    """A ViT front: a patch embedding (nn.Conv with kernel and stride 4 on 8x8 images:
    4 patches), a learned class token and 3 register tokens prepended (ViT with registers;
    8 tokens an image: XLA:GPU 0.12 finds no Triton tile sizes for the projections of 5),
    learned position embeddings, one pre-norm self-attention layer, and a head on the
    class token."""

    width: int = 8
    registers: int = 3

    @nn.compact
    def __call__(self, x):
        patches = nn.Conv(self.width, (4, 4), strides=(4, 4), padding="VALID")(x)
        patches = patches.reshape(x.shape[0], -1, self.width)
        cls = self.param("cls", nn.initializers.normal(0.02), (1, 1 + self.registers, self.width))
        cls = jnp.broadcast_to(cls, (x.shape[0], *cls.shape[1:]))
        tokens = jnp.concatenate([cls, patches], 1)
        position = self.param("position", nn.initializers.normal(0.02), tokens.shape[1:])
        tokens = tokens + position
        tokens = tokens + nn.SelfAttention(num_heads=2)(nn.LayerNorm()(tokens))
        return nn.Dense(CLASSES)(nn.LayerNorm()(tokens[:, 0]))


add(
    "flax_vit_patch_embedding",
    "flax",
    "ViT: patch embedding (nn.Conv 4x4, stride 4), a learned class token and 3 register"
    " tokens concatenated, learned position embeddings, nn.SelfAttention (2 heads), head"
    " on the class token, on NHWC f32 [4,8,8,3]",
    _flax_apply(FlaxViT()),
    lambda r: (flax_params(FlaxViT(), r, images(r)), images(r)),
    "attention",
    "cnn",
    "forward",
)


class FlaxSampler(nn.Module):
    """A decoding step: logits of a dense head, a temperature, top-p (nucleus) filtering by
    sort and cumsum, then a draw with jax.random.categorical and a Gumbel-max draw."""

    top_p: float = 0.8

    @nn.compact
    def __call__(self, x, sample_key):
        logits = nn.Dense(VOCAB)(x) / 0.7
        order = jnp.argsort(-logits, axis=-1)
        sorted_logits = jnp.take_along_axis(logits, order, axis=-1)
        cumulative = jnp.cumsum(jax.nn.softmax(sorted_logits, axis=-1), axis=-1)
        keep_sorted = cumulative - jax.nn.softmax(sorted_logits, axis=-1) < self.top_p
        threshold = jnp.min(jnp.where(keep_sorted, sorted_logits, jnp.inf), -1, keepdims=True)
        filtered = jnp.where(logits >= threshold, logits, -jnp.inf)
        categorical_key, gumbel_key = jax.random.split(sample_key)
        drawn = jax.random.categorical(categorical_key, filtered, axis=-1)
        gumbel = jax.random.gumbel(gumbel_key, logits.shape)
        return drawn, jnp.argmax(filtered + gumbel, axis=-1), jax.nn.log_softmax(filtered)


add(
    "flax_top_p_sampling",
    "flax",
    "a decoding step: nn.Dense logits over 16 tokens, temperature, top-p 0.8 filtering"
    " (argsort, take_along_axis, cumsum of softmax), jax.random.categorical and a"
    " jax.random.gumbel argmax draw from a raw key, on f32 [4,8]",
    lambda variables, sample_key, x: FlaxSampler().apply(variables, x, sample_key),
    lambda r: (
        flax_params(FlaxSampler(), r, normal(r, BATCH, FEATURES), key(r)),
        key(r),
        normal(r, BATCH, FEATURES),
    ),
    "sampling",
    "random",
    "sort",
    "forward",
)


class EquinoxConvVariants(eqx.Module):
    """Convolutions the first corpus lacks, channels-first and unbatched as equinox's are:
    a 1-D conv over a [4,12] signal, a dilated 3-D conv over a [2,4,4,4] volume, and on a
    [4,8,8] image a depthwise (groups = channels) strided conv and a ConvTranspose2d
    (stride 2, output padding 1) followed by a nearest-neighbour jax.image.resize."""

    conv1d: eqx.nn.Conv1d
    conv3d: eqx.nn.Conv3d
    depthwise: eqx.nn.Conv2d
    transpose: eqx.nn.ConvTranspose2d

    def __init__(self, key):
        k1, k2, k3, k4 = jax.random.split(key, 4)
        self.conv1d = eqx.nn.Conv1d(4, 6, 3, stride=2, padding=1, key=k1)
        self.conv3d = eqx.nn.Conv3d(2, 3, 2, dilation=2, key=k2)
        self.depthwise = eqx.nn.Conv2d(4, 4, 3, stride=2, padding=1, groups=4, key=k3)
        self.transpose = eqx.nn.ConvTranspose2d(
            4, 2, 3, stride=2, padding=1, output_padding=1, key=k4
        )

    def __call__(self, signal, volume, image):
        a = jax.nn.relu(self.conv1d(signal))
        b = jnp.tanh(self.conv3d(volume))
        c = self.transpose(jax.nn.relu(self.depthwise(image)))  # [2,8,8]
        return a, b, jax.image.resize(c, (2, 12, 12), method="nearest")


_EQX_CONVS = EquinoxModel(EquinoxConvVariants)
add(
    "equinox_conv1d_conv3d_transpose",
    "equinox",
    "eqx.nn.Conv1d (stride 2), a dilated eqx.nn.Conv3d, a depthwise strided eqx.nn.Conv2d"
    " (groups 4), eqx.nn.ConvTranspose2d (stride 2, output padding 1) and a nearest"
    " jax.image.resize to 12x12, vmapped over batches of 2",
    lambda params, signal, volume, image: jax.vmap(_EQX_CONVS(params))(signal, volume, image),
    lambda r: (
        _EQX_CONVS.params(r),
        normal(r, 2, 4, 12),
        normal(r, 2, 2, 4, 4, 4),
        normal(r, 2, 4, 8, 8),
    ),
    "cnn",
    "conv-transpose",
    "resize",
    "forward",
)


class EquinoxVAE(eqx.Module):
    """A VAE on 8 features: an MLP encoder to a mean and a log-variance of 2 latents, the
    reparameterisation trick (mean + exp(logvar / 2) x standard normal noise from a key),
    an MLP decoder."""

    encoder: eqx.nn.MLP
    decoder: eqx.nn.MLP

    def __init__(self, key):
        encoder_key, decoder_key = jax.random.split(key)
        self.encoder = eqx.nn.MLP(
            FEATURES, 4, HIDDEN, depth=1, activation=jax.nn.softplus, key=encoder_key
        )
        self.decoder = eqx.nn.MLP(2, FEATURES, HIDDEN, depth=1, key=decoder_key)

    def __call__(self, x, noise):
        mean, log_variance = jnp.split(self.encoder(x), 2)
        z = mean + jnp.exp(0.5 * log_variance) * noise
        reconstruction = self.decoder(z)
        kl = -0.5 * jnp.sum(1 + log_variance - mean**2 - jnp.exp(log_variance))
        return jnp.sum(jnp.square(reconstruction - x)) + kl


_EQX_VAE = EquinoxModel(EquinoxVAE)


def _vae_loss(params, noise_key, x):
    noise = jax.random.normal(noise_key, (x.shape[0], 2))  # the batch's standard normals
    return jnp.mean(jax.vmap(_EQX_VAE(params))(x, noise))


_ADABELIEF = optax.adabelief(1e-3)
add(
    "equinox_vae_adabelief_step",
    "equinox",
    "training step of an equinox VAE (eqx.nn.MLP encoder to mean and log-variance, the"
    " reparameterisation trick with jax.random.normal from a raw key, eqx.nn.MLP"
    " decoder, Gaussian KL) with optax.adabelief, on f32 [4,8]",
    train_step(_vae_loss, _ADABELIEF),
    with_optimizer_state(
        _ADABELIEF, lambda r: (_EQX_VAE.params(r), key(r), normal(r, BATCH, FEATURES))
    ),
    "vae",
    "random",
    "mlp",
    "training",
    "optimizer",
    "adabelief",
)


_EQX_DP_MLP = EquinoxModel(lambda k: eqx.nn.MLP(FEATURES, CLASSES, HIDDEN, depth=1, key=k))


def _dp_sgd_step(params, noise_key, x, y, clip: float = 1.0, noise: float = 0.5):
    """DP-SGD: each example's gradient (jax.vmap of jax.grad), clipped to a global norm of
    ``clip``, summed, Gaussian noise of ``noise x clip`` added, averaged, an SGD step."""

    def example_loss(p, xi, yi):
        return cross_entropy(_EQX_DP_MLP(p)(xi)[None], yi[None])

    grads = jax.vmap(jax.grad(example_loss), in_axes=(None, 0, 0))(params, x, y)
    squares = [jnp.sum(g.reshape(g.shape[0], -1) ** 2, 1) for g in jax.tree.leaves(grads)]
    norms = jnp.sqrt(sum(squares))
    factors = jnp.minimum(1.0, clip / (norms + 1e-6))
    clipped_sum = jax.tree.map(lambda g: jnp.einsum("b,b...->...", factors, g), grads)
    flat, unravel = ravel_pytree(clipped_sum)  # one noise draw for every parameter
    noisy = (flat + noise * clip * jax.random.normal(noise_key, flat.shape)) / x.shape[0]
    update = unravel(noisy)
    return jax.tree.map(lambda p, g: p - 0.1 * g, params, update), norms


add(
    "equinox_dp_sgd_per_example_clipping",
    "equinox",
    "DP-SGD step of an eqx.nn.MLP: per-example gradients (jax.vmap of jax.grad), each"
    " clipped to norm 1, summed, Gaussian noise from a raw key added to the raveled sum"
    " (jax.flatten_util.ravel_pytree), an SGD update; returns"
    " the parameters and the per-example norms",
    _dp_sgd_step,
    lambda r: (_EQX_DP_MLP.params(r), key(r), normal(r, BATCH, FEATURES), labels(r)),
    "per-example-gradients",
    "gradient-clipping",
    "random",
    "training",
)


def _hk_conv_variants(x):
    x = hk.Conv2D(6, 3, stride=2, with_bias=False)(x)  # [4,4,4,6]
    x = jax.nn.relu(hk.Conv2D(6, 3, rate=2, feature_group_count=3, with_bias=False)(x))
    x = hk.DepthwiseConv2D(channel_multiplier=2, kernel_shape=3, with_bias=False)(x)
    x = hk.Conv2DTranspose(4, 3, stride=2, with_bias=False)(jax.nn.relu(x))  # [4,8,8,4]
    return hk.Linear(CLASSES)(hk.Flatten()(jnp.mean(x, axis=(1, 2), keepdims=True)))


_HK_CONVS = hk.without_apply_rng(hk.transform(_hk_conv_variants))
_RMSPROP = optax.rmsprop(1e-3)
add(
    "haiku_conv_variants_rmsprop_step",
    "haiku",
    "training step through a strided hk.Conv2D, a dilated (rate 2) grouped (3 groups)"
    " hk.Conv2D, hk.DepthwiseConv2D (multiplier 2) and hk.Conv2DTranspose (stride 2), mean"
    " pooled, hk.Linear, with optax.rmsprop, on NHWC f32 [4,8,8,3]",
    train_step(_haiku_loss(_HK_CONVS), _RMSPROP),
    with_optimizer_state(_RMSPROP, _haiku_classifier_batch(_HK_CONVS, images)),
    "cnn",
    "conv-transpose",
    "training",
    "optimizer",
    "rmsprop",
)


def _hk_smoothed_classifier(x):
    return hk.nets.MLP([HIDDEN, CLASSES], activation=jax.nn.silu)(x)


_HK_SMOOTHED = hk.without_apply_rng(hk.transform(_hk_smoothed_classifier))


def _label_smoothing_loss(params, x, y):
    """Label-smoothed cross-entropy (optax.smooth_labels, optax.softmax_cross_entropy)
    plus the integer-label form and a z-loss on logsumexp, as large models add."""
    logits = _HK_SMOOTHED.apply(params, x)
    smoothed = optax.smooth_labels(jax.nn.one_hot(y, CLASSES), 0.1)
    z_loss = 1e-3 * jnp.square(jax.nn.logsumexp(logits, axis=-1))
    integer = optax.softmax_cross_entropy_with_integer_labels(logits, y)
    return jnp.mean(optax.softmax_cross_entropy(logits, smoothed) + 0.5 * integer + z_loss)


_ADAGRAD = optax.adagrad(0.05)
add(
    "haiku_label_smoothing_adagrad_step",
    "haiku",
    "training step of an hk.nets.MLP (SiLU) with label-smoothed cross-entropy"
    " (optax.smooth_labels), optax.softmax_cross_entropy_with_integer_labels and a"
    " logsumexp z-loss, optax.adagrad",
    train_step(_label_smoothing_loss, _ADAGRAD),
    with_optimizer_state(
        _ADAGRAD, _haiku_classifier_batch(_HK_SMOOTHED, lambda r: normal(r, BATCH, FEATURES))
    ),
    "mlp",
    "training",
    "optimizer",
    "adagrad",
)


def _hk_ctc_model(x):
    return hk.Linear(VOCAB // 2)(jax.nn.relu(hk.Linear(HIDDEN)(x)))


_HK_CTC = hk.without_apply_rng(hk.transform(_hk_ctc_model))
#: CTC's frames and label length: [2 sequences, 8 frames, 8 features], 3 labels each.
_CTC_FRAMES, _CTC_LABELS = 8, 3


def _ctc_loss(params, x, frame_padding, labels_, label_padding):
    logits = _HK_CTC.apply(params, x)
    return jnp.mean(optax.ctc_loss(logits, frame_padding, labels_, label_padding))


def _ctc_arguments(rng):
    x = normal(rng, 2, _CTC_FRAMES, FEATURES)
    frame_padding = np.zeros((2, _CTC_FRAMES), np.float32)
    frame_padding[1, 6:] = 1.0  # the second sequence has 6 frames
    label_ids = integers(rng, 2, _CTC_LABELS, low=1, high=VOCAB // 2)
    label_padding = np.zeros((2, _CTC_LABELS), np.float32)
    label_padding[1, 2:] = 1.0  # and 2 labels
    return haiku_params(_HK_CTC, rng, x), x, frame_padding, label_ids, label_padding


_LION = optax.lion(1e-4, weight_decay=0.01)
add(
    "haiku_ctc_lion_step",
    "haiku",
    "training step of an hk.Linear frame classifier under optax.ctc_loss (a scan of"
    " logsumexp over alignments, padded frames and labels) with optax.lion",
    train_step(_ctc_loss, _LION),
    with_optimizer_state(_LION, _ctc_arguments),
    "ctc",
    "scan",
    "training",
    "optimizer",
    "lion",
)

_optax_step(
    "optax_masked_decay_chain_step",
    "optax.chain(optax.clip_by_global_norm, optax.scale_by_adam, optax.add_decayed_weights"
    " masked to the kernels (optax.masked), optax.scale_by_learning_rate of an"
    " optax.linear_schedule)",
    optax.chain(
        optax.clip_by_global_norm(1.0),
        optax.scale_by_adam(b2=0.95),
        optax.masked(optax.add_decayed_weights(0.1), lambda p: {"kernel": True, "bias": False}),
        optax.scale_by_learning_rate(optax.linear_schedule(1e-2, 1e-3, 20)),
    ),
    "adam",
    "weight-decay",
    "schedule",
    "gradient-clipping",
)
_optax_step(
    "optax_contrib_muon_step",
    "optax.contrib.muon: the [8,4] kernel's momentum orthogonalised by Newton-Schulz"
    " iterations (matmuls), the bias by adam",
    optax_contrib.muon(1e-2),
    "muon",
)
_optax_step(
    "optax_contrib_schedule_free_adamw_step",
    "optax.contrib.schedule_free_adamw: the iterate interpolated between the fast and the"
    " averaged weights, the averaging weight from the step count",
    optax_contrib.schedule_free_adamw(1e-2, warmup_steps=2),
    "schedule-free",
    "adamw",
)


class FlaxGreedyDecoder(nn.Module):
    """Greedy decoding to an end token: a GRU cell over tied embeddings (``nn.Embed.attend``
    for the logits), stepped by ``lax.while_loop`` until every sequence has emitted token
    0 or 8 steps have passed; tokens written with ``dynamic_update_slice``."""

    steps: int = 8

    def setup(self):
        self.embed = nn.Embed(VOCAB, FEATURES)
        self.cell = nn.GRUCell(FEATURES)

    def __call__(self, first_tokens):
        batch = first_tokens.shape[0]

        def condition(state):
            step, _, _, done = state
            return (step < self.steps) & ~jnp.all(done)

        def body(state):
            step, tokens, carry, done = state
            previous = lax.dynamic_index_in_dim(tokens, step, axis=1, keepdims=False)
            carry, out = self.cell(carry, self.embed(previous))
            chosen = jnp.argmax(self.embed.attend(out), axis=-1).astype(jnp.int32)
            chosen = jnp.where(done, 0, chosen)
            tokens = lax.dynamic_update_slice_in_dim(tokens, chosen[:, None], step + 1, axis=1)
            return step + 1, tokens, carry, done | (chosen == 0)

        tokens = jnp.zeros((batch, self.steps + 1), jnp.int32).at[:, 0].set(first_tokens)
        carry = jnp.zeros((batch, FEATURES))
        state = (jnp.int32(0), tokens, carry, jnp.zeros(batch, bool))
        # Initialise the submodules outside the loop: a while body cannot create parameters.
        if self.is_initializing():
            body(state)
        step, tokens, carry, _ = lax.while_loop(condition, body, state)
        return step, tokens, carry


add(
    "flax_greedy_decode_while_loop",
    "flax",
    "greedy decoding: nn.GRUCell over nn.Embed tokens with tied output weights"
    " (nn.Embed.attend), argmax, lax.while_loop until all 4 sequences emit token 0 or 8"
    " steps, tokens written by dynamic_update_slice",
    lambda variables, first: FlaxGreedyDecoder().apply(variables, first),
    lambda r: (
        flax_params(FlaxGreedyDecoder(), r, tokens(r, BATCH)),
        tokens(r, BATCH),
    ),
    "recurrent",
    "gru",
    "embedding",
    "while-loop",
    "forward",
)


class FlaxFFTLongConvolution(nn.Module):
    """A Hyena/S4-style long convolution: a learned filter over the whole sequence applied
    by FFT (``jnp.fft.rfft``, product, ``irfft``, causal by zero padding to twice the
    length), a gate, and a diagonal linear recurrence by ``lax.associative_scan``."""

    @nn.compact
    def __call__(self, x):  # [batch, steps, features]
        steps = x.shape[1]
        kernel = self.param("filter", nn.initializers.normal(0.3), (steps, x.shape[-1]))
        n = 2 * steps
        spectrum = jnp.fft.rfft(x, n=n, axis=1) * jnp.fft.rfft(kernel, n=n, axis=0)[None]
        convolved = jnp.fft.irfft(spectrum, n=n, axis=1)[:, :steps]
        gated = convolved * nn.sigmoid(nn.Dense(x.shape[-1])(x))
        decay = nn.sigmoid(self.param("decay", nn.initializers.normal(1.0), (x.shape[-1],)))

        def combine(a, b):
            return a[0] * b[0], a[1] * b[0] + b[1]

        decays = jnp.broadcast_to(decay, gated.shape)
        _, states = lax.associative_scan(combine, (decays, gated), axis=1)
        return nn.Dense(CLASSES)(states[:, -1]), states


add(
    "flax_fft_long_convolution_associative_scan",
    "flax",
    "a long convolution by FFT (jnp.fft.rfft of input and learned filter, product, irfft,"
    " causal by padding), a sigmoid gate, a diagonal linear recurrence by"
    " lax.associative_scan, dense head, on f32 [2,8,4]",
    _flax_apply(FlaxFFTLongConvolution()),
    lambda r: (
        flax_params(FlaxFFTLongConvolution(), r, normal(r, 2, 8, 4)),
        normal(r, 2, 8, 4),
    ),
    "fft",
    "scan",
    "forward",
)


def _hk_image_ops(x):
    """Reflect padding, a VALID hk.Conv2D, hk.max_pool with SAME padding, jnp.roll, a
    bicubic jax.image.resize and a stable argsort of the pooled features. (An avg_pool
    with SAME padding divides by window counts XLA folds into a constant its dump elides,
    which heron cannot read back.)"""
    x = jnp.pad(x, ((0, 0), (1, 1), (1, 1), (0, 0)), mode="reflect")
    x = jax.nn.gelu(hk.Conv2D(4, 3, padding="VALID")(x), approximate=False)  # [4,8,8,4]
    x = hk.max_pool(x, window_shape=(1, 3, 3, 1), strides=(1, 2, 2, 1), padding="SAME")
    x = jnp.roll(x, shift=1, axis=1) - jnp.flip(x, axis=2)
    up = jax.image.resize(x, (x.shape[0], 6, 6, x.shape[-1]), method="cubic")
    order = jnp.argsort(up.mean(axis=(1, 2)), axis=-1, stable=True)
    return hk.Linear(CLASSES)(hk.Flatten()(up)), order


_HK_IMAGE_OPS = hk.without_apply_rng(hk.transform(_hk_image_ops))
add(
    "haiku_reflect_pad_cubic_resize",
    "haiku",
    "jnp.pad reflect, hk.Conv2D VALID, exact GELU (erf), hk.max_pool SAME with stride 2,"
    " jnp.roll, jnp.flip, bicubic jax.image.resize 4x4 -> 6x6, a stable jnp.argsort,"
    " hk.Linear, on NHWC f32 [4,8,8,3]",
    _HK_IMAGE_OPS.apply,
    lambda r: (haiku_params(_HK_IMAGE_OPS, r, images(r)), images(r)),
    "cnn",
    "pooling",
    "resize",
    "sort",
    "forward",
)


def _segment_statistics(params, values, segment_ids, queries):
    """Metrics a training loop computes on the side: per-class counts (jnp.bincount),
    segment means (jax.ops.segment_sum), a cumulative product, bucketing of queries
    (jnp.searchsorted into sorted edges), a gather with mode="fill" past the end, and a
    top-1 accuracy of an equinox linear classifier."""
    logits = jax.vmap(_EQX_LINEAR(params))(values)
    predicted = jnp.argmax(logits, axis=-1)
    accuracy = jnp.mean(predicted == segment_ids[: values.shape[0]] % CLASSES)
    counts = jnp.bincount(segment_ids, length=CLASSES)
    sums = jax.ops.segment_sum(
        values[:, 0].repeat(2)[: segment_ids.shape[0]], segment_ids, num_segments=CLASSES
    )
    means = sums / jnp.maximum(counts, 1)
    edges = jnp.sort(values[:, 1])
    buckets = jnp.searchsorted(edges, queries, side="right")
    picked = jnp.take(values[:, 2], buckets, mode="fill", fill_value=-1.0)
    growth = jnp.cumprod(1.0 + 0.1 * jnp.tanh(values[:, 3]))
    return accuracy, counts, means, buckets, picked, growth


_EQX_LINEAR = EquinoxModel(lambda k: eqx.nn.Linear(FEATURES, CLASSES, key=k))
add(
    "equinox_segment_metrics",
    "equinox",
    "metrics beside an eqx.nn.Linear classifier: argmax accuracy, jnp.bincount,"
    " jax.ops.segment_sum means, jnp.sort and jnp.searchsorted bucketing, jnp.take with"
    " mode='fill' past the end, jnp.cumprod",
    _segment_statistics,
    lambda r: (
        _EQX_LINEAR.params(r),
        normal(r, BATCH, FEATURES),
        integers(r, 2 * BATCH, high=CLASSES),
        normal(r, 6),
    ),
    "scatter",
    "sort",
    "gather",
    "forward",
)
_optax_step(
    "optax_inject_hyperparams_apply_if_finite_step",
    "optax.apply_if_finite around optax.inject_hyperparams(optax.adamw) (learning rate"
    " and weight decay carried in the state) after optax.zero_nans, the update skipped"
    " when a gradient is not finite",
    optax.chain(
        optax.zero_nans(),
        optax.apply_if_finite(
            optax.inject_hyperparams(optax.adamw)(learning_rate=1e-2, weight_decay=0.05), 3
        ),
    ),
    "adamw",
    "schedule",
)


# -- quasi-Newton, key/value caches, stateful layers, gamma sampling, graphs, ODEs, ranks ----


_FLAX_LOGISTIC = nn.Dense(1)
_LBFGS = optax.lbfgs()


def _lbfgs_loss(params, x, y):
    """L2-regularised logistic regression (a flax nn.Dense(1)), L-BFGS's textbook use."""
    logits = _FLAX_LOGISTIC.apply({"params": params}, x)[:, 0]
    l2 = sum(jnp.sum(jnp.square(p)) for p in jax.tree.leaves(params))
    return jnp.mean(optax.sigmoid_binary_cross_entropy(logits, y)) + 1e-2 * l2


def _lbfgs_step(params, opt_state, x, y):
    """An iteration of optax.lbfgs as its documentation writes it:
    optax.value_and_grad_from_state reuses the line search's value and gradient, the update
    runs the zoom line search (a while loop of conds) on ``value_fn``."""

    def loss(p):
        return _lbfgs_loss(p, x, y)

    value, grad = optax.value_and_grad_from_state(loss)(params, state=opt_state)
    updates, opt_state = _LBFGS.update(
        grad, opt_state, params, value=value, grad=grad, value_fn=loss
    )
    return optax.apply_updates(params, updates), opt_state, value


def _lbfgs_arguments(rng):
    x = normal(rng, 16, FEATURES)
    y = (x[:, 0] - x[:, 1] + normal(rng, 16, scale=0.5) > 0).astype(np.float32)
    params = flax_params(_FLAX_LOGISTIC, rng, x)["params"]
    state = _LBFGS.init(params)
    # two real iterations first: the memory of differences is not empty
    step = jax.jit(_lbfgs_step)
    for _ in range(2):
        params, state, _ = step(params, state, x, y)
    return as_numpy(params), as_numpy(state), x, y


add(
    "optax_lbfgs_zoom_linesearch",
    "optax",
    "an iteration of optax.lbfgs (memory 10, the default zoom line search: while loops of"
    " conds) with optax.value_and_grad_from_state, on an L2-regularised logistic regression"
    " (flax nn.Dense(1), optax.sigmoid_binary_cross_entropy) of 16 points; the state after"
    " two real iterations",
    _lbfgs_step,
    _lbfgs_arguments,
    "quasi-newton",
    "line-search",
    "training",
    "optimizer",
    "lbfgs",
)


class FlaxCachedDecoder(nn.Module):
    """One decoding step of a small language model with a key/value cache:
    nn.MultiHeadDotProductAttention(decode=True) writes the step's key and value at the
    cache index (dynamic_update_slice) and attends to the filled prefix."""

    @nn.compact
    def __call__(self, token_ids):  # [batch, 1]
        embed = nn.Embed(VOCAB, FEATURES)
        x = embed(token_ids)
        x = x + nn.MultiHeadDotProductAttention(num_heads=2, decode=True)(nn.LayerNorm()(x))
        return embed.attend(nn.LayerNorm()(x))


_FLAX_CACHED = FlaxCachedDecoder()
#: The cache's length: 3 prompt tokens, then 5 generated ones.
_CACHE_LENGTH, _PROMPT = 8, 3


def _kv_cache_decode(params, cache, last_tokens, steps: int = _CACHE_LENGTH - _PROMPT):
    """Greedy decoding by lax.scan: each step applies the decoder to the last token with the
    cache mutable, takes the argmax, and carries the updated cache."""

    def step(carry, _):
        cache, token_ids = carry
        logits, updated = _FLAX_CACHED.apply(
            {"params": params, "cache": cache}, token_ids, mutable=["cache"]
        )
        chosen = jnp.argmax(logits[:, -1], axis=-1).astype(jnp.int32)[:, None]
        return (updated["cache"], chosen), (chosen[:, 0], logits[:, -1])

    (cache, _), (generated, logits) = lax.scan(step, (cache, last_tokens), None, length=steps)
    return generated.T, logits, cache


def _kv_cache_arguments(rng):
    prompt = tokens(rng, 2, _PROMPT)
    variables = _FLAX_CACHED.init(init_key(rng), jnp.zeros((2, _CACHE_LENGTH), jnp.int32))
    params, cache = variables["params"], variables["cache"]
    for t in range(_PROMPT - 1):  # the prompt but its last token, through the cache
        _, updated = _FLAX_CACHED.apply(
            {"params": params, "cache": cache}, prompt[:, t : t + 1], mutable=["cache"]
        )
        cache = updated["cache"]
    return as_numpy(params), as_numpy(cache), prompt[:, -1:]


add(
    "flax_kv_cache_decode_scan",
    "flax",
    "greedy decoding with a key/value cache: nn.MultiHeadDotProductAttention(decode=True,"
    " 2 heads) between nn.LayerNorms, tied nn.Embed logits, the cache (length 8, 2 prompt"
    " tokens in it) mutable under lax.scan over 5 steps of a batch of 2",
    _kv_cache_decode,
    _kv_cache_arguments,
    "attention",
    "kv-cache",
    "scan",
    "embedding",
    "forward",
)


class EquinoxSpectralNormMLP(eqx.Module):
    """A discriminator's layers under eqx.nn.SpectralNorm: the weight divided by its
    largest singular value, estimated by one power iteration whose vectors are eqx.nn.State."""

    first: eqx.nn.SpectralNorm
    second: eqx.nn.SpectralNorm

    def __init__(self, key):
        first_key, second_key, u_key, v_key = jax.random.split(key, 4)
        self.first = eqx.nn.SpectralNorm(
            eqx.nn.Linear(FEATURES, HIDDEN, key=first_key), "weight", key=u_key
        )
        self.second = eqx.nn.SpectralNorm(
            eqx.nn.Linear(HIDDEN, 1, key=second_key), "weight", key=v_key
        )

    def __call__(self, x, state):
        h, state = self.first(x, state)
        h, state = self.second(jax.nn.leaky_relu(h, 0.2), state)
        return h[0], state


_EQX_SPECTRAL_STATIC = eqx.partition(
    eqx.nn.make_with_state(EquinoxSpectralNormMLP)(jax.random.PRNGKey(0))[0], eqx.is_array
)[1]
_ADAM_GAN = optax.adam(2e-4, b1=0.5, b2=0.999)


def _spectral_norm_step(params, state, opt_state, real, fake):
    """A GAN discriminator's step (SN-GAN's hinge loss on real and fake samples, one batch
    through the discriminator) with the power iteration's state threaded through the
    vmapped batch (``axis_name``, as equinox's stateful layers are batched) and returned."""

    def loss(params, state):
        model = eqx.combine(params, _EQX_SPECTRAL_STATIC)
        batched = jax.vmap(model, in_axes=(0, None), out_axes=(0, None), axis_name="batch")
        logits, state = batched(jnp.concatenate([real, fake]), state)
        real_logits, fake_logits = jnp.split(logits, 2)
        value = jnp.mean(jax.nn.relu(1 - real_logits)) + jnp.mean(jax.nn.relu(1 + fake_logits))
        return value, state

    (value, state), grads = jax.value_and_grad(loss, has_aux=True)(params, state)
    updates, opt_state = _ADAM_GAN.update(grads, opt_state, params)
    return optax.apply_updates(params, updates), state, opt_state, value


def _spectral_norm_arguments(rng):
    model, state = eqx.nn.make_with_state(EquinoxSpectralNormMLP)(init_key(rng))
    params = eqx.partition(model, eqx.is_array)[0]
    opt_state = _ADAM_GAN.init(params)
    for _ in range(3):
        grads = jax.tree.map(lambda p: normal(rng, *p.shape, scale=0.1), params)
        _, opt_state = _ADAM_GAN.update(grads, opt_state, params)
    return (
        as_numpy(params),
        as_numpy(state),
        as_numpy(opt_state),
        normal(rng, BATCH, FEATURES),
        normal(rng, BATCH, FEATURES, scale=2.0),
    )


add(
    "equinox_spectral_norm_gan_step",
    "equinox",
    "a GAN discriminator's training step: two eqx.nn.Linear under eqx.nn.SpectralNorm (one"
    " power iteration, its vectors eqx.nn.State threaded through a vmap with axis_name and"
    " returned), leaky ReLU, SN-GAN's hinge loss on real and fake batches,"
    " optax.adam(b1=0.5)",
    _spectral_norm_step,
    _spectral_norm_arguments,
    "spectral-norm",
    "stateful",
    "training",
    "optimizer",
    "adam",
)


def _hk_dirichlet_vae(x, sample_key):
    """A Dirichlet VAE: an hk.nets.MLP encoder to positive concentrations (softplus), a
    reparameterised jax.random.dirichlet draw (gamma variates by rejection sampling, their
    gradient by implicit differentiation), an hk.nets.MLP decoder, and the KL divergence to
    a flat Dirichlet prior (lgamma, digamma)."""
    gammaln, digamma = jax.scipy.special.gammaln, jax.scipy.special.digamma
    concentration = jax.nn.softplus(hk.nets.MLP([HIDDEN, CLASSES])(x)) + 0.1
    z = jax.random.dirichlet(sample_key, concentration)
    reconstruction = hk.nets.MLP([HIDDEN, x.shape[-1]])(z)
    prior = jnp.ones_like(concentration)
    total = concentration.sum(-1)
    kl = (
        gammaln(total)
        - jnp.sum(gammaln(concentration), -1)
        - gammaln(prior.sum(-1))
        + jnp.sum(gammaln(prior), -1)
        + jnp.sum((concentration - prior) * (digamma(concentration) - digamma(total)[:, None]), -1)
    )
    return jnp.mean(jnp.sum(jnp.square(reconstruction - x), -1) + kl)


_HK_DIRICHLET = hk.without_apply_rng(hk.transform(_hk_dirichlet_vae))
_ADAMAX = optax.adamax(1e-3)
add(
    "haiku_dirichlet_vae_adamax_step",
    "haiku",
    "training step of a Dirichlet VAE: hk.nets.MLP encoder to softplus concentrations,"
    " jax.random.dirichlet from a raw key (gamma variates by rejection-sampling while"
    " loops, reparameterised by implicit differentiation), hk.nets.MLP decoder, the"
    " Dirichlet KL to a flat prior (gammaln, digamma), optax.adamax, on f32 [4,8]",
    train_step(_HK_DIRICHLET.apply, _ADAMAX),
    with_optimizer_state(
        _ADAMAX,
        lambda r: (
            haiku_params(_HK_DIRICHLET, r, normal(r, BATCH, FEATURES), init_key(r)),
            normal(r, BATCH, FEATURES),
            key(r),
        ),
    ),
    "vae",
    "random",
    "mlp",
    "training",
    "optimizer",
    "adamax",
)


#: A graph of 6 nodes (states of 8) and 10 directed edges; node 5 receives nothing, node 2
#: three times.
_GRAPH_NODES, _GRAPH_WIDTH = 6, 8
_SENDERS = np.array([0, 1, 3, 4, 0, 2, 1, 5, 3, 4], np.int32)
_RECEIVERS = np.array([2, 2, 2, 0, 1, 1, 3, 3, 4, 0], np.int32)


def _hk_graph_network(nodes, edges, senders, receivers):
    """Two rounds of message passing with shared weights (as gated graph networks tie
    them): each edge's message an hk.Linear of its sender, its receiver and itself;
    messages aggregated per receiver by jax.ops.segment_sum and jax.ops.segment_max (an
    empty segment's -inf replaced by 0); an hk.Linear node update with a residual; a
    graph-level readout (mean and max of nodes)."""
    h = hk.Linear(_GRAPH_WIDTH)(nodes)
    message, update = hk.Linear(_GRAPH_WIDTH), hk.Linear(_GRAPH_WIDTH)
    for _ in range(2):
        messages = jax.nn.relu(message(jnp.concatenate([h[senders], h[receivers], edges], -1)))
        summed = jax.ops.segment_sum(messages, receivers, num_segments=_GRAPH_NODES)
        largest = jax.ops.segment_max(messages, receivers, num_segments=_GRAPH_NODES)
        largest = jnp.where(jnp.isfinite(largest), largest, 0.0)
        h = h + jnp.tanh(update(jnp.concatenate([h, summed, largest], axis=-1)))
    readout = jnp.concatenate([h.mean(0), h.max(0)])
    return hk.Linear(1)(readout)[0]


_HK_GRAPH = hk.without_apply_rng(hk.transform(_hk_graph_network))
_ADAMW_GRAPH = optax.adamw(1e-3, weight_decay=1e-2)


def _graph_loss(params, nodes, edges, senders, receivers, target):
    return jnp.square(_HK_GRAPH.apply(params, nodes, edges, senders, receivers) - target)


def _graph_arguments(rng):
    nodes, edges = normal(rng, _GRAPH_NODES, FEATURES), normal(rng, _SENDERS.size, 2)
    params = haiku_params(_HK_GRAPH, rng, nodes, edges, _SENDERS, _RECEIVERS)
    return params, nodes, edges, _SENDERS, _RECEIVERS, np.float32(0.5)


add(
    "haiku_graph_network_adamw_step",
    "haiku",
    "training step of a message-passing graph network (6 nodes, 10 edges with repeated"
    " receivers and a node receiving nothing, 2 rounds with shared weights): hk.Linear"
    " messages from gathered sender and receiver states, jax.ops.segment_sum and"
    " segment_max aggregation, hk.Linear node updates, mean and max readout; optax.adamw",
    train_step(_graph_loss, _ADAMW_GRAPH),
    with_optimizer_state(_ADAMW_GRAPH, _graph_arguments),
    "graph",
    "scatter",
    "gather",
    "training",
    "optimizer",
    "adamw",
)


_EQX_VECTOR_FIELD = EquinoxModel(
    lambda k: eqx.nn.MLP(FEATURES // 2, FEATURES // 2, HIDDEN, depth=1, activation=jnp.tanh, key=k)
)
_ODE_STEPS, _ODE_DT = 6, 0.1


def _neural_ode_loss(params, y0, target):
    """A neural ODE dy/dt = f(y), f an eqx.nn.MLP (autonomous, as diffrax's neural ODE
    example), integrated by classic fixed-step RK4 under lax.scan over 6 steps, vmapped over
    the batch; the loss is the mean squared error of the whole trajectory against the
    target's."""
    field = _EQX_VECTOR_FIELD(params)

    def solve(y):
        def rk4(y, _):
            k1 = field(y)
            k2 = field(y + _ODE_DT / 2 * k1)
            k3 = field(y + _ODE_DT / 2 * k2)
            k4 = field(y + _ODE_DT * k3)
            y = y + _ODE_DT / 6 * (k1 + 2 * k2 + 2 * k3 + k4)
            return y, y

        return lax.scan(rk4, y, None, length=_ODE_STEPS)[1]

    trajectory = jax.vmap(solve)(y0)  # [batch, steps, state]
    return jnp.mean(jnp.square(trajectory - target))


_NADAM = optax.nadam(1e-3)
add(
    "equinox_neural_ode_rk4_nadam_step",
    "equinox",
    "training step of a neural ODE: an autonomous eqx.nn.MLP vector field, fixed-step"
    " RK4 under lax.scan over 6 steps vmapped over 4 initial states of 4, the trajectory's"
    " squared error, its gradient through the scan (a backward scan), optax.nadam",
    train_step(_neural_ode_loss, _NADAM),
    with_optimizer_state(
        _NADAM,
        lambda r: (
            _EQX_VECTOR_FIELD.params(r),
            normal(r, BATCH, FEATURES // 2),
            normal(r, BATCH, _ODE_STEPS, FEATURES // 2),
        ),
    ),
    "ode",
    "scan",
    "mlp",
    "training",
    "optimizer",
    "nadam",
)


class FlaxOrderStatistics(nn.Module):
    """Order statistics over a dense layer's scores: jnp.sort, jnp.median, jnp.quantile
    (linear interpolation), a learned piecewise-linear calibration (jnp.interp on sorted
    knots), jnp.searchsorted bucketing, lax.cummax, jnp.cumsum and lax.cumlogsumexp."""

    @nn.compact
    def __call__(self, x):  # [batch, features]
        scores = nn.Dense(HIDDEN)(x)  # [batch, 16]
        ordered = jnp.sort(scores, axis=-1)
        median = jnp.median(scores, axis=-1)
        quantiles = jnp.quantile(scores, jnp.array([0.1, 0.5, 0.9]), axis=-1)  # [3, batch]
        knots = jnp.sort(self.param("knots", nn.initializers.normal(1.0), (6,)))
        heights = self.param("heights", nn.initializers.normal(1.0), (6,))
        calibrated = jnp.interp(scores, knots, heights)
        buckets = jnp.searchsorted(knots, scores.reshape(-1)).reshape(scores.shape)
        running_max = lax.cummax(scores, axis=1)
        running_logsumexp = lax.cumlogsumexp(scores, axis=1)
        ranks = jnp.cumsum(ordered - median[:, None], axis=-1)
        cumulative = (running_max, running_logsumexp, ranks)
        return ordered, median, quantiles, calibrated, buckets, *cumulative


add(
    "flax_order_statistics",
    "flax",
    "order statistics of an nn.Dense's scores [4,16]: jnp.sort, jnp.median, jnp.quantile at"
    " 0.1/0.5/0.9, jnp.interp on learned knots (jnp.sort), jnp.searchsorted, lax.cummax,"
    " lax.cumlogsumexp, jnp.cumsum",
    _flax_apply(FlaxOrderStatistics()),
    lambda r: (
        flax_params(FlaxOrderStatistics(), r, normal(r, BATCH, FEATURES)),
        normal(r, BATCH, FEATURES),
    ),
    "sort",
    "scan",
    "forward",
)


def _hk_separable_convs(x):
    """A MobileNet-style block: hk.SeparableDepthwiseConv2D (a 3x1 then a 1x3 depthwise
    kernel), a strided and dilated hk.DepthwiseConv2D, a pointwise hk.Conv2D, then an
    hk.Conv2D with stride 2 and rate 2 at once, all SAME-padded, ReLU6 between."""
    x = jax.nn.relu6(hk.SeparableDepthwiseConv2D(channel_multiplier=2, kernel_shape=3)(x))
    x = hk.DepthwiseConv2D(channel_multiplier=1, kernel_shape=3, stride=2, rate=2)(x)
    x = jax.nn.relu6(hk.Conv2D(8, 1)(x))  # [4,4,4,8]
    x = jax.nn.relu6(hk.Conv2D(8, 3, stride=2, rate=2, padding="SAME")(x))  # [4,2,2,8]
    return hk.Linear(CLASSES)(jnp.mean(x, axis=(1, 2)))


_HK_SEPARABLE = hk.without_apply_rng(hk.transform(_hk_separable_convs))
_ADAMW_SEPARABLE = optax.adamw(1e-3, weight_decay=1e-4)
add(
    "haiku_separable_strided_dilated_conv_adamw_step",
    "haiku",
    "training step of a MobileNet-style block: hk.SeparableDepthwiseConv2D (multiplier 2),"
    " hk.DepthwiseConv2D with stride 2 and rate 2, a pointwise hk.Conv2D, an hk.Conv2D with"
    " stride 2 and rate 2, SAME padding, ReLU6, mean pooled, hk.Linear; optax.adamw, on"
    " NHWC f32 [4,8,8,3]",
    train_step(_haiku_loss(_HK_SEPARABLE), _ADAMW_SEPARABLE),
    with_optimizer_state(_ADAMW_SEPARABLE, _haiku_classifier_batch(_HK_SEPARABLE, images)),
    "cnn",
    "depthwise",
    "training",
    "optimizer",
    "adamw",
)


# -- linear algebra: lowered for CUDA (cuSOLVER's calls, which heron runs; XLA:GPU
# cannot compile the CPU's LAPACK calls) ----------------------------------------------


def _rbf_kernel(a: jax.Array, b: jax.Array, log_lengthscale: jax.Array) -> jax.Array:
    """exp(-|a - b|^2 / 2 l^2) with a lengthscale per input feature (ARD)."""
    scaled_a, scaled_b = a / jnp.exp(log_lengthscale), b / jnp.exp(log_lengthscale)
    squared = jnp.sum((scaled_a[:, None, :] - scaled_b[None, :, :]) ** 2, axis=-1)
    return jnp.exp(-0.5 * squared)


def _gp_negative_log_marginal_likelihood(params, x, y):
    """A Gaussian process's negative log marginal likelihood: K = s^2 k(x, x) + noise I,
    L = cholesky(K), alpha = K^-1 y by cho_solve, 1/2 y^T alpha + sum log diag L + n/2
    log 2 pi."""
    n = x.shape[0]
    gram = jnp.exp(2 * params["log_signal"]) * _rbf_kernel(x, x, params["log_lengthscale"])
    gram = gram + (jnp.exp(2 * params["log_noise"]) + 1e-5) * jnp.eye(n)
    factor = jnp.linalg.cholesky(gram)
    alpha = jax.scipy.linalg.cho_solve((factor, True), y)
    return (
        0.5 * jnp.dot(y, alpha)
        + jnp.sum(jnp.log(jnp.diagonal(factor)))
        + 0.5 * n * jnp.log(2 * jnp.pi)
    )


def _gp_step(params, opt_state, x, y, x_test):
    """One optax.adam step on the GP's hyperparameters, then the posterior mean and
    variance at the test points (solve_triangular against the new Cholesky factor)."""
    value, grads = jax.value_and_grad(_gp_negative_log_marginal_likelihood)(params, x, y)
    updates, opt_state = _ADAM.update(grads, opt_state, params)
    params = optax.apply_updates(params, updates)
    signal, noise = jnp.exp(2 * params["log_signal"]), jnp.exp(2 * params["log_noise"]) + 1e-5
    gram = signal * _rbf_kernel(x, x, params["log_lengthscale"]) + noise * jnp.eye(x.shape[0])
    factor = jnp.linalg.cholesky(gram)
    cross = signal * _rbf_kernel(x, x_test, params["log_lengthscale"])  # [n, m]
    projected = jax.scipy.linalg.solve_triangular(factor, cross, lower=True)
    mean = projected.T @ jax.scipy.linalg.solve_triangular(factor, y, lower=True)
    variance = signal - jnp.sum(projected**2, axis=0)
    return params, opt_state, value, mean, variance


def _gp_arguments(rng):
    x = normal(rng, 8, 2)
    y = (np.sin(2 * x[:, 0]) + 0.5 * x[:, 1] + normal(rng, 8, scale=0.1)).astype(np.float32)
    params = {
        "log_lengthscale": normal(rng, 2, scale=0.1),
        "log_signal": np.float32(0.1),
        "log_noise": np.float32(-1.0),
    }
    state = _ADAM.init(params)
    for _ in range(3):
        grads = jax.tree.map(lambda p: normal(rng, *np.shape(p), scale=0.1), params)
        _, state = _ADAM.update(grads, state, params)
    return params, as_numpy(state), x, y, normal(rng, 4, 2)


add(
    "optax_gaussian_process_adam_step",
    "optax",
    "Gaussian-process regression: an ARD RBF kernel on 8 points of 2 features, learnable"
    " log lengthscales, signal and noise; jnp.linalg.cholesky, jax.scipy.linalg.cho_solve,"
    " the log-determinant from the factor's diagonal, the negative log marginal likelihood"
    " and its gradient (through the Cholesky factor and triangular solves), an optax.adam"
    " step, then the posterior mean and variance at 4 test points by solve_triangular",
    _gp_step,
    _gp_arguments,
    "linear-algebra",
    "cholesky",
    "training",
    "optimizer",
    "adam",
    platform="cuda",
)


class FlaxZCAWhitening(nn.Module):
    """ZCA whitening of a batch (the covariance's eigendecomposition, jnp.linalg.eigh:
    V diag(1/sqrt(w + eps)) V^T, which no eigenvector's sign changes), the batch's singular
    values (jnp.linalg.svd) as a feature, then a dense layer."""

    @nn.compact
    def __call__(self, x):  # [samples, features]
        centred = x - x.mean(0)
        covariance = centred.T @ centred / x.shape[0]
        eigenvalues, eigenvectors = jnp.linalg.eigh(covariance)
        whitening = (eigenvectors / jnp.sqrt(eigenvalues + 1e-3)) @ eigenvectors.T
        whitened = centred @ whitening
        singular = jnp.linalg.svd(centred, compute_uv=False)
        logits = nn.Dense(CLASSES)(whitened)
        return logits, eigenvalues, singular


add(
    "flax_zca_whitening_eigh_svd",
    "flax",
    "ZCA whitening of a batch of 32 samples of 8 features: the covariance's jnp.linalg.eigh,"
    " V diag(1/sqrt(w + eps)) V^T, the centred batch's singular values (jnp.linalg.svd,"
    " compute_uv=False), then nn.Dense; returns the logits, eigenvalues and singular values",
    _flax_apply(FlaxZCAWhitening()),
    lambda r: (
        # 32 samples: a full-rank covariance (8 centred samples have rank 7, and the
        # whitening's 1 / sqrt(w + eps) magnified the eigensolvers' rounding 30 times)
        flax_params(FlaxZCAWhitening(), r, normal(r, 32, FEATURES)),
        normal(r, 32, FEATURES),
    ),
    "linear-algebra",
    "forward",
    platform="cuda",
)


# -- narrow and quantized arithmetic, sparse matrices, rematerialisation policies ------------


class FlaxFp8MLP(nn.Module):
    """Two nn.Dense layers whose dots are flax's fp8 dots: the first
    ``nn.Fp8DirectDotGeneralOp`` (the dot itself on e4m3 operands, its backward dots e5m2 x
    e4m3), the second ``nn.Fp8DotGeneralOp`` (quantize-dequantize around an f32 dot);
    delayed scaling, each scale and amax history a variable of the
    ``_overwrite_with_gradient`` collection (a history of 4 steps)."""

    @nn.compact
    def __call__(self, x):
        direct = functools.partial(nn.Fp8DirectDotGeneralOp, amax_history_length=4)
        x = nn.gelu(nn.Dense(HIDDEN, dot_general_cls=direct)(x))
        qdq = functools.partial(nn.Fp8DotGeneralOp, amax_history_length=4)
        return nn.Dense(CLASSES, dot_general_cls=qdq)(x)


_FP8_MLP = FlaxFp8MLP()
_FP8_SGD = optax.sgd(0.05)
_FP8_COLLECTION = flax.linen.fp8_ops.OVERWRITE_WITH_GRADIENT


def _fp8_loss(params, fp8_state, x, y):
    logits = _FP8_MLP.apply({"params": params, _FP8_COLLECTION: fp8_state}, x)
    return cross_entropy(logits, y)


def _fp8_step(params, fp8_state, opt_state, x, y):
    """A training step as flax's fp8 guide writes it: the gradient of the fp8 collection
    is its next value (the new scales and rolled amax histories), the parameters' gradient
    goes through optax.sgd."""
    value, (grads, fp8_state) = jax.value_and_grad(_fp8_loss, argnums=(0, 1))(
        params, fp8_state, x, y
    )
    updates, opt_state = _FP8_SGD.update(grads, opt_state, params)
    return optax.apply_updates(params, updates), fp8_state, opt_state, value


def _fp8_arguments(rng):
    """The parameters, and the fp8 state after two steps of the same batch (amax histories
    filled, scales no longer 1)."""
    x, y = normal(rng, BATCH, FEATURES, scale=2.0), labels(rng)
    variables = flax_params(_FP8_MLP, rng, x)
    params, fp8_state = variables["params"], variables[_FP8_COLLECTION]
    opt_state = _FP8_SGD.init(params)
    for _ in range(2):
        _, fp8_state, _, _ = jax.jit(_fp8_step)(params, fp8_state, opt_state, x, y)
    return params, as_numpy(fp8_state), as_numpy(opt_state), x, y


add(
    "flax_fp8_dense_sgd_step",
    "flax",
    "training step of an MLP whose nn.Dense dots are flax's fp8 dots: nn.Fp8DirectDotGeneralOp"
    " (an f8e4m3fn x f8e4m3fn dot, its gradients' dots f8e5m2 x f8e4m3fn) and"
    " nn.Fp8DotGeneralOp (quantize-dequantize around an f32 dot), delayed scaling from amax"
    " histories; the fp8 collection's gradient is its next value,"
    " optax.sgd on the parameters, on f32 [4,8]",
    _fp8_step,
    _fp8_arguments,
    "fp8",
    "quantization",
    "mlp",
    "training",
    "optimizer",
    "sgd",
)


def _quantize_per_channel(w: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Symmetric int8 weights with one f32 scale per output channel (the last axis)."""
    scale = np.abs(w).max(axis=0) / 127.0
    return np.round(w / scale).clip(-127, 127).astype(np.int8), scale.astype(np.float32)


def _quantize_rows(x: jax.Array) -> tuple[jax.Array, jax.Array]:
    """Dynamic symmetric int8 quantization of activations, one scale per row (token)."""
    scale = jnp.maximum(jnp.max(jnp.abs(x), axis=-1, keepdims=True), 1e-6) / 127.0
    return jnp.clip(jnp.round(x / scale), -127, 127).astype(jnp.int8), scale


class FlaxInt8Dense(nn.Module):
    """An AQT-style int8 dense layer for inference: int8 kernel and per-channel f32 scales
    as parameters, activations quantized per row, the dot int8 x int8 accumulated in int32
    (``preferred_element_type=jnp.int32``), rescaled to f32 by both scales, plus a bias.
    ``transposed``: the kernel is stored [out, in] and contracted on its last axis (the
    "NT" layout int8 GEMMs want)."""

    features: int
    transposed: bool = False

    @nn.compact
    def __call__(self, x):
        shape = (self.features, x.shape[-1]) if self.transposed else (x.shape[-1], self.features)

        def int8_init(key, shape):
            return jax.random.randint(key, shape, -127, 128, jnp.int32).astype(jnp.int8)

        kernel = self.param("kernel", int8_init, shape)
        scale = self.param("scale", nn.initializers.constant(0.01), (self.features,))
        bias = self.param("bias", nn.initializers.zeros, (self.features,))
        q, row_scale = _quantize_rows(x)
        contracting = (((1,), (1,)) if self.transposed else ((1,), (0,)), ((), ()))
        accumulated = lax.dot_general(q, kernel, contracting, preferred_element_type=jnp.int32)
        return accumulated.astype(jnp.float32) * row_scale * scale + bias


class FlaxInt8MLP(nn.Module):
    @nn.compact
    def __call__(self, x):
        h = nn.relu(FlaxInt8Dense(32)(x))
        h = nn.relu(FlaxInt8Dense(HIDDEN, transposed=True)(h))
        return nn.Dense(CLASSES)(h)  # the head in f32, as quantized models keep it


def _int8_mlp_arguments(rng):
    x = normal(rng, 8, FEATURES)
    variables = flax_params(FlaxInt8MLP(), rng, x)
    params = variables["params"]
    for layer, shape in (("FlaxInt8Dense_0", (FEATURES, 32)), ("FlaxInt8Dense_1", (32, HIDDEN))):
        kernel, scale = _quantize_per_channel(normal(rng, *shape, scale=0.3))
        params[layer]["kernel"] = kernel if layer.endswith("0") else kernel.T.copy()
        params[layer]["scale"] = scale
        params[layer]["bias"] = normal(rng, shape[1], scale=0.1)
    return variables, x


add(
    "flax_int8_quantized_mlp",
    "flax",
    "AQT-style int8 inference: two dense layers with int8 kernels (one stored [out, in])"
    " and per-channel f32 scales, activations quantized per row (round, clip, s8), the dots"
    " lax.dot_general(s8, s8, preferred_element_type=s32) rescaled to f32, an f32 nn.Dense"
    " head, on f32 [8,8]",
    _flax_apply(FlaxInt8MLP()),
    _int8_mlp_arguments,
    "int8",
    "quantization",
    "mlp",
    "forward",
)


#: The node graph of the sparse GCN: 8 nodes, 14 directed edges plus a self-loop each
#: (22 stored entries of an 8x8 adjacency, row-major sorted, no duplicates).
_GCN_NODES = 8
_GCN_EDGES = np.array(
    sorted(
        {(i, i) for i in range(_GCN_NODES)}
        | {(0, 1), (1, 0), (1, 2), (2, 1), (2, 3), (3, 2), (3, 4)}
        | {(4, 5), (5, 6), (6, 7), (7, 0), (0, 4), (4, 0), (5, 2)}
    ),
    np.int32,
)
#: Stored entries of the node features' BCOO: at most this many of the 8x16 are nonzero.
_GCN_FEATURE_NSE = 40


def _hk_sparse_gcn(features, edges):
    """A two-layer graph convolutional network on jax.experimental.sparse: the node
    features (a bag of words, mostly zeros) made a BCOO by ``BCOO.fromdense`` with a static
    number of stored entries, the adjacency a BCOO of learned positive edge weights
    (softplus of a parameter per stored entry) over the given indices, its degrees by
    ``bcoo_reduce_sum``, symmetric normalisation, and products ``sparse @ dense`` (a
    bcoo_dot_general; its transpose for the weights' gradient, a sampled dot for the
    edge weights')."""
    x = sparse.BCOO.fromdense(features, nse=_GCN_FEATURE_NSE)
    weights = jax.nn.softplus(hk.get_parameter("edge_logits", (edges.shape[0],), init=jnp.zeros))
    adjacency = sparse.BCOO((weights, edges), shape=(_GCN_NODES, _GCN_NODES))
    degree = adjacency.sum(axis=1).todense()
    scale = lax.rsqrt(degree)
    normalised = sparse.BCOO(
        (weights * scale[edges[:, 0]] * scale[edges[:, 1]], edges),
        shape=(_GCN_NODES, _GCN_NODES),
        indices_sorted=True,
        unique_indices=True,
    )
    w0 = hk.get_parameter("w0", (features.shape[1], HIDDEN), init=hk.initializers.VarianceScaling())
    h = jax.nn.relu(normalised @ (x @ w0) + hk.get_parameter("b0", (HIDDEN,), init=jnp.zeros))
    return normalised @ hk.Linear(CLASSES)(h)


_HK_SPARSE_GCN = hk.without_apply_rng(hk.transform(_hk_sparse_gcn))
_SGD_GCN = optax.sgd(0.05)


def _sparse_gcn_loss(params, features, edges, targets):
    return cross_entropy(_HK_SPARSE_GCN.apply(params, features, edges), targets)


def _sparse_gcn_batch(rng):
    dense = normal(rng, _GCN_NODES, HIDDEN)
    features = np.where(uniform(rng, _GCN_NODES, HIDDEN) < 0.25, np.abs(dense), 0.0)
    features = features.astype(np.float32)
    params = haiku_params(_HK_SPARSE_GCN, rng, features, _GCN_EDGES)
    params["~"]["edge_logits"] = normal(rng, _GCN_EDGES.shape[0], scale=0.5)
    return params, features, _GCN_EDGES, integers(rng, _GCN_NODES, high=CLASSES)


add(
    "haiku_sparse_bcoo_gcn_sgd_step",
    "haiku",
    "training step of a two-layer GCN on jax.experimental.sparse (8 nodes, 22 stored"
    " adjacency entries): node features made a BCOO by BCOO.fromdense(nse=40), an"
    " adjacency BCOO of learned softplus edge weights, degrees by bcoo_reduce_sum,"
    " symmetric normalisation, sparse @ dense products (bcoo_dot_general and its"
    " gradients); optax.sgd",
    train_step(_sparse_gcn_loss, _SGD_GCN),
    with_optimizer_state(_SGD_GCN, _sparse_gcn_batch),
    "sparse",
    "graph",
    "gather",
    "scatter",
    "training",
    "optimizer",
    "sgd",
)


class EquinoxRematBlock(eqx.Module):
    """A GELU MLP block with a residual; its up-projection named for the rematerialisation
    policy (``jax.ad_checkpoint.checkpoint_name``)."""

    up: eqx.nn.Linear
    down: eqx.nn.Linear

    def __init__(self, key):
        up, down = jax.random.split(key)
        self.up = eqx.nn.Linear(FEATURES, HIDDEN, key=up)
        self.down = eqx.nn.Linear(HIDDEN, FEATURES, key=down)

    def __call__(self, x):
        h = checkpoint_name(self.up(x), "up")
        return x + self.down(jax.nn.gelu(h))


class EquinoxRematStack(eqx.Module):
    """Two blocks, each under ``eqx.filter_checkpoint`` with its own policy: save the dots
    without batch dimensions (under vmap, a batch of matrix-vector products is such a
    dot), save only the named up-projection."""

    blocks: list
    head: eqx.nn.Linear

    def __init__(self, key):
        keys = jax.random.split(key, 3)
        self.blocks = [EquinoxRematBlock(k) for k in keys[:2]]
        self.head = eqx.nn.Linear(FEATURES, CLASSES, key=keys[2])

    def __call__(self, x):
        policies = (
            jax.checkpoint_policies.dots_with_no_batch_dims_saveable,
            jax.checkpoint_policies.save_only_these_names("up"),
        )
        for block, policy in zip(self.blocks, policies, strict=True):
            x = eqx.filter_checkpoint(block, policy=policy)(x)
        return self.head(x)


_EQX_REMAT = EquinoxModel(EquinoxRematStack)
_SGD_REMAT = optax.sgd(0.05)
add(
    "equinox_remat_policies_sgd_step",
    "equinox",
    "training step of two residual GELU-MLP eqx.Modules, each under"
    " eqx.filter_checkpoint with a jax.checkpoint_policies policy"
    " (dots_with_no_batch_dims_saveable; save_only_these_names of a checkpoint_name),"
    " vmapped over [4,8]: opt-barriers around the recomputed forward; optax.sgd",
    train_step(_equinox_loss(_EQX_REMAT), _SGD_REMAT),
    with_optimizer_state(
        _SGD_REMAT,
        lambda r: (_EQX_REMAT.params(r), normal(r, BATCH, FEATURES), labels(r)),
    ),
    "remat",
    "mlp",
    "training",
    "optimizer",
    "sgd",
)


class FlaxBf16AlibiAttention(nn.Module):
    """Causal self-attention in bf16 with ALiBi: a bias per head, slope times the
    key-query distance, computed from the slopes (an argument, not trained) in bf16, and
    added to the scores by jax.nn.dot_product_attention(bias=..., is_causal=True)."""

    @nn.compact
    def __call__(self, x, slopes):
        # no biases: a bias's gradient is a bf16 reduction over the batch and positions,
        # which XLA:CPU sums in f32 (results a few bf16 roundings apart)
        dense = dict(dtype=jnp.bfloat16, param_dtype=jnp.bfloat16, use_bias=False)
        qkv = nn.DenseGeneral((3, 2, 8), **dense)(x)
        q, k, v = qkv[:, :, 0], qkv[:, :, 1], qkv[:, :, 2]
        positions = jnp.arange(x.shape[1])
        distance = (positions[None, :] - positions[:, None]).astype(jnp.bfloat16)
        bias = (slopes[:, None, None] * distance)[None]  # [1, heads, queries, keys]
        out = jax.nn.dot_product_attention(q, k, v, bias=bias, is_causal=True)
        return nn.DenseGeneral(x.shape[-1], axis=(-2, -1), **dense)(out)


_ALIBI_ATTENTION = FlaxBf16AlibiAttention()
#: Plain SGD, every output bf16 as the parameters are (AdamW's moments would be f32 from bf16
#: gradients: outputs one bf16 rounding of a gradient away from XLA:CPU's).
_SGD_BF16 = optax.sgd(0.05)


def _alibi_loss(params, x, slopes, target):
    return jnp.mean(jnp.square(_ALIBI_ATTENTION.apply({"params": params}, x, slopes) - target))


def _alibi_batch(rng):
    x = normal(rng, 2, 8, 16).astype(jnp.bfloat16)
    slopes = np.array([0.5, 0.25], jnp.bfloat16)  # ALiBi's geometric slopes for 2 heads
    params = flax_params(_ALIBI_ATTENTION, rng, x, slopes)["params"]
    return params, x, slopes, normal(rng, 2, 8, 16).astype(jnp.bfloat16)


add(
    "flax_bf16_alibi_causal_attention_sgd_step",
    "flax",
    "training step of causal self-attention with ALiBi in bf16 parameters and arithmetic"
    " (nn.DenseGeneral without biases, a per-head linear distance bias from bf16 slopes,"
    " jax.nn.dot_product_attention(bias=..., is_causal=True), 2 heads of 8, [2,8,16]):"
    " the bias read by the forward and the backward pass, optax.sgd on bf16 parameters",
    train_step(_alibi_loss, _SGD_BF16),
    with_optimizer_state(_SGD_BF16, _alibi_batch),
    "attention",
    "bf16",
    "training",
    "optimizer",
    "sgd",
)


#: Weight-only int4 quantization: one scale per group of this many input features.
_INT4_GROUP = 4


class FlaxInt4WeightOnlyDense(nn.Module):
    """A w4a16 dense layer as LLM inference writes it: an int4 kernel (``jnp.int4``) with
    one f32 scale per group of 4 input rows and output column, dequantized to bf16 and
    multiplied with bf16 activations, accumulated in f32."""

    features: int

    @nn.compact
    def __call__(self, x):
        rows = x.shape[-1]

        def int4_init(key, shape):
            return jax.random.randint(key, shape, -8, 8, jnp.int32).astype(jnp.int4)

        kernel = self.param("kernel", int4_init, (rows, self.features))
        scale = self.param(
            "scale", nn.initializers.constant(0.05), (rows // _INT4_GROUP, self.features)
        )
        grouped = kernel.reshape(rows // _INT4_GROUP, _INT4_GROUP, self.features)
        weights = (grouped.astype(jnp.bfloat16) * scale[:, None].astype(jnp.bfloat16)).reshape(
            rows, self.features
        )
        return jnp.dot(x.astype(jnp.bfloat16), weights, preferred_element_type=jnp.float32)


class FlaxInt4MLP(nn.Module):
    @nn.compact
    def __call__(self, x):
        h = nn.gelu(FlaxInt4WeightOnlyDense(HIDDEN)(x))
        return FlaxInt4WeightOnlyDense(CLASSES)(h)


def _int4_arguments(rng):
    x = normal(rng, BATCH, FEATURES)
    params = flax_params(FlaxInt4MLP(), rng, x)["params"]
    for layer, (rows, columns) in (
        ("FlaxInt4WeightOnlyDense_0", (FEATURES, HIDDEN)),
        ("FlaxInt4WeightOnlyDense_1", (HIDDEN, CLASSES)),
    ):
        w = normal(rng, rows // _INT4_GROUP, _INT4_GROUP, columns, scale=0.3)
        scale = np.abs(w).max(axis=1) / 7.0
        q = np.round(w / scale[:, None]).clip(-8, 7).reshape(rows, columns)
        params[layer] = {"kernel": q.astype(jnp.int4), "scale": scale.astype(np.float32)}
    return {"params": params}, x


add(
    "flax_int4_weight_only_mlp",
    "flax",
    "w4a16 inference: two dense layers with int4 kernels (jnp.int4) and f32 scales per group"
    " of 4 input rows, dequantized to bf16 (convert, multiply, reshape), bf16 x bf16 dots"
    " accumulated in f32, GELU, on f32 [4,8]",
    _flax_apply(FlaxInt4MLP()),
    _int4_arguments,
    "int4",
    "quantization",
    "mlp",
    "forward",
)


class EquinoxLinearFlow(eqx.Module):
    """A normalizing flow on 4 features: an invertible linear layer (its log-determinant by
    ``jnp.linalg.slogdet``, an LU factorisation), an orthogonal layer parametrised by QR
    (``jnp.linalg.qr`` of a free matrix, Q's columns signed by R's diagonal), and an affine
    coupling whose scale and shift an eqx.nn.MLP computes from the first half."""

    weight: jax.Array
    bias: jax.Array
    free: jax.Array
    coupling: eqx.nn.MLP

    def __init__(self, key):
        w, q, c = jax.random.split(key, 3)
        self.weight = jnp.eye(4) + 0.1 * jax.random.normal(w, (4, 4))
        self.bias = jnp.zeros(4)
        self.free = jnp.eye(4) + 0.3 * jax.random.normal(q, (4, 4))
        self.coupling = eqx.nn.MLP(2, 4, HIDDEN, depth=1, activation=jnp.tanh, key=c)

    def orthogonal(self):
        q, r = jnp.linalg.qr(self.free)
        return q * jnp.sign(jnp.diagonal(r))

    def forward(self, x):
        """z and log |det dz/dx| for one sample."""
        h = self.orthogonal() @ (self.weight @ x + self.bias)
        log_scale, shift = jnp.split(self.coupling(h[:2]), 2)
        log_scale = jnp.tanh(log_scale)
        z = jnp.concatenate([h[:2], h[2:] * jnp.exp(log_scale) + shift])
        return z, jnp.linalg.slogdet(self.weight)[1] + jnp.sum(log_scale)

    def inverse(self, z):
        log_scale, shift = jnp.split(self.coupling(z[:2]), 2)
        h = jnp.concatenate([z[:2], (z[2:] - shift) * jnp.exp(-jnp.tanh(log_scale))])
        return jnp.linalg.solve(self.weight, self.orthogonal().T @ h - self.bias)


_EQX_FLOW = EquinoxModel(EquinoxLinearFlow)
_ADAM_FLOW = optax.adam(1e-2)


def _flow_negative_log_likelihood(params, x):
    z, log_det = jax.vmap(_EQX_FLOW(params).forward)(x)
    log_normal = -0.5 * jnp.sum(z**2, axis=-1) - 0.5 * z.shape[-1] * jnp.log(2 * jnp.pi)
    return -jnp.mean(log_normal + log_det)


def _flow_step(params, opt_state, x, z_samples):
    """One optax.adam step on the flow's negative log likelihood (the gradients through
    slogdet's LU and the QR factorisation), then samples drawn by the updated flow's inverse
    (jnp.linalg.solve)."""
    value, grads = jax.value_and_grad(_flow_negative_log_likelihood)(params, x)
    updates, opt_state = _ADAM_FLOW.update(grads, opt_state, params)
    params = optax.apply_updates(params, updates)
    samples = jax.vmap(_EQX_FLOW(params).inverse)(z_samples)
    return params, opt_state, value, samples


add(
    "equinox_normalizing_flow_slogdet_qr_adam_step",
    "equinox",
    "training step of a normalizing flow on 16 samples of 4 features: an invertible linear"
    " layer's log-determinant by jnp.linalg.slogdet, an orthogonal layer by jnp.linalg.qr,"
    " an eqx.nn.MLP affine coupling; the negative log likelihood's gradient through the LU"
    " and QR factorisations, optax.adam, then 4 samples by the inverse (jnp.linalg.solve)"
    " (lowered for CUDA: cuSOLVER's getrf, geqrf and orgqr)",
    _flow_step,
    with_optimizer_state(
        _ADAM_FLOW, lambda r: (_EQX_FLOW.params(r), normal(r, 16, 4), normal(r, 4, 4))
    ),
    "linear-algebra",
    "flow",
    "mlp",
    "training",
    "optimizer",
    "adam",
    platform="cuda",
)


# -- transformers (Hugging Face's Flax models) -------------------------------------------------
#
# Whole models as Hugging Face writes them (their attention masks, position ids, caches,
# generation loops), from small configurations and random weights: no download. Each
# model object is made once, here; its parameters are drawn per program from the
# program's seed and passed as arguments (``params=``).

_HF_SMALL = dict(
    vocab_size=VOCAB * 4,
    hidden_size=HIDDEN,
    num_hidden_layers=1,
    num_attention_heads=2,
    intermediate_size=2 * HIDDEN,
    max_position_embeddings=16,
)


def _hf_params(model: Any, rng: np.random.Generator) -> Any:
    """A Hugging Face Flax model's parameters initialised from the program's generator."""
    return as_numpy(model.init_weights(init_key(rng), model.input_shape))


_HF_GPT2 = transformers.FlaxGPT2LMHeadModel(
    transformers.GPT2Config(
        vocab_size=VOCAB * 4, n_embd=HIDDEN, n_layer=1, n_head=2, n_positions=16
    ),
    seed=0,
    _do_init=False,
)


def _hf_gpt2_greedy(params, prompt):
    """Greedy decoding to 12 tokens by FlaxGenerationMixin.generate (a lax.while_loop over
    the KV cache, padded prompts' position ids, eos handling)."""
    return _HF_GPT2.generate(
        prompt, params=params, max_length=12, do_sample=False, pad_token_id=0, eos_token_id=1
    ).sequences


add(
    "transformers_gpt2_greedy_generate",
    "transformers",
    "Hugging Face's FlaxGPT2LMHeadModel (1 layer, 2 heads of 8) decoding greedily from a"
    " 4-token prompt to 12 tokens with model.generate: a lax.while_loop over the model with"
    " its key/value cache (dynamic_update_slice), the causal mask sliced by position, and"
    " the stop on eos",
    _hf_gpt2_greedy,
    lambda r: (_hf_params(_HF_GPT2, r), integers(r, 2, 4, low=3, high=VOCAB * 4)),
    "attention",
    "decoding",
    "while-loop",
    "kv-cache",
)

_HF_BERT = transformers.FlaxBertForMaskedLM(
    transformers.BertConfig(**_HF_SMALL), seed=0, _do_init=False
)
_SGD_BERT = optax.sgd(1e-2, momentum=0.9)


def _hf_bert_masked_lm_loss(params, token_ids, attention_mask, targets, target_weights):
    """The masked-LM loss: cross-entropy at the masked positions only."""
    logits = _HF_BERT(token_ids, attention_mask=attention_mask, params=params).logits
    losses = optax.softmax_cross_entropy_with_integer_labels(logits, targets)
    return jnp.sum(losses * target_weights) / jnp.sum(target_weights)


def _hf_bert_batch(rng: np.random.Generator):
    token_ids = integers(rng, 2, 8, low=3, high=VOCAB * 4)
    attention_mask = np.ones((2, 8), np.int32)
    attention_mask[1, 6:] = 0  # the second sequence is padded
    weights = (rng.uniform(size=(2, 8)) < 0.4).astype(np.float32)
    weights[0, 0] = 1.0  # at least one masked position
    return (_hf_params(_HF_BERT, rng), token_ids, attention_mask, token_ids, weights)


add(
    "transformers_bert_mlm_sgd_step",
    "transformers",
    "training step of Hugging Face's FlaxBertForMaskedLM (1 layer, 2 heads of 8) on two"
    " sequences of 8 tokens, one padded (the attention mask), the masked-LM cross-entropy"
    " at weighted positions, optax.sgd with momentum",
    train_step(_hf_bert_masked_lm_loss, _SGD_BERT),
    with_optimizer_state(_SGD_BERT, _hf_bert_batch),
    "attention",
    "layernorm",
    "training",
    "optimizer",
    "sgd",
)

_HF_BART = transformers.FlaxBartForConditionalGeneration(
    transformers.BartConfig(
        vocab_size=VOCAB * 4,
        d_model=HIDDEN,
        encoder_layers=1,
        decoder_layers=1,
        encoder_attention_heads=2,
        decoder_attention_heads=2,
        encoder_ffn_dim=2 * HIDDEN,
        decoder_ffn_dim=2 * HIDDEN,
        max_position_embeddings=16,
        decoder_start_token_id=2,
        pad_token_id=0,
        eos_token_id=1,
        bos_token_id=2,
    ),
    seed=0,
    _do_init=False,
)


def _hf_bart_beam_search(params, source_ids):
    """Beam search with 2 beams to 7 tokens (FlaxGenerationMixin's beam search: the
    encoder once, a while loop of decoder steps over a flattened batch x beams cache, the
    top 2 x beams of the log probabilities, gathers reordering the cache)."""
    return _HF_BART.generate(
        source_ids, params=params, max_length=7, num_beams=2, length_penalty=0.6
    ).sequences


add(
    "transformers_bart_beam_search",
    "transformers",
    "Hugging Face's FlaxBartForConditionalGeneration (1 encoder and 1 decoder layer, 2"
    " heads of 8) translating two 6-token sources by beam search with 2 beams to 7 tokens"
    " (model.generate: a while loop over the cached decoder, lax.top_k over beams x"
    " vocabulary, the cache gathered by beam, a length penalty)",
    _hf_bart_beam_search,
    lambda r: (_hf_params(_HF_BART, r), integers(r, 2, 6, low=3, high=VOCAB * 4)),
    "attention",
    "decoding",
    "beam-search",
    "top-k",
    "while-loop",
    "kv-cache",
)


# -- environments played at random: pgx's board games, gymnax's control tasks -------------------

#: Games and episodes: a batch of boards, the moves each plays.
GAMES, MOVES = 2, 20
_CONNECT_FOUR = pgx.make("connect_four")


def _pgx_random_play(keys, key):
    """``GAMES`` games of connect four from ``env.init``, each move drawn uniformly among the
    legal ones (``jax.random.categorical`` over the legal-action mask) and played with
    ``env.step``, vmapped, for ``MOVES`` moves under ``lax.fori_loop`` (a finished game
    stays as it is); the boards, who won, and each player's summed rewards."""
    env = _CONNECT_FOUR
    state = jax.vmap(env.init)(jax.random.wrap_key_data(keys))

    def move(_, carry):
        state, key, returns = carry
        key, choose, step = jax.random.split(key, 3)
        logits = jnp.where(state.legal_action_mask, 0.0, -jnp.inf)
        action = jax.random.categorical(choose, logits, axis=-1)
        state = jax.vmap(env.step)(state, action, jax.random.split(step, GAMES))
        return state, key, returns + state.rewards

    returns = jnp.zeros((GAMES, env.num_players), jnp.float32)
    key = jax.random.wrap_key_data(key)
    state, _, returns = lax.fori_loop(0, MOVES, move, (state, key, returns))
    return state.observation, state.terminated, state.current_player, returns


def _raw_keys(rng: np.random.Generator, count: int) -> np.ndarray:
    """``count`` raw threefry keys (u32[count, 2]) as one argument."""
    return np.stack([key(rng) for _ in range(count)])


add(
    "pgx_connect_four_random_play",
    "pgx",
    "pgx's connect four: two games from env.init, 20 moves each drawn at random among the"
    " legal ones (jax.random.categorical over the legal-action mask), env.step vmapped over"
    " the games under lax.fori_loop; the boards, who has won and the summed rewards (pgx's"
    " win detection: integer board logic, gathers over the lines of four)",
    _pgx_random_play,
    lambda r: (_raw_keys(r, GAMES), key(r)),
    "game",
    "integer",
    "control-flow",
)

_ACROBOT, _ACROBOT_PARAMS = gymnax.make("Acrobot-v1")


def _env_parameters(params: Any) -> Any:
    """An environment's parameters as host data of jax's default types (Python floats as
    f32, integers as s32), to be passed as an argument."""

    def host(leaf: Any) -> np.ndarray:
        if isinstance(leaf, float):
            return np.float32(leaf)
        if isinstance(leaf, int):
            return np.int32(leaf)
        return np.asarray(leaf)

    return jax.tree.map(host, params)


def _gymnax_random_rollout(params, keys):
    """An episode of gymnax's Acrobot per key: ``env.reset``, then ``MOVES`` steps under
    ``lax.scan`` with actions drawn from the action space (``env.step`` integrates the
    double pendulum with RK4 and resets a finished episode), vmapped over the keys; the
    observations, rewards and both ends of an episode (terminated, truncated) of every step.
    The environment's parameters (``EnvParams``: the time step, the links' lengths and
    masses, the velocity limits) are an argument, as gymnax's API passes them."""
    env = _ACROBOT

    def episode(key):
        key, start = jax.random.split(key)
        _, state = env.reset(start, params)

        def step(carry, _):
            state, key = carry
            key, choose, advance = jax.random.split(key, 3)
            action = env.action_space(params).sample(choose)
            observation, state, reward, terminated, truncated, _ = env.step(
                advance, state, action, params
            )
            return (state, key), (observation, reward, terminated, truncated)

        _, trajectory = lax.scan(step, (state, key), None, length=MOVES)
        return trajectory

    return jax.vmap(episode)(jax.random.wrap_key_data(keys))


add(
    "gymnax_acrobot_random_rollout",
    "gymnax",
    "gymnax's Acrobot-v1: two episodes from env.reset, 20 steps each with actions sampled"
    " from its action space under lax.scan, vmapped, its EnvParams an argument (the double"
    " pendulum integrated by RK4"
    " with its angles wrapped and velocities clipped, an episode reset when done); every"
    " step's observation, reward and terminated and truncated flags",
    _gymnax_random_rollout,
    lambda r: (_env_parameters(_ACROBOT_PARAMS), _raw_keys(r, GAMES)),
    "control",
    "scan",
)
