"""The corpus programs: each a name, a JAX function, example arguments and what it exercises.

Every program is small (kilobytes of data) so that its committed files stay
small, and its arguments come from a seed of its own (a hash of its name), so
that adding a program never changes another one's inputs. The functions are
ordinary JAX, written as a user would write them: ``jnp.where``, ``clip``,
``take``, optimizer updates over a pytree, ``lax.scan``. JAX prints each one as
the pre-optimization HLO the program compiler starts from.

``tags`` say what a program is *for* (``"attention"``, ``"optimizer"``); the
generator adds the tags the HLO itself shows (``"dot"``, ``"reduction"``,
``"control-flow"``...) and the element types.
"""

from __future__ import annotations

import zlib
from collections.abc import Callable
from typing import Any

import attrs
import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
from jax import lax

BF16 = ml_dtypes.bfloat16


@attrs.frozen
class Program:
    """One corpus program: ``function(*arguments())`` is what JAX lowers and XLA:CPU runs."""

    name: str
    description: str
    function: Callable[..., Any]
    make_arguments: Callable[[np.random.Generator], tuple[Any, ...]]
    tags: tuple[str, ...] = ()
    #: The platform jax lowers module.hlo for: "cpu" (the default), or "cuda" for a
    #: program whose GPU module differs in its custom calls (jnp.linalg's cuSOLVER calls
    #: where the CPU's are LAPACK's, which XLA:GPU cannot compile); XLA:CPU computes the
    #: outputs either way.
    platform: str = "cpu"

    def arguments(self) -> tuple[Any, ...]:
        """The example arguments, drawn from this program's own seed."""
        return self.make_arguments(np.random.default_rng(zlib.crc32(self.name.encode())))


PROGRAMS: list[Program] = []


# -- argument helpers --------------------------------------------------------------------------


def normal(rng: np.random.Generator, *shape: int, dtype=np.float32, scale: float = 1.0):
    return (rng.standard_normal(shape) * scale).astype(dtype)


def uniform(rng: np.random.Generator, *shape: int, low=0.0, high=1.0, dtype=np.float32):
    return rng.uniform(low, high, shape).astype(dtype)


def integers(rng: np.random.Generator, *shape: int, low=0, high=100, dtype=np.int32):
    return rng.integers(low, high, shape).astype(dtype)


def add(name: str, description: str, function, make_arguments, *tags: str) -> None:
    PROGRAMS.append(Program(name, description, function, make_arguments, tags))


# -- building blocks ---------------------------------------------------------------------------


def layernorm(x, gamma, beta, eps=1e-5):
    x32 = x.astype(jnp.float32)
    mean = jnp.mean(x32, axis=-1, keepdims=True)
    var = jnp.mean(jnp.square(x32 - mean), axis=-1, keepdims=True)
    y = (x32 - mean) * lax.rsqrt(var + eps)
    return (y * gamma + beta).astype(x.dtype)


def rmsnorm(x, gamma, eps=1e-6):
    x32 = x.astype(jnp.float32)
    y = x32 * lax.rsqrt(jnp.mean(jnp.square(x32), axis=-1, keepdims=True) + eps)
    return (y * gamma.astype(jnp.float32)).astype(x.dtype)


def mlp(x, w1, b1, w2, b2, activation=jax.nn.relu):
    return activation(x @ w1 + b1) @ w2 + b2


def attention(q, k, v, causal=False):
    scale = 1.0 / np.sqrt(q.shape[-1]).astype(np.float32)
    scores = jnp.einsum("...qd,...kd->...qk", q, k) * jnp.asarray(scale, q.dtype)
    if causal:
        n = scores.shape[-1]
        mask = jnp.tril(jnp.ones((n, n), dtype=bool))
        scores = jnp.where(mask, scores, jnp.asarray(-1e9, scores.dtype))
    weights = jax.nn.softmax(scores.astype(jnp.float32), axis=-1).astype(q.dtype)
    return jnp.einsum("...qk,...kd->...qd", weights, v)


# -- MLP blocks and attention ------------------------------------------------------------------


