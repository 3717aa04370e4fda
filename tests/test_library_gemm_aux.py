"""A GELU whose argument is read elsewhere too: one GEMM call with an auxiliary output.

In a training step the dense layer ``gelu_tanh(x @ W + b)`` keeps its
pre-activation ``x @ W + b`` for the backward pass. XLA's GEMM rewriter makes
that one cuBLASLt call with two outputs (``GELU_AUX_BIAS``: the GELU, and its
argument as the auxiliary output) where nothing but the pre-activation is
shared, and so does heron (:mod:`heron.compiler.library_gemm`): the GEMM
contract's ``aux`` (:mod:`heron.runtime.core.gemm`). hipBLAS has no epilogue,
so ROCm keeps the GELU in a kernel of its own. The interpreter runs both the
numpy library and heron's two-output GEMM kernel (the call's fallback); both
equal XLA:CPU within TF32's rounding.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from heron.compiler import Target
from heron.compiler.executable import compile_program
from heron.hlo.parser import parse_module
from heron.runtime.core.executor import load_executable
from heron.runtime.core.gemm import GemmCall
from heron.runtime.core.thunks import KernelThunk, LibraryCallThunk, walk
from heron.runtime.interpreter import InterpreterDevice


def _loss(w1, b1, w2, x):
    hidden = jax.nn.gelu(x @ w1 + b1, approximate=True)
    return jnp.sum((hidden @ w2).astype(jnp.float32) ** 2)


def _step(w1, b1, w2, x):
    """One SGD step of a two-layer MLP with jax's tanh GELU."""
    grads = jax.grad(_loss, argnums=(0, 1, 2))(w1, b1, w2, x)
    return tuple(p - 0.1 * g for p, g in zip((w1, b1, w2), grads, strict=True))


@jax.custom_vjp
def _gelu_saving_its_argument(y):
    return jax.nn.gelu(y, approximate=True)


def _gelu_forward(y):
    return _gelu_saving_its_argument(y), y


def _gelu_backward(y, g):
    """GELU's derivative from its argument alone (spelled apart from the forward's
    values, so that no CSE shares them): what XLA's own rewriter makes GELU_AUX of."""
    c = np.float32(np.sqrt(2 / np.pi))
    t = jnp.tanh(y * (c + (y * (c * np.float32(0.044715))) * y))
    slope = c + (y * (3 * c * np.float32(0.044715))) * y
    return ((g * (0.5 * (1 + t) + 0.5 * y * (1 - t * t) * slope)).astype(y.dtype),)


_gelu_saving_its_argument.defvjp(_gelu_forward, _gelu_backward)


def _custom_vjp_step(w1, b1, w2, x):
    def loss(w1, b1, w2, x):
        hidden = _gelu_saving_its_argument(x @ w1 + b1)
        return jnp.sum((hidden @ w2).astype(jnp.float32) ** 2)

    grads = jax.grad(loss, argnums=(0, 1, 2))(w1, b1, w2, x)
    return tuple(p - 0.1 * g for p, g in zip((w1, b1, w2), grads, strict=True))


STEPS = {"jax.nn.gelu": _step, "custom_vjp": _custom_vjp_step}


def _inputs(batch, features, hidden, out, dtype):
    rng = np.random.default_rng(0)
    shapes = [(features, hidden), (hidden,), (hidden, out), (batch, features)]
    return [(rng.standard_normal(s) * 0.3).astype(dtype) for s in shapes]


def _compiled(step, inputs, target):
    text = jax.jit(step).lower(*inputs).as_text(dialect="hlo")
    return compile_program(parse_module(text), Target.preset(target), ("interpreter",))


def _calls(compiled):
    return [
        (thunk, GemmCall.from_thunk(thunk))
        for thunk in walk(compiled.artefact.program)
        if isinstance(thunk, LibraryCallThunk)
    ]


@pytest.mark.parametrize("step", sorted(STEPS))
@pytest.mark.parametrize("dtype", [jnp.float32, jnp.bfloat16], ids=["f32", "bf16"])
def test_a_training_step_s_dense_gelu_is_one_call_with_an_auxiliary_output(step, dtype):
    inputs = _inputs(64, 128, 256, 64, dtype)
    calls = _calls(_compiled(STEPS[step], inputs, "h100"))
    with_aux = [(thunk, call) for thunk, call in calls if call.aux]
    ((thunk, call),) = with_aux
    name = "bf16" if dtype == jnp.bfloat16 else "f32"
    assert call.describe().startswith(f"gemm {name}[64x128] x {name}[128x256] -> {name}")
    assert call.describe().endswith("bias, gelu, aux")
    out, aux = thunk.arguments[-2:]
    assert out.size == aux.size == 64 * 256 * np.dtype(dtype).itemsize
    # the second layer's GEMM reads the call's GELU: no GELU kernel between them
    readers = [c for t, c in calls if t.arguments[0] == out]
    assert [c.describe() for c in readers] == [
        f"gemm {name}[64x256] x {name}[256x64] -> {name}" + ", tf32, alpha 2" * (name == "f32")
    ]
    # the backward reads the auxiliary output; nothing writes the GELU's argument twice
    assert not any(aux in t.arguments[: -1 - c.aux] for t, c in calls)


