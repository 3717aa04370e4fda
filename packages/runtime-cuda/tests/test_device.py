"""The CUDA device against a stand-in driver (conftest.FakeCuda): every path but the GPU.

The stand-in really holds memory, runs copies and memsets, turns captured
calls into graph nodes and reads launch parameters through ``kernelParams``,
so these tests check what the device asks of the driver and what comes of it:
bytes round-trip, views alias, packed pointers, recording refusals, replay
at replay time, updates, errors named, events, properties -> Target.
"""

from __future__ import annotations

import struct

import numpy as np
import pytest
from heron_test_support.device_programs import command_program, compile_add, graph_on_a_real_gpu

from heron.runtime.core.device import DeviceError, KernelImage
from heron.runtime.cuda.backend import create_device
from heron.runtime.cuda.device import CudaDevice

PTX = """
.version 8.0
.target sm_90
.address_size 64
.visible .entry scale(
    .param .u64 .ptr .align 16 scale_param_0,
    .param .u64 .ptr .align 16 scale_param_1
)
{ ret; }
"""


def _device(fake_cuda, **options):
    driver = fake_cuda(**options)
    return CudaDevice(bindings=driver), driver


def test_bytes_round_trip_and_views_alias_their_buffer(fake_cuda):
    device, driver = _device(fake_cuda)
    buffer = device.upload(np.arange(16, dtype=np.float32), "x")
    assert device.copy_from_device(buffer).view(np.float32).tolist() == list(range(16))
    view = device.view(buffer, 8, 16)
    assert view.handle == buffer.handle + 8
    device.copy_to_device(view, np.full(4, -1, np.float32))
    assert device.copy_from_device(buffer).view(np.float32)[:6].tolist() == [0, 1, -1, -1, -1, -1]
    with pytest.raises(DeviceError, match=r"view \[8:24\] of buffer 'x\[8:24\]' lies outside"):
        device.view(view, 8, 16)


def test_memsets_and_device_copies(fake_cuda):
    device, driver = _device(fake_cuda)
    a, b = device.allocate(8, "a"), device.allocate(8, "b")
    device.memset(a, 0xBEEF, 2)
    assert device.copy_from_device(a).tobytes() == bytes.fromhex("efbeefbeefbeefbe")
    device.copy_on_device(a, b)
    assert device.copy_from_device(b).tobytes() == bytes.fromhex("efbeefbeefbeefbe")
    assert driver.calls.count("cuMemsetD16Async") == 1
    assert "cuMemcpyDtoDAsync" in driver.calls
    with pytest.raises(DeviceError, match="no multiple of 4"):
        device.memset(device.allocate(6), 1, 4)


def test_free_releases_allocations_once_and_never_views(fake_cuda):
    device, driver = _device(fake_cuda)
    buffer = device.allocate(64)
    device.free(device.view(buffer, 0, 8))
    assert driver.freed == []
    device.free(buffer)
    device.free(buffer)
    assert driver.freed == [buffer.handle]


def test_ptx_is_loaded_nul_terminated_and_launches_pack_the_pointers(fake_cuda):
    device, driver = _device(fake_cuda)
    kernel = device.load_kernel(KernelImage("ptx", "scale", PTX.encode()))
    assert driver.modules[0].endswith(b"\0") and driver.modules[0].count(b"\0") == 1
    x, y = device.allocate(64), device.allocate(64)
    device.launch(kernel, (4,), (128,), [device.view(x, 16, 16), y])
    (launch,) = driver.launched
    assert launch["grid"] == (4, 1, 1) and launch["block"] == (128, 1, 1)
    assert launch["args"] == [x.handle + 16, y.handle]
    with pytest.raises(DeviceError, match=r"kernel 'scale' takes 2 parameters"):
        device.launch(kernel, (1,), (1,), [x])