def _mlp_args(dtype):
    return lambda r: (
        normal(r, 16, 32, dtype=dtype),
        normal(r, 32, 64, dtype=dtype, scale=0.2),
        normal(r, 64, dtype=dtype, scale=0.1),
        normal(r, 64, 16, dtype=dtype, scale=0.2),
        normal(r, 16, dtype=dtype, scale=0.1),
    )


add(
    "mlp_relu",
    "two-layer MLP, ReLU, f32 [16,32]->[16,64]->[16,16]",
    mlp,
    _mlp_args(np.float32),
    "mlp",
)
add(
    "mlp_gelu",
    "two-layer MLP with tanh-approximated GELU, f32",
    lambda x, w1, b1, w2, b2: mlp(x, w1, b1, w2, b2, jax.nn.gelu),
    _mlp_args(np.float32),
    "mlp",
)
add(
    "mlp_gelu_exact",
    "two-layer MLP with erf GELU, f32",
    lambda x, w1, b1, w2, b2: mlp(x, w1, b1, w2, b2, lambda h: jax.nn.gelu(h, approximate=False)),
    _mlp_args(np.float32),
    "mlp",
)
add(
    "mlp_silu_bf16",
    "two-layer MLP with SiLU in bf16",
    lambda x, w1, b1, w2, b2: mlp(x, w1, b1, w2, b2, jax.nn.silu),
    _mlp_args(BF16),
    "mlp",
)


def _residual_block(x, gamma, beta, w1, b1, w2, b2):
    return x + mlp(layernorm(x, gamma, beta), w1, b1, w2, b2, jax.nn.gelu)


add(
    "mlp_block_prenorm",
    "transformer MLP block: x + MLP(layernorm(x)), f32 [16,32]",
    _residual_block,
    lambda r: (
        normal(r, 16, 32),
        1 + normal(r, 32, scale=0.1),
        normal(r, 32, scale=0.1),
        normal(r, 32, 64, scale=0.2),
        normal(r, 64, scale=0.1),
        normal(r, 64, 32, scale=0.2),
        normal(r, 32, scale=0.1),
    ),
    "mlp",
    "normalization",
)


def _mlp_loss(params, x, labels):
    h = jax.nn.relu(x @ params["w1"] + params["b1"])
    logits = h @ params["w2"] + params["b2"]
    logp = jax.nn.log_softmax(logits)
    return -jnp.mean(jnp.take_along_axis(logp, labels[:, None], axis=1))


add(
    "mlp_train_grad",
    "loss and gradients of a two-layer MLP classifier (cross-entropy) over a parameter dict",
    jax.value_and_grad(_mlp_loss),
    lambda r: (
        {
            "w1": normal(r, 32, 64, scale=0.2),
            "b1": normal(r, 64, scale=0.1),
            "w2": normal(r, 64, 10, scale=0.2),
            "b2": normal(r, 10, scale=0.1),
        },
        normal(r, 16, 32),
        integers(r, 16, high=10),
    ),
    "mlp",
    "gradient",
)
add(
    "attention",
    "single-head scaled dot-product attention, f32 q,k,v [16,32]",
    attention,
    lambda r: (normal(r, 16, 32), normal(r, 16, 32), normal(r, 16, 32)),
    "attention",
)
add(
    "attention_causal_multihead",
    "causal multi-head attention, f32 [batch 2, heads 4, seq 16, head 8]",
    lambda q, k, v: attention(q, k, v, causal=True),
    lambda r: (normal(r, 2, 4, 16, 8), normal(r, 2, 4, 16, 8), normal(r, 2, 4, 16, 8)),
    "attention",
)
add(
    "attention_bf16",
    "single-head attention in bf16 (softmax in f32)",
    attention,
    lambda r: (
        normal(r, 16, 32, dtype=BF16),
        normal(r, 16, 32, dtype=BF16),
        normal(r, 16, 32, dtype=BF16),
    ),
    "attention",
)
add(
    "batched_matmul",
    "einsum batch matmul bij,bjk->bik, f32 [4,8,16]x[4,16,8]",
    lambda a, b: jnp.einsum("bij,bjk->bik", a, b),
    lambda r: (normal(r, 4, 8, 16), normal(r, 4, 16, 8)),
)
add(
    "matmul_int32",
    "integer matrix product, s32 [8,16]x[16,8]",
    lambda a, b: a @ b,
    lambda r: (integers(r, 8, 16, low=-10, high=10), integers(r, 16, 8, low=-10, high=10)),
)


