"""A stand-in for hip-python's ``hip.hip`` with memory, a stream and graphs, for GPU-free tests.

The memory, stream, capture and graphs are the shared stand-in's
(``heron_test_support.fake_gpu_driver``, the CUDA tests' too) under HIP's
names; here: device properties, ``hipMemsetD32Async`` taking a C int, and
launches recorded with the kernarg bytes read through ``extra``
(``HIP_LAUNCH_PARAM_BUFFER_POINTER`` / ``_SIZE`` / ``_END``) as the runtime reads them.
"""

from __future__ import annotations

import ctypes
import enum
from types import SimpleNamespace

import pytest
from heron_test_support.fake_gpu_driver import FakeGpuDriver, aliases


class hipError_t(enum.IntEnum):  # noqa: N801 - the runtime's spelling
    hipSuccess = 0
    hipErrorInvalidValue = 1
    hipErrorOutOfMemory = 2
    hipErrorIllegalAddress = 700
    hipErrorGraphExecUpdateFailure = 910


OK = hipError_t.hipSuccess


class FakeHip(FakeGpuDriver):
    """The runtime (see the module docstring); ``calls`` lists every call's name in order."""

    hipError_t = hipError_t
    PREFIX = "hip"
    OK = OK
    ALIASES = aliases(1)
    HIP_LAUNCH_PARAM_BUFFER_POINTER = 1
    HIP_LAUNCH_PARAM_BUFFER_SIZE = 2
    HIP_LAUNCH_PARAM_END = 3
    hipStreamCaptureMode = SimpleNamespace(hipStreamCaptureModeThreadLocal=1)

    def __init__(self, arch="gfx942:sramecc+:xnack-", fail=None, update_fails=False):
        super().__init__(fail, update_fails)
        self.arch = arch

    def properties(self):
        return SimpleNamespace(
            name=b"Fake MI300X\0",
            gcnArchName=self.arch.encode() + b"\0",
            totalGlobalMem=192 * 2**30,
            warpSize=64,
            multiProcessorCount=304,
            maxThreadsPerBlock=1024,
            maxThreadsPerMultiProcessor=2048,
            sharedMemPerBlock=65536,
            sharedMemPerBlockOptin=0,
            maxSharedMemoryPerMultiProcessor=65536,
            regsPerMultiprocessor=131072,
            regsPerBlock=131072,
            maxBlocksPerMultiProcessor=32,
            l2CacheSize=4194304,
            maxThreadsDim=[1024, 1024, 1024],
            clockRate=2100000,
            memoryClockRate=1300000,
            memoryBusWidth=8192,
        )

    # -- the calls ---------------------------------------------------------------------
    def _hipInit(self, flags):
        return (OK,)

    def _hipDriverGetVersion(self):
        return (OK, 60342134)

    def _hipGetDeviceCount(self):
        return (OK, 1)

    def _hipGetDeviceProperties(self, index):
        return (OK, self.properties())

    def _hipSetDevice(self, index):
        return (OK,)

    def _hipStreamCreate(self):
        return (OK, "stream")

    def _hipMemsetD32Async(self, destination, value, count, stream):
        assert -(1 << 31) <= value < 1 << 31, "hipMemsetD32Async takes a C int"
        return self._memset32(destination, value, count, stream)

    def _hipModuleGetFunction(self, module, name):
        return (OK, name.decode())

    def _hipModuleLaunchKernel(
        self, function, gx, gy, gz, bx, by, bz, shared, stream, params, extra
    ):
        assert params is None
        words = (ctypes.c_void_p * 5).from_address(extra)
        assert (words[0], words[2], words[4]) == (1, 2, 3)
        size = ctypes.c_size_t.from_address(words[3]).value
        record = dict(
            function=function,
            grid=(gx, gy, gz),
            block=(bx, by, bz),
            shared=shared,
            kernarg=ctypes.string_at(words[1], size),
        )
        return self.run(("launch", record), stream)

    def _hipGraphInstantiate(self, graph, size):
        return (OK, SimpleNamespace(nodes=list(graph.nodes)), None, b"")

    def _hipGraphExecUpdate(self, executable, graph, error_node):
        if not self.take_update(executable, graph):
            return (hipError_t.hipErrorGraphExecUpdateFailure, None)
        return (OK, 0)

    def _hipEventElapsedTime(self, start, stop):
        return (OK, 0.75)


@pytest.fixture
def hip_runtime():
    return FakeHip
