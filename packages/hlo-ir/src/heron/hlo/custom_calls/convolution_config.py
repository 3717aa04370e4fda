"""The ``__heron$convolution`` call's configuration: its target and ``backend_config``.

Apart from the call's host implementation (:mod:`heron.hlo.custom_calls.convolution`,
which evaluates the convolution), so that a pass writing such calls (``xla-library-calls``,
which the reference evaluator also reads) needs nothing of the evaluator.
"""

from __future__ import annotations

import json

from heron.hlo.attribute_syntax import format_attribute
from heron.hlo.ir import Instruction

__all__ = ["ACTIVATION", "ACTIVATIONS", "KEPT", "TARGET", "activation_of", "backend_config"]

#: The custom_call_target of a library convolution.
TARGET = "__heron$convolution"
#: The convolution attributes the custom call keeps (the rest of a convolution is its
#: operands and result shape, which the custom call has too).
KEPT = (
    "window",
    "dim_labels",
    "feature_group_count",
    "batch_group_count",
    "operand_precision",
    "algorithm",
)
#: The epilogue's entry in ``backend_config`` and the activations it names.
ACTIVATION = "activation"
ACTIVATIONS = ("relu",)


def backend_config(conv: Instruction, activation: str = "") -> str:
    """``conv``'s attributes as the custom call's ``backend_config`` (JSON, HLO syntax),
    with the epilogue's ``activation`` where there is one."""
    config: dict[str, str] = {}
    for name in KEPT:
        value = conv.attributes.get(name)
        if value is not None:
            config[name] = format_attribute(name, value).split("=", 1)[1]
    if activation:
        config[ACTIVATION] = activation
    return json.dumps(config, sort_keys=True)


def activation_of(config: str) -> str:
    """The activation a custom call's ``backend_config`` names (``""``: none)."""
    try:
        attributes = json.loads(config or "{}")
    except json.JSONDecodeError:
        return ""
    return str(attributes.get(ACTIVATION, "")) if isinstance(attributes, dict) else ""
