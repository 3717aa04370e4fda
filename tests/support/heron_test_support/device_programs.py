"""Programs of device operations that every device must run alike (the GPU devices' tests).

Each returns what it read back, so that a test compares a GPU device on its
stand-in driver with the interpreter device, whose command buffers define
the semantics (docs/devices.md).
"""

from __future__ import annotations

import numpy as np

__all__ = ["ADD", "command_program", "compile_add", "graph_on_a_real_gpu"]


def command_program(device):
    """Immediate and recorded copies and memsets through views; replay, update, replay."""
    a = device.upload(np.arange(16, dtype=np.uint8), "a")
    b = device.upload(np.full(16, 0xEE, np.uint8), "b")
    spare = device.upload(np.full(16, 0x11, np.uint8), "spare")
    device.memset(device.view(a, 12, 4), 0xCAFE, 2)
    device.begin_recording()
    device.copy_on_device(device.view(a, 4, 8), device.view(b, 0, 8))
    device.memset(device.view(b, 8, 8), 0xA1B2C3D4, 4)
    device.copy_on_device(device.view(b, 0, 4), device.view(a, 0, 4))
    graph = device.end_recording()
    device.memset(device.view(a, 4, 4), 0x5A, 1)  # replay sees memory as it is now
    graph.replay()
    snapshots = [device.copy_from_device(x).tobytes() for x in (a, b, spare)]
    (target,) = [buffer for buffer in graph.buffers if buffer.label == "b[8:16]"]
    graph.update({target: device.view(spare, 0, 8)})
    graph.replay()
    snapshots += [device.copy_from_device(x).tobytes() for x in (a, b, spare)]
    return snapshots


#: A loop fusion of two f32[1024] operands: the kernel the GPU devices' tests launch.
ADD = """
HloModule add
fused_add {
  p0 = f32[1024]{0} parameter(0)
  p1 = f32[1024]{0} parameter(1)
  ROOT sum = f32[1024]{0} add(p0, p1)
}
ENTRY main {
  a = f32[1024]{0} parameter(0)
  b = f32[1024]{0} parameter(1)
  ROOT f = f32[1024]{0} fusion(a, b), kind=kLoop, calls=fused_add
}
"""


def compile_add(target):
    """:data:`ADD`'s fusion compiled for ``target`` (a CompiledKernel). Skips, saying why,
    where heron's compiler is not installed: the GPU bundle carries the runtime alone, and
    its window runs the CUDA tests that need no compiler (docs/gpu.md)."""
    import pytest

    pytest.importorskip(
        "heron.compiler",
        reason="compiling a kernel on the GPU machine needs heron's compiler (the dev"
        " environment); the GPU bundle installs the runtime only",
    )
    from heron.compiler import compile_fusion, fusions_of
    from heron.hlo.parser import parse_module

    (fusion,) = fusions_of(parse_module(ADD))
    return compile_fusion(fusion, target)


def graph_on_a_real_gpu(device, loaded, kernel) -> None:
    """On a real GPU: a memset and :data:`ADD`'s launch ``loaded`` recorded as a graph,
    replayed between two events, updated to another output buffer and replayed."""
    x = np.arange(1024, dtype=np.float32)
    a, out, other = device.upload(x), device.allocate(4096), device.allocate(4096)
    device.begin_recording()
    device.memset(out, 0)
    device.launch(loaded, kernel.grid, kernel.block, [a, a, out])
    graph = device.end_recording()
    timer = device.timer()
    timer.start()
    graph.replay()
    timer.stop()
    assert timer.seconds() > 0
    np.testing.assert_array_equal(device.copy_from_device(out).view(np.float32), 2 * x)
    graph.update({out: other})
    graph.replay()
    device.synchronize()
    np.testing.assert_array_equal(device.copy_from_device(other).view(np.float32), 2 * x)
    assert graph.updates == 1
