"""cuBLASLt's algorithm candidates, the tuning results an artefact stores, and the
autotuning pass (heron.runtime.cuda.autotune), on the stand-ins and on a GPU.

The stand-in cuBLASLt (conftest.FakeCublasLt) offers three algorithms per call
shape, says how long each takes on the stand-in driver's event clock
(``cost_ms``), can make one compute a wrong result (``wrong``) and can refuse
algorithms in ``cublasLtMatmulAlgoCheck`` (``reject``); it records the
algorithm bytes every ``cublasLtMatmul`` was given.
"""

from __future__ import annotations

import attrs
import numpy as np
import pytest
from heron_test_support.fake_blas import assert_gemm_close, expected_bytes, random_operands
from heron_test_support.fake_cuda import FakeCuda
from heron_test_support.gemm_artefact import CALL, gemm_artefact

from heron.runtime.core.artefact import Allocation, Artefact, ArtefactError, EntrySignature, load
from heron.runtime.core.executor import Executable
from heron.runtime.core.gemm import GemmCall, GemmTuning, agreement_tolerance
from heron.runtime.core.thunks import BufferSlice, LibraryCallThunk
from heron.runtime.cuda.autotune import AutotuneError, autotune_gemms
from heron.runtime.cuda.cublaslt import HEURISTIC_CANDIDATES, CublasLt
from heron.runtime.cuda.device import CudaDevice
from heron.target import Target


class TimedCuda(FakeCuda):
    """The stand-in driver whose events read a clock (the stand-in cuBLASLt's ``clock_ms``,
    advanced by each call it runs): an event timer measures what the calls cost."""

    def __init__(self) -> None:
        super().__init__()
        self.clock = lambda: 0.0
        self.marks: dict[int, float] = {}

    def _cuEventRecord(self, event, stream):  # noqa: N802 - the driver's spelling
        self.marks[id(event)] = self.clock()
        return (self.OK,)

    def _cuEventElapsedTime(self, start, stop):  # noqa: N802
        return (self.OK, self.marks[id(stop)] - self.marks[id(start)])


def stand_in_device(fake_cublaslt, **stand_in):
    """A CUDA device over the timed stand-in driver, its GEMMs through a stand-in cuBLASLt
    (``fake_cublaslt``: the class); (device, cuBLASLt). The GPU bundle's tests use it too."""
    driver = TimedCuda()
    lt = fake_cublaslt(memory=driver.device_memory(), driver=driver, **stand_in)
    driver.clock = lambda: lt.clock_ms

    def cublaslt(device):
        return CublasLt(
            lambda n: int(device.allocate(n, "workspace").handle),
            bindings=lt,
            workspace_bytes=4096,
            device_name=device.info.name,
            compute_capability=device.compute_capability,
        )

    return CudaDevice(bindings=driver, libraries={"gemm": cublaslt}), lt


def _candidates(device) -> tuple[bytes, ...]:
    return device.library("gemm").candidates(CALL)


def _tuning(artefact: Artefact) -> GemmTuning | None:
    (thunk,) = artefact.program
    return GemmCall.from_thunk(thunk).tuning


def _inputs(rng):
    return [
        rng.standard_normal((2, 3, 5)).astype(np.float32),
        rng.standard_normal((2, 5, 4)).astype(np.float32),
        rng.standard_normal(4).astype(np.float32),
    ]


def _run_and_check(executable: Executable) -> None:
    inputs = _inputs(np.random.default_rng(1))
    (out,) = executable.run(inputs)
    expected = np.maximum(np.matmul(inputs[0], inputs[1]) + inputs[2], 0)
    np.testing.assert_allclose(out, expected, rtol=1e-5, atol=1e-6)