def test_a_prepared_launch_is_packed_once_and_issued_or_recorded_each_call(fake_cuda):
    device, driver = _device(fake_cuda)
    kernel = device.load_kernel(KernelImage("ptx", "scale", PTX.encode()))
    x, y = device.allocate(64), device.allocate(64)
    with pytest.raises(DeviceError, match=r"kernel 'scale' takes 2 parameters"):
        device.prepare_launch(kernel, (1,), (1,), [x])  # checked when prepared
    launch = device.prepare_launch(kernel, (2,), (32,), [x, device.view(y, 8, 8)])
    before = driver.calls.count("cuFuncGetParamInfo")
    launch()
    launch()
    assert [entry["args"] for entry in driver.launched] == [[x.handle, y.handle + 8]] * 2
    assert driver.calls.count("cuFuncGetParamInfo") == before  # nothing read again
    assert device.launches == 2
    device.begin_recording()
    launch()
    assert len(driver.launched) == 2  # recorded, not run
    graph = device.end_recording()
    captured = len(driver.launched)
    graph.replay()
    assert len(driver.launched) == captured + 1
    assert driver.launched[-1]["args"] == [x.handle, y.handle + 8]


def test_a_cubin_for_another_major_arch_is_refused_and_load_best_takes_the_ptx(fake_cuda):
    device, driver = _device(fake_cuda)
    cubin = _cubin_header(80)
    with pytest.raises(
        DeviceError, match="is for sm_80, which does not run on sm_90; load the PTX"
    ):
        device.load_kernel(KernelImage("cubin", "scale", cubin))
    loaded = device.load_best(
        [KernelImage("cubin", "scale", cubin), KernelImage("ptx", "scale", PTX.encode())]
    )
    assert loaded.handle.signature.parameters[1].name == "scale_param_1"
    with pytest.raises(DeviceError, match="loads 'cubin' or 'ptx' images, not 'hsaco'"):
        device.load_kernel(KernelImage("hsaco", "scale", b"\x7fELF"))


def test_the_device_loads_the_formats_its_backend_declares_and_no_other(fake_cuda):
    """``BackendSpec.image_formats`` (what an executable keeps) and ``load_kernel`` read
    one declaration, heron.runtime.cuda.kernel_abi.IMAGE_FORMATS."""
    from heron.runtime.cuda.backend import heron_backend_specs
    from heron.runtime.cuda.kernel_abi import IMAGE_FORMATS

    device, _ = _device(fake_cuda)
    spec = heron_backend_specs()
    assert spec.image_formats == IMAGE_FORMATS == ("cubin", "ptx")
    images = {
        "cubin": KernelImage("cubin", "k", _cubin_header(90)),
        "ptx": KernelImage("ptx", "scale", PTX.encode()),
    }
    for image_format in spec.image_formats:
        assert device.load_kernel(images[image_format]).name == images[image_format].kernel_name
    for other in ("hsaco", "heron-interpreter", "fatbin"):
        with pytest.raises(DeviceError, match=f"loads 'cubin' or 'ptx' images, not '{other}'"):
            device.load_kernel(KernelImage(other, "k", b"\x7fELF"))


def test_a_cubins_layout_comes_from_cuFuncGetParamInfo(fake_cuda):
    device, driver = _device(fake_cuda)
    driver.param_info["k"] = [(0, 8), (8, 8), (16, 8)]
    kernel = device.load_kernel(KernelImage("cubin", "k", _cubin_header(90)))
    assert [(p.offset, p.size) for p in kernel.handle.signature.parameters] == [
        (0, 8),
        (8, 8),
        (16, 8),
    ]
    buffers = [device.allocate(8) for _ in range(3)]
    device.launch(kernel, (1,), (32,), buffers, shared_bytes=64 * 1024)
    assert "cuFuncSetAttribute" in driver.calls  # over 48 KiB of dynamic shared memory
    assert driver.launched[0]["args"] == [b.handle for b in buffers]


@pytest.mark.parametrize(("device_limit", "opts_in"), [(49152, False), (32768, True)])
def test_the_shared_memory_a_launch_may_use_without_opting_in_is_the_device_s(
    fake_cuda, device_limit, opts_in
):
    from heron_test_support.fake_cuda import ATTRIBUTE_VALUES

    attributes = dict(ATTRIBUTE_VALUES) | {"MAX_SHARED_MEMORY_PER_BLOCK": device_limit}
    device, driver = _device(fake_cuda, attributes=attributes)
    driver.param_info["k"] = [(0, 8)]
    kernel = device.load_kernel(KernelImage("cubin", "k", _cubin_header(90)))
    buffers = [device.allocate(8)]
    device.launch(kernel, (1,), (32,), buffers, shared_bytes=40 * 1024)
    assert ("cuFuncSetAttribute" in driver.calls) == opts_in


