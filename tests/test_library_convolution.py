"""Convolutions as DNN library calls end to end: verdict, rewrite, artefact, the runtime's choice.

Compiled for a CUDA target, every convolution cuDNN's forward call takes
becomes the custom call ``__heron$convolution`` (operands transposed into
NHWC / KRSC) and, in the artefact, a ``dnn.convolution`` library call whose
fallback is that custom call computed on the host. The interpreter device
runs the fallback by default (the reference evaluator's convolution: bit for
bit) and, built with ``libraries=("convolution",)``, the contract's numpy
reference, which rounds f32 operands to TF32 as cuDNN on an H100 does. A
target without a DNN library keeps lowering convolutions to im2col and a GEMM.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from heron.compiler import Target
from heron.compiler.executable import compile_program
from heron.compiler.library_convolution import (
    convolution_verdict,
    convolution_verdicts,
    is_library_convolution,
    weight_gradient_padding,
)
from heron.hlo.evaluator import evaluate_module
from heron.hlo.npz_io import save_inputs
from heron.hlo.parser import parse_module, parse_module_file
from heron.runtime.core.convolution import ConvolutionCall, dense_strides
from heron.runtime.core.executor import load_executable
from heron.runtime.core.heron_run import main as heron_run
from heron.runtime.core.thunks import CustomCallThunk, LibraryCallThunk, ThunkError, walk
from heron.runtime.interpreter import InterpreterDevice

ROOT = Path(__file__).resolve().parents[1]
H100 = Target.preset("h100")


def _module(lhs: str, rhs: str, out: str, attributes: str, element: str = "f32") -> str:
    return f"""
