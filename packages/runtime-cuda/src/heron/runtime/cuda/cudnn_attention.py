"""The fused attention calls as cuDNN graphs: the frontend's ``sdpa`` node (flash attention),
and for the backward pass ``sdpa`` with its statistics then ``sdpa_backward``.

The contract is :mod:`heron.runtime.core.attention`: q, k, v (and a bias) in
cuDNN's ``[B, H, S, D]`` order with an element stride per dimension, so the
call is one graph node and nothing is copied here. The graph's I/O type is
the call's half-precision type, its intermediate and compute types FLOAT
(the scores and the softmax in f32, as the contract says); ``generate_stats``
is on only where the call gives the statistics (a training step's forward,
whose backward call reads them: the ``stats`` output, f32 ``[B, H, Sq, 1]``
with the call's strides and 1 for the trailing dimension), off for inference;
the scale is the call's constant, the causal mask cuDNN's top-left aligned one.

:func:`attention_plan` computes every value handed to cuDNN from the call
alone (what the tests compare with the contract on a stand-in for the
bindings); :func:`build_attention` builds the graph on the bindings.

The backward call (:mod:`heron.runtime.core.attention_backward`) gives dq, dk
and dv from q, k, v and do. cuDNN's ``sdpa_backward`` also reads the
forward's output ``o`` and its softmax statistics (``stats``, f32 ``[B, H, Sq,
1]``, the log-sum-exp of each row), which the program does not keep: the call
recomputes them with a forward graph (``generate_stats``) into scratch memory
the library owns, then runs the backward graph (:func:`attention_backward_plan`,
:func:`build_attention_backward`). The recomputed forward costs two of the
seven products; the gradients are the contract's either way. Where the call
reads the forward call's o and statistics (``AttentionBackwardCall.reads_forward``:
the compiler paired it with the forward call of a training step) there is no
forward graph and no scratch: the backward graph reads them from the call's
arguments.
"""

from __future__ import annotations

import math
from typing import Any

import attrs

from heron.runtime.core.attention import AttentionCall
from heron.runtime.core.attention_backward import AttentionBackwardCall
from heron.runtime.core.library_contract import dense_strides

__all__ = [
    "BACKWARD_TENSORS",
    "FORWARD_TENSORS",
    "AttentionBackwardPlan",
    "AttentionPlan",
    "attention_backward_plan",
    "attention_plan",
    "backward_tensor_names",
    "build_attention",
    "build_attention_backward",
]

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

    @property
    def has_stats(self) -> bool:
        return any(name == "stats" for name, _, _ in self.tensors)


def _stats(dims: tuple[int, ...], strides: tuple[int, ...]) -> tuple[str, tuple, tuple]:
    """The statistics ``[B, H, Sq]`` as cuDNN's ``[B, H, Sq, 1]`` tensor."""
    return ("stats", (*dims, 1), (*strides, 1))


def attention_plan(call: AttentionCall) -> AttentionPlan:
    """The cuDNN graph values computing ``call``."""
    return AttentionPlan(
        io_data_type=DATA_TYPES[call.element_type],
        compute_data_type="FLOAT",
        tensors=tuple(
            _stats(call.stats_dims, call.stats_strides)
            if name == "stats"
            else (name, call.dims_of(name), call.strides_of(name))
            for name in call.operand_names
        ),
        scale=call.scale,
        causal=call.causal,
    )


def _sdpa_arguments(chosen: Any, made: dict[str, Any], compute: Any) -> dict[str, Any]:
    """The forward ``sdpa``'s arguments (its tensors, scale, mask, compute type, bias), the
    same for the forward call and for the forward a backward call computes again."""
    arguments = dict(
        name="attention",
        q=made["q"],
        k=made["k"],
        v=made["v"],
        attn_scale=chosen.scale,
        use_causal_mask=chosen.causal,
        compute_data_type=compute,
    )
    if chosen.has_bias:
        arguments["bias"] = made["bias"]
    return arguments


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
        if name not in ("o", "stats")
    }
    options = _sdpa_arguments(chosen, made, compute)
    if chosen.has_stats:  # a training step's forward: its backward call reads them
        made["o"], made["stats"] = graph.sdpa(generate_stats=True, **options)
    else:
        try:
            made["o"], _ = graph.sdpa(generate_stats=False, **options)
        except TypeError:  # a frontend older than generate_stats (1.x before 1.10)
            made["o"], _ = graph.sdpa(is_inference=True, **options)
    for name, dims, strides in chosen.tensors:
        if name in ("o", "stats"):
            made[name].set_output(True).set_data_type(compute if name == "stats" else io)
            made[name].set_dim(list(dims)).set_stride(list(strides))
    graph.validate()
    graph.build_operation_graph()
    graph.create_execution_plans([cudnn.heur_mode.A, cudnn.heur_mode.FALLBACK])
    graph.check_support()
    graph.build_plans()
    return graph, tuple(made[name] for name, _, _ in chosen.tensors)


@attrs.frozen
class AttentionBackwardPlan:
    """Every value of the two graphs of a backward call (see the module docstring)."""

    io_data_type: str
    compute_data_type: str
    #: name -> (dims, strides) of q, k, v, do, dq, dk, dv and o and stats (f32 [B, H,
    #: Sq, 1]): the call's arguments where it reads the forward call's, else scratch
    #: (dense)
    tensors: tuple[tuple[str, tuple[int, ...], tuple[int, ...]], ...]
    scale: float
    causal: bool
    #: o and stats are the call's arguments (no forward graph, no scratch)
    reads_forward: bool = False

    def of(self, name: str) -> tuple[tuple[int, ...], tuple[int, ...]]:
        for found, dims, strides in self.tensors:
            if found == name:
                return dims, strides
        raise KeyError(name)

    @property
    def has_bias(self) -> bool:
        return any(name == "bias" for name, _, _ in self.tensors)

    def scratch_bytes(self) -> tuple[int, ...]:
        """The bytes of the recomputed forward's output and of its statistics (none where
        the call reads the forward call's)."""
        if self.reads_forward:
            return ()
        width = 2  # the half-precision I/O type
        o_dims, _ = self.of("o")
        stats_dims, _ = self.of("stats")
        return math.prod(o_dims) * width, math.prod(stats_dims) * 4


