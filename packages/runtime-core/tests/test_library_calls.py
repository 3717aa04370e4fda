"""The GEMM library call's contract, and the load-time choice of a library or heron's kernel."""

from __future__ import annotations

import attrs
import ml_dtypes
import numpy as np
import pytest

from heron.runtime.core.gemm import GemmCall
from heron.runtime.core.library_calls import resolve
from heron.runtime.core.thunks import (
    BufferSlice,
    CommandBufferThunk,
    KernelThunk,
    LibraryCallThunk,
    ThunkError,
    WhileThunk,
    thunk_from_json,
    walk,
)

S = BufferSlice


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        (dict(lhs_type="f16", rhs_type="f32"), r"no library GEMM of f16 x f32"),
        (dict(lhs_type="f16", rhs_type="f16", out_type="s32"), r"accumulates in f32.*not s32"),
        (dict(lhs_type="s8", rhs_type="s8", out_type="s32", bias=True), "no bias or activation"),
        (dict(lhs_type="s8", rhs_type="s8", out_type="s32", residual=True), r"no residual"),
        (dict(lhs_type="c64", rhs_type="c64", out_type="c64", activation="relu"), "no bias or"),
        (dict(alpha_imag=1.0), r"a complex alpha \(1\+1j\) for a f32 GEMM"),
        (dict(activation="swish"), r"activation 'swish'"),
        (dict(alpha="1"), "alpha must be a number"),
        (dict(compute="tf16"), r"compute 'tf16'"),
        (dict(lhs_type="f16", rhs_type="f16", compute="tf32"), "tf32 rounds f32 operands"),
        (dict(residual=1), "residual must be true or false"),
    ],
)
def test_calls_outside_the_contract_are_refused(fields, message):
    with pytest.raises(ThunkError, match=message):
        GemmCall(1, 2, 3, 4, **fields)
    with pytest.raises(ThunkError, match="m must be an integer >= 1"):
        GemmCall(1, 0, 3, 4)


def _bytes(array: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(array).reshape(-1).view(np.uint8)


def test_the_reference_accumulates_as_xla_and_rounds_once():
    rng = np.random.default_rng(1)
    a = rng.standard_normal((2, 3, 64)).astype(ml_dtypes.bfloat16)
    b = rng.standard_normal((2, 64, 5)).astype(ml_dtypes.bfloat16)
    bias = rng.standard_normal(5).astype(ml_dtypes.bfloat16)
    call = GemmCall(2, 3, 5, 64, "bf16", "bf16", "bf16", bias=True, activation="relu")
    got = call.reference([_bytes(a), _bytes(b), _bytes(bias), _bytes(np.zeros(30, a.dtype))])
    got = got.view(ml_dtypes.bfloat16)
    f32 = np.matmul(a.astype(np.float32), b.astype(np.float32)) + bias.astype(np.float32)
    expected = np.maximum(f32, 0).astype(ml_dtypes.bfloat16).reshape(-1)
    assert got.tobytes() == expected.tobytes()  # f32 sums, one rounding to bf16
    # s8 x s8 -> s32 wraps as XLA's s32 accumulation
    ones = np.full((1, 1, 140000), 127, np.int8)
    out = _bytes(np.zeros(1, np.int32))
    wrapped = GemmCall(1, 1, 1, 140000, "s8", "s8", "s32").reference([*[_bytes(ones)] * 2, out])
    assert wrapped.view(np.int32)[0] == 127 * 127 * 140000 - 2**32 < 0
    # alpha scales the product, beta what out held
    x = np.ones((1, 2, 2), np.float32)
    scaled = GemmCall(1, 2, 2, 2, alpha=0.5, beta=2.0).reference([_bytes(x)] * 3)
    assert scaled.view(np.float32).tolist() == [3.0] * 4


def test_the_reference_reads_transposed_operands_a_residual_and_applies_gelu():
    rng = np.random.default_rng(2)
    a = rng.standard_normal((2, 3, 8)).astype(np.float32)  # [batch, m, k]
    w = rng.standard_normal((2, 8, 5)).astype(np.float32)  # [batch, k, n]
    c = rng.standard_normal((2, 3, 5)).astype(np.float32)
    bias = rng.standard_normal(5).astype(np.float32)
    call = GemmCall(
        2,
        3,
        5,
        8,
        lhs_transposed=True,
        rhs_transposed=True,
        alpha=0.25,
        beta=1.0,
        bias=True,
        residual=True,
        activation="gelu",
    )
    assert call.operand_names == ("lhs", "rhs", "bias", "c", "out")
    stored = [a.transpose(0, 2, 1), w.transpose(0, 2, 1), bias, c, np.zeros_like(c)]
    got = call.reference([_bytes(x) for x in stored]).view(np.float32).reshape(2, 3, 5)
    x = 0.25 * np.matmul(a, w) + c + bias
    expected = 0.5 * x * (1 + np.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x**3)))
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-6)
    assert "^T" in call.describe() and "gelu" in call.describe()


