"""A stand-in for ``cuda.bindings.driver`` with memory, streams and graphs, for GPU-free tests.

The memory, streams, capture and graphs are the shared stand-in's
(``heron_test_support.fake_gpu_driver``, the HIP tests' too) under CUDA's
names; here: kernel launches recorded with the parameter bytes read through
``kernelParams`` as the driver reads them, device attributes, and
conditional nodes (``cuGraphAddNode`` into a capture, bodies captured with
``cuStreamBeginCaptureToGraph``) run their bodies by their handle's value, which
heron's condition-setting kernels (``heron.runtime.cuda.conditional``: a
predicate's, a selector's, a counted loop's count and count-down) set when they
run: the stand-in does what their PTX says (the PTX itself is checked by ptxas
in test_conditional.py, its behaviour only on a GPU).
"""

from __future__ import annotations

import ctypes
import enum
import struct
from types import SimpleNamespace

from heron.runtime.cuda.kernel_abi import ptx_entry_names, ptx_entry_signature
from heron_test_support.fake_gpu_driver import FakeGpuDriver, aliases


class CUresult(enum.IntEnum):
    CUDA_SUCCESS = 0
    CUDA_ERROR_INVALID_VALUE = 1
    CUDA_ERROR_OUT_OF_MEMORY = 2
    CUDA_ERROR_ILLEGAL_ADDRESS = 700
    CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED = 900
    CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE = 910


OK = CUresult.CUDA_SUCCESS

ATTRIBUTE_VALUES = {
    "COMPUTE_CAPABILITY_MAJOR": 9,
    "COMPUTE_CAPABILITY_MINOR": 0,
    "WARP_SIZE": 32,
    "MULTIPROCESSOR_COUNT": 132,
    "MAX_THREADS_PER_BLOCK": 1024,
    "MAX_THREADS_PER_MULTIPROCESSOR": 2048,
    "MAX_SHARED_MEMORY_PER_BLOCK": 49152,
    "MAX_SHARED_MEMORY_PER_BLOCK_OPTIN": 232448,
    "MAX_SHARED_MEMORY_PER_MULTIPROCESSOR": 233472,
    "RESERVED_SHARED_MEMORY_PER_BLOCK": 1024,
    "MAX_REGISTERS_PER_MULTIPROCESSOR": 65536,
    "MAX_REGISTERS_PER_BLOCK": 65536,
    "MAX_BLOCKS_PER_MULTIPROCESSOR": 32,
    "L2_CACHE_SIZE": 52428800,
    "MAX_BLOCK_DIM_X": 1024,
    "MAX_BLOCK_DIM_Y": 1024,
    "MAX_BLOCK_DIM_Z": 64,
    "CLOCK_RATE": 1980000,
    "MEMORY_CLOCK_RATE": 2619000,
    "GLOBAL_MEMORY_BUS_WIDTH": 5120,
}
CUdevice_attribute = enum.IntEnum(
    "CUdevice_attribute",
    {f"CU_DEVICE_ATTRIBUTE_{name}": n for n, name in enumerate(ATTRIBUTE_VALUES, 1)},
)


