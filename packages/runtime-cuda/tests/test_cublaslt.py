"""The cuBLASLt GEMM library call against a stand-in (conftest.FakeCublasLt), and on a GPU.

The stand-in records every argument the wrapper passes (layouts, leading
dimensions, batch counts and strides, compute and scale types, epilogue, bias
pointer, workspace) and computes, column-major, what cuBLASLt computes from
exactly those arguments; so each test checks the recorded values against the
GEMM contract (heron.runtime.core.gemm) and the numbers against
``GemmCall.reference``. The calls are every dot of the program corpus that the
compiler turns into a library call, and a few the corpus lacks (s8, f16,
alpha/beta). The executor's choice is tested on the CUDA device over the
stand-in driver, offering and not offering cuBLASLt.
"""

from __future__ import annotations

import attrs
import numpy as np
import pytest
from heron_test_support.fake_blas import (
    assert_gemm_close,
    corpus_gemm_calls,
    expected_bytes,
    extra_gemm_calls,
    random_operands,
)
from heron_test_support.gemm_artefact import gemm_artefact

from heron.runtime.core.executor import Executable
from heron.runtime.core.gemm import GemmCall
from heron.runtime.cuda.cublaslt import WORKSPACE_BYTES, CublasLt, always_runs, plan
from heron.runtime.cuda.device import CudaDevice

EXTRA_CALLS = (
    *extra_gemm_calls(),
    # fp8 with one scale (the other 1: its pointer left unset), fast accumulation, an fp8
    # output of one scale (the compiler's calls for XLA's fp8 patterns)
    GemmCall(1, 16, 32, 48, "f8e4m3fn", "f8e4m3fn", "f32", rhs_transposed=True, scales="a"),
    GemmCall(
        2, 16, 16, 32, "f8e4m3fn", "f8e5m2", "bf16", rhs_transposed=True, scales="b",
        fast_accum=True,
    ),
    GemmCall(
        1, 32, 16, 16, "f8e4m3fn", "f8e4m3fn", "f8e5m2", rhs_transposed=True, scales="a",
        d_scale=True, fast_accum=True, alpha=0.5,
    ),
)  # fmt: skip


def _run(call: GemmCall, library: CublasLt, rng: np.random.Generator):
    """Random operands in host memory (the stand-in's device); the outputs (the last
    arguments: out, and aux with it) and the contract's."""
    operands = random_operands(call, rng)
    expected = expected_bytes(call, operands)
    library._lt.last_addresses = [o.ctypes.data for o in operands]
    library.run(call, [o.ctypes.data for o in operands], 0x5001)
    if call.aux:
        return operands[-2:], expected
    return [operands[-1]], [expected]


