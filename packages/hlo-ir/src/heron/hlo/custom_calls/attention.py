"""``__heron$attention``: scaled dot-product attention a fused-attention library computes.

XLA:GPU computes attention as one cuDNN flash-attention call where a program
asks for it (``__cudnn$fmhaSoftmax``). heron recognises the pattern itself
(``heron.compiler.library_attention``: a dot, a scale, a bias, a causal mask,
a softmax and a second dot) and makes it this custom call::

    custom-call(q, k, v[, bias]), custom_call_target="__heron$attention",
        backend_config={"scale": 0.125, "causal": true}

over tensors in cuDNN's order: ``q [B, H, Sq, D]``, ``k [B, Hk, Sk, D]``,
``v [B, Hk, Sk, Dv]``, ``bias [B or 1, H or 1, Sq, Sk]`` (of the element type,
added after the scale), result ``[B, H, Sq, Dv]``, all of one half-precision
element type. ``Hk`` divides ``H``: with fewer key/value heads than query heads
(grouped-query attention) query head ``n`` attends with key/value head
``n // (H / Hk)``, as cuDNN's and jax's.

q, k, v and the result may be stored in another order (jax's ``[B, S, H, D]``):
``"orders": {"q": [0, 2, 1, 3], ...}`` in ``backend_config`` says, per tensor,
which stored dimension each of ``[B, H, S, D]`` is (the tensor in cuDNN's order
is ``transpose(stored, dimensions=order)``; the result is stored as
``transpose(result, dimensions=order)``). A library reads such a tensor with
its strides: the transposes a program wrote around its attention cost nothing.

A training step's forward call may also give the softmax's statistics, which
its backward call reads instead of computing the forward again (XLA's cuDNN
fMHA forward/backward pair; ``heron.compiler.library_attention_pairing``
decides it): ``"stats": true`` in ``backend_config``, and the result is the
tuple ``(o, stats)``, ``stats`` an f32 ``[B, H, Sq]`` array, per query row
the log-sum-exp of the scaled, biased, masked scores in f32::

    stats[b, h, i] = m + log(sum over j of exp(s[b, h, i, j] - m)),  m = max over j of s

which is cuDNN's ``Stats`` tensor (``sdpa(generate_stats=True)``, ``[B, H,
Sq, 1]``: the trailing 1 dropped here). ``stats`` may be stored in any layout
(its strides say where each row's value is).

The custom call has one meaning wherever it runs, which this module states as
HLO (:func:`attention_text`) and the reference evaluator computes (its host
implementation, a ``heron.custom_calls`` plugin of hlo-ir itself): the scores
``q . k`` in f32, times ``scale``, plus the bias, ``-inf`` above the diagonal
when causal (top-left aligned), a softmax in f32, the probabilities rounded to
the element type, their product with ``v`` summed in f32 and rounded once.
The library call's contract (``heron.runtime.core.attention``) is the same
computation in numpy.
"""

from __future__ import annotations

import functools
import json
import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from heron.hlo.custom_calls.attention_config import IDENTITY, TARGET, backend_config
from heron.hlo.custom_calls.call import CustomCall
from heron.hlo.custom_calls.hookspecs import CustomCallSpec, hookimpl
from heron.hlo.element_types import ElementType
from heron.hlo.errors import HloError
from heron.hlo.ir import Computation, Module
from heron.hlo.shapes import ArrayShape, Shape, TupleShape

__all__ = [
    "ORDERED",
    "STATS_TYPE",
    "TARGET",
    "AttentionConfig",
    "as_attention",
    "attention_text",
    "backend_config",
    "heron_custom_call_specs",
    "host",
    "in_cudnn_order",
    "logits_lines",
    "probabilities_lines",
    "stats_shape",
]

#: The element types the custom call takes.
ELEMENT_TYPES = ("f16", "bf16")


#: The tensors whose stored order ``backend_config`` may give.
ORDERED = ("q", "k", "v", "result")
#: The element type of the softmax's statistics (cuDNN's: f32 whatever the I/O type).
STATS_TYPE = "f32"
_IDENTITY = IDENTITY


def stats_shape(b: int, h: int, sq: int) -> ArrayShape:
    """The statistics of a ``[B, H, Sq, .]`` attention: f32 ``[B, H, Sq]`` (no layout yet:
    layout assignment gives it one)."""
    return ArrayShape(ElementType(STATS_TYPE), (b, h, sq))


