"""The engine core: the program form, capture, lanes, masks and structured control flow."""

from __future__ import annotations

import numpy as np
import pytest

from heron.runtime.core.device import DeviceError, KernelImage
from heron.runtime.interpreter import InterpreterDevice
from heron.runtime.interpreter.capture import capture_module, compile_kernel_image
from heron.runtime.interpreter.errors import InterpreterError, UnsupportedOperationError
from heron.runtime.interpreter.lanes import LaneSpace, batches
from heron.runtime.interpreter.program import Program


def kernel_text(args: str, body: str, block=(64, 1, 1), grid=(1, 1, 1)) -> str:
    """A lower-tensors-stage module with one kernel ``@k``."""
    b = ", ".join(map(str, block))
    g = ", ".join(map(str, grid))
    return f"""
module attributes {{gpu.container_module}} {{
  gpu.module @m {{
    gpu.func @k({args}) kernel attributes
        {{known_block_size = array<i32: {b}>, known_grid_size = array<i32: {g}>}} {{
{body}
      gpu.return
    }}
  }}
}}
"""


def run(text: str, inputs, output_bytes, grid=(1, 1, 1), block=(64, 1, 1), **device_options):
    device = InterpreterDevice(**device_options)
    kernel = device.load_kernel(compile_kernel_image(text))
    ins = [device.upload(np.ascontiguousarray(x)) for x in inputs]
    outs = [device.allocate(n) for n in output_bytes]
    device.launch(kernel, grid, block, [*ins, *outs])
    return [device.copy_from_device(b) for b in outs], device, outs


COPY = kernel_text(
    "%a: memref<64xf32>, %b: memref<64xf32>",
    """
      %t = gpu.thread_id x
      %v = memref.load %a[%t] : memref<64xf32>
      memref.store %v, %b[%t] : memref<64xf32>""",
)


def test_program_round_trips_through_json():
    program = capture_module(COPY)
    assert program.kernels == ["k"]
    again = Program.from_json(program.to_json())
    assert again == program
    function = again.functions["k"]
    assert function.known_block_size == (64, 1, 1)
    assert function.argument_types == ("memref<64xf32>", "memref<64xf32>")
    names = [op.name for _, op in again.walk()]
    assert names == ["gpu.thread_id", "memref.load", "memref.store", "gpu.return"]


def test_types_and_attributes_repeated_across_ops_are_captured_alike() -> None:
    # capture prints each distinct type and scalar attribute once per module and reads
    # it back for every op (sax's lattice: 284,000 ops in 68 kernels): what each op holds
    # must be what printing it there gives
    text = kernel_text(
        "%a: memref<64xf32>, %b: memref<64xf32>",
        """
      %t = gpu.thread_id x
      %c = arith.constant 2 : index
      %d = arith.constant 2 : index
      %h = arith.constant 0.5 : f32
      %v = memref.load %a[%t] : memref<64xf32>
      %w = arith.mulf %v, %h : f32
      %x = arith.addf %w, %h : f32
      %u = arith.divui %t, %c : index
      %s = arith.addi %u, %d : index
      memref.store %x, %b[%s] : memref<64xf32>""",
    )
    program = capture_module(text)
    ops = {op.name + str(k): op for k, (_, op) in enumerate(program.walk())}
    constants = [op for _, op in program.walk() if op.name == "arith.constant"]
    assert [c.attributes["value"] for c in constants] == [2, 2, 0.5]
    assert [c.result_types for c in constants] == [("index",), ("index",), ("f32",)]
    (mulf,) = [op for op in ops.values() if op.name == "arith.mulf"]
    (addf,) = [op for op in ops.values() if op.name == "arith.addf"]
    assert mulf.operand_types == addf.operand_types == ("f32", "f32")
    (store,) = [op for op in ops.values() if op.name == "memref.store"]
    assert store.operand_types == ("f32", "memref<64xf32>", "index")
    assert program.functions["k"].known_block_size == (64, 1, 1)
    assert Program.from_json(program.to_json()) == program


def test_program_json_refuses_other_formats():
    with pytest.raises(ValueError, match="not a heron interpreter program"):
        Program.from_json(b'{"format": "ptx", "version": 1}')