def _check_plan(call: GemmCall, recorded: dict) -> None:
    """The recorded arguments are the contract, row-major through column-major, swapped."""
    layouts = {role: recorded[role][1] for role in "abcd"}
    element = {0: "f32", 1: "f64", 2: "f16", 14: "bf16", 3: "s8", 10: "s32", 4: "c64", 5: "c128"}
    element |= {28: "f8e4m3fn", 29: "f8e5m2"}
    a = (call.k, call.n) if call.rhs_transposed else (call.n, call.k)  # stored rows, cols
    b = (call.m, call.k) if call.lhs_transposed else (call.k, call.m)
    expected = {
        "a": (call.rhs_type, *a, a[0], call.k * call.n),
        "b": (call.lhs_type, *b, b[0], call.m * call.k),
        # beside an fp8 D, C is bf16 (cuBLASLt's fp8 types; beta 0: not read)
        "c": (
            "bf16" if call.out_type.startswith("f8") else call.out_type,
            call.n,
            call.m,
            call.n,
            call.m * call.n,
        ),
        "d": (call.out_type, call.n, call.m, call.n, call.m * call.n),
    }
    for role, (kind, rows, cols, ld, stride) in expected.items():
        layout = layouts[role]
        assert (element[layout["TYPE"]], layout["ROWS"], layout["COLS"], layout["LD"]) == (
            kind,
            rows,
            cols,
            ld,
        ), role
        assert layout["ORDER"] == 0  # CUBLASLT_ORDER_COL
        if call.batch > 1:
            assert (layout["BATCH_COUNT"], layout["STRIDED_BATCH_OFFSET"]) == (call.batch, stride)
        else:
            assert "BATCH_COUNT" not in layout
    # C is D, or the c argument
    assert (recorded["c"][0] == recorded["d"][0]) == (not call.residual)
    desc = recorded["desc"]
    compute = {
        ("f32", ""): (68, 0),
        ("f32", "tf32"): (77, 0),
        ("f32", "bf16"): (75, 0),
        ("f64", ""): (70, 1),
        ("c64", ""): (68, 4),
        ("c128", ""): (70, 5),
        ("s32", ""): (72, 10),
    }[(call.accumulation, call.compute)]
    assert (desc["compute_type"], desc["scale_type"]) == compute
    assert (desc["TRANSA"], desc["TRANSB"]) == (int(call.rhs_transposed), int(call.lhs_transposed))
    epilogue = {(False, "none"): 1, (True, "none"): 4, (False, "relu"): 2, (True, "relu"): 6}
    epilogue |= {(False, "gelu"): 32, (True, "gelu"): 36}
    aux_epilogue = {False: 160, True: 164}  # GELU_AUX, GELU_AUX_BIAS
    expected_epilogue = (
        aux_epilogue[call.bias] if call.aux else epilogue[(call.bias, call.activation)]
    )
    assert desc["EPILOGUE"] == expected_epilogue
    # XLA's FAST_ACCUM for an fp8 dot at DEFAULT precision: set only where the call says so
    assert bool(desc.get("FAST_ACCUM", 0)) == call.fast_accum
    assert (desc.get("BIAS_DATA_TYPE") is not None) == call.bias
    # the aux matrix: D's layout (leading dimension n, batch stride m * n), its own pointer
    assert ("EPILOGUE_AUX_POINTER" in desc) == ("EPILOGUE_AUX_LD" in desc) == call.aux
    if call.aux:
        assert desc["EPILOGUE_AUX_LD"] == call.n
        assert desc.get("EPILOGUE_AUX_BATCH_STRIDE") == (
            call.m * call.n if call.batch > 1 else None
        )
        assert desc["EPILOGUE_AUX_POINTER"] == recorded["aux_address"]
    # fp8 scales: cuBLASLt's A is heron's rhs, so its A scale is the contract's b_scale
    scales = {"A": "b_scale", "B": "a_scale", "D": "d_scale"}
    for matrix, name in scales.items():
        index = call.argument(name)
        pointer = desc.get(f"{matrix}_SCALE_POINTER")
        assert pointer == (None if index is None else recorded["addresses"][index]), matrix
    assert (complex(recorded["alpha"]), complex(recorded["beta"])) == (call.scale, call.beta)
    assert recorded["workspace"][1] == WORKSPACE_BYTES
    assert recorded["stream"] == 0x5001


def test_every_corpus_gemm_and_more_as_cublaslt_computes_it(fake_cublaslt):
    corpus = corpus_gemm_calls()
    assert {program for program, _ in corpus} >= {"batched_matmul", "mlp_relu", "attention_bf16"}
    calls = [call for _, call in corpus] + list(EXTRA_CALLS)
    assert any(c.bias and c.activation == "relu" for c in calls) and any(c.batch > 1 for c in calls)
    # the corpus's own: transposed operands, alpha, a residual, GELU, TF32
    assert {"mlp_gelu", "mlp_block_prenorm", "mlp_train_grad", "attention"} <= {
        program for program, _ in corpus
    }
    assert any(c.activation == "gelu" and c.bias for _, c in corpus)
    assert any(c.residual for _, c in corpus) and any(c.alpha != 1 for _, c in corpus)
    assert any(c.lhs_transposed for _, c in corpus) and any(c.rhs_transposed for _, c in corpus)
    assert all(c.compute == "tf32" for _, c in corpus if c.lhs_type == "f32")
    rng = np.random.default_rng(17)
    stand_in = fake_cublaslt()
    workspace = []
    library = CublasLt(lambda n: workspace.append(n) or 0x9000, bindings=stand_in)
    assert workspace == [WORKSPACE_BYTES]
    assert any(c.aux and c.bias and c.batch > 1 for c in calls)  # the corpus has none
    assert any(c.d_scale for c in calls) and any(c.rhs_type == "f8e5m2" for c in calls)
    assert {c.scales for c in calls} >= {"a", "b", "ab"} and any(c.fast_accum for c in calls)
    for call in calls:
        assert library.offers(call), call.describe()
        got, expected = _run(call, library, rng)
        stand_in.matmuls[-1]["aux_address"] = got[-1].ctypes.data
        stand_in.matmuls[-1]["addresses"] = stand_in.last_addresses
        _check_plan(call, stand_in.matmuls[-1])
        if call.bias:
            assert stand_in.matmuls[-1]["desc"]["BIAS_POINTER"] != 0
        for output, contract in zip(got, expected, strict=True):
            assert_gemm_close(call, output, contract)
    assert stand_in.heuristics == len(set(calls))  # one algorithm choice per call shape


