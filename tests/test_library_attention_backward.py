"""An attention's backward pass as one fused library call: the pattern, the call, its results.

jax's gradient of ``jax.nn.dot_product_attention`` (and of attention written
by hand with ``jax.nn.softmax``) is five dots around the softmax's derivative.
The ``library-attention-backward-rewriter`` makes dq, dk and dv one
``__heron$attention_backward`` call (cuDNN's flash attention backward on a
GPU); the forward's rewriter then takes the forward. The rewritten program,
on the reference evaluator and compiled for the interpreter (host fallback and
the contract's numpy library), gives XLA:CPU's gradients within the
reassociation bounds of a 16-bit result (the call computes ``dp`` in f32
where jax rounds it to bf16). What the call would compute differently is left
as it was, and the verdict says why.
"""

from __future__ import annotations

import types

import numpy as np
import pytest
from heron_test_support.jax_config import jax_x64

from heron.compiler import Target
from heron.compiler.executable import compile_program
from heron.compiler.library_attention import rewrite_attention
from heron.compiler.library_attention_backward import (
    attention_backward_call,
    attention_backward_verdicts,
    is_library_attention_backward,
    rewrite_attention_backward,
)
from heron.hlo.custom_calls.call import custom_call_of
from heron.hlo.evaluator import evaluate_module
from heron.hlo.parser import parse_module
from heron.hlo.passes.dce import eliminate_dead_code
from heron.hlo.passes.manager import run_pipeline
from heron.hlo.passes.pipelines import simplification_pipeline
from heron.runtime.core.attention_backward import AttentionBackwardCall
from heron.runtime.core.executor import load_executable
from heron.runtime.core.thunks import LibraryCallThunk, ThunkError, walk
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


def _sdpa(causal):
    return lambda q, k, v: jax.nn.dot_product_attention(q, k, v, is_causal=causal)


#: The products' precision jax.nn.dot_product_attention asks for: half-precision operands
#: (the derivative rounded to them), sums in f32.
BF16_PRODUCTS = jax.lax.DotAlgorithmPreset.BF16_BF16_F32


def _by_hand(q, k, v, precision=BF16_PRODUCTS):
    """Attention with jax.nn.softmax (its own derivative: p * (dp - sum(p * dp)))."""
    scores = jnp.einsum(
        "bqnh,bknh->bnqk", q, k, preferred_element_type=jnp.float32, precision=precision
    )
    probabilities = jax.nn.softmax(scores * 0.25, axis=-1).astype(q.dtype)
    return jnp.einsum("bnqk,bknh->bqnh", probabilities, v)


def _by_hand_f32_products(q, k, v):
    """As :func:`_by_hand`, its products at default precision: the derivative's in f32."""
    return _by_hand(q, k, v, precision=None)


def _gradients(attention, squared):
    """The gradients of q, k, v of a loss of ``attention``: linear in the output (jax
    drops the forward's output product) or its square (the forward stays)."""

    def loss(q, k, v, g):
        out = attention(q, k, v).astype(jnp.float32) * g
        return jnp.sum(out * out if squared else out)

    return jax.grad(loss, argnums=(0, 1, 2))


def _shapes(dtype=jnp.bfloat16, t=T, s=T, heads=N, head=D):
    return [
        jax.ShapeDtypeStruct((B, t, heads, head), dtype),
        jax.ShapeDtypeStruct((B, s, heads, head), dtype),
        jax.ShapeDtypeStruct((B, s, heads, head), dtype),
        jax.ShapeDtypeStruct((B, t, heads, head), jnp.float32),
    ]


def _two_layers(q, k, v):
    """Two attentions sharing k and v: each backward pass reads its own derivative."""
    first = _sdpa(True)(q, k, v)
    return _sdpa(True)(first, k, v)


def _rematerialised(q, k, v):
    """jax.checkpoint: the forward recomputed behind an optimization barrier."""
    return jax.checkpoint(_sdpa(True))(q, k, v)


def _biased_gradients(q, k, v, g, bias):
    """The gradients of q, k, v through a causal attention with a per-head bias (not
    differentiated: the call takes it as the forward call does)."""

    def loss(q, k, v):
        out = jax.nn.dot_product_attention(q, k, v, bias=bias, is_causal=True)
        return jnp.sum(jnp.square(out.astype(jnp.float32) * g))

    return jax.grad(loss, argnums=(0, 1, 2))(q, k, v)


