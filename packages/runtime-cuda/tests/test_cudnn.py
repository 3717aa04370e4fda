"""The cuDNN convolution and attention library calls against a stand-in for the cuDNN frontend.

The stand-in (:class:`FakeCudnn`) records every graph the wrapper builds
(tensors, their dimensions and strides, the ``conv_fprop`` node's padding,
stride and dilation, the I/O and compute types, the heuristic modes, the
numerical notes deselected, the workspace and stream of each execution) and
computes, from exactly those recorded values, what cuDNN computes; so each
test checks the recorded graph against the contract
(heron.runtime.core.convolution) and the numbers against
``ConvolutionCall.reference``; the same for the attention calls' ``sdpa``
graphs (heron.runtime.core.attention, ``AttentionCall.reference``).
"""

from __future__ import annotations

import ctypes
import types

import attrs
import numpy as np
import pytest

from heron.hlo.element_types import ElementType
from heron.runtime.core.attention import AttentionCall
from heron.runtime.core.attention_backward import AttentionBackwardCall
from heron.runtime.core.convolution import ConvolutionCall, dense_strides
from heron.runtime.core.device import DeviceError
from heron.runtime.core.library_contract import read_strided, written_strided
from heron.runtime.core.thunks import ThunkError
from heron.runtime.cuda.cudnn import NODES, Cudnn, plan

NHWC, KRSC = (0, 2, 3, 1), (0, 2, 3, 1)
NDHWC = (0, 2, 3, 4, 1)


def _call(x, w, y, order=NHWC, **fields) -> ConvolutionCall:
    spatial = len(x) - 2
    defaults = {
        "padding_low": (0,) * spatial,
        "padding_high": (0,) * spatial,
        "stride": (1,) * spatial,
        "dilation": (1,) * spatial,
    }
    return ConvolutionCall(
        x_dims=x,
        x_strides=dense_strides(x, order),
        w_dims=w,
        w_strides=dense_strides(w, order),
        y_dims=y,
        y_strides=dense_strides(y, order),
        **(defaults | fields),
    )


CALLS = {
    "resnet_3x3_tf32": _call(
        (2, 8, 9, 9),
        (16, 8, 3, 3),
        (2, 16, 9, 9),
        padding_low=(1, 1),
        padding_high=(1, 1),
        compute="tf32",
    ),
    "strided_dilated_asymmetric": _call(
        (1, 4, 12, 10),
        (6, 4, 3, 2),
        (1, 6, 5, 5),
        padding_low=(0, 1),
        padding_high=(1, 0),
        stride=(2, 2),
        dilation=(2, 1),
        compute="tf32",
    ),
    "depthwise_f16": _call(
        (1, 6, 8, 8),
        (6, 1, 3, 3),
        (1, 6, 8, 8),
        padding_low=(1, 1),
        padding_high=(1, 1),
        groups=6,
        element_type="f16",
    ),
    "conv1d_bf16": _call((2, 4, 1, 16), (8, 4, 1, 3), (2, 8, 1, 14), element_type="bf16"),
    "conv3d_highest": _call((1, 2, 5, 6, 7), (3, 2, 2, 2, 2), (1, 3, 4, 5, 6), order=NDHWC),
    "strided_data_gradient": _call(
        (2, 3, 9, 9),
        (4, 3, 3, 3),
        (2, 4, 5, 5),
        padding_low=(1, 1),
        padding_high=(1, 1),
        stride=(2, 2),
        compute="tf32",
        mode="data_gradient",
    ),
    "bias_relu_tf32": _call(
        (2, 8, 9, 9),
        (16, 8, 3, 3),
        (2, 16, 9, 9),
        padding_low=(1, 1),
        padding_high=(1, 1),
        compute="tf32",
        bias=True,
        activation="relu",
    ),
    "bias_residual_relu_nchw_z": _call(
        (2, 8, 9, 9),
        (16, 8, 3, 3),
        (2, 16, 9, 9),
        padding_low=(1, 1),
        padding_high=(1, 1),
        compute="tf32",
        bias=True,
        activation="relu",
        z_strides=dense_strides((2, 16, 9, 9), (0, 1, 2, 3)),  # the residual NCHW, y NHWC
    ),
    "grouped_bias_bf16": _call(
        (1, 6, 8, 8), (6, 2, 3, 3), (1, 6, 6, 6), groups=3, element_type="bf16", bias=True
    ),
    "relu_f16": _call(
        (2, 4, 1, 16), (8, 4, 1, 3), (2, 8, 1, 14), element_type="f16", activation="relu"
    ),
    "strided_weight_gradient": _call(
        (2, 3, 9, 9),
        (4, 3, 3, 3),
        (2, 4, 5, 5),
        padding_low=(1, 1),
        padding_high=(1, 1),
        stride=(2, 2),
        compute="tf32",
        mode="weight_gradient",
    ),
    "weight_gradient_bf16_asymmetric": _call(
        (3, 8, 7, 6),
        (16, 8, 3, 2),
        (3, 16, 3, 6),
        padding_low=(0, 1),
        padding_high=(1, 0),
        stride=(2, 1),
        element_type="bf16",
        mode="weight_gradient",
    ),
}


