"""A custom-call target, ``heron_example.cumulative_logsumexp``, on the host.

``out[..., i, ...] = log(sum(exp(x[..., j, ...]) for j <= i))`` along one axis
(``backend_config`` ``{"axis": k}``, default the last): the running
log-sum-exp of a scan (an RNN's normaliser, a streaming softmax), computed
stably by ``numpy.logaddexp.accumulate`` in the operand's own floating type.
Registered through this distribution's ``heron.custom_calls`` entry point; the
ABI is heron.hlo.custom_calls.hookspecs.CustomCallSpec's (docs/custom-calls.md).
"""

from __future__ import annotations

import json

import numpy as np

from heron.hlo.custom_calls.hookspecs import CustomCallSpec, hookimpl

TARGET = "heron_example.cumulative_logsumexp"


def _axis(call) -> int:
    """The axis from ``backend_config`` (JSON), checked against the operand's rank."""
    config = json.loads(call.backend_config) if call.backend_config.strip() else {}
    if not isinstance(config, dict) or set(config) - {"axis"}:
        raise ValueError(f'backend_config must be {{"axis": k}}, got {call.backend_config!r}')
    (shape,) = call.operand_shapes
    rank = len(shape.dims)
    axis = config.get("axis", -1)
    if not isinstance(axis, int) or not -rank <= axis < rank:
        raise ValueError(f"axis {axis!r} is not an axis of {shape}")
    return axis % rank


def cumulative_logsumexp(operands, call):
    """The host implementation: one float operand, a result of its shape and type."""
    (x,) = operands
    if x.dtype not in (np.float32, np.float64):
        raise TypeError(f"{TARGET} takes f32 or f64, got {x.dtype}")
    return np.logaddexp.accumulate(x, axis=_axis(call))


@hookimpl
def heron_custom_call_specs():
    return [
        CustomCallSpec(
            target=TARGET,
            host=cumulative_logsumexp,
            description="running log-sum-exp along an axis (numpy.logaddexp.accumulate)",
        )
    ]