HloModule conv
ENTRY main {{
  x = {element}{lhs} parameter(0)
  w = {element}{rhs} parameter(1)
  ROOT y = {element}{out} convolution(x, w), {attributes}
}}
"""


#: name -> (module text, the cuDNN call it becomes, described)
CASES = {
    "nhwc_hwio_same": (
        _module(
            "[2,9,9,3]{3,2,1,0}",
            "[3,3,3,8]{3,2,1,0}",
            "[2,9,9,8]{3,2,1,0}",
            "window={size=3x3 pad=1_1x1_1}, dim_labels=b01f_01io->b01f",
        ),
        "convolution f32[2x3x9x9] * f32[8x3x3x3] -> f32[2x8x9x9], pad 1_1x1_1, tf32",
    ),
    "nchw_oihw_strided_dilated": (
        _module(
            "[2,4,12,10]{3,2,1,0}",
            "[6,4,3,2]{3,2,1,0}",
            "[2,6,5,5]{3,2,1,0}",
            "window={size=3x2 stride=2x2 pad=0_1x1_0 rhs_dilate=2x1}, dim_labels=bf01_oi01->bf01",
        ),
        "convolution f32[2x4x12x10] * f32[6x4x3x2] -> f32[2x6x5x5], stride 2x2,"
        " pad 0_1x1_0, dilation 2x1, tf32",
    ),
    "grouped_depthwise": (
        _module(
            "[1,8,8,6]{3,2,1,0}",
            "[3,3,1,6]{3,2,1,0}",
            "[1,8,8,6]{3,2,1,0}",
            "window={size=3x3 pad=1_1x1_1}, dim_labels=b01f_01io->b01f, feature_group_count=6",
        ),
        "convolution f32[1x6x8x8] * f32[6x1x3x3] -> f32[1x6x8x8], pad 1_1x1_1, 6 groups, tf32",
    ),
    "conv1d": (
        _module(
            "[2,16,4]{2,1,0}",
            "[3,4,8]{2,1,0}",
            "[2,16,8]{2,1,0}",
            "window={size=3 pad=1_1}, dim_labels=b0f_0io->b0f",
        ),
        "convolution f32[2x4x1x16] * f32[8x4x1x3] -> f32[2x8x1x16], pad 0_0x1_1, tf32",
    ),
    "conv3d_highest": (
        _module(
            "[1,5,6,7,2]{4,3,2,1,0}",
            "[2,2,2,2,3]{4,3,2,1,0}",
            "[1,4,5,6,3]{4,3,2,1,0}",
            "window={size=2x2x2}, dim_labels=b012f_012io->b012f,"
            " operand_precision={highest,highest}",
        ),
        "convolution f32[1x2x5x6x7] * f32[3x2x2x2x2] -> f32[1x3x4x5x6]",
    ),
    "bf16_column_major_input": (
        _module(
            "[2,6,6,4]{0,1,2,3}",
            "[3,3,4,5]{3,2,1,0}",
            "[2,4,4,5]{3,2,1,0}",
            "window={size=3x3}, dim_labels=b01f_01io->b01f",
            "bf16",
        ),
        "convolution bf16[2x4x6x6] * bf16[5x4x3x3] -> bf16[2x5x4x4]",
    ),
    "weight_gradient_shape": (
        # jax's kernel gradient: the batch contracts as a feature, the window is the image
        _module(
            "[4,6,6,3]{3,2,1,0}",
            "[4,4,4,8]{3,2,1,0}",
            "[3,3,3,8]{3,2,1,0}",
            "window={size=4x4}, dim_labels=f01b_i01o->01bf",
        ),
        "convolution weight gradient f32[4x3x6x6] * f32[4x8x4x4] -> f32[8x3x3x3], tf32",
    ),
}


def _inputs(module, seed: int = 3) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [
        rng.standard_normal(p.shape.dims).astype(p.shape.numpy_dtype)
        for p in module.entry.parameters
    ]


@pytest.fixture(scope="module", params=sorted(CASES))
def case(request):
    text, described = CASES[request.param]
    compiled = compile_program(parse_module(text), H100, ("interpreter",))
    return request.param, text, described, compiled


def _call(compiled) -> LibraryCallThunk:
    (call,) = [t for t in walk(compiled.artefact.program) if isinstance(t, LibraryCallThunk)]
    return call


def test_a_convolution_for_cuda_is_a_library_call_with_the_host_beside_it(case):
    _, _, described, compiled = case
    call = _call(compiled)
    assert (call.library, call.operation, call.fallback_emitter) == ("dnn", "convolution", "host")
    (host,) = call.fallback
    assert isinstance(host, CustomCallThunk) and host.target == "__heron$convolution"
    assert ConvolutionCall.from_thunk(call).describe() == described


@pytest.mark.parametrize("libraries", [(), ("convolution",)])
def test_the_interpreter_runs_the_host_fallback_or_its_numpy_library(case, libraries):
    _, text, _, compiled = case
    module = parse_module(text)
    inputs = _inputs(module)
    expected = evaluate_module(module, inputs)
    device = InterpreterDevice(libraries=libraries)
    executable = load_executable(compiled.artefact, device, command_buffers=True, min_graph_size=1)
    (choice,) = executable.library_choices
    for _ in range(2):  # recorded, then replayed
        (out,) = executable.run(inputs)
    call = ConvolutionCall.from_thunk(_call(compiled))
    if not libraries:
        assert (choice.chosen, choice.library) == ("host", False)
        np.testing.assert_array_equal(out, expected)  # the evaluator itself, on the host
        return
    assert (choice.chosen, choice.library) == ("numpy", True)
    assert device.library_calls == 2
    reference = np.asarray(expected, np.float64)
    error = np.abs(np.asarray(out, np.float64) - reference).max()
    scale = max(1.0, float(np.abs(reference).max()))
    products = call.summed_terms()
    if call.element_type == "bf16":
        bound = 2.0**-8 * scale  # one rounding of the f32 sum to bf16
    elif call.compute == "tf32":
        bound = 8 * 2.0**-11 * math.sqrt(products) * scale
        assert error > 1e-6, "TF32 rounding leaves a trace on standard-normal operands"
    else:
        bound = 8 * 2.0**-24 * products * scale
    assert error <= bound, (error, bound)


def test_the_contract_reference_is_the_evaluator_s_convolution_in_any_layout():
    # The same NCHW convolution given three ways: dense NCHW, NHWC strides, and the
    # filter stored RSCK (HWIO); without TF32 the reference equals the evaluator's sum.
    text = _module(
        "[2,3,7,7]{3,2,1,0}",
        "[4,3,3,3]{3,2,1,0}",
        "[2,4,5,5]{3,2,1,0}",
        "window={size=3x3}, dim_labels=bf01_oi01->bf01",
    )
    module = parse_module(text)
    x, w = _inputs(module, seed=11)
    expected = np.asarray(evaluate_module(module, [x, w]))
    for x_order, w_order in (((0, 1, 2, 3), (0, 1, 2, 3)), ((0, 2, 3, 1), (2, 3, 1, 0))):
        call = ConvolutionCall(
            x_dims=x.shape,
            x_strides=dense_strides(x.shape, x_order),
            w_dims=w.shape,
            w_strides=dense_strides(w.shape, w_order),
            y_dims=expected.shape,
            y_strides=dense_strides(expected.shape, x_order),
            padding_low=(0, 0),
            padding_high=(0, 0),
            stride=(1, 1),
            dilation=(1, 1),
        )
        raw_x = np.ascontiguousarray(x.transpose(x_order)).view(np.uint8).reshape(-1)
        raw_w = np.ascontiguousarray(w.transpose(w_order)).view(np.uint8).reshape(-1)
        out = call.reference([raw_x, raw_w, np.zeros(expected.nbytes, np.uint8)])
        y = out.view(np.float32).reshape([expected.shape[d] for d in x_order])
        np.testing.assert_allclose(y.transpose(np.argsort(x_order)), expected, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"x_strides": (1, 1, 1, 1)}, "do not store"),
        ({"y_dims": (2, 4, 6, 5), "y_strides": (120, 30, 5, 1)}, "the window gives"),
        ({"element_type": "f16", "compute": "tf32"}, "compute 'tf32' for f16"),
        ({"groups": 2}, "2 groups"),
        ({"padding_low": (-1, 0)}, "padding must be >= 0"),
        ({"element_type": "f64"}, "element type 'f64'"),
    ],
)
def test_the_contract_refuses_what_it_does_not_describe(change, message):
    fields = dict(
        x_dims=(2, 3, 7, 7),
        x_strides=dense_strides((2, 3, 7, 7), (0, 1, 2, 3)),
        w_dims=(4, 3, 3, 3),
        w_strides=dense_strides((4, 3, 3, 3), (0, 1, 2, 3)),
        y_dims=(2, 4, 5, 5),
        y_strides=dense_strides((2, 4, 5, 5), (0, 1, 2, 3)),
        padding_low=(0, 0),
        padding_high=(0, 0),
        stride=(1, 1),
        dilation=(1, 1),
    )
    with pytest.raises(ThunkError, match=message):
        ConvolutionCall(**(fields | change))


@pytest.mark.parametrize(
    ("window", "out", "element", "why"),
    [
        (
            "size=3x3 stride=2x2 lhs_dilate=2x2 rhs_reversal=1x1",
            "[2,8,8,4]",
            "f32",
            "a reversed window (no forward form either)",
        ),
        ("size=3x3 pad=-1_0x0_0", "[2,6,7,4]", "f32", "negative padding"),
        ("size=3x3 rhs_reversal=1x1", "[2,7,7,4]", "f32", "reversed"),
        ("size=3x3", "[2,7,7,4]", "f64", "not f64"),
    ],
)
def test_what_cudnn_does_not_take_keeps_im2col_and_says_why(window, out, element, why):
    attributes = f"window={{{window}}}, dim_labels=b01f_01io->b01f"
    module = parse_module(_module("[2,9,9,4]", "[3,3,4,4]", out, attributes, element))
    conv = module.entry.root_instruction
    assert why in convolution_verdict(conv, H100)
    compiled = compile_program(module, H100, ("interpreter",))
    assert not any(
        isinstance(t, LibraryCallThunk) and t.operation == "convolution"
        for t in walk(compiled.artefact.program)
    )


def test_a_target_without_a_dnn_library_lowers_every_convolution():
    text, _ = CASES["nhwc_hwio_same"]
    target = Target.preset("mi300x")  # ROCm: MIOpen has no binding in heron
    module = parse_module(text)
    assert "no DNN library" in convolution_verdict(module.entry.root_instruction, target)
    compiled = compile_program(module, target, ("interpreter",))
    assert not any(
        isinstance(t, LibraryCallThunk)
        for t in walk(compiled.artefact.program)
        if getattr(t, "operation", "") == "convolution"
    )


#: Convolutions of the corpora cuDNN's forward call does not take, and why (none: the
#: last, haiku_conv_variants_rmsprop_step's strided grouped kernel gradient, is a forward
#: call with its batch groups made feature groups, as XLA makes it).
NOT_TAKEN: dict[tuple[str, str], str] = {}


def test_a_strided_grouped_kernel_gradient_is_a_forward_call_with_feature_groups():
    # haiku_conv_variants_rmsprop_step's conv_general_dilated.19: the kernel gradient of a
    # strided convolution with 3 feature groups, which has no weight gradient's form
    # (its window is strided); XLA:GPU 0.12 makes it cudnn-conv.20, a forward convolution
    # with feature_group_count=3 of the input with its batch groups moved to the features.
    text = _module(
        "[4,4,4,6]{3,2,1,0}",
        "[4,4,4,6]{3,2,1,0}",
        "[3,3,2,6]{3,2,1,0}",
        "window={size=4x4 stride=2x2 pad=2_2x2_2}, dim_labels=f01b_i01o->01bf, batch_group_count=3",
    )
    module = parse_module(text)
    assert convolution_verdict(module.entry.root_instruction, H100) == ""
    compiled = compile_program(module, H100, ("interpreter",))
    call = ConvolutionCall.from_thunk(_call(compiled))
    assert (call.mode, call.groups) == ("forward", 3)
    assert call.describe() == (
        "convolution f32[2x12x4x4] * f32[6x4x4x4] -> f32[2x6x3x3], stride 2x2, pad 2_2x2_2,"
        " 3 groups, tf32"
    )
    inputs = _inputs(module, seed=5)
    expected = np.asarray(evaluate_module(module, inputs), np.float64)
    for libraries in ((), ("convolution",)):
        executable = load_executable(compiled.artefact, InterpreterDevice(libraries=libraries))
        (out,) = executable.run(inputs)
        error = float(np.abs(np.asarray(out, np.float64) - expected).max())
        scale = max(1.0, float(np.abs(expected).max()))
        # the host computes the rewritten convolution: another order of the same sums
        bound = 8 * 2.0**-24 * call.summed_terms() * scale
        if libraries:  # numpy's library call rounds the operands to TF32
            bound = 8 * 2.0**-11 * math.sqrt(call.summed_terms()) * scale
        assert error <= bound, (libraries, error, bound)


def test_every_corpus_convolution_compiled_for_cuda_is_a_cudnn_call():
    # Issue 28's acceptance for convolutions without a GPU: each convolution of the
    # program and model corpora, for an H100, is a cuDNN call unless the rule says why.
    verdicts = {}
    for corpus in ("programs", "models"):
        for path in sorted((ROOT / corpus).glob("*/module.hlo")):
            module = parse_module_file(path)
            for name, verdict in convolution_verdicts(module, H100):
                verdicts[(path.parent.name, name)] = verdict
    assert len(verdicts) >= 14
    refused = {key: v for key, v in verdicts.items() if v != "cudnn"}
    assert refused == NOT_TAKEN


def test_heron_run_says_how_the_convolution_ran(tmp_path, capsys):
    text, described = CASES["nhwc_hwio_same"]
    compiled = compile_program(parse_module(text), H100, ("interpreter",))
    path = tmp_path / "conv.heron"
    compiled.artefact.save(path)
    inputs = tmp_path / "inputs.npz"
    save_inputs(inputs, _inputs(parse_module(text)))
    report = tmp_path / "report.json"
    args = [str(path), "--inputs", str(inputs), "--backend", "interpreter"]
    assert heron_run([*args, "--report-json", str(report)]) == 0
    text_out = capsys.readouterr().out
    assert f"library call 1: {described}: host (on the host: the interpreter" in text_out
    (choice,) = json.loads(report.read_text())["library_calls"]
    assert (choice["call"], choice["chosen"], choice["library"]) == (described, "host", False)


def test_the_thunk_counts_tell_the_library_calls_from_what_is_beside_them():
    from heron.compiler.executable import thunk_counts

    text, _ = CASES["nhwc_hwio_same"]
    compiled = compile_program(parse_module(text), H100, ("interpreter",))
    assert thunk_counts(compiled) == {"kernel": 1, "library_call": 1}  # the filter transpose
    assert thunk_counts(compiled, fallbacks=True) == {"custom_call": 1}


def _strided_input_gradient() -> str:
    """jax's gradient, with respect to the input, of a stride-2 3x3 convolution (NHWC,
    HWIO): a convolution of the output gradient base-dilated by 2 with the reversed
    filter, which cuDNN computes as ``conv_dgrad``."""
    import jax
    import jax.numpy as jnp
    from jax import lax

    def loss(x, w):
        y = lax.conv_general_dilated(
            x, w, (2, 2), ((1, 1), (1, 1)), dimension_numbers=("NHWC", "HWIO", "NHWC")
        )
        return (y * y).sum()

    x, w = jnp.zeros((2, 9, 9, 3), jnp.float32), jnp.zeros((3, 3, 3, 4), jnp.float32)
    return jax.jit(jax.grad(loss)).lower(x, w).as_text(dialect="hlo")


@pytest.mark.usefixtures("jax_32_bit")  # f32 whatever x64 other suites turned on
@pytest.mark.parametrize("libraries", [(), ("convolution",)])
def test_a_strided_convolution_s_input_gradient_is_cudnn_s_data_gradient(libraries):
    text = _strided_input_gradient()
    assert "lhs_dilate=2x2" in text and "reverse(" in text
    module = parse_module(text)
    compiled = compile_program(module, H100, ("interpreter",))
    calls = [
        ConvolutionCall.from_thunk(t)
        for t in walk(compiled.artefact.program)
        if isinstance(t, LibraryCallThunk) and t.operation == "convolution"
    ]
    assert sorted(c.describe() for c in calls) == [
        "convolution data gradient f32[2x4x5x5] * f32[4x3x3x3] -> f32[2x3x9x9], stride 2x2,"
        " pad 1_1x1_1, tf32",
        "convolution f32[2x3x9x9] * f32[4x3x3x3] -> f32[2x4x5x5], stride 2x2, pad 1_1x1_1, tf32",
    ]
    inputs = _inputs(module, seed=5)
    expected = np.asarray(evaluate_module(module, inputs), np.float64)
    executable = load_executable(compiled.artefact, InterpreterDevice(libraries=libraries))
    (out,) = executable.run(inputs)
    if not libraries:  # the host computes the gradient's own HLO: the evaluator's bits
        np.testing.assert_array_equal(out, expected.astype(np.float32))
        return
    # TF32 products in the forward convolution and again in the gradient's
    scale = max(1.0, float(np.abs(expected).max()))
    error = float(np.abs(out - expected).max())
    assert 0 < error <= 2 * 8 * 2.0**-11 * math.sqrt(36) * scale, error


def test_the_data_gradient_contract_is_the_reversed_base_dilated_convolution():
    # Without TF32 the contract's numpy gradient equals the evaluator's HLO convolution.
    text = _module(
        "[2,5,5,4]{3,2,1,0}", "[3,3,4,3]{3,2,1,0}", "[2,9,9,3]{3,2,1,0}",
        "window={size=3x3 pad=1_1x1_1 lhs_dilate=2x2 rhs_reversal=1x1},"
        " dim_labels=b01f_01io->b01f",
    )  # fmt: skip
    module = parse_module(text)
    dy, w = _inputs(module, seed=9)
    expected = np.asarray(evaluate_module(module, [dy, w]))
    nhwc = (0, 2, 3, 1)
    call = ConvolutionCall(
        x_dims=(2, 3, 9, 9), x_strides=dense_strides((2, 3, 9, 9), nhwc),
        w_dims=(4, 3, 3, 3), w_strides=dense_strides((4, 3, 3, 3), (2, 3, 0, 1)),
        y_dims=(2, 4, 5, 5), y_strides=dense_strides((2, 4, 5, 5), nhwc),
        padding_low=(1, 1), padding_high=(1, 1), stride=(2, 2), dilation=(1, 1),
        mode="data_gradient",
    )  # fmt: skip
    # the gradient's kernel 01io: i is the forward's K (4), o its C (3); stored [3,3,4,3]
    raw = [
        np.ascontiguousarray(dy).view(np.uint8).reshape(-1),
        np.ascontiguousarray(w).view(np.uint8).reshape(-1),
        np.zeros(expected.nbytes, np.uint8),
    ]
    out = call.reference(raw).view(np.float32).reshape(2, 9, 9, 3)
    np.testing.assert_allclose(out, expected, rtol=1e-5, atol=1e-5)


NHWC_HWIO = ("NHWC", "HWIO", "NHWC")


def _forward(
    x, w, numbers=NHWC_HWIO, strides=(1, 1), padding="SAME", dilation=(1, 1), element="f32",
    groups=1,
):  # fmt: skip
    return (x, w, numbers, strides, padding, dilation, element, groups)


#: name -> (x shape, w shape, dimension numbers, strides, padding, rhs dilation, element
#: type): forward convolutions whose kernel gradient jax writes as a convolution
WEIGHT_GRADIENTS = {
    "nhwc_same": _forward((2, 9, 9, 3), (3, 3, 3, 4)),
    "nhwc_strided": _forward((2, 9, 9, 3), (3, 3, 3, 4), strides=(2, 2), padding=((1, 1), (1, 1))),
    # stride 2 leaves the last input row unread: jax's gradient pads high by -1
    "nchw_valid_unread_row": _forward(
        (2, 3, 10, 9), (4, 3, 3, 3), ("NCHW", "OIHW", "NCHW"), (2, 2), "VALID"
    ),
    "nwc_1d": _forward((3, 20, 4), (5, 4, 6), ("NWC", "WIO", "NWC"), (1,), dilation=(1,)),
    "ndhwc_3d": _forward(
        (1, 5, 6, 5, 2), (2, 3, 2, 2, 3), ("NDHWC", "DHWIO", "NDHWC"), (1, 1, 1), "VALID",
        (1, 1, 1),
    ),
    "nhwc_bf16": _forward((2, 8, 8, 8), (3, 3, 8, 16), element="bf16"),
    # a dilated forward's kernel gradient strides its window: XLA's rule keeps it forward
    "nhwc_dilated": _forward((2, 11, 11, 3), (3, 3, 3, 4), padding="VALID", dilation=(2, 2)),
    # grouped and depthwise: jax's kernel gradient has batch groups, conv_wgrad's groups
    "nhwc_depthwise_strided": _forward(
        (2, 9, 9, 6), (3, 3, 1, 6), strides=(2, 2), padding=((1, 1), (1, 1)), groups=6
    ),
    "nchw_grouped": _forward(
        (3, 4, 8, 7), (6, 2, 3, 3), ("NCHW", "OIHW", "NCHW"), padding="VALID", groups=2
    ),
}  # fmt: skip


def _kernel_gradient(name: str) -> str:
    """jax's gradient, with respect to the kernel only, of one WEIGHT_GRADIENTS case."""
    import jax
    import jax.numpy as jnp
    from jax import lax

    x_shape, w_shape, numbers, strides, padding, dilation, element, groups = WEIGHT_GRADIENTS[name]
    dtype = jnp.bfloat16 if element == "bf16" else jnp.float32

    def loss(w, x):
        y = lax.conv_general_dilated(
            x,
            w,
            strides,
            padding,
            rhs_dilation=dilation,
            dimension_numbers=numbers,
            feature_group_count=groups,
        )
        return (y.astype(jnp.float32) ** 2).sum()

    arguments = (jnp.zeros(w_shape, dtype), jnp.zeros(x_shape, dtype))
    return jax.jit(jax.grad(loss)).lower(*arguments).as_text(dialect="hlo")


