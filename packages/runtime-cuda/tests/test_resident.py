"""Device-resident runs on the CUDA device (issue 30): DLPack in and out, no host round trips.

The stand-in driver (heron_test_support.fake_cuda) hands out device
addresses; the stand-in cuBLASLt computes the artefact's one GEMM through them,
so the numbers are real while every pointer the library receives can be
checked. A foreign CUDA array is a producer exporting a ``(kDLCUDA, 0)``
capsule over memory it allocated from the same driver, as a ``jax.Array`` on the
GPU would.
"""

from __future__ import annotations

import gc

import numpy as np
import pytest
from heron_test_support.gemm_artefact import gemm_artefact

from heron.runtime.core import dlpack
from heron.runtime.core.executor import Executable
from heron.runtime.core.resident import DeviceArray, ResidentRunner
from heron.runtime.cuda.cublaslt import CublasLt
from heron.runtime.cuda.device import CudaDevice


class ForeignCudaArray:
    """Another library's array in CUDA memory: DLPack producer, deleter observed."""

    def __init__(self, device, values):
        self.values = np.ascontiguousarray(values)
        self.buffer = device.upload(self.values, "foreign")
        self.address = device.address(self.buffer)
        self.streams_asked = []

    def __dlpack_device__(self):
        return (dlpack.CUDA, 0)

    def __dlpack__(self, *, stream=None, max_version=None, dl_device=None, copy=None):
        self.streams_asked.append(stream)
        return dlpack.capsule(
            self.address, self.values.shape, self.values.dtype, (dlpack.CUDA, 0), self
        )


@pytest.fixture
def cuda(fake_cuda, fake_cublaslt):
    driver = fake_cuda()
    stand_in = fake_cublaslt(memory=driver.device_memory(), driver=driver)

    def cublaslt(device):
        allocate = lambda n: int(device.allocate(n, "workspace").handle)  # noqa: E731
        return CublasLt(allocate, bindings=stand_in, workspace_bytes=4096)

    device = CudaDevice(bindings=driver, libraries={"gemm": cublaslt})
    return driver, stand_in, device


def _operands(seed):
    rng = np.random.default_rng(seed)
    return [
        rng.standard_normal((2, 3, 5)).astype(np.float32),
        rng.standard_normal((2, 5, 4)).astype(np.float32),
        rng.standard_normal(4).astype(np.float32),
    ]


def _expected(operands):
    return np.maximum(np.matmul(operands[0], operands[1]) + operands[2], 0)


def _runner(device, command_buffers=True):
    return ResidentRunner(
        Executable(gemm_artefact(), device, command_buffers=command_buffers, min_graph_size=1)
    )


@pytest.mark.parametrize("command_buffers", [False, True])
def test_foreign_cuda_arrays_are_read_in_place_and_results_stay_on_the_device(
    cuda, command_buffers
):
    driver, stand_in, device = cuda
    runner = _runner(device, command_buffers)
    operands = _operands(0)
    foreign = [ForeignCudaArray(device, v) for v in operands]
    uploads = driver.calls.count("cuMemcpyHtoDAsync")
    (result,) = runner(foreign)
    assert runner.last_inputs.ways == ("dlpack",) * 3
    # No byte went through the host, nothing waited for the device.
    assert driver.calls.count("cuMemcpyHtoDAsync") == uploads
    assert "cuMemcpyDtoHAsync" not in driver.calls
    # The library read the producers' memory and wrote the result's own buffer.
    (matmul,) = stand_in.matmuls
    assert matmul["a"][0] in {f.address for f in foreign}
    assert matmul["b"][0] in {f.address for f in foreign}
    assert matmul["d"][0] == device.address(result.buffer)
    assert all(f.streams_asked == [device.dlpack_stream] for f in foreign)
    assert isinstance(result, DeviceArray) and result.shape == (2, 3, 4)
    np.testing.assert_allclose(np.asarray(result), _expected(operands), rtol=1e-5, atol=1e-6)