class _Tensor:
    def __init__(self, name: str, dim, stride, data_type) -> None:
        self.name, self.dim, self.stride, self.data_type = name, list(dim), list(stride), data_type
        self.output = False

    def set_output(self, value: bool) -> _Tensor:
        self.output = value
        return self

    def set_data_type(self, value) -> _Tensor:
        self.data_type = value
        return self

    def set_dim(self, value) -> _Tensor:
        self.dim = list(value)
        return self

    def set_stride(self, value) -> _Tensor:
        self.stride = list(value)
        return self


class FakeCudnn:
    """The parts of the ``cudnn`` module heron uses, recording and computing."""

    data_type = types.SimpleNamespace(FLOAT="FLOAT", HALF="HALF", BFLOAT16="BFLOAT16")
    heur_mode = types.SimpleNamespace(A="A", FALLBACK="FALLBACK")
    numerical_note = types.SimpleNamespace(TENSOR_CORE="TENSOR_CORE")

    def __init__(self, workspace: int = 4096, refuse: bool = False) -> None:
        self.graphs: list[dict] = []
        self.executions: list[dict] = []
        self.streams: list[int] = []
        #: per sdpa_backward execution, the addresses it read o and stats from
        self.backward_reads: list[dict] = []
        self.workspace = workspace
        self.refuse = refuse
        fake = self

        class pygraph:  # noqa: N801 - the frontend's name
            def __init__(self, **keywords) -> None:
                self.record = {"graph": keywords, "tensors": {}, "steps": []}
                fake.graphs.append(self.record)

            def tensor(self, name, dim, stride, data_type):
                made = _Tensor(name, dim, stride, data_type)
                self.record["tensors"][name] = made
                return made

            def _convolution(self, node, given, computed, keywords):
                """One convolution node: reads the tensors named ``given``, makes ``computed``."""
                self.record["conv"] = keywords | {"node": node}
                tensors = self.record["tensors"]
                out = _Tensor(computed, [], [], None)
                tensors[computed] = out
                return given, out

            def conv_fprop(self, image, weight, **keywords):
                given, out = self._convolution("conv_fprop", "xw", "y", keywords)
                assert (image, weight) == tuple(self.record["tensors"][n] for n in given)
                return out

            def conv_dgrad(self, loss, filter, **keywords):  # noqa: A002 - the frontend's name
                given, out = self._convolution("conv_dgrad", "yw", "x", keywords)
                assert (loss, filter) == tuple(self.record["tensors"][n] for n in given)
                return out

            def conv_wgrad(self, image, loss, **keywords):
                given, out = self._convolution("conv_wgrad", "xy", "w", keywords)
                assert (image, loss) == tuple(self.record["tensors"][n] for n in given)
                return out

            def bias(self, input, bias, name):  # noqa: A002 - the frontend's names
                tensors = self.record["tensors"]
                assert (input, bias) == (tensors["y"], tensors["b"])
                assert bias.dim[1] == tensors["w"].dim[0] and bias.dim[0] == 1
                return self._epilogue("bias")

            def add(self, a, b, name):
                tensors = self.record["tensors"]
                assert (a, b) == (tensors["y"], tensors["z"])
                assert b.dim[:2] == [tensors["x"].dim[0], tensors["w"].dim[0]]  # [N, K, out...]
                return self._epilogue("residual")

            def relu(self, input, name):  # noqa: A002 - the frontend's name
                assert input is self.record["tensors"]["y"]
                return self._epilogue("relu")

            def _epilogue(self, step):
                self.record.setdefault("epilogue", []).append(step)
                assert not self.record["tensors"]["y"].output  # the convolution's is virtual
                out = _Tensor("y", [], [], None)
                self.record["tensors"]["y"] = out
                return out

            def sdpa(self, q, k, v, **keywords):
                self.record["sdpa"] = keywords
                tensors = self.record["tensors"]
                assert (q, k, v) == (tensors["q"], tensors["k"], tensors["v"])
                assert keywords.get("bias") is tensors.get("bias")
                out = _Tensor("o", [], [], None)
                tensors["o"] = out
                stats = None
                if keywords.get("generate_stats"):
                    stats = tensors["stats"] = _Tensor("stats", [], [], None)
                return out, stats

            def sdpa_backward(self, q, k, v, o, dO, stats, **keywords):  # noqa: N803
                self.record["sdpa_backward"] = keywords
                tensors = self.record["tensors"]
                assert keywords.get("bias") is tensors.get("bias")
                given = ("q", "k", "v", "o", "do", "stats")
                assert (q, k, v, o, dO, stats) == tuple(tensors[n] for n in given)
                made = []
                for name in ("dq", "dk", "dv"):
                    tensors[name] = _Tensor(name, [], [], None)
                    made.append(tensors[name])
                return tuple(made)

            def __getattr__(self, step):
                def call(*arguments):
                    self.record["steps"].append((step, arguments))
                    if step == "check_support" and fake.refuse:
                        raise RuntimeError("No valid engine configs")

                return call

            def get_workspace_size(self):
                return fake.workspace

            def execute(self, pack, workspace, handle):
                fake.executions.append({"pack": pack, "workspace": workspace, "handle": handle})
                fake.compute(self.record, pack)

        self.pygraph = pygraph

    def create_handle(self):
        return 0xC0DE

    def set_stream(self, handle, stream):
        self.streams.append(stream)

    def compute(self, record: dict, pack: dict) -> None:
        """cuDNN's convolution or attention from the recorded graph, on host memory."""
        names = {"FLOAT": "f32", "HALF": "f16", "BFLOAT16": "bf16"}
        element = names[record["graph"]["io_data_type"]]
        if "sdpa_backward" in record:
            self.attention_backward(record, pack, element)
            return
        if "sdpa" in record:
            self.attention(record, pack, element)
            return
        tensors, conv = record["tensors"], record["conv"]
        call = ConvolutionCall(
            x_dims=tensors["x"].dim,
            x_strides=tensors["x"].stride,
            w_dims=tensors["w"].dim,
            w_strides=tensors["w"].stride,
            y_dims=tensors["y"].dim,
            y_strides=tensors["y"].stride,
            padding_low=conv["pre_padding"],
            padding_high=conv["post_padding"],
            stride=conv["stride"],
            dilation=conv["dilation"],
            groups=tensors["x"].dim[1] // tensors["w"].dim[1],
            element_type=element,
            compute="tf32" if element == "f32" and not record["deselected"] else "",
            mode={node: mode for mode, node in NODES.items()}[conv["node"]],
            bias="bias" in record.get("epilogue", ()),
            z_strides=tensors["z"].stride if "residual" in record.get("epilogue", ()) else (),
            activation="relu" if "relu" in record.get("epilogue", ()) else "",
        )
        arrays = []
        for size, tensor in zip(call.byte_sizes(), call.operand_names, strict=True):
            arrays.append(
                np.ctypeslib.as_array((ctypes.c_uint8 * size).from_address(pack[tensors[tensor]]))
            )
        arrays[-1][...] = call.reference(arrays)

    def attention(self, record: dict, pack: dict, element: str) -> None:
        """cuDNN's flash attention from the recorded ``sdpa`` graph, on host memory (and
        the softmax's statistics, where asked: each row's log-sum-exp)."""
        tensors, sdpa = record["tensors"], record["sdpa"]
        if sdpa["generate_stats"]:
            self.statistics(record, pack, element)
        described = {}
        for name in ("q", "k", "v", "bias", "o"):
            if name in tensors:
                described |= {f"{name}_dims": tensors[name].dim}
                described |= {f"{name}_strides": tensors[name].stride}
        call = AttentionCall(
            **described,
            scale=sdpa["attn_scale"],
            causal=sdpa["use_causal_mask"],
            element_type=element,
        )
        arrays = [
            np.ctypeslib.as_array((ctypes.c_uint8 * size).from_address(pack[tensors[name]]))
            for size, name in zip(call.byte_sizes(), call.operand_names, strict=True)
        ]
        arrays[-1][...] = call.reference(arrays)

    @staticmethod
    def _array(pack: dict, tensor: _Tensor, dtype) -> np.ndarray:
        count = int(np.prod(tensor.dim))
        size = count * np.dtype(dtype).itemsize
        raw = np.ctypeslib.as_array((ctypes.c_uint8 * size).from_address(pack[tensor]))
        return raw

    def statistics(self, record: dict, pack: dict, element: str) -> None:
        """The recorded forward's statistics: log(sum(exp(s))) of each row of scores."""
        tensors, sdpa = record["tensors"], record["sdpa"]
        dtype = ElementType(element).numpy_dtype

        def read(name):
            tensor = tensors[name]
            raw = self._array(pack, tensor, dtype)
            return np.array(read_strided(raw, tensor.dim, tensor.stride, dtype), np.float32)

        q, k = read("q"), read("k")
        k = np.repeat(k, q.shape[1] // k.shape[1], axis=1)
        scores = np.einsum("bhid,bhjd->bhij", q, k) * np.float32(sdpa["attn_scale"])
        if "bias" in tensors:
            scores = scores + read("bias")
        if sdpa["use_causal_mask"]:
            above = np.arange(scores.shape[3])[None, :] > np.arange(scores.shape[2])[:, None]
            scores = np.where(above, -np.inf, scores)
        peak = scores.max(axis=-1, keepdims=True)
        lse = peak + np.log(np.exp(scores - peak).sum(axis=-1, keepdims=True))
        stats = tensors["stats"]
        assert stats.data_type == "FLOAT" and stats.output
        assert stats.dim == [*q.shape[:3], 1]
        self._array(pack, stats, np.float32)[...] = written_strided(
            lse, stats.dim, stats.stride, np.float32
        )

    def attention_backward(self, record: dict, pack: dict, element: str) -> None:
        """cuDNN's flash attention backward from the recorded ``sdpa_backward`` graph, on
        host memory: as cuDNN, from the o and statistics where the graph reads them (the
        contract of a call reading the forward call's: ``reads_forward``)."""
        tensors, options = record["tensors"], record["sdpa_backward"]
        described = {"q_dims": tensors["q"].dim, "k_dims": tensors["k"].dim}
        described["v_dims"] = tensors["v"].dim
        for name in ("q", "k", "v", "do", "dq", "dk", "dv", "o"):
            described[f"{name}_strides"] = tensors[name].stride
        stats = tensors["stats"]
        assert stats.data_type == "FLOAT" and not stats.output
        assert stats.dim == [*tensors["q"].dim[:3], 1]
        described["stats_strides"] = stats.stride[:3]
        if "bias" in tensors:
            described |= {"bias_dims": tensors["bias"].dim, "bias_strides": tensors["bias"].stride}
        call = AttentionBackwardCall(
            **described,
            scale=options["attn_scale"],
            causal=options["use_causal_mask"],
            element_type=element,
        )
        dtype = ElementType(element).numpy_dtype
        arrays = [
            self._array(pack, tensors[name], np.float32 if name == "stats" else dtype)
            for name in call.operand_names
        ]
        self.backward_reads.append({name: pack[tensors[name]] for name in ("o", "stats")})
        for array, result in zip(arrays[-3:], call.reference(arrays), strict=True):
            array[...] = result


@pytest.fixture
def fake(monkeypatch):
    stand_in = FakeCudnn()
    original = stand_in.pygraph

    def recording(**keywords):
        graph = original(**keywords)
        graph.record["deselected"] = False
        steps = graph.record["steps"]

        def deselect(notes):
            steps.append(("deselect_numeric_notes", (notes,)))
            graph.record["deselected"] = True

        graph.deselect_numeric_notes = deselect
        return graph

    stand_in.pygraph = recording
    return stand_in


def _operands(call: ConvolutionCall, rng) -> list[np.ndarray]:
    dtype = ElementType(call.element_type).numpy_dtype
    result = []
    for count in call.element_counts()[:-1]:
        result.append(rng.standard_normal(count).astype(dtype).view(np.uint8))
    result.append(np.zeros(call.byte_sizes()[-1], np.uint8))
    return result


@pytest.mark.parametrize("name", sorted(CALLS))
def test_each_call_is_one_graph_node_computing_the_contract(fake, name):
    call = CALLS[name]
    allocated = []
    library = Cudnn(lambda n: allocated.append(n) or 0x7000, bindings=fake)
    assert library.offers(call)
    assert library.offers(call)  # built once per call
    (graph,) = fake.graphs
    chosen = plan(call)
    types_ = {"f32": "FLOAT", "f16": "HALF", "bf16": "BFLOAT16"}
    assert graph["graph"] == {
        "io_data_type": types_[call.element_type],
        "intermediate_data_type": "FLOAT",
        "compute_data_type": "FLOAT",
        "handle": 0xC0DE,
    }
    tensors = graph["tensors"]
    for tensor in ("x", "w", "y"):
        assert tensors[tensor].dim == list(getattr(call, f"{tensor}_dims"))
        assert tensors[tensor].stride == list(getattr(call, f"{tensor}_strides"))
        assert tensors[tensor].data_type == types_[call.element_type]
    conv = graph["conv"]
    assert conv["node"] == chosen.node == NODES[call.mode]
    assert tensors[call.operand_names[-1]].output
    # the epilogue in the same graph, after the convolution
    expected_epilogue = ["bias"] * call.bias + ["residual"] * call.residual
    expected_epilogue += [call.activation] * bool(call.activation)
    assert graph.get("epilogue", []) == expected_epilogue
    if call.bias:
        k = call.w_dims[0]
        assert tensors["b"].dim == [1, k] + [1] * (len(call.w_dims) - 2)
    assert (conv["pre_padding"], conv["post_padding"]) == (
        list(call.padding_low),
        list(call.padding_high),
    )
    assert (conv["stride"], conv["dilation"]) == (list(call.stride), list(call.dilation))
    steps = [step for step, _ in graph["steps"]]
    assert steps[:3] == ["validate", "build_operation_graph", "create_execution_plans"]
    assert steps[-2:] == ["check_support", "build_plans"]
    # TF32 (and half) tensor-core engines only where the call allows them
    assert ("deselect_numeric_notes" in steps) == (not chosen.tensor_cores)
    assert chosen.tensor_cores == (call.element_type != "f32" or call.compute == "tf32")
    assert allocated == [4096] and library.workspace == 0x7000
    operands = _operands(call, np.random.default_rng(5))
    expected = call.reference(operands)
    library.run(call, [o.ctypes.data for o in operands], 0x5001)
    assert fake.streams == [0x5001]
    (execution,) = fake.executions
    assert (execution["workspace"], execution["handle"]) == (0x7000, 0xC0DE)
    np.testing.assert_array_equal(operands[-1], expected)
    if call.activation == "relu":
        assert operands[-1].view(ElementType(call.element_type).numpy_dtype).min() == 0


def test_a_graph_cudnn_refuses_is_not_offered_and_says_why(fake):
    fake.refuse = True
    library = Cudnn(lambda n: 0x7000, bindings=fake)
    call = CALLS["resnet_3x3_tf32"]
    assert not library.offers(call)
    assert "No valid engine configs" in library.refusal(call)
    with pytest.raises(DeviceError, match="no plan"):
        library.run(call, [0, 0, 0], 0)


def test_the_workspace_grows_to_the_largest_plan(fake):
    allocated = []
    library = Cudnn(lambda n: allocated.append(n) or 0x7000 + len(allocated), bindings=fake)
    for size, call in zip((1024, 8192, 2048), sorted(CALLS.values(), key=str), strict=False):
        fake.workspace = size
        assert library.offers(call)
    assert allocated == [1024, 8192] and library.workspace_bytes == 8192


def test_without_the_frontend_the_device_says_what_to_install(monkeypatch):
    import builtins

    real_import = builtins.__import__

    def no_cudnn(name, *arguments, **keywords):
        if name == "cudnn":
            raise ImportError("No module named 'cudnn'")
        return real_import(name, *arguments, **keywords)

    monkeypatch.setattr(builtins, "__import__", no_cudnn)
    with pytest.raises(DeviceError, match=r"heron-runtime-cuda\[cudnn\]"):
        Cudnn(lambda n: 0)


def _attention(
    b, h, sq, sk, d, *, bias=None, causal=False, element_type="bf16", bshd=False, kv_heads=None
):
    """An attention call over dense tensors: [B, H, S, D] row-major, or stored as
    [B, S, H, D] (``bshd``: what a program's [batch, sequence, heads, dim] arrays are);
    ``kv_heads`` fewer key/value heads than query heads (grouped-query attention)."""
    order = (0, 2, 1, 3) if bshd else (0, 1, 2, 3)
    hk = kv_heads or h
    fields = {}
    for name, dims in (("q", (b, h, sq, d)), ("k", (b, hk, sk, d)), ("v", (b, hk, sk, d))):
        fields |= {f"{name}_dims": dims, f"{name}_strides": dense_strides(dims, order)}
    fields |= {"o_dims": (b, h, sq, d), "o_strides": dense_strides((b, h, sq, d), order)}
    if bias is not None:
        fields |= {"bias_dims": bias, "bias_strides": dense_strides(bias, (0, 1, 2, 3))}
    return AttentionCall(**fields, scale=d**-0.5, causal=causal, element_type=element_type)


ATTENTION_CALLS = {
    "bf16_bhsd": _attention(2, 4, 32, 32, 64),
    "f16_causal": _attention(1, 2, 48, 48, 32, causal=True, element_type="f16"),
    "bf16_bshd_bias_per_head": _attention(2, 3, 16, 24, 16, bias=(1, 3, 16, 24), bshd=True),
    "bf16_causal_full_bias": _attention(2, 2, 16, 16, 8, bias=(2, 2, 16, 16), causal=True),
    "bf16_grouped_query_bshd": _attention(2, 8, 16, 16, 16, causal=True, bshd=True, kv_heads=2),
}


@pytest.mark.parametrize("name", sorted(ATTENTION_CALLS))
def test_each_attention_is_one_sdpa_node_computing_the_contract(fake, name):
    call = ATTENTION_CALLS[name]
    library = Cudnn(lambda n: 0x7000, bindings=fake)
    assert library.offers(call)
    assert library.offers(call)  # built once per call
    (graph,) = fake.graphs
    io = {"f16": "HALF", "bf16": "BFLOAT16"}[call.element_type]
    assert graph["graph"] == {
        "io_data_type": io,
        "intermediate_data_type": "FLOAT",
        "compute_data_type": "FLOAT",
        "handle": 0xC0DE,
    }
    tensors = graph["tensors"]
    assert sorted(tensors) == sorted(call.operand_names)
    for tensor in call.operand_names:
        assert tensors[tensor].dim == list(call.dims_of(tensor))
        assert tensors[tensor].stride == list(call.strides_of(tensor))
        assert tensors[tensor].data_type == io
    assert tensors["o"].output
    sdpa = graph["sdpa"]
    assert sdpa["attn_scale"] == call.scale and sdpa["use_causal_mask"] == call.causal
    assert sdpa["compute_data_type"] == "FLOAT"
    steps = [step for step, _ in graph["steps"]]
    assert steps == [
        "validate",
        "build_operation_graph",
        "create_execution_plans",
        "check_support",
        "build_plans",
    ]
    rng = np.random.default_rng(11)
    dtype = ElementType(call.element_type).numpy_dtype
    operands = [
        rng.standard_normal(size // dtype.itemsize).astype(dtype).view(np.uint8)
        for size in call.byte_sizes()[:-1]
    ]
    operands.append(np.zeros(call.byte_sizes()[-1], np.uint8))
    expected = call.reference(operands)
    library.run(call, [o.ctypes.data for o in operands], 0x5002)
    assert fake.streams == [0x5002]
    np.testing.assert_array_equal(operands[-1], expected)


def test_convolution_and_attention_share_one_handle_and_workspace(fake):
    allocated = []
    library = Cudnn(lambda n: allocated.append(n) or 0x7000, bindings=fake)
    assert library.offers(CALLS["resnet_3x3_tf32"])
    assert library.offers(ATTENTION_CALLS["bf16_bhsd"])
    assert [graph["graph"]["handle"] for graph in fake.graphs] == [0xC0DE, 0xC0DE]
    assert allocated == [4096]  # the second plan needs no more than the first


def test_an_attention_cudnn_refuses_is_not_offered_and_says_why(fake):
    fake.refuse = True
    library = Cudnn(lambda n: 0x7000, bindings=fake)
    call = ATTENTION_CALLS["f16_causal"]
    assert not library.offers(call)
    assert "No valid engine configs" in library.refusal(call)


def test_the_cuda_device_opens_one_cudnn_for_convolutions_and_attention(fake_cuda, fake):
    from heron.runtime.cuda.device import CudaDevice

    opened = []

    def cudnn(device):
        opened.append(device)
        return Cudnn(lambda n: int(device.allocate(n, "cuDNN workspace").handle), bindings=fake)

    device = CudaDevice(bindings=fake_cuda(), libraries={"convolution": cudnn, "attention": cudnn})
    assert device.library_for(CALLS["resnet_3x3_tf32"]) == "cudnn"
    assert device.library_for(ATTENTION_CALLS["f16_causal"]) == "cudnn"
    assert opened == [device]  # one handle, one workspace for both operations


def _backward(
    b, h, sq, sk, d, *, causal=False, element_type="bf16", bshd=False, kv_heads=None, bias=None
):
    """An attention backward call over dense tensors ([B, H, S, D], or stored [B, S, H, D])."""
    forward = _attention(
        b,
        h,
        sq,
        sk,
        d,
        causal=causal,
        element_type=element_type,
        bshd=bshd,
        kv_heads=kv_heads,
        bias=bias,
    )
    return AttentionBackwardCall(
        q_dims=forward.q_dims,
        q_strides=forward.q_strides,
        k_dims=forward.k_dims,
        k_strides=forward.k_strides,
        v_dims=forward.v_dims,
        v_strides=forward.v_strides,
        do_strides=forward.o_strides,
        dq_strides=forward.q_strides,
        dk_strides=forward.k_strides,
        dv_strides=forward.v_strides,
        bias_dims=forward.bias_dims,
        bias_strides=forward.bias_strides,
        scale=forward.scale,
        causal=causal,
        element_type=element_type,
    )


BACKWARD_CALLS = {
    "bf16_bshd_causal": _backward(2, 2, 16, 16, 16, causal=True, bshd=True),
    "f16_cross": _backward(1, 3, 8, 24, 32, element_type="f16"),
    "bf16_grouped_query": _backward(2, 4, 16, 16, 8, causal=True, kv_heads=2),
    "bf16_bias_per_head_causal": _backward(2, 2, 16, 16, 16, causal=True, bias=(1, 2, 16, 16)),
}


@pytest.mark.parametrize("name", sorted(BACKWARD_CALLS))
def test_an_attention_backward_is_a_forward_with_statistics_then_sdpa_backward(fake, name):
    call = BACKWARD_CALLS[name]
    allocated = []
    scratch = {}

    def allocate(nbytes):
        buffer = np.zeros(nbytes, np.uint8)
        scratch[buffer.ctypes.data] = buffer  # kept alive: the library writes there
        allocated.append(nbytes)
        return buffer.ctypes.data

    library = Cudnn(allocate, bindings=fake)
    assert library.offers(call)
    assert library.offers(call)  # built once per call
    forward, backward = fake.graphs
    b, h, sq, _ = call.q_dims
    dv = call.v_dims[3]
    width = ElementType(call.element_type).byte_width
    # the recomputed forward's output (dense [B, H, Sq, Dv]) and statistics, then the workspace
    assert allocated == [b * h * sq * dv * width, b * h * sq * 4, 4096]
    assert forward["sdpa"]["generate_stats"] is True
    stats = forward["tensors"]["stats"]
    assert (stats.dim, stats.stride, stats.data_type) == (
        [b, h, sq, 1],
        [h * sq, sq, 1, 1],
        "FLOAT",
    )
    options = backward["sdpa_backward"]
    assert options["attn_scale"] == call.scale and options["use_causal_mask"] == call.causal
    assert ("bias" in forward["tensors"]) == ("bias" in backward["tensors"]) == bool(call.bias_dims)
    for tensor in call.operand_names:
        assert backward["tensors"][tensor].dim == list(call.dims_of(tensor))
        assert backward["tensors"][tensor].stride == list(call.strides_of(tensor))
    assert all(backward["tensors"][name].output for name in ("dq", "dk", "dv"))
    rng = np.random.default_rng(5)
    dtype = ElementType(call.element_type).numpy_dtype
    operands = [
        rng.standard_normal(size // width).astype(dtype).view(np.uint8)
        for size in call.byte_sizes()[:-3]
    ]
    operands += [np.zeros(size, np.uint8) for size in call.byte_sizes()[-3:]]
    expected = call.reference(operands)
    library.run(call, [o.ctypes.data for o in operands], 0x5003)
    assert len(fake.executions) == 2  # the forward, then the backward
    # the backward read o and stats from the scratch the forward wrote, o as the contract's
    o_address, stats_address = list(scratch)[:2]  # allocated in that order
    assert fake.backward_reads == [{"o": o_address, "stats": stats_address}]
    o = scratch[o_address]
    forward_call = attrs.evolve(call.forward, o_strides=dense_strides(call.do_dims, (0, 1, 2, 3)))
    given = dict(zip(call.operand_names, operands, strict=True))
    inputs = [given[name] for name in forward_call.operand_names[:-1]]
    assert np.array_equal(o, forward_call.reference([*inputs, np.zeros_like(o)]))
    # cuDNN's gradients (from o and the statistics) are the recomputing contract's within
    # o's rounding to the element type
    for got, want in zip(operands[-3:], expected, strict=True):
        got, want = (x.view(dtype).astype(np.float32) for x in (got, want))
        np.testing.assert_allclose(got, want, rtol=2.0**-6, atol=2.0**-6 * np.abs(want).max())


def test_the_cuda_device_offers_the_attention_backward_through_cudnn(fake_cuda, fake):
    from heron.runtime.cuda.device import CudaDevice

    def cudnn(device):
        return Cudnn(lambda n: int(device.allocate(n, "cuDNN").handle), bindings=fake)

    device = CudaDevice(bindings=fake_cuda(), libraries={"attention_backward": cudnn})
    assert device.library_for(BACKWARD_CALLS["bf16_bshd_causal"]) == "cudnn"


def _with_stats(call: AttentionCall, order=(0, 1, 2)) -> AttentionCall:
    """``call`` giving its softmax's statistics too (f32 [B, H, Sq], stored in ``order``)."""
    return attrs.evolve(call, stats_strides=dense_strides(call.q_dims[:3], order))


def _reading(call: AttentionBackwardCall, forward: AttentionCall) -> AttentionBackwardCall:
    """``call`` reading ``forward``'s o and statistics (a training step's pair)."""
    return attrs.evolve(call, o_strides=forward.o_strides, stats_strides=forward.stats_strides)


def _filled(call, rng) -> list[np.ndarray]:
    """Random given arguments (f32 statistics a plausible log-sum-exp), zeroed computed ones."""
    dtype = ElementType(call.element_type).numpy_dtype
    out = []
    computed = call.operand_names[len(call.operand_names) - call.outputs :]
    for name, size in zip(call.operand_names, call.byte_sizes(), strict=True):
        if name in computed:
            out.append(np.zeros(size, np.uint8))
        elif name == "stats":
            out.append((rng.random(size // 4) + 2.0).astype(np.float32).view(np.uint8))
        else:
            width = np.dtype(dtype).itemsize
            out.append(rng.standard_normal(size // width).astype(dtype).view(np.uint8))
    return out


@pytest.mark.parametrize("name", sorted(ATTENTION_CALLS))
def test_a_training_step_s_forward_writes_its_statistics_with_generate_stats(fake, name):
    call = _with_stats(ATTENTION_CALLS[name], order=(1, 0, 2))  # stats stored [H, B, Sq]
    assert call.operand_names[-2:] == ("o", "stats") and call.outputs == 2
    library = Cudnn(lambda n: 0x7000, bindings=fake)
    assert library.offers(call)
    (graph,) = fake.graphs
    assert graph["sdpa"]["generate_stats"] is True
    stats = graph["tensors"]["stats"]
    b, h, sq, _ = call.q_dims
    assert (stats.dim, stats.stride, stats.data_type, stats.output) == (
        [b, h, sq, 1],
        [sq, b * sq, 1, 1],
        "FLOAT",
        True,
    )
    operands = _filled(call, np.random.default_rng(7))
    o_expected, stats_expected = call.reference(operands)
    addresses = [o.ctypes.data for o in operands]
    library.run(call, addresses, 0x5004)
    # each tensor bound to its argument's pointer, in the contract's order
    (execution,) = fake.executions
    names = [tensor.name for tensor in execution["pack"]]
    assert names == list(call.operand_names)
    assert list(execution["pack"].values()) == addresses
    np.testing.assert_array_equal(operands[-2], o_expected)
    np.testing.assert_allclose(
        operands[-1].view(np.float32), stats_expected.view(np.float32), rtol=1e-6
    )


@pytest.mark.parametrize("name", sorted(BACKWARD_CALLS))
def test_a_backward_reading_the_forward_s_statistics_is_sdpa_backward_alone(fake, name):
    recomputing = BACKWARD_CALLS[name]
    forward = _with_stats(recomputing.forward)
    call = _reading(recomputing, forward)
    assert call.reads_forward
    allocated = []
    library = Cudnn(lambda n: allocated.append(n) or 0x7000, bindings=fake)
    assert library.offers(call)
    (graph,) = fake.graphs  # no forward graph
    assert "sdpa" not in graph and "sdpa_backward" in graph
    assert allocated == [4096]  # the workspace: no scratch for o and stats
    tensors = graph["tensors"]
    b, h, sq, _ = call.q_dims
    assert (tensors["stats"].dim, tensors["stats"].stride) == ([b, h, sq, 1], [h * sq, sq, 1, 1])
    assert tensors["o"].stride == list(call.o_strides)
    rng = np.random.default_rng(9)
    operands = _filled(call, rng)
    expected = call.reference(operands)
    addresses = [o.ctypes.data for o in operands]
    library.run(call, addresses, 0x5005)
    (execution,) = fake.executions
    assert [t.name for t in execution["pack"]] == list(call.operand_names)
    assert list(execution["pack"].values()) == addresses
    by_name = dict(zip(call.operand_names, addresses, strict=True))
    assert fake.backward_reads == [{"o": by_name["o"], "stats": by_name["stats"]}]
    for got, want in zip(operands[-3:], expected, strict=True):
        np.testing.assert_array_equal(got, want)


def test_the_pair_gives_the_recomputing_call_s_gradients(fake):
    """A forward with statistics then a backward reading them: the gradients of the
    backward call that computes the forward itself, within o's rounding."""
    recomputing = BACKWARD_CALLS["bf16_bias_per_head_causal"]
    forward = _with_stats(recomputing.forward)
    call = _reading(recomputing, forward)
    library = Cudnn(lambda n: 0x7000, bindings=fake)
    rng = np.random.default_rng(13)
    given = _filled(recomputing, rng)
    named = dict(zip(recomputing.operand_names, given, strict=True))
    o, stats = (np.zeros(size, np.uint8) for size in forward.byte_sizes()[-2:])
    library.run(
        forward,
        [named[n].ctypes.data for n in forward.operand_names[:-2]]
        + [o.ctypes.data, stats.ctypes.data],
        0,
    )
    named |= {"o": o, "stats": stats}
    named |= {n: np.zeros_like(named[n]) for n in ("dq", "dk", "dv")}
    library.run(call, [named[n].ctypes.data for n in call.operand_names], 0)
    expected = recomputing.reference(given)
    dtype = ElementType(call.element_type).numpy_dtype
    for name, want in zip(("dq", "dk", "dv"), expected, strict=True):
        got, want = (x.view(dtype).astype(np.float32) for x in (named[name], want))
        np.testing.assert_allclose(got, want, rtol=2.0**-6, atol=2.0**-6 * np.abs(want).max())


def test_a_backward_reading_o_without_stats_is_refused():
    call = BACKWARD_CALLS["f16_cross"]
    with pytest.raises(ThunkError, match="o_strides and stats_strides come together"):
        attrs.evolve(call, o_strides=call.do_strides)
