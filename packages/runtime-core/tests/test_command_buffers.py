"""The command-buffer conversion pass: which runs of thunks become command buffers."""

from __future__ import annotations

import pytest

from heron.runtime.core.command_buffers import (
    HOST_READ,
    MIN_GRAPH_SIZE,
    UNKNOWN_TRIPS,
    convert,
    cost,
    for_device,
    recordable,
    strip,
)
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

S = BufferSlice(0, 0, 4)
PRED = BufferSlice(1, 0, 1)


def kernel(n: int) -> KernelThunk:
    return KernelThunk(f"k{n}", f"k{n}", [S], (1, 1, 1), (1, 1, 1))


def loop(body, condition=None) -> WhileThunk:
    return WhileThunk(condition or [kernel(90)], PRED, body)


def kinds(thunks) -> list[str]:
    return [t.kind for t in thunks]


def test_xla_default_minimum_is_five():
    assert MIN_GRAPH_SIZE == 5
    four = [kernel(i) for i in range(4)]
    assert convert(four, conditional_nodes=True) == tuple(four)
    five = [kernel(i) for i in range(5)]
    assert convert(five, conditional_nodes=True) == (CommandBufferThunk(five),)


def test_maximal_runs_split_at_unrecordable_thunks():
    host_loop = loop([kernel(50)])
    program = [
        kernel(0),
        kernel(1),
        host_loop,
        kernel(2),
        MemsetThunk(S),
        CopyThunk(S, BufferSlice(2, 0, 4)),
    ]
    converted = convert(program, conditional_nodes=False, min_size=2)
    assert kinds(converted) == ["command_buffer", "while", "command_buffer"]
    assert converted[0].thunks == (kernel(0), kernel(1))
    assert kinds(converted[2].thunks) == ["kernel", "memset", "copy"]
    # The loop stays on the host; its body of one kernel is too short to record.
    assert converted[1] == host_loop


def test_control_flow_goes_inside_only_with_conditional_nodes():
    branchy = ConditionalThunk(BufferSlice(1, 0, 4), "s32", [[kernel(7)], [MemsetThunk(S)]])
    program = [kernel(0), loop([kernel(1), kernel(2)]), branchy, kernel(3)]
    with_nodes = convert(program, conditional_nodes=True, min_size=1)
    assert kinds(with_nodes) == ["command_buffer"]
    assert kinds(with_nodes[0].thunks) == ["kernel", "while", "conditional", "kernel"]
    without = convert(program, conditional_nodes=False, min_size=1)
    assert kinds(without) == ["command_buffer", "while", "conditional", "command_buffer"]
    # Inside the host-run loop and branches, runs are converted in turn.
    assert kinds(without[1].condition) == ["command_buffer"]
    assert kinds(without[1].body) == ["command_buffer"]
    assert [kinds(b) for b in without[2].branches] == [["command_buffer"], ["command_buffer"]]


def test_nesting_inside_a_recorded_loop_is_flattened():
    inner = loop([kernel(1)])
    outer = loop([SequentialThunk([kernel(2), kernel(3)]), inner], condition=[kernel(4)])
    assert recordable(outer, True)
    assert not recordable(outer, False)
    converted = convert([outer], conditional_nodes=True, min_size=1)
    assert kinds(converted) == ["command_buffer"]
    recorded = converted[0].thunks[0]
    assert kinds(recorded.body) == ["kernel", "kernel", "while"]
    # Without conditional nodes both loops run on the host, their bodies converted.
    host = convert([outer], conditional_nodes=False, min_size=1)
    assert kinds(host) == ["while"]
    assert kinds(host[0].body) == ["command_buffer", "while"]
    assert kinds(host[0].body[1].body) == ["command_buffer"]


def test_sequentials_are_flattened_and_existing_command_buffers_regrouped():
    program = [
        SequentialThunk([kernel(0), kernel(1)]),
        CommandBufferThunk([kernel(2)]),
        kernel(3),
    ]
    converted = convert(program, conditional_nodes=True, min_size=4)
    assert converted == (CommandBufferThunk([kernel(0), kernel(1), kernel(2), kernel(3)]),)
    assert convert(converted, conditional_nodes=True, min_size=4) == converted
    short = convert(program, conditional_nodes=True, min_size=5)
    assert short == (kernel(0), kernel(1), kernel(2), kernel(3))


def test_library_calls_are_recordable():
    call = LibraryCallThunk("blas", "gemm", [S])
    converted = convert([call, kernel(0)], conditional_nodes=False, min_size=2)
    assert converted == (CommandBufferThunk([call, kernel(0)]),)


def test_strip_and_for_device():
    program = [kernel(i) for i in range(6)]
    recorded = for_device(program, enabled=True, conditional_nodes=False)
    assert kinds(recorded) == ["command_buffer"]
    assert for_device(recorded, enabled=False, conditional_nodes=True) == tuple(program)
    nested = [loop([CommandBufferThunk([kernel(1)])])]
    assert not any(isinstance(t, CommandBufferThunk) for t in walk(strip(nested)))


@pytest.mark.parametrize("min_size", [0, 1])
def test_a_minimum_below_one_means_one(min_size):
    assert convert([kernel(0)], conditional_nodes=False, min_size=min_size) == (
        CommandBufferThunk([kernel(0)]),
    )


def test_cost_counts_a_loop_as_its_trips_and_a_host_read_each():
    body = [kernel(1), kernel(2)]
    assert cost(kernel(0)) == 1
    assert cost(WhileThunk([kernel(90)], PRED, body, 1000)) == 1000 * (3 + HOST_READ)
    assert cost(loop(body)) == UNKNOWN_TRIPS * (3 + HOST_READ)
    branches = ([kernel(1)], [kernel(2), kernel(3)])
    assert cost(ConditionalThunk(PRED, "pred", branches)) == HOST_READ + 2


@pytest.mark.parametrize(
    "control",
    [
        loop([kernel(1)]),
        WhileThunk([], PRED, [kernel(1)], 1),
        ConditionalThunk(PRED, "pred", ([kernel(1)], [])),
    ],
    ids=["while", "one_trip", "conditional"],
)
def test_a_loop_or_conditional_is_recorded_whatever_its_length(control):
    # Issue 30: a 1000-step fori_loop run from the host launched 2,000 kernels and read
    # its predicate 1,000 times; with conditional nodes it is one graph launch.
    program = [kernel(0), control]
    assert convert(program, conditional_nodes=True) == (CommandBufferThunk(program),)
    # without conditional nodes the host runs it, and its one-kernel body is no graph
    host = convert(program, conditional_nodes=False)
    assert [type(t) for t in host] == [KernelThunk, type(control)]
    assert not any(isinstance(t, CommandBufferThunk) for t in walk(host))
    # an explicit minimum above the cost still keeps it on the host
    assert convert(program, conditional_nodes=True, min_size=10**9) == tuple(program)
