"""fp8 and s8 dots as jax writes them: cuBLASLt calls on CUDA devices that have them.

XLA:GPU (deviceless, H100, cuBLASLt for dots) makes an fp8 dot a
``__cublas$lt$matmul$f8`` call whose operands are the fp8 arrays, read with
the contracting dimension minor ("TN": the rhs transposed by a kernel
before the call), and whose a_scale / b_scale are the scalars the jax
program multiplies the converted operands by (1 where it has none); an s8 x
s8 -> s32 dot a ``__cublas$lt$matmul`` call, TN too. One operand scaled and the
other a plain convert: XLA passes a constant 1 for the missing scale (heron's
call has one scale argument; cuBLASLt's unset pointer is 1). A transposed fp8
lhs: XLA transposes the fp8 value by a kernel (``wrapped_transpose``) so that
the call reads ``[m, k]``. ``convert(clamp(-max, dot / s, max))`` to fp8 is
the call's fp8 output, ``d_scale`` ``1 / s`` (a scalar kernel computes it;
``dot * s`` passes ``s``); other bounds, or no clamp, keep an f32 call and a
kernel. FAST_ACCUM is set at DEFAULT precision (not at HIGHEST). heron does the same
(:mod:`heron.compiler.library_gemm_fp8`) on a Target with fp8 tensor cores
(compute capability 8.9 and later); on an A100 or an MI300X the fp8 dot
keeps its former path. Every result equals XLA:CPU's (jax on the CPU
computes fp8 dots) within f32's accumulation rounding: the fp8 products
are exact in f32.
"""

from __future__ import annotations

import attrs
import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest

from heron.compiler import Target
from heron.compiler.executable import compile_program
from heron.hlo.parser import parse_module
from heron.runtime.core.executor import load_executable
from heron.runtime.core.gemm import GemmCall, agreement_tolerance
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


def _one_sided(a, b, a_scale):
    return (a.astype(jnp.float32) * a_scale) @ b.astype(jnp.float32)


def _one_sided_rhs(a, b, b_scale):
    return a.astype(jnp.float32) @ (b.astype(jnp.float32) * b_scale)


def _lhs_transposed(a, b, a_scale, b_scale):
    # a stored [k, m]: transposed above its dequantization
    return (a.astype(jnp.float32) * a_scale).T @ (b.astype(jnp.float32) * b_scale)


def _lhs_transposed_fp8(a, b, a_scale, b_scale):
    # the fp8 value transposed, then dequantized
    return (a.T.astype(jnp.float32) * a_scale) @ (b.astype(jnp.float32) * b_scale)


def _highest(a, b, a_scale, b_scale):
    a, b = a.astype(jnp.float32) * a_scale, b.astype(jnp.float32) * b_scale
    return jnp.matmul(a, b, precision="highest")


def _fp8_out(dtype, divide=True, bound=None):
    largest = float(ml_dtypes.finfo(dtype).max) if bound is None else bound

    def function(a, b, a_scale, b_scale, d_scale):
        y = _scaled(a, b, a_scale, b_scale)
        return jnp.clip(y / d_scale if divide else y * d_scale, -largest, largest).astype(dtype)

    return function


def _fp8_out_transposed(a, b, a_scale, b_scale, d_scale):
    y = _lhs_transposed(a, b, a_scale, b_scale)
    return jnp.clip(y / d_scale, -448.0, 448.0).astype(E4M3)


def _fp8_out_of_a_plain_dot(a, b, d_scale):
    return jnp.clip(_dot(a, b) / d_scale, -448.0, 448.0).astype(E4M3)


def _fp8_out_one_sided(a, b, a_scale, d_scale):
    return jnp.clip(_one_sided(a, b, a_scale) / d_scale, -448.0, 448.0).astype(E4M3)


