"""The global-memory race sanitizer (``races.py``): kernels that race on global memory, and
the same kernels without the race.

A GPU runs blocks and warps in no fixed order, so an element one thread
writes and another reads or writes in the same launch has no defined value
(issue 26: dropout_threefry changed between runs on an H200); the interpreter
runs lanes in lockstep and would hide it, so it must report it.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

from heron.runtime.interpreter import InterpreterDevice, races
from heron.runtime.interpreter.capture import compile_kernel_image
from heron.runtime.interpreter.errors import SanitizerError

sys.path.insert(0, str(Path(__file__).parent))
from kernels_for_tests import kernel_text, run  # noqa: E402

BUFFER = "memref<128xf32>"


def finding(text: str, inputs=(), outputs=(), **launch) -> SanitizerError:
    with pytest.raises(SanitizerError) as info:
        run(text, list(inputs), list(outputs), **launch)
    assert info.value.kind == "global-memory-race", str(info.value)
    return info.value


def _in_place(read_index: str, **kernel) -> str:
    """Thread ``i`` (of 2 blocks of 64) reads ``b[read_index]`` and writes ``b[i]``, in place:
    what a fusion whose output shares its operand's buffer does."""
    return kernel_text(
        f"%b: {BUFFER}",
        f"""
      %t = gpu.thread_id x
      %blk = gpu.block_id x
      %c64 = arith.constant 64 : index
      %c127 = arith.constant 127 : index
      %base = arith.muli %blk, %c64 : index
      %i = arith.addi %base, %t : index
      %mirror = arith.subi %c127, %i : index
      %v = memref.load %b[{read_index}] : {BUFFER}
      %one = arith.constant 1.0 : f32
      %w = arith.addf %v, %one : f32
      memref.store %w, %b[%i] : {BUFFER}""",
        grid=(2, 1, 1),
        **kernel,
    )


def test_an_in_place_reverse_races():
    """Thread 0 writes element 0, which thread (63, 0, 0) of block 1 read: on a GPU either
    may come first."""
    error = finding(_in_place("%mirror"), [np.zeros(128, np.float32)], grid=(2, 1, 1))
    message = str(error)
    assert "kernel 'k'" in message and "'memref.store'" in message, message
    assert "block (0, 0, 0) thread (0, 0, 0): writes element 0 of global memory" in message
    assert "read by block (1, 0, 0) thread (63, 0, 0)" in message, message
    assert "(128 threads in all)" in message, message


@pytest.mark.parametrize("kept_aside", [0, races.DEFERRED_ACCESSES])
def test_reads_kept_aside_or_recorded_race_alike(monkeypatch, kept_aside):
    """Reads of memory nothing has written yet are recorded only when a write comes: the
    race is the same whether they were kept aside or recorded at once."""
    monkeypatch.setattr(races, "DEFERRED_ACCESSES", kept_aside)
    error = finding(_in_place("%mirror"), [np.zeros(128, np.float32)], grid=(2, 1, 1))
    assert "writes element 0 of global memory" in str(error), str(error)
    assert "read by block (1, 0, 0) thread (63, 0, 0)" in str(error), str(error)


def test_an_in_place_elementwise_update_does_not_race():
    """One thread reads and writes each element: XLA's rule for sharing a buffer."""
    ran = run(_in_place("%i"), [np.arange(128, dtype=np.float32)], [], grid=(2, 1, 1))
    assert np.array_equal(ran.input(0, np.float32), np.arange(128, dtype=np.float32) + 1)


def test_the_race_is_found_across_batches_too():
    """Blocks in different batches (one block a batch): block 1 reads what block 0 wrote."""
    error = finding(_in_place("%mirror"), [np.zeros(128, np.float32)], grid=(2, 1, 1), max_lanes=64)
    assert "block (1, 0, 0) thread (0, 0, 0): reads element 63" in str(error), str(error)
    assert "'memref.load'" in str(error) and "written by block (0, 0, 0) thread (63, 0, 0)" in str(
        error
    )


def test_atomic_adds_of_many_threads_do_not_race():
    text = kernel_text(
        "%out: memref<4xf32>",
        """
      %t = gpu.thread_id x
      %c4 = arith.constant 4 : index
      %slot = arith.remui %t, %c4 : index
      %one = arith.constant 1.0 : f32
      %o = memref.atomic_rmw addf %one, %out[%slot] : (f32, memref<4xf32>) -> f32
      %again = memref.atomic_rmw addf %one, %out[%slot] : (f32, memref<4xf32>) -> f32""",
        grid=(3, 1, 1),
    )
    zeros = np.zeros(4, np.float32)
    ran = run(text, [zeros], [], grid=(3, 1, 1), max_lanes=64)
    assert ran.input(0, np.float32).tolist() == [96.0] * 4