def test_copy_kernel_runs_and_counts_accesses():
    x = np.arange(64, dtype=np.float32) * 1.5
    (out,), device, (buffer,) = run(COPY, [x], [256])
    assert np.array_equal(out.view(np.float32), x)
    counts = device.access_counts(buffer)
    assert counts.writes.min() == counts.writes.max() == 1
    assert counts.reads.max() == 0


def test_lanes_number_threads_x_fastest_and_blocks_in_batches():
    lanes = LaneSpace((3, 2, 1), (4, 2, 1), first_block=2, block_count=3)
    assert lanes.size == 24
    assert list(lanes.thread_id(0)[:8]) == [0, 1, 2, 3, 0, 1, 2, 3]
    assert list(lanes.thread_id(1)[:8]) == [0, 0, 0, 0, 1, 1, 1, 1]
    assert list(lanes.block_id(0)[::8]) == [2, 0, 1]
    assert list(lanes.block_id(1)[::8]) == [0, 1, 1]
    assert lanes.describe(9) == "block (0, 1, 0) thread (1, 0, 0)"
    spaces = list(batches((10, 1, 1), (128, 1, 1), max_lanes=300))
    assert [s.block_count for s in spaces] == [2, 2, 2, 2, 2]
    assert sum(s.size for s in spaces) == 1280


def test_unknown_operation_is_refused_before_running_with_its_name():
    text = COPY.replace(
        "memref.store %v, %b[%t] : memref<64xf32>",
        '"test.mystery"(%v) : (f32) -> ()\n      memref.store %v, %b[%t] : memref<64xf32>',
    )
    from mlir import ir

    with ir.Context() as context:
        context.allow_unregistered_dialects = True
        module = ir.Module.parse(text)
        image = compile_kernel_image(module)
    with pytest.raises(UnsupportedOperationError, match=r"'test\.mystery'.*op #2"):
        InterpreterDevice().load_kernel(image)


def test_launch_must_match_the_compiled_sizes_and_arguments():
    device = InterpreterDevice()
    kernel = device.load_kernel(compile_kernel_image(COPY))
    a, b = device.allocate(256), device.allocate(256)
    with pytest.raises(InterpreterError, match=r"compiled for a block of \(64, 1, 1\)"):
        device.launch(kernel, (1,), (32,), [a, b])
    with pytest.raises(DeviceError, match="takes 2 buffers, given 1"):
        device.launch(kernel, (1,), (64,), [a])
    with pytest.raises(DeviceError, match="runs 'heron-interpreter' images, not 'ptx'"):
        device.load_kernel(KernelImage("ptx", "k", b""))


def test_buffers_belong_to_their_device_and_start_poisoned():
    first, second = InterpreterDevice(), InterpreterDevice()
    buffer = first.allocate(8)
    assert list(first.copy_from_device(buffer)) == [0xA5] * 8
    with pytest.raises(DeviceError, match="another device"):
        second.copy_from_device(buffer)
    with pytest.raises(DeviceError, match="copying 9 bytes"):
        first.copy_to_device(buffer, bytes(9))


DIVERGENT = kernel_text(
    "%out: memref<64xi32>",
    """
      %t = gpu.thread_id x
      %c0 = arith.constant 0 : index
      %c1 = arith.constant 1 : index
      %c3 = arith.constant 3 : index
      %c10 = arith.constant 10 : index
      %t32 = arith.index_cast %t : index to i32
      %r = arith.remui %t, %c3 : index
      %odd = arith.cmpi eq, %r, %c1 : index
      %x = scf.if %odd -> (i32) {
        %m = arith.muli %t32, %t32 : i32
        scf.yield %m : i32
      } else {
        %n = arith.subi %t32, %t32 : i32
        scf.yield %n : i32
      }
      %ub = arith.remui %t, %c10 : index
      %one = arith.constant 1 : i32
      %sum = scf.for %i = %c0 to %ub step %c1 iter_args(%acc = %x) -> (i32) {
        %next = arith.addi %acc, %one : i32
        scf.yield %next : i32
      }
      memref.store %sum, %out[%t] : memref<64xi32>""",
)


def test_divergent_if_and_loops_with_per_lane_trip_counts():
    (out,), _, _ = run(DIVERGENT, [], [256])
    t = np.arange(64)
    expected = np.where(t % 3 == 1, t * t, 0) + t % 10
    assert np.array_equal(out.view(np.int32), expected)


