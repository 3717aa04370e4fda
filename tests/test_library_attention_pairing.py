"""A training step's attention calls paired: the forward call gives its softmax's statistics
and the backward call reads them and the forward's output (XLA's cuDNN fMHA pair).

The ``library-attention-pairing`` pass (after both attention rewriters) makes
the forward call ``__heron$attention`` give ``(o, stats)`` and the backward
call read ``(q, k, v, o, do, stats[, bias])`` where both are calls of one
attention; a backward call with no forward call of its attention keeps
computing the forward itself. The paired program gives XLA:CPU's gradients
within the bounds the backward call's tests use, on the reference evaluator
and compiled for the interpreter (host fallback and the contracts' numpy
library); the statistics' host HLO is each row's log-sum-exp, as the numpy
contract and an independent numpy computation say.
"""

from __future__ import annotations

import types

import numpy as np
import pytest
from heron_test_support.jax_config import jax_x64

from heron.compiler import Target
from heron.compiler.executable import compile_program
from heron.compiler.library_attention import attention_call, is_library_attention, rewrite_attention
from heron.compiler.library_attention_backward import (
    attention_backward_call,
    is_library_attention_backward,
    rewrite_attention_backward,
)
from heron.compiler.library_attention_pairing import (
    attention_pairing_verdicts,
    pair_attention_calls,
    paired_forward,
)
from heron.hlo.custom_calls import attention as attention_hlo
from heron.hlo.custom_calls import attention_backward as backward_hlo
from heron.hlo.custom_calls.call import custom_call_of
from heron.hlo.evaluator import evaluate_module
from heron.hlo.parser import parse_module
from heron.hlo.passes.dce import eliminate_dead_code
from heron.hlo.passes.manager import run_pipeline
from heron.hlo.passes.pipelines import simplification_pipeline
from heron.runtime.core.attention import AttentionCall
from heron.runtime.core.attention_backward import AttentionBackwardCall
from heron.runtime.core.executor import load_executable
from heron.runtime.core.thunks import LibraryCallThunk, walk
from heron.runtime.interpreter import InterpreterDevice

jax = pytest.importorskip("jax")
jnp = jax.numpy

H100 = Target.preset("h100")
B, T, N, D = 2, 32, 2, 16


@pytest.fixture(scope="module", autouse=True)
def jax_32_bit():
    """jax's default 32-bit types: another suite may have turned x64 on (a global)."""
    with jax_x64(False):
        yield


def _step(causal: bool):
    """A training step's loss and gradients: the loss reads the attention's output (the
    forward call stays), its derivative the backward pass (a bias, where given, is not
    differentiated)."""

    def loss(q, k, v, g, *bias):
        out = jax.nn.dot_product_attention(
            q, k, v, bias=bias[0] if bias else None, is_causal=causal
        )
        return jnp.sum(jnp.square(out.astype(jnp.float32) * g))

    def step(q, k, v, g, *bias):
        value, grads = jax.value_and_grad(loss, argnums=(0, 1, 2))(q, k, v, g, *bias)
        return value, *grads

    return step


def _shapes(t=T, s=T, heads=N, kv_heads=None, bias=None):
    return [
        jax.ShapeDtypeStruct((B, t, heads, D), jnp.bfloat16),
        jax.ShapeDtypeStruct((B, s, kv_heads or heads, D), jnp.bfloat16),
        jax.ShapeDtypeStruct((B, s, kv_heads or heads, D), jnp.bfloat16),
        jax.ShapeDtypeStruct((B, t, heads, D), jnp.float32),
        *([jax.ShapeDtypeStruct(bias, jnp.bfloat16)] if bias else []),
    ]


#: name -> (the training step, its argument shapes)
STEPS = {
    "causal": (_step(True), _shapes()),
    "not_causal_cross": (_step(False), _shapes(t=8, s=40)),
    "grouped_query_causal": (_step(True), _shapes(heads=4, kv_heads=2)),
    "bias_per_head_causal": (_step(True), _shapes(bias=(1, N, T, T))),
}


def _lowered(function, shapes) -> str:
    return jax.jit(function).lower(*shapes).as_text(dialect="hlo")


def _inputs(shapes, seed=11):
    rng = np.random.default_rng(seed)
    return [rng.standard_normal(s.shape).astype(s.dtype) for s in shapes]