def test_a_plain_store_over_other_threads_atomics_races():
    text = kernel_text(
        "%out: memref<1xi32>",
        """
      %t = gpu.thread_id x
      %c0 = arith.constant 0 : index
      %c1 = arith.constant 1 : i32
      %o = memref.atomic_rmw addi %c1, %out[%c0] : (i32, memref<1xi32>) -> i32
      %first = arith.cmpi eq, %t, %c0 : index
      scf.if %first {
        memref.store %c1, %out[%c0] : memref<1xi32>
      }""",
    )
    error = finding(text, [np.zeros(1, np.int32)])
    assert "updated atomically by other threads" in str(error), str(error)


def test_two_threads_storing_one_element_race():
    text = kernel_text(
        "%out: memref<32xf32>",
        """
      %t = gpu.thread_id x
      %c2 = arith.constant 2 : index
      %half = arith.divui %t, %c2 : index
      %one = arith.constant 1.0 : f32
      memref.store %one, %out[%half] : memref<32xf32>""",
    )
    error = finding(text, outputs=[128])
    assert "thread (0, 0, 0): writes element 0" in str(error), str(error)
    assert "thread (1, 0, 0) also writes in this operation" in str(error), str(error)


def _broadcast_from_thread_0(barrier: str, grid=(1, 1, 1)) -> str:
    """Thread 0 of each block writes out[block], then every thread of the block reads it."""
    return kernel_text(
        "%out: memref<2xf32>, %copy: memref<128xf32>",
        f"""
      %t = gpu.thread_id x
      %blk = gpu.block_id x
      %c0 = arith.constant 0 : index
      %c64 = arith.constant 64 : index
      %first = arith.cmpi eq, %t, %c0 : index
      %one = arith.constant 1.0 : f32
      scf.if %first {{
        memref.store %one, %out[%blk] : memref<2xf32>
      }}
      {barrier}
      %v = memref.load %out[%blk] : memref<2xf32>
      %base = arith.muli %blk, %c64 : index
      %i = arith.addi %base, %t : index
      memref.store %v, %copy[%i] : memref<128xf32>""",
        grid=grid,
    )


def test_a_barrier_orders_a_blocks_global_accesses():
    ran = run(_broadcast_from_thread_0("gpu.barrier", (2, 1, 1)), [], [8, 512], grid=(2, 1, 1))
    assert ran.output(1, np.float32).tolist() == [1.0] * 128


def test_without_the_barrier_the_broadcast_races():
    error = finding(_broadcast_from_thread_0(""), outputs=[8, 512])
    assert "thread (1, 0, 0): reads element 0" in str(error), str(error)
    assert "written by block (0, 0, 0) thread (0, 0, 0)" in str(error), str(error)


def test_a_barrier_does_not_order_two_blocks():
    """Block 1 reads element 0, which block 0's thread 0 writes; a barrier is no help."""
    text = kernel_text(
        "%out: memref<2xf32>",
        """
      %t = gpu.thread_id x
      %blk = gpu.block_id x
      %c0 = arith.constant 0 : index
      %first = arith.cmpi eq, %t, %c0 : index
      %zero = arith.cmpi eq, %blk, %c0 : index
      %writer = arith.andi %first, %zero : i1
      %one = arith.constant 1.0 : f32
      scf.if %writer {
        memref.store %one, %out[%c0] : memref<2xf32>
      }
      gpu.barrier
      %v = memref.load %out[%c0] : memref<2xf32>""",
        grid=(2, 1, 1),
    )
    error = finding(text, outputs=[8], grid=(2, 1, 1))
    assert "block (1, 0, 0) thread (0, 0, 0): reads element 0" in str(error), str(error)