WHILE = kernel_text(
    "%out: memref<64xi32>",
    """
      %t = gpu.thread_id x
      %t32 = arith.index_cast %t : index to i32
      %c0 = arith.constant 0 : i32
      %c1 = arith.constant 1 : i32
      %steps:2 = scf.while (%n = %t32, %k = %c0) : (i32, i32) -> (i32, i32) {
        %more = arith.cmpi sgt, %n, %c1 : i32
        scf.condition(%more) %n, %k : i32, i32
      } do {
      ^bb0(%n: i32, %k: i32):
        %half = arith.shrui %n, %c1 : i32
        %k1 = arith.addi %k, %c1 : i32
        scf.yield %half, %k1 : i32, i32
      }
      memref.store %steps#1, %out[%t] : memref<64xi32>""",
)


def test_divergent_while_loop_exits_each_lane_with_its_values():
    (out,), _, _ = run(WHILE, [], [256])
    expected = [0 if n <= 1 else int(np.floor(np.log2(n))) for n in range(64)]
    assert list(out.view(np.int32)) == expected


CALL = """
module attributes {gpu.container_module} {
  gpu.module @m {
    func.func private @twice(%x: f32) -> f32 {
      %y = arith.addf %x, %x : f32
      return %y : f32
    }
    gpu.func @k(%a: memref<64xf32>, %b: memref<64xf32>) kernel attributes
        {known_block_size = array<i32: 64, 1, 1>, known_grid_size = array<i32: 1, 1, 1>} {
      %t = gpu.thread_id x
      %v = memref.load %a[%t] : memref<64xf32>
      %w = func.call @twice(%v) : (f32) -> f32
      memref.store %w, %b[%t] : memref<64xf32>
      gpu.return
    }
  }
}
"""


def test_calls_run_the_callee_over_the_lanes():
    x = np.linspace(-3, 3, 64, dtype=np.float32)
    (out,), _, _ = run(CALL, [x], [256])
    assert np.array_equal(out.view(np.float32), x + x)


def test_a_grid_runs_in_several_batches_with_the_same_result():
    text = kernel_text(
        "%out: memref<1000xi32>",
        """
      %t = gpu.thread_id x
      %b = gpu.block_id x
      %c10 = arith.constant 10 : index
      %base = arith.muli %b, %c10 : index
      %i = arith.addi %base, %t : index
      %v = arith.index_cast %i : index to i32
      memref.store %v, %out[%i] : memref<1000xi32>""",
        block=(10, 1, 1),
        grid=(100, 1, 1),
    )
    for max_lanes in (1 << 18, 30, 1):
        (out,), _, _ = run(text, [], [4000], grid=(100,), block=(10,), max_lanes=max_lanes)
        assert np.array_equal(out.view(np.int32), np.arange(1000))


SHARED_CALLS = """
module attributes {gpu.container_module} {
  gpu.module @m {
    func.func private @first(%a: memref<64xf32>) -> f32 {
      %c0 = arith.constant 0 : index
      %v = memref.load %a[%c0] : memref<64xf32>
      return %v : f32
    }
    gpu.func @k(%a: memref<64xf32>, %b: memref<64xf32>) kernel attributes
        {known_block_size = array<i32: 1, 1, 1>, known_grid_size = array<i32: 1, 1, 1>} {
      %c0 = arith.constant 0 : index
      %c1 = arith.constant 1 : index
      %c2 = arith.constant 2 : index
      %x = func.call @first(%a) : (memref<64xf32>) -> f32
      %y = func.call @first(%a) : (memref<64xf32>) -> f32
      %s = arith.addf %x, %y : f32
      memref.store %s, %a[%c0] : memref<64xf32>
      %z = func.call @first(%a) : (memref<64xf32>) -> f32
      memref.store %x, %b[%c0] : memref<64xf32>
      memref.store %y, %b[%c1] : memref<64xf32>
      memref.store %z, %b[%c2] : memref<64xf32>
      gpu.return
    }
  }
}
"""


def test_pure_calls_are_shared_until_memory_changes():
    x = np.full(64, 1.5, np.float32)
    device = InterpreterDevice()
    kernel = device.load_kernel(compile_kernel_image(SHARED_CALLS))
    a, b = device.upload(x), device.allocate(256)
    device.launch(kernel, (1,), (1,), [a, b])
    out = device.copy_from_device(b).view(np.float32)
    assert list(out[:3]) == [1.5, 1.5, 3.0]
    # The second call was shared, the third (after the store) was not: two reads in all.
    assert device.access_counts(a).reads[:4].tolist() == [2, 2, 2, 2]