def test_errors_name_the_call_and_the_cuda_error(fake_cuda):
    codes = fake_cuda.CUresult
    device, driver = _device(
        fake_cuda, fail={"cuStreamSynchronize": codes.CUDA_ERROR_ILLEGAL_ADDRESS}
    )
    with pytest.raises(DeviceError) as error:
        device.synchronize()
    assert str(error.value) == (
        "CUDA device 0 (Fake H100): cuStreamSynchronize failed: CUDA_ERROR_ILLEGAL_ADDRESS"
        " (text of CUDA_ERROR_ILLEGAL_ADDRESS)"
    )
    device, driver = _device(fake_cuda, fail={"cuMemAlloc": codes.CUDA_ERROR_OUT_OF_MEMORY})
    with pytest.raises(DeviceError, match="cuMemAlloc failed: CUDA_ERROR_OUT_OF_MEMORY"):
        device.allocate(1 << 40)


def test_recording_captures_and_replay_runs_on_the_memory_of_replay_time(fake_cuda):
    device, driver = _device(fake_cuda)
    source, destination = device.allocate(4, "source"), device.allocate(4, "destination")
    device.begin_recording()
    device.memset(source, 7, 1)
    device.copy_on_device(source, destination)
    for refused in (
        lambda: device.copy_to_device(source, b"1234"),
        lambda: device.copy_from_device(source),
        device.synchronize,
        device.begin_recording,
    ):
        with pytest.raises(DeviceError):
            refused()
    assert "cuMemsetD8Async" not in driver.calls  # nothing issued while recording
    graph = device.end_recording()
    assert driver.calls.index("cuStreamBeginCapture") < driver.calls.index("cuMemsetD8Async")
    assert driver.calls.index("cuMemsetD8Async") < driver.calls.index("cuStreamEndCapture")
    assert device.copy_from_device(destination).tobytes() != b"\x07" * 4  # captured, not run
    graph.replay()
    assert device.copy_from_device(destination).tobytes() == b"\x07" * 4
    assert graph.buffers == (source, destination)


def test_update_points_the_graph_at_other_buffers_through_cuGraphExecUpdate(fake_cuda):
    device, driver = _device(fake_cuda)
    a, b, c = (device.upload(np.full(4, v, np.uint8)) for v in (1, 2, 3))
    device.begin_recording()
    device.copy_on_device(a, b)
    graph = device.end_recording()
    graph.update({b: c})
    graph.replay()
    assert device.copy_from_device(c).tolist() == [1] * 4
    assert device.copy_from_device(b).tolist() == [2] * 4
    assert (graph.updates, graph.instantiations) == (1, 1)
    with pytest.raises(DeviceError, match="is 4 bytes, its replacement"):
        graph.update({c: device.allocate(8)})
    with pytest.raises(DeviceError, match="not one the command buffer was recorded with"):
        graph.update({b: c})
    assert graph.buffers == (a, c)


def test_a_refused_update_instantiates_the_new_graph(fake_cuda):
    device, driver = _device(fake_cuda, update_fails=True)
    a, b, c = (device.upload(np.full(4, v, np.uint8)) for v in (1, 2, 3))
    device.begin_recording()
    device.copy_on_device(a, b)
    graph = device.end_recording()
    graph.update({a: c})
    graph.replay()
    assert device.copy_from_device(b).tolist() == [3] * 4
    assert (graph.updates, graph.instantiations) == (0, 2)


def test_without_cuda_12_4_there_are_no_conditional_nodes(fake_cuda):
    device, _ = _device(fake_cuda, driver_version=12030)
    assert device.supports_conditional_nodes is False
    device.begin_recording()
    with pytest.raises(DeviceError, match="CUDA 12.3; they need 12.4"):
        device.record_while(lambda: None, device.allocate(1), lambda: None)


