"""The thunk executor on the interpreter device, over artefacts built by hand.

The kernels are hand-written MLIR captured for the interpreter; the thunk
programs, allocation tables and signatures are written out here, as the
compiler's thunk emission would make them. Each result is checked against
numpy, and the executor's counts (kernel launches, command buffers recorded,
replayed, updated, peak memory) against what the program must do.
"""

from __future__ import annotations

import functools
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from heron.hlo.npz_io import load_outputs, save_inputs
from heron.runtime.core import executor as executor_module
from heron.runtime.core.artefact import (
    Allocation,
    Artefact,
    EntrySignature,
    KernelEntry,
)
from heron.runtime.core.executor import Executable, ExecutorError
from heron.runtime.core.heron_run import main as heron_run
from heron.runtime.core.thunks import (
    BufferSlice,
    CommandBufferThunk,
    ConditionalThunk,
    CopyThunk,
    KernelThunk,
    LibraryCallThunk,
    MemsetThunk,
    SequentialThunk,
    WhileThunk,
    walk,
)
from heron.runtime.interpreter import InterpreterDevice
from heron.runtime.interpreter.capture import compile_kernel_image
from heron.target import Target

sys.path.insert(0, str(Path(__file__).parent))
from kernels_for_tests import kernel_text  # noqa: E402

S = BufferSlice
TARGET = Target.preset("h100")

KERNELS = {
    # out[i] = a[i] + b[i], four i32
    "add": kernel_text(
        "%a: memref<4xi32>, %b: memref<4xi32>, %out: memref<4xi32>",
        """
          %i = gpu.thread_id x
          %x = memref.load %a[%i] : memref<4xi32>
          %y = memref.load %b[%i] : memref<4xi32>
          %r = arith.addi %x, %y : i32
          memref.store %r, %out[%i] : memref<4xi32>
        """,
        block=(4, 1, 1),
    ),
    # out[i] = a[i] + 1, four i32
    "add_one": kernel_text(
        "%a: memref<4xi32>, %out: memref<4xi32>",
        """
          %i = gpu.thread_id x
          %x = memref.load %a[%i] : memref<4xi32>
          %c1 = arith.constant 1 : i32
          %r = arith.addi %x, %c1 : i32
          memref.store %r, %out[%i] : memref<4xi32>
        """,
        block=(4, 1, 1),
    ),
    # out = a * 2, one i32
    "double": kernel_text(
        "%a: memref<1xi32>, %out: memref<1xi32>",
        """
          %c0 = arith.constant 0 : index
          %x = memref.load %a[%c0] : memref<1xi32>
          %r = arith.addi %x, %x : i32
          memref.store %r, %out[%c0] : memref<1xi32>
        """,
        block=(1, 1, 1),
    ),
    # pred = a < b, one i32 each
    "less": kernel_text(
        "%a: memref<1xi32>, %b: memref<1xi32>, %pred: memref<1xi8>",
        """
          %c0 = arith.constant 0 : index
          %x = memref.load %a[%c0] : memref<1xi32>
          %y = memref.load %b[%c0] : memref<1xi32>
          %lt = arith.cmpi slt, %x, %y : i32
          %byte = arith.extui %lt : i1 to i8
          memref.store %byte, %pred[%c0] : memref<1xi8>
        """,
        block=(1, 1, 1),
    ),
}


@functools.cache
def image(name: str):
    return compile_kernel_image(KERNELS[name])


def kernel(name: str, arguments, block=None) -> KernelThunk:
    threads = 1 if name in ("double", "less") else 4
    return KernelThunk("k", name, arguments, (1, 1, 1), block or (threads, 1, 1))


def artefact(program, allocations, parameters, results, constants=None) -> Artefact:
    used = sorted({t.image_key for t in walk(program) if isinstance(t, KernelThunk)})
    return Artefact(
        target=TARGET,
        program=program,
        allocations=allocations,
        signature=EntrySignature(parameters, results),
        kernels=[KernelEntry("interpreter", key, image(key)) for key in used],
        constants=constants or {},
    )


