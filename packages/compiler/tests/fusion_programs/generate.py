import jax, jax.numpy as jnp
f32 = jnp.float32
def softmax(x): return jax.nn.softmax(x, axis=-1)
def log_softmax(x): return jax.nn.log_softmax(x, axis=-1)
def layernorm(x, g, b):
    m = x.mean(-1, keepdims=True); v = ((x - m) ** 2).mean(-1, keepdims=True)
    return (x - m) * jax.lax.rsqrt(v + 1e-5) * g + b
def rmsnorm(x, g):
    return x * jax.lax.rsqrt((x * x).mean(-1, keepdims=True) + 1e-6) * g
def gelu(x): return jax.nn.gelu(x, approximate=True)
def mlp_nodot(x, b1, b2):
    h = jax.nn.relu(x + b1)
    return jnp.tanh(h * 2.0 + b2)
def adam(p, g, m, v):
    b1, b2, lr, eps = 0.9, 0.999, 1e-3, 1e-8
    m = b1 * m + (1 - b1) * g; v = b2 * v + (1 - b2) * g * g
    return p - lr * m / (jnp.sqrt(v) + eps), m, v
def sgd_momentum(p, g, mom):
    mom = 0.9 * mom + g
    return p - 0.01 * mom, mom
def sum_and_max(x): return x.sum(0), x.max(1), (x * 2).sum()
def transpose_add(x, y): return x.T + y
progs = {
 "softmax": (softmax, [jnp.zeros((128, 256), f32)]),
 "log_softmax": (log_softmax, [jnp.zeros((64, 512), f32)]),
 "layernorm": (layernorm, [jnp.zeros((128, 256), f32), jnp.zeros((256,), f32), jnp.zeros((256,), f32)]),
 "rmsnorm": (rmsnorm, [jnp.zeros((128, 256), f32), jnp.zeros((256,), f32)]),
 "gelu": (gelu, [jnp.zeros((256, 512), f32)]),
 "mlp_nodot": (mlp_nodot, [jnp.zeros((128, 256), f32), jnp.zeros((256,), f32), jnp.zeros((256,), f32)]),
 "adam": (adam, [jnp.zeros((1024,), f32)] * 4),
 "sgd_momentum": (sgd_momentum, [jnp.zeros((256, 64), f32)] * 3),
 "sum_and_max": (sum_and_max, [jnp.zeros((64, 128), f32)]),
 "transpose_add": (transpose_add, [jnp.zeros((128, 64), f32), jnp.zeros((64, 128), f32)]),
}
for name, (f, args) in progs.items():
    open(f"{name}.hlo", "w").write(jax.jit(f).lower(*args).compiler_ir("hlo").as_hlo_text())