def test_the_producers_memory_is_released_once_the_run_no_longer_holds_it(cuda):
    driver, _, device = cuda
    runner = _runner(device)
    foreign = [ForeignCudaArray(device, v) for v in _operands(1)]
    runner(foreign)
    runner.executable.execute([None, None, None])  # the next run binds its own buffers
    gc.collect()
    assert dlpack.exported_count() == 0


def test_a_result_is_handed_on_in_place_and_read_when_asked(cuda):
    driver, stand_in, device = cuda
    runner = _runner(device)
    operands = _operands(2)
    (result,) = runner(operands)  # host arrays: copied once, into the parameters' allocations
    assert runner.last_inputs.ways == ("copied",) * 3
    assert result.__dlpack_device__() == (dlpack.CUDA, 0)
    synchronized = driver.calls.count("cuStreamSynchronize")
    capsule = result.__dlpack__(stream=device.dlpack_stream)  # the device's own stream
    assert driver.calls.count("cuStreamSynchronize") == synchronized  # nothing to wait for
    tensor = dlpack.take(capsule)
    assert (tensor.address, tensor.shape, tensor.dtype) == (
        device.address(result.buffer),
        (2, 3, 4),
        np.dtype(np.float32),
    )
    # Another library's stream waits for an event after the device's work; the host does not.
    calls = len(driver.calls)
    result.__dlpack__(stream=12345)
    assert driver.calls[calls:] == ["cuEventCreate", "cuEventRecord", "cuStreamWaitEvent"]
    result.__dlpack__(stream=None)  # the default stream: the same, with the one event
    assert driver.calls[calls + 3 :] == ["cuEventRecord", "cuStreamWaitEvent"]
    assert driver.calls.count("cuStreamSynchronize") == synchronized


def test_a_run_issues_its_work_and_returns_reading_waits(cuda):
    driver, _, device = cuda
    runner = _runner(device)
    foreign = [ForeignCudaArray(device, v) for v in _operands(3)]
    before = driver.calls.count("cuStreamSynchronize")
    (result,) = runner(foreign)
    assert driver.calls.count("cuStreamSynchronize") == before
    result.block_until_ready()
    assert driver.calls.count("cuStreamSynchronize") == before + 1


def test_results_buffers_come_back_and_the_graph_is_replayed_as_recorded(cuda):
    driver, stand_in, device = cuda
    runner = _runner(device)
    foreign = [ForeignCudaArray(device, v) for v in _operands(4)]
    for _ in range(4):
        (result,) = runner(foreign)
        del result  # collected: its buffer goes back to the pool
    assert runner.pool.allocated == 1
    stats = [run for run in runner.executable.runs]
    assert sum(run.command_buffers_recorded for run in stats) == 1
    assert sum(run.command_buffers_updated for run in stats) == 0
    assert len(stand_in.matmuls) == 1  # recorded once, replayed: the graph holds the call


def test_a_result_kept_alive_gets_a_new_buffer_and_keeps_its_values(cuda):
    _, _, device = cuda
    runner = _runner(device)
    first_operands, second_operands = _operands(5), _operands(6)
    (first,) = runner([ForeignCudaArray(device, v) for v in first_operands])
    (second,) = runner([ForeignCudaArray(device, v) for v in second_operands])
    assert first.buffer is not second.buffer and runner.pool.allocated == 2
    np.testing.assert_allclose(np.asarray(first), _expected(first_operands), rtol=1e-5)
    np.testing.assert_allclose(np.asarray(second), _expected(second_operands), rtol=1e-5)


def test_a_deleted_array_says_so(cuda):
    _, _, device = cuda
    (result,) = _runner(device)(_operands(7))
    result.delete()
    assert result.is_deleted()
    with pytest.raises(Exception, match="deleted or donated"):
        np.asarray(result)
