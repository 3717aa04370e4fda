"""jax's cuDNN attention (``implementation="cudnn"``) lowered for CUDA, run by heron.

``jax.nn.dot_product_attention(..., implementation="cudnn")`` lowers to XLA's
``__cudnn$fmhaSoftmax`` / ``__cudnn$fmhaScaleBiasSoftmax`` calls and their
``...Backward`` (``tests/data/cudnn_attention/generate.py`` wrote the modules, jax
told that cuDNN is there). heron's ``xla-library-calls`` pass makes them its own
fused-attention calls (``heron.hlo.passes.xla_attention_calls``); here each module
is compiled for the interpreter, run, and compared with the same function under
``jax.jit`` on the CPU with ``implementation="xla"`` in f32 (the same 16-bit
inputs, widened): the forward's output and the gradients of q, k, v and the bias,
within 1e-2 of the largest value (measured at most 6.5e-3: heron's results are
rounded to the 16-bit type, and its probabilities before the second product, as
cuDNN's are). What heron's call does not compute is refused by name.
"""

from __future__ import annotations

from pathlib import Path

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest

from heron.compiler import Target
from heron.compiler.executable import compile_executable
from heron.hlo.errors import HloError
from heron.hlo.evaluator import evaluate_module, flatten_literal
from heron.hlo.parser import parse_module
from heron.jax.devices import load_on_device, open_device

DATA = Path(__file__).parent / "data" / "cudnn_attention"
dpa = jax.nn.dot_product_attention


def _loss(**options):
    return lambda q, k, v, *bias: (
        dpa(q, k, v, *bias, implementation="xla", **options).astype(jnp.float32).sum()
    )


def _gradients(count: int, **options):
    return jax.grad(_loss(**options), argnums=tuple(range(count)))


#: Each module's function, as jax.jit computes it on the CPU, and its operands' shapes.
CASES = {
    "forward_causal": (
        lambda q, k, v: dpa(q, k, v, is_causal=True, implementation="xla"),
        [(2, 16, 2, 8)] * 3,
    ),
    "forward_bias_scale": (
        lambda q, k, v, b: dpa(q, k, v, bias=b, scale=0.3, implementation="xla"),
        [(2, 16, 2, 8)] * 3 + [(2, 2, 16, 16)],
    ),
    "forward_grouped": (
        lambda q, k, v: dpa(q, k, v, implementation="xla"),
        [(2, 16, 4, 8), (2, 12, 2, 8), (2, 12, 2, 8)],
    ),
    "backward_causal_f16": (_gradients(3, is_causal=True), [(2, 16, 2, 8)] * 3),
    "backward_grouped": (_gradients(3), [(2, 16, 4, 8), (2, 12, 2, 8), (2, 12, 2, 8)]),
    "backward_bias": (
        lambda q, k, v, b: jax.grad(_loss(), argnums=(0, 1, 2))(q, k, v, b),
        [(2, 16, 2, 8)] * 3 + [(1, 2, 16, 16)],
    ),
    "backward_bias_gradient": (
        lambda q, k, v, b: jax.grad(_loss(), argnums=(0, 1, 2, 3))(q, k, v, b),
        [(2, 16, 2, 8)] * 3 + [(2, 2, 16, 16)],
    ),
    "forward_padding": (
        lambda q, k, v, ql, kl: dpa(
            q, k, v, query_seq_lengths=ql, key_value_seq_lengths=kl, implementation="xla"
        ),
        [(2, 16, 2, 8)] * 3 + [(2,), (2,)],
    ),
    "forward_window": (
        lambda q, k, v: dpa(
            q, k, v, is_causal=True, local_window_size=(4, 0), implementation="xla"
        ),
        [(2, 16, 2, 8)] * 3,
    ),
    "backward_padding_causal": (
        lambda q, k, v, ql, kl: jax.grad(
            lambda q, k, v: _loss(query_seq_lengths=ql, key_value_seq_lengths=kl, is_causal=True)(
                q, k, v
            ),
            argnums=(0, 1, 2),
        )(q, k, v),
        [(2, 16, 2, 8)] * 3 + [(2,), (2,)],
    ),
    "backward_padding_bias_gradient": (
        lambda q, k, v, b, ql, kl: jax.grad(
            lambda q, k, v, b: _loss(query_seq_lengths=ql, key_value_seq_lengths=kl)(q, k, v, b),
            argnums=(0, 1, 2, 3),
        )(q, k, v, b),
        [(2, 16, 2, 8)] * 3 + [(1, 2, 16, 16), (2,), (2,)],
    ),
    "backward_window_grouped": (
        _gradients(3, is_causal=True, local_window_size=(4, 0)),
        [(2, 16, 4, 8), (2, 16, 2, 8), (2, 16, 2, 8)],
    ),
}

