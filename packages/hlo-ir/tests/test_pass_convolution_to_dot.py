"""convolution-to-dot: im2col and one dot compute what the convolution computes.

The oracle is the reference evaluator's convolution (itself checked against
XLA:CPU in test_evaluator_linalg.py): every dimension order, stride, padding
(negative too), base and window dilation, window reversal, feature group
count and batch group count, in f32 (to the reassociation bound of a sum), integers (exactly) and
bf16 (one rounding of the sum).
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from heron.hlo.evaluator import evaluate_module, random_arguments
from heron.hlo.parser import parse_module
from heron.hlo.passes import HloPass, run_pipeline, simplification_pipeline
from heron.hlo.passes.convolution_to_dot import lower_convolutions
from heron.hlo.printer import print_module

LABELS = {
    # name: (input labels, kernel labels, output labels)
    "nchw": ("bf01", "oi01", "bf01"),
    "nhwc": ("b01f", "01io", "b01f"),
    "mixed": ("f0b1", "i10o", "1bf0"),
}


def _parse_window(window: str, rank: int) -> dict[str, list]:
    """``size=3x2 stride=2x1 pad=1_1x0_1 ...`` as per-dimension lists (defaults filled)."""
    fields = {"size": [1] * rank, "stride": [1] * rank, "pad": [(0, 0)] * rank}
    fields |= {"lhs_dilate": [1] * rank, "rhs_dilate": [1] * rank}
    for part in window.split():
        key, _, value = part.partition("=")
        items = value.split("x")
        if key == "pad":
            fields[key] = [tuple(int(v) for v in item.split("_")) for item in items]
        elif key in fields:
            fields[key] = [int(item) for item in items]
    return fields


def _conv_text(
    labels: str,
    element: str,
    batch: int,
    features: int,
    spatial: tuple[int, ...],
    out_features: int,
    window: str,
    groups: int,
    batch_groups: int = 1,
) -> str:
    inputs, kernels, outputs = LABELS[labels]
    rank = len(spatial)
    if rank == 1:  # the same letters, one spatial dimension
        inputs, kernels, outputs = (s.replace("1", "") for s in (inputs, kernels, outputs))
    w = _parse_window(window, rank)
    out_spatial = []
    for i, size in enumerate(spatial):
        low, high = w["pad"][i]
        padded = (size - 1) * w["lhs_dilate"][i] + 1 + low + high
        extent = (w["size"][i] - 1) * w["rhs_dilate"][i] + 1
        out_spatial.append(max(0, (padded - extent) // w["stride"][i] + 1))

    def dims(pattern: str, sizes: dict[str, int]) -> str:
        return ",".join(str(sizes[c]) for c in pattern)

    def spatial_sizes(values: list[int] | tuple[int, ...]) -> dict[str, int]:
        return {str(i): s for i, s in enumerate(values)}

    in_sizes = {"b": batch, "f": features, **spatial_sizes(spatial)}
    k_sizes = {"i": features // groups, "o": out_features, **spatial_sizes(w["size"])}
    out_sizes = {"b": batch // batch_groups, "f": out_features, **spatial_sizes(out_spatial)}
    return (
        f"HloModule conv\nENTRY main {{\n"
        f"  x = {element}[{dims(inputs, in_sizes)}] parameter(0)\n"
        f"  w = {element}[{dims(kernels, k_sizes)}] parameter(1)\n"
        f"  ROOT c = {element}[{dims(outputs, out_sizes)}] convolution(x, w), window={{{window}}},"
        f" dim_labels={inputs}_{kernels}->{outputs}"
        + (f", feature_group_count={groups}" if groups > 1 else "")
        + (f", batch_group_count={batch_groups}" if batch_groups > 1 else "")
        + "\n}\n"
    )


WINDOWS_2D = [
    "size=3x3",
    "size=3x2 stride=2x1 pad=1_1x0_1",
    "size=2x3 pad=-1_2x1_0 lhs_dilate=2x1 rhs_dilate=1x2",
    "size=3x3 stride=2x2 pad=1_1x1_1 rhs_reversal=1x0",
    "size=1x1",
    # fewer output positions than kernel positions: one slice per output position
    "size=5x4 stride=2x1 pad=1_0x0_1 rhs_dilate=1x2",
    "size=6x5 pad=0_1x-1_1 lhs_dilate=2x1 rhs_reversal=0x1",
]


@pytest.mark.parametrize(
    ("labels", "window", "groups"), list(itertools.product(sorted(LABELS), WINDOWS_2D, (1, 2)))
)
def test_lowered_2d_convolutions_agree_with_the_evaluator(labels, window, groups):
    text = _conv_text(labels, "f32", 2, 2 * groups, (7, 6), 2 * groups, window, groups)
    _check(text, exact=False)


@pytest.mark.parametrize("element", ["s32", "bf16", "f16"])
def test_other_element_types(element):
    window = "size=3 stride=2 pad=2_1 lhs_dilate=2"
    text = _conv_text("nhwc", element, 2, 3, (9,), 4, window, 1)
    _check(text, exact=element == "s32")


def test_the_corpus_conv1d_program_becomes_one_dot():
    text = _conv_text("nhwc", "f32", 2, 4, (16,), 8, "size=3 pad=1_1", 1)
    module = parse_module(text)
    run_pipeline(module, simplification_pipeline())
    opcodes = [i.opcode for i in module.entry.instructions]
    assert "convolution" not in opcodes and opcodes.count("dot") == 1, print_module(module)


@pytest.mark.parametrize(
    ("labels", "window", "batch_groups"),
    list(itertools.product(sorted(LABELS), WINDOWS_2D, (2, 4))),
)
def test_batch_grouped_2d_convolutions_agree_with_the_evaluator(labels, window, batch_groups):
    # Input batch 2B, output batch 2; each of the B batch groups meets its own
    # three output features.
    text = _conv_text(
        labels, "f32", 2 * batch_groups, 3, (7, 6), 3 * batch_groups, window, 1, batch_groups
    )
    _check(text, exact=False)


@pytest.mark.parametrize(
    ("window", "batch_groups"),
    list(
        itertools.product(
            ["size=3", "size=3 stride=2 pad=2_1 lhs_dilate=2", "size=2 pad=-1_3 rhs_dilate=3"],
            (2, 4),
        )
    ),
)
def test_batch_grouped_1d_convolutions_agree_with_the_evaluator(window, batch_groups):
    text = _conv_text(
        "mixed", "f32", 3 * batch_groups, 2, (9,), 2 * batch_groups, window, 1, batch_groups
    )
    _check(text, exact=False)


@pytest.mark.parametrize("element", ["s32", "bf16"])
def test_batch_grouped_other_element_types(element):
    text = _conv_text("nchw", element, 4, 3, (8,), 4, "size=3 stride=2 pad=1_1", 1, 2)
    _check(text, exact=element == "s32")


def test_a_depthwise_weight_gradient_as_jax_writes_it():
    # jax.grad of a depthwise 3x3 SAME convolution (NHWC/HWIO, 4 channels)
    # with respect to its kernel: the input x is the lhs with its features as
    # the batch (f01b), the output gradient the rhs, one batch group per channel.
    text = """\