class AttentionConfig:
    """What a ``__heron$attention`` call's ``backend_config`` says, checked; ``ordered``:
    the tensors whose stored order it may give (the backward call's are others)."""

    def __init__(self, text: str, ordered: Sequence[str] = ORDERED) -> None:
        try:
            config = json.loads(text or "{}")
        except json.JSONDecodeError as error:
            raise ValueError(f"backend_config is not JSON ({error})") from None
        if not isinstance(config, dict) or not {"causal", "scale"} <= set(config) <= {
            "causal",
            "scale",
            "orders",
            "stats",
        }:
            raise ValueError(
                "backend_config must give 'scale', 'causal' and perhaps 'orders' and 'stats':"
                " it was not written by heron"
            )
        stats = config.get("stats", False)
        if not isinstance(stats, bool):
            raise ValueError(f"backend_config's stats is not true or false: {stats!r}")
        #: The forward gives the softmax's statistics too; the backward reads them.
        self.stats = stats
        orders = config.get("orders", {})
        if not isinstance(orders, dict) or not set(orders) <= set(ordered):
            raise ValueError(f"backend_config's orders name {sorted(orders)}, not {tuple(ordered)}")
        self.orders: dict[str, tuple[int, ...]] = {name: _IDENTITY for name in ordered}
        for name, order in orders.items():
            if not isinstance(order, list) or sorted(order) != list(_IDENTITY):
                raise ValueError(f"backend_config's order of {name} is no permutation: {order!r}")
            self.orders[name] = tuple(order)
        scale, causal = config["scale"], config["causal"]
        if isinstance(scale, bool) or not isinstance(scale, (int, float)):
            raise ValueError(f"backend_config's scale is not a number: {scale!r}")
        if not math.isfinite(scale):
            raise ValueError(f"backend_config's scale is not finite: {scale!r}")
        if not isinstance(causal, bool):
            raise ValueError(f"backend_config's causal is not true or false: {causal!r}")
        self.scale = float(scale)
        self.causal = causal


def _check_shapes(operand_shapes: Sequence[ArrayShape], result_shape: ArrayShape) -> None:
    if len(operand_shapes) not in (3, 4):
        raise ValueError(f"takes q, k, v and an optional bias, not {len(operand_shapes)} operands")
    q, k, v = operand_shapes[:3]
    types = {str(shape.element_type) for shape in (*operand_shapes, result_shape)}
    if len(types) != 1 or not types <= set(ELEMENT_TYPES):
        raise ValueError(
            f"every tensor of one element type of {', '.join(ELEMENT_TYPES)}, not"
            f" {' x '.join(sorted(types))}"
        )
    if any(len(shape.dims) != 4 for shape in (*operand_shapes, result_shape)):
        raise ValueError("every tensor has 4 dimensions [B, H, S, D]")
    b, h, sq, d = q.dims
    hk, sk, dv = k.dims[1], k.dims[2], v.dims[3]
    if h % hk:
        raise ValueError(f"q's {h} heads are no multiple of k's {hk} (grouped-query attention)")
    expected = {"k": (b, hk, sk, d), "v": (b, hk, sk, dv), "result": (b, h, sq, dv)}
    actual = {"k": k.dims, "v": v.dims, "result": result_shape.dims}
    for name, dims in expected.items():
        if tuple(actual[name]) != dims:
            raise ValueError(f"{name} is {list(actual[name])}; q, k and v give {list(dims)}")
    if len(operand_shapes) == 4:
        bb, bh, bq, bk = operand_shapes[3].dims
        if bb not in (1, b) or bh not in (1, h) or (bq, bk) != (sq, sk):
            raise ValueError(
                f"bias is {list(operand_shapes[3].dims)}, not [{b} or 1, {h} or 1, {sq}, {sk}]"
            )


def in_cudnn_order(shape: ArrayShape, order: Sequence[int]) -> ArrayShape:
    """``shape`` (stored) as ``[B, H, S, D]``: its dimensions taken in ``order``."""
    return ArrayShape(shape.element_type, tuple(shape.dims[d] for d in order))


def _split_result(settings: AttentionConfig, result: Shape) -> tuple[ArrayShape, ArrayShape | None]:
    """The output's shape and the statistics' (None without ``"stats"``), checked as the
    config says the result is: one array, or the tuple ``(o, stats)``."""
    if not settings.stats:
        if not isinstance(result, ArrayShape):
            raise ValueError("gives one array (the output) without 'stats'")
        return result, None
    if (
        not isinstance(result, TupleShape)
        or len(result.elements) != 2
        or not all(isinstance(e, ArrayShape) for e in result.elements)
    ):
        raise ValueError("gives a tuple (o, stats) with 'stats'")
    o, stats = result.elements
    return o, stats  # type: ignore[return-value]


