"""The speed workloads: each defined once, as a JAX function, for both sides of the bundle.

The build (``gpu_bundle/build.py``) lowers each function with jax at two sizes:
``gpu`` (large enough that an H100/H200 is busy for at least 0.2 ms) compiled
for the GPU Targets, and ``small`` compiled with interpreter images too and run
by XLA:CPU for a correctness case that CI runs on the interpreter. On the GPU
machine ``bundle_worker.py`` imports this module again to run the very same
functions under ``jax.jit`` (and the ``torch`` twins under ``torch.compile``)
beside heron's artefacts.

Inputs are never stored for the ``gpu`` size (gigabytes): :func:`make_inputs`
draws them from a seed with numpy alone, tiling one small random block, which
costs a memory copy rather than a random draw per element. jax and torch are
imported inside the functions only, so that the module imports where neither
is installed (the interpreter dry run, runtime-only installs).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

#: Elements drawn at random per input; larger inputs repeat this block.
BLOCK = 1 << 20


@dataclass(frozen=True)
class Arg:
    """One input: shape, dtype name (numpy or ``bfloat16``) and how to draw it.

    ``kind``: ``normal`` (scaled by ``scale``), ``uniform`` in [low, high),
    ``integers`` in [low, high), ``positive`` (uniform in [0.5, 1.5)).
    """

    shape: tuple[int, ...]
    dtype: str = "float32"
    kind: str = "normal"
    low: float = 0.0
    high: float = 1.0
    scale: float = 1.0

    @property
    def nbytes(self) -> int:
        return math.prod(self.shape) * _dtype(self.dtype).itemsize


@dataclass(frozen=True)
class Workload:
    """A JAX function, its inputs at two sizes, and what it costs at the GPU size.

    ``function`` builds the jax callable (taking the inputs positionally);
    ``torch`` builds a torch callable with the same signature, where one is
    written; ``flops(args)`` and ``bytes_moved(args)`` give the work of one run
    at the given inputs (the roofline the report compares against: the minimum
    HBM traffic, or the multiply-adds counted twice).
    """

    name: str
    description: str
    function: Callable[[], Callable[..., Any]]
    gpu: tuple[Arg, ...]
    small: tuple[Arg, ...]
    bytes_moved: Callable[[Sequence[Arg]], int]
    flops: Callable[[Sequence[Arg]], int] = lambda args: 0
    torch: Callable[[], Callable[..., Any]] | None = None
    tags: tuple[str, ...] = field(default=())
    #: The correctness bound in epsilons where FLOAT_ULPS is too tight for this workload.
    ulps: int | None = None

    def args(self, size: str) -> tuple[Arg, ...]:
        return self.gpu if size == "gpu" else self.small


def _dtype(name: str) -> np.dtype:
    if name == "bfloat16" or name.startswith("float8"):  # ml_dtypes' types
        import ml_dtypes

        return np.dtype(getattr(ml_dtypes, name))
    return np.dtype(name)


def make_inputs(args: Sequence[Arg], seed: int) -> list[np.ndarray]:
    """The inputs for ``args`` from ``seed``: one random block per input, tiled to its size."""
    rng = np.random.default_rng(seed)
    arrays = []
    for arg in args:
        count = math.prod(arg.shape)
        drawn = min(count, BLOCK)
        if arg.kind == "integers":
            block = rng.integers(int(arg.low), int(arg.high), drawn)
        elif arg.kind == "uniform":
            block = rng.uniform(arg.low, arg.high, drawn)
        elif arg.kind == "positive":
            block = rng.uniform(0.5, 1.5, drawn)
        else:
            block = rng.standard_normal(drawn) * arg.scale
            if _dtype(arg.dtype).kind == "c":  # complex: an imaginary part of its own
                block = block + 1j * rng.standard_normal(drawn) * arg.scale
        block = block.astype(_dtype(arg.dtype))
        flat = block if drawn == count else np.resize(block, count)
        arrays.append(np.ascontiguousarray(flat.reshape(arg.shape)))
    return arrays


def seed_of(name: str) -> int:
    """A workload's own seed (stable across Python runs: no ``hash``)."""
    return sum((i + 1) * ord(c) for i, c in enumerate(name)) % (2**31)


# -- the functions ------------------------------------------------------------------------------


def _gelu():
    import jax

    return lambda x: jax.nn.gelu(x, approximate=True)


def _softmax():
    import jax

    return lambda x: jax.nn.softmax(x, axis=-1)


def _log_softmax():
    import jax

    return lambda x: jax.nn.log_softmax(x, axis=-1)


