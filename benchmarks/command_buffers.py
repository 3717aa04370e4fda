"""Host time per thunk on the interpreter, with and without command buffers.

A program of ``--kernels`` small kernels (one compiled fusion, ``x + 1`` over
f32[64], launched on views that ping-pong between two halves of a temp
allocation) is run through the thunk executor
(:class:`heron.runtime.core.executor.Executable`) on the interpreter device,
``--runs`` times each way after one warm-up run (which records the command
buffer): without command buffers every kernel thunk is launched from the host;
with them, the whole run is one recorded command buffer, replayed. The figure
is the median wall time of a run divided by the kernel thunks, per-thunk
timing off (a timer synchronises around each thunk) and on.

The interpreter runs every command synchronously, so what a command buffer
saves here is the executor's per-thunk host work (views, records, timers),
not a GPU's launch latency; the kernels' own simulation dominates. A second
program of as many 4-byte memsets (the cheapest command there is) shows that
per-thunk host work alone.

Run: ``python benchmarks/command_buffers.py [--kernels N] [--runs N]``.
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np
from benchlib.progress import tracked

from heron.compiler import Target, compile_fusion, fusions_of
from heron.hlo.parser import parse_module
from heron.runtime.core.artefact import (
    Allocation,
    Artefact,
    EntrySignature,
    KernelEntry,
)
from heron.runtime.core.executor import Executable
from heron.runtime.core.thunks import BufferSlice, CopyThunk, KernelThunk, MemsetThunk
from heron.runtime.interpreter import InterpreterDevice

MODULE = """
HloModule increment
ENTRY main {
  p = f32[64]{0} parameter(0)
  one = f32[] constant(1)
  ones = f32[64]{0} broadcast(one), dimensions={}
  ROOT r = f32[64]{0} add(p, ones)
}
"""
BYTES = 64 * 4


def program(kernels: int) -> Artefact:
    (fusion,) = fusions_of(parse_module(MODULE))
    compiled = compile_fusion(fusion, Target.preset("h100"), "interpreter")
    halves = [BufferSlice(2, 0, BYTES), BufferSlice(2, BYTES, BYTES)]
    thunks = [CopyThunk(BufferSlice(0, 0, BYTES), halves[0])]
    for k in range(kernels):
        thunks.append(
            KernelThunk(
                compiled.image.kernel_name,
                "increment",
                [halves[k % 2], halves[(k + 1) % 2]],
                compiled.grid,
                compiled.block,
            )
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
        kernels=[KernelEntry("interpreter", "increment", compiled.image)],
    )


def memsets(count: int) -> Artefact:
    thunks = [MemsetThunk(BufferSlice(1, 4 * (k % 16), 4), k, 4) for k in range(count)]
    thunks.insert(0, CopyThunk(BufferSlice(0, 0, BYTES), BufferSlice(1, 0, BYTES)))
    return Artefact(
        target=Target.preset("h100"),
        program=thunks,
        allocations=[
            Allocation(0, BYTES, "parameter", parameter=0),
            Allocation(1, BYTES, "output", output=0),
        ],
        signature=EntrySignature(["f32[64]{0}"], ["f32[64]{0}"]),
        kernels=[],
    )


def measure(artefact: Artefact, count: int, runs: int, command_buffers: bool, timing: bool):
    executable = Executable(
        artefact, InterpreterDevice(), command_buffers=command_buffers, timing=timing
    )
    x = np.zeros(64, np.float32)
    executable.run([x])  # warm-up: records the command buffer
    times = []
    for _ in tracked(range(runs), "runs"):
        start = time.perf_counter()
        executable.run([x])
        times.append(time.perf_counter() - start)
    return statistics.median(times) / count


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kernels", type=int, default=200)
    parser.add_argument("--runs", type=int, default=7)
    args = parser.parse_args()
    programs = {
        "kernel (x + 1, f32[64])": program(args.kernels),
        "memset (4 B)": memsets(args.kernels),
    }
    print(f"{args.kernels} thunks a program, median of {args.runs} runs")
    print("| thunks | command buffers | per-thunk timing | host time per thunk |")
    print("|---|---|---|---|")
    for label, artefact in programs.items():
        for command_buffers in (False, True):
            for timing in (False, True):
                seconds = measure(artefact, args.kernels, args.runs, command_buffers, timing)
                print(
                    f"| {label} | {'yes' if command_buffers else 'no'} |"
                    f" {'on' if timing else 'off'} | {seconds * 1e6:.1f} us |"
                )


if __name__ == "__main__":
    main()
