"""The interpreter device's views, device copies, memsets, command buffers and timer.

Command buffers have a CUDA graph's semantics: recorded commands do not run,
a replay reads memory as it is at replay time, ``update`` repoints buffers,
and conditional nodes (while, conditional) read their predicate or selector
at replay time.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

from heron.runtime.core.device import DeviceError
from heron.runtime.interpreter import InterpreterDevice
from heron.runtime.interpreter.capture import compile_kernel_image

sys.path.insert(0, str(Path(__file__).parent))
from kernels_for_tests import kernel_text  # noqa: E402

#: out[i] = in[i] + 1 over four i32.
ADD_ONE = kernel_text(
    "%in: memref<4xi32>, %out: memref<4xi32>",
    """
      %i = gpu.thread_id x
      %a = memref.load %in[%i] : memref<4xi32>
      %c1 = arith.constant 1 : i32
      %r = arith.addi %a, %c1 : i32
      memref.store %r, %out[%i] : memref<4xi32>
    """,
    block=(4, 1, 1),
)

#: pred[0] = counter[0] < limit[0] (i32), one thread.
LESS_THAN = kernel_text(
    "%counter: memref<1xi32>, %limit: memref<1xi32>, %pred: memref<1xi8>",
    """
      %c0 = arith.constant 0 : index
      %a = memref.load %counter[%c0] : memref<1xi32>
      %b = memref.load %limit[%c0] : memref<1xi32>
      %lt = arith.cmpi slt, %a, %b : i32
      %byte = arith.extui %lt : i1 to i8
      memref.store %byte, %pred[%c0] : memref<1xi8>
    """,
    block=(1, 1, 1),
)


def i32(values) -> np.ndarray:
    return np.asarray(values, np.int32)


@pytest.fixture
def device() -> InterpreterDevice:
    return InterpreterDevice()


def test_views_share_bytes_both_ways(device):
    buffer = device.upload(np.arange(16, dtype=np.uint8))
    view = device.view(buffer, 4, 8)
    assert view.nbytes == 8
    assert list(device.copy_from_device(view)) == list(range(4, 12))
    device.copy_to_device(view, np.full(8, 200, np.uint8))
    assert list(device.copy_from_device(buffer)[3:13]) == [3] + [200] * 8 + [12]
    inner = device.view(view, 2, 2)
    device.memset(inner, 7)
    assert list(device.copy_from_device(buffer)[5:9]) == [200, 7, 7, 200]
    with pytest.raises(DeviceError, match="outside"):
        device.view(buffer, 10, 7)
    # Freeing a view gives nothing back: its bytes are its parent's.
    live = device.live_bytes
    device.free(view)
    assert device.live_bytes == live


def test_copy_on_device_and_memset_widths(device):
    source = device.upload(np.arange(8, dtype=np.uint8))
    destination = device.allocate(8)
    device.copy_on_device(source, destination)
    assert list(device.copy_from_device(destination)) == list(range(8))
    with pytest.raises(DeviceError, match="sizes differ"):
        device.copy_on_device(source, device.allocate(4))
    device.memset(destination, 0xBEEF, 2)
    assert device.copy_from_device(destination).view("<u2").tolist() == [0xBEEF] * 4
    device.memset(destination, 0x01020304, 4)
    assert device.copy_from_device(destination).view("<u4").tolist() == [0x01020304] * 2
    with pytest.raises(DeviceError):
        device.memset(destination, 256, 1)
    with pytest.raises(DeviceError, match="multiple"):
        device.memset(device.allocate(6), 1, 4)


def test_a_kernel_on_views_of_one_allocation(device):
    kernel = device.load_kernel(compile_kernel_image(ADD_ONE))
    arena = device.upload(np.concatenate([i32([1, 2, 3, 4]), i32([0, 0, 0, 0])]))
    device.launch(
        kernel, (1, 1, 1), (4, 1, 1), [device.view(arena, 0, 16), device.view(arena, 16, 16)]
    )
    assert device.copy_from_device(arena).view(np.int32).tolist() == [1, 2, 3, 4, 2, 3, 4, 5]
    assert device.launches == 1


def test_recording_runs_nothing_and_replay_reads_memory_at_replay_time(device):
    kernel = device.load_kernel(compile_kernel_image(ADD_ONE))
    a, b = device.upload(i32([1, 2, 3, 4])), device.allocate(16)
    device.begin_recording()
    device.launch(kernel, 1, 4, [a, b])
    device.copy_on_device(b, a)
    with pytest.raises(DeviceError, match="recording"):
        device.copy_from_device(a)
    with pytest.raises(DeviceError, match="recording"):
        device.synchronize()
    commands = device.end_recording()
    assert device.launches == 0
    assert device.copy_from_device(a).view(np.int32).tolist() == [1, 2, 3, 4]
    assert commands.buffers == (a, b)
    commands.replay()
    commands.replay()  # a += 1 twice: the second replay sees the first's result
    assert device.copy_from_device(a).view(np.int32).tolist() == [3, 4, 5, 6]
    assert device.launches == 2


def test_update_repoints_buffers_and_checks_them(device):
    kernel = device.load_kernel(compile_kernel_image(ADD_ONE))
    a, b = device.upload(i32([1, 2, 3, 4])), device.allocate(16)
    device.begin_recording()
    device.launch(kernel, 1, 4, [a, b])
    commands = device.end_recording()
    other_in, other_out = device.upload(i32([10, 20, 30, 40])), device.allocate(16)
    commands.update({a: other_in, b: other_out})
    commands.replay()
    assert device.copy_from_device(other_out).view(np.int32).tolist() == [11, 21, 31, 41]
    assert device.copy_from_device(b).view(np.int32).tolist() != [11, 21, 31, 41]
    assert commands.buffers == (other_in, other_out)
    with pytest.raises(DeviceError, match="not one the command buffer was recorded with"):
        commands.update({a: other_in})
    with pytest.raises(DeviceError, match="bytes"):
        commands.update({other_in: device.allocate(8)})
    assert commands.updates == 1


def _loop(device, increment, less, counter, limit, predicate):
    """Record ``while counter < limit: counter += 1`` (through a scratch copy)."""
    scratch = device.allocate(4)

    def condition():
        device.launch(less, 1, 1, [counter, limit, predicate])

    def body():
        device.launch(increment, 1, 1, [counter, scratch])
        device.copy_on_device(scratch, counter)

    device.record_while(condition, predicate, body)


def test_while_node_reads_its_predicate_at_replay_time(device):
    increment = device.load_kernel(
        compile_kernel_image(
            kernel_text(
                "%in: memref<1xi32>, %out: memref<1xi32>",
                """
                  %c0 = arith.constant 0 : index
                  %a = memref.load %in[%c0] : memref<1xi32>
                  %c1 = arith.constant 1 : i32
                  %r = arith.addi %a, %c1 : i32
                  memref.store %r, %out[%c0] : memref<1xi32>
                """,
                block=(1, 1, 1),
            )
        )
    )
    less = device.load_kernel(compile_kernel_image(LESS_THAN))
    counter, limit, predicate = device.upload(i32([0])), device.upload(i32([5])), device.allocate(1)
    device.begin_recording()
    _loop(device, increment, less, counter, limit, predicate)
    loop = device.end_recording()
    assert device.launches == 0
    loop.replay()
    assert device.copy_from_device(counter).view(np.int32).tolist() == [5]
    assert device.launches == 5 * 2 + 1  # five bodies, six conditions
    assert loop.launches_last_replay == 11
    device.copy_to_device(limit, i32([8]))  # read at replay time, not recording time
    loop.replay()
    assert device.copy_from_device(counter).view(np.int32).tolist() == [8]


@pytest.mark.parametrize(
    ("selector_type", "value", "expected"),
    [("pred", 1, 0), ("pred", 0, 1), ("s32", 1, 1), ("s32", 7, 2), ("s32", -1, 2)],
)
def test_conditional_node_picks_the_branch_at_replay_time(device, selector_type, value, expected):
    dtype = np.uint8 if selector_type == "pred" else np.int32
    selector = device.upload(np.asarray([1 - value if selector_type == "pred" else 0], dtype))
    out = device.allocate(4)
    count = 2 if selector_type == "pred" else 3
    device.begin_recording()
    device.record_conditional(
        selector,
        selector_type,
        [lambda k=k: device.memset(out, 100 + k, 4) for k in range(count)],
    )
    commands = device.end_recording()
    device.copy_to_device(selector, np.asarray([value], dtype))  # after recording
    commands.replay()
    assert device.copy_from_device(out).view(np.int32).tolist() == [100 + expected]


def test_without_conditional_nodes_loops_are_refused():
    device = InterpreterDevice(conditional_nodes=False)
    assert not device.supports_conditional_nodes
    predicate = device.allocate(1)
    device.begin_recording()
    with pytest.raises(DeviceError, match="conditional nodes"):
        device.record_while(lambda: None, predicate, lambda: None)
    with pytest.raises(DeviceError, match="conditional nodes"):
        device.record_conditional(predicate, "pred", [lambda: None, lambda: None])
    device.end_recording()


def test_conditional_nodes_only_while_recording(device):
    with pytest.raises(DeviceError, match="only while recording"):
        device.record_while(lambda: None, device.allocate(1), lambda: None)
    device.begin_recording()
    with pytest.raises(DeviceError, match="already recording"):
        device.begin_recording()
    device.end_recording()
    with pytest.raises(DeviceError, match="not recording"):
        device.end_recording()


def test_timer_measures_host_seconds(device):
    timer = device.timer()
    timer.start()
    device.memset(device.allocate(1 << 16), 3)
    timer.stop()
    assert timer.seconds() >= 0.0
    with pytest.raises(DeviceError):
        device.timer().seconds()