#: The sequence lengths of the padded cases: queries, then keys and values (of 16).
LENGTHS = (np.array([16, 7], np.int32), np.array([11, 16], np.int32))


@pytest.fixture(scope="module")
def device():
    return open_device("interpreter")[1]


def _inputs(name: str, shapes) -> list[np.ndarray]:
    dtype = ml_dtypes.bfloat16 if "f16" not in name else np.float16
    rng = np.random.default_rng(len(name))
    tensors = [rng.standard_normal(shape).astype(dtype) for shape in shapes if len(shape) == 4]
    return tensors + list(LENGTHS[: len(shapes) - len(tensors)])


@pytest.mark.parametrize("name", sorted(CASES))
def test_cudnn_attention_runs_as_jax_computes_it(name: str, device) -> None:
    text = (DATA / f"{name}.hlo").read_text()
    assert "__cudnn$fmha" in text
    module = parse_module(text, name)
    function, shapes = CASES[name]
    inputs = _inputs(name, shapes)
    artefact = compile_executable(module, Target.preset("h100"), ("interpreter",))
    targets = {k.key for k in artefact.kernels} | {str(t) for t in artefact.program}
    assert not any("__cudnn$" in target for target in targets)
    got = load_on_device(artefact, device, "interpreter").run(inputs)
    # in f32: jax's CPU dots take no f16 operands with an f32 result
    wide = [np.asarray(x, np.float32) if x.ndim == 4 else x for x in inputs]
    expected = jax.tree_util.tree_leaves(jax.jit(function)(*wide))
    assert len(got) == len(expected)
    for actual, wanted in zip(got, expected, strict=True):
        actual = np.asarray(actual, np.float64)
        wanted = np.asarray(wanted, np.float64)
        assert actual.shape == wanted.shape
        scale = max(1.0, float(np.abs(wanted).max()))
        assert float(np.abs(actual - wanted).max()) <= 1e-2 * scale
    # the reference evaluator reads the calls through the same rewrite: the same values
    reference = flatten_literal(evaluate_module(parse_module(text, name), inputs))
    for actual, wanted in zip(got, reference, strict=True):
        np.testing.assert_allclose(
            np.asarray(actual, np.float64), np.asarray(wanted, np.float64), rtol=0, atol=2e-2
        )


@pytest.mark.parametrize(
    "old, new, named",
    [
        ('"dropout_rate": 0.0', '"dropout_rate": 0.1', "dropout"),
        ('"mask_type": "CAUSAL"', '"mask_type": "ALIBI"', "mask_type ALIBI"),
        ('"is_flash_attention": true', '"is_flash_attention": false', "not flash attention"),
        ('"lhs_batch_dimensions": ["0", "2"]', '"lhs_batch_dimensions": ["0"]', "1 batch"),
        (
            '"rhs_contracting_dimensions": ["3"]',
            '"rhs_contracting_dimensions": ["7"]',
            "do not fit",
        ),
        ('"fmha_scale": 0.3535', '"fmha_scale": "x", "_": 0.3535', "fmha_scale is not a number"),
        (
            "custom-call(q.1, k.1, v.1)",
            "custom-call(q.1, k.1, v.1, v.1)",
            "this call has 4 operands",
        ),
    ],
)
def test_what_heron_does_not_compute_is_refused_by_name(old: str, new: str, named: str) -> None:
    text = (DATA / "forward_causal.hlo").read_text()
    assert old in text
    module = parse_module(text.replace(old, new, 1), "forward_causal")
    with pytest.raises(HloError, match=named) as refused:
        compile_executable(module, Target.preset("h100"), ("interpreter",))
    assert "__cudnn$fmhaSoftmax" in str(refused.value)


