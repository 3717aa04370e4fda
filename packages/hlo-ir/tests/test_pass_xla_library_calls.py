# ruff: noqa: E501 - XLA's custom calls as it prints them
"""``xla-library-calls``: XLA:GPU's cuDNN, cuBLAS and TopK custom calls as heron computes them.

Each rewritten call must give what the plain HLO it stands for gives (a
convolution with its bias and ReLU, a triangular solve, a top-k), through the
pass and through the reference evaluator (which reads the calls with the same
rewrite); a call the pass does not know how to state stays, refused by name.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from heron.hlo.errors import HloError
from heron.hlo.evaluator import evaluate_module
from heron.hlo.parser import parse_module
from heron.hlo.passes.xla_library_calls import rewrite_xla_library_calls

CONV_CONFIG = (
    '{{"cudnn_conv_backend_config":{{"activation_mode":"{mode}","conv_result_scale":1,'
    '"side_input_scale":0}}}}'
)

XLA_CONV = """
HloModule xla_conv

ENTRY main {{
  x = f32[2,6,3]{{2,1,0}} parameter(0)
  w = f32[4,3,3]{{2,1,0}} parameter(1)
  b = f32[4]{{0}} parameter(2)
  c = (f32[2,6,4]{{2,1,0}}, u8[0]{{0}}) custom-call(x, w, b), window={{size=3 pad=1_1}}, dim_labels=b0f_o0i->b0f, custom_call_target="__cudnn$convBiasActivationForward", backend_config={config}
  ROOT r = f32[2,6,4]{{2,1,0}} get-tuple-element(c), index=0
}}
"""

PLAIN_CONV = """
HloModule plain_conv

ENTRY main {
  x = f32[2,6,3]{2,1,0} parameter(0)
  w = f32[4,3,3]{2,1,0} parameter(1)
  b = f32[4]{0} parameter(2)
  conv = f32[2,6,4]{2,1,0} convolution(x, w), window={size=3 pad=1_1}, dim_labels=b0f_o0i->b0f
  bias = f32[2,6,4]{2,1,0} broadcast(b), dimensions={2}
  sum = f32[2,6,4]{2,1,0} add(conv, bias)
  zero = f32[] constant(0)
  zeros = f32[2,6,4]{2,1,0} broadcast(zero), dimensions={}
  ROOT r = f32[2,6,4]{2,1,0} maximum(sum, zeros)
}
"""

XLA_TOPK = """
HloModule xla_topk

