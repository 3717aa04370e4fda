"""Host time per thunk and per program on the CUDA device, over the stand-in driver.

Issue 30 asks that a program run outside a graph cost at most 5 us of host
time per thunk, and one inside a graph one launch plus its result copies.
heron's CUDA device (:class:`heron.runtime.cuda.device.CudaDevice`) is run
here over the stand-in for ``cuda.bindings.driver`` that the tests use
(``heron_test_support.fake_cuda``): its calls do no device work, so what is
measured is heron's host work per thunk (the executor, the device's argument
packing and its calls into the bindings) plus the stand-in's own bookkeeping,
which is reported beside it (the same number of bare ``cuLaunchKernel`` calls
timed alone) so that heron's share can be read off.

A program is ``--kernels`` launches of a two-pointer kernel on views that
ping-pong between two halves of a temp allocation, between a parameter copy
and a result copy. Each configuration is run ``--runs`` times after a warm-up
(which records the graph); the figure is the median run's wall time divided
by the kernel thunks, and the driver calls one run makes. A second table
calls the program inside one graph as ``Executable.run`` does (numpy arrays in
and out, waiting for the device) and as heron.jax does
(:class:`~heron.runtime.core.resident.ResidentRunner`: the previous result
passed back in place, the result left on the device, nothing waited for).

Run: ``python benchmarks/launch_cost.py [--kernels N] [--runs N]``.
"""

from __future__ import annotations

import argparse
import ctypes
import statistics
import time
from typing import Any

import numpy as np
from heron_test_support.fake_cuda import FakeCuda

from heron.runtime.core.artefact import (
    Allocation,
    Artefact,
    EntrySignature,
    KernelEntry,
)
from heron.runtime.core.device import KernelImage
from heron.runtime.core.executor import Executable
from heron.runtime.core.resident import ResidentRunner
from heron.runtime.core.thunks import BufferSlice, CopyThunk, KernelThunk
from heron.runtime.cuda.device import CudaDevice
from heron.target import Target

PTX = """
.version 8.0
.target sm_90
.address_size 64
.visible .entry step(
    .param .u64 .ptr .align 16 step_param_0,
    .param .u64 .ptr .align 16 step_param_1
)
{ ret; }
"""
BYTES = 256


def program(kernels: int) -> Artefact:
    halves = [BufferSlice(2, 0, BYTES), BufferSlice(2, BYTES, BYTES)]
    thunks = [CopyThunk(BufferSlice(0, 0, BYTES), halves[0])]
    for k in range(kernels):
        thunks.append(
            KernelThunk("step", "step", [halves[k % 2], halves[(k + 1) % 2]], (1, 1, 1), (64, 1, 1))
        )
    thunks.append(CopyThunk(halves[kernels % 2], BufferSlice(1, 0, BYTES)))
    return Artefact(
        target=Target.preset("h100"),
        program=thunks,
        allocations=[
            Allocation(0, BYTES, "parameter", parameter=0),
            Allocation(1, BYTES, "output", output=0),
            Allocation(2, 2 * BYTES, "temp"),
        ],
        signature=EntrySignature(["f32[64]{0}"], ["f32[64]{0}"]),
        kernels=[KernelEntry("cuda", "step", KernelImage("ptx", "step", PTX.encode()))],
    )


def measure(
    kernels: int, runs: int, command_buffers: bool, null_launch: bool = False
) -> tuple[float, float]:
    """(median host seconds per kernel thunk, driver calls per run); ``null_launch``: the
    stand-in's ``cuLaunchKernel`` replaced by a call that only says success, so that what
    remains is heron's own host work."""
    driver = FakeCuda()
    if null_launch:
        success = (driver.CUresult.CUDA_SUCCESS,)
        driver.cuLaunchKernel = lambda *arguments: success
    device = CudaDevice(bindings=driver)
    executable = Executable(program(kernels), device, command_buffers=command_buffers)
    x = np.zeros(BYTES // 4, np.float32)
    executable.run([x])  # warm-up: loads, records and instantiates the graph
    times = []
    calls = 0
    for _ in range(runs):
        before = len(driver.calls)
        start = time.perf_counter()
        executable.run([x])
        times.append(time.perf_counter() - start)
        calls = len(driver.calls) - before
    return statistics.median(times) / kernels, calls


def measure_calls(kernels: int, runs: int, resident: bool) -> tuple[float, float]:
    """(median host seconds per program run, driver calls per run) of the program in one
    graph, called as ``Executable.run`` does (numpy in, numpy out, waiting) or as heron.jax
    does (:class:`ResidentRunner`: the last run's result passed back in place, the
    result left on the device, nothing waited for)."""
    driver = FakeCuda()
    device = CudaDevice(bindings=driver)
    executable = Executable(program(kernels), device, min_graph_size=1)
    x = np.zeros(BYTES // 4, np.float32)
    runner = ResidentRunner(executable)
    value: Any = x
    call = (lambda v: runner([v])[0]) if resident else (lambda v: executable.run([v])[0])
    value = call(call(value))  # warm-up: loads, records and instantiates; the pool fills
    times, calls = [], 0
    for _ in range(runs):
        before = len(driver.calls)
        start = time.perf_counter()
        value = call(value)
        times.append(time.perf_counter() - start)
        calls = len(driver.calls) - before
    return statistics.median(times), calls


def stand_in_launch_cost(count: int) -> float:
    """Seconds one bare ``cuLaunchKernel`` costs the stand-in itself."""
    driver = FakeCuda()
    device = CudaDevice(bindings=driver)
    kernel = device.load_kernel(KernelImage("ptx", "step", PTX.encode()))
    a, b = device.allocate(BYTES), device.allocate(BYTES)
    device.launch(kernel, (1,), (64,), [a, b])
    launch = driver.cuLaunchKernel
    function = kernel.handle.function
    storage = (ctypes.c_uint64 * 2)(int(a.handle), int(b.handle))
    base = ctypes.addressof(storage)
    pointers = (ctypes.c_void_p * 2)(base, base + 8)
    params = ctypes.addressof(pointers)
    start = time.perf_counter()
    for _ in range(count):
        launch(function, 1, 1, 1, 64, 1, 1, 0, 0, params, 0)
    return (time.perf_counter() - start) / count


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kernels", type=int, default=500)
    parser.add_argument("--runs", type=int, default=9)
    args = parser.parse_args()
    bare = stand_in_launch_cost(args.kernels * 4)
    print(
        f"{args.kernels} kernel thunks a program, median of {args.runs} runs; the stand-in's"
        f" own cuLaunchKernel: {bare * 1e6:.1f} us"
    )
    print("| command buffers | cuLaunchKernel | host time per kernel thunk | driver calls a run |")
    print("|---|---|---|---|")
    for command_buffers, null_launch in ((False, False), (False, True), (True, False)):
        seconds, calls = measure(args.kernels, args.runs, command_buffers, null_launch)
        launch = "a no-op" if null_launch else "the stand-in's"
        print(
            f"| {'yes' if command_buffers else 'no'} | {launch} | {seconds * 1e6:.1f} us |"
            f" {calls if not null_launch else '-'} |"
        )
    print()
    print("| a program in one graph, called | host time a call | driver calls a call |")
    print("|---|---|---|")
    for resident, how in ((False, "Executable.run (numpy in and out)"), (True, "ResidentRunner")):
        seconds, calls = measure_calls(args.kernels, args.runs, resident)
        print(f"| {how} | {seconds * 1e6:.1f} us | {calls} |")


if __name__ == "__main__":
    main()