def i32(*values) -> np.ndarray:
    return np.asarray(values, np.int32)


# -- a straight-line program -------------------------------------------------------------

CONSTANT = i32(100, 200, 300, 400)


def straight() -> Artefact:
    """(p0, p1) -> (p0 + C + p1, p1 + 1), p1 donated to result 1; six recordable thunks."""
    return artefact(
        [
            kernel("add", [S(0, 0, 16), S(4, 0, 16), S(3, 0, 16)]),
            kernel("add", [S(3, 0, 16), S(1, 0, 16), S(3, 16, 16)]),
            CopyThunk(S(3, 16, 16), S(2, 0, 16)),
            kernel("add_one", [S(1, 0, 16), S(3, 0, 16)]),
            CopyThunk(S(3, 0, 16), S(1, 0, 16)),
            MemsetThunk(S(3, 16, 16), 0xFFFFFFFF, 4),
        ],
        [
            Allocation(0, 16, "parameter", parameter=0),
            Allocation(1, 16, "parameter", parameter=1, output=1),
            Allocation(2, 16, "output", output=0),
            Allocation(3, 32, "temp"),
            Allocation(4, 16, "constant"),
        ],
        ["s32[4]{0}", "s32[4]{0}"],
        ["s32[4]{0}", "s32[4]{0}"],
        {4: CONSTANT.tobytes()},
    )


@pytest.mark.parametrize("command_buffers", [False, True])
def test_straight_line_program(command_buffers):
    device = InterpreterDevice()
    executable = Executable(straight(), device, command_buffers=command_buffers)
    a, b = i32(1, 2, 3, 4), i32(10, 20, 30, 40)
    first = executable.run([a, b])
    np.testing.assert_array_equal(first[0], a + CONSTANT + b)
    np.testing.assert_array_equal(first[1], b + 1)
    second = executable.run([a, b])  # the donated parameter is written anew each run
    assert [r.tobytes() for r in second] == [r.tobytes() for r in first]
    stats = executable.stats
    assert stats.kernel_launches == 3 == device.launches // 2
    assert executable.peak_device_bytes == 16 * 4 + 32 == executable.allocation_bytes
    if command_buffers:
        assert [r.kind for r in stats.records] == ["command_buffer"]
        assert [
            (r.command_buffers_recorded, r.command_buffers_replayed) for r in executable.runs
        ] == [
            (1, 1),
            (0, 1),
        ]
        assert stats.records[0].launch == "replayed"
    else:
        assert [r.kind for r in stats.records] == [
            "kernel",
            "kernel",
            "copy",
            "kernel",
            "copy",
            "memset",
        ]
        assert stats.records[0].name == "k" and stats.records[0].launch == "grid 1x1x1, block 4x1x1"
        assert all(r.seconds >= 0 for r in stats.records)


def test_a_command_buffer_is_recorded_per_binding_then_updated(monkeypatch):
    # Each binding of its allocations gets a recording of its own, up to RECORDINGS_KEPT;
    # past that the least recently replayed one is updated (repointed, not re-recorded).
    monkeypatch.setattr(executor_module, "RECORDINGS_KEPT", 2)
    device = InterpreterDevice()
    executable = Executable(straight(), device)
    own = executable.run([i32(1, 1, 1, 1), i32(2, 2, 2, 2)])
    assert executable.stats.command_buffers_recorded == 1
    buffers = []
    expected = [(1, 0), (0, 1)]  # a second binding recorded; a third updates the oldest
    for (a, b), counts in zip(
        ((i32(5, 6, 7, 8), i32(0, 1, 0, 1)), (i32(-1, -2, -3, -4), i32(9, 9, 9, 9))),
        expected,
        strict=True,
    ):
        pa, pb = device.upload(a), device.upload(b)
        buffers.append((pa, pb))
        executable.execute([pa, pb])
        stats = executable.stats
        assert (stats.command_buffers_recorded, stats.command_buffers_updated) == counts
        results = executable.results()
        np.testing.assert_array_equal(results[0], a + CONSTANT + b)
        np.testing.assert_array_equal(results[1], b + 1)
        # Donated: the caller's buffer holds result 1 now.
        np.testing.assert_array_equal(device.copy_from_device(pb).view(np.int32), b + 1)
    # The last binding again: replayed as it is.
    executable.execute(list(buffers[-1]))
    assert (
        executable.stats.command_buffers_recorded,
        executable.stats.command_buffers_updated,
    ) == (0, 0)
    # The program's own buffers: their recording was the least recently used, updated away.
    back = executable.run([i32(1, 1, 1, 1), i32(2, 2, 2, 2)])
    assert executable.stats.command_buffers_updated == 1
    assert [r.tobytes() for r in back] == [r.tobytes() for r in own]
    assert executable.stats.command_buffers_recorded == 0