@pytest.mark.parametrize("step", sorted(STEPS))
def test_the_interpreter_runs_the_call_and_its_two_output_kernel_as_xla_cpu_does(step):
    inputs = _inputs(16, 32, 64, 16, np.float32)
    expected = [np.asarray(e) for e in jax.jit(STEPS[step])(*inputs)]
    compiled = _compiled(STEPS[step], inputs, "h100")
    for libraries in ((), ("gemm",)):
        device = InterpreterDevice(libraries=libraries)
        executable = load_executable(compiled.artefact, device)
        (choice,) = [c for c in executable.library_choices if c.call.endswith("gelu, aux")]
        assert choice.chosen == ("numpy" if libraries else "gemm")
        outs = executable.run(inputs)
        for got, want in zip(outs, expected, strict=True):
            # heron's kernel multiplies in f32; the library as an H100 does, in TF32
            scale = np.abs(want).max()
            bound = 1e-5 if not libraries else 8 * 2**-11 * 64**0.5
            np.testing.assert_allclose(got, want, rtol=bound, atol=bound * scale)
        assert device.library_calls == (5 if libraries else 0)


def test_the_bf16_step_s_two_output_tensor_core_kernel_and_library_agree_with_xla_cpu():
    inputs = _inputs(16, 32, 64, 16, jnp.bfloat16)
    expected = [np.asarray(e, np.float32) for e in jax.jit(_step)(*inputs)]
    compiled = _compiled(_step, inputs, "h100")
    for libraries in ((), ("gemm",)):
        executable = load_executable(compiled.artefact, InterpreterDevice(libraries=libraries))
        for got, want in zip(executable.run(inputs), expected, strict=True):
            # bf16 values rounded in other places (cuBLASLt's GELU reads the f32 sum)
            got = np.asarray(got, np.float32)
            np.testing.assert_allclose(got, want, rtol=2**-5, atol=2**-5 * np.abs(want).max())


def test_rocm_keeps_the_gelu_in_a_kernel_of_its_own():
    inputs = _inputs(16, 32, 64, 16, np.float32)
    compiled = _compiled(_step, inputs, "mi300x")
    calls = _calls(compiled)
    assert calls and not any(call.aux or call.activation != "none" for _, call in calls)
    kernels = [t for t in compiled.artefact.program if isinstance(t, KernelThunk)]
    assert len(kernels) > 4  # the GELU, the bias, the backward's kernels
    expected = [np.asarray(e) for e in jax.jit(_step)(*inputs)]
    outs = load_executable(compiled.artefact, InterpreterDevice()).run(inputs)
    for got, want in zip(outs, expected, strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5 * np.abs(want).max())


def test_the_contract_writes_the_gelu_and_its_argument():
    call = GemmCall(2, 3, 8, 4, "bf16", "bf16", "bf16", bias=True, activation="gelu", aux=True)
    assert call.operand_names == ("lhs", "rhs", "bias", "out", "aux")
    assert call.outputs == 2 and call.describe().endswith("bf16, bias, gelu, aux")
    rng = np.random.default_rng(1)
    import ml_dtypes

    arguments = [
        rng.standard_normal(count).astype(ml_dtypes.bfloat16).view(np.uint8)
        for count in call.element_counts()
    ]
    out, aux = call.reference(arguments)
    a = arguments[0].view(ml_dtypes.bfloat16).astype(np.float64).reshape(2, 3, 4)
    w = arguments[1].view(ml_dtypes.bfloat16).astype(np.float64).reshape(2, 4, 8)
    b = arguments[2].view(ml_dtypes.bfloat16).astype(np.float64)
    before = a @ w + b
    gelu = 0.5 * before * (1 + np.tanh(np.sqrt(2 / np.pi) * (before + 0.044715 * before**3)))
    got_aux = aux.view(ml_dtypes.bfloat16).astype(np.float64).reshape(2, 3, 8)
    got_out = out.view(ml_dtypes.bfloat16).astype(np.float64).reshape(2, 3, 8)
    np.testing.assert_allclose(got_aux, before, rtol=2**-8, atol=1e-6)
    np.testing.assert_allclose(got_out, gelu, rtol=2**-7, atol=1e-2)
    # an artefact written before the attribute existed reads as no auxiliary output
    old = {k: v for k, v in call.attributes().items() if k != "aux"}
    assert GemmCall.from_attributes(old).aux is False
    with pytest.raises(Exception, match="auxiliary output is the GELU's argument"):
        GemmCall(1, 2, 8, 4, aux=True, activation="relu")
