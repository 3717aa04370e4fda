"""``__heron$attention_backward``: the gradients of a fused attention a library computes.

A training step differentiates its attention: from the output's gradient
``do`` it computes the gradients of q, k and v through the softmax. cuDNN
computes them in one flash-attention backward graph; heron's compiler finds
the pattern (``heron.compiler.library_attention_backward``) and makes it::

    custom-call(q, k, v, do[, bias]), custom_call_target="__heron$attention_backward",
        backend_config={"scale": 0.125, "causal": true}

with a tuple ``(dq, dk, dv)`` as its result, every tensor in cuDNN's order
``[B, H, S, D]`` (q, do, dq ``[B, H, Sq, .]``; k, v, dk, dv ``[B, Hk, Sk, .]``)
or stored in another one (``"orders"``, per tensor of :data:`ORDERED`, as the
forward call's: :mod:`heron.hlo.custom_calls.attention`).

Where the program also has the forward call of the same attention (a
training step), the backward call reads that call's output and statistics
instead of computing them again (XLA's cuDNN fMHA pair;
``heron.compiler.library_attention_pairing``)::

    custom-call(q, k, v, o, do, stats[, bias]), custom_call_target="__heron$attention_backward",
        backend_config={"scale": 0.125, "causal": true, "stats": true}

``o`` ``[B, H, Sq, Dv]`` (perhaps stored in another order: ``"orders"``'s
``"o"``) and ``stats`` f32 ``[B, H, Sq]`` are the forward call's results.

Its meaning (:func:`attention_backward_text`, the host computation the
reference evaluator runs): the forward's probabilities ``p`` in f32 exactly
as the forward call computes them; ``dp = do . v^T`` summed in f32;
``ds = scale * p * (dp - sum_j p * dp)`` in f32; ``dq = round(ds) . k``,
``dk = round(ds)^T . q`` and ``dv = round(p)^T . do`` summed in f32 and rounded
once to the element type, ``round`` being the element type (the key/value
gradients of grouped-query attention summed over each group's heads). With
``"stats"`` two things are read instead of computed, as cuDNN's
``sdpa_backward`` reads them: ``p = exp(s - stats)`` (``s`` the forward's
logits, ``exp(-inf) = 0`` where masked) and ``sum_j p * dp`` as ``sum_e do *
o`` (per query row, in f32: equal to it where ``o`` is the forward's output,
``o = p . v``, but for ``o``'s rounding). The library call's contract
(``heron.runtime.core.attention_backward``) is the same computation in numpy.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any

import numpy as np

from heron.hlo.custom_calls.attention import (
    ELEMENT_TYPES,
    STATS_TYPE,
    AttentionConfig,
    in_cudnn_order,
    logits_lines,
    probabilities_lines,
)
from heron.hlo.custom_calls.attention_config import BACKWARD_TARGET
from heron.hlo.custom_calls.call import CustomCall
from heron.hlo.custom_calls.hookspecs import CustomCallSpec, hookimpl
from heron.hlo.errors import HloError
from heron.hlo.ir import Computation, Module
from heron.hlo.shapes import ArrayShape, TupleShape

__all__ = [
    "OPERANDS",
    "ORDERED",
    "PAIRED_OPERANDS",
    "TARGET",
    "as_attention_backward",
    "attention_backward_text",
    "heron_custom_call_specs",
    "host",
]

#: The custom_call_target of a fused attention's backward pass.
TARGET = BACKWARD_TARGET
#: The tensors whose stored order ``backend_config`` may give (``o`` only with ``"stats"``).
ORDERED = ("q", "k", "v", "o", "do", "dq", "dk", "dv")
#: The operands, in order (a bias may follow).
OPERANDS = ("q", "k", "v", "do")
#: The operands of a call reading the forward call's output and statistics (``"stats"``).
PAIRED_OPERANDS = ("q", "k", "v", "o", "do", "stats")
#: The results, in the tuple's order.
RESULTS = ("dq", "dk", "dv")
_IDENTITY = (0, 1, 2, 3)


def _inverse(order: Sequence[int]) -> tuple[int, ...]:
    return tuple(list(order).index(d) for d in range(len(order)))


def _check(logical: dict[str, ArrayShape], bias: ArrayShape | None) -> None:
    """The tensors (in cuDNN's order) fit together; ValueError naming the one that does not."""
    stats = logical.pop("stats", None)
    if stats is not None:
        b, h, sq, _ = logical["q"].dims
        if str(stats.element_type) != STATS_TYPE or tuple(stats.dims) != (b, h, sq):
            raise ValueError(f"stats is {stats.without_layout()}, not {STATS_TYPE}[{b},{h},{sq}]")
    types = {str(shape.element_type) for shape in logical.values()}
    if bias is not None:
        types.add(str(bias.element_type))
    if len(types) != 1 or not types <= set(ELEMENT_TYPES):
        raise ValueError(
            f"every tensor of one element type of {', '.join(ELEMENT_TYPES)}, not"
            f" {' x '.join(sorted(types))}"
        )
    if any(len(shape.dims) != 4 for shape in logical.values()):
        raise ValueError("every tensor has 4 dimensions [B, H, S, D]")
    b, h, sq, d = logical["q"].dims
    hk, sk, dv = logical["k"].dims[1], logical["k"].dims[2], logical["v"].dims[3]
    if h % hk:
        raise ValueError(f"q's {h} heads are no multiple of k's {hk} (grouped-query attention)")
    expected = {
        "k": (b, hk, sk, d),
        "v": (b, hk, sk, dv),
        "do": (b, h, sq, dv),
        "dq": (b, h, sq, d),
        "dk": (b, hk, sk, d),
        "dv": (b, hk, sk, dv),
        "o": (b, h, sq, dv),
    }
    for name, dims in expected.items():
        if name in logical and tuple(logical[name].dims) != dims:
            raise ValueError(f"{name} is {list(logical[name].dims)}; q, k and v give {list(dims)}")
    if bias is not None:
        bb, bh, bq, bk = bias.dims if len(bias.dims) == 4 else (0, 0, 0, 0)
        if bb not in (1, b) or bh not in (1, h) or (bq, bk) != (sq, sk):
            raise ValueError(f"bias is {list(bias.dims)}, not [{b} or 1, {h} or 1, {sq}, {sk}]")


def attention_backward_text(
    config: str, operand_shapes: Sequence[ArrayShape], result_shapes: Sequence[ArrayShape]
) -> str:
    """A module whose entry computes the gradients a backward call stands for (HLO text)."""
    settings = AttentionConfig(config, ORDERED)
    orders = settings.orders
    given = PAIRED_OPERANDS if settings.stats else OPERANDS
    if len(operand_shapes) - len(given) not in (0, 1):
        raise ValueError(
            f"takes {', '.join(given)} and an optional bias, not {len(operand_shapes)} operands"
        )
    if not settings.stats and orders["o"] != _IDENTITY:
        raise ValueError("orders o, which only a call with 'stats' reads")
    if len(result_shapes) != 3:
        raise ValueError(f"gives a tuple (dq, dk, dv), not {len(result_shapes)} results")
    stored = {**dict(zip(given, operand_shapes[: len(given)], strict=True))}
    stored.update(zip(RESULTS, result_shapes, strict=True))
    if any(len(shape.dims) != 4 for name, shape in stored.items() if name != "stats"):
        raise ValueError("every tensor has 4 dimensions [B, H, S, D]")
    # an operand in cuDNN's order is transpose(stored, order); a result is stored as
    # transpose(result, order), so its cuDNN order is the stored one through the inverse
    logical = {
        name: shape
        if name == "stats"
        else in_cudnn_order(shape, orders[name] if name in given else _inverse(orders[name]))
        for name, shape in stored.items()
    }
    bias = operand_shapes[len(given)] if len(operand_shapes) > len(given) else None
    _check(dict(logical), bias)
    t = logical["q"].element_type
    b, h, sq, d = logical["q"].dims
    hk, sk, dv = logical["k"].dims[1], logical["k"].dims[2], logical["v"].dims[3]
    groups = h // hk
    scores, rows = f"f32[{b},{h},{sq},{sk}]", f"f32[{b},{h},{sq}]"
    lines = []
    for number, name in enumerate(given):
        shape = stored[name].without_layout()
        if name == "stats" or orders[name] == _IDENTITY:
            lines.append(f"  {name} = {shape} parameter({number})")
            continue
        order = ",".join(map(str, orders[name]))
        lines += [
            f"  {name}_stored = {shape} parameter({number})",
            f"  {name} = {logical[name]} transpose({name}_stored), dimensions={{{order}}}",
        ]
    keys, values = ("k", "v") if groups == 1 else ("k_heads", "v_heads")
    if groups > 1:  # each key/value head serves `groups` query heads: broadcast, then merge
        for name, width in (("k", d), ("v", dv)):
            lines += [
                f"  {name}_groups = {t}[{b},{hk},{groups},{sk},{width}] broadcast({name}),"
                " dimensions={0,1,3,4}",
                f"  {name}_heads = {t}[{b},{h},{sk},{width}] reshape({name}_groups)",
            ]

    def product(name: str, dims: str, lhs: str, rhs: str, contracting: tuple[int, int]) -> str:
        return (
            f"  {name} = f32[{dims}] dot({lhs}, {rhs}), lhs_batch_dims={{0,1}},"
            f" lhs_contracting_dims={{{contracting[0]}}}, rhs_batch_dims={{0,1}},"
            f" rhs_contracting_dims={{{contracting[1]}}}"
        )

    lines += [
        product("dot", f"{b},{h},{sq},{sk}", "q", keys, (3, 3)),
    ]
    if settings.stats:  # p from the forward's statistics, delta from its output
        logits, last = logits_lines(settings, t, (b, h, sq, sk), bias, len(given))
        outputs = f"f32[{b},{h},{sq},{dv}]"
        lines += logits
        lines += [
            f"  statses = {scores} broadcast(stats), dimensions={{0,1,2}}",
            f"  shifted = {scores} subtract({last}, statses)",
            f"  probabilities = {scores} exponential(shifted)",
            "  zero = f32[] constant(0)",
            product("dp", f"{b},{h},{sq},{sk}", "do", values, (3, 3)),
            f"  do_f32 = {outputs} convert(do)",
            f"  o_f32 = {outputs} convert(o)",
            f"  do_o = {outputs} multiply(do_f32, o_f32)",
            f"  delta = {rows} reduce(do_o, zero), dimensions={{3}}, to_apply=add",
        ]
    else:
        lines += probabilities_lines(settings, t, (b, h, sq, sk), bias, len(given))
        lines += [
            product("dp", f"{b},{h},{sq},{sk}", "do", values, (3, 3)),
            f"  p_dp = {scores} multiply(probabilities, dp)",
            f"  delta = {rows} reduce(p_dp, zero), dimensions={{3}}, to_apply=add",
        ]
    lines += [
        f"  deltas = {scores} broadcast(delta), dimensions={{0,1,2}}",
        f"  centred = {scores} subtract(dp, deltas)",
        f"  softmax_grad = {scores} multiply(probabilities, centred)",
        f"  ds = {scores} multiply(softmax_grad, scales)",
        f"  ds_rounded = {t}[{b},{h},{sq},{sk}] convert(ds)",
        f"  p_rounded = {t}[{b},{h},{sq},{sk}] convert(probabilities)",
        product("dq_sum", f"{b},{h},{sq},{d}", "ds_rounded", keys, (3, 2)),
        product("dk_sum", f"{b},{h},{sk},{d}", "ds_rounded", "q", (2, 2)),
        product("dv_sum", f"{b},{h},{sk},{dv}", "p_rounded", "do", (2, 2)),
    ]
    for name, width in (("dk", d), ("dv", dv)):
        if groups > 1:  # a key/value head's gradient sums its group's heads
            lines += [
                f"  {name}_groups = f32[{b},{hk},{groups},{sk},{width}] reshape({name}_sum)",
                f"  {name}_summed = f32[{b},{hk},{sk},{width}] reduce({name}_groups, zero),"
                " dimensions={2}, to_apply=add",
            ]
        else:
            lines.append(f"  {name}_summed = f32[{b},{h},{sk},{width}] copy({name}_sum)")
    lines.append(f"  dq_summed = f32[{b},{h},{sq},{d}] copy(dq_sum)")
    results = []
    for name in RESULTS:
        shape = logical[name]
        lines.append(f"  {name} = {shape} convert({name}_summed)")
        if orders[name] == _IDENTITY:
            results.append(name)
            continue
        order = ",".join(map(str, orders[name]))
        lines.append(
            f"  {name}_stored = {stored[name].without_layout()} transpose({name}),"
            f" dimensions={{{order}}}"
        )
        results.append(f"{name}_stored")
    tuple_shape = ", ".join(str(stored[name].without_layout()) for name in RESULTS)
    lines.append(f"  ROOT gradients = ({tuple_shape}) tuple({', '.join(results)})")
    return (
        "HloModule library_attention_backward\n\n"
        "maximum {\n  a = f32[] parameter(0)\n  b = f32[] parameter(1)\n"
        "  ROOT m = f32[] maximum(a, b)\n}\n\n"
        "add {\n  a = f32[] parameter(0)\n  b = f32[] parameter(1)\n"
        "  ROOT s = f32[] add(a, b)\n}\n\n"
        "ENTRY attention_backward {\n" + "\n".join(lines) + "\n}\n"
    )


@functools.lru_cache(maxsize=64)
def _module(text: str) -> Module:
    from heron.hlo.parser import parse_module

    return parse_module(text, "<__heron$attention_backward>")


def as_attention_backward(call: CustomCall) -> Computation:
    """The computation ``call`` stands for (shared between calls of one text: read it, do
    not change it)."""
    result = call.result_shape
    if (
        not isinstance(result, TupleShape)
        or not all(isinstance(shape, ArrayShape) for shape in result.elements)
        or not all(isinstance(shape, ArrayShape) for shape in call.operand_shapes)
    ):
        raise call.error(
            "takes array operands (q, k, v, do, bias; or q, k, v, o, do, stats, bias) and"
            " gives (dq, dk, dv)"
        )
    try:
        text = attention_backward_text(
            call.backend_config,
            call.operand_shapes,  # type: ignore[arg-type]
            result.elements,  # type: ignore[arg-type]
        )
        return _module(text).entry
    except (ValueError, HloError) as error:
        raise call.error(str(error)) from None


def host(operands: Sequence[np.ndarray], call: CustomCall) -> Any:
    """The gradients, computed by the reference evaluator (the hook's ABI)."""
    from heron.hlo.evaluator import evaluate_computation

    return evaluate_computation(as_attention_backward(call), list(operands))


@hookimpl
def heron_custom_call_specs() -> list[CustomCallSpec]:
    return [
        CustomCallSpec(
            target=TARGET,
            host=host,
            description="the gradients of a scaled dot-product attention a fused-attention"
            " library computes (heron's own custom call)",
        )
    ]