def _control_flow_program(device):
    """A while loop (3 trips) and two conditionals, replayed with other selectors, updated."""
    queue = device.allocate(4, "queue")
    shift, scratch = device.allocate(3, "shift"), device.allocate(7, "scratch")
    tally = device.upload(np.zeros(8, np.uint8), "tally")
    predicate, other_predicate = device.allocate(1, "predicate"), device.allocate(1, "p2")
    selector, flag = device.allocate(4, "selector"), device.allocate(1, "flag")
    out = device.upload(np.zeros(2, np.uint8), "out")

    def condition():
        device.copy_on_device(device.view(queue, 0, 1), predicate)

    def body():  # shift the queue left by one; shift a 0xAB into the tally
        device.copy_on_device(device.view(queue, 1, 3), shift)
        device.copy_on_device(shift, device.view(queue, 0, 3))
        device.memset(device.view(queue, 3, 1), 0)
        device.copy_on_device(device.view(tally, 0, 7), scratch)
        device.copy_on_device(scratch, device.view(tally, 1, 7))
        device.memset(device.view(tally, 0, 1), 0xAB)

    def write(offset, value):
        return lambda: device.memset(device.view(out, offset, 1), value)

    device.begin_recording()
    device.record_while(condition, predicate, body)
    device.record_conditional(selector, "s32", [write(0, 10 + k) for k in range(3)])
    device.record_conditional(flag, "pred", [write(1, 1), write(1, 2)])
    graph = device.end_recording()
    results = []
    for number, (index, pred) in enumerate(((1, 0), (7, 1), (-1, 0), (0, 1))):
        if number == 3:
            (recorded_predicate,) = [b for b in graph.buffers if b.label == "predicate"]
            graph.update({recorded_predicate: other_predicate})
        device.copy_to_device(selector, np.array([index], np.int32))
        device.copy_to_device(flag, np.array([pred], np.uint8))
        device.copy_to_device(queue, np.array([1, 1, 1, 0], np.uint8))
        device.copy_to_device(tally, np.zeros(8, np.uint8))
        graph.replay()
        results.append([device.copy_from_device(b).tobytes() for b in (out, tally, queue)])
    return results


def test_loops_and_conditionals_run_as_on_the_interpreter(fake_cuda):
    from heron.runtime.interpreter.device import InterpreterDevice

    device, driver = _device(fake_cuda)
    assert device.supports_conditional_nodes
    results = _control_flow_program(device)
    assert results == _control_flow_program(InterpreterDevice())
    assert results[0][0] == bytes([11, 2]) and results[1][0] == bytes([12, 1])  # 7: the last
    assert results[0][1] == bytes([0xAB] * 3 + [0] * 5)  # three trips
    assert len(driver.modules) == 1  # the condition kernels, loaded once


def test_a_while_loop_is_condition_setter_and_a_node_whose_body_repeats_them(fake_cuda):
    device, driver = _device(fake_cuda)
    predicate, a, b = device.allocate(1), device.allocate(4), device.allocate(4)
    device.begin_recording()
    device.record_while(
        lambda: device.copy_on_device(device.view(a, 0, 1), predicate),
        predicate,
        lambda: device.memset(b, 3),
    )
    graph = device.end_recording()
    copy, setter, node = graph._executable.nodes
    assert (copy[0], setter[0], setter[1]["function"], node[0]) == (
        "copy",
        "launch",
        "heron_set_while",
        "conditional",
    )
    _, handle, condition_type, (body,) = node
    assert condition_type == driver.CUgraphConditionalNodeType.CU_GRAPH_COND_TYPE_WHILE
    assert [n[0] for n in body.nodes] == ["memset", "copy", "launch"]
    assert setter[1]["args"] == [handle, predicate.handle] == body.nodes[2][1]["args"]
    assert "cuStreamBeginCaptureToGraph" in driver.calls


def test_control_flow_is_refused_outside_a_recording_and_with_bad_selectors(fake_cuda):
    device, _ = _device(fake_cuda)
    with pytest.raises(DeviceError, match="only while recording"):
        device.record_while(lambda: None, device.allocate(1), lambda: None)
    device.begin_recording()
    with pytest.raises(DeviceError, match="the predicate is 1 byte, not 4"):
        device.record_while(lambda: None, device.allocate(4), lambda: None)
    with pytest.raises(DeviceError, match="a 's32' selector of 1 bytes"):
        device.record_conditional(device.allocate(1), "s32", [lambda: None])
    with pytest.raises(DeviceError, match="3 branches for a pred selector"):
        device.record_conditional(device.allocate(1), "pred", [lambda: None] * 3)


def test_timer_uses_events_on_the_stream(fake_cuda):
    device, driver = _device(fake_cuda)
    timer = device.timer()
    with pytest.raises(DeviceError, match="needs start"):
        timer.seconds()
    timer.start()
    timer.stop()
    assert timer.seconds() == pytest.approx(0.0025)
    assert driver.calls.count("cuEventRecord") == 2 and "cuEventElapsedTime" in driver.calls