def test_the_heuristic_offers_several_candidates_and_an_untuned_call_runs_its_first(
    fake_cublaslt,
):
    lt = fake_cublaslt(candidates=HEURISTIC_CANDIDATES + 4)
    library = CublasLt(lambda n: 0x9000, bindings=lt, device_name="GPU", compute_capability=(9, 0))
    call = GemmCall(1, 16, 24, 32)
    candidates = library.candidates(call)
    assert len(candidates) == HEURISTIC_CANDIDATES == len(set(candidates))  # asked for N
    assert all(len(c) == 64 for c in candidates)
    assert library.algorithm(call) == f"heuristic's first of {HEURISTIC_CANDIDATES} candidates"
    operands = random_operands(call, np.random.default_rng(0))
    library.run(call, [o.ctypes.data for o in operands], 0x5001)
    assert lt.matmuls[-1]["algo"] == candidates[0]
    assert lt.checks == []  # nothing to check without a tuning result
    assert library.version == 120805  # cublasLtGetVersion's


def test_autotuning_records_the_fastest_candidate_and_a_load_runs_it(fake_cublaslt, tmp_path):
    fastest = {}
    device, lt = stand_in_device(
        fake_cublaslt, cost_ms=lambda algo: 0.5 if algo == fastest["algo"] else 2
    )
    candidates = _candidates(device)
    assert len(candidates) == 3
    fastest["algo"] = candidates[2]
    reports = []
    tuned = autotune_gemms(gemm_artefact(), device, on_call=reports.append)
    tuning = _tuning(tuned)
    assert tuning == GemmTuning(
        "cublasLt", device.info.name, "9.0", 120805, candidates[2].hex(), 0.5e-3, 3
    )
    (report,) = reports
    assert report.chosen == 2 and report.path == "0"
    assert [c.seconds for c in report.candidates] == [2e-3, 2e-3, 0.5e-3]
    assert report.report_line().endswith("candidate 2 of 3, 500.0 us, heuristic's first 2000.0 us")
    # every candidate's result was read back and compared; all ran on the inputs uploaded
    assert tuned.program[0].fallback == gemm_artefact().program[0].fallback
    # saved, loaded (verified), and run: cublasLtMatmul gets the tuned algorithm's bytes
    path = tmp_path / "tuned.heron"
    tuned.save(path)
    loaded = load(path)
    assert _tuning(loaded) == tuning and loaded.program == tuned.program
    fresh, lt = stand_in_device(fake_cublaslt)
    executable = Executable(loaded, fresh, command_buffers=False)
    (choice,) = executable.library_choices
    assert choice.library and choice.algorithm.startswith("tuned algorithm (fastest of 3")
    assert "tuned algorithm" in choice.report_line()
    assert choice.to_json()["algorithm"] == choice.algorithm  # heron-run's JSON report
    _run_and_check(executable)
    assert [m["algo"] for m in lt.matmuls] == [candidates[2]]
    assert lt.checks == [candidates[2]]  # cublasLtMatmulAlgoCheck vetted it once


def test_a_candidate_with_a_wrong_result_is_never_chosen(fake_cublaslt):
    bad = {}
    device, lt = stand_in_device(
        fake_cublaslt,
        cost_ms=lambda algo: 0.1 if algo == bad.get("algo") else 1.0,
        wrong=lambda algo: algo == bad.get("algo"),
    )
    candidates = _candidates(device)
    bad["algo"] = candidates[1]
    reports = []
    tuned = autotune_gemms(gemm_artefact(), device, on_call=reports.append)
    assert _tuning(tuned).algorithm != candidates[1].hex()
    (report,) = reports
    dropped = report.candidates[1]
    assert dropped.seconds is None
    assert "from the heuristic's first (the contract allows" in dropped.dropped
    assert report.chosen in (0, 2) and "1 dropped" in report.report_line()
    # the wrong candidate ran once, for the comparison, and was never timed
    assert sum(m["algo"] == candidates[1] for m in lt.matmuls) == 1