def test_tf32_compute_rounds_each_operand_to_ten_fraction_bits_first():
    one_plus = np.array([1 + 2**-11 + 2**-12, 1 + 2**-20], np.float32)  # above half, below
    ones = np.ones(2, np.float32)
    tf32 = GemmCall(1, 1, 1, 2, compute="tf32")
    out = _bytes(np.zeros(1, np.float32))
    got = tf32.reference([_bytes(one_plus), _bytes(ones), out]).view(np.float32)[0]
    assert got == np.float32(1 + 2**-10 + 1)  # rounded up, and down
    full = GemmCall(1, 1, 1, 2).reference([_bytes(one_plus), _bytes(ones), out])
    assert full.view(np.float32)[0] == np.float32(one_plus.astype(np.float64).sum())
    # a tie rounds to even; inf and NaN pass unchanged
    tie = np.array([1 + 2**-11, np.inf], np.float32)
    got = tf32.reference([_bytes(tie), _bytes(np.array([1, 0], np.float32)), out])
    assert np.isnan(got.view(np.float32)[0])  # inf * 0
    got = tf32.reference([_bytes(tie), _bytes(np.array([1, 1], np.float32)), out])
    assert got.view(np.float32)[0] == np.inf
    first = _bytes(np.array([1, 0], np.float32))
    tie_only = tf32.reference([_bytes(tie[:1].repeat(2)), first, out])
    assert tie_only.view(np.float32)[0] == np.float32(1.0)


def test_an_artefact_from_before_an_attribute_existed_takes_its_default():
    attributes = GemmCall(1, 2, 3, 4).attributes()
    for new in ("lhs_transposed", "rhs_transposed", "compute", "residual"):
        del attributes[new]
    assert GemmCall.from_attributes(attributes) == GemmCall(1, 2, 3, 4)
    with pytest.raises(ThunkError, match="attributes k missing"):
        GemmCall.from_attributes({"batch": 1, "m": 2, "n": 3})


def test_the_slices_must_fit_the_contract():
    call = GemmCall(1, 2, 3, 4, bias=True)  # lhs 32 B, rhs 48 B, bias 12 B, out 24 B
    good = [S(0, 0, 32), S(1, 0, 48), S(2, 0, 12), S(3, 0, 24)]
    call.check_slices(good)
    with pytest.raises(ThunkError, match="takes 4 arguments"):
        call.check_slices(good[:3])
    with pytest.raises(ThunkError, match=r"rhs is 48 bytes, its slice alloc1\[0:40\] 40"):
        call.check_slices([good[0], S(1, 0, 40), *good[2:]])
    with pytest.raises(ThunkError, match="out alloc0.* overlaps lhs"):
        call.check_slices([*good[:3], S(0, 8, 24)])
    residual = GemmCall(1, 2, 3, 4, residual=True, beta=1.0)
    residual.check_slices([*good[:2], S(4, 0, 24), S(4, 0, 24)])  # C = D
    with pytest.raises(ThunkError, match="overlaps c"):
        residual.check_slices([*good[:2], S(4, 0, 24), S(4, 4, 24)])
    thunk = LibraryCallThunk("blas", "gemm", good, call.attributes())
    assert GemmCall.from_thunk(thunk) == call