#: name -> (the gradient function, its argument shapes, whether the forward call remains)
TAKEN = {
    "sdpa_causal_linear_loss": (_gradients(_sdpa(True), False), _shapes(), False),
    "sdpa_causal_squared_loss": (_gradients(_sdpa(True), True), _shapes(), True),
    "sdpa_linear_loss": (_gradients(_sdpa(False), False), _shapes(), False),
    "by_hand_jax_softmax": (_gradients(_by_hand, True), _shapes(), True),
    "cross_attention": (_gradients(_sdpa(False), True), _shapes(t=8, s=40), True),
    "grouped_query_causal": (
        _gradients(_sdpa(True), True),
        [_shapes(heads=4)[0], *_shapes(heads=2)[1:3], _shapes(heads=4)[3]],
        True,
    ),
    "grouped_query_cross": (
        _gradients(_sdpa(False), True),
        [_shapes(heads=4)[0], *_shapes(heads=2, s=24)[1:3], _shapes(heads=4)[3]],
        True,
    ),
    "multi_query_causal": (
        _gradients(_sdpa(True), True),
        [_shapes(heads=4)[0], *_shapes(heads=1)[1:3], _shapes(heads=4)[3]],
        True,
    ),
    "bias_per_head_causal": (
        _biased_gradients,
        [*_shapes(), jax.ShapeDtypeStruct((1, N, T, T), jnp.bfloat16)],
        True,
    ),
    "two_layers_sharing_k_and_v": (_gradients(_two_layers, True), _shapes(), True),
    "rematerialised": (_gradients(_rematerialised, True), _shapes(), True),
    "unbatched": (
        _gradients(_sdpa(True), True),
        [jax.ShapeDtypeStruct((T, N, D), jnp.bfloat16)] * 3
        + [jax.ShapeDtypeStruct((T, N, D), jnp.float32)],
        True,
    ),
}


def _inputs(shapes, seed=11):
    rng = np.random.default_rng(seed)
    return [rng.standard_normal(s.shape).astype(s.dtype) for s in shapes]


def _lowered(function, shapes) -> str:
    return jax.jit(function).lower(*shapes).as_text(dialect="hlo")


def _rewritten(function, shapes):
    """The program simplified, its backward pass and then its forward made library calls."""
    module = parse_module(_lowered(function, shapes))
    run_pipeline(module, simplification_pipeline(layouts=False))
    assert rewrite_attention_backward(module, H100)
    rewrite_attention(module, H100)
    eliminate_dead_code(module)  # the forward's scores, as the pipeline's next DCE does
    return module


def _targets(module):
    return sorted(
        inst.attributes["custom_call_target"].text
        for inst in module.instructions()
        if inst.opcode == "custom-call"
    )


def _close(out, expected):
    """Within the reassociation bounds of a 16-bit result (3e-2 of the largest gradient)."""
    for got, reference in zip(out, expected, strict=True):
        got, reference = np.asarray(got, np.float64), np.asarray(reference, np.float64)
        assert got.shape == reference.shape
        assert np.abs(got - reference).max() <= 3e-2 * max(1.0, np.abs(reference).max())


#: TAKEN cases with two attentions
LAYERS = {"two_layers_sharing_k_and_v": 2}
#: The kernels left beside the calls where more than the loss's derivative: two layers
#: (dk and dv summed over both, the first's output and its gradient between them);
#: unbatched [T, N, H] tensors (q, k, v and do are moved: the call reads 4-D tensors in
#: place, not 3-D ones).
KERNELS = {"two_layers_sharing_k_and_v": 5, "unbatched": 3, "multi_query_causal": 2}


@pytest.fixture(scope="module", params=sorted(TAKEN))
def taken(request):
    function, shapes, forward = TAKEN[request.param]
    module = _rewritten(function, shapes)
    inputs = _inputs(shapes)
    expected = [np.asarray(x) for x in jax.jit(function)(*inputs)]  # XLA:CPU
    compiled = compile_program(parse_module(_lowered(function, shapes)), H100, ("interpreter",))
    return types.SimpleNamespace(
        name=request.param,
        module=module,
        forward=forward,
        layers=LAYERS.get(request.param, 1),
        inputs=inputs,
        expected=expected,
        compiled=compiled,
    )


