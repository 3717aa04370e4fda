"""The hipBLAS GEMM library call against a stand-in (conftest.FakeHipblas), and on a GPU.

The stand-in records every argument of ``hipblasGemmStridedBatchedEx`` (m, n,
k, leading dimensions, strides, batch count, data and compute types, the
stream) and computes, column-major, what hipBLAS computes from exactly those
arguments; each test checks the recorded values against the GEMM contract
(heron.runtime.core.gemm) and the numbers against ``GemmCall.reference``,
for every dot of the program corpus that the compiler turns into a library
call and hipBLAS can express (no epilogue), and a few the corpus lacks.
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

from heron.runtime.core.artefact import (
    Allocation,
    Artefact,
    EntrySignature,
    KernelEntry,
)
from heron.runtime.core.device import KernelImage
from heron.runtime.core.executor import Executable
from heron.runtime.core.gemm import GemmCall
from heron.runtime.core.library_calls import resolve
from heron.runtime.core.thunks import BufferSlice, KernelThunk, LibraryCallThunk
from heron.runtime.rocm.device import HipDevice
from heron.runtime.rocm.hipblas import HipBlas, expressible, plan
from heron.target import Target

EXTRA_CALLS = extra_gemm_calls()


def _check(call: GemmCall, recorded: dict) -> None:
    """hipBLAS computes out^T = rhs^T lhs^T: m and n swapped, rhs first."""
    data = {"f32": "HIP_R_32F", "f16": "HIP_R_16F", "bf16": "HIP_R_16BF", "f64": "HIP_R_64F"}
    data |= {"s8": "HIP_R_8I", "s32": "HIP_R_32I", "c64": "HIP_C_32F", "c128": "HIP_C_64F"}
    assert (recorded["m"], recorded["n"], recorded["k"]) == (call.n, call.m, call.k)
    assert recorded["a"][1:] == (data[call.rhs_type], call.n, call.k * call.n)
    assert recorded["b"][1:] == (data[call.lhs_type], call.k, call.m * call.k)
    assert recorded["c"][1:] == (data[call.out_type], call.n, call.m * call.n)
    assert recorded["batch"] == call.batch
    compute = {
        "f32": "HIPBLAS_COMPUTE_32F",
        "f64": "HIPBLAS_COMPUTE_64F",
        "c64": "HIPBLAS_COMPUTE_32F",
        "c128": "HIPBLAS_COMPUTE_64F",
        "s32": "HIPBLAS_COMPUTE_32I",
    }
    assert recorded["compute"] == compute[call.accumulation]
    assert (complex(recorded["alpha"]), complex(recorded["beta"])) == (call.scale, call.beta)
    assert recorded["algo"] == "HIPBLAS_GEMM_DEFAULT" and recorded["stream"] == "stream"


def test_every_expressible_corpus_gemm_and_more_as_hipblas_computes_it(fake_hipblas):
    corpus = [call for _, call in corpus_gemm_calls()]
    calls = [call for call in (*corpus, *EXTRA_CALLS) if expressible(call)]
    assert any(c.batch > 1 for c in calls) and any(c.lhs_type == "bf16" for c in calls)
    stand_in = fake_hipblas()
    library = HipBlas(bindings=stand_in, data_types=stand_in.hipDataType)
    rng = np.random.default_rng(11)
    for call in calls:
        assert library.offers(call)
        operands = random_operands(call, rng)
        # hipBLAS multiplies f32 in f32 where an H100 call says TF32: within its bounds
        expected = expected_bytes(attrs.evolve(call, compute=""), operands)
        library.run(call, [o.ctypes.data for o in operands], "stream")
        _check(call, stand_in.gemms[-1])
        assert_gemm_close(call, operands[-1], expected)
    epilogues = [call for call in corpus if not expressible(call)]
    assert epilogues and not any(library.offers(call) for call in epilogues)
    with pytest.raises(Exception, match="no epilogues"):
        plan(epilogues[0])


def _library_call(call: GemmCall, allocation_of: list[int]) -> LibraryCallThunk:
    slices = [BufferSlice(a, 0, size) for a, size in zip(allocation_of, call.byte_sizes())]
    launch = KernelThunk("k", "k", slices, (1, 1, 1), (64, 1, 1))
    return LibraryCallThunk(
        "blas", "gemm", slices, call.attributes(), fallback=[launch], fallback_emitter="gemm"
    )


def test_the_executor_takes_hipblas_where_it_can_and_heron_s_kernel_elsewhere(
    hip_runtime, fake_hipblas
):
    runtime = hip_runtime()
    stand_in = fake_hipblas(memory=runtime.device_memory(), driver=runtime)
    device = HipDevice(
        bindings=runtime,
        libraries={"gemm": lambda d: HipBlas(bindings=stand_in, data_types=stand_in.hipDataType)},
    )
    call = GemmCall(2, 3, 4, 5)
    sizes = call.byte_sizes()
    artefact = Artefact(
        target=Target.preset("mi300x"),
        program=[_library_call(call, [0, 1, 2])],
        allocations=[
            Allocation(0, sizes[0], "parameter", parameter=0),
            Allocation(1, sizes[1], "parameter", parameter=1),
            Allocation(2, sizes[2], "output", output=0),
        ],
        signature=EntrySignature(["f32[2,3,5]{2,1,0}", "f32[2,5,4]{2,1,0}"], ["f32[2,3,4]{2,1,0}"]),
        kernels=[KernelEntry("rocm", "k", KernelImage("hsaco", "k", b"\x7fELF"))],
    )
    executable = Executable(artefact, device, command_buffers=True, min_graph_size=1)
    assert [(c.chosen, c.library) for c in executable.library_choices] == [("hipblas", True)]
    rng = np.random.default_rng(2)
    inputs = [rng.standard_normal(s).astype(np.float32) for s in ((2, 3, 5), (2, 5, 4))]
    (out,) = executable.run(inputs)
    np.testing.assert_allclose(out, np.matmul(*inputs), rtol=1e-5, atol=1e-6)
    assert len(stand_in.gemms) == 1 and runtime.launched == []  # captured, replayed
    # hipBLAS has no epilogue: a call with a bias takes heron's kernel.
    with_bias = _library_call(GemmCall(1, 3, 4, 5, bias=True), [0, 1, 2, 3])
    chosen = resolve([with_bias], device.library_for).choices
    assert [(c.chosen, c.library) for c in chosen] == [("gemm", False)]


@pytest.mark.rocm
def test_hipblas_on_a_real_gpu():
    """Real GEMMs through hipBLAS on device buffers, compared with the contract."""
    from heron.runtime.rocm.backend import create_device

    device = create_device(None)
    library = HipBlas()
    rng = np.random.default_rng(5)
    calls = [c for c in (*(c for _, c in corpus_gemm_calls()), *EXTRA_CALLS) if expressible(c)]
    for call in calls:
        operands = random_operands(call, rng)
        expected = expected_bytes(call, operands)
        buffers = [device.upload(o) for o in operands]
        library.run(call, [int(b.handle) for b in buffers], device._stream)
        device.synchronize()
        assert_gemm_close(call, device.copy_from_device(buffers[-1]), expected, slack=4)