def test_two_bindings_taking_turns_replay_their_own_recordings():
    # heron.jax passes a result back as the next run's argument: two buffers trade places.
    device = InterpreterDevice()
    executable = Executable(straight(), device)
    first = [device.upload(i32(1, 2, 3, 4)), device.upload(i32(0, 0, 0, 0))]
    second = [device.upload(i32(4, 3, 2, 1)), device.upload(i32(1, 1, 1, 1))]
    for _ in range(3):
        for parameters in (first, second):
            executable.execute(parameters)
    runs = executable.runs
    assert sum(r.command_buffers_recorded for r in runs) == 2
    assert sum(r.command_buffers_updated for r in runs) == 0


def test_launches_are_prepared_once_per_binding_of_their_buffers(monkeypatch):
    # Issue 30's launch cost: a kernel thunk's launch is checked and packed when the
    # executable first runs, and again only when a parameter is bound to another buffer.
    device = InterpreterDevice()
    prepared = []
    original = device.prepare_launch

    def counting(kernel, grid, block, buffers, shared_bytes=0):
        prepared.append(tuple(buffers))
        return original(kernel, grid, block, buffers, shared_bytes)

    monkeypatch.setattr(device, "prepare_launch", counting)
    executable = Executable(straight(), device, command_buffers=False)
    a, b = i32(1, 2, 3, 4), i32(10, 20, 30, 40)
    for _ in range(3):
        out = executable.run([a, b])
        np.testing.assert_array_equal(out[0], a + CONSTANT + b)
    assert len(prepared) == 3  # three kernel thunks, prepared once for three runs
    pa, pb = device.upload(a), device.upload(i32(0, 0, 0, 0))
    executable.execute([pa, pb])
    assert len(prepared) == 6  # rebound: every launch prepared again over the new views
    np.testing.assert_array_equal(executable.results()[0], a + CONSTANT)
    executable.execute([pa, pb])
    assert len(prepared) == 6
    assert all(r.seconds == 0 for r in executable.stats.records)  # no per-thunk timers


def test_inputs_are_checked_with_the_parameter_named():
    executable = Executable(straight(), InterpreterDevice())
    with pytest.raises(ExecutorError, match="takes 2 parameters"):
        executable.run([i32(1, 2, 3, 4)])
    with pytest.raises(ExecutorError, match=r"parameter 1 is s32\[4\]\{0\}.*given shape \(3,\)"):
        executable.run([i32(1, 2, 3, 4), i32(1, 2, 3)])
    with pytest.raises(ExecutorError, match="parameter 0 .*float32"):
        executable.run([np.zeros(4, np.float32), i32(1, 2, 3, 4)])


def test_library_calls_without_a_library_or_contract_and_a_missing_backend_are_refused():
    allocations = [Allocation(0, 16, "parameter", parameter=0, output=0)]
    unknown = artefact(
        [LibraryCallThunk("blas", "syrk", [S(0, 0, 16)])], allocations, ["s32[4]{0}"], ["s32[4]{0}"]
    )
    with pytest.raises(ExecutorError, match=r"thunk 0: library call blas\.syrk: no such operation"):
        Executable(unknown, InterpreterDevice())
    malformed = artefact(
        [LibraryCallThunk("blas", "gemm", [S(0, 0, 16)])], allocations, ["s32[4]{0}"], ["s32[4]{0}"]
    )
    with pytest.raises(ExecutorError, match=r"thunk 0: gemm: attributes .* missing"):
        Executable(malformed, InterpreterDevice())
    with pytest.raises(
        ExecutorError, match="kernel images for interpreter, not for backend 'cuda'"
    ):
        Executable(straight(), InterpreterDevice(), "cuda")