def _operations(forward: bool, layers: int) -> list[str]:
    return sorted((["attention"] if forward else []) * layers + ["attention_backward"] * layers)


def test_the_gradients_are_one_backward_call_and_no_product_of_the_scores(taken):
    module = taken.module
    calls = [f"__heron${name}" for name in _operations(taken.forward, taken.layers)]
    assert _targets(module) == calls
    dots = [inst.name for inst in module.instructions() if inst.opcode == "dot"]
    assert dots == []  # five backward products, and the forward's two, are the calls


def test_the_rewritten_program_gives_xla_s_gradients(taken):
    _close(evaluate_module(taken.module, taken.inputs), taken.expected)


@pytest.mark.parametrize("libraries", [(), ("attention", "attention_backward")])
def test_the_interpreter_runs_the_call_on_the_host_or_with_its_numpy_library(taken, libraries):
    """The program compiled for an H100 (the default pipeline makes the calls)."""
    compiled, layers = taken.compiled, taken.layers
    operations = sorted(
        t.operation for t in walk(compiled.artefact.program) if isinstance(t, LibraryCallThunk)
    )
    assert operations == _operations(taken.forward, layers)
    for thunk in walk(compiled.artefact.program):
        if isinstance(thunk, LibraryCallThunk) and thunk.operation == "attention_backward":
            call = AttentionBackwardCall.from_thunk(thunk)
            assert call.describe().startswith("attention backward ")
    executable = load_executable(compiled.artefact, InterpreterDevice(libraries=libraries))
    choices = [c for c in executable.library_choices if c.call.startswith("attention backward")]
    assert [c.chosen for c in choices] == ["numpy" if libraries else "host"] * layers
    _close(executable.run(taken.inputs), taken.expected)


def test_grouped_query_gradients_are_one_call_with_cudnn_s_key_value_heads():
    """jax's [B, T, K, G, H] head groups: the call has K x G query heads over K key/value
    heads (dk and dv summed over each group by the call), reading jax's tensors in place."""
    function, shapes, _ = TAKEN["grouped_query_causal"]
    compiled = compile_program(parse_module(_lowered(function, shapes)), H100, ("interpreter",))
    (thunk,) = [
        t
        for t in walk(compiled.artefact.program)
        if isinstance(t, LibraryCallThunk) and t.operation == "attention_backward"
    ]
    call = AttentionBackwardCall.from_thunk(thunk)
    assert (call.q_dims, call.k_dims) == ((B, 4, T, D), (B, 2, T, D))
    assert call.q_strides == call.dq_strides == (T * 4 * D, D, 4 * D, 1)
    assert call.k_strides == call.dk_strides == (T * 2 * D, D, 2 * D, 1)
    assert "2 key/value heads" in call.describe()


def test_the_contract_computes_what_the_custom_call_means():
    function, shapes, _ = TAKEN["sdpa_causal_linear_loss"]
    module = _rewritten(function, shapes)
    (inst,) = [i for i in module.instructions() if is_library_attention_backward(i)]
    call = attention_backward_call(inst)
    # jax's [B, T, N, H] tensors are read and the gradients written through strides (no
    # transposes)
    bshd = (T * N * D, D, N * D, 1)
    assert call.q_strides == call.k_strides == call.v_strides == call.do_strides == bshd
    assert call.dq_strides == call.dk_strides == call.dv_strides == bshd
    assert call.causal and call.scale == 0.25
    rng = np.random.default_rng(3)
    operands = [rng.standard_normal(o.array_shape.dims).astype(jnp.bfloat16) for o in inst.operands]
    from heron.hlo.custom_calls.attention_backward import host

    expected = host(operands, custom_call_of(inst))
    raw = [o.view(np.uint8).reshape(-1) for o in operands]
    raw += [np.zeros(size, np.uint8) for size in call.byte_sizes()[-3:]]
    for got, reference in zip(call.reference(raw), expected, strict=True):
        got = got.view(jnp.bfloat16).reshape(np.asarray(reference).shape).astype(np.float32)
        reference = np.asarray(reference, np.float32)
        # f32 sums in numpy's order and the evaluator's, each rounded once to bf16: equal
        # but where a sum lies at a rounding boundary (one ulp)
        assert np.mean(got == reference) > 0.99
        np.testing.assert_allclose(got, reference, rtol=2.0**-7, atol=2.0**-20)