def test_plan_swaps_the_operands_for_row_major():
    chosen = plan(GemmCall(2, 3, 5, 7, "bf16", "bf16", "bf16", bias=True))
    assert (chosen.a.role, chosen.b.role, chosen.d.role) == ("rhs", "lhs", "out")
    assert (chosen.a_argument, chosen.b_argument, chosen.bias_argument, chosen.out_argument) == (
        1,
        0,
        2,
        3,
    )
    assert chosen.c_argument == 3  # no residual: C is D
    assert (chosen.compute_type, chosen.scale_type, chosen.epilogue) == (
        "COMPUTE_32F",
        "f32",
        "BIAS",
    )
    assert chosen.bias_data_type == "CUDA_R_16BF"


def test_an_fp8_call_cublaslt_cannot_read_is_not_offered_and_says_why(fake_cublaslt):
    library = CublasLt(lambda n: 0x9000, bindings=fake_cublaslt())
    tn = GemmCall(1, 16, 32, 48, "f8e4m3fn", "f8e4m3fn", "f32", rhs_transposed=True)
    assert library.offers(tn)
    nn = attrs.evolve(tn, rhs_transposed=False)
    assert not library.offers(nn)
    assert library.refusal(nn) == "cuBLASLt's fp8 GEMM reads lhs [m, k] and rhs [n, k] only (TN)"
    odd = attrs.evolve(tn, k=40)
    assert not library.offers(odd)
    assert library.refusal(odd).endswith("multiples of 16 (m 16, n 32, k 40)")
    chosen = plan(attrs.evolve(tn, out_type="f8e4m3fn", scales=True, d_scale=True))
    assert (chosen.a.data_type, chosen.d.data_type, chosen.c.data_type) == (
        "CUDA_R_8F_E4M3",
        "CUDA_R_8F_E4M3",
        "CUDA_R_16BF",
    )
    # the rhs's scale (argument 3, b_scale) is cuBLASLt's A scale
    assert (chosen.a_scale_argument, chosen.b_scale_argument, chosen.d_scale_argument) == (3, 2, 4)


def test_an_aux_matrix_cublaslt_cannot_lay_out_is_not_offered_and_says_why(fake_cublaslt):
    stand_in = fake_cublaslt()
    library = CublasLt(lambda n: 0x9000, bindings=stand_in)
    odd = GemmCall(1, 16, 12, 32, bias=True, activation="gelu", aux=True)
    assert not library.offers(odd) and stand_in.heuristics == 0  # no descriptor made
    assert library.refusal(odd) == (
        "cuBLASLt's GELU_AUX needs the aux leading dimension (n = 12) divisible by 8"
    )
    assert library.offers(attrs.evolve(odd, n=16)) and library.offers(attrs.evolve(odd, aux=False))
    assert plan(attrs.evolve(odd, n=16)).epilogue == "GELU_AUX_BIAS"
    assert plan(attrs.evolve(odd, n=16, bias=False)).epilogue == "GELU_AUX"


def test_a_call_without_an_algorithm_is_not_offered_and_its_descriptors_go(fake_cublaslt):
    stand_in = fake_cublaslt(no_algorithm=lambda desc, layouts: layouts[0]["TYPE"] == 3)
    library = CublasLt(lambda n: 0x9000, bindings=stand_in)
    s8 = GemmCall(1, 16, 24, 32, "s8", "s8", "s32")
    assert not library.offers(s8)
    assert len(stand_in.destroyed) == 6  # the preference, four layouts, the descriptor
    assert library.offers(GemmCall(1, 16, 24, 32))


def test_the_bias_pointer_follows_each_call(fake_cublaslt):
    stand_in = fake_cublaslt()
    library = CublasLt(lambda n: 0x9000, bindings=stand_in)
    call = GemmCall(1, 2, 3, 4, bias=True)
    rng = np.random.default_rng(0)
    kept = [random_operands(call, rng) for _ in range(2)]  # alive: distinct addresses
    for operands in kept:
        library.run(call, [o.ctypes.data for o in operands], 0x5001)
    first, second = (m["desc"]["BIAS_POINTER"] for m in stand_in.matmuls)
    assert first != second and stand_in.heuristics == 1