class FakeCuda(FakeGpuDriver):
    """The driver (see the module docstring); ``calls`` lists every call's name in order."""

    CUresult = CUresult
    PREFIX = "cu"
    OK = OK
    ALIASES = aliases(0)

    def __init__(self, attributes=None, fail=None, update_fails=False, driver_version=12080):
        super().__init__(fail, update_fails)
        self.attributes = dict(ATTRIBUTE_VALUES if attributes is None else attributes)
        self.driver_version = driver_version
        self.streams = 0
        self.handles: dict[int, int] = {}
        self.CUgraphNodeType = SimpleNamespace(CU_GRAPH_NODE_TYPE_CONDITIONAL=13)
        self.CUgraphConditionalNodeType = SimpleNamespace(
            CU_GRAPH_COND_TYPE_IF=0, CU_GRAPH_COND_TYPE_WHILE=1
        )
        self.CUstreamUpdateCaptureDependencies_flags = SimpleNamespace(
            CU_STREAM_SET_CAPTURE_DEPENDENCIES=1
        )
        self.elapsed_ms = 2.5
        self.CUdevice_attribute = CUdevice_attribute
        self.CUdeviceptr = int
        self.CUstreamCaptureMode = SimpleNamespace(CU_STREAM_CAPTURE_MODE_THREAD_LOCAL=1)
        self.CUfunction_attribute = SimpleNamespace(
            CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES=8
        )
        self.param_info: dict[str, list[tuple[int, int]]] = {}
        #: Graph nodes run so far, by kind ("launch", "copy", "memset", ...): what a
        #: replay really did, loops' bodies counted once per trip.
        self.executed: dict[str, int] = {}

    @staticmethod
    def CUgraphNodeParams():  # noqa: N802 - the bindings' spelling
        conditional = SimpleNamespace(handle=None, type=None, size=0, ctx=None, phGraph_out=None)
        return SimpleNamespace(type=None, conditional=conditional)

    def execute(self, node):
        self.executed[node[0]] = self.executed.get(node[0], 0) + 1
        if node[0] == "launch":
            self._set_condition(node[1])
        if node[0] != "conditional":
            super().execute(node)
            return
        _, handle, condition_type, bodies = node
        runs = 0
        while self.handles[handle]:
            for inner in bodies[0].nodes:
                self.execute(inner)
            runs += 1
            if condition_type == 0:  # IF: once
                break
            assert runs < 1000, "fake: a while node that does not stop"

    def _store_s32(self, address, value):
        start = self.slot(address, 4)
        self.memory[start : start + 4] = struct.pack("<i", value)

    def _byte(self, address):
        return self.memory[self.slot(address, 1)]

    def _set_condition(self, launch):
        """What heron_set_while / heron_set_branch do (see the module docstring)."""
        args = launch["args"]
        if launch["function"] == "heron_set_while":
            self.handles[args[0]] = int(self._byte(args[1]) != 0)
        elif launch["function"] == "heron_set_count":
            handle, counter, count = args
            self._store_s32(counter, count)
            self.handles[handle] = int(count > 0)
        elif launch["function"] == "heron_count_down":
            handle, counter = args
            start = self.slot(counter, 4)
            left = struct.unpack("<i", self.memory[start : start + 4])[0] - 1
            self._store_s32(counter, left)
            self.handles[handle] = int(left > 0)
        elif launch["function"] == "heron_set_branch":
            handle, selector, is_s32, branch, count = args
            if is_s32:
                start = self.slot(selector, 4)
                index = struct.unpack("<i", self.memory[start : start + 4])[0]
                index = count - 1 if not 0 <= index < count else index
            else:
                index = 0 if self._byte(selector) else 1
            self.handles[handle] = int(index == branch)

    # -- the calls ---------------------------------------------------------------------
    def _cuInit(self, flags):
        return (OK,)

    def _cuDriverGetVersion(self):
        return (OK, self.driver_version)

    def _cuDeviceGetCount(self):
        return (OK, 1)

    def _cuDeviceGet(self, index):
        return (OK, index)

    def _cuDeviceGetName(self, length, device):
        return (OK, b"Fake H100\0\0\0")

    def _cuDeviceGetAttribute(self, attribute, device):
        name = attribute.name.removeprefix("CU_DEVICE_ATTRIBUTE_")
        if name not in self.attributes:
            return (CUresult.CUDA_ERROR_INVALID_VALUE, 0)
        return (OK, self.attributes[name])

    def _cuDeviceTotalMem(self, device):
        return (OK, 80 * 2**30)

    def _cuDevicePrimaryCtxRetain(self, device):
        return (OK, "context")

    def _cuCtxSetCurrent(self, context):
        return (OK,)

    def _cuStreamCreate(self, flags):
        self.streams += 1
        return (OK, 0x5000 + self.streams)  # a CUstream converts to its handle's int

    def _cuGetErrorString(self, code):
        return (OK, f"text of {code.name}".encode())

    def _cuModuleGetFunction(self, module, name):
        # The driver knows the layout from the image; the fake reads a PTX's .entry.
        data = self.modules[int(module.removeprefix("module")) - 1]
        if data.startswith(b"\x7fELF"):  # a cubin: param_info is the test's
            return (OK, name.decode())
        text = data.rstrip(b"\0").decode()
        if name.decode() in ptx_entry_names(text) and name.decode() not in self.param_info:
            signature = ptx_entry_signature(text, name.decode())
            self.param_info[name.decode()] = [(p.offset, p.size) for p in signature.parameters]
        return (OK, name.decode())

    def _cuFuncGetParamInfo(self, function, index):
        params = self.param_info.get(function, [])
        if index >= len(params):
            return (CUresult.CUDA_ERROR_INVALID_VALUE, 0, 0)
        return (OK, *params[index])

    def _cuFuncSetAttribute(self, function, attribute, value):
        return (OK,)

    def _cuLaunchKernel(self, function, gx, gy, gz, bx, by, bz, shared, stream, params, extra):
        layout = self.param_info.get(function, [])
        pointers = (ctypes.c_void_p * len(layout)).from_address(params)
        values = [
            int.from_bytes(ctypes.string_at(p, size), "little")
            for p, (_, size) in zip(pointers, layout, strict=True)
        ]
        record = dict(
            function=function, grid=(gx, gy, gz), block=(bx, by, bz), shared=shared, args=values
        )
        return self.run(("launch", record), stream)

    def _cuStreamBeginCaptureToGraph(self, stream, graph, dependencies, data, count, mode):
        assert stream not in self.capturing
        self.capturing[stream] = graph
        return (OK,)

    def _cuStreamGetCaptureInfo(self, stream):
        graph = self.capturing[stream]
        return (OK, 1, 7, graph, graph.nodes[-1:], None, len(graph.nodes[-1:]))

    def _cuGraphConditionalHandleCreate(self, graph, context, default, flags):
        handle = 1000 + len(self.handles)
        self.handles[handle] = default
        return (OK, handle)

    def _cuGraphAddNode(self, graph, dependencies, data, count, parameters):
        assert parameters.type == self.CUgraphNodeType.CU_GRAPH_NODE_TYPE_CONDITIONAL
        conditional = parameters.conditional
        assert conditional.size == 1 and conditional.ctx == "context"
        bodies = [SimpleNamespace(nodes=[]) for _ in range(conditional.size)]
        conditional.phGraph_out = bodies
        node = ("conditional", conditional.handle, conditional.type, bodies)
        graph.nodes.append(node)
        return (OK, node)

    def _cuStreamUpdateCaptureDependencies(self, stream, nodes, data, count, flags):
        return (OK,)

    def _cuGraphInstantiate(self, graph, flags):
        return (OK, SimpleNamespace(nodes=list(graph.nodes)))

    def _cuGraphExecUpdate(self, executable, graph):
        if not self.take_update(executable, graph):
            return (CUresult.CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE, None)
        return (OK, None)

    def _cuEventElapsedTime(self, start, stop):
        return (OK, self.elapsed_ms)
