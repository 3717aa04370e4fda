"""Sampled launches (the first and last blocks of a large grid) and buffers without access
counters: what ``tests/fuzz/large_indices.py`` runs kernels over 2^31 elements with."""

from __future__ import annotations

import numpy as np
import pytest

from heron.hlo.memory_budget import MemoryBudgetError
from heron.runtime.core.device import DeviceError
from heron.runtime.interpreter import InterpreterDevice
from heron.runtime.interpreter.capture import capture_module, compile_kernel_image
from heron.runtime.interpreter.device import POISON
from heron.runtime.interpreter.engine import run_kernel, sampled_blocks
from heron.runtime.interpreter.errors import InterpreterError
from heron.runtime.interpreter.memory import Memory, MemRef
from heron.runtime.interpreter.types import parse_type

from .test_engine import kernel_text

BLOCKS, THREADS = 10, 32
ELEMENTS = BLOCKS * THREADS

#: out[i] = in[i] + 1 over a grid of ten blocks.
INCREMENT = kernel_text(
    f"%a: memref<{ELEMENTS}xi32>, %b: memref<{ELEMENTS}xi32>",
    f"""
      %t = gpu.thread_id x
      %g = gpu.block_id x
      %n = arith.constant {THREADS} : index
      %base = arith.muli %g, %n : index
      %i = arith.addi %base, %t : index
      %v = memref.load %a[%i] : memref<{ELEMENTS}xi32>
      %one = arith.constant 1 : i32
      %w = arith.addi %v, %one : i32
      memref.store %w, %b[%i] : memref<{ELEMENTS}xi32>""",
    block=(THREADS, 1, 1),
    grid=(BLOCKS, 1, 1),
)


def _increment(device: InterpreterDevice) -> tuple[np.ndarray, InterpreterDevice, object]:
    kernel = device.load_kernel(compile_kernel_image(INCREMENT))
    source = device.upload(np.arange(ELEMENTS, dtype=np.int32))
    out = device.allocate(ELEMENTS * 4)
    device.launch(kernel, (BLOCKS, 1, 1), (THREADS, 1, 1), [source, out])
    return device.copy_from_device(out).view(np.int32), device, out


def test_sampled_blocks_are_the_first_and_last_of_a_large_grid():
    assert sampled_blocks((10, 1, 1), 2) == (0, 1, 8, 9)
    assert sampled_blocks((4, 3, 1), 1) == (0, 11)  # linear ids over the whole grid
    assert sampled_blocks((4, 1, 1), 2) is None  # no more than twice the sample: all of it
    assert sampled_blocks((10, 1, 1), None) is None


def test_a_sampled_launch_runs_only_its_first_and_last_blocks():
    out, _, _ = _increment(InterpreterDevice(sampled_blocks=2))
    ran = np.r_[0 : 2 * THREADS, ELEMENTS - 2 * THREADS : ELEMENTS]
    assert np.array_equal(out[ran], ran + 1)
    skipped = np.setdiff1d(np.arange(ELEMENTS), ran)
    assert np.all(out[skipped].view(np.uint8).reshape(-1, 4) == POISON)


def test_a_grid_no_larger_than_twice_the_sample_runs_whole():
    out, _, _ = _increment(InterpreterDevice(sampled_blocks=5))
    assert np.array_equal(out, np.arange(ELEMENTS) + 1)


def test_run_kernel_refuses_a_block_outside_the_grid():
    program = capture_module(INCREMENT)
    buffers = [
        MemRef(Memory(name, "global", np.zeros((1, ELEMENTS * 4), np.uint8)), parse_type(t))
        for name, t in zip("ab", program.functions["k"].argument_types, strict=True)
    ]
    with pytest.raises(InterpreterError, match="block 10 is outside its grid of 10 blocks"):
        run_kernel(program, "k", (BLOCKS, 1, 1), (THREADS, 1, 1), buffers, blocks=[0, 10])


def test_sampled_blocks_must_be_positive():
    with pytest.raises(DeviceError, match="sampled_blocks must be at least 1"):
        InterpreterDevice(sampled_blocks=0)


def test_buffers_without_counters_run_the_same_and_count_nothing():
    out, device, buffer = _increment(InterpreterDevice(count_accesses=False))
    assert np.array_equal(out, np.arange(ELEMENTS) + 1)
    counts = device.access_counts(buffer)
    assert counts.reads is None and counts.writes is None


def test_buffers_without_counters_take_one_host_byte_per_byte(monkeypatch):
    monkeypatch.setenv("HERON_MEMORY_BUDGET", "1000")
    InterpreterDevice(count_accesses=False).allocate(900)  # 900 bytes: within the budget
    with pytest.raises(MemoryBudgetError, match="of 900 bytes \\(with its access counters\\)"):
        InterpreterDevice().allocate(900)  # 9 host bytes a byte with the counters
