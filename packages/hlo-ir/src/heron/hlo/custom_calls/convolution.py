"""``__heron$convolution``: a convolution a DNN library computes, as a custom call.

XLA:GPU turns every convolution into a cuDNN custom call
(``__cudnn$convForward``) early in its pipeline, so that nothing after it
lowers, fuses or reorders it. heron does the same for the convolutions the
Target's DNN library takes (``heron.compiler.library_convolution``): the
convolution becomes ``custom-call(lhs, rhs), custom_call_target=
"__heron$convolution"``, its attributes (``window``, ``dim_labels``, the group
counts and the precision) kept as JSON in ``backend_config``, its operands and
result unchanged.

A forward convolution may carry its epilogue, as XLA's
``__cudnn$convBiasActivationForward`` does: after ``lhs`` and ``rhs``, a bias
(rank 1: one value per output feature) and a residual (XLA's side input: the
result's shape), each added after the convolution's result is rounded to its
type, and ``"activation": "relu"`` in ``backend_config`` (then
``maximum(result, 0)``).

The custom call has one meaning wherever it runs: the convolution it stands
for, with its epilogue. This module is its host implementation (a ``heron.custom_calls`` plugin
of hlo-ir itself): it rebuilds the convolution and evaluates it with the
reference evaluator. The evaluator therefore computes the custom call exactly
as it computed the convolution, and an executor on a device without the
library runs it on the host, correct and slow (the runtime reports why).
:func:`convolution_text` is the convolution again, as HLO, for whoever needs
its attributes (the compiler's library call, reports).
"""

from __future__ import annotations

import functools
import json
from collections.abc import Sequence
from typing import Any

import numpy as np

from heron.hlo.custom_calls.call import CustomCall
from heron.hlo.custom_calls.convolution_config import (
    ACTIVATION,
    ACTIVATIONS,
    KEPT,
    TARGET,
    activation_of,
    backend_config,
)
from heron.hlo.custom_calls.hookspecs import CustomCallSpec, hookimpl
from heron.hlo.errors import HloError
from heron.hlo.ir import Instruction, Module
from heron.hlo.shapes import ArrayShape

__all__ = [
    "ACTIVATION",
    "ACTIVATIONS",
    "TARGET",
    "activation_of",
    "as_convolution",
    "backend_config",
    "convolution_text",
    "heron_custom_call_specs",
    "host",
]


def _output_feature(dim_labels: str) -> int:
    """The output's feature dimension in a ``dim_labels`` text (``b01f_01io->b01f``: 3)."""
    return dim_labels.split("->", 1)[-1].index("f")


def convolution_text(
    config: str, operand_shapes: Sequence[ArrayShape], result_shape: ArrayShape
) -> str:
    """A module whose entry is the convolution a custom call stands for (HLO text)."""
    try:
        attributes = json.loads(config or "{}")
    except json.JSONDecodeError as error:
        raise ValueError(f"backend_config is not JSON ({error})") from None
    if not isinstance(attributes, dict) or "dim_labels" not in attributes:
        raise ValueError("backend_config names no dim_labels: it was not written by heron")
    unknown = sorted(set(attributes) - {*KEPT, ACTIVATION})
    if unknown:
        raise ValueError(f"backend_config has unknown attributes {', '.join(unknown)}")
    activation = attributes.get(ACTIVATION, "")
    if activation and activation not in ACTIVATIONS:
        raise ValueError(f"activation {activation!r} (takes {', '.join(ACTIVATIONS)})")
    if not 2 <= len(operand_shapes) <= 4:
        raise ValueError(
            f"{len(operand_shapes)} operands (lhs, rhs, an optional bias and residual)"
        )
    lhs, rhs = operand_shapes[:2]
    extra = list(operand_shapes[2:])
    bias = extra.pop(0) if extra and len(extra[0].dims) == 1 else None
    residual = extra.pop(0) if extra else None
    if extra or (residual is not None and residual.dims != result_shape.dims):
        raise ValueError(
            f"operands after lhs and rhs are a bias [K] and a residual {list(result_shape.dims)}"
        )
    extras = "".join(f", {name}={attributes[name]}" for name in KEPT if name in attributes)
    lines = [
        f"  lhs = {lhs} parameter(0)",
        f"  rhs = {rhs} parameter(1)",
        f"  convolution = {result_shape} convolution(lhs, rhs){extras}",
    ]
    value, number = "convolution", 2
    if bias is not None:
        feature = _output_feature(attributes["dim_labels"])
        lines += [
            f"  bias = {bias} parameter({number})",
            f"  bias_broadcast = {result_shape} broadcast(bias), dimensions={{{feature}}}",
            f"  biased = {result_shape} add(convolution, bias_broadcast)",
        ]
        value, number = "biased", number + 1
    if residual is not None:
        lines += [
            f"  residual = {residual} parameter({number})",
            f"  summed = {result_shape} add({value}, residual)",
        ]
        value = "summed"
    if activation == "relu":
        element = result_shape.element_type
        lines += [
            f"  zero = {element}[] constant(0)",
            f"  zeros = {result_shape} broadcast(zero), dimensions={{}}",
            f"  relu = {result_shape} maximum({value}, zeros)",
        ]
        value = "relu"
    lines[-1] = "  ROOT " + lines[-1].lstrip()
    body = "\n".join(lines)
    return f"HloModule library_convolution\n\nENTRY convolution {{\n{body}\n}}\n"


@functools.lru_cache(maxsize=64)
def _module(text: str) -> Module:
    from heron.hlo.parser import parse_module

    return parse_module(text, "<__heron$convolution>")


def as_convolution(call: CustomCall) -> Instruction:
    """The convolution ``call`` stands for, as an instruction of a module of its own
    whose root is the convolution with its epilogue (shared between calls of one text:
    read it, do not change it)."""
    if not 2 <= len(call.operand_shapes) <= 4 or not isinstance(call.result_shape, ArrayShape):
        raise call.error(
            "takes two array operands (lhs, rhs), a bias and a residual, and gives one array"
        )
    try:
        text = convolution_text(call.backend_config, call.operand_shapes, call.result_shape)
        entry = _module(text).entry
    except (ValueError, HloError) as error:
        raise call.error(str(error)) from None
    return next(inst for inst in entry.instructions if inst.opcode == "convolution")


def host(operands: Sequence[np.ndarray], call: CustomCall) -> Any:
    """The convolution, computed by the reference evaluator (the hook's ABI)."""
    from heron.hlo.evaluator import evaluate_computation

    conv = as_convolution(call)
    assert conv.parent is not None
    return evaluate_computation(conv.parent, list(operands))


@hookimpl
def heron_custom_call_specs() -> list[CustomCallSpec]:
    return [
        CustomCallSpec(
            target=TARGET,
            host=host,
            description="a convolution a DNN library computes (heron's own custom call)",
        )
    ]