def _rewritten(function, shapes, pair=True):
    """The program simplified, its attention made calls, the calls paired (``pair``)."""
    module = parse_module(_lowered(function, shapes))
    run_pipeline(module, simplification_pipeline(layouts=False))
    assert rewrite_attention_backward(module, H100)
    rewrite_attention(module, H100)
    eliminate_dead_code(module)
    if pair:
        pair_attention_calls(module)
    return module


def _close(out, expected):
    """Within the reassociation bounds of a 16-bit result (3e-2 of the largest value), the
    backward call's tests' bound."""
    for got, reference in zip(out, expected, strict=True):
        got, reference = np.asarray(got, np.float64), np.asarray(reference, np.float64)
        assert got.shape == reference.shape
        assert np.abs(got - reference).max() <= 3e-2 * max(1.0, np.abs(reference).max())


def _calls(module):
    forwards = [i for i in module.instructions() if is_library_attention(i)]
    backwards = [i for i in module.instructions() if is_library_attention_backward(i)]
    return forwards, backwards


@pytest.fixture(scope="module", params=sorted(STEPS))
def step(request):
    function, shapes = STEPS[request.param]
    inputs = _inputs(shapes)
    return types.SimpleNamespace(
        name=request.param,
        module=_rewritten(function, shapes),
        inputs=inputs,
        expected=[np.asarray(x) for x in jax.jit(function)(*inputs)],  # XLA:CPU
        compiled=compile_program(parse_module(_lowered(function, shapes)), H100, ("interpreter",)),
    )


def test_the_backward_call_reads_the_forward_call_s_output_and_statistics(step):
    (forward,), (backward,) = _calls(step.module)
    assert paired_forward(backward) is forward
    assert custom_call_of(forward).backend_config.count('"stats": true') == 1
    q = attention_call(forward).q_dims
    o_shape, stats_shape = forward.shape.elements
    assert (str(stats_shape.element_type), tuple(stats_shape.dims)) == ("f32", q[:3])
    o, stats = backward.operands[3], backward.operands[5]
    assert (o.opcode, o.attributes["index"], o.operands[0]) == ("get-tuple-element", 0, forward)
    assert (stats.attributes["index"], stats.operands[0]) == (1, forward)
    call = attention_backward_call(backward)
    assert call.reads_forward and call.describe().endswith("reading the forward's o and stats")
    # o read where the forward call wrote it (jax's [B, T, N, H]: no transpose between)
    assert call.o_strides == attention_call(forward).o_strides


def test_the_paired_program_gives_xla_s_results(step):
    _close(evaluate_module(step.module, step.inputs), step.expected)


@pytest.mark.parametrize("libraries", [(), ("attention", "attention_backward")])
def test_the_compiled_pair_runs_on_the_host_or_with_the_numpy_library(step, libraries):
    thunks = [t for t in walk(step.compiled.artefact.program) if isinstance(t, LibraryCallThunk)]
    assert sorted(t.operation for t in thunks) == ["attention", "attention_backward"]
    forward = next(AttentionCall.from_thunk(t) for t in thunks if t.operation == "attention")
    backward = next(
        AttentionBackwardCall.from_thunk(t) for t in thunks if t.operation == "attention_backward"
    )
    assert forward.outputs == 2 and forward.stats_strides
    assert backward.reads_forward and backward.stats_strides == forward.stats_strides
    executable = load_executable(step.compiled.artefact, InterpreterDevice(libraries=libraries))
    chosen = [c.chosen for c in executable.library_choices]
    assert chosen == ["numpy" if libraries else "host"] * 2
    _close(executable.run(step.inputs), step.expected)


def _lse(q, k, scale, causal, bias=None):
    """Each row's log-sum-exp of the scaled (biased, masked) scores, in f64 (independent of
    the contracts' code)."""
    groups = q.shape[1] // k.shape[1]
    k = np.repeat(k.astype(np.float64), groups, axis=1)
    s = np.einsum("bhid,bhjd->bhij", q.astype(np.float64), k) * scale
    if bias is not None:
        s = s + bias.astype(np.float64)
    if causal:
        s = np.where(np.arange(s.shape[3])[None, :] > np.arange(s.shape[2])[:, None], -np.inf, s)
    m = s.max(axis=-1)
    return m + np.log(np.exp(s - m[..., None]).sum(axis=-1))


