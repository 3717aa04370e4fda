"""fp8 and s8 dots as jax writes them: cuBLASLt calls on CUDA devices that have them.

XLA:GPU (deviceless, H100, cuBLASLt for dots) makes an fp8 dot a
``__cublas$lt$matmul$f8`` call whose operands are the fp8 arrays, read with
the contracting dimension minor ("TN": the rhs transposed by a kernel
before the call), and whose a_scale / b_scale are the scalars the jax
program multiplies the converted operands by (1 where it has none); an s8 x
s8 -> s32 dot a ``__cublas$lt$matmul`` call, TN too. heron does the same
(:mod:`heron.compiler.library_gemm_fp8`) on a Target with fp8 tensor cores
(compute capability 8.9 and later); on an A100 or an MI300X the fp8 dot
keeps its former path. Every result equals XLA:CPU's (jax on the CPU
computes fp8 dots) within f32's accumulation rounding: the fp8 products
are exact in f32.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest

from heron.compiler import Target
from heron.compiler.executable import compile_program
from heron.hlo.parser import parse_module
from heron.runtime.core.executor import load_executable
from heron.runtime.core.gemm import GemmCall
from heron.runtime.core.thunks import KernelThunk, LibraryCallThunk, walk
from heron.runtime.interpreter import InterpreterDevice

E4M3, E5M2 = ml_dtypes.float8_e4m3fn, ml_dtypes.float8_e5m2


def _dot(a, b):
    return jax.lax.dot_general(a, b, (((1,), (0,)), ((), ())), preferred_element_type=jnp.float32)


def _scaled(a, b, a_scale, b_scale):
    return (a.astype(jnp.float32) * a_scale) @ (b.astype(jnp.float32) * b_scale)


def _transposed_rhs(a, b):
    # b stored [n, k]: already what cuBLASLt reads, no transpose kernel
    return jax.lax.dot_general(a, b, (((1,), (1,)), ((), ())), preferred_element_type=jnp.float32)


#: name -> (function, operand shapes and types, the call on an H100, transpose kernels)
_E4M3 = "f8e4m3fn[32x64] x f8e4m3fn[64x48]^T -> f32"
CASES = {
    "e4m3": (_dot, [((32, 64), E4M3), ((64, 48), E4M3)], _E4M3, 1),
    "e4m3_e5m2": (
        _dot,
        [((32, 64), E4M3), ((64, 48), E5M2)],
        "f8e4m3fn[32x64] x f8e5m2[64x48]^T -> f32",
        1,
    ),
    "scaled": (
        _scaled,
        [((32, 64), E4M3), ((64, 48), E4M3), ((), np.float32), ((), np.float32)],
        f"{_E4M3}, scales",
        1,
    ),
    "rhs_nk": (_transposed_rhs, [((32, 64), E4M3), ((48, 64), E4M3)], _E4M3, 0),
}


def _inputs(specs, seed=3):
    rng = np.random.default_rng(seed)
    out = []
    for shape, dtype in specs:
        if shape == ():
            out.append(np.float32(rng.uniform(0.25, 2)))
        else:
            out.append((rng.standard_normal(shape) * 3).astype(dtype))
    return out


def _compile(function, inputs, target):
    text = jax.jit(function).lower(*inputs).as_text(dialect="hlo")
    return compile_program(parse_module(text), Target.preset(target), ("interpreter",))


def _check(compiled, inputs, expected, libraries):
    device = InterpreterDevice(libraries=libraries)
    (out,) = load_executable(compiled.artefact, device).run(inputs)
    bound = 4 * np.finfo(np.float32).eps * 64**0.5 * np.abs(expected).max()
    np.testing.assert_allclose(out, expected, rtol=0, atol=bound)
    return device


@pytest.mark.parametrize("name", sorted(CASES))
def test_an_fp8_dot_is_a_cublaslt_fp8_call_on_an_h100(name):
    function, specs, described, transposes = CASES[name]
    inputs = _inputs(specs)
    expected = np.asarray(jax.jit(function)(*inputs))
    compiled = _compile(function, inputs, "h100")
    (thunk,) = [t for t in walk(compiled.artefact.program) if isinstance(t, LibraryCallThunk)]
    call = GemmCall.from_thunk(thunk)
    assert call.describe() == f"gemm {described}"
    assert not call.lhs_transposed and call.rhs_transposed  # TN, as cuBLASLt reads fp8
    kernels = [t for t in compiled.artefact.program if isinstance(t, KernelThunk)]
    assert len(kernels) == transposes  # the rhs [k, n] -> [n, k], as XLA's transpose
    if call.scales:  # the program's scalars are the call's a_scale and b_scale
        assert [a.size for a in thunk.arguments[2:4]] == [4, 4]
    for libraries in ((), ("gemm",)):  # heron's GEMM kernel (the fallback), numpy's
        device = _check(compiled, inputs, expected, libraries)
        assert device.library_calls == len(libraries)


@pytest.mark.parametrize("target", ["a100", "mi300x"])
@pytest.mark.parametrize("name", ["e4m3", "scaled"])
def test_an_fp8_dot_without_fp8_tensor_cores_keeps_its_former_path(target, name):
    function, specs, _, _ = CASES[name]
    inputs = _inputs(specs)
    expected = np.asarray(jax.jit(function)(*inputs))
    compiled = _compile(function, inputs, target)
    calls = [
        GemmCall.from_thunk(t)
        for t in walk(compiled.artefact.program)
        if isinstance(t, LibraryCallThunk)
    ]
    assert all(call.lhs_type == "f32" for call in calls)  # no fp8 call
    assert bool(calls) == (name == "scaled")  # the dequantized f32 dot is a library GEMM
    _check(compiled, inputs, expected, ())


def test_an_s8_dot_is_a_tn_cublaslt_call_on_an_h100():
    def s8_dot(a, b):
        return jax.lax.dot_general(a, b, (((1,), (0,)), ((), ())), preferred_element_type=jnp.int32)

    rng = np.random.default_rng(4)
    inputs = [rng.integers(-128, 128, s).astype(np.int8) for s in ((32, 64), (64, 48))]
    expected = np.asarray(jax.jit(s8_dot)(*inputs))
    compiled = _compile(s8_dot, inputs, "h100")
    (thunk,) = [t for t in walk(compiled.artefact.program) if isinstance(t, LibraryCallThunk)]
    assert GemmCall.from_thunk(thunk).describe() == "gemm s8[32x64] x s8[64x48]^T -> s32"
    for libraries in ((), ("gemm",)):
        (out,) = load_executable(compiled.artefact, InterpreterDevice(libraries=libraries)).run(
            inputs
        )
        np.testing.assert_array_equal(out, expected)


def test_the_contract_scales_and_saturates_an_fp8_output():
    call = GemmCall(
        1, 4, 16, 32, "f8e4m3fn", "f8e5m2", "f8e4m3fn", rhs_transposed=True, scales=True,
        d_scale=True,
    )  # fmt: skip
    assert call.operand_names == ("lhs", "rhs", "a_scale", "b_scale", "d_scale", "out")
    rng = np.random.default_rng(2)
    a = (rng.standard_normal((4, 32)) * 4).astype(E4M3)
    b = (rng.standard_normal((16, 32)) * 4).astype(E5M2)  # stored [n, k]
    scales = np.array([0.5, 3.0, 1 / 0.1], np.float32)
    arguments = [a.view(np.uint8).ravel(), b.view(np.uint8).ravel()]
    arguments += [scales[i : i + 1].view(np.uint8) for i in range(3)] + [np.zeros(64, np.uint8)]
    got = call.reference(arguments).view(E4M3).reshape(4, 16).astype(np.float32)
    exact = (a.astype(np.float64) @ b.astype(np.float64).T) * 0.5 * 3.0 / 0.1
    want = np.clip(exact, -448, 448).astype(E4M3).astype(np.float32)  # saturated, rounded
    np.testing.assert_array_equal(got, want)
    assert np.abs(got).max() == 448  # some sums overflow e4m3: saturated, not NaN
    with pytest.raises(Exception, match="d_scale is for an fp8 output"):
        GemmCall(1, 4, 16, 32, "f8e4m3fn", "f8e4m3fn", "f32", d_scale=True)
    with pytest.raises(Exception, match="no bias, residual"):
        GemmCall(1, 4, 16, 32, "f8e4m3fn", "f8e4m3fn", "f32", bias=True)
    with pytest.raises(Exception, match="no library GEMM of f8e5m2 x f8e5m2"):
        GemmCall(1, 4, 16, 32, "f8e5m2", "f8e5m2", "f32")
