"""The fused attention call as one cuDNN graph: the frontend's ``sdpa`` node (flash attention).

The contract is :mod:`heron.runtime.core.attention`: q, k, v (and a bias) in
cuDNN's ``[B, H, S, D]`` order with an element stride per dimension, so the
call is one graph node and nothing is copied here. The graph's I/O type is
the call's half-precision type, its intermediate and compute types FLOAT
(the scores and the softmax in f32, as the contract says); ``generate_stats``
is off (inference: no backward pass reads the softmax's statistics), the
scale is the call's constant, the causal mask cuDNN's top-left aligned one.

:func:`attention_plan` computes every value handed to cuDNN from the call
alone (what the tests compare with the contract on a stand-in for the
bindings); :func:`build_attention` builds the graph on the bindings.
"""

from __future__ import annotations

from typing import Any

import attrs

from heron.runtime.core.attention import AttentionCall

__all__ = ["AttentionPlan", "attention_plan", "build_attention"]

#: HLO element type -> ``cudnn.data_type`` name (the types the contract takes).
DATA_TYPES = {"f16": "HALF", "bf16": "BFLOAT16"}


@attrs.frozen
class AttentionPlan:
    """Every value of one ``sdpa`` graph for a call (see the module docstring)."""

    io_data_type: str
    compute_data_type: str
    #: name -> (dims, strides) of q, k, v, the bias (where the call has one) and o
    tensors: tuple[tuple[str, tuple[int, ...], tuple[int, ...]], ...]
    scale: float
    causal: bool

    @property
    def has_bias(self) -> bool:
        return any(name == "bias" for name, _, _ in self.tensors)


def attention_plan(call: AttentionCall) -> AttentionPlan:
    """The cuDNN graph values computing ``call``."""
    return AttentionPlan(
        io_data_type=DATA_TYPES[call.element_type],
        compute_data_type="FLOAT",
        tensors=tuple(
            (name, call.dims_of(name), call.strides_of(name)) for name in call.operand_names
        ),
        scale=call.scale,
        causal=call.causal,
    )


def build_attention(cudnn: Any, handle: Any, chosen: AttentionPlan) -> tuple[Any, tuple[Any, ...]]:
    """The ``sdpa`` graph of ``chosen`` on the bindings ``cudnn`` (validated, its
    operation graph built, engines ranked by heuristic mode A then FALLBACK), and its
    tensors in the contract's argument order."""
    io = getattr(cudnn.data_type, chosen.io_data_type)
    compute = getattr(cudnn.data_type, chosen.compute_data_type)
    graph = cudnn.pygraph(
        io_data_type=io, intermediate_data_type=compute, compute_data_type=compute, handle=handle
    )
    made = {
        name: graph.tensor(name=name, dim=list(dims), stride=list(strides), data_type=io)
        for name, dims, strides in chosen.tensors
        if name != "o"
    }
    options = dict(
        name="attention",
        q=made["q"],
        k=made["k"],
        v=made["v"],
        attn_scale=chosen.scale,
        use_causal_mask=chosen.causal,
        compute_data_type=compute,
    )
    if chosen.has_bias:
        options["bias"] = made["bias"]
    try:
        out, _ = graph.sdpa(generate_stats=False, **options)
    except TypeError:  # a frontend older than generate_stats (1.x before 1.10)
        out, _ = graph.sdpa(is_inference=True, **options)
    _, o_dims, o_strides = chosen.tensors[-1]
    out.set_output(True).set_data_type(io).set_dim(list(o_dims)).set_stride(list(o_strides))
    graph.validate()
    graph.build_operation_graph()
    graph.create_execution_plans([cudnn.heur_mode.A, cudnn.heur_mode.FALLBACK])
    graph.check_support()
    graph.build_plans()
    tensors = tuple(made[name] for name, _, _ in chosen.tensors if name != "o") + (out,)
    return graph, tensors