@pytest.mark.parametrize("name", sorted(STEPS))
def test_the_statistics_host_hlo_is_each_row_s_log_sum_exp_as_the_contract_says(name):
    module = _rewritten(*STEPS[name])
    (forward,), _ = _calls(module)
    call = attention_call(forward)
    rng = np.random.default_rng(3)
    operands = [
        rng.standard_normal(o.array_shape.dims).astype(jnp.bfloat16) for o in forward.operands
    ]
    o_host, stats_host = attention_hlo.host(operands, custom_call_of(forward))
    stats_host = np.asarray(stats_host, np.float32)
    raw = [x.view(np.uint8).reshape(-1) for x in operands]
    raw += [np.zeros(size, np.uint8) for size in call.byte_sizes()[-2:]]
    o_ref, stats_ref = call.reference(raw)
    stats_ref = stats_ref.view(np.float32).reshape(stats_host.shape)
    np.testing.assert_allclose(stats_ref, stats_host, rtol=1e-6, atol=1e-6)
    # and what it means, computed here: q and k in cuDNN's order from the call's strides
    from heron.runtime.core.library_contract import read_strided

    def logical(name, index):
        dims, strides = call.dims_of(name), call.strides_of(name)
        return np.asarray(read_strided(raw[index], dims, strides, jnp.bfloat16), np.float64)

    bias = logical("bias", 3) if call.bias_dims else None
    expected = _lse(logical("q", 0), logical("k", 1), call.scale, call.causal, bias)
    np.testing.assert_allclose(stats_host, expected, rtol=1e-5, atol=1e-5)
    o_ref = o_ref.view(jnp.bfloat16).reshape(np.asarray(o_host).shape).astype(np.float32)
    assert np.mean(o_ref == np.asarray(o_host, np.float32)) > 0.99


@pytest.mark.parametrize("name", sorted(STEPS))
def test_the_paired_backward_s_contract_computes_what_its_custom_call_means(name):
    module = _rewritten(*STEPS[name])
    (forward,), (backward,) = _calls(module)
    call = attention_backward_call(backward)
    rng = np.random.default_rng(5)
    given = [rng.standard_normal(o.array_shape.dims) for o in backward.operands]
    # o and stats as the forward call computes them from q, k, v (and the bias)
    forward_operands = [given[0], given[1], given[2], *given[6:]]
    forward_operands = [x.astype(jnp.bfloat16) for x in forward_operands]
    o, stats = attention_hlo.host(forward_operands, custom_call_of(forward))
    operands = [x.astype(jnp.bfloat16) for x in given]
    operands[3], operands[5] = np.asarray(o), np.asarray(stats, np.float32)
    expected = backward_hlo.host(operands, custom_call_of(backward))
    raw = [np.ascontiguousarray(x).view(np.uint8).reshape(-1) for x in operands]
    raw += [np.zeros(size, np.uint8) for size in call.byte_sizes()[-3:]]
    for got, reference in zip(call.reference(raw), expected, strict=True):
        reference = np.asarray(reference, np.float32)
        got = got.view(jnp.bfloat16).reshape(reference.shape).astype(np.float32)
        assert np.mean(got == reference) > 0.99
        np.testing.assert_allclose(got, reference, rtol=2.0**-7, atol=2.0**-20)
    # the paired call's gradients are the recomputing call's, within o's rounding
    unpaired = _rewritten(*STEPS[name], pair=False)
    (_,), (recomputing,) = _calls(unpaired)
    again = backward_hlo.host(
        [operands[i] for i in (0, 1, 2, 4, *range(6, len(operands)))],
        custom_call_of(recomputing),
    )
    _close(expected, again)


def _only_the_backward(q, k, v, do):
    """jax.vjp of attention alone: the forward's output is dead, so no forward call."""
    _, pullback = jax.vjp(
        lambda q, k, v: jax.nn.dot_product_attention(q, k, v, is_causal=True), q, k, v
    )
    return pullback(do)