#: name -> (function, operand shapes and types, the call on an H100, the other kernels:
#: XLA's, deviceless H100, xla_gpu_enable_triton_gemm=false: transposes of the fp8
#: operands, the reciprocal of a divisor)
_E4M3 = "f8e4m3fn[32x64] x f8e4m3fn[64x48]^T -> f32"
_TO_E4M3 = "f8e4m3fn[32x64] x f8e4m3fn[64x48]^T -> f8e4m3fn"
_AB = [((32, 64), E4M3), ((64, 48), E4M3)]
_SCALAR = ((), np.float32)
_KM = [((64, 32), E4M3), ((64, 48), E4M3), _SCALAR, _SCALAR]
CASES = {
    "e4m3": (_dot, _AB, f"{_E4M3}, fast_accum", 1),
    "e4m3_e5m2": (
        _dot,
        [((32, 64), E4M3), ((64, 48), E5M2)],
        "f8e4m3fn[32x64] x f8e5m2[64x48]^T -> f32, fast_accum",
        1,
    ),
    "scaled": (_scaled, [*_AB, _SCALAR, _SCALAR], f"{_E4M3}, scales, fast_accum", 1),
    "rhs_nk": (
        _transposed_rhs,
        [((32, 64), E4M3), ((48, 64), E4M3)],
        f"{_E4M3}, fast_accum",
        0,
    ),
    "highest": (_highest, [*_AB, _SCALAR, _SCALAR], f"{_E4M3}, scales", 1),
    # one operand scaled: the other's scale is 1 (XLA: a constant 1 argument)
    "one_sided": (_one_sided, [*_AB, _SCALAR], f"{_E4M3}, a_scale, fast_accum", 1),
    "one_sided_rhs": (_one_sided_rhs, [*_AB, _SCALAR], f"{_E4M3}, b_scale, fast_accum", 1),
    # a transposed lhs: its fp8 value transposed by a kernel, as the rhs's
    "lhs_transposed": (_lhs_transposed, _KM, f"{_E4M3}, scales, fast_accum", 2),
    "lhs_transposed_fp8": (_lhs_transposed_fp8, _KM, f"{_E4M3}, scales, fast_accum", 2),
    # fp8 outputs: dot / s passes 1 / s (a scalar kernel), dot * s passes s
    "out_divided": (
        _fp8_out(E4M3),
        [*_AB, _SCALAR, _SCALAR, _SCALAR],
        f"{_TO_E4M3}, scales, d_scale, fast_accum",
        2,
    ),
    "out_multiplied": (
        _fp8_out(E4M3, divide=False),
        [*_AB, _SCALAR, _SCALAR, _SCALAR],
        f"{_TO_E4M3}, scales, d_scale, fast_accum",
        1,
    ),
    "out_e5m2": (
        _fp8_out(E5M2),
        [*_AB, _SCALAR, _SCALAR, _SCALAR],
        "f8e4m3fn[32x64] x f8e4m3fn[64x48]^T -> f8e5m2, scales, d_scale, fast_accum",
        2,
    ),
    "out_of_a_plain_dot": (
        _fp8_out_of_a_plain_dot,
        [*_AB, _SCALAR],
        f"{_TO_E4M3}, d_scale, fast_accum",
        2,
    ),
    "out_one_sided": (
        _fp8_out_one_sided,
        [*_AB, _SCALAR, _SCALAR],
        f"{_TO_E4M3}, a_scale, d_scale, fast_accum",
        2,
    ),
    "out_lhs_transposed": (
        _fp8_out_transposed,
        [*_KM, _SCALAR],
        f"{_TO_E4M3}, scales, d_scale, fast_accum",
        3,
    ),
    # bounds other than the type's largest value: XLA keeps the f32 call and a kernel
    "out_other_bounds": (
        _fp8_out(E4M3, bound=400.0),
        [*_AB, _SCALAR, _SCALAR, _SCALAR],
        f"{_E4M3}, scales, fast_accum",
        2,
    ),
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


def _fp8_out_inputs(name, specs, seed=3):
    """Inputs whose fp8 output saturates somewhere: the result divided by 1/64 (or
    multiplied by 64)."""
    inputs = _inputs(specs, seed)
    inputs[-1] = np.float32(64 if "multiplied" in name else 1 / 64)
    return inputs


def _compile(function, inputs, target):
    text = jax.jit(function).lower(*inputs).as_text(dialect="hlo")
    return compile_program(parse_module(text), Target.preset(target), ("interpreter",))


def _check(compiled, inputs, expected, libraries):
    device = InterpreterDevice(libraries=libraries)
    (out,) = load_executable(compiled.artefact, device).run(inputs)
    if expected.dtype in (E4M3, E5M2):
        # an fp8 result: the f32 sums, summed in another order (and multiplied by 1 / s
        # instead of divided by s), may round to the neighbouring fp8 value
        assert out.dtype == expected.dtype
        got, want = out.astype(np.float32), expected.astype(np.float32)
        info = ml_dtypes.finfo(expected.dtype)
        step = 2.0 ** -int(info.nmant) * np.abs(want) + float(info.smallest_subnormal)
        assert np.all(np.abs(got - want) <= step)
        assert np.mean(got == want) > 0.9
        return device
    bound = 4 * np.finfo(np.float32).eps * 64**0.5 * np.abs(expected).max()
    np.testing.assert_allclose(out, expected, rtol=0, atol=bound)
    return device


@pytest.mark.parametrize("name", sorted(CASES))
def test_an_fp8_dot_is_a_cublaslt_fp8_call_on_an_h100(name):
    function, specs, described, others = CASES[name]
    inputs = _fp8_out_inputs(name, specs) if name.startswith("out_") else _inputs(specs)
    expected = np.asarray(jax.jit(function)(*inputs))
    compiled = _compile(function, inputs, "h100")
    (thunk,) = [t for t in walk(compiled.artefact.program) if isinstance(t, LibraryCallThunk)]
    call = GemmCall.from_thunk(thunk)
    assert call.describe() == f"gemm {described}"
    assert not call.lhs_transposed and call.rhs_transposed  # TN, as cuBLASLt reads fp8
    kernels = [t for t in compiled.artefact.program if isinstance(t, KernelThunk)]
    assert len(kernels) == others  # XLA's: fp8 transposes, the divisor's reciprocal
    scalars = [call.argument(n) for n in ("a_scale", "b_scale", "d_scale")]
    sizes = [thunk.arguments[i].size for i in scalars if i is not None]
    assert sizes == [4] * (len(call.scales) + call.d_scale)  # one f32 each
    if call.out_type != "f32":  # the call's output is the program's, rounded to fp8
        assert thunk.arguments[call.argument("out")].size == 32 * 48
    for libraries in ((), ("gemm",)):  # heron's GEMM kernel (the fallback), numpy's
        device = _check(compiled, inputs, expected, libraries)
        assert device.library_calls == len(libraries)
    if call.out_type == "f8e4m3fn" and call.d_scale:  # some sums saturate, as XLA clamps
        assert np.abs(expected.astype(np.float32)).max() == 448


@pytest.mark.parametrize("target", ["a100", "mi300x"])
@pytest.mark.parametrize(
    "name", ["e4m3", "scaled", "one_sided", "lhs_transposed", "out_divided", "out_multiplied"]
)
def test_an_fp8_dot_without_fp8_tensor_cores_keeps_its_former_path(target, name):
    function, specs, _, _ = CASES[name]
    inputs = _fp8_out_inputs(name, specs) if name.startswith("out_") else _inputs(specs)
    expected = np.asarray(jax.jit(function)(*inputs))
    compiled = _compile(function, inputs, target)
    calls = [
        GemmCall.from_thunk(t)
        for t in walk(compiled.artefact.program)
        if isinstance(t, LibraryCallThunk)
    ]
    assert all(call.lhs_type == "f32" and call.out_type == "f32" for call in calls)  # no fp8
    if name != "lhs_transposed":  # (that dot's lhs is column-major there: heron's kernel)
        assert bool(calls) == (name != "e4m3")  # the dequantized f32 dot is a library GEMM
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


def test_the_contract_takes_one_scale_as_one_and_fast_accumulation_for_fp8_only():
    one = GemmCall(1, 4, 16, 32, "f8e4m3fn", "f8e4m3fn", "f32", rhs_transposed=True, scales="b")
    assert one.operand_names == ("lhs", "rhs", "b_scale", "out")
    assert one.describe().endswith("-> f32, b_scale")
    rng = np.random.default_rng(5)
    a = (rng.standard_normal((4, 32)) * 4).astype(E4M3)
    b = (rng.standard_normal((16, 32)) * 4).astype(E4M3)
    arguments = [a.view(np.uint8).ravel(), b.view(np.uint8).ravel()]
    arguments += [np.array([2.5], np.float32).view(np.uint8), np.zeros(256, np.uint8)]
    got = one.reference(arguments).view(np.float32).reshape(4, 16)
    exact = (a.astype(np.float64) @ b.astype(np.float64).T) * 2.5  # the lhs's scale is 1
    np.testing.assert_allclose(got, exact, rtol=1e-6)
    # an artefact written when scales was a bool
    assert GemmCall(1, 4, 16, 32, "f8e4m3fn", "f8e4m3fn", "f32", scales=True).scales == "ab"
    assert GemmCall(1, 4, 16, 32, "f8e4m3fn", "f8e4m3fn", "f32", scales=False).scales == ""
    with pytest.raises(Exception, match="scales 'c'"):
        GemmCall(1, 4, 16, 32, "f8e4m3fn", "f8e4m3fn", "f32", scales="c")
    with pytest.raises(Exception, match="fast_accum is for fp8 operands, not bf16"):
        GemmCall(1, 4, 16, 32, "bf16", "bf16", "f32", fast_accum=True)
    fast = attrs.evolve(one, fast_accum=True)
    assert agreement_tolerance(fast) > agreement_tolerance(one)


def test_a_divide_of_constants_alone_leads_to_no_fp8_dot():
    """``jax.random.wald`` divides a product of constants by a broadcast scalar: the
    search for an fp8 dot's ``d_scale`` under it found no operand that was not constant
    and raised StopIteration, a pass failure on every fp8 target."""

    def wald(key):
        return jax.random.wald(key, 2.0, (64,))

    key = np.asarray(jax.random.key_data(jax.random.PRNGKey(3)))
    text = jax.jit(lambda k: wald(jax.random.wrap_key_data(k))).lower(key).as_text(dialect="hlo")
    compiled = compile_program(parse_module(text), Target.preset("h100"), ("interpreter",))
    (out,) = load_executable(compiled.artefact, InterpreterDevice()).run([key])
    expected = np.asarray(wald(jax.random.wrap_key_data(key)))
    np.testing.assert_allclose(out, expected, rtol=1e-5)