@pytest.mark.usefixtures("jax_32_bit")
@pytest.mark.parametrize("name", sorted(WEIGHT_GRADIENTS))
def test_a_kernel_gradient_is_cudnn_s_weight_gradient_by_xla_s_rule(name):
    x_shape, w_shape, numbers, strides, _, dilation, element, groups = WEIGHT_GRADIENTS[name]
    text = _kernel_gradient(name)
    assert (f"batch_group_count={groups}" in text) == (groups > 1)
    module = parse_module(text)
    compiled = compile_program(module, H100, ("interpreter",))
    calls = [
        ConvolutionCall.from_thunk(t)
        for t in walk(compiled.artefact.program)
        if isinstance(t, LibraryCallThunk) and t.operation == "convolution"
    ]
    modes = sorted(call.mode for call in calls)
    # the forward convolution (for y) and the kernel gradient, both cuDNN's
    assert modes == (["forward"] * 2 if name == "nhwc_dilated" else ["forward", "weight_gradient"])
    forward = next(
        call for call in calls if call.x_dims[0] == x_shape[0] and call.mode == "forward"
    )
    gradient = calls[1 - calls.index(forward)]
    if gradient.mode == "weight_gradient":
        # the forward's own tensors and window, cuDNN's NCHW / KCRS order
        assert (gradient.x_dims, gradient.y_dims) == (forward.x_dims, forward.y_dims)
        assert gradient.w_dims == forward.w_dims
        assert gradient.stride == forward.stride
        assert gradient.padding_low == forward.padding_low
        assert gradient.groups == forward.groups == groups
        assert gradient.compute == ("tf32" if element == "f32" else "")
    inputs = _inputs(module, seed=13)
    expected = np.asarray(evaluate_module(module, inputs), np.float64)
    for libraries in ((), ("convolution",)):
        executable = load_executable(compiled.artefact, InterpreterDevice(libraries=libraries))
        (out,) = executable.run(inputs)
        out = np.asarray(out, np.float64)
        if not libraries:  # the host computes the program's own HLO: the evaluator's bits
            np.testing.assert_array_equal(out, expected)
            continue
        scale = max(1.0, float(np.abs(expected).max()))
        terms = max(call.summed_terms() for call in calls)
        if element == "bf16":  # the forward's y and the gradient each rounded to bf16
            bound = 4 * 2.0**-8 * scale
        else:  # TF32 products in the forward convolution and again in the gradient
            bound = 2 * 8 * 2.0**-11 * math.sqrt(terms) * scale
        error = float(np.abs(out - expected).max())
        assert error <= bound, (error, bound)


