"""The fused attention library call's contract: ``operation "attention"`` of a library call.

Scaled dot-product attention as cuDNN's fused flash-attention graph
(``sdpa``) computes it, forward, for inference: four-dimensional tensors
given by their dimensions in cuDNN's logical order and the element stride of
each dimension in their buffer, so that any HLO layout is a description, not
a copy::

    q    [B, H, Sq, D]        the queries
    k    [B, Hk, Sk, D]       the keys (Hk divides H; G = H / Hk)
    v    [B, Hk, Sk, Dv]      the values
    bias [B|1, H|1, Sq, Sk]   optional, added to the scaled scores
    o    [B, H, Sq, Dv]       the output

    s[b, h, i, j] = scale * sum over d of q[b, h, i, d] * k[b, h // G, j, d]
                    + bias[b, h, i, j]                 (with a bias)
    s[b, h, i, j] = -inf where j > i                   (causal: top-left aligned)
    p[b, h, i, :] = softmax(s[b, h, i, :])             (in f32)
    o[b, h, i, e] = sum over j of p[b, h, i, j] * v[b, h // G, j, e]

(``G`` > 1: grouped-query attention, query heads sharing a key/value head, as
cuDNN's ``sdpa`` takes them.)

with the scores and the softmax in f32, the probabilities rounded to the
element type before the second product (as a flash-attention kernel feeds
its tensor cores, and as the programs heron recognises write it), sums in
f32, and the output rounded once to the element type. This is what the
compiler makes of the HLO pattern dot -> scale -> bias -> causal mask ->
softmax -> dot (``heron.compiler.library_attention`` says which programs).

A training step's forward call also gives the softmax's statistics, which its
backward call (:mod:`heron.runtime.core.attention_backward`) reads instead of
computing the forward again (cuDNN's ``sdpa(generate_stats=True)``)::

    stats [B, H, Sq]          f32: m + log(sum over j of exp(s[b, h, i, j] - m)),
                              m = max over j of s[b, h, i, j] (the masked, biased logits)

- ``arguments`` (the thunk's slices, in this order): ``q``, ``k``, ``v``,
  ``bias`` (only with ``bias_dims``), ``o``, ``stats`` (only with
  ``stats_strides``); each ``prod(dims)`` elements whose strides are a
  permutation of a dense layout; the computed ones overlap no other argument.
- ``attributes``: ``element_type`` (:data:`ELEMENT_TYPES`, every tensor),
  ``q_dims``, ``q_strides``, ``k_dims``, ``k_strides``, ``v_dims``,
  ``v_strides``, ``o_dims``, ``o_strides``, ``bias_dims`` and ``bias_strides``
  (empty without a bias), ``scale`` (a float), ``causal`` (a bool),
  ``stats_strides`` (three element strides of ``stats``; empty: no statistics).

The limits a fused-attention library has (:data:`ELEMENT_TYPES`,
:data:`MAX_HEAD_DIM`, :data:`HEAD_DIM_MULTIPLE`) are part of the contract: the
compiler makes no call outside them. :meth:`AttentionCall.reference` computes
the contract with numpy (the interpreter device's "library", and what the GPU
tests compare cuDNN with).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, ClassVar

import attrs
import numpy as np

from heron.hlo.element_types import ElementType
from heron.runtime.core.library_contract import (
    LibraryContract,
    is_dense,
    read_strided,
    written_strided,
)
from heron.runtime.core.thunks import ThunkError

__all__ = [
    "ATTENTION",
    "ELEMENT_TYPES",
    "HEAD_DIM_MULTIPLE",
    "MAX_HEAD_DIM",
    "STATS_BYTES",
    "AttentionCall",
]

#: The operation name of a fused attention library call.
ATTENTION = "attention"
#: The element types a fused attention call takes (flash attention runs on half-precision
#: tensor cores: every tensor of one of these).
ELEMENT_TYPES = ("f16", "bf16")
#: The largest head dimension (D and Dv) a call may have (cuDNN's flash attention).
MAX_HEAD_DIM = 128
#: Head dimensions must be multiples of this (16-byte aligned rows of half-precision).
HEAD_DIM_MULTIPLE = 8
#: Bytes of a statistic (f32, whatever the tensors' type).
STATS_BYTES = 4


def _ints(value: Any) -> tuple[int, ...]:
    if isinstance(value, (str, bytes)) or not isinstance(value, Sequence):
        raise ThunkError(f"attention: expected a list of integers, got {value!r:.60}")
    if not all(isinstance(v, int) and not isinstance(v, bool) for v in value):
        raise ThunkError(f"attention: expected a list of integers, got {list(value)!r:.60}")
    return tuple(value)


def _scale(value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ThunkError(f"attention: scale must be a finite number, got {value!r:.60}")
    return float(value)


def _flag(value: Any) -> bool:
    if not isinstance(value, bool):
        raise ThunkError(f"attention: causal must be true or false, got {value!r:.60}")
    return value


class AttentionOperands(LibraryContract):
    """What the forward and backward attention calls share: each argument ``NAME`` has
    the fields ``NAME_dims`` and ``NAME_strides``, all of ``element_type`` but the
    statistics (f32, a value per query row). Not an attrs class: the calls' fields are
    their own, in their own order."""

    element_type: str  # declared by each call's fields

    def dims_of(self, name: str) -> tuple[int, ...]:
        return getattr(self, f"{name}_dims")

    def strides_of(self, name: str) -> tuple[int, ...]:
        return getattr(self, f"{name}_strides")

    def byte_sizes(self) -> tuple[int, ...]:
        width = ElementType(self.element_type).byte_width
        return tuple(
            math.prod(self.dims_of(name)) * (STATS_BYTES if name == "stats" else width)
            for name in self.operand_names
        )


@attrs.frozen
class AttentionCall(AttentionOperands):
    """One fused attention call (see the module docstring for the contract)."""

    operation: ClassVar[str] = ATTENTION

    q_dims: tuple[int, ...] = attrs.field(converter=_ints)
    q_strides: tuple[int, ...] = attrs.field(converter=_ints)
    k_dims: tuple[int, ...] = attrs.field(converter=_ints)
    k_strides: tuple[int, ...] = attrs.field(converter=_ints)
    v_dims: tuple[int, ...] = attrs.field(converter=_ints)
    v_strides: tuple[int, ...] = attrs.field(converter=_ints)
    o_dims: tuple[int, ...] = attrs.field(converter=_ints)
    o_strides: tuple[int, ...] = attrs.field(converter=_ints)
    scale: float = attrs.field(converter=_scale)
    bias_dims: tuple[int, ...] = attrs.field(default=(), converter=_ints)
    bias_strides: tuple[int, ...] = attrs.field(default=(), converter=_ints)
    causal: bool = attrs.field(default=False, converter=_flag)
    element_type: str = "bf16"
    #: Where the call writes the softmax's statistics (f32 [B, H, Sq]); empty: it does not.
    stats_strides: tuple[int, ...] = attrs.field(default=(), converter=_ints)

    def __attrs_post_init__(self) -> None:
        if self.element_type not in ELEMENT_TYPES:
            raise ThunkError(
                f"attention: element type {self.element_type!r} (takes {', '.join(ELEMENT_TYPES)})"
            )
        for name in self.operand_names:
            if name == "stats":
                continue
            dims, strides = self.dims_of(name), self.strides_of(name)
            if len(dims) != 4 or len(strides) != 4:
                raise ThunkError(
                    f"attention: {name} needs 4 dimensions and 4 strides, got {list(dims)}"
                    f" and {list(strides)}"
                )
            if min(dims) < 1:
                raise ThunkError(f"attention: {name}_dims {list(dims)} has an empty dimension")
            if not is_dense(dims, strides):
                raise ThunkError(
                    f"attention: {name}_strides {list(strides)} do not store {name}_dims"
                    f" {list(dims)} densely"
                )
        if len(self.bias_dims) != len(self.bias_strides):
            raise ThunkError("attention: bias_dims and bias_strides differ in length")
        b, h, sq, d = self.q_dims
        hk, sk, dv = self.k_dims[1], self.k_dims[2], self.v_dims[3]
        if h % hk:
            raise ThunkError(
                f"attention: q's {h} heads are no multiple of k's {hk} (grouped-query attention)"
            )
        expected = {
            "k": (b, hk, sk, d),
            "v": (b, hk, sk, dv),
            "o": (b, h, sq, dv),
        }
        for name, dims in expected.items():
            if self.dims_of(name) != dims:
                raise ThunkError(
                    f"attention: {name}_dims {list(self.dims_of(name))}, q {list(self.q_dims)}"
                    f" and the others give {list(dims)}"
                )
        if self.bias_dims:
            bb, bh, bq, bk = self.bias_dims
            if bb not in (1, b) or bh not in (1, h) or (bq, bk) != (sq, sk):
                raise ThunkError(
                    f"attention: bias_dims {list(self.bias_dims)} must be [{b} or 1, {h} or 1,"
                    f" {sq}, {sk}]"
                )
        for head in (d, dv):
            if head > MAX_HEAD_DIM or head % HEAD_DIM_MULTIPLE:
                raise ThunkError(
                    f"attention: head dimension {head} (at most {MAX_HEAD_DIM}, a multiple of"
                    f" {HEAD_DIM_MULTIPLE})"
                )
        if self.stats_strides and (
            len(self.stats_strides) != 3 or not is_dense(self.stats_dims, self.stats_strides)
        ):
            raise ThunkError(
                f"attention: stats_strides {list(self.stats_strides)} do not store"
                f" {list(self.stats_dims)} densely"
            )

    # -- derived ---------------------------------------------------------------------------
    @property
    def outputs(self) -> int:  # type: ignore[override]
        """The computed arguments: o, and the statistics where the call gives them."""
        return 2 if self.stats_strides else 1

    @property
    def stats_dims(self) -> tuple[int, ...]:
        """The statistics' dimensions: a value per (batch, head, query row)."""
        return tuple(self.q_dims[:3])

    @property
    def operand_names(self) -> tuple[str, ...]:
        """The arguments, in order, the computed ones last."""
        given = ("q", "k", "v", "bias") if self.bias_dims else ("q", "k", "v")
        return (*given, "o", "stats") if self.stats_strides else (*given, "o")

    def flops(self) -> int:
        b, h, sq, d = self.q_dims
        sk, dv = self.k_dims[2], self.v_dims[3]
        full = 2 * b * h * sq * sk * (d + dv)
        return full // 2 if self.causal else full

    def describe(self) -> str:
        """``attention bf16[2x4x128x64] q, 128 keys -> bf16[2x4x128x64], scale 0.125,
        causal`` for reports."""
        t = self.element_type
        extras = [
            f"scale {self.scale:g}",
            f"bias {t}[{'x'.join(map(str, self.bias_dims))}]" if self.bias_dims else "",
            "causal" if self.causal else "",
        ]
        if self.k_dims[1] != self.q_dims[1]:
            extras.insert(0, f"{self.k_dims[1]} key/value heads")
        stats = (
            f" and f32[{'x'.join(map(str, self.stats_dims))}] stats" if self.stats_strides else ""
        )
        return (
            f"attention {t}[{'x'.join(map(str, self.q_dims))}] q, {self.k_dims[2]} keys ->"
            f" {t}[{'x'.join(map(str, self.o_dims))}]{stats}"
            + "".join(f", {e}" for e in extras if e)
        )

    # -- numpy -------------------------------------------------------------------------------
    def reference(self, arguments: Sequence[np.ndarray]) -> Any:
        """The contract computed with numpy from the arguments' raw bytes (uint8 arrays in
        :attr:`operand_names` order, the computed ones last); returns o's bytes, or the
        bytes of o and of the statistics where the call gives them.

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
            view = read_strided(raw[name], self.dims_of(name), self.strides_of(name), dtype)
            return np.array(view, dtype=np.float32)

        q, k, v = logical("q"), logical("k"), logical("v")
        groups = q.shape[1] // k.shape[1]  # query heads per key/value head
        k, v = np.repeat(k, groups, axis=1), np.repeat(v, groups, axis=1)
        with np.errstate(over="ignore", invalid="ignore"):
            scores = np.einsum("bhid,bhjd->bhij", q, k, dtype=np.float32)
            scores = scores * np.float32(self.scale)
            if self.bias_dims:
                scores = scores + logical("bias")
            if self.causal:
                sq, sk = scores.shape[2:]
                above = np.arange(sk)[None, :] > np.arange(sq)[:, None]
                scores = np.where(above, np.float32(-np.inf), scores)
            peak = scores.max(axis=-1, keepdims=True)
            exponentials = np.exp(scores - peak)
            total = exponentials.sum(axis=-1, keepdims=True, dtype=np.float32)
            probabilities = exponentials / total
            rounded = probabilities.astype(dtype).astype(np.float32)
            out = np.einsum("bhij,bhje->bhie", rounded, v, dtype=np.float32)
            o = written_strided(out, self.o_dims, self.o_strides, dtype)
            if not self.stats_strides:
                return o
            stats = (peak + np.log(total))[..., 0]
        return o, written_strided(stats, self.stats_dims, self.stats_strides, np.float32)
