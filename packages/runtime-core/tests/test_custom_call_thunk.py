"""CustomCallThunk: validated, stored as JSON in the artefact, never in a command buffer."""

from __future__ import annotations

import json

import pytest

from heron.hlo.custom_calls.call import UnknownCustomCallTarget
from heron.hlo.custom_calls.registry import CustomCallRegistry
from heron.hlo.shapes import TupleShape
from heron.runtime.core.command_buffers import convert, recordable
from heron.runtime.core.host_calls import HostCalls
from heron.runtime.core.thunks import (
    BufferSlice,
    CommandBufferThunk,
    ConditionalThunk,
    CustomCallThunk,
    KernelThunk,
    ThunkError,
    WhileThunk,
    check_slices,
    program_from_json,
    program_to_json,
    thunk_from_json,
)


def custom_call(**changes) -> CustomCallThunk:
    fields = dict(
        target="pkg.scan",
        name="cc.3",
        computation="main",
        operands=[BufferSlice(0, 0, 32), BufferSlice(1, 0, 4)],
        operand_shapes=["f32[2,4]{1,0}", "s32[]"],
        results=[BufferSlice(2, 0, 32), BufferSlice(2, 128, 1)],
        result_shape="(f32[2,4]{0,1}, pred[])",
        backend_config='{"axis": 1}',
        opaque="raw \\ bytes",
        api_version="API_VERSION_STATUS_RETURNING",
    )
    fields.update(changes)
    return CustomCallThunk(**fields)


def kernel(n: int) -> KernelThunk:
    return KernelThunk(f"k{n}", f"k{n}", [BufferSlice(0, 0, 4)], (1, 1, 1), (1, 1, 1))


def test_the_thunk_round_trips_through_json_and_gives_its_call():
    thunk = custom_call()
    text = json.dumps(program_to_json([thunk, kernel(0)]))
    assert program_from_json(json.loads(text)) == (thunk, kernel(0))
    call = thunk.call()
    assert (call.target, call.instruction, call.computation) == ("pkg.scan", "cc.3", "main")
    assert isinstance(call.result_shape, TupleShape)
    assert [str(s) for s in call.result_shapes] == ["f32[2,4]{0,1}", "pred[]"]
    assert (call.backend_config, call.opaque) == ('{"axis": 1}', "raw \\ bytes")
    assert list(thunk.slices()) == [*thunk.operands, *thunk.results]


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"target": "two words"}, "must be a custom_call_target"),
        ({"name": "line\nbreak"}, "CustomCallThunk.name must be printable text"),
        ({"operand_shapes": ["f32[2,4]{1,0}"]}, "2 operand slices for 1 operand leaves"),
        ({"operand_shapes": ["f32[2,5]", "s32[]"]}, r"operand 0 \(f32\[2,5\]\) is 40 bytes"),
        ({"operand_shapes": ["f32[2,", "s32[]"]}, r"operand_shapes\[0\] 'f32\[2,' is not an HLO"),
        ({"operand_shapes": [3, "s32[]"]}, "must be a sequence of strings"),
        ({"result_shape": "f32[2,4]"}, "2 result slices for 1 result leaves"),
        ({"result_shape": "(f32[2,4], token[])"}, "result 1 is token"),
        ({"results": [BufferSlice(2, 0, 32), BufferSlice(2, 128, 4)]}, "slice alloc2"),
        ({"backend_config": None}, "backend_config"),
    ],
)
def test_a_malformed_thunk_is_refused_naming_the_field(changes, message):
    with pytest.raises((ThunkError, TypeError), match=message):
        custom_call(**changes)


def test_json_with_a_missing_or_unknown_field_is_refused():
    value = custom_call().to_json()
    del value["opaque"]
    with pytest.raises(ThunkError, match=r"thunk \(custom_call\): missing opaque"):
        thunk_from_json(value)
    value = custom_call().to_json() | {"device": "x"}
    with pytest.raises(ThunkError, match="unknown device"):
        thunk_from_json(value)
    value = custom_call().to_json() | {"operand_shapes": "f32[2,4]"}
    with pytest.raises(ThunkError, match="operand_shapes: expected a list of strings"):
        thunk_from_json(value)


def test_its_slices_are_checked_against_the_allocation_table():
    check_slices([custom_call()], [32, 4, 129])
    with pytest.raises(ThunkError, match=r"custom_call thunk: slice alloc2\[128:129\] ends at"):
        check_slices([custom_call()], [32, 4, 128])


def test_a_custom_call_is_never_recorded_and_splits_the_run_around_it():
    thunk = custom_call()
    assert not recordable(thunk, conditional_nodes=True)
    program = [kernel(0), kernel(1), thunk, kernel(2), kernel(3)]
    converted = convert(program, conditional_nodes=True, min_size=2)
    assert [t.kind for t in converted] == ["command_buffer", "custom_call", "command_buffer"]
    assert converted[1] is thunk
    # A loop or a conditional holding one stays on the host; what is around it is recorded.
    loop = WhileThunk([kernel(4)], BufferSlice(3, 0, 1), [kernel(5), thunk, kernel(6)])
    assert not recordable(loop, conditional_nodes=True)
    (host_loop,) = convert([loop], conditional_nodes=True, min_size=1)
    assert isinstance(host_loop, WhileThunk)
    assert [t.kind for t in host_loop.body] == ["command_buffer", "custom_call", "command_buffer"]
    branchy = ConditionalThunk(BufferSlice(3, 0, 1), "pred", [[thunk], [kernel(7)]])
    assert not recordable(branchy, conditional_nodes=True)
    with pytest.raises(ThunkError, match="a custom_call thunk .* cannot be recorded"):
        CommandBufferThunk([kernel(0), thunk])


def test_host_calls_refuse_a_target_no_plugin_provides_before_running():
    registry = CustomCallRegistry()
    with pytest.raises(UnknownCustomCallTarget) as info:
        HostCalls([kernel(0), WhileThunk([], BufferSlice(3, 0, 1), [custom_call()])], registry)
    assert str(info.value).startswith(
        "custom-call 'cc.3' in computation 'main': custom_call_target 'pkg.scan' is provided"
        " by no installed plugin"
    )
