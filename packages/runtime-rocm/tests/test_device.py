"""The HIP device against a stand-in runtime (conftest.FakeHip), and on a real GPU when present.

The stand-in holds memory, runs copies and memsets, captures into graphs and
reads the kernarg bytes through ``extra`` as the HIP runtime does, so the
tests check what the device asks for and what comes of it. The kernel is a
real HSACO (a small loop fusion compiled for gfx942 once per module), so the
packing follows its real metadata. ``test_on_a_real_gpu`` runs where a HIP
runtime and an AMD GPU are found (marker ``rocm``) and skips with the reason
elsewhere.
"""

from __future__ import annotations

import struct

import numpy as np
import pytest
from heron_test_support.device_programs import command_program, compile_add, graph_on_a_real_gpu

from heron.runtime.core.device import DeviceError, KernelImage
from heron.runtime.rocm.backend import create_device
from heron.runtime.rocm.code_object import read_code_object
from heron.runtime.rocm.device import HipDevice


@pytest.fixture(scope="module")
def add_kernel():
    from heron.target import Target

    return compile_add(Target.preset("mi300x"))


def _device(hip_runtime, **options):
    runtime = hip_runtime(**options)
    return HipDevice(bindings=runtime), runtime


def test_bytes_round_trip_views_memsets_and_copies(hip_runtime):
    device, runtime = _device(hip_runtime)
    buffer = device.upload(np.arange(8, dtype=np.int32), "x")
    view = device.view(buffer, 4, 8)
    assert view.handle == buffer.handle + 4
    device.memset(view, 0xFFFFFFFF, 4)  # a C int for hipMemsetD32Async: -1
    assert device.copy_from_device(buffer).view(np.int32).tolist() == [0, -1, -1, 3, 4, 5, 6, 7]
    other = device.allocate(8)
    device.copy_on_device(view, other)
    assert device.copy_from_device(other).view(np.int32).tolist() == [-1, -1]
    device.free(view)
    device.free(buffer)
    device.free(buffer)
    assert runtime.freed == [buffer.handle]


def test_launch_packs_the_kernarg_bytes_at_the_metadata_offsets(hip_runtime, add_kernel):
    device, runtime = _device(hip_runtime)
    loaded = device.load_kernel(add_kernel.image)
    a, b, out = (device.allocate(4096) for _ in range(3))
    device.launch(loaded, add_kernel.grid, add_kernel.block, [a, device.view(b, 0, 4096), out])
    (launch,) = runtime.launched
    metadata = read_code_object(add_kernel.image.data).kernel(add_kernel.kernel_name)
    assert len(launch["kernarg"]) == metadata.kernarg_segment_size == 24
    offsets = [argument.offset for argument in metadata.arguments]
    assert [struct.unpack_from("<Q", launch["kernarg"], o)[0] for o in offsets] == [
        a.handle,
        b.handle,
        out.handle,
    ]
    assert launch["grid"] == add_kernel.grid and launch["block"] == add_kernel.block
    with pytest.raises(DeviceError, match="takes 3 arguments, given 2"):
        device.launch(loaded, (1,), (64,), [a, b])


def test_the_device_loads_the_formats_its_backend_declares_and_no_other(hip_runtime, add_kernel):
    """``BackendSpec.image_formats`` (what an executable keeps) and ``load_kernel`` read
    one declaration, heron.runtime.rocm.code_object.IMAGE_FORMATS."""
    from heron.runtime.rocm.backend import heron_backend_specs
    from heron.runtime.rocm.code_object import IMAGE_FORMATS

    device, _ = _device(hip_runtime)
    assert heron_backend_specs().image_formats == IMAGE_FORMATS == (add_kernel.image.format,)
    assert device.load_kernel(add_kernel.image).name == add_kernel.kernel_name
    for other in ("cubin", "ptx", "heron-interpreter"):
        with pytest.raises(DeviceError, match=f"loads 'hsaco' images, not '{other}'"):
            device.load_kernel(KernelImage(other, "fusion", add_kernel.image.data))


def test_a_code_object_for_another_arch_or_format_is_refused(hip_runtime, add_kernel):
    device, _ = _device(hip_runtime, arch="gfx90a:sramecc+:xnack-")
    with pytest.raises(DeviceError, match="is for amdgcn-amd-amdhsa--gfx942, not gfx90a"):
        device.load_kernel(add_kernel.image)
    with pytest.raises(DeviceError, match="loads 'hsaco' images, not 'ptx'"):
        device.load_kernel(KernelImage("ptx", "fusion", b".entry fusion()"))
    with pytest.raises(DeviceError, match="has no kernel 'other'"):
        _device(hip_runtime)[0].load_kernel(KernelImage("hsaco", "other", add_kernel.image.data))


