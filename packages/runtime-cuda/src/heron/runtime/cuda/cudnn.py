"""Convolution and fused attention library calls on CUDA through cuDNN's graph API (the
cuDNN frontend's Python bindings, the ``nvidia-cudnn-frontend`` wheel, over ``libcudnn`` 9).

Fused attention (:mod:`heron.runtime.core.attention`) is one ``sdpa`` graph,
its backward pass (:mod:`heron.runtime.core.attention_backward`) a forward
graph with statistics then an ``sdpa_backward`` graph (the ``sdpa_backward``
graph alone where the call reads a forward call's output and statistics), built by
:mod:`.cudnn_attention`; the rest of this docstring is about convolutions. All
share one handle, one workspace and the plan cache here.

The contract is :mod:`heron.runtime.core.convolution`: a forward convolution
(``conv_fprop``) or its data or weight gradient (``conv_dgrad``,
``conv_wgrad``), whose three tensors
are given in cuDNN's own terms, dimensions ``[N, C,
spatial...]`` / ``[K, C/groups, window...]`` / ``[N, K, out...]`` with an
element stride per dimension, so the call is one graph node and
nothing is copied or transposed here (the compiler chose NHWC and KRSC, the
layouts cuDNN's fastest engines take, as XLA's layout assignment does).

- Types: the tensors' type is the graph's I/O type; the intermediate and
  compute types are FLOAT (XLA's choice). An f32 convolution at default
  precision (``compute "tf32"``) may use TF32 tensor-core engines, as XLA:GPU
  allows; with ``compute ""`` those engines are deselected
  (``deselect_numeric_notes([TENSOR_CORE])``), which is what ``precision=
  HIGHEST`` asks for.
- Groups are implied by the tensors (``C / w's C``), as in cuDNN.
- A forward call's epilogue is part of its graph: ``bias`` (a ``b``
  tensor ``[1, K, 1...]``), ``add`` of the residual ``z`` (``y``'s dimensions,
  its own strides), then ``relu`` after ``conv_fprop``, the
  convolution's result a virtual FLOAT tensor, so cuDNN runs them in one
  kernel (XLA's ``__cudnn$convBiasActivationForward``).
- The graph is built, its engines ranked by heuristic mode A (then FALLBACK)
  and one plan built once per distinct call, when the executable is loaded
  (``offers``), never during a graph capture; the workspace is one device
  allocation, grown at load time to the largest plan's need.

:func:`plan` computes every value handed to cuDNN from the call alone (what
the tests compare with the contract on a stand-in for the bindings).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import attrs

from heron.runtime.core.attention import AttentionCall
from heron.runtime.core.attention_backward import AttentionBackwardCall
from heron.runtime.core.convolution import CONVOLUTION, ConvolutionCall
from heron.runtime.core.device import DeviceError
from heron.runtime.core.gpu_device import Library
from heron.runtime.cuda.cudnn_attention import (
    AttentionBackwardPlan,
    AttentionPlan,
    attention_backward_plan,
    attention_plan,
    backward_tensor_names,
    build_attention,
    build_attention_backward,
)

__all__ = ["DATA_TYPES", "NODES", "ConvPlan", "Cudnn", "plan"]

#: HLO element type -> ``cudnn.data_type`` name.
DATA_TYPES = {"f32": "FLOAT", "f16": "HALF", "bf16": "BFLOAT16"}
#: The contract's mode -> the graph node computing it.
NODES = {"forward": "conv_fprop", "data_gradient": "conv_dgrad", "weight_gradient": "conv_wgrad"}


@attrs.frozen
class ConvPlan:
    """Every value of one ``conv_fprop`` graph for a call (see the module docstring)."""

    io_data_type: str
    compute_data_type: str
    x_dims: tuple[int, ...]
    x_strides: tuple[int, ...]
    w_dims: tuple[int, ...]
    w_strides: tuple[int, ...]
    y_dims: tuple[int, ...]
    y_strides: tuple[int, ...]
    pre_padding: tuple[int, ...]
    post_padding: tuple[int, ...]
    stride: tuple[int, ...]
    dilation: tuple[int, ...]
    #: whether TF32 (f32) or half-precision tensor-core engines may run it
    tensor_cores: bool
    #: ``conv_fprop`` (computes y from x and w), ``conv_dgrad`` (x from y and w) or
    #: ``conv_wgrad`` (w from x and y)
    node: str = "conv_fprop"
    #: a forward call's epilogue: a bias per output feature, then ``relu`` or nothing
    bias: bool = False
    activation: str = ""
    #: the residual's strides (empty: none)
    z_strides: tuple[int, ...] = ()


def plan(call: ConvolutionCall) -> ConvPlan:
    """The cuDNN graph values computing ``call``."""
    if call.operation != CONVOLUTION:
        raise DeviceError(f"cuDNN: no library call {call.operation!r}")
    return ConvPlan(
        io_data_type=DATA_TYPES[call.element_type],
        compute_data_type="FLOAT",
        x_dims=call.x_dims,
        x_strides=call.x_strides,
        w_dims=call.w_dims,
        w_strides=call.w_strides,
        y_dims=call.y_dims,
        y_strides=call.y_strides,
        pre_padding=call.padding_low,
        post_padding=call.padding_high,
        stride=call.stride,
        dilation=call.dilation,
        tensor_cores=call.element_type != "f32" or call.compute == "tf32",
        node=NODES[call.mode],
        bias=call.bias,
        activation=call.activation,
        z_strides=call.z_strides,
    )


class _Prepared:
    """One call's graph, its tensors and its workspace need (kept for the library's life)."""

    def __init__(
        self,
        chosen: ConvPlan | AttentionPlan | AttentionBackwardPlan,
        graph: Any,
        tensors: tuple[Any, ...],
        size: int,
        then: _Prepared | None = None,
        scratch: tuple[int, ...] = (),
    ):
        self.plan = chosen
        self.graph = graph
        self.tensors = tensors
        self.workspace_bytes = max(size, then.workspace_bytes if then else 0)
        #: a second graph run after this one (an attention's backward pass after the
        #: forward that recomputes its output and statistics)
        self.then = then
        #: device addresses the library owns for that (the recomputed o and stats)
        self.scratch = scratch


#: The calls cuDNN computes.
_CALLS = (ConvolutionCall, AttentionCall, AttentionBackwardCall)


class Cudnn(Library):
    """cuDNN on one device: a handle, a workspace, and the graphs built so far.

    ``bindings`` is the frontend's ``cudnn`` module (the tests pass a stand-in);
    ``allocate(nbytes)`` gives a device address for the workspace.
    """

    name = "cudnn"

    def __init__(self, allocate: Callable[[int], int], *, bindings: Any = None) -> None:
        if bindings is None:
            try:
                import cudnn as bindings
            except (ImportError, OSError) as exc:
                raise DeviceError(
                    "cuDNN needs the cuDNN frontend and libcudnn 9"
                    " (pip install 'heron-runtime-cuda[cudnn]'):"
                    f" {exc}"
                ) from exc
        self._cudnn = bindings
        self._allocate = allocate
        self.handle = self._call("create_handle")
        self.workspace = 0
        self.workspace_bytes = 0
        self._prepared: dict[Any, _Prepared | None] = {}
        self._reasons: dict[Any, str] = {}

    def _call(self, name: str, *arguments: Any, **keywords: Any) -> Any:
        try:
            return getattr(self._cudnn, name)(*arguments, **keywords)
        except Exception as exc:  # the frontend raises its own errors (or fails to load)
            raise DeviceError(f"cuDNN: cudnn.{name} failed: {exc}") from exc

    def _build(self, chosen: ConvPlan) -> _Prepared:
        cudnn = self._cudnn
        io = getattr(cudnn.data_type, chosen.io_data_type)
        compute = getattr(cudnn.data_type, chosen.compute_data_type)
        graph = cudnn.pygraph(
            io_data_type=io,
            intermediate_data_type=compute,
            compute_data_type=compute,
            handle=self.handle,
        )
        window = dict(
            pre_padding=list(chosen.pre_padding),
            post_padding=list(chosen.post_padding),
            stride=list(chosen.stride),
            dilation=list(chosen.dilation),
            compute_data_type=compute,
            name="convolution",
        )

        def given(name: str) -> Any:
            return graph.tensor(
                name=name,
                dim=list(getattr(chosen, f"{name}_dims")),
                stride=list(getattr(chosen, f"{name}_strides")),
                data_type=io,
            )

        def computed(tensor: Any, name: str) -> Any:
            tensor.set_output(True).set_data_type(io).set_dim(
                list(getattr(chosen, f"{name}_dims"))
            ).set_stride(list(getattr(chosen, f"{name}_strides")))
            return tensor

        # each node's tensors in the contract's argument order, the computed one last
        if chosen.node == "conv_fprop":
            x, w = given("x"), given("w")
            y = graph.conv_fprop(image=x, weight=w, **window)
            tensors = (x, w)
            if chosen.bias:
                k, spatial = chosen.w_dims[0], len(chosen.w_dims) - 2
                b = graph.tensor(
                    name="b",
                    dim=[1, k, *[1] * spatial],
                    stride=[k, 1, *[k] * spatial],
                    data_type=io,
                )
                y = graph.bias(input=y, bias=b, name="bias")
                tensors = (*tensors, b)
            if chosen.z_strides:
                z = graph.tensor(
                    name="z", dim=list(chosen.y_dims), stride=list(chosen.z_strides), data_type=io
                )
                y = graph.add(a=y, b=z, name="residual")
                tensors = (*tensors, z)
            if chosen.activation == "relu":
                y = graph.relu(input=y, name="relu")
            tensors = (*tensors, computed(y, "y"))
        elif chosen.node == "conv_dgrad":
            y, w = given("y"), given("w")
            tensors = (y, w, computed(graph.conv_dgrad(loss=y, filter=w, **window), "x"))
        else:
            x, y = given("x"), given("y")
            tensors = (x, y, computed(graph.conv_wgrad(image=x, loss=y, **window), "w"))
        graph.validate()
        graph.build_operation_graph()
        graph.create_execution_plans([cudnn.heur_mode.A, cudnn.heur_mode.FALLBACK])
        if not chosen.tensor_cores:
            graph.deselect_numeric_notes([cudnn.numerical_note.TENSOR_CORE])
        graph.check_support()
        graph.build_plans()
        return _Prepared(chosen, graph, tensors, int(graph.get_workspace_size()))

    def _build_attention(self, chosen: AttentionPlan) -> _Prepared:
        graph, tensors = build_attention(self._cudnn, self.handle, chosen)
        return _Prepared(chosen, graph, tensors, int(graph.get_workspace_size()))

    def _build_attention_backward(self, chosen: AttentionBackwardPlan) -> _Prepared:
        first, (backward, backward_tensors) = build_attention_backward(
            self._cudnn, self.handle, chosen
        )
        then = _Prepared(chosen, backward, backward_tensors, int(backward.get_workspace_size()))
        if first is None:  # o and stats are the call's arguments (the forward call's)
            return then
        forward, forward_tensors = first
        scratch = tuple(self._allocate(size) for size in chosen.scratch_bytes())
        size = int(forward.get_workspace_size())
        return _Prepared(chosen, forward, forward_tensors, size, then=then, scratch=scratch)

    def prepare(
        self, call: ConvolutionCall | AttentionCall | AttentionBackwardCall
    ) -> _Prepared | None:
        """The built graph for ``call``, or None where cuDNN has no engine for it."""
        if call in self._prepared:
            return self._prepared[call]
        try:
            prepared: _Prepared | None
            if isinstance(call, AttentionCall):
                prepared = self._build_attention(attention_plan(call))
            elif isinstance(call, AttentionBackwardCall):
                prepared = self._build_attention_backward(attention_backward_plan(call))
            else:
                prepared = self._build(plan(call))
        except Exception as exc:  # noqa: BLE001 - no engine, or a graph cuDNN refuses
            self._reasons[call] = f"cuDNN builds no plan for it ({exc})"
            prepared = None
        if prepared is not None and prepared.workspace_bytes > self.workspace_bytes:
            self.workspace = self._allocate(prepared.workspace_bytes)
            self.workspace_bytes = prepared.workspace_bytes
        self._prepared[call] = prepared
        return prepared

    def offers(self, call: Any) -> bool:
        return isinstance(call, _CALLS) and self.prepare(call) is not None

    def refusal(self, call: Any) -> str:
        if not isinstance(call, _CALLS):
            return f"cuDNN computes convolutions and fused attention only, not {call!r}"
        return self._reasons.get(call, "cuDNN builds no plan for it on this device")

    def run(self, call: Any, addresses: Sequence[int], stream: Any) -> None:
        prepared = self.prepare(call)
        if prepared is None:
            raise DeviceError(f"cuDNN has no plan for {call.describe()}")
        self._call("set_stream", handle=self.handle, stream=int(stream))
        packs = [(prepared, tuple(addresses))]
        if isinstance(prepared.plan, AttentionBackwardPlan):  # each graph's tensors by name
            by_name = dict(zip(call.operand_names, addresses, strict=True))
            forward, backward = backward_tensor_names(prepared.plan)
            if prepared.then is None:  # q, k, v, o, do, stats (the forward call's) -> grads
                packs = [(prepared, tuple(by_name[name] for name in backward))]
            else:  # q, k, v -> o, stats (scratch); then q, k, v, o, do, stats -> grads
                by_name["o"], by_name["stats"] = prepared.scratch
                packs = [
                    (prepared, tuple(by_name[name] for name in forward)),
                    (prepared.then, tuple(by_name[name] for name in backward)),
                ]
        try:
            for graph, given in packs:
                graph.graph.execute(
                    dict(zip(graph.tensors, given, strict=True)),
                    self.workspace,
                    handle=self.handle,
                )
        except Exception as exc:  # the frontend raises its own errors
            raise DeviceError(f"cuDNN: {call.describe()} failed: {exc}") from exc
