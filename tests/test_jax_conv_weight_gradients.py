"""The weight gradient of a grouped or depthwise convolution, as jax writes it, runs.

jax differentiates a convolution with ``feature_group_count`` G > 1 with
respect to its kernel as a convolution with ``batch_group_count`` G (the
input's features become the batch, split into G groups). heron lowers it
like any convolution (convolution-to-dot: im2col and one dot, the batch
groups as the dot's batch dimension); here ``heron.jax.jit`` on the
interpreter is compared with ``jax.jit`` on the CPU (XLA:CPU) under the
program corpus' tolerance.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from heron_test_support.programs import assert_close

import heron.jax as heron_jax

#: name: (input shape, kernel shape, dimension numbers, feature_group_count, strides, padding)
CASES = {
    "depthwise_2d_same": ((2, 6, 6, 4), (3, 3, 1, 4), ("NHWC", "HWIO", "NHWC"), 4, (1, 1), "SAME"),
    "depthwise_2d_strided": (
        (2, 7, 5, 3),
        (3, 2, 1, 6),
        ("NHWC", "HWIO", "NHWC"),
        3,
        (2, 1),
        "VALID",
    ),
    "grouped_2d_nchw": ((3, 4, 6, 5), (6, 2, 3, 3), ("NCHW", "OIHW", "NCHW"), 2, (1, 2), "SAME"),
    "depthwise_1d": ((2, 9, 4), (3, 1, 4), ("NWC", "WIO", "NWC"), 4, (2,), [(2, 1)]),
}


pytestmark = pytest.mark.usefixtures("jax_32_bit")


def _weight_gradient(name: str):
    _, _, numbers, groups, strides, padding = CASES[name]

    def loss(w, x):
        y = jax.lax.conv_general_dilated(
            x, w, strides, padding, dimension_numbers=numbers, feature_group_count=groups
        )
        return jnp.sum(jnp.sin(y) * y)

    return jax.grad(loss)


def _arguments(name: str) -> tuple[np.ndarray, np.ndarray]:
    x_shape, w_shape = CASES[name][:2]
    rng = np.random.default_rng(0)
    w = rng.standard_normal(w_shape).astype(np.float32)
    x = rng.standard_normal(x_shape).astype(np.float32)
    return w, x


@pytest.mark.parametrize("name", sorted(CASES))
def test_jax_lowers_the_weight_gradient_to_a_batch_grouped_convolution(name: str) -> None:
    lowered = heron_jax.lower(_weight_gradient(name), *_arguments(name))
    counts = [
        int(i.attributes.get("batch_group_count", 1))
        for i in lowered.module.entry.instructions
        if i.opcode == "convolution"
    ]
    assert CASES[name][3] in counts, lowered.hlo_text


@pytest.mark.parametrize("name", sorted(CASES))
def test_the_weight_gradient_equals_jax_on_the_cpu(name: str) -> None:
    function, arguments = _weight_gradient(name), _arguments(name)
    got = heron_jax.jit(function, backend="interpreter", cache_dir=False)(*arguments)
    expected = jax.jit(function)(*arguments)
    assert np.shape(got) == np.shape(expected)
    assert_close(np.asarray(got), np.asarray(expected), name)