def test_the_weight_gradient_contract_is_the_batch_contracting_convolution():
    # Without TF32 the contract's numpy weight gradient equals the evaluator's HLO
    # convolution (jax's form: the input's batch contracted, y window-dilated by the
    # forward's stride), for a forward of stride 2 whose last input row is never read.
    text = _module(
        "[2,10,9,3]{3,2,1,0}", "[2,4,4,5]{3,2,1,0}", "[3,3,3,5]{3,2,1,0}",
        "window={size=4x4 pad=0_-1x1_-1 rhs_dilate=2x2}, dim_labels=f01b_i01o->01bf",
    )  # fmt: skip
    module = parse_module(text)
    conv = module.entry.root_instruction
    assert weight_gradient_padding(conv) == [(0, 0), (1, 0)]
    x, dy = _inputs(module, seed=21)
    expected = np.asarray(evaluate_module(module, [x, dy]))  # [R, S, C, K]
    nhwc = (0, 2, 3, 1)
    call = ConvolutionCall(
        x_dims=(2, 3, 10, 9), x_strides=dense_strides((2, 3, 10, 9), nhwc),
        w_dims=(5, 3, 3, 3), w_strides=dense_strides((5, 3, 3, 3), (2, 3, 1, 0)),
        y_dims=(2, 5, 4, 4), y_strides=dense_strides((2, 5, 4, 4), nhwc),
        padding_low=(0, 1), padding_high=(0, 0), stride=(2, 2), dilation=(1, 1),
        mode="weight_gradient",
    )  # fmt: skip
    raw = [
        np.ascontiguousarray(x).view(np.uint8).reshape(-1),
        np.ascontiguousarray(dy).view(np.uint8).reshape(-1),
        np.zeros(expected.nbytes, np.uint8),
    ]
    out = call.reference(raw).view(np.float32).reshape(3, 3, 3, 5)
    np.testing.assert_allclose(out, expected, rtol=1e-5, atol=1e-5)
    assert call.summed_terms() == 2 * 4 * 4