# -- a while loop ------------------------------------------------------------------------


def doubling(trip_count=None, wrapped=False) -> Artefact:
    """(x, limit) -> x doubled until it is no longer below limit (x donated)."""
    condition = [kernel("less", [S(0, 0, 4), S(1, 0, 4), S(2, 0, 1)])]
    body = [kernel("double", [S(0, 0, 4), S(2, 4, 4)]), CopyThunk(S(2, 4, 4), S(0, 0, 4))]
    if wrapped:
        body = [SequentialThunk(body)]
    loop = WhileThunk(condition, S(2, 0, 1), body, trip_count)
    return artefact(
        [MemsetThunk(S(2, 0, 8), 0), loop],
        [
            Allocation(0, 4, "parameter", parameter=0, output=0),
            Allocation(1, 4, "parameter", parameter=1),
            Allocation(2, 8, "temp"),
        ],
        ["s32[]", "s32[]"],
        ["s32[]"],
    )


@pytest.mark.parametrize(
    ("command_buffers", "conditional_nodes"), [(False, True), (True, False), (True, True)]
)
def test_while_with_a_condition_kernel(command_buffers, conditional_nodes):
    device = InterpreterDevice(conditional_nodes=conditional_nodes)
    executable = Executable(
        doubling(wrapped=True), device, command_buffers=command_buffers, min_graph_size=1
    )
    (result,) = executable.run([np.int32(3), np.int32(50)])
    assert result.shape == () and int(result) == 96  # 3 6 12 24 48 96: five bodies
    launches = 5 + 6  # five bodies, six conditions
    assert device.launches == launches
    stats = executable.stats
    if command_buffers and conditional_nodes:
        assert [r.kind for r in stats.records] == ["command_buffer"]
        assert stats.predicate_reads == 0 and stats.conditional_node_replays == 0
        assert stats.kernel_launches == launches  # as the interpreter counted them
    else:
        assert stats.predicate_reads == 6
        assert stats.kernel_launches == launches
        paths = {r.path for r in stats.records}
        if command_buffers:  # the memset, and the body, recorded apart
            assert stats.command_buffers_recorded == 3  # memset, condition, body
            assert stats.command_buffers_replayed == 1 + 6 + 5
        else:
            assert {"1.condition.0", "1.body.0", "1.body.1"} <= paths
    (again,) = executable.run([np.int32(7), np.int32(8)])
    assert int(again) == 14


@pytest.mark.parametrize("conditional_nodes", [False, True])
def test_a_command_buffer_of_the_artefact_is_split_where_the_device_lacks_nodes(
    conditional_nodes,
):
    plain = doubling()
    recorded = Artefact(
        target=plain.target,
        program=[CommandBufferThunk(plain.program)],
        allocations=plain.allocations,
        signature=plain.signature,
        kernels=plain.kernels,
    )
    device = InterpreterDevice(conditional_nodes=conditional_nodes)
    executable = Executable(recorded, device, min_graph_size=1)
    kinds = [t.kind for t in executable.program]
    assert kinds == (["command_buffer"] if conditional_nodes else ["command_buffer", "while"])
    (result,) = executable.run([np.int32(1), np.int32(4)])
    assert int(result) == 4 and device.launches == 2 + 3


def test_a_known_trip_count_skips_the_condition():
    device = InterpreterDevice()
    executable = Executable(doubling(trip_count=3), device, command_buffers=False)
    (result,) = executable.run([np.int32(5), np.int32(0)])  # the limit is never read
    assert int(result) == 40
    assert executable.stats.predicate_reads == 0
    assert device.launches == executable.stats.kernel_launches == 3


# -- conditionals ------------------------------------------------------------------------