def test_a_program_with_only_the_backward_keeps_the_recomputing_call():
    shapes = [*_shapes()[:3], jax.ShapeDtypeStruct((B, T, N, D), jnp.bfloat16)]
    module = _rewritten(_only_the_backward, shapes, pair=False)
    assert not pair_attention_calls(module)
    forwards, (backward,) = _calls(module)
    assert forwards == [] and paired_forward(backward) is None
    assert len(backward.operands) == 4  # q, k, v, do
    call = attention_backward_call(backward)
    assert not call.reads_forward and call.operand_names[:4] == ("q", "k", "v", "do")
    ((name, verdict),) = attention_pairing_verdicts(module)
    assert name == backward.name and verdict.startswith("computes the forward again")
    inputs = _inputs(shapes)
    compiled = compile_program(
        parse_module(_lowered(_only_the_backward, shapes)), H100, ("interpreter",)
    )
    thunks = [t for t in walk(compiled.artefact.program) if isinstance(t, LibraryCallThunk)]
    assert [t.operation for t in thunks] == ["attention_backward"]
    assert not AttentionBackwardCall.from_thunk(thunks[0]).reads_forward
    executable = load_executable(compiled.artefact, InterpreterDevice())
    _close(executable.run(inputs), [np.asarray(x) for x in jax.jit(_only_the_backward)(*inputs)])


def test_different_attentions_are_not_paired():
    """A forward and a backward call of other scales (or other operands) stay apart."""
    module = _rewritten(*STEPS["causal"], pair=False)
    (forward,), (backward,) = _calls(module)
    config = custom_call_of(forward).backend_config
    forward.attributes["backend_config"] = type(forward.attributes["backend_config"])(
        config.replace('"scale": 0.25', '"scale": 0.5')
    )
    assert not pair_attention_calls(module)


def test_heron_compile_says_which_backward_call_reads_the_forward_s_statistics(tmp_path, capsys):
    from heron.cli.main import main as heron

    function, shapes = STEPS["causal"]
    path = tmp_path / "step.hlo"
    path.write_text(_lowered(function, shapes))
    assert heron(["compile", str(path), "--executable", str(tmp_path / "step.heron")]) == 0
    lines = [x for x in capsys.readouterr().out.splitlines() if "attention backward call" in x]
    assert len(lines) == 1 and "reads the forward call" in lines[0], lines
    assert "output and statistics" in lines[0]


def test_launch_shape_lists_the_pair():
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
    import launch_shape

    workload = types.SimpleNamespace(
        function=lambda: STEPS["causal"][0],
        gpu=[types.SimpleNamespace(shape=s.shape, dtype=str(s.dtype)) for s in STEPS["causal"][1]],
    )
    facts = launch_shape.describe(workload, H100)
    library = [call for call in facts["library"] if "attention" in call]
    assert any(" and f32[2x2x32] stats" in call for call in library), library
    assert any("reading the forward's o and stats" in call for call in library), library


def test_the_contracts_refuse_statistics_that_do_not_fit():
    from heron.runtime.core.thunks import ThunkError

    dims, strides = (1, 2, 16, 16), (512, 256, 16, 1)
    forward = AttentionCall(
        q_dims=dims,
        q_strides=strides,
        k_dims=dims,
        k_strides=strides,
        v_dims=dims,
        v_strides=strides,
        o_dims=dims,
        o_strides=strides,
        scale=0.25,
        stats_strides=(32, 16, 1),
    )
    assert forward.operand_names == ("q", "k", "v", "o", "stats") and forward.outputs == 2
    assert forward.byte_sizes()[-1] == 2 * 16 * 4  # f32 whatever the tensors' type
    assert "-> bf16[1x2x16x16] and f32[1x2x16] stats" in forward.describe()
    with pytest.raises(ThunkError, match="stats_strides"):
        AttentionCall(**{**attrs_of(forward), "stats_strides": (32, 1, 4)})
    backward = AttentionBackwardCall(
        q_dims=dims,
        q_strides=strides,
        k_dims=dims,
        k_strides=strides,
        v_dims=dims,
        v_strides=strides,
        do_strides=strides,
        dq_strides=strides,
        dk_strides=strides,
        dv_strides=strides,
        scale=0.25,
        o_strides=strides,
        stats_strides=(32, 16, 1),
    )
    names = ("q", "k", "v", "o", "do", "stats", "dq", "dk", "dv")
    assert backward.operand_names == names and backward.outputs == 3
    with pytest.raises(ThunkError, match="stats_strides"):
        AttentionBackwardCall(**{**attrs_of(backward), "stats_strides": (1, 1, 1)})
    with pytest.raises(ThunkError, match="come together"):
        AttentionBackwardCall(**{**attrs_of(backward), "stats_strides": ()})


def attrs_of(call) -> dict:
    import attrs

    return attrs.asdict(call)