@pytest.mark.parametrize(
    ("window", "labels", "shapes"),
    [
        # batch and output features carried through, a window no larger than the output
        ("size=3x3 pad=1_1x1_1", "b01f_01io->b01f", ("[2,9,9,4]", "[3,3,4,4]", "[2,9,9,4]")),
        # a large window without dilation and one small dimension: forward, by XLA's rule
        ("size=4x2", "f01b_i01o->01bf", ("[4,6,6,3]", "[4,4,2,8]", "[3,5,3,8]")),
        # a strided window is no weight gradient's
        ("size=4x4 stride=2x2", "f01b_i01o->01bf", ("[4,9,9,3]", "[4,4,4,8]", "[3,3,3,8]")),
    ],
)
def test_xla_s_rule_keeps_these_forward(window, labels, shapes):
    lhs, rhs, out = shapes
    module = parse_module(_module(lhs, rhs, out, f"window={{{window}}}, dim_labels={labels}"))
    assert weight_gradient_padding(module.entry.root_instruction) is None
    assert convolution_verdict(module.entry.root_instruction, H100) == ""


def test_the_corpora_s_kernel_gradients_are_weight_gradients():
    # cnn_train_grad, equinox_cnn_sgd_step, flax_cnn_adam_step, flax_nnx_cnn_sgd_step,
    # haiku_conv_variants_rmsprop_step: XLA:GPU calls __cudnn$convBackwardFilter for
    # them (xla_gpu_optimized.hlo), and so does heron.
    found = {}
    for corpus in ("programs", "models"):
        for path in sorted((ROOT / corpus).glob("*/module.hlo")):
            module = parse_module_file(path)
            for inst in module.instructions():
                if inst.opcode == "convolution" and weight_gradient_padding(inst) is not None:
                    found[path.parent.name] = weight_gradient_padding(inst)
    assert found == {
        "cnn_train_grad": [(1, 1), (1, 1)],
        "equinox_cnn_sgd_step": [(1, 1), (1, 1)],
        "flax_cnn_adam_step": [(1, 1), (1, 1)],
        "flax_nnx_cnn_sgd_step": [(1, 1), (1, 1)],
        "haiku_conv_variants_rmsprop_step": [(1, 1), (1, 1)],
        # its three (1x1, 3x1 and 1x3 windows; the last found here) are XLA's three
        # __cudnn$convBackwardFilter calls, paddings 0_0x0_0, 1_1x0_0 and 0_0x1_1
        "haiku_separable_strided_dilated_conv_adamw_step": [(0, 0), (1, 1)],
        # its three: the 3x3 convolution's (1_1), the strided one's (0_1, SAME at stride 2)
        # and the 1x1 head's (the last found here); XLA's three backward filters
        "flax_unet_sgd_step": [(0, 0), (0, 0)],
    }