def test_the_calls_read_jax_s_tensors_through_strides() -> None:
    """No transpose is added for jax's [B, S, H, D] q, k and v: the heron call is told
    their order (and the output keeps cuDNN's layout, so jax's transpose after it
    moves no data)."""
    from heron.hlo.passes.xla_library_calls import rewrite_xla_library_calls

    module = parse_module((DATA / "backward_grouped.hlo").read_text(), "backward_grouped")
    assert rewrite_xla_library_calls(module)
    opcodes = [inst.opcode for inst in module.entry.instructions]
    targets = [
        inst.attributes["custom_call_target"].text
        for inst in module.entry.instructions
        if inst.opcode == "custom-call"
    ]
    assert targets == ["__heron$attention", "__heron$attention_backward"]
    assert opcodes.count("transpose") == 4  # jax's own, after the calls
    backward = next(
        i
        for i in module.entry.instructions
        if i.opcode == "custom-call" and "backward" in i.attributes["custom_call_target"].text
    )
    config = backward.attributes["backend_config"].text
    assert '"q": [0, 2, 1, 3]' in config and '"stats": true' in config
    # reports name the forward call whose output and statistics it reads
    from heron.compiler.library_attention_pairing import paired_forward

    forward = paired_forward(backward)
    assert forward is not None and forward.attributes["custom_call_target"].text == (
        "__heron$attention"
    )


def _library_calls(module) -> list:
    return [
        inst
        for inst in module.entry.instructions
        if inst.opcode == "custom-call"
        and inst.attributes["custom_call_target"].text.startswith("__heron$attention")
    ]


@pytest.mark.parametrize(
    "name",
    ["forward_padding", "forward_window", "backward_padding_causal", "backward_window_grouped"],
)
def test_padding_and_windows_are_the_library_call_s_bias(name: str) -> None:
    """cuDNN's flash attention keeps padded and windowed attention: the masks (and the
    causal one with them) become the call's bias, jax's large negative where a score is
    removed, rather than the attention written out as HLO with its scores stored."""
    from heron.hlo.passes.xla_library_calls import rewrite_xla_library_calls

    module = parse_module((DATA / f"{name}.hlo").read_text(), name)
    assert rewrite_xla_library_calls(module)
    calls = _library_calls(module)
    assert len(calls) == (2 if name.startswith("backward") else 1)
    for call in calls:
        bias = call.operands[-1]
        b, sq = (2, 16)
        assert bias.array_shape.dims == ((b if "padding" in name else 1), 1, sq, 16)
        assert '"causal": false' in call.attributes["backend_config"].text


def test_padded_f16_attention_is_hlo_whose_range_lacks_jax_s_fill() -> None:
    """jax's large negative (-0.7 * f32 max) is -inf in f16: a padded query's row, masked
    whole, would have no softmax as the call's bias, so f16 keeps the HLO form."""
    from heron.hlo.passes.xla_library_calls import rewrite_xla_library_calls

    text = (DATA / "forward_padding.hlo").read_text().replace("bf16", "f16")
    module = parse_module(text, "forward_padding_f16")
    assert rewrite_xla_library_calls(module)
    assert _library_calls(module) == []
    inputs = [
        x.astype(np.float16) if x.ndim == 4 else x
        for x in _inputs("forward_padding", CASES["forward_padding"][1])
    ]
    artefact = compile_executable(module, Target.preset("h100"), ("interpreter",))
    (got,) = load_on_device(artefact, open_device("interpreter")[1], "interpreter").run(inputs)
    wide = [np.asarray(x, np.float32) if x.ndim == 4 else x for x in inputs]
    wanted = np.asarray(jax.jit(CASES["forward_padding"][0])(*wide), np.float64)
    assert float(np.abs(np.asarray(got, np.float64) - wanted).max()) <= 1e-2 * max(
        1.0, float(np.abs(wanted).max())
    )