def _complex(rng: np.random.Generator, *shape: int) -> np.ndarray:
    return (normal(rng, *shape) + 1j * normal(rng, *shape)).astype(np.complex64)


add(
    "matmul_complex64_axpby",
    "complex product scaled and accumulated, 2 (a @ b) + c, c64 [16,32]x[32,24]"
    " (XLA:GPU: one cuBLASLt call with alpha 2 and beta 1)",
    lambda a, b, c: 2.0 * (a @ b) + c,
    lambda r: (_complex(r, 16, 32), _complex(r, 32, 24), _complex(r, 16, 24)),
    "complex",
)


# -- normalisation and softmax -----------------------------------------------------------------


def _ln_args(dtype):
    return lambda r: (
        normal(r, 16, 64, dtype=dtype),
        (1 + normal(r, 64, scale=0.1)).astype(np.float32),
        normal(r, 64, scale=0.1),
    )


add(
    "layernorm",
    "layer normalisation over the last axis, f32 [16,64]",
    layernorm,
    _ln_args(np.float32),
    "normalization",
)
add(
    "layernorm_bf16",
    "layer normalisation of bf16 activations, f32 statistics",
    layernorm,
    _ln_args(BF16),
    "normalization",
)
add(
    "rmsnorm",
    "RMS normalisation over the last axis, f32 [16,64]",
    rmsnorm,
    lambda r: (normal(r, 16, 64), 1 + normal(r, 64, scale=0.1)),
    "normalization",
)
add(
    "rmsnorm_f16",
    "RMS normalisation of f16 activations, f32 statistics",
    rmsnorm,
    lambda r: (
        normal(r, 16, 64, dtype=np.float16),
        (1 + normal(r, 64, scale=0.1)).astype(np.float16),
    ),
    "normalization",
)
add(
    "softmax",
    "softmax over the last axis, f32 [8,128]",
    lambda x: jax.nn.softmax(x, axis=-1),
    lambda r: (normal(r, 8, 128),),
    "softmax",
)
add(
    "softmax_axis0",
    "softmax over the first axis, f32 [64,16]",
    lambda x: jax.nn.softmax(x, axis=0),
    lambda r: (normal(r, 64, 16),),
    "softmax",
)
add(
    "softmax_bf16",
    "softmax of bf16 logits",
    lambda x: jax.nn.softmax(x, axis=-1),
    lambda r: (normal(r, 8, 128, dtype=BF16),),
    "softmax",
)
add(
    "log_softmax",
    "log-softmax over the last axis, f32 [8,128]",
    jax.nn.log_softmax,
    lambda r: (normal(r, 8, 128),),
    "softmax",
)
add(
    "logsumexp",
    "logsumexp over the last axis, f32 [8,128]",
    lambda x: jax.nn.logsumexp(x, axis=-1),
    lambda r: (normal(r, 8, 128),),
    "softmax",
)

# -- optimizer steps over parameter pytrees ----------------------------------------------------


def _params(r, dtype=np.float32):
    return {
        "dense": {"w": normal(r, 32, 16, dtype=dtype), "b": normal(r, 16, dtype=dtype)},
        "scale": normal(r, 16, dtype=dtype),
    }


def adam_step(params, grads, m, v, step):
    b1, b2, lr, eps = 0.9, 0.999, 1e-3, 1e-8
    step = step + 1
    m = jax.tree.map(lambda m, g: b1 * m + (1 - b1) * g, m, grads)
    v = jax.tree.map(lambda v, g: b2 * v + (1 - b2) * g * g, v, grads)
    t = step.astype(jnp.float32)
    mhat_scale = 1 / (1 - b1**t)
    vhat_scale = 1 / (1 - b2**t)
    params = jax.tree.map(
        lambda p, m, v: p - lr * (m * mhat_scale) / (jnp.sqrt(v * vhat_scale) + eps), params, m, v
    )
    return params, m, v, step