def _layernorm():
    import jax.numpy as jnp
    from jax import lax

    def layernorm(x, gamma, beta):
        mean = jnp.mean(x, axis=-1, keepdims=True)
        var = jnp.mean(jnp.square(x - mean), axis=-1, keepdims=True)
        return (x - mean) * lax.rsqrt(var + 1e-5) * gamma + beta

    return layernorm


def _rmsnorm():
    import jax.numpy as jnp
    from jax import lax

    def rmsnorm(x, gamma):
        x32 = x.astype(jnp.float32)
        y = x32 * lax.rsqrt(jnp.mean(jnp.square(x32), axis=-1, keepdims=True) + 1e-6)
        return (y * gamma).astype(x.dtype)

    return rmsnorm


#: The group count of the group-norm workload (flax's and Stable Diffusion's 32).
GROUPS = 32


def _groupnorm():
    import jax.numpy as jnp
    from jax import lax

    def groupnorm(x, gamma, beta):
        # flax.linen.GroupNorm's statistics: the mean and the mean of squares over
        # (H, W, C/G) of NHWC, one pass over the input for both.
        n, h, w, c = x.shape
        grouped = x.reshape(n, h, w, GROUPS, c // GROUPS)
        mean = jnp.mean(grouped, axis=(1, 2, 4), keepdims=True)
        mean2 = jnp.mean(jnp.square(grouped), axis=(1, 2, 4), keepdims=True)
        var = jnp.maximum(mean2 - jnp.square(mean), 0.0)
        y = ((grouped - mean) * lax.rsqrt(var + 1e-6)).reshape(x.shape)
        return y * gamma + beta

    return groupnorm


def _reduce(axis):
    def make():
        import jax.numpy as jnp

        return lambda x: jnp.sum(x, axis=axis)

    return make


def _transpose():
    return lambda x: x.T


def _adam():
    import jax
    import jax.numpy as jnp

    def adam(*leaves):
        # A parameter pytree of four leaves: (params, grads, m, v) as lists.
        n = len(leaves) // 4
        params, grads, m, v = (list(leaves[i * n : (i + 1) * n]) for i in range(4))
        b1, b2, lr, eps, step = 0.9, 0.999, 1e-3, 1e-8, 10.0
        m = jax.tree.map(lambda m, g: b1 * m + (1 - b1) * g, m, grads)
        v = jax.tree.map(lambda v, g: b2 * v + (1 - b2) * g * g, v, grads)
        c1, c2 = 1 - b1**step, 1 - b2**step
        params = jax.tree.map(
            lambda p, m, v: p - lr * (m / c1) / (jnp.sqrt(v / c2) + eps), params, m, v
        )
        return params, m, v

    return adam


def _gather():
    import jax.numpy as jnp

    return lambda table, indices: jnp.take(table, indices, axis=0)


def _scatter_add():
    def scatter_add(table, indices, updates):
        return table.at[indices].add(updates)

    return scatter_add


def _sort():
    import jax.numpy as jnp

    return lambda x: jnp.sort(x, axis=-1)


def _top_k():
    from jax import lax

    return lambda x: lax.top_k(x, 8)


def _cumsum():
    import jax.numpy as jnp

    return lambda x: jnp.cumsum(x, axis=-1)


def _fori_loop():
    import jax.numpy as jnp
    from jax import lax

    def loop(x):
        return lax.fori_loop(0, 1000, lambda i, y: y * 0.999 + jnp.sin(y) * 1e-3, x)

    return loop


def _matmul():
    import jax.numpy as jnp
    from jax import lax

    # HIGHEST: no TF32 for f32 (heron's GEMM never uses it), the same work on both sides.
    return lambda a, b: jnp.matmul(a, b, precision=lax.Precision.HIGHEST)


def _matmul_default():
    import jax.numpy as jnp

    return lambda a, b: jnp.matmul(a, b)


def _mlp():
    import jax

    def mlp(x, w1, b1, w2, b2):
        return jax.nn.gelu(x @ w1 + b1, approximate=True) @ w2 + b2

    return mlp


def _transformer_block():
    import jax
    import jax.numpy as jnp
    from jax import lax

    def norm(x, gamma):
        x32 = x.astype(jnp.float32)
        y = x32 * lax.rsqrt(jnp.mean(jnp.square(x32), axis=-1, keepdims=True) + 1e-6)
        return (y * gamma).astype(x.dtype)

    def block(x, g1, wqkv, wo, g2, w1, w2):
        b, s, d = x.shape
        heads = 16
        h = norm(x, g1)
        qkv = (h @ wqkv).reshape(b, s, 3, heads, d // heads)
        q, k, v = qkv[:, :, 0], qkv[:, :, 1], qkv[:, :, 2]
        scores = jnp.einsum("bqhd,bkhd->bhqk", q, k) / math.sqrt(d // heads)
        weights = jax.nn.softmax(scores.astype(jnp.float32), axis=-1).astype(x.dtype)
        attended = jnp.einsum("bhqk,bkhd->bqhd", weights, v).reshape(b, s, d)
        x = x + attended @ wo
        return x + jax.nn.gelu(norm(x, g2) @ w1, approximate=True) @ w2

    return block


def _attention():
    import jax

    return lambda q, k, v: jax.nn.dot_product_attention(q, k, v, is_causal=True)


def _padded_attention():
    import jax

    def attention(q, k, v, q_lengths, kv_lengths):
        """Attention over a batch of sequences of several lengths (padded to one)."""
        return jax.nn.dot_product_attention(
            q, k, v, query_seq_lengths=q_lengths, key_value_seq_lengths=kv_lengths
        )

    return attention


def _attention_backward():
    import jax

    def gradients(q, k, v, do):
        """dq, dk, dv of a causal attention for the output's gradient ``do``."""
        attention = _attention()
        _, pullback = jax.vjp(attention, q, k, v)
        return pullback(do)

    return gradients


def _attention_training():
    import jax

    def forward_and_gradients(q, k, v, do):
        """A training step's attention: its output and its gradients (forward and backward
        in one program, so that heron pairs the two calls)."""
        out, pullback = jax.vjp(_attention(), q, k, v)
        return (out, *pullback(do))

    return forward_and_gradients


def _fft2():
    import jax.numpy as jnp

    return lambda x: jnp.fft.fft2(x)


def _convolution():
    from jax import lax

    def conv(x, w):
        return lax.conv_general_dilated(
            x, w, (1, 1), "SAME", dimension_numbers=("NHWC", "HWIO", "NHWC")
        )

    return conv


def _conv_training_step():
    import jax
    import jax.numpy as jnp
    from jax import lax

    def loss(params, x, y):
        w, b = params
        numbers = ("NHWC", "HWIO", "NHWC")
        h = lax.conv_general_dilated(x, w, (1, 1), "SAME", dimension_numbers=numbers) + b
        return jnp.mean(jnp.square(jax.nn.relu(h) - y))

    def step(w, b, x, y):
        grads = jax.grad(loss)((w, b), x, y)
        return tuple(p - 1e-3 * g for p, g in zip((w, b), grads, strict=True))

    return step


def _training_step():
    import jax
    import jax.numpy as jnp

    def loss(params, x, y):
        w1, w2 = params
        return jnp.mean(jnp.square(jax.nn.relu(x @ w1) @ w2 - y))

    def step(w1, w2, x, y):
        grads = jax.grad(loss)((w1, w2), x, y)
        return tuple(p - 1e-3 * g for p, g in zip((w1, w2), grads, strict=True))

    return step


def _matmul_fp8():
    import jax.numpy as jnp

    def scaled(a, b, a_scale, b_scale):
        return (a.astype(jnp.float32) * a_scale) @ (b.astype(jnp.float32) * b_scale)

    return scaled


def _mlp_training_gelu():
    import jax
    import jax.numpy as jnp

    def loss(params, x, y):
        w1, b1, w2 = params
        hidden = jax.nn.gelu(x @ w1 + b1, approximate=True)
        return jnp.mean(jnp.square((hidden @ w2).astype(jnp.float32) - y.astype(jnp.float32)))

    def step(w1, b1, w2, x, y):
        grads = jax.grad(loss)((w1, b1, w2), x, y)
        return tuple(p - 0.1 * g for p, g in zip((w1, b1, w2), grads, strict=True))

    return step


# -- torch twins (torch.compile where torch is installed) ---------------------------------------


def _t_gelu():
    import torch

    return lambda x: torch.nn.functional.gelu(x, approximate="tanh")


def _t_softmax():
    import torch

    return lambda x: torch.softmax(x, dim=-1)


def _t_log_softmax():
    import torch

    return lambda x: torch.log_softmax(x, dim=-1)


def _t_layernorm():
    import torch

    return lambda x, g, b: torch.nn.functional.layer_norm(x, x.shape[-1:], g, b, 1e-5)


def _t_rmsnorm():
    import torch

    def rmsnorm(x, g):
        x32 = x.float()
        return (x32 * torch.rsqrt(x32.square().mean(-1, keepdim=True) + 1e-6) * g).to(x.dtype)

    return rmsnorm


def _t_reduce(axis):
    def make():
        import torch

        return (lambda x: torch.sum(x)) if axis is None else (lambda x: torch.sum(x, dim=axis))

    return make


def _t_transpose():
    return lambda x: x.t().contiguous()


def _t_gather():
    import torch

    return lambda table, idx: torch.index_select(table, 0, idx)


def _t_scatter_add():
    return lambda table, idx, upd: table.index_add(0, idx, upd)


def _t_sort():
    import torch

    return lambda x: torch.sort(x, dim=-1).values


def _t_top_k():
    import torch

    return lambda x: torch.topk(x, 8, dim=-1)


def _t_cumsum():
    import torch

    return lambda x: torch.cumsum(x, dim=-1)


def _t_matmul():
    import torch

    return lambda a, b: torch.matmul(a, b)


def _t_matmul_tf32():
    import torch

    def matmul(a, b):
        torch.backends.cuda.matmul.allow_tf32 = True  # XLA's default for f32 dots
        return torch.matmul(a, b)

    return matmul


def _t_attention():
    import torch

    def attention(q, k, v):  # torch's [B, H, S, D] order
        q, k, v = (x.transpose(1, 2) for x in (q, k, v))
        groups = q.shape[1] // k.shape[1]  # grouped-query attention: share k and v heads
        if groups > 1:
            k, v = (x.repeat_interleave(groups, dim=1) for x in (k, v))
        out = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
        return out.transpose(1, 2)

    return attention


def _t_attention_backward():
    import torch

    forward = _t_attention()

    def gradients(q, k, v, do):
        q, k, v = (x.detach().requires_grad_() for x in (q, k, v))
        return torch.autograd.grad(forward(q, k, v), (q, k, v), do)

    return gradients


def _t_attention_training():
    import torch

    forward = _t_attention()

    def forward_and_gradients(q, k, v, do):
        q, k, v = (x.detach().requires_grad_() for x in (q, k, v))
        out = forward(q, k, v)
        return (out.detach(), *torch.autograd.grad(out, (q, k, v), do))

    return forward_and_gradients


def _t_fft2():
    import torch

    return lambda x: torch.fft.fft2(x)


def _t_mlp():
    import torch

    def mlp(x, w1, b1, w2, b2):
        return torch.nn.functional.gelu(x @ w1 + b1, approximate="tanh") @ w2 + b2

    return mlp


# -- the set ------------------------------------------------------------------------------------


def _elements(args: Sequence[Arg]) -> int:
    return math.prod(args[0].shape)


def _in_out(args: Sequence[Arg]) -> int:
    """Every input read once and an output the size of the first written once."""
    return sum(a.nbytes for a in args) + args[0].nbytes


def _reads(args: Sequence[Arg]) -> int:
    return sum(a.nbytes for a in args)


def _matmul_flops(args: Sequence[Arg]) -> int:
    (m, k), (_, n) = args[0].shape, args[1].shape
    return 2 * m * n * k


def _matmul_bytes(args: Sequence[Arg]) -> int:
    (m, _), (_, n) = args[0].shape, args[1].shape
    return _reads(args) + m * n * _dtype(args[0].dtype).itemsize


def _fp8_matmul_bytes(args: Sequence[Arg]) -> int:
    (m, _), (_, n) = args[0].shape, args[1].shape
    return _reads(args) + m * n * 4  # an f32 result


def _mlp_training_flops(args: Sequence[Arg]) -> int:
    (d, h), (_, o), (m, _) = args[0].shape, args[2].shape, args[3].shape
    return 3 * 2 * m * h * (d + o)  # each GEMM forward, and two more for its gradients


def _mlp_flops(args: Sequence[Arg]) -> int:
    (m, d), (_, h) = args[0].shape, args[1].shape
    return 2 * 2 * m * d * h


def _block_flops(args: Sequence[Arg]) -> int:
    b, s, d = args[0].shape
    hidden = args[5].shape[1]
    tokens = b * s
    return 2 * tokens * (3 * d * d + d * d + 2 * d * hidden) + 2 * 2 * b * s * s * d


def _attention_flops(args: Sequence[Arg]) -> int:
    b, s, n, d = args[0].shape
    return 2 * 2 * b * n * s * s * d // 2  # two products over the causal half


def _padded_attention_flops(args: Sequence[Arg]) -> int:
    """Both products over the kept queries and keys: lengths uniform in [S/2, S), so
    each is 3/4 of S on average (9/16 of the full scores)."""
    b, s, n, d = args[0].shape
    return 2 * 2 * b * n * s * s * d * 9 // 16


def _attention_backward_flops(args: Sequence[Arg]) -> int:
    """The backward pass's five products (the scores again, dp, dv, dq, dk) over the causal
    half (the fused call's recomputed forward not counted)."""
    b, s, n, d = args[0].shape
    return 5 * 2 * b * n * s * s * d // 2


def _attention_training_flops(args: Sequence[Arg]) -> int:
    """The forward's two products and the backward's five over the causal half."""
    b, s, n, d = args[0].shape
    return 7 * 2 * b * n * s * s * d // 2


def _fft_flops(args: Sequence[Arg]) -> int:
    """5 N log2 N per complex transform of N points (the conventional count), both axes."""
    *batch, rows, columns = args[0].shape
    points = math.prod(batch) * rows * columns
    return 5 * points * (int(math.log2(rows)) + int(math.log2(columns)))


def _conv_flops(args: Sequence[Arg]) -> int:
    n, h, w, _ = args[0].shape
    kh, kw, ci, co = args[1].shape
    return 2 * n * h * w * co * kh * kw * ci


def _conv_train_flops(args: Sequence[Arg]) -> int:
    return 2 * _conv_flops((args[2], args[0]))  # the forward and the weight gradient


def _train_flops(args: Sequence[Arg]) -> int:
    (d, h), (_, o) = args[0].shape, args[1].shape
    m = args[2].shape[0]
    return 3 * 2 * m * (d * h + h * o)


def _gather_bytes(args: Sequence[Arg]) -> int:
    rows = math.prod(args[1].shape)
    row = args[0].nbytes // args[0].shape[0]
    return args[1].nbytes + 2 * rows * row


def _scatter_bytes(args: Sequence[Arg]) -> int:
    return 2 * args[0].nbytes + args[1].nbytes + args[2].nbytes


def _adam_bytes(args: Sequence[Arg]) -> int:
    n = len(args) // 4
    return _reads(args) + 3 * sum(a.nbytes for a in args[:n])


def _topk_bytes(args: Sequence[Arg]) -> int:
    rows = math.prod(args[0].shape[:-1])
    return args[0].nbytes + rows * 8 * 8


BF16 = "bfloat16"

WORKLOADS: tuple[Workload, ...] = (
    Workload(
        "gelu_bf16",
        "tanh GELU, bf16, 268M elements",
        _gelu,
        (Arg((16384, 16384), BF16),),
        (Arg((64, 256), BF16),),
        _in_out,
        torch=_t_gelu,
    ),
    Workload(
        "softmax",
        "softmax over rows, f32 [32768, 4096]",
        _softmax,
        (Arg((32768, 4096)),),
        (Arg((16, 128)),),
        _in_out,
        torch=_t_softmax,
    ),
    Workload(
        "log_softmax_2g",
        "log-softmax over rows of bf16 logits [8192, 262144] (8,192 tokens by a 262,144-word"
        " vocabulary): 2^31 elements, so offsets past 2^31 must stay 64-bit (docs/reliability.md,"
        " 'Kernels over 2^31 elements')",
        _log_softmax,
        (Arg((8192, 262144), BF16),),
        (Arg((8, 1024), BF16),),
        _in_out,
        torch=_t_log_softmax,
    ),
    Workload(
        "layernorm",
        "layernorm over rows with gamma and beta, f32 [32768, 4096]",
        _layernorm,
        (Arg((32768, 4096)), Arg((4096,), kind="positive"), Arg((4096,))),
        (Arg((16, 128)), Arg((128,), kind="positive"), Arg((128,))),
        _in_out,
        torch=_t_layernorm,
    ),
    Workload(
        "rmsnorm_bf16",
        "rmsnorm over rows, bf16 [65536, 4096] computed in f32",
        _rmsnorm,
        (Arg((65536, 4096), BF16), Arg((4096,), kind="positive")),
        (Arg((16, 128), BF16), Arg((128,), kind="positive")),
        _in_out,
        torch=_t_rmsnorm,
    ),
    Workload(
        "groupnorm",
        "group norm (32 groups, flax's statistics) over NHWC f32 [64, 64, 64, 512]",
        _groupnorm,
        (Arg((64, 64, 64, 512)), Arg((512,), kind="positive"), Arg((512,))),
        (Arg((2, 4, 4, 64)), Arg((64,), kind="positive"), Arg((64,))),
        _in_out,
    ),
    Workload(
        "reduce_row",
        "sum over the minor axis, f32 [32768, 8192]",
        _reduce(1),
        (Arg((32768, 8192)),),
        (Arg((16, 256)),),
        _reads,
        torch=_t_reduce(1),
    ),
    Workload(
        "reduce_column",
        "sum over the major axis, f32 [8192, 32768]",
        _reduce(0),
        (Arg((8192, 32768)),),
        (Arg((256, 16)),),
        _reads,
        torch=_t_reduce(0),
    ),
    Workload(
        "reduce_full",
        "sum of every element, f32 [268M]",
        _reduce(None),
        (Arg((1 << 28,)),),
        (Arg((4096,)),),
        _reads,
        torch=_t_reduce(None),
    ),
    Workload(
        "transpose",
        "2-D transpose, f32 [8192, 16384]",
        _transpose,
        (Arg((8192, 16384)),),
        (Arg((48, 80)),),
        _in_out,
        torch=_t_transpose,
    ),
    Workload(
        "adam",
        "Adam update over a pytree of four f32 parameters (64M parameters)",
        _adam,
        tuple(Arg((4096, 4096), kind=k) for k in ("normal",) * 3 + ("positive",) for _ in range(4)),
        tuple(Arg((32, 16), kind=k) for k in ("normal",) * 3 + ("positive",) for _ in range(4)),
        _adam_bytes,
    ),
    Workload(
        "gather",
        "embedding lookup: 262144 rows of 1024 f32 from a 65536-row table",
        _gather,
        (Arg((65536, 1024)), Arg((262144,), "int32", "integers", 0, 65536)),
        (Arg((64, 16)), Arg((40,), "int32", "integers", 0, 64)),
        _gather_bytes,
        torch=_t_gather,
    ),
    Workload(
        "scatter_add",
        "embedding gradient: 262144 rows of 1024 f32 added into a 65536-row table",
        _scatter_add,
        (
            Arg((65536, 1024)),
            Arg((262144,), "int32", "integers", 0, 65536),
            Arg((262144, 1024)),
        ),
        (Arg((64, 16)), Arg((40,), "int32", "integers", 0, 64), Arg((40, 16))),
        _scatter_bytes,
        torch=_t_scatter_add,
        tags=("scatter",),
    ),
    Workload(
        "sort",
        "sort along rows, f32 [16384, 1024]",
        _sort,
        (Arg((16384, 1024)),),
        (Arg((8, 64)),),
        _in_out,
        torch=_t_sort,
    ),
    Workload(
        "top_k",
        "top 8 of each row, f32 [32768, 4096]",
        _top_k,
        (Arg((32768, 4096)),),
        (Arg((8, 100)),),
        _topk_bytes,
        torch=_t_top_k,
    ),
    Workload(
        "cumsum",
        "cumulative sum along rows, f32 [16384, 8192]",
        _cumsum,
        (Arg((16384, 8192)),),
        (Arg((8, 100)),),
        _in_out,
        torch=_t_cumsum,
    ),
    Workload(
        "fori_loop",
        "fori_loop of 1000 small elementwise steps on f32 [1024]",
        _fori_loop,
        (Arg((1024,)),),
        (Arg((256,)),),
        lambda args: 1000 * 2 * args[0].nbytes,
        # 1000 steps, each rounding and each sin a few ulps off XLA:CPU's: 21.5 eps seen.
        ulps=64,
    ),
    Workload(
        "matmul_bf16",
        "matrix product, bf16 [8192, 8192] x [8192, 8192]",
        _matmul,
        (Arg((8192, 8192), BF16), Arg((8192, 8192), BF16)),
        (Arg((32, 48), BF16), Arg((48, 40), BF16)),
        _matmul_bytes,
        _matmul_flops,
        torch=_t_matmul,
    ),
    Workload(
        "matmul_f32",
        "matrix product, f32 [4096, 4096] x [4096, 4096], no TF32",
        _matmul,
        (Arg((4096, 4096)), Arg((4096, 4096))),
        (Arg((32, 48)), Arg((48, 40))),
        _matmul_bytes,
        _matmul_flops,
        torch=_t_matmul,
    ),
    Workload(
        "matmul_f32_default",
        "matrix product, f32 [4096, 4096] x [4096, 4096] at jax's default precision: TF32"
        " on both sides (issue 28's precision table)",
        _matmul_default,
        (Arg((4096, 4096)), Arg((4096, 4096))),
        (Arg((32, 48)), Arg((48, 40))),
        _matmul_bytes,
        _matmul_flops,
        torch=_t_matmul_tf32,
    ),
    Workload(
        "mlp_block",
        "dense + bias + GELU + dense + bias, bf16 [4096, 2048] -> 8192 -> 2048",
        _mlp,
        (
            Arg((4096, 2048), BF16),
            Arg((2048, 8192), BF16, scale=0.02),
            Arg((8192,), BF16),
            Arg((8192, 2048), BF16, scale=0.02),
            Arg((2048,), BF16),
        ),
        (
            Arg((16, 32), BF16),
            Arg((32, 64), BF16, scale=0.2),
            Arg((64,), BF16),
            Arg((64, 32), BF16, scale=0.2),
            Arg((32,), BF16),
        ),
        _reads,
        _mlp_flops,
        torch=_t_mlp,
    ),
    Workload(
        "transformer_block",
        "pre-norm transformer block, bf16, batch 8 x 1024 tokens, width 1024, 16 heads",
        _transformer_block,
        (
            Arg((8, 1024, 1024), BF16),
            Arg((1024,), kind="positive"),
            Arg((1024, 3072), BF16, scale=0.03),
            Arg((1024, 1024), BF16, scale=0.03),
            Arg((1024,), kind="positive"),
            Arg((1024, 4096), BF16, scale=0.03),
            Arg((4096, 1024), BF16, scale=0.02),
        ),
        (
            Arg((1, 8, 32), BF16),
            Arg((32,), kind="positive"),
            Arg((32, 96), BF16, scale=0.2),
            Arg((32, 32), BF16, scale=0.2),
            Arg((32,), kind="positive"),
            Arg((32, 64), BF16, scale=0.2),
            Arg((64, 32), BF16, scale=0.2),
        ),
        _reads,
        _block_flops,
    ),
    Workload(
        "attention_bf16",
        "causal self-attention (jax.nn.dot_product_attention), bf16, batch 4 x 4096 tokens,"
        " 16 heads of 128: heron's fused call (cuDNN flash attention) against jax.jit's"
        " unfused attention",
        _attention,
        tuple(Arg((4, 4096, 16, 128), BF16) for _ in range(3)),
        tuple(Arg((1, 32, 2, 16), BF16) for _ in range(3)),
        _in_out,
        _attention_flops,
        torch=_t_attention,
    ),
    Workload(
        "attention_gqa_bf16",
        "causal grouped-query attention (jax.nn.dot_product_attention), bf16, batch 2 x 4096"
        " tokens, 32 query heads over 8 key/value heads of 128 (a Llama-style layer): one"
        " cuDNN call with its GQA against jax.jit's unfused attention",
        _attention,
        (Arg((2, 4096, 32, 128), BF16), Arg((2, 4096, 8, 128), BF16), Arg((2, 4096, 8, 128), BF16)),
        (Arg((1, 32, 4, 16), BF16), Arg((1, 32, 2, 16), BF16), Arg((1, 32, 2, 16), BF16)),
        _in_out,
        _attention_flops,
        torch=_t_attention,
    ),
    Workload(
        "attention_padded_bf16",
        "self-attention over sequences of several lengths (jax.nn.dot_product_attention with"
        " query_seq_lengths and key_value_seq_lengths), bf16, batch 4 x 4096 tokens, 16 heads"
        " of 128, lengths uniform in [2048, 4096): one cuDNN call with the padding masks as its"
        " bias [B, 1, S, S] against jax.jit's unfused attention",
        _padded_attention,
        (
            *(Arg((4, 4096, 16, 128), BF16) for _ in range(3)),
            *(Arg((4,), "int32", "integers", 2048, 4096) for _ in range(2)),
        ),
        (
            *(Arg((2, 32, 2, 16), BF16) for _ in range(3)),
            *(Arg((2,), "int32", "integers", 1, 33) for _ in range(2)),
        ),
        _in_out,
        _padded_attention_flops,
    ),
    Workload(
        "attention_backward_bf16",
        "the gradients (dq, dk, dv) of causal self-attention (jax.vjp of"
        " jax.nn.dot_product_attention), bf16, batch 2 x 4096 tokens, 16 heads of 128: heron's"
        " fused backward call (cuDNN's sdpa_backward after a forward with statistics) against"
        " jax.jit's five GEMMs around the softmax's derivative",
        _attention_backward,
        tuple(Arg((2, 4096, 16, 128), BF16) for _ in range(4)),
        tuple(Arg((1, 32, 2, 16), BF16) for _ in range(4)),
        lambda args: 2 * sum(a.nbytes for a in args),
        _attention_backward_flops,
        torch=_t_attention_backward,
        # dp in f32 where jax rounds it to bf16: the reassociation bound of a 16-bit result
        ulps=4,
    ),
    Workload(
        "attention_gqa_backward_bf16",
        "the gradients of causal grouped-query attention (jax.vjp of"
        " jax.nn.dot_product_attention), bf16, batch 2 x 4096 tokens, 32 query heads over 8"
        " key/value heads of 128: one cuDNN backward call with its GQA (dk, dv summed over"
        " each group) against jax.jit's GEMMs",
        _attention_backward,
        (
            Arg((2, 4096, 32, 128), BF16),
            Arg((2, 4096, 8, 128), BF16),
            Arg((2, 4096, 8, 128), BF16),
            Arg((2, 4096, 32, 128), BF16),
        ),
        (
            Arg((1, 32, 4, 16), BF16),
            Arg((1, 32, 2, 16), BF16),
            Arg((1, 32, 2, 16), BF16),
            Arg((1, 32, 4, 16), BF16),
        ),
        lambda args: 2 * sum(a.nbytes for a in args),
        _attention_backward_flops,
        torch=_t_attention_backward,
        ulps=4,
    ),
    Workload(
        "attention_training_bf16",
        "causal self-attention's output and gradients in one program (jax.vjp of"
        " jax.nn.dot_product_attention, as a training step has them), bf16, batch 2 x 4096"
        " tokens, 16 heads of 128: heron pairs its two cuDNN calls (the forward writes the"
        " softmax statistics, sdpa_backward reads them and the output instead of a second"
        " forward) against jax.jit's GEMMs",
        _attention_training,
        tuple(Arg((2, 4096, 16, 128), BF16) for _ in range(4)),
        tuple(Arg((1, 32, 2, 16), BF16) for _ in range(4)),
        lambda args: 3 * sum(a.nbytes for a in args),
        _attention_training_flops,
        torch=_t_attention_training,
        ulps=4,
    ),
    Workload(
        "fft2_c64",
        "jnp.fft.fft2 of complex64 [256, 512, 512]: heron's fft library call (cuFFT, planned"
        " once at load) against jax.jit's (XLA's cuFFT thunk)",
        _fft2,
        (Arg((256, 512, 512), "complex64"),),
        (Arg((2, 16, 8), "complex64"),),
        lambda args: 2 * sum(a.nbytes for a in args),
        _fft_flops,
        torch=_t_fft2,
    ),
    Workload(
        "convolution",
        "3x3 convolution, NHWC bf16 [64, 64, 64, 256] -> 256 channels",
        _convolution,
        (Arg((64, 64, 64, 256), BF16), Arg((3, 3, 256, 256), BF16, scale=0.03)),
        (Arg((1, 6, 6, 4), BF16), Arg((3, 3, 4, 4), BF16, scale=0.3)),
        _in_out,
        _conv_flops,
    ),
    Workload(
        "conv_training_step",
        "3x3 convolution + bias + ReLU training step (forward, weight and bias gradients,"
        " SGD), NHWC f32 [32, 56, 56, 64] -> 64 channels",
        _conv_training_step,
        (
            Arg((3, 3, 64, 64), scale=0.05),
            Arg((64,), scale=0.1),
            Arg((32, 56, 56, 64)),
            Arg((32, 56, 56, 64)),
        ),
        (Arg((3, 3, 4, 4), scale=0.3), Arg((4,), scale=0.1), Arg((2, 6, 6, 4)), Arg((2, 6, 6, 4))),
        lambda args: 4 * args[2].nbytes,
        _conv_train_flops,
    ),
    Workload(
        "training_step",
        "MLP training step (forward, gradients, SGD), f32: [4096, 1024] -> 4096 -> 1024",
        _training_step,
        (
            Arg((1024, 4096), scale=0.03),
            Arg((4096, 1024), scale=0.02),
            Arg((4096, 1024)),
            Arg((4096, 1024)),
        ),
        (Arg((16, 32), scale=0.2), Arg((32, 16), scale=0.2), Arg((8, 16)), Arg((8, 16))),
        lambda args: 3 * sum(a.nbytes for a in args),
        _train_flops,
    ),
    Workload(
        "matmul_fp8",
        "scaled fp8 matrix product as jax users write it, (f32(a) * a_scale) @ (f32(b) *"
        " b_scale), f8e4m3fn [8192, 8192] x [8192, 8192] -> f32: one cuBLASLt fp8 call with"
        " its scales (XLA's __cublas$lt$matmul$f8) after a transpose of b to [n, k]",
        _matmul_fp8,
        (
            Arg((8192, 8192), "float8_e4m3fn"),
            Arg((8192, 8192), "float8_e4m3fn"),
            Arg((), kind="positive"),
            Arg((), kind="positive"),
        ),
        (
            Arg((32, 64), "float8_e4m3fn"),
            Arg((64, 48), "float8_e4m3fn"),
            Arg((), kind="positive"),
            Arg((), kind="positive"),
        ),
        _fp8_matmul_bytes,
        _matmul_flops,
    ),
    Workload(
        "mlp_training_gelu_bf16",
        "MLP training step with jax.nn.gelu(approximate=True) (forward, gradients, SGD), bf16"
        " [8192, 1024] -> 4096 -> 1024: the first dense layer one cuBLASLt call writing the"
        " GELU and, for the backward pass, its argument (GELU_AUX_BIAS)",
        _mlp_training_gelu,
        (
            Arg((1024, 4096), BF16, scale=0.03),
            Arg((4096,), BF16, scale=0.1),
            Arg((4096, 1024), BF16, scale=0.02),
            Arg((8192, 1024), BF16),
            Arg((8192, 1024), BF16),
        ),
        (
            Arg((32, 64), BF16, scale=0.2),
            Arg((64,), BF16, scale=0.1),
            Arg((64, 16), BF16, scale=0.2),
            Arg((16, 32), BF16),
            Arg((16, 16), BF16),
        ),
        lambda args: 3 * sum(a.nbytes for a in args),
        _mlp_training_flops,
    ),
)

BY_NAME = {w.name: w for w in WORKLOADS}
