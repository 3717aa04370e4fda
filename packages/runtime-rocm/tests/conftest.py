"""A stand-in for hip-python's ``hip.hip`` with memory, a stream and graphs, for GPU-free tests.

As the HIP runtime where heron's device depends on it: result tuples
``(hipError_t, *values)``; device memory (one bytearray) that ``hipMemcpy*``
and ``hipMemset*`` really read and write; a stream that runs work at once
unless capturing, when calls become graph nodes; ``hipGraphLaunch`` running
them; ``hipGraphExecUpdate`` taking a graph of the same topology; and launches
recorded with the kernarg bytes read through ``extra``
(``HIP_LAUNCH_PARAM_BUFFER_POINTER`` / ``_SIZE`` / ``_END``) as the runtime reads them.
"""

from __future__ import annotations

import ctypes
import enum
from types import SimpleNamespace

import pytest

BASE = 0x7F0000000000


class hipError_t(enum.IntEnum):  # noqa: N801 - the runtime's spelling
    hipSuccess = 0
    hipErrorInvalidValue = 1
    hipErrorOutOfMemory = 2
    hipErrorIllegalAddress = 700
    hipErrorGraphExecUpdateFailure = 910


OK = hipError_t.hipSuccess


class FakeHip:
    """The runtime (see the module docstring); ``calls`` lists every call's name in order."""

    hipError_t = hipError_t
    HIP_LAUNCH_PARAM_BUFFER_POINTER = 1
    HIP_LAUNCH_PARAM_BUFFER_SIZE = 2
    HIP_LAUNCH_PARAM_END = 3
    hipStreamCaptureMode = SimpleNamespace(hipStreamCaptureModeThreadLocal=1)

    def __init__(self, arch="gfx942:sramecc+:xnack-", fail=None, update_fails=False):
        self.memory = bytearray(1 << 20)
        self.next_free = 0
        self.arch = arch
        self.fail = dict(fail or {})
        self.update_fails = update_fails
        self.calls: list[str] = []
        self.launched: list[dict] = []
        self.capturing: list | None = None
        self.freed: list[int] = []
        self.modules: list[bytes] = []

    def __getattr__(self, name):
        if not name.startswith("hip"):
            raise AttributeError(name)
        implementation = getattr(self, f"_{name}")

        def call(*arguments):
            self.calls.append(name)
            if name in self.fail:
                return (self.fail[name],)
            return implementation(*arguments)

        return call

    def _slot(self, address, size):
        start = address - BASE
        assert 0 <= start and start + size <= len(self.memory), f"fake: {address:#x}+{size}"
        return start

    def _run(self, node):
        if self.capturing is not None:
            self.capturing.append(node)
        else:
            self._execute(node)
        return (OK,)

    def _execute(self, node):
        if node[0] == "copy":
            _, destination, source, size = node
            d, s = self._slot(destination, size), self._slot(source, size)
            self.memory[d : d + size] = self.memory[s : s + size]
        elif node[0] == "memset":
            _, destination, value, width, count = node
            d = self._slot(destination, width * count)
            pattern = (value % (1 << (8 * width))).to_bytes(width, "little")
            self.memory[d : d + width * count] = pattern * count
        elif node[0] == "launch":
            self.launched.append(node[1])

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

    def _hipStreamSynchronize(self, stream):
        return (OK,)

    def _hipMalloc(self, size):
        address = BASE + self.next_free
        self.next_free += -(-size // 256) * 256
        return (OK, address)

    def _hipFree(self, address):
        self.freed.append(address)
        return (OK,)

    def _hipMemcpyHtoDAsync(self, destination, host_address, size, stream):
        d = self._slot(destination, size)
        self.memory[d : d + size] = ctypes.string_at(host_address, size)
        return (OK,)

    def _hipMemcpyDtoHAsync(self, host_address, source, size, stream):
        s = self._slot(source, size)
        ctypes.memmove(host_address, bytes(self.memory[s : s + size]), size)
        return (OK,)

    def _hipMemcpyDtoDAsync(self, destination, source, size, stream):
        return self._run(("copy", destination, source, size))

    def _hipMemsetD8Async(self, destination, value, count, stream):
        return self._run(("memset", destination, value, 1, count))

    def _hipMemsetD16Async(self, destination, value, count, stream):
        return self._run(("memset", destination, value, 2, count))

    def _hipMemsetD32Async(self, destination, value, count, stream):
        assert -(1 << 31) <= value < 1 << 31, "hipMemsetD32Async takes a C int"
        return self._run(("memset", destination, value, 4, count))

    def _hipModuleLoadData(self, data):
        self.modules.append(bytes(data))
        return (OK, f"module{len(self.modules)}")

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
        return self._run(("launch", record))

    def _hipStreamBeginCapture(self, stream, mode):
        assert self.capturing is None
        self.capturing = []
        return (OK,)

    def _hipStreamEndCapture(self, stream):
        graph, self.capturing = self.capturing, None
        return (OK, SimpleNamespace(nodes=graph))

    def _hipGraphInstantiate(self, graph, size):
        return (OK, SimpleNamespace(nodes=list(graph.nodes)), None, b"")

    def _hipGraphLaunch(self, executable, stream):
        for node in executable.nodes:
            self._execute(node)
        return (OK,)

    def _hipGraphExecUpdate(self, executable, graph, error_node):
        same = [n[0] for n in executable.nodes] == [n[0] for n in graph.nodes]
        if self.update_fails or not same:
            return (hipError_t.hipErrorGraphExecUpdateFailure, None)
        executable.nodes = list(graph.nodes)
        return (OK, 0)

    def _hipGraphDestroy(self, graph):
        return (OK,)

    def _hipGraphExecDestroy(self, executable):
        return (OK,)

    def _hipEventCreate(self):
        return (OK, object())

    def _hipEventRecord(self, event, stream):
        return (OK,)

    def _hipEventSynchronize(self, event):
        return (OK,)

    def _hipEventElapsedTime(self, start, stop):
        return (OK, 0.75)


@pytest.fixture
def hip_runtime():
    return FakeHip
