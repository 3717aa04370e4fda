"""The fused attention's backward pass as a library call: ``operation "attention_backward"``.

The gradients of :mod:`heron.runtime.core.attention`'s forward computation
with respect to q, k and v, given the output's gradient ``do``, as cuDNN's
fused flash-attention backward graph (``sdpa_backward``) computes them::

    q    [B, H, Sq, D]        k  [B, Hk, Sk, D]     v  [B, Hk, Sk, Dv]
    do   [B, H, Sq, Dv]       the gradient of the forward's output
    bias [B|1, H|1, Sq, Sk]   optional, as the forward's (no gradient)
    dq   [B, H, Sq, D]        dk [B, Hk, Sk, D]     dv [B, Hk, Sk, Dv]

    p      the forward's probabilities (scores, scale, bias, causal mask and
           softmax exactly as the forward contract says, in f32)
    dp     = do . v^T                           (f32 sums of the element type)
    delta  = sum over j of p * dp               (per query row, f32)
    ds     = scale * p * (dp - delta)           (f32; 0 where the mask removes a score)
    dq     = round(ds) . k                      (f32 sums, rounded once)
    dk     = round(ds)^T . q                    (summed over a key/value head's group)
    dv     = round(p)^T . do                    (summed over a key/value head's group)

``round`` is the element type, as a flash-attention kernel feeds its tensor
cores and as the programs heron recognises (jax's gradient of
``dot_product_attention``) write it. Where a program rounds ``dp`` to the
element type before the softmax's derivative (jax does), the call does not:
it computes ``dp`` in f32, as cuDNN does, within the reassociation bounds of a
16-bit result (the decision is the compiler's:
``heron.compiler.library_attention_backward``).

Where the program has the forward call too (a training step), the call reads
that call's output ``o`` and softmax statistics (``stats``, f32 ``[B, H, Sq]``,
each row's log-sum-exp: :mod:`heron.runtime.core.attention`) instead of
computing the forward again, as cuDNN's ``sdpa_backward`` reads them::

    p      = exp(s - stats)                     (s: the forward's logits, f32)
    delta  = sum over e of do * o               (per query row, f32)

the rest as above (``delta`` equals the other one where ``o = p . v``, but for
``o``'s rounding to the element type).

- ``arguments`` (the thunk's slices, in this order): ``q``, ``k``, ``v``,
  (``o``, only with ``o_strides``), ``do``, (``stats``, only with
  ``o_strides``), ``bias`` (only with ``bias_dims``), then the three computed
  ones ``dq``, ``dk``, ``dv``; each ``prod(dims)`` elements whose strides are a
  permutation of a dense layout; no output overlaps another argument.
- ``attributes``: ``element_type``, ``q_dims``, ``q_strides``, ``k_dims``,
  ``k_strides``, ``v_dims``, ``v_strides``, ``do_strides``, ``dq_strides``,
  ``dk_strides``, ``dv_strides`` (``do`` and ``dq`` have q's dimensions but
  ``Dv``; ``dk`` k's; ``dv`` v's), ``bias_dims`` and ``bias_strides`` (empty
  without a bias), ``scale``, ``causal``.

The limits are the forward's (:data:`~heron.runtime.core.attention.ELEMENT_TYPES`,
the head dimensions): :attr:`AttentionBackwardCall.forward` is the forward
call of the same tensors, checked as such. :meth:`AttentionBackwardCall.reference`
computes the contract with numpy.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar

import attrs
import numpy as np

from heron.hlo.element_types import ElementType
from heron.runtime.core.attention import AttentionCall, AttentionOperands, _flag, _ints, _scale
from heron.runtime.core.library_contract import (
    is_dense,
    read_strided,
    written_strided,
)
from heron.runtime.core.thunks import ThunkError

__all__ = ["ATTENTION_BACKWARD", "AttentionBackwardCall"]

#: The operation name of a fused attention's backward pass.
ATTENTION_BACKWARD = "attention_backward"


@attrs.frozen
class AttentionBackwardCall(AttentionOperands):
    """One fused attention backward call (see the module docstring for the contract)."""

    operation: ClassVar[str] = ATTENTION_BACKWARD
    outputs: ClassVar[int] = 3

    q_dims: tuple[int, ...] = attrs.field(converter=_ints)
    q_strides: tuple[int, ...] = attrs.field(converter=_ints)
    k_dims: tuple[int, ...] = attrs.field(converter=_ints)
    k_strides: tuple[int, ...] = attrs.field(converter=_ints)
    v_dims: tuple[int, ...] = attrs.field(converter=_ints)
    v_strides: tuple[int, ...] = attrs.field(converter=_ints)
    do_strides: tuple[int, ...] = attrs.field(converter=_ints)
    dq_strides: tuple[int, ...] = attrs.field(converter=_ints)
    dk_strides: tuple[int, ...] = attrs.field(converter=_ints)
    dv_strides: tuple[int, ...] = attrs.field(converter=_ints)
    scale: float = attrs.field(converter=_scale)
    bias_dims: tuple[int, ...] = attrs.field(default=(), converter=_ints)
    bias_strides: tuple[int, ...] = attrs.field(default=(), converter=_ints)
    causal: bool = attrs.field(default=False, converter=_flag)
    element_type: str = "bf16"
    #: Where the forward call's output and statistics are (both empty: computed here).
    o_strides: tuple[int, ...] = attrs.field(default=(), converter=_ints)
    stats_strides: tuple[int, ...] = attrs.field(default=(), converter=_ints)

    def __attrs_post_init__(self) -> None:
        if bool(self.o_strides) != bool(self.stats_strides):
            raise ThunkError(
                "attention_backward: o_strides and stats_strides come together (the forward"
                " call's output and statistics) or not at all"
            )
        self.forward  # noqa: B018 - checks the shared tensors as the forward contract does
        if self.o_strides:  # o and stats as the forward call that gives them has them
            attrs.evolve(self.forward, o_strides=self.o_strides, stats_strides=self.stats_strides)
        for name in ("dq", "dk", "dv"):
            dims, strides = self.dims_of(name), self.strides_of(name)
            if len(strides) != 4 or not is_dense(dims, strides):
                raise ThunkError(
                    f"attention_backward: {name}_strides {list(strides)} do not store"
                    f" {list(dims)} densely"
                )

    @property
    def forward(self) -> AttentionCall:
        """The forward call of these tensors (``do`` stands where its output was)."""
        return AttentionCall(
            q_dims=self.q_dims,
            q_strides=self.q_strides,
            k_dims=self.k_dims,
            k_strides=self.k_strides,
            v_dims=self.v_dims,
            v_strides=self.v_strides,
            o_dims=self.do_dims,
            o_strides=self.do_strides,
            scale=self.scale,
            bias_dims=self.bias_dims,
            bias_strides=self.bias_strides,
            causal=self.causal,
            element_type=self.element_type,
        )

    # -- derived ---------------------------------------------------------------------------
    @property
    def reads_forward(self) -> bool:
        """Whether the call reads the forward call's o and statistics (else computes them)."""
        return bool(self.o_strides)

    @property
    def o_dims(self) -> tuple[int, ...]:
        return self.do_dims

    @property
    def stats_dims(self) -> tuple[int, ...]:
        return tuple(self.q_dims[:3])

    @property
    def do_dims(self) -> tuple[int, ...]:
        b, h, sq, _ = self.q_dims
        return (b, h, sq, self.v_dims[3])

    @property
    def dq_dims(self) -> tuple[int, ...]:
        return self.q_dims

    @property
    def dk_dims(self) -> tuple[int, ...]:
        return self.k_dims

    @property
    def dv_dims(self) -> tuple[int, ...]:
        return self.v_dims

    @property
    def operand_names(self) -> tuple[str, ...]:
        """The arguments, in order, the three computed ones last."""
        given = ("q", "k", "v", "o", "do", "stats") if self.o_strides else ("q", "k", "v", "do")
        if self.bias_dims:
            given = (*given, "bias")
        return (*given, "dq", "dk", "dv")

    def flops(self) -> int:
        """The five products of the backward pass (the scores again, dp, dv, dq, dk)."""
        b, h, sq, d = self.q_dims
        sk, dv = self.k_dims[2], self.v_dims[3]
        full = 2 * b * h * sq * sk * (3 * d + 2 * dv)
        return full // 2 if self.causal else full

    def describe(self) -> str:
        """``attention backward bf16[2x4x128x64] q, 128 keys -> dq, dk, dv, scale 0.125,
        causal`` for reports."""
        forward = self.forward.describe()
        head, _, tail = forward.partition(" -> ")
        extras = tail.partition(", ")[2]
        reads = ", reading the forward's o and stats" if self.o_strides else ""
        return (
            head.replace("attention ", "attention backward ", 1)
            + " -> dq, dk, dv"
            + (f", {extras}" if extras else "")
            + reads
        )

    # -- numpy -------------------------------------------------------------------------------
    def reference(self, arguments: Sequence[np.ndarray]) -> tuple[np.ndarray, ...]:
        """The contract computed with numpy from the arguments' raw bytes (uint8 arrays in
        :attr:`operand_names` order); returns the bytes of dq, dk and dv.

        Sums in f32 in numpy's order (a library's differ within the sums' rounding).
        """
        names = self.operand_names
        if len(arguments) != len(names):
            raise ThunkError(
                f"{self.describe()}: takes {len(names)} arguments, given {len(arguments)}"
            )
        dtype = ElementType(self.element_type).numpy_dtype
        raw = dict(zip(names, arguments, strict=True))

        def logical(name: str) -> np.ndarray:
            of = np.float32 if name == "stats" else dtype
            view = read_strided(raw[name], self.dims_of(name), self.strides_of(name), of)
            return np.array(view, dtype=np.float32)

        def rounded(x: np.ndarray) -> np.ndarray:
            return x.astype(dtype).astype(np.float32)

        q, k, v, do = (logical(name) for name in ("q", "k", "v", "do"))
        b, hk, sk, d = k.shape
        groups = q.shape[1] // hk  # query heads per key/value head
        keys, values = np.repeat(k, groups, axis=1), np.repeat(v, groups, axis=1)
        scale = np.float32(self.scale)
        with np.errstate(over="ignore", invalid="ignore"):
            scores = np.einsum("bhid,bhjd->bhij", q, keys, dtype=np.float32) * scale
            if self.bias_dims:
                scores = scores + logical("bias")
            if self.causal:
                sq = scores.shape[2]
                above = np.arange(sk)[None, :] > np.arange(sq)[:, None]
                scores = np.where(above, np.float32(-np.inf), scores)
            dp = np.einsum("bhie,bhje->bhij", do, values, dtype=np.float32)
            if self.o_strides:  # the forward call's statistics and output
                p = np.exp(scores - logical("stats")[..., None])
                delta = (do * logical("o")).sum(axis=-1, keepdims=True, dtype=np.float32)
            else:
                exponentials = np.exp(scores - scores.max(axis=-1, keepdims=True))
                p = exponentials / exponentials.sum(axis=-1, keepdims=True)
                delta = (p * dp).sum(axis=-1, keepdims=True, dtype=np.float32)
            ds = rounded(scale * (p * (dp - delta)))
            dq = np.einsum("bhij,bhjd->bhid", ds, keys, dtype=np.float32)
            dk = np.einsum("bhij,bhid->bhjd", ds, q, dtype=np.float32)
            dv = np.einsum("bhij,bhie->bhje", rounded(p), do, dtype=np.float32)
        dk = dk.reshape(b, hk, groups, sk, d).sum(axis=2, dtype=np.float32)
        dv = dv.reshape(b, hk, groups, sk, v.shape[3]).sum(axis=2, dtype=np.float32)
        return tuple(
            written_strided(value, self.dims_of(name), self.strides_of(name), dtype)
            for name, value in (("dq", dq), ("dk", dk), ("dv", dv))
        )
