"""What a ``__heron$attention`` or ``__heron$attention_backward`` call is told: its
targets and its ``backend_config``, apart from the calls' meaning.

:mod:`heron.hlo.custom_calls.attention` and :mod:`.attention_backward` state what the
calls compute, and their host implementations run the reference evaluator; a pass that
only makes such calls (``xla-library-calls``, from cuDNN's) imports this instead, as
the evaluator itself runs that pass on XLA's library calls.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

__all__ = ["BACKWARD_TARGET", "IDENTITY", "TARGET", "backend_config"]

#: The custom_call_target of a fused attention.
TARGET = "__heron$attention"
#: The custom_call_target of a fused attention's backward pass.
BACKWARD_TARGET = "__heron$attention_backward"
#: ``[B, H, S, D]`` as it is: an order ``backend_config`` leaves out.
IDENTITY = (0, 1, 2, 3)


def backend_config(
    scale: float,
    causal: bool,
    orders: dict[str, Sequence[int]] | None = None,
    *,
    stats: bool = False,
) -> str:
    """The calls' ``backend_config`` (JSON); ``orders``: per tensor, which stored dimension
    each of ``[B, H, S, D]`` is, identities left out; ``stats``: the forward gives its
    statistics too, the backward reads them (left out where false, so a call without
    them reads as it always did)."""
    config: dict[str, Any] = {"causal": bool(causal), "scale": float(scale)}
    kept = {name: list(order) for name, order in (orders or {}).items() if tuple(order) != IDENTITY}
    if kept:
        config["orders"] = kept
    if stats:
        config["stats"] = True
    return json.dumps(config, sort_keys=True)
