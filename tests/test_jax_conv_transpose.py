"""Transposed convolutions as flax, haiku and equinox write them (``jax.lax.conv_transpose``
with their layouts, built here without those libraries), compiled for an H100.

``jax.lax.conv_transpose`` without ``transpose_kernel`` (flax ``nn.ConvTranspose``,
haiku ``hk.Conv*DTranspose``, equinox ``ConvTranspose``) is a convolution of the
input base-dilated by the stride with the filter read unreversed. XLA:GPU's
``MatchBackwardInput`` does not take that filter for a cuDNN data gradient (only
a reversed filter, a 1x1 window or a constant one), so the convolution is a
forward cuDNN call on the input padded and dilated by a ``pad`` (its
``GpuConvPaddingLegalization``); heron does the same, and the interpreter's host
fallback and numpy library both agree with XLA:CPU.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
import pytest
from heron_test_support.jax_config import jax_x64

from heron.compiler import Target
from heron.compiler.executable import compile_program
from heron.compiler.library_convolution import convolution_verdict
from heron.hlo.evaluator import evaluate_module
from heron.hlo.parser import parse_module
from heron.runtime.core.convolution import ConvolutionCall
from heron.runtime.core.executor import load_executable
from heron.runtime.core.thunks import LibraryCallThunk, walk
from heron.runtime.interpreter import InterpreterDevice

H100 = Target.preset("h100")


def _transpose(
    shape, features, kernel, strides, padding, numbers: tuple[str, str, str]
) -> tuple[Callable, dict]:
    """``jax.lax.conv_transpose`` as the layers call it (``transpose_kernel`` False), with
    their dimension numbers: the HLO is theirs without needing flax, haiku or equinox
    (the tests read no model library; the model corpus has the layers themselves)."""
    import jax

    lhs, rhs, _ = numbers
    in_features = shape[lhs.index("C")]
    sizes = {"I": in_features, "O": features}
    spatial = iter(kernel)
    w_shape = tuple(sizes[c] if c in sizes else next(spatial) for c in rhs)

    def apply(params, x):
        return jax.lax.conv_transpose(x, params["w"], strides, padding, dimension_numbers=numbers)

    return apply, {"w": np.zeros(w_shape, np.float32)}


_NHWC = ("NHWC", "HWIO", "NHWC")
_NCHW = ("NCHW", "OIHW", "NCHW")

#: name -> (input shape (batch first), a function building (apply(params, x), params)):
#: the layouts flax (channels last), haiku (either) and equinox (channels first, vmapped
#: to a batch) give jax.lax.conv_transpose.
PROGRAMS = {
    "flax_2d_nhwc_strided_same": (
        (2, 5, 5, 3), lambda s: _transpose(s, 4, (3, 3), (2, 2), "SAME", _NHWC)
    ),
    "flax_1d_nwc_strided_valid": (
        (2, 7, 3), lambda s: _transpose(s, 5, (4,), (3,), "VALID", ("NWC", "WIO", "NWC"))
    ),
    "flax_3d_ndhwc_same": (
        (1, 3, 4, 3, 2),
        lambda s: _transpose(s, 3, (2, 3, 2), (2, 1, 2), "SAME", ("NDHWC", "DHWIO", "NDHWC")),
    ),
    "haiku_2d_nchw_strided_same": (
        (2, 3, 5, 5), lambda s: _transpose(s, 4, (3, 3), (2, 2), "SAME", _NCHW)
    ),
    "haiku_2d_nhwc_strided_valid": (
        (2, 4, 4, 3), lambda s: _transpose(s, 2, (3, 3), (2, 2), "VALID", _NHWC)
    ),
    "haiku_1d_nwc_strided_same": (
        (2, 6, 3), lambda s: _transpose(s, 4, (3,), (2,), "SAME", ("NWC", "WIO", "NWC"))
    ),
    "equinox_2d_nchw_strided": (
        (2, 3, 4, 4), lambda s: _transpose(s, 2, (3, 3), (2, 2), ((1, 1), (1, 1)), _NCHW)
    ),
    "equinox_3d_ncdhw_strided": (
        (1, 2, 3, 3, 3),
        lambda s: _transpose(s, 2, (2, 2, 2), (2, 2, 2), "VALID", ("NCDHW", "OIDHW", "NCDHW")),
    ),
}  # fmt: skip


@pytest.fixture(scope="module", params=sorted(PROGRAMS))
def program(request):
    import jax

    with jax_x64(False):  # jax's flag is a global other suites turn on
        shape, build = PROGRAMS[request.param]
        apply, params = build(shape)
        x = np.random.default_rng(7).standard_normal(shape).astype(np.float32)
        params = jax.tree_util.tree_map(
            lambda a: np.random.default_rng(a.size).standard_normal(a.shape).astype(np.float32),
            params,
        )
        jitted = jax.jit(apply, keep_unused=True)
        text = jitted.lower(params, x).as_text(dialect="hlo")
        expected = np.asarray(jitted(params, x), np.float64)  # XLA:CPU
    inputs = [np.asarray(a) for a in jax.tree_util.tree_leaves((params, x))]
    module = parse_module(text)
    compiled = compile_program(module, H100, ("interpreter",))
    return request.param, module, compiled, inputs, expected


def _calls(compiled) -> list[ConvolutionCall]:
    return [
        ConvolutionCall.from_thunk(t)
        for t in walk(compiled.artefact.program)
        if isinstance(t, LibraryCallThunk) and t.operation == "convolution"
    ]


def test_a_transposed_convolution_is_xla_s_forward_call_on_the_dilated_input(program):
    _, module, compiled, _, _ = program
    (conv,) = [i for i in module.instructions() if i.opcode == "convolution"]
    window = conv.attributes["window"].dims
    numbers = conv.attributes["dim_labels"]
    # jax's conv_transpose: base-dilated by the stride, the filter unreversed
    assert all(d.stride == 1 and not d.window_reversal for d in window)
    assert conv.operands[1].opcode != "reverse"
    assert convolution_verdict(conv, H100) == ""
    (call,) = _calls(compiled)
    spatial = len(numbers.input_spatial)
    lhs = conv.operands[0].shape.dims
    dilated = [
        n + (n - 1) * (d.base_dilation - 1) + d.pad_low + d.pad_high
        for n, d in zip((lhs[a] for a in numbers.input_spatial), window, strict=True)
    ]
    if spatial == 1:  # the contract's 1-D convolution has a unit spatial dimension first
        dilated = [1, *dilated]
    assert call.mode == "forward"
    assert list(call.x_dims[2:]) == dilated
    assert set(call.padding_low) | set(call.padding_high) == {0}
    assert set(call.stride) == {1}
    assert call.x_dims[1] == lhs[numbers.input_feature]
    assert call.y_dims[1] == conv.shape.dims[numbers.output_feature]


@pytest.mark.parametrize("libraries", [(), ("convolution",)])
def test_the_interpreter_computes_it_as_xla_cpu_does(program, libraries):
    _, _, compiled, inputs, expected = program
    executable = load_executable(compiled.artefact, InterpreterDevice(libraries=libraries))
    (choice,) = executable.library_choices
    assert choice.chosen == ("numpy" if libraries else "host")
    (out,) = executable.run(inputs)
    (call,) = _calls(compiled)
    scale = max(1.0, float(np.abs(expected).max()))
    error = float(np.abs(np.asarray(out, np.float64) - expected).max())
    products = call.summed_terms()
    if libraries and call.compute == "tf32":
        bound = 8 * 2.0**-11 * math.sqrt(products) * scale
    else:
        bound = 8 * 2.0**-24 * products * scale
    assert error <= bound, (error, bound)


def _dilated_module(window: str, filter_text: str) -> str:
    return f"""
