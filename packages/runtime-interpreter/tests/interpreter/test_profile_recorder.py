"""The access recorder on hand-written kernels run by the engine: known answers.

A coalesced f32 load is 4 sectors per warp request, a stride-2 one 8; a
32x33 f32 shared tile read down a column has no bank conflict, a 32x32 one
is 32-way (31 extra wavefronts a request). Without an observer nothing is
recorded (the default launch).
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

from heron.runtime.interpreter import InterpreterDevice
from heron.runtime.interpreter.capture import compile_kernel_image
from heron.runtime.interpreter.profile import AccessRecorder, SampleComplete

sys.path.insert(0, str(Path(__file__).parent))
from kernels_for_tests import kernel_text  # noqa: E402


def _profile(text: str, inputs, output_bytes, block=(64, 1, 1), grid=(1, 1, 1), **recorder):
    device = InterpreterDevice()
    kernel = device.load_kernel(compile_kernel_image(text))
    buffers = [device.upload(np.ascontiguousarray(x).view(np.uint8)) for x in inputs]
    buffers += [device.allocate(n) for n in output_bytes]
    device.observer = AccessRecorder(**recorder)
    try:
        device.launch(kernel, grid, block, buffers)
    except SampleComplete:
        pass
    return device.observer


def _strided_copy(stride: int) -> str:
    return kernel_text(
        "%a: memref<128xf32>, %b: memref<64xf32>",
        f"""
      %t = gpu.thread_id x
      %s = arith.constant {stride} : index
      %i = arith.muli %t, %s : index
      %v = memref.load %a[%i] : memref<128xf32>
      memref.store %v, %b[%t] : memref<64xf32>""",
    )


def test_coalesced_and_stride_two_loads():
    data = np.arange(128, dtype=np.float32)
    coalesced = _profile(_strided_copy(1), [data], [256])
    load = coalesced.stats("global", "load")
    assert load.requests == 2 and load.sectors_per_request == 4
    assert load.ideal_sectors_per_request == 4
    strided = _profile(_strided_copy(2), [data], [256])
    load = strided.stats("global", "load")
    assert load.sectors_per_request == 8 and load.ideal_sectors_per_request == 4
    store = strided.stats("global", "store")
    assert store.sectors_per_request == store.ideal_sectors_per_request == 4
    read, written = (b["unique_bytes"] for b in strided.buffers())
    assert (read, written) == (256, 256)
    assert strided.warp_operations > 0 and strided.warps_launched == 2


def _tile_transpose(columns: int) -> str:
    tile = f"memref<32x{columns}xf32, #gpu.address_space<workgroup>>"
    return kernel_text(
        "%b: memref<1024xf32>",
        f"""
      %t = gpu.thread_id x
      %c32 = arith.constant 32 : index
      %row = arith.divui %t, %c32 : index
      %col = arith.remui %t, %c32 : index
      %f = arith.index_cast %t : index to i32
      %v = arith.sitofp %f : i32 to f32
      memref.store %v, %s[%row, %col] : {tile}
      gpu.barrier
      %w = memref.load %s[%col, %row] : {tile}
      memref.store %w, %b[%t] : memref<1024xf32>""",
        block=(1024, 1, 1),
        workgroup=f"%s: {tile}",
    )


def test_padded_tile_has_no_conflict_and_unpadded_is_32_way():
    padded = _profile(_tile_transpose(33), [], [4096], block=(1024, 1, 1))
    assert padded.stats("workgroup").bank_conflicts == 0
    assert padded.stats("workgroup", "load").requests == 32
    square = _profile(_tile_transpose(32), [], [4096], block=(1024, 1, 1))
    reads = square.stats("workgroup", "load")
    assert reads.bank_conflicts == 32 * 31
    assert square.stats("workgroup", "store").bank_conflicts == 0


def test_a_block_limit_stops_the_launch_after_its_sample():
    data = np.arange(128, dtype=np.float32)
    text = kernel_text(
        "%a: memref<128xf32>, %b: memref<128xf32>",
        """
      %t = gpu.thread_id x
      %g = gpu.block_id x
      %c32 = arith.constant 32 : index
      %base = arith.muli %g, %c32 : index
      %i = arith.addi %base, %t : index
      %v = memref.load %a[%i] : memref<128xf32>
      memref.store %v, %b[%i] : memref<128xf32>""",
        block=(32, 1, 1),
        grid=(4, 1, 1),
    )
    device = InterpreterDevice(max_lanes=32)
    kernel = device.load_kernel(compile_kernel_image(text))
    buffers = [device.upload(data.view(np.uint8)), device.allocate(512)]
    device.observer = recorder = AccessRecorder(max_blocks=1)
    try:
        device.launch(kernel, (4, 1, 1), (32, 1, 1), buffers)
        raise AssertionError("the launch went past its sample")
    except SampleComplete:
        pass
    assert recorder.blocks_run == 1 and recorder.blocks_total == 4
    assert recorder.stats("global", "load").requests == 1
    # Without an observer the same launch runs whole and records nothing.
    device.observer = None
    device.launch(kernel, (4, 1, 1), (32, 1, 1), buffers)
    assert (device.copy_from_device(buffers[1]).view(np.float32) == data).all()