# -- the epilogue: bias and ReLU in the library call (XLA's convBiasActivationForward) ---------


def _epilogue_module(layout: str, epilogue: str, element: str = "f32") -> str:
    """A 3x3 convolution with 8 output features, then ``epilogue`` (HLO lines using ``y``
    and ``b``, ending in ``ROOT``); NHWC (``b01f``) or NCHW (``bf01``)."""
    x, w, y, labels, feature = {
        "nhwc": ("[2,9,9,4]", "[3,3,4,8]", "[2,9,9,8]", "b01f_01io->b01f", 3),
        "nchw": ("[2,4,9,9]", "[8,4,3,3]", "[2,8,9,9]", "bf01_oi01->bf01", 1),
    }[layout]
    body = epilogue.format(t=element, y=y, feature=feature)
    return f"""
HloModule conv_epilogue
ENTRY main {{
  x = {element}{x} parameter(0)
  w = {element}{w} parameter(1)
  b = {element}[8] parameter(2)
  z = {element}{y} parameter(3)
  y = {element}{y} convolution(x, w), window={{size=3x3 pad=1_1x1_1}}, dim_labels={labels}
{body}
}}
"""


BIAS_RELU = """  bb = {t}{y} broadcast(b), dimensions={{{feature}}}
  sum = {t}{y} add(bb, y)
  zero = {t}[] constant(0)
  zeros = {t}{y} broadcast(zero), dimensions={{}}
  ROOT relu = {t}{y} maximum(sum, zeros)"""