def attention_backward_plan(call: AttentionBackwardCall) -> AttentionBackwardPlan:
    """The cuDNN graph values computing ``call``."""
    b, h, sq, _ = call.q_dims
    if call.reads_forward:
        named = [
            _stats(call.stats_dims, call.stats_strides)
            if name == "stats"
            else (name, call.dims_of(name), call.strides_of(name))
            for name in call.operand_names
        ]
    else:
        o_dims = call.do_dims
        stats_dims = (b, h, sq, 1)
        named = [(name, call.dims_of(name), call.strides_of(name)) for name in call.operand_names]
        named += [
            ("o", o_dims, dense_strides(o_dims, (0, 1, 2, 3))),
            ("stats", stats_dims, dense_strides(stats_dims, (0, 1, 2, 3))),
        ]
    return AttentionBackwardPlan(
        io_data_type=DATA_TYPES[call.element_type],
        compute_data_type="FLOAT",
        tensors=tuple(named),
        scale=call.scale,
        causal=call.causal,
        reads_forward=call.reads_forward,
    )


def _built(cudnn: Any, graph: Any) -> Any:
    graph.validate()
    graph.build_operation_graph()
    graph.create_execution_plans([cudnn.heur_mode.A, cudnn.heur_mode.FALLBACK])
    graph.check_support()
    graph.build_plans()
    return graph


#: The tensors of the backward call's forward graph and of its backward graph, in order
#: (a bias, where the call has one, after v in the first and after stats in the second).
FORWARD_TENSORS = ("q", "k", "v", "o", "stats")
BACKWARD_TENSORS = ("q", "k", "v", "o", "do", "stats", "dq", "dk", "dv")


def backward_tensor_names(chosen: AttentionBackwardPlan) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """The names of :func:`build_attention_backward`'s two graphs' tensors, in order (no
    forward graph's, ``()``, where the call reads the forward call's o and stats)."""
    forward, backward = FORWARD_TENSORS, BACKWARD_TENSORS
    if chosen.has_bias:
        forward = ("q", "k", "v", "bias", "o", "stats")
        backward = (*BACKWARD_TENSORS[:6], "bias", "dq", "dk", "dv")
    return (() if chosen.reads_forward else forward), backward


def build_attention_backward(
    cudnn: Any, handle: Any, chosen: AttentionBackwardPlan
) -> tuple[tuple[Any, tuple[Any, ...]] | None, tuple[Any, tuple[Any, ...]]]:
    """The forward graph (q, k, v -> o, stats; None where the call reads the forward
    call's) and the backward graph (q, k, v, o, do, stats -> dq, dk, dv) of ``chosen`` on
    the bindings ``cudnn``, each with its tensors in :func:`backward_tensor_names`'s order
    (a bias read by both)."""
    io = getattr(cudnn.data_type, chosen.io_data_type)
    compute = getattr(cudnn.data_type, chosen.compute_data_type)

    def graph_of() -> Any:
        return cudnn.pygraph(
            io_data_type=io,
            intermediate_data_type=compute,
            compute_data_type=compute,
            handle=handle,
        )

    def given(graph: Any, name: str, data_type: Any = io) -> Any:
        dims, strides = chosen.of(name)
        return graph.tensor(name=name, dim=list(dims), stride=list(strides), data_type=data_type)

    def computed(tensor: Any, name: str, data_type: Any = io) -> Any:
        dims, strides = chosen.of(name)
        tensor.set_output(True).set_data_type(data_type).set_dim(list(dims))
        tensor.set_stride(list(strides))
        return tensor

    forward_names, backward_names = backward_tensor_names(chosen)
    first = None
    if forward_names:  # o and stats recomputed into scratch
        forward = graph_of()
        made = {
            name: given(forward, name) for name in ("q", "k", "v", "bias") if name in forward_names
        }
        made["o"], made["stats"] = forward.sdpa(
            generate_stats=True, **_sdpa_arguments(chosen, made, compute)
        )
        computed(made["o"], "o")
        computed(made["stats"], "stats", compute)
        first = (_built(cudnn, forward), tuple(made[name] for name in forward_names))
    backward = graph_of()
    inputs = {
        name: given(backward, name)
        for name in ("q", "k", "v", "o", "do", "bias")
        if name in backward_names
    }
    inputs["stats"] = given(backward, "stats", compute)
    extra = {"bias": inputs["bias"]} if chosen.has_bias else {}
    inputs["dq"], inputs["dk"], inputs["dv"] = backward.sdpa_backward(
        name="attention_backward",
        q=inputs["q"],
        k=inputs["k"],
        v=inputs["v"],
        o=inputs["o"],
        dO=inputs["do"],
        stats=inputs["stats"],
        attn_scale=chosen.scale,
        use_causal_mask=chosen.causal,
        compute_data_type=compute,
        **extra,
    )
    for name in ("dq", "dk", "dv"):
        computed(inputs[name], name)
    backward_tensors = tuple(inputs[name] for name in backward_names)
    return first, (_built(cudnn, backward), backward_tensors)
