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


class FakeHipblas:
    """A stand-in for ``hip.hipblas``: records every argument, then computes.

    Its enums are the real module's (so the wrapper is checked against
    hip-python's values); ``hipblasGemmStridedBatchedEx`` records its
    arguments and puts a column-major GEMM of exactly those arguments on the
    stream set by ``hipblasSetStream`` (``heron_test_support.fake_blas``),
    through ``memory``, run at once or captured by ``driver`` when given.
    """

    def __init__(self, memory=None, driver=None):
        from heron_test_support.fake_blas import HostMemory
        from hip import hip, hipblas

        self.real = hipblas
        self.hipDataType = hip.hipDataType
        self.hipblasOperation_t = hipblas.hipblasOperation_t
        self.hipblasComputeType_t = hipblas.hipblasComputeType_t
        self.hipblasGemmAlgo_t = hipblas.hipblasGemmAlgo_t
        self.memory = memory or HostMemory()
        self.driver = driver
        self.stream = None
        self.gemms: list[dict] = []

    def hipblasCreate(self):  # noqa: N802 - the bindings' spelling
        return (0, "handle")

    def hipblasSetStream(self, handle, stream):  # noqa: N802
        assert handle == "handle"
        self.stream = stream
        return (0,)

    def hipblasGemmStridedBatchedEx(self, handle, transa, transb, m, n, k, alpha, a, a_type,  # noqa: N802
                                    lda, stride_a, b, b_type, ldb, stride_b, beta, c, c_type,
                                    ldc, stride_c, batch, compute, algo):  # fmt: skip
        import numpy as np

        scalar = {"HIPBLAS_COMPUTE_32F": np.float32, "HIPBLAS_COMPUTE_64F": np.float64}
        dtype = scalar.get(compute.name, np.int32)
        complex_ = {"HIP_C_32F": np.complex64, "HIP_C_64F": np.complex128}
        dtype = complex_.get(c_type.name, dtype)  # a complex GEMM's scalars are complex
        read = lambda p: np.frombuffer(ctypes.string_at(p, np.dtype(dtype).itemsize), dtype)[0]  # noqa: E731
        record = dict(
            transa=transa.name, transb=transb.name, m=m, n=n, k=k,
            a=(a, a_type.name, lda, stride_a), b=(b, b_type.name, ldb, stride_b),
            c=(c, c_type.name, ldc, stride_c), batch=batch, compute=compute.name,
            algo=algo.name, alpha=read(alpha), beta=read(beta), stream=self.stream,
        )  # fmt: skip
        self.gemms.append(record)
        if self.driver is not None:
            self.driver.run(("call", lambda: self.compute(record)), self.stream)
        else:
            self.compute(record)
        return (0,)

    def compute(self, record):
        """What hipBLAS computes from the recorded arguments (column-major, op(X) = X)."""
        import ml_dtypes
        import numpy as np
        from heron_test_support.fake_blas import Matrix, column_major_gemm

        assert (record["transa"], record["transb"]) == ("HIPBLAS_OP_N", "HIPBLAS_OP_N")
        types = {
            "HIP_R_32F": np.float32, "HIP_R_64F": np.float64, "HIP_R_16F": np.float16,
            "HIP_R_16BF": ml_dtypes.bfloat16, "HIP_R_8I": np.int8, "HIP_R_32I": np.int32,
            "HIP_C_32F": np.complex64, "HIP_C_64F": np.complex128,
        }  # fmt: skip
        accumulate = {
            "HIPBLAS_COMPUTE_32F": np.float32,
            "HIPBLAS_COMPUTE_64F": np.float64,
            "HIPBLAS_COMPUTE_32I": np.int32,
        }[record["compute"]]
        if record["c"][1].startswith("HIP_C_"):
            accumulate = np.result_type(accumulate, np.complex64)
        m, n, k = record["m"], record["n"], record["k"]

        def matrix(entry, rows, cols):
            address, kind, ld, stride = entry
            assert ld >= rows
            return Matrix(address, types[kind], rows, cols, ld, stride)

        column_major_gemm(
            self.memory,
            record["batch"],
            matrix(record["a"], m, k),
            matrix(record["b"], k, n),
            matrix(record["c"], m, n),
            accumulate,
            record["alpha"],
            record["beta"],
        )


@pytest.fixture
def fake_hipblas():
    try:
        from hip import hipblas  # noqa: F401 - an attribute of hip, not a submodule
    except ImportError as exc:
        pytest.skip(f"the hipBLAS stand-in borrows rocm-bindings-libraries' enums ({exc})")
    return FakeHipblas