def _padded(q, k, v, keep):
    return jax.nn.dot_product_attention(q, k, v, mask=keep[:, None, None, :])


def _f32_gradients(q, k, v, g):
    """The gradients used in f32 (an optimizer reading them unrounded)."""
    grads = jax.grad(
        lambda q, k, v: jnp.sum(_sdpa(True)(q, k, v).astype(jnp.float32) * g),
        argnums=(0, 1, 2),
    )
    return grads(q.astype(jnp.float32), k.astype(jnp.float32), v.astype(jnp.float32))


#: name -> (function, shapes, the verdict's reason)
REFUSED = {
    "padding_mask": (
        jax.grad(lambda q, k, v, m: jnp.sum(_padded(q, k, v, m).astype(jnp.float32)), (0, 1, 2)),
        [*_shapes()[:3], jax.ShapeDtypeStruct((B, T), jnp.bool_)],
        "a mask other than the causal one",
    ),
    "f32_tensors": (_f32_gradients, _shapes(), "take q and k of one type of f16, bf16"),
    # heads the forward's rewriter refuses too (the thirteenth sweep: Keras's
    # MultiHeadAttention with key_dim=4 under mixed_bfloat16 reached the runtime's refusal)
    **{
        f"head_{head}": (
            _gradients(_sdpa(False), True),
            _shapes(head=head),
            f"head dimension {head} (the fused call takes at most 128, a multiple of 8)",
        )
        for head in (4, 12, 136)
    },
    "f32_derivative_products": (
        _gradients(_by_hand_f32_products, False),
        _shapes(),
        "multiplies the softmax's derivative in f32",
    ),
}


@pytest.mark.parametrize("name", sorted(REFUSED))
def test_what_the_backward_call_would_change_stays_and_says_why(name):
    function, shapes, why = REFUSED[name]
    module = parse_module(jax.jit(function).lower(*shapes).as_text(dialect="hlo"))
    run_pipeline(module, simplification_pipeline(layouts=False))
    verdicts = attention_backward_verdicts(module, H100)
    assert any(why in verdict for _, verdict in verdicts), verdicts
    assert not rewrite_attention_backward(module, H100)


def test_a_head_the_calls_do_not_take_compiles_and_runs_as_products():
    function, shapes = _gradients(_sdpa(False), True), _shapes(head=4)
    inputs = _inputs(shapes)
    compiled = compile_program(parse_module(_lowered(function, shapes)), H100, ("interpreter",))
    assert not any(
        isinstance(t, LibraryCallThunk) and "attention" in t.operation
        for t in walk(compiled.artefact.program)
    )
    executable = load_executable(compiled.artefact, InterpreterDevice())
    _close(executable.run(inputs), [np.asarray(x) for x in jax.jit(function)(*inputs)])


def test_inference_has_no_backward_verdict():
    function = _sdpa(True)
    module = parse_module(jax.jit(function).lower(*_shapes()[:3]).as_text(dialect="hlo"))
    run_pipeline(module, simplification_pipeline(layouts=False))
    assert attention_backward_verdicts(module, H100) == []


def test_the_contract_refuses_gradients_that_do_not_fit():
    dims, strides = (1, 2, 16, 16), (512, 256, 16, 1)
    given = dict(
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
    )
    call = AttentionBackwardCall(**given)
    assert call.operand_names == ("q", "k", "v", "do", "dq", "dk", "dv")
    assert call.flops() == 2 * 2 * 16 * 16 * (5 * 16)
    with pytest.raises(ThunkError, match="dq_strides"):
        AttentionBackwardCall(**{**given, "dq_strides": (512, 256, 32, 1)})
    with pytest.raises(ThunkError, match="head dimension 12"):
        narrow = (384, 192, 12, 1)  # a value head of 12: v, do and dv
        AttentionBackwardCall(
            **{
                **given,
                "v_dims": (1, 2, 16, 12),
                "v_strides": narrow,
                "do_strides": narrow,
                "dv_strides": narrow,
            }
        )


