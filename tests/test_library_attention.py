"""Attention as one fused library call end to end: the pattern, the call, its results.

jax lowers ``jax.nn.dot_product_attention`` (and attention written by hand
with its scores in f32) to two dots around a softmax. Compiled for an H100,
each becomes the custom call ``__heron$attention`` and, in the artefact, one
``dnn.attention`` library call (cuDNN's flash attention on a GPU) with the
host computation beside it: the two GEMMs and the softmax kernel are gone.
The interpreter runs the host fallback by default and, built with
``libraries=("attention",)``, the contract's numpy reference; both equal
XLA:CPU's results (jax on this machine) within the output type's rounding.
Grouped-query attention (fewer key/value heads than query heads, jax's
``[B, T, K, G, H]`` head groups) is one call with cuDNN's GQA. What the fused
call would compute differently (scores in bf16, a mask that is not causal, a
bias per query head of a group, a backward pass that keeps the probabilities,
f32 tensors, too wide a head) is left as two GEMMs and a softmax, and the
verdict says why.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from heron_test_support.jax_config import jax_x64

from heron.cli.main import main as heron
from heron.compiler import Target
from heron.compiler.executable import compile_program
from heron.compiler.library_attention import is_library_attention
from heron.compiler.library_attention_backward import program_attention_verdicts
from heron.hlo.evaluator import evaluate_module
from heron.hlo.parser import parse_module
from heron.runtime.core.attention import AttentionCall
from heron.runtime.core.executor import load_executable
from heron.runtime.core.library_contract import dense_strides
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


def _hand_written(q, k, v):
    scores = jnp.einsum("bqnh,bknh->bnqk", q, k, preferred_element_type=jnp.float32)
    probabilities = jax.nn.softmax(scores / math.sqrt(q.shape[-1]), axis=-1)
    return jnp.einsum("bnqk,bknh->bqnh", probabilities.astype(q.dtype), v)


def _three_batch_dimensions(q, k, v, bias):
    """[A, B, S, N, D] operands (three batch dimensions), a bias over B alone."""
    scores = jnp.einsum("abqnh,abknh->abnqk", q, k, preferred_element_type=jnp.float32)
    probabilities = jax.nn.softmax(scores * 0.25 + bias.astype(jnp.float32), axis=-1)
    return jnp.einsum("abnqk,abknh->abqnh", probabilities.astype(q.dtype), v)


def _grouped_by_hand(q, k, v):
    """Grouped-query attention with each group's heads outermost: scores [B, K, G, T, S]
    (jax's own are [B, K, T, G, S]), causal, in f16."""
    b, t, n, d = q.shape
    kv = k.shape[2]
    grouped = q.reshape(b, t, kv, n // kv, d)
    scores = jnp.einsum("btkgd,bskd->bkgts", grouped, k, preferred_element_type=jnp.float32)
    keep = jnp.tril(jnp.ones((t, k.shape[1]), bool))
    scores = jnp.where(keep, scores / math.sqrt(d), -jnp.inf)
    probabilities = jax.nn.softmax(scores, axis=-1).astype(q.dtype)
    out = jnp.einsum("bkgts,bskd->btkgd", probabilities, v)
    return out.reshape(b, t, n, d)


def _masked_by_hand(q, k, v, keep):
    """Attention with a key padding mask ``keep [B, S]`` filled with -1e9."""
    scores = jnp.einsum("bqnh,bknh->bnqk", q, k, preferred_element_type=jnp.float32) * 0.25
    scores = jnp.where(keep[:, None, None, :], scores, -1e9)
    probabilities = jax.nn.softmax(scores, axis=-1)
    return jnp.einsum("bnqk,bknh->bqnh", probabilities.astype(q.dtype), v)


def _bf16_scores(q, k, v):
    scores = jnp.einsum("bqnh,bknh->bnqk", q, k) / math.sqrt(q.shape[-1])
    return jnp.einsum("bnqk,bknh->bqnh", jax.nn.softmax(scores, axis=-1), v)


def _shapes(t=T, s=T, n=N, kv_heads=N, d=D, dtype="bfloat16"):
    dtype = getattr(jnp, dtype)
    return [
        jax.ShapeDtypeStruct((B, t, n, d), dtype),
        jax.ShapeDtypeStruct((B, s, kv_heads, d), dtype),
        jax.ShapeDtypeStruct((B, s, kv_heads, d), dtype),
    ]


def _bias(shape, dtype="bfloat16"):
    return jax.ShapeDtypeStruct(shape, getattr(jnp, dtype))


#: name -> (function, argument shapes, what the call is)
TAKEN = {
    "sdpa": (
        jax.nn.dot_product_attention,
        _shapes(),
        "attention bf16[2x2x32x16] q, 32 keys -> bf16[2x2x32x16], scale 0.25",
    ),
    "sdpa_causal": (
        lambda q, k, v: jax.nn.dot_product_attention(q, k, v, is_causal=True),
        _shapes(),
        "attention bf16[2x2x32x16] q, 32 keys -> bf16[2x2x32x16], scale 0.25, causal",
    ),
    "sdpa_bias": (
        lambda q, k, v, bias: jax.nn.dot_product_attention(q, k, v, bias=bias),
        [*_shapes(), _bias((B, N, T, T))],
        "attention bf16[2x2x32x16] q, 32 keys -> bf16[2x2x32x16], scale 0.25, bias bf16[2x2x32x32]",
    ),
    "sdpa_bias_per_head_causal": (
        lambda q, k, v, bias: jax.nn.dot_product_attention(q, k, v, bias=bias, is_causal=True),
        [*_shapes(), _bias((1, N, T, T))],
        "attention bf16[2x2x32x16] q, 32 keys -> bf16[2x2x32x16], scale 0.25,"
        " bias bf16[1x2x32x32], causal",
    ),
    "cross_attention_f16_by_hand": (  # jax's own has no f16 x f16 -> f32 dot on a CPU
        _hand_written,
        _shapes(t=8, s=40, d=32, dtype="float16"),
        "attention f16[2x2x8x32] q, 40 keys -> f16[2x2x8x32], scale 0.176777",
    ),
    "hand_written_f32_scores": (
        _hand_written,
        _shapes(d=24),
        "attention bf16[2x2x32x24] q, 32 keys -> bf16[2x2x32x24], scale 0.204124",
    ),
    "three_batch_dimensions_bias": (
        _three_batch_dimensions,
        [
            *(jax.ShapeDtypeStruct((2, 3, 16, 2, 16), jnp.bfloat16) for _ in range(3)),
            _bias((1, 3, 1, 16, 16)),
        ],
        # B merges A and B: the bias, over B alone, is broadcast over A first (not over H)
        "attention bf16[6x2x16x16] q, 16 keys -> bf16[6x2x16x16], scale 0.25, bias bf16[6x1x16x16]",
    ),
    # masks other than the causal one join the bias: 0 where kept, jax's fill elsewhere
    "padding_mask": (
        lambda q, k, v, mask: jax.nn.dot_product_attention(q, k, v, mask=mask),
        [*_shapes(), jax.ShapeDtypeStruct((B, 1, T, T), jnp.bool_)],
        "attention bf16[2x2x32x16] q, 32 keys -> bf16[2x2x32x16], scale 0.25, bias bf16[2x1x32x32]",
    ),
    "key_padding_mask_causal_bias": (  # jax ands the two masks: all of it joins the bias
        lambda q, k, v, bias, lengths: jax.nn.dot_product_attention(
            q, k, v, bias=bias, is_causal=True, key_value_seq_lengths=lengths
        ),
        [*_shapes(), _bias((1, N, T, T)), jax.ShapeDtypeStruct((B,), jnp.int32)],
        "attention bf16[2x2x32x16] q, 32 keys -> bf16[2x2x32x16], scale 0.25, bias bf16[2x2x32x32]",
    ),
    "grouped_query_bias_per_query_head": (  # [1, N, T, S]: H spans K and the groups
        lambda q, k, v, bias: jax.nn.dot_product_attention(q, k, v, bias=bias),
        [*_shapes(n=4, kv_heads=2), _bias((1, 4, T, T))],
        "attention bf16[2x4x32x16] q, 32 keys -> bf16[2x4x32x16], 2 key/value heads,"
        " scale 0.25, bias bf16[1x4x32x32]",
    ),
    "grouped_query_sequence_lengths_causal": (  # a row of batch 0 masks every key
        lambda q, k, v, lengths: jax.nn.dot_product_attention(
            q, k, v, is_causal=True, key_value_seq_lengths=lengths
        ),
        [*_shapes(n=4, kv_heads=2), jax.ShapeDtypeStruct((B,), jnp.int32)],
        "attention bf16[2x4x32x16] q, 32 keys -> bf16[2x4x32x16], 2 key/value heads,"
        " scale 0.25, bias bf16[2x4x32x32]",  # jax broadcasts its mask over the heads
    ),
    "grouped_query_padding_mask": (
        lambda q, k, v, mask: jax.nn.dot_product_attention(q, k, v, mask=mask),
        [*_shapes(n=4, kv_heads=2), jax.ShapeDtypeStruct((B, 1, T, T), jnp.bool_)],
        "attention bf16[2x4x32x16] q, 32 keys -> bf16[2x4x32x16], 2 key/value heads,"
        " scale 0.25, bias bf16[2x1x32x32]",
    ),
    # grouped-query attention: query heads share key/value heads (cuDNN's GQA and MQA)
    "grouped_query": (  # jax transposes the softmax's maximum between the head groups
        jax.nn.dot_product_attention,
        _shapes(n=4, kv_heads=2),
        "attention bf16[2x4x32x16] q, 32 keys -> bf16[2x4x32x16], 2 key/value heads, scale 0.25",
    ),
    "grouped_query_causal": (
        lambda q, k, v: jax.nn.dot_product_attention(q, k, v, is_causal=True),
        _shapes(n=8, kv_heads=2, d=32),
        "attention bf16[2x8x32x32] q, 32 keys -> bf16[2x8x32x32], 2 key/value heads,"
        " scale 0.176777, causal",
    ),
    "multi_query_causal_bias": (
        lambda q, k, v, bias: jax.nn.dot_product_attention(q, k, v, bias=bias, is_causal=True),
        [*_shapes(n=4, kv_heads=1), _bias((1, 1, T, T))],
        "attention bf16[2x4x32x16] q, 32 keys -> bf16[2x4x32x16], 1 key/value heads, scale 0.25,"
        " bias bf16[1x1x32x32], causal",
    ),
    "grouped_query_by_hand_group_major": (  # rows (G, T), the other order jax's has
        _grouped_by_hand,
        _shapes(t=16, s=24, n=6, kv_heads=2, d=16, dtype="float16"),
        "attention f16[2x6x16x16] q, 24 keys -> f16[2x6x16x16], 2 key/value heads, scale 0.25,"
        " causal",
    ),
}

#: name -> (function, argument shapes, target, why not)
REFUSED = {
    "f32": (jax.nn.dot_product_attention, _shapes(dtype="float32"), H100, "not f32"),
    "bf16_scores": (_bf16_scores, _shapes(), H100, "computes the scores or their softmax in bf16"),
    "padding_mask_filled_with_1e9": (  # a row the mask empties would not stay uniform
        _masked_by_hand,
        [*_shapes(), jax.ShapeDtypeStruct((B, T), jnp.bool_)],
        H100,
        "with a fill of at most -1e+30 (it fills with -1e+09)",
    ),
    "backward_pass": (
        jax.value_and_grad(
            lambda q, k, v: jax.nn.dot_product_attention(q, k, v).astype(jnp.float32).sum()
        ),
        _shapes(),
        H100,
        "a backward pass keeps the attention's intermediates",
    ),
    "wide_head": (jax.nn.dot_product_attention, _shapes(d=160), H100, "head dimension 160"),
    "rocm": (jax.nn.dot_product_attention, _shapes(), Target.preset("mi300x"), "no fused-att"),
}


def _lowered(function, shapes) -> str:
    return jax.jit(function).lower(*shapes).as_text(dialect="hlo")


def _inputs(shapes, seed: int = 7) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    out = []
    for shape in shapes:
        if shape.dtype == jnp.bool_:
            out.append(rng.random(shape.shape) < 0.8)
        elif shape.dtype == jnp.int32:  # sequence lengths, 0 (every key masked) among them
            out.append(np.arange(np.prod(shape.shape), dtype=np.int32).reshape(shape.shape) * 17)
        else:
            out.append(rng.standard_normal(shape.shape).astype(shape.dtype))
    return out


def _attention_calls(compiled) -> list[LibraryCallThunk]:
    return [
        t
        for t in walk(compiled.artefact.program)
        if isinstance(t, LibraryCallThunk) and t.operation == "attention"
    ]


@pytest.fixture(scope="module", params=sorted(TAKEN))
def taken(request):
    function, shapes, described = TAKEN[request.param]
    text = _lowered(function, shapes)
    compiled = compile_program(parse_module(text), H100, ("interpreter",))
    inputs = _inputs(shapes)
    expected = np.asarray(jax.jit(function)(*inputs))  # XLA:CPU: this machine has no GPU
    return text, described, compiled, inputs, expected


def test_attention_for_cuda_is_one_library_call_and_no_gemm(taken):
    _, described, compiled, _, _ = taken
    (call,) = _attention_calls(compiled)
    assert (call.library, call.fallback_emitter) == ("dnn", "host")
    assert AttentionCall.from_thunk(call).describe() == described
    gemms = [t for t in walk(compiled.artefact.program) if getattr(t, "operation", "") == "gemm"]
    assert gemms == []  # the two dots are the call


#: TAKEN cases whose q, k, v and output the library reads and writes where jax keeps them
#: ([B, S, H, D]: strides, no transpose kernels) -> the kernels left (a bias's own layout).
IN_PLACE = {
    "sdpa": 0,
    "sdpa_causal": 0,
    "sdpa_bias": 0,
    "sdpa_bias_per_head_causal": 0,
    "grouped_query": 0,
    "grouped_query_causal": 0,
    "multi_query_causal_bias": 0,
    "grouped_query_by_hand_group_major": 0,
}


@pytest.mark.parametrize("name", sorted(IN_PLACE))
def test_jax_s_bshd_tensors_are_read_and_written_through_strides(name):
    from heron.compiler.executable import thunk_counts

    function, shapes, _ = TAKEN[name]
    compiled = compile_program(parse_module(_lowered(function, shapes)), H100, ("interpreter",))
    (thunk,) = _attention_calls(compiled)
    call = AttentionCall.from_thunk(thunk)
    b, t, n, h = shapes[0].shape  # jax's [B, T, N, H]
    s, kv = shapes[1].shape[1:3]
    bshd = (t * n * h, h, n * h, 1)  # cuDNN's [B, H, S, D] read from [B, S, H, D]
    assert call.q_strides == call.o_strides == bshd
    assert call.k_strides == call.v_strides == (s * kv * h, h, kv * h, 1)
    assert call.k_dims[1] == kv  # grouped queries: the key/value heads as stored
    assert thunk_counts(compiled).get("kernel", 0) == IN_PLACE[name]


@pytest.mark.parametrize("libraries", [(), ("attention",)])
def test_the_interpreter_gives_xla_s_results_on_the_host_or_with_its_numpy_library(
    taken, libraries
):
    _, _, compiled, inputs, expected = taken
    device = InterpreterDevice(libraries=libraries)
    executable = load_executable(compiled.artefact, device, command_buffers=True, min_graph_size=1)
    (choice,) = [c for c in executable.library_choices if c.call.startswith("attention")]
    assert (choice.chosen, choice.library) == (("numpy", True) if libraries else ("host", False))
    (out,) = executable.run(inputs)
    out, reference = np.asarray(out, np.float64), np.asarray(expected, np.float64)
    # probabilities and output each rounded once to a 16-bit type: a few of its ulps
    bound = 4 * 2.0 ** -(8 if expected.dtype == jnp.bfloat16 else 11)
    assert np.abs(out - reference).max() <= bound * max(1.0, np.abs(reference).max())


@pytest.mark.parametrize("name", sorted(REFUSED))
def test_what_the_fused_call_would_change_stays_two_gemms_and_says_why(name):
    function, shapes, target, why = REFUSED[name]
    module = parse_module(_lowered(function, shapes))
    _, verdicts = program_attention_verdicts(module, target)
    assert verdicts, "the softmax between two dots is a candidate"
    assert any(why in verdict for _, verdict in verdicts), verdicts
    assert all(verdict.startswith("two GEMMs and a softmax") for _, verdict in verdicts)
    compiled = compile_program(module, target, ("interpreter",))
    assert _attention_calls(compiled) == []


def test_heron_compile_says_what_computes_each_attention(tmp_path, capsys):
    for name, (function, shapes, _, why) in (
        ("sdpa", (*TAKEN["sdpa"][:2], H100, "cudnn")),
        ("bf16_scores", REFUSED["bf16_scores"]),
    ):
        path = tmp_path / f"{name}.hlo"
        path.write_text(_lowered(function, shapes))
        out = tmp_path / f"{name}.heron"
        assert heron(["compile", str(path), "--executable", str(out)]) == 0
        (line,) = [x for x in capsys.readouterr().out.splitlines() if "attention ending" in x]
        assert why in line


def test_heron_run_check_agrees_on_a_fused_attention(tmp_path, capsys):
    function, shapes, _ = TAKEN["sdpa_bias_per_head_causal"]
    path = tmp_path / "attention.hlo"
    path.write_text(_lowered(function, shapes))
    assert heron(["run", str(path), "--backend", "interpreter", "--check"]) == 0
    out = capsys.readouterr().out
    assert "agree: every output within the tolerance" in out
    assert "attention bf16[2x2x32x16] q, 32 keys -> bf16[2x2x32x16], scale 0.25, bias" in out
    assert "causal: host (on the host: the interpreter" in out


def test_the_contract_refuses_what_it_does_not_describe():
    dims = (1, 2, 8, 16)
    fields = {}
    for name in ("q", "k", "v", "o"):
        fields |= {f"{name}_dims": dims, f"{name}_strides": dense_strides(dims, range(4))}
    AttentionCall(**fields, scale=0.25)
    for change, message in (
        ({"element_type": "f32"}, "element type 'f32'"),
        ({"k_dims": (1, 2, 8, 8), "k_strides": (128, 64, 8, 1)}, "k_dims"),
        ({"o_strides": (1, 1, 1, 1)}, "do not store"),
        ({"bias_dims": (1, 2, 8, 9), "bias_strides": (144, 72, 9, 1)}, "bias_dims"),
        ({"scale": float("nan")}, "finite"),
        ({"causal": 1}, "true or false"),
        (  # 2 query heads cannot share 3 key/value heads
            {"k_dims": (1, 3, 8, 16), "k_strides": dense_strides((1, 3, 8, 16), range(4))},
            "no multiple of k's 3",
        ),
    ):
        with pytest.raises(ThunkError, match=message):
            AttentionCall(**(fields | {"scale": 0.25} | change))
    wide = (1, 2, 8, 136)
    with pytest.raises(ThunkError, match="head dimension 136"):
        AttentionCall(
            **{f"{n}_dims": wide for n in ("q", "k", "v", "o")},
            **{f"{n}_strides": dense_strides(wide, range(4)) for n in ("q", "k", "v", "o")},
            scale=0.1,
        )


def test_grouped_query_contract_shares_each_key_value_head_among_its_group():
    """The numpy reference, the host HLO and per-head attention agree: query head n uses
    key/value head n // G (what cuDNN's GQA and jax's head groups compute)."""
    from heron.hlo.custom_calls.attention import attention_text
    from heron.hlo.element_types import ElementType
    from heron.hlo.evaluator import evaluate_module
    from heron.hlo.shapes import ArrayShape

    b, h, hk, s, d = 1, 4, 2, 8, 16
    q_dims, kv_dims = (b, h, s, d), (b, hk, s, d)
    call = AttentionCall(
        q_dims=q_dims,
        q_strides=dense_strides(q_dims, range(4)),
        k_dims=kv_dims,
        k_strides=dense_strides(kv_dims, range(4)),
        v_dims=kv_dims,
        v_strides=dense_strides(kv_dims, range(4)),
        o_dims=q_dims,
        o_strides=dense_strides(q_dims, range(4)),
        scale=0.25,
        causal=True,
    )
    rng = np.random.default_rng(3)
    q, k, v = (rng.standard_normal(x).astype(jnp.bfloat16) for x in (q_dims, kv_dims, kv_dims))
    raw = [np.frombuffer(x.tobytes(), np.uint8) for x in (q, k, v, np.zeros(q_dims, jnp.bfloat16))]
    out = np.frombuffer(call.reference(raw), jnp.bfloat16).reshape(q_dims)
    for head in range(h):  # each head alone, with its group's key/value head
        single = _one_head(call)
        kv = head // (h // hk)
        parts = [q[:, head : head + 1], k[:, kv : kv + 1], v[:, kv : kv + 1]]
        raw_one = [np.frombuffer(np.ascontiguousarray(x).tobytes(), np.uint8) for x in parts]
        raw_one.append(np.zeros(b * s * d * 2, np.uint8))  # the output's bytes
        alone = np.frombuffer(single.reference(raw_one), jnp.bfloat16).reshape(b, 1, s, d)
        assert np.array_equal(out[:, head : head + 1], alone)
    bf16 = ElementType("bf16")
    shapes = [ArrayShape(bf16, x) for x in (q_dims, kv_dims, kv_dims)]
    text = attention_text('{"causal": true, "scale": 0.25}', shapes, ArrayShape(bf16, q_dims))
    (host,) = [np.asarray(evaluate_module(parse_module(text), [q, k, v]))]
    assert np.array_equal(host, out)


def _one_head(call: AttentionCall) -> AttentionCall:
    """``call`` for one query head and one key/value head."""
    b, _, s, d = call.q_dims
    one = (b, 1, s, d)
    strides = dense_strides(one, range(4))
    return AttentionCall(
        **{f"{n}_dims": one for n in ("q", "k", "v", "o")},
        **{f"{n}_strides": strides for n in ("q", "k", "v", "o")},
        scale=call.scale,
        causal=call.causal,
    )


def test_an_order_that_is_no_permutation_is_refused_by_name():
    text = """
HloModule bad
ENTRY main {
  q = bf16[2,32,2,16] parameter(0)
  ROOT a = bf16[2,2,32,16] custom-call(q, q, q), custom_call_target="__heron$attention",
    backend_config="{\\"causal\\": true, \\"scale\\": 0.25, \\"orders\\": {\\"q\\": [0, 2, 2, 3]}}"
}
"""
    module = parse_module(text)
    q = np.zeros((2, 32, 2, 16), jnp.bfloat16)
    with pytest.raises(Exception, match=r"custom-call 'a'.*order of q is no permutation"):
        evaluate_module(module, [q])


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


def test_a_library_attention_is_the_library_call_whose_target_is_the_attention_s(monkeypatch):
    """is_library_attention asks library_call_target (heron's library calls), never reading
    custom_call_target again: with no library targets, no call is a library attention."""
    import heron.hlo.custom_calls.library as library

    entry = parse_module(CUSTOM_CALLS).entry
    found = {inst.name for inst in entry.instructions if is_library_attention(inst)}
    assert found == {"attention"}
    monkeypatch.setattr(library, "LIBRARY_TARGETS", frozenset())
    assert not any(map(is_library_attention, entry.instructions))