def test_a_candidate_cublaslt_refuses_is_dropped(fake_cublaslt):
    refused = {}
    device, _ = stand_in_device(fake_cublaslt, reject=lambda algo: algo == refused.get("algo"))
    refused["algo"] = _candidates(device)[0]
    reports = []
    autotune_gemms(gemm_artefact(), device, on_call=reports.append)
    (report,) = reports
    assert report.candidates[0].dropped == (
        "tuned algorithm rejected by cublasLtMatmulAlgoCheck: CUBLAS_STATUS_NOT_SUPPORTED (15)"
    )
    assert report.chosen in (1, 2)


def _tuned_artefact(fake_cublaslt) -> tuple[Artefact, tuple[bytes, ...]]:
    # The last candidate is the fastest.
    device, _ = stand_in_device(fake_cublaslt, cost_ms=lambda algo: 4.0 - algo[0])
    tuned = autotune_gemms(gemm_artefact(), device)
    candidates = _candidates(device)
    assert _tuning(tuned).algorithm == candidates[2].hex()
    return tuned, candidates


def _with_tuning(artefact: Artefact, **changes) -> Artefact:
    (thunk,) = artefact.program
    call = GemmCall.from_thunk(thunk)
    call = attrs.evolve(call, tuning=attrs.evolve(call.tuning, **changes))
    return attrs.evolve(artefact, program=[attrs.evolve(thunk, attributes=call.attributes())])


@pytest.mark.parametrize(
    ("changes", "reason"),
    [
        (
            {"device": "NVIDIA A100-SXM4-80GB", "compute_capability": "8.0"},
            "tuned on another device (NVIDIA A100-SXM4-80GB, compute capability 8.0; this is",
        ),
        ({"version": 110902}, "tuned with another cuBLASLt version (110902; this is 120805)"),
        ({"library": "hipblas"}, "tuned for hipblas, not cublasLt"),
        (
            {"algorithm": "00" * 64},
            "tuned algorithm rejected by cublasLtMatmulAlgoCheck: CUBLAS_STATUS_NOT_SUPPORTED (15)",
        ),
    ],
)
def test_a_tuning_that_does_not_apply_here_runs_the_heuristic_and_says_why(
    fake_cublaslt, changes, reason
):
    tuned, candidates = _tuned_artefact(fake_cublaslt)
    device, lt = stand_in_device(fake_cublaslt)
    executable = Executable(_with_tuning(tuned, **changes), device, command_buffers=False)
    (choice,) = executable.library_choices
    assert choice.library and choice.chosen == "cublasLt"
    assert choice.algorithm.startswith("heuristic's first of 3 candidates (")
    assert reason in choice.algorithm
    assert reason in choice.report_line()
    _run_and_check(executable)
    assert [m["algo"] for m in lt.matmuls] == [candidates[0]]


def test_an_artefact_without_tuning_loads_and_a_malformed_one_is_refused(fake_cublaslt, tmp_path):
    old = gemm_artefact()  # as heron wrote it before tuning existed: no attribute at all
    assert "tuning" not in dict(old.program[0].attributes)
    old.save(tmp_path / "old.heron")
    loaded = load(tmp_path / "old.heron")
    assert _tuning(loaded) is None
    device, _ = stand_in_device(fake_cublaslt)
    (choice,) = Executable(loaded, device).library_choices
    assert choice.algorithm == "heuristic's first of 3 candidates"
    tuned, _ = _tuned_artefact(fake_cublaslt)
    (thunk,) = tuned.program
    attributes = dict(thunk.attributes)
    attributes["tuning"] = [list(pair) for pair in attributes["tuning"]]
    attributes["tuning"][4][1] = "not hex"
    with pytest.raises(ArtefactError, match="gemm: tuning algorithm must be hex digits"):
        attrs.evolve(tuned, program=[attrs.evolve(thunk, attributes=attributes)])