ENTRY main {
  x = f32[3,10]{1,0} parameter(0)
  t = (f32[3,4]{1,0}, s32[3,4]{1,0}, u8[64]{0}) custom-call(x), custom_call_target="__gpu$TopK", api_version=API_VERSION_TYPED_FFI, backend_config={is_stable = false, order = "TOTAL"}
  ROOT r = (f32[3,4]{1,0}, s32[3,4]{1,0}) tuple(t#0, t#1)
}
"""

XLA_TRSM = """
HloModule xla_trsm

ENTRY main {
  a = f32[4,4]{1,0} parameter(0)
  b = f32[4,2]{1,0} parameter(1)
  s = (f32[4,2]{1,0}, s8[0]{0}) custom-call(a, b), custom_call_target="__cublas$triangularSolve", backend_config={"left_side":true,"lower":true,"transpose_a":"TRANSPOSE","unit_diagonal":false}
  ROOT r = f32[4,2]{1,0} get-tuple-element(s), index=0
}
"""


def _rng():
    return np.random.default_rng(7)


def test_a_cudnn_convolution_with_bias_and_relu_is_heron_s_with_its_epilogue() -> None:
    rng = _rng()
    args = [
        rng.standard_normal((2, 6, 3)).astype(np.float32),
        rng.standard_normal((4, 3, 3)).astype(np.float32),
        rng.standard_normal(4).astype(np.float32),
    ]
    expected = evaluate_module(parse_module(PLAIN_CONV), args)
    module = parse_module(XLA_CONV.format(config=CONV_CONFIG.format(mode="kRelu")))
    np.testing.assert_allclose(evaluate_module(module, args), expected, rtol=1e-6, atol=1e-6)
    assert rewrite_xla_library_calls(module)
    (call,) = [i for i in module.entry.instructions if i.opcode == "custom-call"]
    assert call.attr("custom_call_target").text == "__heron$convolution"
    np.testing.assert_allclose(evaluate_module(module, args), expected, rtol=1e-6, atol=1e-6)


XLA_SCALED_CONV = """
HloModule xla_scaled_conv

ENTRY main {{
  x = {t}[2,6,3]{{2,1,0}} parameter(0)
  w = {t}[4,3,3]{{2,1,0}} parameter(1)
  b = {t}[4]{{0}} parameter(2)
  z = {t}[2,6,4]{{2,1,0}} parameter(3)
  c = ({t}[2,6,4]{{2,1,0}}, u8[0]{{0}}) custom-call(x, w, b, z), window={{size=3 pad=1_1}}, dim_labels=b0f_o0i->b0f, custom_call_target="__cudnn$convBiasActivationForward", backend_config={{"cudnn_conv_backend_config":{{"activation_mode":"{mode}","conv_result_scale":-0.0099999997764825821,"side_input_scale":{side}}}}}
  ROOT r = {t}[2,6,4]{{2,1,0}} get-tuple-element(c), index=0
}}
"""


@pytest.mark.parametrize(
    ("element", "mode", "side"), [("f32", "kNone", 1), ("f32", "kRelu", 0.5), ("f16", "kNone", 1)]
)
def test_a_scaled_cudnn_epilogue_is_the_plain_call_and_its_epilogue(element, mode, side) -> None:
    """``activation(scale * conv(x, w) + side_scale * z + b)``: XLA folds an SGD update into
    a weight gradient's call so (scale ``-lr``, the weights as ``z``). f16 is computed in
    f32 and rounded once, as cuDNN computes it."""
    rng = _rng()
    dtype = np.dtype({"f32": "float32", "f16": "float16"}[element])
    x, w = rng.standard_normal((2, 6, 3)), rng.standard_normal((4, 3, 3))
    b, z = rng.standard_normal(4), rng.standard_normal((2, 6, 4))
    args = [a.astype(dtype) for a in (x, w, b, z)]
    wide = [a.astype(np.float64) for a in args]
    padded = np.pad(wide[0], ((0, 0), (1, 1), (0, 0)))
    conv = sum(
        np.einsum("bsi,oi->bso", padded[:, k : k + 6, :], wide[1][:, k, :]) for k in range(3)
    )
    expected = np.float32(-0.0099999997764825821) * conv + side * wide[3] + wide[2]
    if mode == "kRelu":
        expected = np.maximum(expected, 0)
    module = parse_module(XLA_SCALED_CONV.format(t=element, mode=mode, side=side))
    assert rewrite_xla_library_calls(module)
    opcodes = [i.opcode for i in module.entry.instructions]
    assert "multiply" in opcodes and ("maximum" in opcodes) == (mode == "kRelu")
    got = evaluate_module(module, args)
    assert got.dtype == dtype
    tolerance = 1e-3 if element == "f16" else 1e-5
    np.testing.assert_allclose(got.astype(np.float64), expected, rtol=tolerance, atol=tolerance)


def test_gpu_topk_is_topk_and_cublas_triangular_solve_is_triangular_solve() -> None:
    rng = _rng()
    x = rng.standard_normal((3, 10)).astype(np.float32)
    values, indices = evaluate_module(parse_module(XLA_TOPK), [x])
    np.testing.assert_array_equal(indices, np.argsort(-x, axis=1, kind="stable")[:, :4])
    np.testing.assert_array_equal(values, np.take_along_axis(x, indices, axis=1))
    module = parse_module(XLA_TOPK)
    assert rewrite_xla_library_calls(module)
    assert [i.opcode for i in module.entry.instructions].count("topk") == 1
    a = np.tril(rng.standard_normal((4, 4))).astype(np.float32) + 4 * np.eye(4, dtype=np.float32)
    b = rng.standard_normal((4, 2)).astype(np.float32)
    solved = evaluate_module(parse_module(XLA_TRSM), [a, b])
    np.testing.assert_allclose(a.T @ solved, b, rtol=1e-5, atol=1e-5)  # op(a) x = b
    module = parse_module(XLA_TRSM)
    assert rewrite_xla_library_calls(module)
    assert any(i.opcode == "triangular-solve" for i in module.entry.instructions)


def test_a_call_it_cannot_state_stays_and_is_refused_by_name() -> None:
    text = XLA_CONV.format(config=CONV_CONFIG.format(mode="kElu"))
    assert not rewrite_xla_library_calls(parse_module(text))
    arguments = [
        np.zeros((2, 6, 3), np.float32),
        np.zeros((4, 3, 3), np.float32),
        np.zeros(4, np.float32),
    ]
    with pytest.raises(HloError, match=r"__cudnn\$convBiasActivationForward"):
        evaluate_module(parse_module(text), arguments)


XLA_BACKWARD_FILTER = """
HloModule xla_backward_filter

ENTRY main {
  x = f32[2,7,3]{2,1,0} parameter(0)
  dy = f32[2,4,5]{2,1,0} parameter(1)
  g = (f32[5,3,3]{2,1,0}, u8[0]{0}) custom-call(x, dy), window={size=3 stride=2 pad=1_1}, dim_labels=b0f_o0i->b0f, custom_call_target="__cudnn$convBackwardFilter", backend_config={"cudnn_conv_backend_config":{"activation_mode":"kNone","conv_result_scale":1,"side_input_scale":0}}
  ROOT r = f32[5,3,3]{2,1,0} get-tuple-element(g), index=0
}
"""


def test_a_cudnn_backward_filter_is_the_forward_convolution_s_weight_gradient() -> None:
    """A stride-2, padded 1-D convolution ``y[b, s, o] = sum x[b, 2s + k - 1, i] w[o, k, i]``:
    the call gives ``dw[o, k, i] = sum_{b, s} x[b, 2s + k - 1, i] dy[b, s, o]``."""
    rng = _rng()
    x = rng.standard_normal((2, 7, 3)).astype(np.float32)
    dy = rng.standard_normal((2, 4, 5)).astype(np.float32)
    padded = np.pad(x.astype(np.float64), ((0, 0), (1, 1), (0, 0)))
    expected = np.zeros((5, 3, 3))
    for k in range(3):
        for s in range(4):
            expected[:, k, :] += dy[:, s, :].astype(np.float64).T @ padded[:, 2 * s + k, :]
    module = parse_module(XLA_BACKWARD_FILTER)
    np.testing.assert_allclose(evaluate_module(module, [x, dy]), expected, rtol=1e-5, atol=1e-5)
    assert rewrite_xla_library_calls(module)
    assert any(i.opcode == "convolution" for i in module.entry.instructions)
    np.testing.assert_allclose(evaluate_module(module, [x, dy]), expected, rtol=1e-5, atol=1e-5)


XLA_GROUPED_BACKWARD_FILTER = """
HloModule xla_grouped_backward_filter

ENTRY main {
  x = f32[2,8,4]{2,1,0} parameter(0)
  dy = f32[2,3,6]{2,1,0} parameter(1)
  g = (f32[6,3,2]{2,1,0}, u8[0]{0}) custom-call(x, dy), window={size=3 stride=2}, dim_labels=b0f_o0i->b0f, feature_group_count=2, custom_call_target="__cudnn$convBackwardFilter", backend_config={"cudnn_conv_backend_config":{"activation_mode":"kNone","conv_result_scale":1,"side_input_scale":0}}
  ROOT r = f32[6,3,2]{2,1,0} get-tuple-element(g), index=0
}
"""


def test_a_grouped_backward_filter_whose_stride_leaves_rows_unread() -> None:
    """Two groups of two input features, three outputs each, a stride of 2 over 8 rows
    (the last row never read): ``dw[o, k, i] = sum_{b, s} x[b, 2s + k, 2 (o // 3) + i]
    dy[b, s, o]``, the forward's groups as the gradient's batch groups, ``x`` sliced to
    the rows the forward read."""
    rng = _rng()
    x = rng.standard_normal((2, 8, 4)).astype(np.float32)
    dy = rng.standard_normal((2, 3, 6)).astype(np.float32)
    expected = np.zeros((6, 3, 2))
    for o in range(6):
        for k in range(3):
            for s in range(3):
                features = x[:, 2 * s + k, 2 * (o // 3) : 2 * (o // 3) + 2].astype(np.float64)
                expected[o, k, :] += dy[:, s, o].astype(np.float64) @ features
    module = parse_module(XLA_GROUPED_BACKWARD_FILTER)
    assert rewrite_xla_library_calls(module)
    (gradient,) = [i for i in module.entry.instructions if i.opcode == "convolution"]
    assert gradient.attributes["batch_group_count"] == 2
    assert gradient.operands[0].opcode == "slice"
    assert gradient.operands[0].array_shape.dims == (2, 7, 4)
    np.testing.assert_allclose(evaluate_module(module, [x, dy]), expected, rtol=1e-5, atol=1e-5)


XLA_BACKWARD_INPUT = """
HloModule xla_backward_input

ENTRY main {{
  dy = f32[2,{m},8]{{2,1,0}} parameter(0)
  w = f32[8,3,{per_group}]{{2,1,0}} parameter(1)
  g = (f32[2,9,4]{{2,1,0}}, u8[0]{{0}}) custom-call(dy, w), window={{size=3 stride=2 pad=1_1 rhs_dilate={dilation}}}, dim_labels=b0f_o0i->b0f, feature_group_count={groups}, custom_call_target="__cudnn$convBackwardInput", backend_config={{"cudnn_conv_backend_config":{{"activation_mode":"kNone","conv_result_scale":1,"side_input_scale":0}}}}
  ROOT r = f32[2,9,4]{{2,1,0}} get-tuple-element(g), index=0
}}
"""


@pytest.mark.parametrize(("groups", "dilation"), [(1, 1), (1, 2), (2, 1), (4, 2)])
def test_a_cudnn_backward_input_is_the_forward_convolution_s_input_gradient(
    groups: int, dilation: int
) -> None:
    """The forward ``y[b, s, o] = sum_{k, c in o's group} x[b, 2s + dk - 1, c] w[o, k, c']``
    (9 rows, padded by 1, stride 2, dilation d, ``G`` groups of ``4 / G`` features and
    ``8 / G`` outputs; four groups a depthwise convolution): the call gives ``dx[b, i, c]``, the sum of ``dy[b, s, o] w[o, k,
    c']`` over the taps that read row ``i``."""
    per_group, outputs_per_group = 4 // groups, 8 // groups
    m = (9 + 2 - (2 * dilation + 1)) // 2 + 1
    rng = _rng()
    dy = rng.standard_normal((2, m, 8)).astype(np.float32)
    w = rng.standard_normal((8, 3, per_group)).astype(np.float32)
    expected = np.zeros((2, 9, 4))
    for s in range(m):
        for k in range(3):
            row = 2 * s + dilation * k - 1
            if not 0 <= row < 9:
                continue
            for c in range(4):
                group = c // per_group
                outputs = slice(group * outputs_per_group, (group + 1) * outputs_per_group)
                expected[:, row, c] += dy[:, s, outputs].astype(np.float64) @ w[
                    outputs, k, c % per_group
                ].astype(np.float64)
    text = XLA_BACKWARD_INPUT.format(m=m, per_group=per_group, dilation=dilation, groups=groups)
    module = parse_module(text)
    assert rewrite_xla_library_calls(module)
    (gradient,) = [i for i in module.entry.instructions if i.opcode == "convolution"]
    assert gradient.attributes.get("feature_group_count", 1) == groups
    np.testing.assert_allclose(evaluate_module(module, [dy, w]), expected, rtol=1e-5, atol=1e-5)


XLA_GEMM = """
HloModule xla_gemm

ENTRY main {
  a = f32[4,3]{1,0} parameter(0)
  b = f32[5,3]{1,0} parameter(1)
  g = (f32[4,5]{1,0}, s8[1024]{0}) custom-call(a, b), custom_call_target="__cublas$lt$matmul", backend_config={"gemm_backend_config":{"alpha_imag":0,"alpha_real":1,"beta":0,"dot_dimension_numbers":{"lhs_batch_dimensions":[],"lhs_contracting_dimensions":["1"],"rhs_batch_dimensions":[],"rhs_contracting_dimensions":["1"]},"epilogue":"DEFAULT"}}
  r = f32[4,5]{1,0} get-tuple-element(g), index=0
  one = f32[] constant(1)
  later = f32[] add(one, one), control-predecessors={g, r}
  ROOT t = (f32[4,5]{1,0}, f32[]) tuple(r, later)
}
"""


def test_a_cublas_gemm_without_epilogue_is_its_dot_and_keeps_the_edges_to_it() -> None:
    rng = _rng()
    a = rng.standard_normal((4, 3)).astype(np.float32)
    b = rng.standard_normal((5, 3)).astype(np.float32)
    module = parse_module(XLA_GEMM)
    product, _ = evaluate_module(module, [a, b])
    np.testing.assert_allclose(product, a @ b.T, rtol=1e-5, atol=1e-5)
    assert rewrite_xla_library_calls(module)
    (dot,) = [i for i in module.entry.instructions if i.opcode == "dot"]
    later = next(i for i in module.entry.instructions if i.name == "later")
    assert later.attributes["control-predecessors"].names == (dot.name,)
    product, _ = evaluate_module(module, [a, b])
    np.testing.assert_allclose(product, a @ b.T, rtol=1e-5, atol=1e-5)


XLA_GEMM_EPILOGUE = """
HloModule xla_gemm_epilogue

ENTRY main {{
  a = {t}[4,3]{{1,0}} parameter(0)
  b = {t}[3,5]{{1,0}} parameter(1)
  {extra}
  g = ({t}[4,5]{{1,0}}, s8[1024]{{0}}) custom-call(a, b{operands}), custom_call_target="__cublas$lt$matmul", backend_config={{"gemm_backend_config":{{"alpha_real":{alpha_real},"alpha_imag":{alpha_imag},"beta":{beta},"dot_dimension_numbers":{{"lhs_batch_dimensions":[],"lhs_contracting_dimensions":["1"],"rhs_batch_dimensions":[],"rhs_contracting_dimensions":["0"]}},"epilogue":"{epilogue}"}}}}
  ROOT r = {t}[4,5]{{1,0}} get-tuple-element(g), index=0
}}
"""

_NUMPY = {"f32": np.float32, "bf16": np.float32, "c64": np.complex64}


@pytest.mark.parametrize(
    ("element", "alpha", "beta", "epilogue"),
    [
        ("f32", -0.25, 1.0, "DEFAULT"),  # c - 0.25 (a @ b): an SGD update folded in
        ("c64", 2 + 1j, 1.0, "DEFAULT"),
        ("f32", 1, 0.0, "RELU"),
        ("f32", 1, 0.5, "BIAS_RELU"),
        ("bf16", 1, 0.0, "BIAS_GELU"),
        ("f32", 1, 0.0, "GELU"),
    ],
)
def test_a_cublas_gemm_with_scales_and_an_epilogue(element, alpha, beta, epilogue) -> None:
    """``activation(alpha (a @ b) + beta c + bias)``, GELU in its tanh form, computed in
    f32 for bf16 and rounded once."""
    rng = _rng()

    def draw(*shape):
        values = rng.standard_normal(shape)
        if element == "c64":
            values = values + 1j * rng.standard_normal(shape)
        return values.astype(_NUMPY[element])

    a, b, c, bias = draw(4, 3), draw(3, 5), draw(4, 5), draw(5)
    if element == "bf16":  # values bf16 holds exactly: the expectation is exact too
        a, b, bias = (np.asarray(v, ml_dtypes.bfloat16).astype(np.float32) for v in (a, b, bias))
    arguments, extra, operands = [a, b], [], ""
    if beta:
        arguments.append(c)
        extra.append(f"c = {element}[4,5]{{1,0}} parameter(2)")
        operands += ", c"
    if "BIAS" in epilogue:
        arguments.append(bias)
        extra.append(f"bias = {element}[5]{{0}} parameter({len(arguments) - 1})")
        operands += ", bias"
    text = XLA_GEMM_EPILOGUE.format(
        t=element,
        extra="\n  ".join(extra),
        operands=operands,
        alpha_real=np.real(alpha),
        alpha_imag=np.imag(alpha),
        beta=beta,
        epilogue=epilogue,
    )
    wide = np.complex128 if element == "c64" else np.float64
    expected = alpha * (a.astype(wide) @ b.astype(wide)) + beta * c.astype(wide)
    if "BIAS" in epilogue:
        expected = expected + bias.astype(wide)
    if epilogue.endswith("RELU"):
        expected = np.maximum(expected, 0)
    if epilogue.endswith("GELU"):
        expected = (
            0.5 * expected * (1 + np.tanh(np.sqrt(2 / np.pi) * (expected + 0.044715 * expected**3)))
        )
    module = parse_module(text)
    assert rewrite_xla_library_calls(module)
    assert not any(i.opcode == "custom-call" for i in module.entry.instructions)
    if element == "bf16":
        arguments = [np.asarray(v, ml_dtypes.bfloat16) for v in arguments]
    got = np.asarray(evaluate_module(module, arguments)).astype(wide)
    tolerance = 2**-7 if element == "bf16" else 1e-5
    np.testing.assert_allclose(got, expected, rtol=tolerance, atol=tolerance)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            XLA_GEMM.replace(
                '"lhs_contracting_dimensions":["1"]', '"lhs_contracting_dimensions":["7"]'
            ),
            r"'g' \(custom_call_target '__cublas\$lt\$matmul'\): its attributes describe no valid"
            r" dot: .*dimension 7 is out of range",
        ),
        (
            XLA_TRSM.replace(
                'backend_config={"left_side"', 'backend_config="garbage{", x={"left_side"'
            ),
            r"'s' \(custom_call_target '__cublas\$triangularSolve'\): backend_config is not",
        ),
        (
            XLA_CONV.format(config=CONV_CONFIG.format(mode="kNone")).replace(
                "window={size=3 pad=1_1}, ", ""
            ),
            r"'c' \(custom_call_target '__cudnn\$convBiasActivationForward'\): a convolution"
            " call without window",
        ),
    ],
    ids=["gemm-dimension-out-of-range", "backend-config-not-json", "convolution-without-window"],
)
def test_a_malformed_call_is_refused_naming_it(text: str, message: str) -> None:
    """Never a guess (a default for an unreadable configuration) nor an internal error."""
    with pytest.raises(HloError, match=message):
        rewrite_xla_library_calls(parse_module(text))