def test_two_arguments_over_the_same_bytes_share_their_records():
    """An output bound to its operand's bytes through another view (the executor's slices):
    the race is on the bytes, whichever argument names them."""
    text = kernel_text(
        f"%a: {BUFFER}, %b: {BUFFER}",
        f"""
      %t = gpu.thread_id x
      %c127 = arith.constant 127 : index
      %mirror = arith.subi %c127, %t : index
      %v = memref.load %a[%mirror] : {BUFFER}
      memref.store %v, %b[%t] : {BUFFER}""",
        block=(128, 1, 1),
    )
    device = InterpreterDevice()
    kernel = device.load_kernel(compile_kernel_image(text))
    whole = device.upload(np.zeros(256, np.float32), "temp")
    operand, output = device.view(whole, 512, 512), device.view(whole, 512, 512)
    with pytest.raises(SanitizerError) as info:
        device.launch(kernel, (1, 1, 1), (128, 1, 1), [operand, output])
    message = str(info.value)
    assert info.value.kind == "global-memory-race"
    assert "writes element 0" in message and "read by block (0, 0, 0) thread (127, 0, 0)" in message
    # Separate bytes of the same allocation do not race.
    device.launch(kernel, (1, 1, 1), (128, 1, 1), [device.view(whole, 0, 512), operand])


def test_each_launch_starts_with_no_records():
    """A kernel that writes element i, then a kernel that reads element 127 - i: no race."""
    device = InterpreterDevice()
    writes = device.load_kernel(compile_kernel_image(_in_place("%i")))
    buffer = device.upload(np.zeros(128, np.float32))
    device.launch(writes, (2, 1, 1), (64, 1, 1), [buffer])
    device.launch(writes, (2, 1, 1), (64, 1, 1), [buffer])
    assert device.copy_from_device(buffer).view(np.float32).tolist() == [2.0] * 128


def test_a_uniform_read_of_an_element_another_thread_wrote_races():
    """Every thread reads element 5 (one uniform load) after thread 5 wrote it."""
    text = kernel_text(
        "%out: memref<64xf32>",
        """
      %t = gpu.thread_id x
      %c5 = arith.constant 5 : index
      %f = arith.index_cast %t : index to i32
      %v = arith.sitofp %f : i32 to f32
      memref.store %v, %out[%t] : memref<64xf32>
      %w = memref.load %out[%c5] : memref<64xf32>""",
    )
    error = finding(text, outputs=[256])
    assert "thread (0, 0, 0): reads element 5" in str(error), str(error)
    assert "written by block (0, 0, 0) thread (5, 0, 0)" in str(error), str(error)


def _read_then_thread_0_writes(barrier: str) -> str:
    """Every thread reads out[0]; then thread 0 writes it (a reduction's final store)."""
    return kernel_text(
        "%out: memref<1xf32>, %copy: memref<64xf32>",
        f"""
      %t = gpu.thread_id x
      %c0 = arith.constant 0 : index
      %v = memref.load %out[%c0] : memref<1xf32>
      memref.store %v, %copy[%t] : memref<64xf32>
      {barrier}
      %first = arith.cmpi eq, %t, %c0 : index
      scf.if %first {{
        %one = arith.constant 1.0 : f32
        memref.store %one, %out[%c0] : memref<1xf32>
      }}""",
    )


@pytest.mark.parametrize("kept_aside", [0, races.DEFERRED_ACCESSES])
def test_a_write_after_a_barrier_follows_the_blocks_reads(monkeypatch, kept_aside):
    monkeypatch.setattr(races, "DEFERRED_ACCESSES", kept_aside)
    ran = run(_read_then_thread_0_writes("gpu.barrier"), [np.zeros(1, np.float32)], [256])
    assert ran.input(0, np.float32).tolist() == [1.0]
    error = finding(_read_then_thread_0_writes(""), [np.zeros(1, np.float32)], [256])
    assert "thread (0, 0, 0): writes element 0" in str(error), str(error)
    assert "read by several threads of block (0, 0, 0)" in str(error), str(error)


def test_slices_of_one_allocation_far_apart_do_not_race():
    """A kernel reading one slice of the executor's temporary allocation and writing a
    slice far from it: the records of the reads (kept aside, then placed when the first
    write comes) and of the writes must not land on each other."""
    text = kernel_text(
        f"%a: {BUFFER}, %b: {BUFFER}",
        f"""
      %t = gpu.thread_id x
      %c127 = arith.constant 127 : index
      %mirror = arith.subi %c127, %t : index
      %v = memref.load %a[%mirror] : {BUFFER}
      memref.store %v, %b[%t] : {BUFFER}""",
        block=(128, 1, 1),
    )
    device = InterpreterDevice()
    kernel = device.load_kernel(compile_kernel_image(text))
    whole = device.upload(np.arange(4096, dtype=np.float32), "temp")
    operand, output = device.view(whole, 0, 512), device.view(whole, 8192, 512)
    device.launch(kernel, (1, 1, 1), (128, 1, 1), [operand, output])
    result = device.copy_from_device(whole).view(np.float32)[2048:2176]
    assert result.tolist() == list(range(127, -1, -1))
