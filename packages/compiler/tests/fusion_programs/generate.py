"""Print the JAX programs of the fusion tests as JAX lowers them (pre-optimization HLO).

Run with jax installed (the dev environment has it), from this folder:
``python generate.py``. Each program becomes ``NAME.hlo``:
``jax.jit(f).lower(*args).compiler_ir("hlo").as_hlo_text()``.
"""

from __future__ import annotations

from pathlib import Path

import jax
import jax.numpy as jnp

F32 = jnp.float32


def softmax(x):
    return jax.nn.softmax(x, axis=-1)


def log_softmax(x):
    return jax.nn.log_softmax(x, axis=-1)


def layernorm(x, g, b):
    m = x.mean(-1, keepdims=True)
    v = ((x - m) ** 2).mean(-1, keepdims=True)
    return (x - m) * jax.lax.rsqrt(v + 1e-5) * g + b


def rmsnorm(x, g):
    return x * jax.lax.rsqrt((x * x).mean(-1, keepdims=True) + 1e-6) * g


def gelu(x):
    return jax.nn.gelu(x, approximate=True)


def mlp_nodot(x, b1, b2):
    h = jax.nn.relu(x + b1)
    return jnp.tanh(h * 2.0 + b2)


def adam(p, g, m, v):
    b1, b2, lr, eps = 0.9, 0.999, 1e-3, 1e-8
    m = b1 * m + (1 - b1) * g
    v = b2 * v + (1 - b2) * g * g
    return p - lr * m / (jnp.sqrt(v) + eps), m, v


def sgd_momentum(p, g, mom):
    mom = 0.9 * mom + g
    return p - 0.01 * mom, mom


def sum_and_max(x):
    return x.sum(0), x.max(1), (x * 2).sum()


def transpose_add(x, y):
    return x.T + y


def argmax(x):
    return jnp.argmax(x, axis=1)


def argmax_argmin(x):
    return jnp.argmax(x, axis=1) - jnp.argmin(x, axis=1)


def scatter_add(x, i, u):
    return x.at[i].add(u)


def mlp(x, w, b):
    return jax.nn.relu(x @ w + b)


def mean_all_axes(x):
    return x.mean(), x.mean(0), x.mean((1, 2))


def sort_rows(x):
    return jnp.sort(x * 2.0, axis=1) + 1.0


def dense_gelu_softmax(x, w, b):
    return jax.nn.softmax(jax.nn.gelu(x @ w + b), axis=-1)


def _zeros(*shapes):
    return [jnp.zeros(shape, F32) for shape in shapes]


PROGRAMS = {
    "softmax": (softmax, _zeros((128, 256))),
    "log_softmax": (log_softmax, _zeros((64, 512))),
    "layernorm": (layernorm, _zeros((128, 256), (256,), (256,))),
    "rmsnorm": (rmsnorm, _zeros((128, 256), (256,))),
    "gelu": (gelu, _zeros((256, 512))),
    "mlp_nodot": (mlp_nodot, _zeros((128, 256), (256,), (256,))),
    "adam": (adam, _zeros(*[(1024,)] * 4)),
    "sgd_momentum": (sgd_momentum, _zeros(*[(256, 64)] * 3)),
    "sum_and_max": (sum_and_max, _zeros((64, 128))),
    "transpose_add": (transpose_add, _zeros((128, 64), (64, 128))),
    "argmax": (argmax, _zeros((32, 64))),
    "argmax_argmin": (argmax_argmin, _zeros((32, 64))),
    "scatter_add": (
        scatter_add,
        [jnp.zeros((64, 16), F32), jnp.zeros((8,), jnp.int32), jnp.zeros((8, 16), F32)],
    ),
    "mlp": (mlp, _zeros((16, 32), (32, 8), (8,))),
    "mean_all_axes": (mean_all_axes, _zeros((8, 16, 32))),
    "sort_rows": (sort_rows, _zeros((8, 64))),
    "dense_gelu_softmax": (dense_gelu_softmax, _zeros((32, 64), (64, 128), (128,))),
}

if __name__ == "__main__":
    here = Path(__file__).parent
    for name, (function, arguments) in PROGRAMS.items():
        text = jax.jit(function).lower(*arguments).compiler_ir("hlo").as_hlo_text()
        (here / f"{name}.hlo").write_text(text)