LOOP = kernel_text(
    "%a: memref<64xf32>, %b: memref<64xf32>",
    """
      %t = gpu.thread_id x
      %c0 = arith.constant 0 : index
      %c1 = arith.constant 1 : index
      %n = arith.constant 1000 : index
      %init = memref.load %a[%t] : memref<64xf32>
      %sum = scf.for %i = %c0 to %n step %c1 iter_args(%acc = %init) -> (f32) {
        %next = arith.addf %acc, %init : f32
        scf.yield %next : f32
      }
      memref.store %sum, %b[%t] : memref<64xf32>""",
)


def test_a_launch_past_the_work_limit_stops_with_a_refusal_naming_the_limit():
    from heron.runtime.core.device import DeviceLimitError
    from heron.runtime.interpreter.engine import OPERATION_OVERHEAD_LANES
    from heron.runtime.interpreter.errors import WorkLimitError

    x = np.ones(64, np.float32)
    (out,), _, _ = run(LOOP, [x], [256], work_limit=10**9)
    assert np.array_equal(out.view(np.float32), np.full(64, 1001, np.float32))
    # 1000 iterations of a two-operation body over 64 lanes: over 128,000 lane-operations.
    per_iteration = 2 * (64 + OPERATION_OVERHEAD_LANES)
    with pytest.raises(WorkLimitError, match=r"kernel 'k': stopped after .* work limit of 100,000"):
        run(LOOP, [x], [256], work_limit=100_000)
    assert issubclass(WorkLimitError, DeviceLimitError)
    # Deterministic: it stops at the same count every time, just past the limit.
    with pytest.raises(WorkLimitError) as first:
        run(LOOP, [x], [256], work_limit=100_000)
    done = int(str(first.value).split("after ")[1].split(" ")[0].replace(",", ""))
    assert 100_000 < done <= 100_000 + per_iteration + 10 * (64 + OPERATION_OVERHEAD_LANES)


def test_the_work_limit_comes_from_the_environment(monkeypatch):
    monkeypatch.setenv("HERON_INTERPRETER_MAX_WORK", "2e5")
    assert InterpreterDevice().work_limit == 200_000
    monkeypatch.setenv("HERON_INTERPRETER_MAX_WORK", "lots")
    with pytest.raises(DeviceError, match="HERON_INTERPRETER_MAX_WORK='lots'"):
        InterpreterDevice()
    monkeypatch.delenv("HERON_INTERPRETER_MAX_WORK")
    assert InterpreterDevice().work_limit is None


SCALE = kernel_text(
    "%a: memref<64xf32>, %b: memref<64xf32>",
    """
      %t = gpu.thread_id x
      %c = arith.constant 2.5 : f32
      %v = memref.load %a[%t] : memref<64xf32>
      %w = arith.mulf %v, %c : f32
      memref.store %w, %b[%t] : memref<64xf32>""",
)


def test_constants_are_decoded_once_per_program_not_per_launch(monkeypatch):
    from heron.runtime.interpreter.semantics import arith

    decoded = []
    real = arith.constant_value
    monkeypatch.setattr(
        arith, "constant_value", lambda *a: decoded.append(a) or real(*a), raising=True
    )
    device = InterpreterDevice()
    kernel = device.load_kernel(compile_kernel_image(SCALE))
    x = np.arange(64, dtype=np.float32)
    a, b = device.upload(x), device.allocate(256)
    for _ in range(3):
        device.launch(kernel, (1, 1, 1), (64, 1, 1), [a, b])
    assert np.array_equal(device.copy_from_device(b).view(np.float32), x * 2.5)
    assert len(decoded) == 1


def test_a_program_is_checked_for_support_once(monkeypatch):
    from heron.runtime.interpreter import engine

    program = capture_module(SCALE)
    walks = []
    real_walk = type(program).walk
    monkeypatch.setattr(type(program), "walk", lambda self: walks.append(1) or real_walk(self))
    engine.check_supported(program)
    engine.check_supported(program)
    assert len(walks) == 1


def test_an_operation_is_prepared_at_most_once():
    from heron.runtime.interpreter import engine

    with pytest.raises(ValueError, match="prepared twice"):
        engine.prepares("arith.constant")(lambda op: None)