def test_properties_make_a_target(fake_cuda):
    from heron.target import Target

    device, _ = _device(fake_cuda)
    target = Target.from_device(device.properties())
    assert (target.arch, target.core_count, target.warp_size) == ("sm_90", 132, 32)
    assert target.shared_memory_per_block_optin == 232448
    assert target.memory_bandwidth == 2 * 2619000 * 1000 * 5120 // 8
    assert target.clock_rate_ghz == pytest.approx(1.98)
    assert target.device_memory_size == 80 * 2**30


def test_an_attribute_the_driver_lacks_is_borrowed_from_a_preset(fake_cuda):
    from heron.target import Target

    attributes = dict(fake_cuda().attributes)
    del attributes["L2_CACHE_SIZE"]
    device, _ = _device(fake_cuda, attributes=attributes)
    properties = device.properties()
    assert "l2_cache_size" not in properties
    target = Target.from_device(properties)
    assert target.l2_cache_size == Target.preset("h100").l2_cache_size
    borrowed = target.source.split("; ", 1)[1]
    assert "l2_cache_size" in borrowed and borrowed.endswith("from preset h100")
    assert "core_count" not in borrowed  # queried


def test_no_driver_gives_the_probes_reason():
    from heron.runtime.cuda.driver import probe

    status = probe()
    if status.available:
        pytest.skip("a CUDA driver is present here")
    with pytest.raises(DeviceError) as error:
        create_device(None)
    assert str(error.value) == status.reason


def test_create_device_refuses_code_for_a_newer_arch(fake_cuda):
    from heron.target import Target

    with pytest.raises(DeviceError, match="cannot run kernels compiled for sm_100"):
        create_device(Target.for_arch("sm_100"), bindings=fake_cuda())
    with pytest.raises(DeviceError, match="compiled for rocm"):
        create_device(Target.preset("mi300x"), bindings=fake_cuda())
    assert create_device(Target.preset("a100"), bindings=fake_cuda()).compute_capability == (9, 0)


def _cubin_header(sm: int) -> bytes:
    """The ELF header of a CUDA 13 cubin for ``sm`` (enough for ``cubin_arch``)."""
    header = bytearray(64)
    header[:9] = b"\x7fELF\x02\x01\x01\x41\x08"
    struct.pack_into("<H", header, 18, 190)
    struct.pack_into("<I", header, 48, 0x6000004 | (sm << 8))
    return bytes(header)


def test_a_compiled_kernels_ptx_loads_and_launches_through_the_stand_in(fake_cuda):
    from heron.target import Target

    kernel = compile_add(Target.preset("h100"))
    device, driver = _device(fake_cuda)
    images = [KernelImage(a.extension, kernel.kernel_name, a.data) for a in kernel.device_code()]
    # The driver reads a cubin's parameter layout from the image (cuFuncGetParamInfo).
    driver.param_info[kernel.kernel_name] = [(0, 8), (8, 8), (16, 8)]
    loaded = device.load_best(images)  # the sm_90 cubin on this sm_90 device
    assert driver.modules[0][:4] == b"\x7fELF"
    assert len(loaded.handle.signature.parameters) == 3
    buffers = [device.allocate(4096) for _ in range(3)]
    device.launch(loaded, kernel.grid, kernel.block, buffers)
    assert driver.launched[0]["args"] == [b.handle for b in buffers]


@pytest.mark.cuda
def test_on_a_real_gpu():
    """A real launch, a graph replayed and updated, and an event timer, on a CUDA GPU."""
    from heron.target import Target

    device = create_device(None)
    kernel = compile_add(Target.from_device(device.properties()))
    images = [KernelImage(a.extension, kernel.kernel_name, a.data) for a in kernel.device_code()]
    loaded = device.load_best(images)
    ptx = device.load_kernel(next(i for i in images if i.format == "ptx"))  # JIT-compiled
    x, y = np.arange(1024, dtype=np.float32), np.full(1024, 0.5, np.float32)
    a, b, out = device.upload(x), device.upload(y), device.allocate(4096)
    for candidate in (loaded, ptx):
        device.memset(out, 0, 4)
        device.launch(candidate, kernel.grid, kernel.block, [a, b, out])
        device.synchronize()
        np.testing.assert_array_equal(device.copy_from_device(out).view(np.float32), x + y)
    graph_on_a_real_gpu(device, loaded, kernel)
    if device.supports_conditional_nodes:  # CUDA 12.4+: loops and branches inside graphs
        from heron.runtime.interpreter.device import InterpreterDevice

        assert _control_flow_program(device) == _control_flow_program(InterpreterDevice())