def test_autotuning_needs_a_cuda_device_with_cublaslt(fake_cublaslt):
    from heron.runtime.interpreter.device import InterpreterDevice

    with pytest.raises(AutotuneError, match="on a CUDA device, not on"):
        autotune_gemms(gemm_artefact(), InterpreterDevice())

    def missing(device):
        from heron.runtime.core.device import DeviceError

        raise DeviceError("cuBLASLt needs nvmath-python (not installed)")

    device = CudaDevice(bindings=FakeCuda(), libraries={"gemm": missing})
    with pytest.raises(AutotuneError, match=r"needs cuBLASLt on .*\(not installed\)"):
        autotune_gemms(gemm_artefact(), device)


def test_the_agreement_tolerance_is_exact_for_integers_and_grows_with_k():
    assert agreement_tolerance(GemmCall(1, 4, 4, 64, "s8", "s8", "s32")) == 0
    small, large = (agreement_tolerance(GemmCall(1, 4, 4, k)) for k in (16, 1024))
    assert 0 < small < large < 1e-4
    assert agreement_tolerance(GemmCall(1, 4, 4, 16, compute="tf32")) > 1e-3


# -- on a GPU ---------------------------------------------------------------------------------


def _call_artefact(call: GemmCall) -> Artefact:
    """An artefact whose program is ``call`` alone (no fallback), its operands parameters."""
    sizes = call.byte_sizes()
    names = call.operand_names
    counts = call.element_counts()
    kinds = call.element_types()
    slices = [BufferSlice(i, 0, size) for i, size in enumerate(sizes)]
    inputs = len(names) - call.outputs
    allocations = [
        Allocation(i, size, "parameter", parameter=i)
        if i < inputs
        else Allocation(i, size, "output", output=i - inputs)
        for i, size in enumerate(sizes)
    ]
    shapes = [f"{kind}[{count}]{{0}}" for kind, count in zip(kinds, counts, strict=True)]
    return Artefact(
        target=Target.preset("h100"),
        program=[LibraryCallThunk("blas", "gemm", slices, call.attributes())],
        allocations=allocations,
        signature=EntrySignature(shapes[:inputs], shapes[inputs:]),
        kernels=[],
    )


@pytest.mark.cuda
@pytest.mark.parametrize(
    "call",
    [
        GemmCall(1, 512, 384, 256, compute="tf32"),
        GemmCall(4, 256, 512, 384, "bf16", "bf16", "bf16", bias=True, activation="relu"),
    ],
    ids=["f32", "bf16"],
)
def test_autotuning_a_real_gemm_keeps_its_result(call):
    """On the GPU: the tuned artefact's result equals the untuned one's (within the
    contract's agreement) and the contract's, and the tuned algorithm is what runs."""
    from heron.runtime.cuda.autotune import tuning_device

    device = tuning_device()
    artefact = _call_artefact(call)
    reports = []
    tuned = autotune_gemms(artefact, device, on_call=reports.append)
    (report,) = reports
    assert report.chosen is not None, report.report_line()
    tuning = _tuning(tuned)
    assert tuning is not None and tuning.device == device.info.name
    rng = np.random.default_rng(2)
    operands = random_operands(call, rng)
    inputs = operands[: len(operands) - call.outputs]
    expected = expected_bytes(call, operands)
    untuned_run = Executable(artefact, device, command_buffers=False)
    tuned_run = Executable(tuned, device, command_buffers=False)
    (choice,) = tuned_run.library_choices
    assert choice.algorithm.startswith("tuned algorithm"), choice.algorithm
    (plain,) = untuned_run.run(inputs)
    (fast,) = tuned_run.run(inputs)
    plain_bytes = np.ascontiguousarray(plain).reshape(-1).view(np.uint8)
    fast_bytes = np.ascontiguousarray(fast).reshape(-1).view(np.uint8)
    assert_gemm_close(call, fast_bytes, plain_bytes, slack=2, device_rounding=True)
    assert_gemm_close(call, fast_bytes, expected, slack=4, device_rounding=True)