HloModule depthwise_grad
ENTRY main {
  x = f32[2,6,6,4] parameter(0)
  dy = f32[2,6,6,4] parameter(1)
  ROOT dw = f32[3,3,1,4] convolution(x, dy), window={size=6x6 pad=1_1x1_1},
    dim_labels=f01b_i01o->01bf, batch_group_count=4
}
"""
    _check(text, exact=False)


def test_a_weight_gradient_slices_once_per_output_position():
    # jax's gradient of a 3x3 SAME convolution over a 16x16 image with respect to
    # its kernel (flax's Conv: the input's features as the batch, f01b) is a
    # convolution with a 16x16 window and a 3x3 output. One slice per kernel
    # position made a concatenate of 256 slices, which the fusion passes take one
    # by one (minutes); one slice per output position makes 9, the same patches.
    text = """\
HloModule weight_gradient
ENTRY main {
  x = f32[4,16,16,3] parameter(0)
  dy = f32[4,16,16,8] parameter(1)
  ROOT dw = f32[3,3,3,8] convolution(x, dy), window={size=16x16 pad=1_1x1_1},
    dim_labels=f01b_i01o->01bf
}
"""
    module = parse_module(text)
    run_pipeline(module, HloPass("under-test", lower_convolutions))
    slices = [i for i in module.entry.instructions if i.opcode == "slice"]
    (patches,) = [i for i in module.entry.instructions if i.opcode == "concatenate"]
    assert len(slices) == len(patches.operands) == 9, print_module(module)
    _check(text, exact=False)


def _check(text: str, *, exact: bool) -> None:
    original, module = parse_module(text), parse_module(text)
    run_pipeline(module, HloPass("under-test", lower_convolutions))
    opcodes = [i.opcode for i in module.entry.instructions]
    assert "convolution" not in opcodes and opcodes.count("dot") == 1, print_module(module)
    assert module.entry.root_instruction.shape == original.entry.root_instruction.shape
    for seed in range(2):
        arguments = random_arguments(original, np.random.default_rng(seed))
        expected = np.asarray(evaluate_module(original, arguments))
        got = np.asarray(evaluate_module(module, arguments))
        if exact:
            assert got.tobytes() == expected.tobytes()
        else:
            np.testing.assert_allclose(
                got.astype(np.float64),
                expected.astype(np.float64),
                rtol=2e-2 if got.dtype.itemsize == 2 else 1e-5,
                atol=1e-5,
            )