def _call(number: int, fallback: bool = True) -> LibraryCallThunk:
    call = GemmCall(1, 2, 2, 2)
    slices = [S(number, 0, 16), S(number, 16, 16), S(number, 32, 16)]
    launch = KernelThunk("gemm_kernel", f"fusion.{number}", slices, (1, 1, 1), (32, 1, 1))
    return LibraryCallThunk(
        "blas",
        "gemm",
        slices,
        call.attributes(),
        fallback=[launch] if fallback else [],
        fallback_emitter="gemm" if fallback else "",
    )


def test_a_library_call_carries_its_fallback_through_json():
    thunk = _call(0)
    again = thunk_from_json(thunk.to_json())
    assert again == thunk and again.fallback[0].kernel_name == "gemm_kernel"
    assert [t.kind for t in walk([thunk])] == ["library_call", "kernel"]
    with pytest.raises(ThunkError, match="fallback_emitter must be a name"):
        LibraryCallThunk("blas", "gemm", [], fallback_emitter="no spaces")


def test_the_choice_is_the_device_s_call_by_call_and_reported():
    offered = {(1, 2, 2, 2)}
    program = [
        _call(0),
        WhileThunk([], S(5, 0, 1), [CommandBufferThunk([_call(1)])]),
    ]

    def library_for(call):
        return "fastblas" if (call.batch, call.m, call.n, call.k) in offered else None

    resolved = resolve(program, library_for)
    assert [(c.path, c.chosen, c.library) for c in resolved.choices] == [
        ("0", "fastblas", True),
        ("1.body.0.0", "fastblas", True),
    ]
    calls = [t for t in walk(resolved.program) if isinstance(t, LibraryCallThunk)]
    assert len(calls) == 2 and all(not t.fallback for t in calls)  # no kernel left to load
    assert {resolved.emitters[t] for t in calls} == {"fastblas"}
    offered.clear()
    resolved = resolve(program, library_for)
    assert [(c.chosen, c.library) for c in resolved.choices] == [("gemm", False)] * 2
    kernels = [t for t in walk(resolved.program) if isinstance(t, KernelThunk)]
    assert [k.image_key for k in kernels] == ["fusion.0", "fusion.1"]
    assert {resolved.emitters[k] for k in kernels} == {"gemm"}
    assert not any(isinstance(t, LibraryCallThunk) for t in walk(resolved.program))
    with pytest.raises(ThunkError, match=r"thunk 0: library call blas\.gemm .*no heron kernel"):
        resolve([_call(0, fallback=False)], library_for)


def test_each_library_computes_what_its_features_say():
    """``LIBRARY_FEATURES`` is the one statement of what a GEMM library computes: the
    compiler matches by it and a device's binding offers by it (``library_computes``)."""
    from heron.runtime.core.gemm import (
        FEATURES,
        LIBRARY_FEATURES,
        call_features,
        library_computes,
    )

    assert all(features <= set(FEATURES) for features in LIBRARY_FEATURES.values())
    plain = GemmCall(1, 3, 4, 5)
    asks = {
        "transpose": attrs.evolve(plain, rhs_transposed=True),
        "alpha": attrs.evolve(plain, alpha=0.5),
        "residual": attrs.evolve(plain, residual=True, beta=1.0),
        "bias": attrs.evolve(plain, bias=True),
        "relu": attrs.evolve(plain, activation="relu"),
        "gelu": attrs.evolve(plain, activation="gelu"),
        "aux": attrs.evolve(plain, activation="gelu", aux=True),  # only with the GELU
        "fp8": attrs.evolve(plain, lhs_type="f8e4m3fn", rhs_type="f8e5m2"),
    }
    assert set(asks) == set(FEATURES) and call_features(plain) == frozenset()
    for feature, call in asks.items():
        asked = {feature, "gelu"} if feature == "aux" else {feature}
        assert call_features(call) == asked
        for library, features in LIBRARY_FEATURES.items():
            assert library_computes(library, plain)
            assert library_computes(library, call) == (asked <= features)
    assert library_computes("cublasLt", asks["gelu"])
    assert not library_computes("hipblas", asks["bias"])