# -- the executor's choice on the CUDA device (stand-in driver and library) ------------------


def _inputs(rng):
    return [
        rng.standard_normal((2, 3, 5)).astype(np.float32),
        rng.standard_normal((2, 5, 4)).astype(np.float32),
        rng.standard_normal(4).astype(np.float32),
    ]


def _expected(inputs):
    return np.maximum(np.matmul(inputs[0], inputs[1]) + inputs[2], 0)


@pytest.mark.parametrize("command_buffers", [False, True])
def test_the_executor_takes_cublaslt_where_the_device_offers_it(
    fake_cuda, fake_cublaslt, command_buffers
):
    driver = fake_cuda()
    stand_in = fake_cublaslt(memory=driver.device_memory(), driver=driver)

    def cublaslt(device):
        allocate = lambda n: int(device.allocate(n, "workspace").handle)  # noqa: E731
        return CublasLt(allocate, bindings=stand_in, workspace_bytes=4096)  # fits the stand-in

    device = CudaDevice(bindings=driver, libraries={"gemm": cublaslt})
    executable = Executable(
        gemm_artefact(), device, command_buffers=command_buffers, min_graph_size=1
    )
    (choice,) = executable.library_choices
    assert (choice.chosen, choice.library, choice.call) == (
        "cublasLt",
        True,
        "gemm f32[2x3x5] x f32[2x5x4] -> f32, bias, relu",
    )
    assert executable.kernels == {}  # the fallback's image is not even loaded
    rng = np.random.default_rng(3)
    for _ in range(2):  # recorded, then replayed (with command buffers)
        inputs = _inputs(rng)
        (out,) = executable.run(inputs)
        np.testing.assert_allclose(out, _expected(inputs), rtol=1e-5, atol=1e-6)
    assert executable.stats.kernel_launches == 0 and driver.launched == []
    assert {record.emitter for record in executable.stats.records} == {"cublasLt"}
    assert len(stand_in.matmuls) == (1 if command_buffers else 2)  # a graph replays its node


def test_the_executor_runs_heron_s_kernel_where_cublaslt_is_missing(fake_cuda):
    def missing(device):
        from heron.runtime.core.device import DeviceError

        raise DeviceError("cuBLASLt needs nvmath-python (not installed)")

    driver = fake_cuda()
    device = CudaDevice(bindings=driver, libraries={"gemm": missing})
    executable = Executable(gemm_artefact(), device)
    (choice,) = executable.library_choices
    assert (choice.chosen, choice.library) == ("gemm", False)
    assert device.library_reasons["gemm"].endswith("(not installed)")
    assert choice.reason == device.library_reasons["gemm"]  # reported with the choice
    executable.run(_inputs(np.random.default_rng(0)))
    (launch,) = driver.launched
    assert launch["function"] == "gemm_fusion" and len(launch["args"]) == 4
    assert [(r.kind, r.emitter) for r in executable.stats.records] == [("kernel", "gemm")]
    assert executable.stats.kernel_launches == 1


@pytest.mark.cuda
def test_cublaslt_on_a_real_gpu():
    """Real GEMMs through cuBLASLt on device buffers, compared with the contract."""
    from heron.runtime.cuda.backend import create_device

    device = create_device(None)
    library = CublasLt(lambda n: int(device.allocate(n, "workspace").handle))
    rng = np.random.default_rng(5)
    calls = [call for _, call in corpus_gemm_calls()] + list(EXTRA_CALLS)
    calls.append(GemmCall(4, 128, 96, 64, "bf16", "bf16", "bf16", bias=True, activation="relu"))
    for call in calls:
        if not library.offers(call):
            # a CUDA executable holds no heron kernel beside what always_runs promises
            assert not always_runs(call), f"cuBLASLt refused {call.describe()}"
            assert call.accumulation == "s32", call.describe()  # IMMA layouts only
            continue
        operands = random_operands(call, rng)
        expected = expected_bytes(call, operands)
        expected = expected if call.aux else (expected,)
        buffers = [device.upload(o) for o in operands]
        library.run(call, [int(b.handle) for b in buffers], device._stream)
        device.synchronize()
        for buffer, contract in zip(buffers[-len(expected) :], expected, strict=True):
            got = device.copy_from_device(buffer)
            assert_gemm_close(call, got, contract, slack=4, device_rounding=True)
