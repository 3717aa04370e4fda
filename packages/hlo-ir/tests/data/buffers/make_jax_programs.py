"""Write the JAX programs of the buffer-assignment tests as JAX prints them (pre-optimization HLO).

Run with the dev environment's Python (jax on the CPU): ``python make_jax_programs.py``;
it writes ``<name>.hlo`` beside itself.
"""

from __future__ import annotations

from pathlib import Path

import jax
import jax.numpy as jnp

jax.config.update("jax_platforms", "cpu")
F32 = jnp.float32


def mlp(x, w1, b1, w2, b2):
    hidden = jax.nn.relu(x @ w1 + b1)
    return jax.nn.softmax(hidden @ w2 + b2, axis=-1)


def scan_cumsum(xs):
    def step(carry, x):
        carry = carry * 0.5 + x
        return carry, carry * 2.0

    return jax.lax.scan(step, jnp.zeros(xs.shape[1:], xs.dtype), xs)


def fori_dus(x):
    def body(i, acc):
        row = jax.lax.dynamic_slice(acc, (i, 0), (1, 16)) * 0.5 + acc[0:1]
        return jax.lax.dynamic_update_slice(acc, jnp.full((1, 16), i, acc.dtype) + row, (i, 0))

    return jax.lax.fori_loop(0, 8, body, x)


def adam(p, g, m, v):
    m2 = 0.9 * m + 0.1 * g
    v2 = 0.999 * v + 0.001 * g * g
    return p - 0.01 * m2 / (jnp.sqrt(v2) + 1e-8), m2, v2


def layernorm(x, scale, bias):
    mean = x.mean(-1, keepdims=True)
    var = ((x - mean) ** 2).mean(-1, keepdims=True)
    return (x - mean) / jnp.sqrt(var + 1e-5) * scale + bias


def cond(p, x):
    return jax.lax.cond(p > 0, lambda x: jnp.sin(x) * 2, lambda x: jnp.cos(x) + 1, x)


PROGRAMS = {
    "jax_mlp_softmax": (
        mlp,
        (
            jnp.ones((32, 64), F32),
            jnp.ones((64, 128), F32),
            jnp.ones((128,), F32),
            jnp.ones((128, 16), F32),
            jnp.ones((16,), F32),
        ),
    ),
    "jax_scan_cumsum": (scan_cumsum, (jnp.ones((10, 4, 8), F32),)),
    "jax_fori_dus": (fori_dus, (jnp.ones((8, 16), F32),)),
    "jax_adam": (adam, tuple(jnp.ones((256, 64), F32) for _ in range(4))),
    "jax_layernorm": (
        layernorm,
        (jnp.ones((64, 256), F32), jnp.ones((256,), F32), jnp.ones((256,), F32)),
    ),
    "jax_cond": (cond, (F32(1.0), jnp.ones((128,), F32))),
}


def main() -> None:
    here = Path(__file__).parent
    for name, (function, arguments) in PROGRAMS.items():
        text = jax.jit(function).lower(*arguments).compiler_ir("hlo").as_hlo_text()
        (here / f"{name}.hlo").write_text(text)


if __name__ == "__main__":
    main()