def branching(selector_type: str) -> Artefact:
    """(selector, x) -> branch 0: x + 1; branch 1: x + x; branch 2 (s32): 7s."""
    width = 1 if selector_type == "pred" else 4
    branches = [
        [kernel("add_one", [S(1, 0, 16), S(2, 0, 16)])],
        [kernel("add", [S(1, 0, 16), S(1, 0, 16), S(2, 0, 16)])],
        [MemsetThunk(S(2, 0, 16), 7, 4)],
    ]
    if selector_type == "pred":
        branches = branches[:2]
    return artefact(
        [ConditionalThunk(S(0, 0, width), selector_type, branches)],
        [
            Allocation(0, width, "parameter", parameter=0),
            Allocation(1, 16, "parameter", parameter=1),
            Allocation(2, 16, "output", output=0),
        ],
        ["pred[]" if selector_type == "pred" else "s32[]", "s32[4]{0}"],
        ["s32[4]{0}"],
    )


@pytest.mark.parametrize("conditional_nodes", [False, True])
@pytest.mark.parametrize(
    ("selector_type", "selector", "branch"),
    [
        ("pred", True, 0),
        ("pred", False, 1),
        ("s32", 0, 0),
        ("s32", 1, 1),
        ("s32", 2, 2),
        ("s32", 3, 2),
        ("s32", -1, 2),
    ],
)
def test_conditional(conditional_nodes, selector_type, selector, branch):
    device = InterpreterDevice(conditional_nodes=conditional_nodes)
    executable = Executable(branching(selector_type), device, min_graph_size=1)
    x = i32(1, 2, 3, 4)
    value = np.bool_(selector) if selector_type == "pred" else np.int32(selector)
    (result,) = executable.run([value, x])
    expected = [x + 1, x + x, np.full(4, 7, np.int32)][branch]
    np.testing.assert_array_equal(result, expected)
    assert device.launches == (branch < 2)
    stats = executable.stats
    assert stats.command_buffers_recorded == 1
    if conditional_nodes:
        assert stats.predicate_reads == 0 and stats.records[0].kind == "command_buffer"
    else:
        assert stats.predicate_reads == 1
        assert stats.records[0].path == f"0.branch{branch}.0"


# -- heron-run ---------------------------------------------------------------------------


@pytest.fixture
def saved(tmp_path) -> tuple[Path, Path]:
    path = tmp_path / "straight.heron"
    straight().save(path)
    inputs = tmp_path / "in.npz"
    save_inputs(inputs, [i32(1, 2, 3, 4), i32(10, 20, 30, 40)])
    return path, inputs


def test_heron_run_runs_an_artefact(saved, tmp_path, capsys):
    path, inputs = saved
    output, report = tmp_path / "out.npz", tmp_path / "report.json"
    status = heron_run(
        [
            str(path),
            "--inputs",
            str(inputs),
            "--output",
            str(output),
            "--backend",
            "interpreter",
            "--repeat",
            "3",
            "--report-json",
            str(report),
        ]
    )
    text = capsys.readouterr().out
    assert status == 0, text
    results = load_outputs(output)
    np.testing.assert_array_equal(results[0], i32(1, 2, 3, 4) + CONSTANT + i32(10, 20, 30, 40))
    np.testing.assert_array_equal(results[1], i32(11, 21, 31, 41))
    assert "results identical across the 3 runs: yes" in text
    assert "peak device memory: 96 bytes (the allocations: 96 bytes)" in text
    data = json.loads(report.read_text())
    assert data["identical"] is True and data["backend"] == "interpreter"
    assert data["peak_device_bytes"] == data["allocation_bytes"] == 96
    assert len(data["runs"]) == 3
    assert [r["command_buffers"] for r in data["runs"]] == [
        {"recorded": 1, "replayed": 1, "updated": 0},
        {"recorded": 0, "replayed": 1, "updated": 0},
        {"recorded": 0, "replayed": 1, "updated": 0},
    ]
    assert data["totals"]["kernel_launches"] == 9
    (thunk,) = data["runs"][0]["thunks"]
    assert thunk["kind"] == "command_buffer" and thunk["launch"] == "recorded, replayed"

    plain = tmp_path / "plain.json"
    assert (
        heron_run(
            [
                str(path),
                "--inputs",
                str(inputs),
                "--no-command-buffers",
                "--report-json",
                str(plain),
            ]
        )
        == 0
    )
    runs = json.loads(plain.read_text())["runs"]
    assert [t["kind"] for t in runs[0]["thunks"]] == [
        "kernel",
        "kernel",
        "copy",
        "kernel",
        "copy",
        "memset",
    ]
    assert runs[0]["thunks"][0]["launch"] == "grid 1x1x1, block 4x1x1"