BIAS_ONLY = """  bb = {t}{y} broadcast(b), dimensions={{{feature}}}
  ROOT sum = {t}{y} add(y, bb)"""
RELU_ONLY = """  zero = {t}[] constant(0)
  zeros = {t}{y} broadcast(zero), dimensions={{}}
  ROOT relu = {t}{y} maximum(zeros, y)
  unused = {t}[8] negate(b)"""
#: the convolution also read elsewhere: it must be written as it is, nothing fuses
TWO_USERS = """  bb = {t}{y} broadcast(b), dimensions={{{feature}}}
  sum = {t}{y} add(y, bb)
  ROOT both = ({t}{y}, {t}{y}) tuple(sum, y)"""
#: a clamp at one is no ReLU: the bias fuses, the maximum stays a kernel
CLAMP_AT_ONE = """  bb = {t}{y} broadcast(b), dimensions={{{feature}}}
  sum = {t}{y} add(y, bb)
  one = {t}[] constant(1)
  ones = {t}{y} broadcast(one), dimensions={{}}
  ROOT clamp = {t}{y} maximum(sum, ones)"""

#: ResNet's block end: the shortcut added after the bias, then ReLU (XLA's side input)
BIAS_RESIDUAL_RELU = """  bb = {t}{y} broadcast(b), dimensions={{{feature}}}
  sum = {t}{y} add(y, bb)
  shortcut = {t}{y} add(sum, z)
  zero = {t}[] constant(0)
  zeros = {t}{y} broadcast(zero), dimensions={{}}
  ROOT relu = {t}{y} maximum(shortcut, zeros)"""
RESIDUAL_ONLY = """  twice = {t}{y} add(z, z)
  ROOT shortcut = {t}{y} add(twice, y)"""

EPILOGUES = {
    "nhwc_bias_residual_relu": ("nhwc", BIAS_RESIDUAL_RELU, "f32", "bias, residual, relu", 1),
    "nhwc_residual_bf16": ("nhwc", RESIDUAL_ONLY, "bf16", "residual", 2),
    # NCHW: the residual would need its own transpose into the call's order: bias only
    "nchw_bias_then_residual": ("nchw", BIAS_RESIDUAL_RELU, "f32", "bias", 2),
    "nhwc_bias_relu": ("nhwc", BIAS_RELU, "f32", "bias, relu", 1),
    "nchw_bias_relu": ("nchw", BIAS_RELU, "f32", "bias, relu", 2),
    "nhwc_bias_bf16": ("nhwc", BIAS_ONLY, "bf16", "bias", 1),
    "nchw_relu_f16": ("nchw", RELU_ONLY, "f16", "relu", 2),
    "two_users": ("nhwc", TWO_USERS, "f32", "", 2),
    "clamp_at_one": ("nhwc", CLAMP_AT_ONE, "f32", "bias", 2),
}


@pytest.mark.parametrize("name", sorted(EPILOGUES))
def test_a_convolution_s_bias_and_relu_are_part_of_its_library_call(name):
    from heron.compiler.executable import thunk_counts

    layout, epilogue, element, fused, kernels = EPILOGUES[name]
    module = parse_module(_epilogue_module(layout, epilogue, element))
    compiled = compile_program(module, H100, ("interpreter",))
    call = ConvolutionCall.from_thunk(_call(compiled))
    assert (call.bias, call.activation) == ("bias" in fused, "relu" if "relu" in fused else "")
    assert call.residual == ("residual" in fused)
    assert call.describe().endswith(fused)
    assert call.operand_names[2:] == (*"b" * call.bias, *"z" * call.residual, "y")
    # the operand transposes (one kernel), NCHW's output transpose, what did not fuse
    assert thunk_counts(compiled) == {"kernel": kernels, "library_call": 1}
    inputs = _inputs(module, seed=17)
    expected = evaluate_module(module, inputs)
    expected = expected if isinstance(expected, tuple) else (expected,)
    for libraries in ((), ("convolution",)):
        executable = load_executable(compiled.artefact, InterpreterDevice(libraries=libraries))
        outputs = executable.run(inputs)
        for out, reference in zip(outputs, expected, strict=True):
            if not libraries:  # the host computes the call's HLO: the program's bits
                np.testing.assert_array_equal(out, reference)
                continue
            reference = np.asarray(reference, np.float64)
            scale = max(1.0, float(np.abs(reference).max()))
            if element == "f32":  # TF32 products
                bound = 8 * 2.0**-11 * math.sqrt(call.summed_terms()) * scale
            else:  # the epilogue before the one rounding, not after a first one
                bound = 2 * 2.0 ** -(8 if element == "bf16" else 11) * scale
            error = float(np.abs(np.asarray(out, np.float64) - reference).max())
            assert error <= bound, (error, bound)
            if "relu" in fused:
                assert float(np.min(out)) == 0.0