def test_the_gradients_are_written_where_the_program_returns_them(taken):
    """No kernel moves q, k, v, do or the gradients: what is left computes do (the loss's
    derivative), and the call writes the entry's outputs (no copies)."""
    from heron.compiler.executable import thunk_counts

    counts = thunk_counts(taken.compiled)
    assert counts.get("copy", 0) == 0
    assert counts.get("kernel", 0) <= KERNELS.get(taken.name, 1), counts


def test_heron_compile_says_what_computes_each_attention_s_backward_pass(tmp_path, capsys):
    from heron.cli.main import main as heron

    lines = []
    for name in ("sdpa_causal_squared_loss", "f32_derivative_products"):
        function, shapes, *_ = TAKEN.get(name) or REFUSED[name]
        path = tmp_path / f"{name}.hlo"
        path.write_text(_lowered(function, shapes))
        assert heron(["compile", str(path), "--executable", str(tmp_path / f"{name}.heron")]) == 0
        lines += [line for line in capsys.readouterr().out.splitlines() if "attention" in line]
    assert any("attention backward through softmax" in x and "cudnn backward" in x for x in lines)
    assert any("attention ending at" in x and ": cudnn" in x for x in lines), lines
    assert any("five GEMMs around the softmax" in x and "in f32" in x for x in lines), lines


def test_heron_run_check_agrees_on_a_fused_attention_backward(tmp_path, capsys):
    from heron.cli.main import main as heron

    function, shapes, _ = TAKEN["sdpa_causal_linear_loss"]
    path = tmp_path / "attention_backward.hlo"
    path.write_text(_lowered(function, shapes))
    assert heron(["run", str(path), "--backend", "interpreter", "--check"]) == 0
    out = capsys.readouterr().out
    assert "agree: every output within the tolerance" in out
    assert "attention backward bf16[2x2x32x16] q, 32 keys -> dq, dk, dv" in out


def _custom_softmax_gradient(delta_factor: float, scale_factor: float):
    """Attention whose softmax has a hand-written derivative ``p * (dp - delta_factor *
    sum(p * dp)) * scale_factor`` (jax.custom_vjp): the softmax's only when both are 1."""

    @jax.custom_vjp
    def softmax(scores):
        return jax.nn.softmax(scores, axis=-1)

    def forward(scores):
        p = softmax(scores)
        return p, p

    def backward(p, dp):
        delta = jnp.sum(p * dp, axis=-1, keepdims=True)
        return ((p * (dp - delta_factor * delta)) * scale_factor,)

    softmax.defvjp(forward, backward)

    def attention(q, k, v):
        scores = jnp.einsum(
            "bqnh,bknh->bnqk", q, k, preferred_element_type=jnp.float32, precision=BF16_PRODUCTS
        )
        probabilities = softmax(scores * 0.25).astype(q.dtype)
        return jnp.einsum("bnqk,bknh->bqnh", probabilities, v, precision=BF16_PRODUCTS)

    return attention


@pytest.mark.parametrize(
    ("delta_factor", "scale_factor", "taken"),
    [(1.0, 1.0, True), (0.5, 1.0, False), (1.0, 2.0, False), (0.0, 1.0, False)],
)
def test_only_the_softmax_s_own_derivative_is_taken(delta_factor, scale_factor, taken):
    """A derivative that is not the softmax's (a different weight on the row sum, another
    scale, no row sum) is left as the program wrote it, and the program still gives
    XLA:CPU's results: the matcher proves what it takes, it does not guess."""
    function = _gradients(_custom_softmax_gradient(delta_factor, scale_factor), True)
    shapes = _shapes()
    module = parse_module(_lowered(function, shapes))
    run_pipeline(module, simplification_pipeline(layouts=False))
    verdicts = attention_backward_verdicts(module, H100)
    assert len(verdicts) == 1, verdicts
    assert verdicts[0][1].endswith("backward") == taken, verdicts
    if not taken:
        assert "is not the softmax's derivative" in verdicts[0][1], verdicts
    compiled = compile_program(parse_module(_lowered(function, shapes)), H100, ("interpreter",))
    inputs = _inputs(shapes)
    expected = [np.asarray(x) for x in jax.jit(function)(*inputs)]
    executable = load_executable(compiled.artefact, InterpreterDevice())
    _close(executable.run(inputs), expected)
