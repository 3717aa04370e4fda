"""What the CUDA and HIP stand-ins share: device memory, streams that capture, graphs.

``packages/runtime-cuda/tests/conftest.py`` (``FakeCuda``, for
``cuda.bindings.driver``) and ``packages/runtime-rocm/tests/conftest.py``
(``FakeHip``, for ``hip.hip``) are this stand-in with their vendor's call
names (:attr:`FakeGpuDriver.ALIASES`) and what is their own (launch
parameters, properties, CUDA's conditional nodes). As the drivers where
heron's devices depend on them: result tuples ``(code, *values)``; device
memory (one bytearray, addresses from :data:`BASE`) that copies and memsets
really read and write through the host addresses given; a stream runs work at
once unless it is capturing, when the calls become graph nodes instead; a
graph launch runs its nodes; a graph update takes a graph of the same
topology (node kinds in order) and refuses another. A stand-in library
(cuBLASLt, hipBLAS) puts its work on a stream as a ``("call", function)``
node, run now or captured like any other.
"""

from __future__ import annotations

import ctypes
from collections.abc import Callable
from types import SimpleNamespace
from typing import Any, ClassVar

__all__ = ["BASE", "FakeGpuDriver"]

#: The first device address the stand-ins hand out.
BASE = 0x7F0000000000