def test_the_model_corpus_convolutions_take_their_bias_and_relu_into_cudnn():
    # flax's Conv then nn.relu: XLA:GPU's __cudnn$convBiasActivationForward; heron's call
    # has the bias as its third operand and the ReLU in its backend_config.
    from heron.compiler.executable import thunk_counts

    module = parse_module_file(ROOT / "models" / "flax_cnn" / "module.hlo")
    compiled = compile_program(module, H100, ("interpreter",))
    (call,) = [
        ConvolutionCall.from_thunk(t)
        for t in walk(compiled.artefact.program)
        if isinstance(t, LibraryCallThunk) and t.operation == "convolution"
    ]
    assert call.describe() == (
        "convolution f32[4x3x8x8] * f32[8x3x3x3] -> f32[4x8x8x8], pad 1_1x1_1, tf32, bias, relu"
    )
    # two kernels (the filter transpose; the pooling), the convolution, the Dense GEMM
    assert thunk_counts(compiled) == {"kernel": 2, "library_call": 2}


def test_a_residual_of_another_shape_is_refused_by_name():
    config = json.dumps({"dim_labels": "b01f_o01i->b01f", "window": "{size=3x3 pad=1_1x1_1}"})
    quoted = config.replace('"', '\\"')
    text = f"""
HloModule bad
ENTRY main {{
  x = f32[2,9,9,4] parameter(0)
  w = f32[8,3,3,4] parameter(1)
  z = f32[2,9,9,7] parameter(2)
  ROOT y = f32[2,9,9,8] custom-call(x, w, z), custom_call_target="__heron$convolution",
    backend_config="{quoted}"
}}
"""
    module = parse_module(text)
    why = r"custom-call 'y'.*a bias \[K\] and a residual \[2, 9, 9, 8\]"
    with pytest.raises(Exception, match=why):
        evaluate_module(module, _inputs(module))


CUSTOM_CALLS = """
HloModule calls
ENTRY e {
  p = f32[4] parameter(0)
  conv = f32[4] custom-call(p), custom_call_target="__heron$convolution"
  attention = f32[4] custom-call(p), custom_call_target="__heron$attention"
  other = f32[4] custom-call(p), custom_call_target="heron$other"
  ROOT t = (f32[4], f32[4], f32[4]) tuple(conv, attention, other)
}
"""


def test_a_library_convolution_is_the_library_call_whose_target_is_the_convolution_s(
    monkeypatch,
):
    """is_library_convolution asks library_call_target (heron's library calls), never reading
    custom_call_target again: with no library targets, no call is a library convolution."""
    import heron.hlo.custom_calls.library as library

    entry = parse_module(CUSTOM_CALLS).entry
    found = {inst.name for inst in entry.instructions if is_library_convolution(inst)}
    assert found == {"conv"}
    monkeypatch.setattr(library, "LIBRARY_TARGETS", frozenset())
    assert not any(map(is_library_convolution, entry.instructions))


# -- XLA's backward-input calls, run as heron computes them (xla-library-calls) --------------

XLA_DEPTHWISE_BACKWARD_INPUT = """
HloModule xla_depthwise_backward_input

ENTRY main {
  dy = f32[2,4,8]{2,1,0} parameter(0)
  w = f32[8,3,1]{2,1,0} parameter(1)
  g = (f32[2,9,4]{2,1,0}, u8[0]{0}) custom-call(dy, w),
    window={size=3 stride=2 pad=1_1 rhs_dilate=2}, dim_labels=b0f_o0i->b0f,
    feature_group_count=4, custom_call_target="__cudnn$convBackwardInput",
    backend_config={"cudnn_conv_backend_config":{"conv_result_scale":1}}
  ROOT r = f32[2,9,4]{2,1,0} get-tuple-element(g), index=0
}
"""


def test_xla_s_depthwise_backward_input_runs_and_agrees(tmp_path, capsys):
    """A depthwise (four groups, two outputs each), strided, dilated convolution's input
    gradient as XLA calls cuDNN for it: heron's kernel (the dot it becomes reduced into
    one loop fusion) agrees with the reference evaluator within the reassociation bounds
    (the evaluator's is checked against the sums it means in
    packages/hlo-ir/tests/test_pass_xla_library_calls.py). Since the dot's product keeps
    its operands' order (contracting dimensions first), the kernel sums in the
    evaluator's order and agrees bit for bit, which the check reports as such."""
    from heron.cli.main import main

    path = tmp_path / "backward_input.hlo"
    path.write_text(XLA_DEPTHWISE_BACKWARD_INPUT)
    code = main(["run", str(path), "--backend", "interpreter", "--check"])
    out = capsys.readouterr().out
    assert code == 0, out
    assert "agree: every output within the tolerance" in out
    assert "reassociation bounds" in out or "out0  max 0 ulp" in out