def test_graphs_capture_replay_and_update(hip_runtime):
    device, runtime = _device(hip_runtime)
    a, b, c = (device.upload(np.full(4, v, np.uint8)) for v in (1, 2, 3))
    device.begin_recording()
    device.memset(a, 9, 1)
    device.copy_on_device(a, b)
    with pytest.raises(DeviceError, match="synchronize while recording"):
        device.synchronize()
    graph = device.end_recording()
    assert device.copy_from_device(b).tolist() == [2] * 4  # captured, not run
    graph.replay()
    assert device.copy_from_device(b).tolist() == [9] * 4
    graph.update({b: c})
    graph.replay()
    assert device.copy_from_device(c).tolist() == [9] * 4
    assert (graph.updates, graph.instantiations) == (1, 1)
    assert runtime.calls.count("hipStreamBeginCapture") == 2  # recorded, then updated


def test_a_refused_update_instantiates_again(hip_runtime):
    device, _ = _device(hip_runtime, update_fails=True)
    a, b = device.allocate(4), device.allocate(4)
    device.begin_recording()
    device.memset(a, 1)
    graph = device.end_recording()
    graph.update({a: b})
    assert (graph.updates, graph.instantiations) == (0, 2)


def test_errors_name_the_call_and_the_hip_error(hip_runtime):
    codes = hip_runtime.hipError_t
    device, _ = _device(hip_runtime, fail={"hipStreamSynchronize": codes.hipErrorIllegalAddress})
    with pytest.raises(DeviceError) as error:
        device.synchronize()
    assert str(error.value) == (
        "HIP device 0 (Fake MI300X): hipStreamSynchronize failed: hipErrorIllegalAddress"
    )


def test_timer_and_no_conditional_nodes(hip_runtime):
    device, runtime = _device(hip_runtime)
    timer = device.timer()
    timer.start()
    timer.stop()
    assert timer.seconds() == pytest.approx(0.00075)
    assert runtime.calls.count("hipEventRecord") == 2
    assert device.supports_conditional_nodes is False


def test_properties_make_a_target(hip_runtime):
    from heron.target import Target

    device, _ = _device(hip_runtime)
    target = Target.from_device(device.properties())
    assert (target.arch, target.core_count, target.warp_size) == ("gfx942", 304, 64)
    assert target.shared_memory_per_block_optin == target.shared_memory_per_block == 65536
    assert target.memory_bandwidth == 2 * 1300000 * 1000 * 8192 // 8
    assert target.device_memory_size == 192 * 2**30


def test_no_runtime_gives_the_probes_reason():
    from heron.runtime.rocm.driver import probe

    status = probe()
    if status.available:
        pytest.skip("a HIP runtime is present here")
    with pytest.raises(DeviceError) as error:
        create_device(None)
    assert str(error.value) == status.reason


def test_create_device_refuses_code_for_another_arch(hip_runtime):
    from heron.target import Target

    with pytest.raises(DeviceError, match="cannot run kernels compiled for gfx90a"):
        create_device(Target.for_arch("gfx90a"), bindings=hip_runtime())
    with pytest.raises(DeviceError, match="compiled for cuda"):
        create_device(Target.preset("h100"), bindings=hip_runtime())


@pytest.mark.rocm
def test_on_a_real_gpu():
    """A real launch, a graph replayed and updated, and an event timer, on an AMD GPU."""
    from heron.target import Target

    device = create_device(None)
    target = Target.from_device(device.properties())
    kernel = compile_add(target)
    loaded = device.load_kernel(kernel.image)
    x, y = np.arange(1024, dtype=np.float32), np.full(1024, 0.5, np.float32)
    a, b, out = device.upload(x), device.upload(y), device.allocate(4096)
    device.launch(loaded, kernel.grid, kernel.block, [a, b, out])
    device.synchronize()
    np.testing.assert_array_equal(device.copy_from_device(out).view(np.float32), x + y)
    graph_on_a_real_gpu(device, loaded, kernel)


def test_command_buffers_have_the_interpreters_semantics(hip_runtime):
    from heron.runtime.interpreter.device import InterpreterDevice

    assert command_program(HipDevice(bindings=hip_runtime())) == command_program(
        InterpreterDevice()
    )