HloModule conv
ENTRY main {{
  x = f32[2,4,4,3]{{3,2,1,0}} parameter(0)
  {filter_text}
  ROOT y = f32[2,7,7,5]{{3,2,1,0}} convolution(x, w), window={{{window}}},
    dim_labels=b01f_01io->b01f
}}
"""


def _constant_filter_text() -> str:
    values = np.arange(3 * 3 * 3 * 5, dtype=np.float32).reshape(3, 3, 3, 5) % 7 - 3
    rows = ", ".join(
        "{" + ", ".join("{" + ", ".join("{" + ", ".join(f"{v:g}" for v in c) + "}" for c in b)
                         + "}" for b in a) + "}"
        for a in values
    )  # fmt: skip
    return f"w = f32[3,3,3,5]{{3,2,1,0}} constant({{{rows}}})"


@pytest.mark.parametrize(
    ("window", "filter_text", "inputs"),
    [
        ("size=1x1 pad=0_0x0_0 lhs_dilate=2x2", "w = f32[1,1,3,5]{3,2,1,0} parameter(1)", 2),
        ("size=3x3 pad=1_1x1_1 lhs_dilate=2x2", None, 1),
    ],
    ids=["1x1_filter", "constant_filter"],
)
def test_a_1x1_or_constant_filter_is_xla_s_data_gradient(window, filter_text, inputs):
    # XLA's MatchBackwardInput: a base-dilated convolution with a 1x1 window or a
    # constant filter is a backward-input call (the constant reversed, then undone).
    module = parse_module(_dilated_module(window, filter_text or _constant_filter_text()))
    compiled = compile_program(module, H100, ("interpreter",))
    (call,) = _calls(compiled)
    assert call.mode == "data_gradient"
    assert (call.x_dims, call.y_dims, call.stride) == ((2, 5, 7, 7), (2, 3, 4, 4), (2, 2))
    rng = np.random.default_rng(4)
    arguments = [
        rng.standard_normal(p.shape.dims).astype(np.float32) for p in module.entry.parameters
    ][:inputs]
    expected = np.asarray(evaluate_module(module, arguments))
    executable = load_executable(compiled.artefact, InterpreterDevice())
    (out,) = executable.run(arguments)
    np.testing.assert_array_equal(out, expected)  # the host computes the HLO itself


def test_a_strided_base_dilated_reversed_window_keeps_im2col():
    # neither a data gradient (a window stride) nor a forward convolution (reversed)
    text = _dilated_module(
        "size=3x3 stride=2x2 pad=1_1x1_1 lhs_dilate=2x2 rhs_reversal=1x1",
        "w = f32[3,3,3,5]{3,2,1,0} parameter(1)",
    ).replace("[2,7,7,5]", "[2,4,4,5]")
    conv = parse_module(text).entry.root_instruction
    why = convolution_verdict(conv, H100)
    assert "window stride" in why and "reversed window" in why