def attention_text(config: str, operand_shapes: Sequence[ArrayShape], result: Shape) -> str:
    """A module whose entry computes the attention a custom call stands for (HLO text)."""
    settings = AttentionConfig(config)
    orders = settings.orders
    result_shape, stats = _split_result(settings, result)
    if any(len(shape.dims) != 4 for shape in (*operand_shapes, result_shape)):
        raise ValueError("every tensor has 4 dimensions [B, H, S, D]")
    logical = [
        in_cudnn_order(shape, orders[name]) if name in orders else shape
        for name, shape in zip(("q", "k", "v", "bias"), operand_shapes, strict=False)
    ]
    # the stored result's order inverted: result dimension j is [B, H, S, D]'s order[j]
    result_order = orders["result"]
    inverse = tuple(result_order.index(d) for d in range(4))
    _check_shapes(logical, in_cudnn_order(result_shape, inverse))
    q, k, v = logical[:3]
    t = q.element_type
    b, h, sq, _ = q.dims
    hk, sk, dv = k.dims[1], k.dims[2], v.dims[3]
    if stats is not None and (
        str(stats.element_type) != STATS_TYPE or tuple(stats.dims) != (b, h, sq)
    ):
        raise ValueError(f"stats is {stats.without_layout()}, not {STATS_TYPE}[{b},{h},{sq}]")
    scores = f"f32[{b},{h},{sq},{sk}]"
    lines = []
    for number, name in enumerate(("q", "k", "v")):
        stored = operand_shapes[number].without_layout()
        if orders[name] == _IDENTITY:
            lines.append(f"  {name} = {stored} parameter({number})")
            continue
        order = ",".join(map(str, orders[name]))
        lines += [
            f"  {name}_stored = {stored} parameter({number})",
            f"  {name} = {logical[number]} transpose({name}_stored), dimensions={{{order}}}",
        ]
    keys, values = ("k", "v") if hk == h else ("k_heads", "v_heads")
    if hk != h:  # each key/value head serves h / hk query heads: broadcast, then merge
        for name, shape in (("k", k), ("v", v)):
            _, _, length, width = shape.dims
            lines += [
                f"  {name}_groups = {t}[{b},{hk},{h // hk},{length},{width}] broadcast({name}),"
                " dimensions={0,1,3,4}",
                f"  {name}_heads = {t}[{b},{h},{length},{width}] reshape({name}_groups)",
            ]
    lines += [
        f"  dot = {scores} dot(q, {keys}), lhs_batch_dims={{0,1}}, lhs_contracting_dims={{3}},"
        " rhs_batch_dims={0,1}, rhs_contracting_dims={3}",
    ]
    bias = operand_shapes[3] if len(operand_shapes) == 4 else None
    lines += probabilities_lines(settings, t, (b, h, sq, sk), bias, 3)
    lines += [
        f"  rounded = {t}[{b},{h},{sq},{sk}] convert(probabilities)",
        f"  out = f32[{b},{h},{sq},{dv}] dot(rounded, {values}), lhs_batch_dims={{0,1}},"
        " lhs_contracting_dims={3}, rhs_batch_dims={0,1}, rhs_contracting_dims={2}",
        f"  result = {t}[{b},{h},{sq},{dv}] convert(out)",
    ]
    output = "result"
    if result_order != _IDENTITY:
        order = ",".join(map(str, result_order))
        lines.append(
            f"  stored = {result_shape.without_layout()} transpose(result), dimensions={{{order}}}"
        )
        output = "stored"
    if stats is None:
        lines[-1] = lines[-1].replace(f"  {output} =", f"  ROOT {output} =", 1)
    else:  # each row's log-sum-exp: its maximum plus the log of its shifted exponentials' sum
        lines += [
            f"  log_total = f32[{b},{h},{sq}] log(total)",
            f"  stats = f32[{b},{h},{sq}] add(peak, log_total)",
            f"  ROOT outputs = ({result_shape.without_layout()}, f32[{b},{h},{sq}])"
            f" tuple({output}, stats)",
        ]
    return (
        "HloModule library_attention\n\n"
        "maximum {\n  a = f32[] parameter(0)\n  b = f32[] parameter(1)\n"
        "  ROOT m = f32[] maximum(a, b)\n}\n\n"
        "add {\n  a = f32[] parameter(0)\n  b = f32[] parameter(1)\n"
        "  ROOT s = f32[] add(a, b)\n}\n\n"
        "ENTRY attention {\n" + "\n".join(lines) + "\n}\n"
    )