add(
    "adam_step",
    "one Adam update over a nested parameter dict (3 arrays), bias-corrected",
    adam_step,
    lambda r: (_params(r), _params(r), _params(r), jax.tree.map(np.abs, _params(r)), np.int32(4)),
    "optimizer",
)


def sgd_momentum_step(params, grads, velocity):
    lr, momentum, weight_decay = 0.01, 0.9, 1e-4
    velocity = jax.tree.map(
        lambda v, g, p: momentum * v + g + weight_decay * p, velocity, grads, params
    )
    params = jax.tree.map(lambda p, v: p - lr * v, params, velocity)
    return params, velocity


add(
    "sgd_momentum_step",
    "SGD with momentum and weight decay over a nested parameter dict",
    sgd_momentum_step,
    lambda r: (_params(r), _params(r), _params(r)),
    "optimizer",
)


def clipped_sgd_step(params, grads):
    norm = jnp.sqrt(sum(jnp.sum(g * g) for g in jax.tree.leaves(grads)))
    scale = jnp.minimum(1.0, 1.0 / (norm + 1e-6))
    return jax.tree.map(lambda p, g: p - 0.1 * scale * g, params, grads)


add(
    "sgd_global_norm_clip",
    "SGD step with gradients clipped to global norm 1 over a parameter dict",
    clipped_sgd_step,
    lambda r: (_params(r), _params(r)),
    "optimizer",
)
add(
    "adam_step_bf16_params",
    "Adam update of bf16 parameters with f32 moments",
    lambda p, g, m, v, s: adam_step(jax.tree.map(lambda x: x.astype(jnp.float32), p), g, m, v, s)[
        0
    ],
    lambda r: (
        _params(r, BF16),
        _params(r),
        _params(r),
        jax.tree.map(np.abs, _params(r)),
        np.int32(2),
    ),
    "optimizer",
)

# -- embeddings: gather and scatter-add --------------------------------------------------------

add(
    "embedding_gather",
    "embedding lookup table[ids], f32 table [64,16], s32 ids [12]",
    lambda table, ids: table[ids],
    lambda r: (normal(r, 64, 16), integers(r, 12, high=64)),
    "embedding",
)
add(
    "embedding_take_clip",
    "jnp.take with mode='clip' (ids out of range included)",
    lambda table, ids: jnp.take(table, ids, axis=0, mode="clip"),
    lambda r: (normal(r, 64, 16), integers(r, 12, low=-4, high=70)),
    "embedding",
)
add(
    "embedding_scatter_add_grad",
    "gradient of an embedding lookup: scatter-add of the cotangents into the table's shape",
    lambda table, ids, cotangent: jax.grad(lambda t: jnp.sum(t[ids] * cotangent))(table),
    lambda r: (normal(r, 64, 16), integers(r, 24, high=64), normal(r, 24, 16)),
    "embedding",
    "gradient",
)
add(
    "scatter_add_int32",
    "histogram by scatter-add of ones, s32",
    lambda ids: jnp.zeros((32,), jnp.int32).at[ids].add(1),
    lambda r: (integers(r, 100, high=32),),
    "embedding",
)
add(
    "one_hot",
    "one-hot encoding of s32 labels into f32 [16,10]",
    lambda labels: jax.nn.one_hot(labels, 10),
    lambda r: (integers(r, 16, high=10),),
)

# -- loops and conditionals --------------------------------------------------------------------