class FakeGpuDriver:
    """A driver of one device (see the module docstring); ``calls`` lists every call in order.

    A subclass sets ``PREFIX`` (``cu`` / ``hip``), ``OK`` (its success code)
    and ``ALIASES`` (its call name -> the generic implementation's name here,
    without the underscore); calls of its own are methods ``_<name>``.
    """

    PREFIX: ClassVar[str] = ""
    OK: ClassVar[Any] = 0
    ALIASES: ClassVar[dict[str, str]] = {}

    def __init__(self, fail: dict | None = None, update_fails: bool = False) -> None:
        self.memory = bytearray(1 << 20)
        self.next_free = 0
        #: name -> error code: that call fails.
        self.fail = dict(fail or {})
        self.update_fails = update_fails
        self.calls: list[str] = []
        self.launched: list[dict] = []
        #: stream -> the graph it is capturing into
        self.capturing: dict[Any, SimpleNamespace] = {}
        self.freed: list[int] = []
        self.modules: list[bytes] = []

    def __getattr__(self, name: str) -> Callable:
        if not name.startswith(self.PREFIX):
            raise AttributeError(name)
        # A call of the vendor's own (``_<name>``) before the generic one it names.
        implementation = getattr(self, f"_{name}", None) or getattr(self, f"_{self.ALIASES[name]}")

        def call(*arguments):
            self.calls.append(name)
            if name in self.fail:
                return (self.fail[name],)
            return implementation(*arguments)

        return call

    # -- memory helpers ----------------------------------------------------------------
    def slot(self, address: int, size: int) -> int:
        """The offset of ``address`` in :attr:`memory`; fails the test outside it."""
        start = address - BASE
        assert 0 <= start and start + size <= len(self.memory), f"fake: {address:#x}+{size}"
        return start

    def run(self, node: tuple, stream: Any) -> tuple:
        """Run one operation now, or add it to the graph ``stream`` is capturing."""
        if stream in self.capturing:
            self.capturing[stream].nodes.append(node)
        else:
            self.execute(node)
        return (self.OK,)

    def execute(self, node: tuple) -> None:
        """What one node does: a copy, a memset, a launch (recorded in :attr:`launched`)."""
        kind = node[0]
        if kind == "copy":
            _, destination, source, size = node
            d, s = self.slot(destination, size), self.slot(source, size)
            self.memory[d : d + size] = self.memory[s : s + size]
        elif kind == "memset":
            _, destination, value, width, count = node
            d = self.slot(destination, width * count)
            pattern = (value % (1 << (8 * width))).to_bytes(width, "little")
            self.memory[d : d + width * count] = pattern * count
        elif kind == "launch":
            self.launched.append(node[1])
        elif kind == "call":  # a library's work on the stream (a stand-in library's closure)
            node[1]()
        else:
            raise AssertionError(f"fake: unknown node {kind}")

    # -- the generic calls (ALIASES name them) -----------------------------------------
    def _allocate(self, size):
        address = BASE + self.next_free
        self.next_free += -(-size // 256) * 256
        return (self.OK, address)

    def _free(self, address):
        self.freed.append(address)
        return (self.OK,)

    def _copy_to_device(self, destination, host_address, size, stream):
        d = self.slot(destination, size)
        self.memory[d : d + size] = ctypes.string_at(host_address, size)
        return (self.OK,)

    def _copy_from_device(self, host_address, source, size, stream):
        s = self.slot(source, size)
        ctypes.memmove(host_address, bytes(self.memory[s : s + size]), size)
        return (self.OK,)

    def _copy_on_device(self, destination, source, size, stream):
        return self.run(("copy", destination, source, size), stream)

    def _memset8(self, destination, value, count, stream):
        return self.run(("memset", destination, value, 1, count), stream)

    def _memset16(self, destination, value, count, stream):
        return self.run(("memset", destination, value, 2, count), stream)

    def _memset32(self, destination, value, count, stream):
        return self.run(("memset", destination, value, 4, count), stream)

    def _synchronize(self, stream):
        return (self.OK,)

    def _load_module(self, data):
        self.modules.append(bytes(data))
        return (self.OK, f"module{len(self.modules)}")

    def _begin_capture(self, stream, mode):
        assert stream not in self.capturing
        self.capturing[stream] = SimpleNamespace(nodes=[])
        return (self.OK,)

    def _end_capture(self, stream):
        return (self.OK, self.capturing.pop(stream))

    def _launch_graph(self, executable, stream):
        for node in executable.nodes:
            self.execute(node)
        return (self.OK,)

    def take_update(self, executable, graph) -> bool:
        """Whether a graph update is taken (same node kinds in order); then it is applied."""
        same = [n[0] for n in executable.nodes] == [n[0] for n in graph.nodes]
        if self.update_fails or not same:
            return False
        executable.nodes = list(graph.nodes)
        return True

    def device_memory(self) -> Any:
        """This driver's memory for a stand-in library (``heron_test_support.fake_blas.Memory``)."""
        from heron_test_support.fake_blas import Memory

        driver = self

        class DriverMemory(Memory):
            def read(self, address: int, nbytes: int) -> bytes:
                start = driver.slot(address, nbytes)
                return bytes(driver.memory[start : start + nbytes])

            def write(self, address: int, data: bytes) -> None:
                start = driver.slot(address, len(data))
                driver.memory[start : start + len(data)] = data

        return DriverMemory()

    def _nothing(self, *arguments):
        return (self.OK,)

    def _create_event(self, *flags):
        return (self.OK, object())


#: The generic implementations every vendor names: (CUDA's name, HIP's name) -> ours.
GENERIC_CALLS = {
    ("cuMemAlloc", "hipMalloc"): "allocate",
    ("cuMemFree", "hipFree"): "free",
    ("cuMemcpyHtoDAsync", "hipMemcpyHtoDAsync"): "copy_to_device",
    ("cuMemcpyDtoHAsync", "hipMemcpyDtoHAsync"): "copy_from_device",
    ("cuMemcpyDtoDAsync", "hipMemcpyDtoDAsync"): "copy_on_device",
    ("cuMemsetD8Async", "hipMemsetD8Async"): "memset8",
    ("cuMemsetD16Async", "hipMemsetD16Async"): "memset16",
    ("cuMemsetD32Async", "hipMemsetD32Async"): "memset32",
    ("cuStreamSynchronize", "hipStreamSynchronize"): "synchronize",
    ("cuModuleLoadData", "hipModuleLoadData"): "load_module",
    ("cuStreamBeginCapture", "hipStreamBeginCapture"): "begin_capture",
    ("cuStreamEndCapture", "hipStreamEndCapture"): "end_capture",
    ("cuGraphLaunch", "hipGraphLaunch"): "launch_graph",
    ("cuGraphDestroy", "hipGraphDestroy"): "nothing",
    ("cuGraphExecDestroy", "hipGraphExecDestroy"): "nothing",
    ("cuEventCreate", "hipEventCreate"): "create_event",
    ("cuEventRecord", "hipEventRecord"): "nothing",
    ("cuEventSynchronize", "hipEventSynchronize"): "nothing",
    ("cuStreamWaitEvent", "hipStreamWaitEvent"): "nothing",
}


def aliases(vendor: int) -> dict[str, str]:
    """``ALIASES`` for vendor 0 (CUDA) or 1 (HIP)."""
    return {names[vendor]: generic for names, generic in GENERIC_CALLS.items()}