def logits_lines(
    settings: AttentionConfig,
    t: object,
    dims: tuple[int, int, int, int],
    bias: ArrayShape | None,
    bias_parameter: int,
) -> tuple[list[str], str]:
    """HLO lines computing the forward's logits (f32 ``[B, H, Sq, Sk]``) from the scores'
    dot ``dot``: times the scale (``scales``), plus the bias (parameter
    ``bias_parameter``), ``-inf`` where the causal mask removes a score; and the name of
    the last. What the softmax and its statistics read, for every attention call."""
    b, h, sq, sk = dims
    scores = f"f32[{b},{h},{sq},{sk}]"
    lines = [
        f"  scale = f32[] constant({float(np.float32(settings.scale))!r})",
        f"  scales = {scores} broadcast(scale), dimensions={{}}",
        f"  scaled = {scores} multiply(dot, scales)",
    ]
    last = "scaled"
    if bias is not None:
        kept = [i for i, size in enumerate(bias.dims) if size == (b, h, sq, sk)[i]]
        kept_dims = ",".join(str(bias.dims[i]) for i in kept)
        lines += [
            f"  bias = {bias.without_layout()} parameter({bias_parameter})",
            f"  bias_kept = {t}[{kept_dims}] reshape(bias)",
            f"  bias_f32 = f32[{kept_dims}] convert(bias_kept)",
            f"  biases = {scores} broadcast(bias_f32), dimensions={{{','.join(map(str, kept))}}}",
            f"  biased = {scores} add({last}, biases)",
        ]
        last = "biased"
    if settings.causal:
        lines += [
            f"  row = s32[{b},{h},{sq},{sk}] iota(), iota_dimension=2",
            f"  column = s32[{b},{h},{sq},{sk}] iota(), iota_dimension=3",
            f"  keep = pred[{b},{h},{sq},{sk}] compare(row, column), direction=GE",
            "  minus_inf = f32[] constant(-inf)",
            f"  minus_infs = {scores} broadcast(minus_inf), dimensions={{}}",
            f"  masked = {scores} select(keep, {last}, minus_infs)",
        ]
        last = "masked"
    return lines, last


def probabilities_lines(
    settings: AttentionConfig,
    t: object,
    dims: tuple[int, int, int, int],
    bias: ArrayShape | None,
    bias_parameter: int,
) -> list[str]:
    """HLO lines computing the forward's ``probabilities`` (f32 ``[B, H, Sq, Sk]``) from the
    scores' dot ``dot``: the logits (:func:`logits_lines`), the softmax. The one statement
    of what a fused attention's probabilities are, for the forward call and its backward
    pass; needs the computations ``maximum`` and ``add`` and defines ``zero``, and the
    rows' maximum ``peak`` and sum of shifted exponentials ``total`` (the statistics)."""
    b, h, sq, sk = dims
    scores, rows = f"f32[{b},{h},{sq},{sk}]", f"f32[{b},{h},{sq}]"
    lines, last = logits_lines(settings, t, dims, bias, bias_parameter)
    return lines + [
        "  lowest = f32[] constant(-inf)",
        f"  peak = {rows} reduce({last}, lowest), dimensions={{3}}, to_apply=maximum",
        f"  peaks = {scores} broadcast(peak), dimensions={{0,1,2}}",
        f"  shifted = {scores} subtract({last}, peaks)",
        f"  exponentials = {scores} exponential(shifted)",
        "  zero = f32[] constant(0)",
        f"  total = {rows} reduce(exponentials, zero), dimensions={{3}}, to_apply=add",
        f"  totals = {scores} broadcast(total), dimensions={{0,1,2}}",
        f"  probabilities = {scores} divide(exponentials, totals)",
    ]


@functools.lru_cache(maxsize=64)
def _module(text: str) -> Module:
    from heron.hlo.parser import parse_module

    return parse_module(text, "<__heron$attention>")


def as_attention(call: CustomCall) -> Computation:
    """The computation ``call`` stands for (shared between calls of one text: read it, do
    not change it)."""
    if not all(isinstance(shape, ArrayShape) for shape in call.operand_shapes):
        raise call.error("takes array operands (q, k, v, bias) and gives one array or (o, stats)")
    try:
        text = attention_text(call.backend_config, call.operand_shapes, call.result_shape)
        return _module(text).entry
    except (ValueError, HloError) as error:
        raise call.error(str(error)) from None


def host(operands: Sequence[np.ndarray], call: CustomCall) -> Any:
    """The attention, computed by the reference evaluator (the hook's ABI)."""
    from heron.hlo.evaluator import evaluate_computation

    return evaluate_computation(as_attention(call), list(operands))


@hookimpl
def heron_custom_call_specs() -> list[CustomCallSpec]:
    return [
        CustomCallSpec(
            target=TARGET,
            host=host,
            description="scaled dot-product attention a fused-attention library computes"
            " (heron's own custom call)",
        )
    ]