add(
    "fori_loop_newton_sqrt",
    "fori_loop: 8 Newton iterations for sqrt, f32 [64]",
    lambda a: lax.fori_loop(0, 8, lambda i, x: 0.5 * (x + a / x), jnp.ones_like(a)),
    lambda r: (uniform(r, 64, low=0.5, high=4.0),),
    "loop",
)
add(
    "while_loop_collatz",
    "while_loop with a data-dependent trip count (Collatz steps of s32 [16])",
    lambda n: lax.while_loop(
        lambda c: jnp.any(c[0] > 1),
        lambda c: (
            jnp.where(c[0] > 1, jnp.where(c[0] % 2 == 0, c[0] // 2, 3 * c[0] + 1), c[0]),
            c[1] + (c[0] > 1),
        ),
        (n, jnp.zeros_like(n)),
    )[1],
    lambda r: (integers(r, 16, low=1, high=30),),
    "loop",
)


def _rnn(h0, xs, w, u):
    def cell(h, x):
        h = jnp.tanh(h @ w + x @ u)
        return h, h

    return lax.scan(cell, h0, xs)


add(
    "scan_rnn",
    "lax.scan over 6 steps of a tanh RNN cell, f32 hidden 16",
    _rnn,
    lambda r: (
        normal(r, 4, 16),
        normal(r, 6, 4, 8),
        normal(r, 16, 16, scale=0.2),
        normal(r, 8, 16, scale=0.2),
    ),
    "loop",
)
add(
    "scan_cumulative_max",
    "lax.scan carrying a running maximum, f32 [10,8]",
    lambda xs: lax.scan(
        lambda c, x: (jnp.maximum(c, x), jnp.maximum(c, x)), jnp.full((8,), -jnp.inf), xs
    ),
    lambda r: (normal(r, 10, 8),),
    "loop",
)
add(
    "cond",
    "lax.cond on a runtime predicate: sin or cos of f32 [32]",
    lambda p, x: lax.cond(p, jnp.sin, jnp.cos, x),
    lambda r: (np.bool_(True), normal(r, 32)),
    "conditional",
)
add(
    "switch",
    "lax.switch over three branches by an s32 index",
    lambda i, x: lax.switch(
        i, [lambda x: x * 2, jnp.tanh, lambda x: jnp.sum(x) * jnp.ones_like(x)], x
    ),
    lambda r: (np.int32(1), normal(r, 32)),
    "conditional",
)

# -- sort, argsort, top-k, cumulative ----------------------------------------------------------

add(
    "sort",
    "sort each row, f32 [8,32]",
    lambda x: jnp.sort(x, axis=-1),
    lambda r: (normal(r, 8, 32),),
    "sort",
)
add(
    "sort_int32_axis0",
    "sort along the first axis, s32 [32,4]",
    lambda x: jnp.sort(x, axis=0),
    lambda r: (integers(r, 32, 4, low=-50, high=50),),
    "sort",
)
add(
    "argsort",
    "argsort of each row (stable), f32 [8,32]",
    lambda x: jnp.argsort(x, axis=-1),
    lambda r: (normal(r, 8, 32),),
    "sort",
)
add(
    "top_k",
    "lax.top_k, k=4, of each row, f32 [8,32]",
    lambda x: lax.top_k(x, 4),
    lambda r: (normal(r, 8, 32),),
    "sort",
)
add(
    "cumsum",
    "cumulative sum along the last axis, f32 [8,32]",
    lambda x: jnp.cumsum(x, axis=-1),
    lambda r: (normal(r, 8, 32),),
    "cumulative",
)
add(
    "cumsum_int32_axis0",
    "cumulative sum along the first axis, s32 [16,8]",
    lambda x: jnp.cumsum(x, axis=0),
    lambda r: (integers(r, 16, 8, low=-9, high=9),),
    "cumulative",
)
add(
    "cumprod_reverse",
    "reversed cumulative product, f32 [4,16]",
    lambda x: jnp.flip(jnp.cumprod(jnp.flip(x, -1), axis=-1), -1),
    lambda r: (uniform(r, 4, 16, low=0.8, high=1.2),),
    "cumulative",
)

# -- reductions over every axis combination ----------------------------------------------------

for _axes in [(0,), (1,), (2,), (0, 1), (0, 2), (1, 2), (0, 1, 2)]:
    _label = "".join(str(a) for a in _axes)
    add(
        f"reduce_sum_axes{_label}",
        f"sum of f32 [4,6,8] over axes {_axes}" + (" (to a scalar)" if len(_axes) == 3 else ""),
        (lambda axes: lambda x: jnp.sum(x, axis=axes))(_axes),
        lambda r: (normal(r, 4, 6, 8),),
        "reduction",
    )
add(
    "reduce_max_scalar",
    "max of f32 [16,32] to a scalar",
    jnp.max,
    lambda r: (normal(r, 16, 32),),
    "reduction",
)
add(
    "reduce_min_int32_rows",
    "min over rows of s32 [16,32]",
    lambda x: jnp.min(x, axis=1),
    lambda r: (integers(r, 16, 32, low=-1000, high=1000),),
    "reduction",
)
add(
    "reduce_prod_axis0",
    "product over the first axis, f32 [8,16]",
    lambda x: jnp.prod(x, axis=0),
    lambda r: (uniform(r, 8, 16, low=0.5, high=1.5),),
    "reduction",
)
add(
    "reduce_mean_bf16",
    "mean of bf16 [16,64] over the last axis",
    lambda x: jnp.mean(x, axis=-1),
    lambda r: (normal(r, 16, 64, dtype=BF16),),
    "reduction",
)
add(
    "reduce_any_all",
    "any and all over axes of pred [8,16]",
    lambda x: (jnp.any(x, axis=0), jnp.all(x, axis=1)),
    lambda r: (r.random((8, 16)) < 0.9,),
    "reduction",
)
add(
    "argmax",
    "argmax along the last axis (a variadic reduce), f32 [8,32]",
    lambda x: jnp.argmax(x, axis=-1),
    lambda r: (normal(r, 8, 32),),
    "reduction",
)
add(
    "argmax_argmin",
    "argmax minus argmin along the last axis (two variadic reduces of one array), f32 [8,32]",
    lambda x: jnp.argmax(x, axis=-1) - jnp.argmin(x, axis=-1),
    lambda r: (normal(r, 8, 32),),
    "reduction",
)
add(
    "variance_two_pass",
    "mean and variance over axis 0, f32 [64,8]",
    lambda x: (jnp.mean(x, 0), jnp.var(x, 0)),
    lambda r: (normal(r, 64, 8),),
    "reduction",
)

# -- data movement: transposes, pads, slices, concatenations -----------------------------------

add(
    "transpose_2d",
    "transpose of f32 [32,48]",
    lambda x: x.T,
    lambda r: (normal(r, 32, 48),),
    "transpose",
)
add(
    "transpose_3d",
    "transpose (2,0,1) of f32 [4,8,16]",
    lambda x: jnp.transpose(x, (2, 0, 1)),
    lambda r: (normal(r, 4, 8, 16),),
    "transpose",
)
add(
    "transpose_4d_heads",
    "the attention head split transpose (0,2,1,3) of f32 [2,16,4,8]",
    lambda x: jnp.transpose(x, (0, 2, 1, 3)),
    lambda r: (normal(r, 2, 16, 4, 8),),
    "transpose",
)
add(
    "transpose_4d_reverse_f16",
    "full reversal transpose (3,2,1,0) of f16 [2,3,4,5]",
    lambda x: jnp.transpose(x, (3, 2, 1, 0)),
    lambda r: (normal(r, 2, 3, 4, 5, dtype=np.float16),),
    "transpose",
)
add(
    "transpose_add_int8",
    "x + x.T on s8 [16,16] (wrapping)",
    lambda x: x + x.T,
    lambda r: (integers(r, 16, 16, low=-128, high=128, dtype=np.int8),),
    "transpose",
)
add(
    "pad_constant",
    "zero pad of f32 [8,8] by (1,2),(3,0)",
    lambda x: jnp.pad(x, ((1, 2), (3, 0))),
    lambda r: (normal(r, 8, 8),),
    "pad",
)
add(
    "pad_interior_negative",
    "lax.pad with interior and negative padding, f32 [6,6]",
    lambda x: lax.pad(x, jnp.float32(-1), ((1, -1, 1), (-2, 2, 0))),
    lambda r: (normal(r, 6, 6),),
    "pad",
)
add(
    "pad_edge",
    "jnp.pad mode='edge' of f32 [6,8]",
    lambda x: jnp.pad(x, ((2, 1), (1, 3)), mode="edge"),
    lambda r: (normal(r, 6, 8),),
    "pad",
)
add(
    "slice_strided",
    "strided slices x[1::2, ::3] and x[:, 2:5], f32 [12,12]",
    lambda x: (x[1::2, ::3], x[:, 2:5]),
    lambda r: (normal(r, 12, 12),),
    "slice",
)
add(
    "dynamic_slice",
    "lax.dynamic_slice at a runtime offset (clamped), f32 [16,16]",
    lambda x, i: lax.dynamic_slice(x, (i, 2), (4, 8)),
    lambda r: (normal(r, 16, 16), np.int32(14)),
    "slice",
)
add(
    "dynamic_update_slice",
    "lax.dynamic_update_slice at a runtime offset, f32 [16,16]",
    lambda x, u, i: lax.dynamic_update_slice(x, u, (i, i)),
    lambda r: (normal(r, 16, 16), normal(r, 4, 4), np.int32(5)),
    "slice",
)
add(
    "concatenate",
    "concatenation of three f32 arrays along axis 1",
    lambda a, b, c: jnp.concatenate([a, b, c], axis=1),
    lambda r: (normal(r, 8, 4), normal(r, 8, 8), normal(r, 8, 2)),
    "concatenate",
)
add(
    "concatenate_stack_bf16",
    "jnp.stack of four bf16 [8,8] arrays",
    lambda *xs: jnp.stack(xs),
    lambda r: tuple(normal(r, 8, 8, dtype=BF16) for _ in range(4)),
    "concatenate",
)
add(
    "reverse_roll",
    "flip and roll of f32 [8,16]",
    lambda x: (jnp.flip(x, 0), jnp.roll(x, 3, axis=1)),
    lambda r: (normal(r, 8, 16),),
    "slice",
)

# -- element types: bf16, f16, integers --------------------------------------------------------

add(
    "where_clip_f32",
    "jnp.where and jnp.clip (jitted helpers JAX calls), f32 [16,16]",
    lambda x: jnp.where(x > 0, x, 0.1 * x) + jnp.clip(x, -0.5, 0.5),
    lambda r: (normal(r, 16, 16),),
    "elementwise",
)
add(
    "elementwise_f16",
    "tanh, exp, sqrt and rounding in f16 [16,16]",
    lambda x: jnp.tanh(x) * jnp.exp(-x * x) + jnp.sqrt(jnp.abs(x)) + jnp.round(x),
    lambda r: (normal(r, 16, 16, dtype=np.float16),),
    "elementwise",
)
add(
    "elementwise_bf16",
    "sigmoid and log1p in bf16 [16,16]",
    lambda x: jax.nn.sigmoid(x) + jnp.log1p(jnp.abs(x)),
    lambda r: (normal(r, 16, 16, dtype=BF16),),
    "elementwise",
)
add(
    "integer_arithmetic",
    "s32 floor division, remainder, shifts, min/max and comparisons",
    lambda a, b: (
        a // b,
        jnp.remainder(a, b),
        a << 2,
        a >> 1,
        jnp.maximum(a, b),
        (a > b).astype(jnp.int32),
    ),
    lambda r: (
        integers(r, 8, 8, low=-100, high=100),
        integers(r, 8, 8, low=1, high=9)
        * np.where(integers(r, 8, 8, low=0, high=2) == 0, -1, 1).astype(np.int32),
    ),
    "elementwise",
)
add(
    "uint8_bit_ops",
    "u8 and, or, xor, not, population count",
    lambda a, b: ((a & b) | (~a), a ^ b, lax.population_count(a)),
    lambda r: (
        integers(r, 16, 16, high=256, dtype=np.uint8),
        integers(r, 16, 16, high=256, dtype=np.uint8),
    ),
    "elementwise",
)
add(
    "convert_mixed",
    "conversions among f32, bf16, f16, s32, s8 and u8",
    lambda x: (
        x.astype(BF16),
        x.astype(jnp.float16),
        x.astype(jnp.int32),
        jnp.clip(x * 10, -128, 127).astype(jnp.int8),
        (x > 0).astype(jnp.uint8),
    ),
    lambda r: (normal(r, 8, 16, scale=4.0),),
    "elementwise",
)
add(
    "iota_mask",
    "broadcasted iota, comparisons and select: a causal mask applied to f32 [16,16]",
    lambda x: jnp.where(jnp.arange(16)[:, None] >= jnp.arange(16)[None, :], x, -jnp.inf),
    lambda r: (normal(r, 16, 16),),
    "elementwise",
)
add(
    "square_sum_int32",
    "s32 squares summed over the first axis",
    lambda x: jnp.sum(x * x, axis=0),
    lambda r: (integers(r, 8, 8, low=-1000, high=1000),),
    "reduction",
)

# -- more of what users write ------------------------------------------------------------------


def _dropout(key_data, x):
    key = jax.random.wrap_key_data(key_data)
    keep = jax.random.bernoulli(key, 0.75, x.shape)
    return jnp.where(keep, x / 0.75, 0.0)


add(
    "dropout_threefry",
    "dropout with jax.random (threefry2x32 on u32 key data), f32 [16,16]",
    _dropout,
    lambda r: (np.array([0, 42], np.uint32), normal(r, 16, 16)),
    "random",
)
add(
    "conv1d",
    "1-D convolution, NWC f32 [2,16,4] with a [3,4,8] kernel, SAME padding",
    lambda x, w: lax.conv_general_dilated(
        x, w, (1,), "SAME", dimension_numbers=("NWC", "WIO", "NWC")
    ),
    lambda r: (normal(r, 2, 16, 4), normal(r, 3, 4, 8, scale=0.3)),
    "convolution",
)
add(
    "maxpool_grad",
    "gradient of a 3x3 stride-2 SAME max pool, f32 NHWC [2,9,9,4] (a select-and-scatter)",
    jax.grad(
        lambda x: jnp.sum(
            lax.reduce_window(x, -jnp.inf, lax.max, (1, 3, 3, 1), (1, 2, 2, 1), "SAME") ** 2
        )
    ),
    lambda r: (normal(r, 2, 9, 9, 4),),
    "convolution",
    "gradient",
)


def _cnn_loss(params, x, labels):
    h = lax.conv_general_dilated(
        x, params["w"], (1, 1), "SAME", dimension_numbers=("NHWC", "HWIO", "NHWC")
    )
    h = jax.nn.relu(h + params["b"])
    h = lax.reduce_window(h, -jnp.inf, lax.max, (1, 2, 2, 1), (1, 2, 2, 1), "VALID")
    logits = h.reshape(h.shape[0], -1) @ params["dense"]
    logp = jax.nn.log_softmax(logits)
    return -jnp.mean(jnp.take_along_axis(logp, labels[:, None], axis=1))


add(
    "cnn_train_grad",
    "loss and gradients of a small CNN (3x3 conv, ReLU, 2x2 max pool, dense, cross-entropy)",
    jax.value_and_grad(_cnn_loss),
    lambda r: (
        {
            "w": normal(r, 3, 3, 3, 8, scale=0.3),
            "b": normal(r, 8, scale=0.1),
            "dense": normal(r, 4 * 4 * 8, 10, scale=0.1),
        },
        normal(r, 4, 8, 8, 3),
        integers(r, 4, high=10),
    ),
    "convolution",
    "gradient",
)
add(
    "take_along_axis",
    "jnp.take_along_axis: per-row gather of f32 [8,32] at s32 [8,4] indices",
    lambda x, i: jnp.take_along_axis(x, i, axis=1),
    lambda r: (normal(r, 8, 32), integers(r, 8, 4, high=32)),
    "embedding",
)
add(
    "segment_sum",
    "jax.ops.segment_sum of f32 [24,8] rows into 6 segments",
    lambda x, ids: jax.ops.segment_sum(x, ids, num_segments=6),
    lambda r: (normal(r, 24, 8), integers(r, 24, high=6)),
    "embedding",
)
