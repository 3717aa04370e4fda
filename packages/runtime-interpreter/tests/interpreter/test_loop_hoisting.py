"""How a launch runs fast without changing a bit: block plans and uniform loops computed ahead.

A uniform loop (bounds the same in every lane) computes the operations that
depend only on its induction variable and on uniform values from outside
ahead, for chunks of iterations at once (``semantics.control``). These tests
run the same kernels with and without that (and with chunks that split the
loop) and require the same outputs, the same access counts and the values a
plain Python model gives; and they check that a frame keeps only live values.
"""

from __future__ import annotations

import numpy as np
import pytest

from heron.runtime.interpreter import InterpreterDevice, engine
from heron.runtime.interpreter.capture import capture_module, compile_kernel_image
from heron.runtime.interpreter.engine import block_plan
from heron.runtime.interpreter.semantics import control

TRIPS = 100

#: 4 threads; a uniform loop whose body mixes induction-variable arithmetic (masks,
#: comparisons, selects, shifts, a float conversion), a uniform value from outside, a
#: per-lane value from outside (thread id: not computed ahead), a branch on a computed
#: condition, a load at a computed index, a carried sum and a store per iteration.
UNIFORM_LOOP = """
module attributes {gpu.container_module} {
  gpu.module @m {
    gpu.func @k(%a: memref<100xf32>, %out: memref<4x100xi32>, %sums: memref<4xf32>) kernel
        attributes {known_block_size = array<i32: 4, 1, 1>,
                    known_grid_size = array<i32: 1, 1, 1>} {
      %t = gpu.thread_id x
      %t32 = arith.index_cast %t : index to i32
      %c0 = arith.constant 0 : index
      %c1 = arith.constant 1 : index
      %n = arith.constant 100 : index
      %k3 = arith.constant 3 : i32
      %u = arith.addi %k3, %k3 : i32
      %zero = arith.constant 0.0 : f32
      %sum = scf.for %i = %c0 to %n step %c1 iter_args(%acc = %zero) -> (f32) {
        %i32 = arith.index_castui %i : index to i32
        %c1_i32 = arith.constant 1 : i32
        %low = arith.andi %i32, %k3 : i32
        %odd = arith.cmpi eq, %low, %c1_i32 : i32
        %half = arith.shrui %i32, %c1_i32 : i32
        %scaled = arith.muli %half, %u : i32
        %picked = arith.select %odd, %scaled, %low : i32
        %mine = arith.addi %picked, %t32 : i32
        %f = arith.sitofp %i32 : i32 to f32
        %x = memref.load %a[%i] : memref<100xf32>
        %y = arith.mulf %x, %f : f32
        %next = scf.if %odd -> (f32) {
          %s = arith.addf %acc, %y : f32
          scf.yield %s : f32
        } else {
          scf.yield %acc : f32
        }
        memref.store %mine, %out[%t, %i] : memref<4x100xi32>
        scf.yield %next : f32
      }
      memref.store %sum, %sums[%t] : memref<4xf32>
      gpu.return
    }
  }
}
"""


def _launch(inputs):
    device = InterpreterDevice()
    kernel = device.load_kernel(compile_kernel_image(UNIFORM_LOOP))
    a = device.upload(inputs)
    out, sums = device.allocate(4 * 4 * TRIPS), device.allocate(16)
    device.launch(kernel, (1,), (4,), [a, out, sums])
    counts = [device.access_counts(b) for b in (a, out, sums)]
    return (
        device.copy_from_device(out).view(np.int32).reshape(4, TRIPS),
        device.copy_from_device(sums).view(np.float32),
        [(c.reads.tolist(), c.writes.tolist()) for c in counts],
    )


def _model(inputs: np.ndarray):
    out = np.zeros((4, TRIPS), np.int32)
    sums = np.zeros(4, np.float32)
    for t in range(4):
        acc = np.float32(0)
        for i in range(TRIPS):
            low = i & 3
            picked = (i >> 1) * 6 if low == 1 else low
            out[t, i] = picked + t
            if low == 1:
                acc = np.float32(acc + np.float32(inputs[i] * np.float32(i)))
        sums[t] = acc
    return out, sums


def _counting_andi(monkeypatch) -> list[int]:
    """Count the runs of ``arith.andi`` (plans take handlers when a program is loaded)."""
    engine.load_semantics()
    runs = [0]
    original = engine.SEMANTICS["arith.andi"]

    def counted(frame, op):
        runs[0] += 1
        original(frame, op)

    monkeypatch.setitem(engine.SEMANTICS, "arith.andi", counted)
    return runs


@pytest.mark.parametrize("chunk", [control.HOIST_CHUNK, 7])
def test_a_uniform_loop_computed_ahead_gives_the_same_bits_and_counts(monkeypatch, chunk):
    inputs = np.linspace(-2.0, 3.0, TRIPS, dtype=np.float32)
    runs = _counting_andi(monkeypatch)
    monkeypatch.setattr(control, "HOIST_MIN_TRIPS", 10**9)
    plain = _launch(inputs)
    assert runs[0] == TRIPS
    monkeypatch.setattr(control, "HOIST_MIN_TRIPS", 16)
    monkeypatch.setattr(control, "HOIST_CHUNK", chunk)
    ahead = _launch(inputs)
    assert runs[0] == TRIPS + -(-TRIPS // chunk)  # once per chunk of iterations
    assert np.array_equal(plain[0], ahead[0])
    assert plain[1].tobytes() == ahead[1].tobytes()
    assert plain[2] == ahead[2]
    out, sums = _model(inputs)
    assert np.array_equal(ahead[0], out)
    assert ahead[1].tobytes() == sums.tobytes()
    # Each lane read every input once, and wrote its row of the output once.
    assert ahead[2][0][0] == [4] * (4 * TRIPS)
    assert ahead[2][1][1] == [1] * (4 * 4 * TRIPS)


def test_only_operations_of_the_induction_variable_and_uniform_values_are_computed_ahead():
    program = capture_module(UNIFORM_LOOP)
    kernel = program.functions["k"]
    (loop,) = [op for op in kernel.body.entry.ops if op.name == "scf.for"]
    body = loop.regions[0].entry
    plan = block_plan(program, body)
    candidates = control._hoist_candidates(body, plan)
    names = [plan.steps[index][1].name for index, _ in candidates]
    # Not the load (memory), the mulf (of a loaded value), the scf.if (a region), the
    # store; the addi of the thread id is a candidate, left out at run time (per lane).
    assert names == [
        "arith.index_castui",
        "arith.constant",
        "arith.andi",
        "arith.cmpi",
        "arith.shrui",
        "arith.muli",
        "arith.select",
        "arith.addi",
        "arith.sitofp",
    ]
    assert [depends for _, depends in candidates] == [True, False, *[True] * 7]


def test_a_frame_drops_each_value_after_its_last_use():
    program = capture_module(UNIFORM_LOOP)
    kernel = program.functions["k"]
    plan = block_plan(program, kernel.body.entry)
    dropped = [value for _, _, dead in plan.steps for value in dead]
    assert len(dropped) == len(set(dropped))
    ops = [op for _, op, _ in plan.steps]
    # %u is read by the loop (inside its body): it dies with the loop, not before.
    (u_op,) = [op for op in ops if op.name == "arith.addi"]
    (loop_index,) = [k for k, op in enumerate(ops) if op.name == "scf.for"]
    assert u_op.results[0] in plan.steps[loop_index][2]
    assert all(u_op.results[0] not in dead for _, _, dead in plan.steps[:loop_index])
