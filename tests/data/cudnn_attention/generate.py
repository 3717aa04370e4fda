"""Write the HLO jax lowers for CUDA when asked for cuDNN's fused attention.

``jax.nn.dot_product_attention(..., implementation="cudnn")`` lowers to XLA's
``__cudnn$fmha*`` custom calls only where jax finds cuDNN; it checks the version
and the GPU's compute capability while tracing. This script tells it cuDNN 9.10
on an sm_90 (nothing runs: the module is only lowered, for CUDA) and writes each
case's module here, as ``tests/test_xla_cudnn_attention.py`` reads them.

Run (jax 0.10.2, no GPU needed): ``python tests/data/cudnn_attention/generate.py``
"""

from __future__ import annotations

from pathlib import Path

import jax
import jax._src.cudnn.fused_attention_stablehlo as fused_attention
import jax.numpy as jnp

HERE = Path(__file__).parent
CUDNN_VERSION = 91000


class _Versions:
    @staticmethod
    def cudnn_get_version() -> int:
        return CUDNN_VERSION


fused_attention.check_cudnn_version = lambda *args, **kwargs: CUDNN_VERSION
fused_attention.check_compute_capability = lambda *args, **kwargs: True
fused_attention.cuda_versions = _Versions

S = jax.ShapeDtypeStruct
dpa = jax.nn.dot_product_attention


def _attention(**options):
    return lambda q, k, v, *rest: dpa(q, k, v, *rest, implementation="cudnn", **options)


def _gradients(count: int, **options):
    """The gradients of the attention's sum with respect to its first ``count`` operands."""

    def loss(*operands):
        return _attention(**options)(*operands).astype(jnp.float32).sum()

    return jax.grad(loss, argnums=tuple(range(count)))


BF16, F16 = jnp.bfloat16, jnp.float16
QKV = S((2, 16, 2, 8), BF16)  # [B, S, H, D], jax's order
QUERIES_4 = S((2, 16, 4, 8), BF16)
KV_2 = S((2, 12, 2, 8), BF16)  # grouped-query: two key/value heads, twelve keys
HALF = S((2, 16, 2, 8), F16)
LENGTHS = S((2,), jnp.int32)

CASES = {
    "forward_causal": (_attention(is_causal=True), (QKV, QKV, QKV)),
    "forward_bias_scale": (
        lambda q, k, v, b: dpa(q, k, v, bias=b, scale=0.3, implementation="cudnn"),
        (QKV, QKV, QKV, S((2, 2, 16, 16), BF16)),
    ),
    "forward_grouped": (_attention(), (QUERIES_4, KV_2, KV_2)),
    "backward_causal_f16": (_gradients(3, is_causal=True), (HALF, HALF, HALF)),
    "backward_grouped": (_gradients(3), (QUERIES_4, KV_2, KV_2)),
    "backward_bias": (
        jax.grad(
            lambda q, k, v, b: (
                dpa(q, k, v, bias=b, implementation="cudnn").astype(jnp.float32).sum()
            ),
            argnums=(0, 1, 2),
        ),
        (QKV, QKV, QKV, S((1, 2, 16, 16), BF16)),
    ),
    "backward_bias_gradient": (
        jax.grad(
            lambda q, k, v, b: (
                dpa(q, k, v, bias=b, implementation="cudnn").astype(jnp.float32).sum()
            ),
            argnums=(0, 1, 2, 3),
        ),
        (QKV, QKV, QKV, S((2, 2, 16, 16), BF16)),
    ),
    "backward_padding_causal": (
        jax.grad(
            lambda q, k, v, ql, kl: (
                dpa(
                    q,
                    k,
                    v,
                    query_seq_lengths=ql,
                    key_value_seq_lengths=kl,
                    is_causal=True,
                    implementation="cudnn",
                )
                .astype(jnp.float32)
                .sum()
            ),
            argnums=(0, 1, 2),
        ),
        (QKV, QKV, QKV, LENGTHS, LENGTHS),
    ),
    "backward_padding_bias_gradient": (
        jax.grad(
            lambda q, k, v, b, ql, kl: (
                dpa(
                    q,
                    k,
                    v,
                    bias=b,
                    query_seq_lengths=ql,
                    key_value_seq_lengths=kl,
                    implementation="cudnn",
                )
                .astype(jnp.float32)
                .sum()
            ),
            argnums=(0, 1, 2, 3),
        ),
        (QKV, QKV, QKV, S((1, 2, 16, 16), BF16), LENGTHS, LENGTHS),
    ),
    "backward_window_grouped": (
        _gradients(3, is_causal=True, local_window_size=(4, 0)),
        (QUERIES_4, S((2, 16, 2, 8), BF16), S((2, 16, 2, 8), BF16)),
    ),
    "forward_padding": (
        lambda q, k, v, ql, kl: dpa(
            q, k, v, query_seq_lengths=ql, key_value_seq_lengths=kl, implementation="cudnn"
        ),
        (QKV, QKV, QKV, LENGTHS, LENGTHS),
    ),
    "forward_window": (_attention(is_causal=True, local_window_size=(4, 0)), (QKV, QKV, QKV)),
}


def main() -> None:
    for name, (function, shapes) in CASES.items():
        lowered = jax.jit(function).trace(*shapes).lower(lowering_platforms=("cuda",))
        (HERE / f"{name}.hlo").write_text(lowered.as_text(dialect="hlo"))
        print(f"wrote {name}.hlo")


if __name__ == "__main__":
    main()