def test_command_buffers_have_the_interpreters_semantics(fake_cuda):
    from heron.runtime.interpreter.device import InterpreterDevice

    assert command_program(CudaDevice(bindings=fake_cuda())) == command_program(InterpreterDevice())


def _counted_loop(device, trips: int):
    """A loop of ``trips`` proved trips whose body is one memset, and a condition that
    would end it at once (it is never run): recorded, replayed once; (graph, predicate)."""
    predicate = device.allocate(1, "predicate")
    flag = device.allocate(1, "flag")
    device.begin_recording()
    device.record_while(
        lambda: device.memset(predicate, 0),  # never needed: the trip count is proved
        predicate,
        lambda: device.memset(flag, 1),
        trip_count=trips,
    )
    graph = device.end_recording()
    graph.replay()
    return graph, device.copy_from_device(predicate).tobytes()


def test_a_loop_of_a_proved_trip_count_runs_no_condition_and_counts_down_on_the_device(
    fake_cuda,
):
    from heron.runtime.core.gpu_device import counted_loop_unroll

    device, driver = _device(fake_cuda)
    graph, _ = _counted_loop(device, 1000)
    setter, node = graph._executable.nodes
    assert (setter[0], setter[1]["function"], node[0]) == (
        "launch",
        "heron_set_count",
        "conditional",
    )
    _, handle, condition_type, (body,) = node
    assert condition_type == driver.CUgraphConditionalNodeType.CU_GRAPH_COND_TYPE_WHILE
    assert counted_loop_unroll(1000, 1) == 8 and setter[1]["args"][2] == 125  # passes
    assert [n[0] for n in body.nodes] == ["memset"] * 8 + ["launch"]
    assert body.nodes[-1][1]["function"] == "heron_count_down"
    assert body.nodes[-1][1]["args"][0] == handle
    # the body ran 1000 times, the count-down kernel 125, the condition never
    for trips, unroll in ((1000, 8), (7, 1), (6, 2), (0, 1)):
        device, driver = _device(fake_cuda)
        before = dict(driver.executed)
        graph, predicate = _counted_loop(device, trips)
        ran = {k: driver.executed.get(k, 0) - before.get(k, 0) for k in ("memset", "launch")}
        passes = trips // unroll
        assert ran == {"memset": trips, "launch": passes + 1 if trips else 0}, trips
        assert counted_loop_unroll(trips, 1) == unroll if trips else True
    assert counted_loop_unroll(1000, 9) == 4  # 8 copies of 9 commands: over the bound


def test_the_interpreter_runs_a_proved_trip_count_without_the_condition():
    from heron.runtime.interpreter.device import InterpreterDevice

    device = InterpreterDevice()
    predicate, tally = device.allocate(1, "predicate"), device.allocate(6, "tally")
    device.begin_recording()
    device.record_while(
        lambda: device.memset(predicate, 0),  # run once, it would end the loop at once
        predicate,
        lambda: device.copy_on_device(device.view(tally, 0, 5), device.view(tally, 1, 5)),
        trip_count=3,
    )
    graph = device.end_recording()
    device.copy_to_device(tally, np.array([9, 0, 0, 0, 0, 0], np.uint8))
    graph.replay()
    assert device.copy_from_device(tally).tobytes() == bytes([9, 9, 9, 9, 0, 0])  # 3 shifts


@pytest.mark.parametrize("trips", [-1, 2.5, True])
def test_a_trip_count_that_is_not_a_count_is_refused_by_both_devices(fake_cuda, trips):
    from heron.runtime.core.device import DeviceError
    from heron.runtime.interpreter.device import InterpreterDevice

    for device in (_device(fake_cuda)[0], InterpreterDevice()):
        device.begin_recording()
        with pytest.raises(DeviceError, match="trip count is an integer >= 0"):
            device.record_while(lambda: None, device.allocate(1), lambda: None, trip_count=trips)