def test_heron_run_refusals_exit_2(saved, tmp_path, capsys):
    path, _ = saved
    short = tmp_path / "short.npz"
    save_inputs(short, [i32(1, 2, 3, 4)])
    assert heron_run([str(path), "--inputs", str(short)]) == 2
    assert "arg1" in capsys.readouterr().err
    wrong = tmp_path / "wrong.npz"
    save_inputs(wrong, [i32(1, 2, 3, 4), i32(1, 2, 3)])
    assert heron_run([str(path), "--inputs", str(wrong)]) == 2
    err = capsys.readouterr().err
    assert "parameter 1" in err and "s32[4]" in err
    assert heron_run([str(path), "--backend", "interpreter"]) == 2
    assert "missing inputs" in capsys.readouterr().err
    assert heron_run([str(path), "--inputs", str(tmp_path / "absent.npz")]) == 2
    assert "no such file" in capsys.readouterr().err
    damaged = tmp_path / "damaged.heron"
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    damaged.write_bytes(bytes(data))
    assert heron_run([str(damaged), "--inputs", str(short)]) == 2
    assert "refused" in capsys.readouterr().err


def test_heron_run_as_a_module(saved, tmp_path):
    path, inputs = saved
    output = tmp_path / "out.npz"
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "heron.runtime.core.heron_run",
            str(path),
            "--inputs",
            str(inputs),
            "--output",
            str(output),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    assert "backend: interpreter" in done.stdout
    np.testing.assert_array_equal(load_outputs(output)[1], i32(11, 21, 31, 41))


def test_heron_run_exits_1_when_a_kernel_fails(tmp_path, capsys):
    good = straight()
    faulty = Artefact(
        target=good.target,
        # Eight threads over four elements: the interpreter stops at index 4.
        program=[kernel("add_one", [S(1, 0, 16), S(3, 0, 16)], block=(8, 1, 1))],
        allocations=good.allocations,
        signature=good.signature,
        kernels=[KernelEntry("interpreter", "add_one", image("add_one"))],
        constants=good.constants,
    )
    path, inputs = tmp_path / "faulty.heron", tmp_path / "in.npz"
    faulty.save(path)
    save_inputs(inputs, [i32(1, 2, 3, 4), i32(1, 2, 3, 4)])
    assert heron_run([str(path), "--inputs", str(inputs)]) == 1
    assert "heron-run: the device failed:" in capsys.readouterr().err


def test_execute_without_synchronizing_leaves_the_wait_to_the_caller():
    """Back-to-back runs with one synchronisation (the GPU bundle's throughput timing):
    ``execute(..., synchronize=False)`` issues the work and never waits for the device."""
    device = InterpreterDevice()
    waits = []
    original = device.synchronize

    def counting() -> None:
        waits.append(1)
        original()

    device.synchronize = counting  # type: ignore[method-assign]
    executable = Executable(straight(), device, timing=False)
    a, b = device.upload(i32(1, 2, 3, 4)), device.upload(i32(10, 20, 30, 40))
    for _ in range(3):
        executable.execute([a, b], synchronize=False)
    assert waits == []
    executable.execute([a, b])
    assert waits == [1]
    # Every run ran: parameter 1 is donated to result 1 (p1 + 1), so the fourth run
    # added p1 after three increments.
    np.testing.assert_array_equal(executable.results()[0], i32(14, 25, 36, 47) + CONSTANT)
