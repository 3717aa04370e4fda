"""Thunk types: validation, the JSON round trip, control flow's branch choice, slice checks."""

from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from heron.hlo.control_flow import branch_index
from heron.runtime.core.thunks import (
    MAX_NESTING,
    BufferSlice,
    CommandBufferThunk,
    ConditionalThunk,
    CopyThunk,
    KernelThunk,
    LibraryCallThunk,
    MemsetThunk,
    SequentialThunk,
    Thunk,
    ThunkError,
    WhileThunk,
    check_slices,
    program_from_json,
    program_to_json,
    thunk_from_json,
    walk,
)

S = BufferSlice
KERNEL = KernelThunk("fusion_1", "fusion_1", [S(0, 0, 16), S(1, 0, 16)], (2, 1, 1), (32, 1, 1))
COPY = CopyThunk(S(1, 0, 16), S(2, 16, 16))
MEMSET = MemsetThunk(S(2, 0, 8), value=0xBEEF, width=2)
GEMM = LibraryCallThunk(
    "blas", "gemm", [S(0, 0, 16), S(1, 0, 16), S(2, 0, 16)], {"alpha": 1.5, "dims": [[1], [0]]}
)
WHILE = WhileThunk([KERNEL], S(3, 0, 1), [COPY, MEMSET], trip_count=4)
COND = ConditionalThunk(S(3, 4, 4), "s32", [[KERNEL], [COPY], []])
EXAMPLES = [
    KERNEL,
    COPY,
    MEMSET,
    GEMM,
    SequentialThunk([KERNEL, COPY]),
    WHILE,
    COND,
    ConditionalThunk(S(3, 0, 1), "pred", [[MEMSET], [KERNEL]]),
    CommandBufferThunk([KERNEL, GEMM, WHILE, COND]),
]


@pytest.mark.parametrize("thunk", EXAMPLES, ids=lambda t: t.kind)
def test_every_thunk_type_round_trips_through_json_text(thunk: Thunk) -> None:
    text = json.dumps(thunk.to_json(), allow_nan=False)
    again = thunk_from_json(json.loads(text))
    assert again == thunk
    assert type(again) is type(thunk)
    assert again.to_json() == thunk.to_json()


def test_program_round_trip_and_walk_order() -> None:
    program = (SequentialThunk([WHILE]), COND)
    assert program_from_json(json.loads(json.dumps(program_to_json(program)))) == program
    kinds = [t.kind for t in walk(program)]
    assert kinds == [
        "sequential",
        "while",
        "kernel",
        "copy",
        "memset",
        "conditional",
        "kernel",
        "copy",
    ]


def test_library_call_attributes_are_sorted_and_frozen() -> None:
    call = LibraryCallThunk("blas", "gemm", [S(0, 0, 4)], {"z": [1, [2]], "a": None})
    assert call.attributes == (("a", None), ("z", (1, (2,))))
    assert call.attribute("z") == (1, (2,))
    assert call.to_json()["attributes"] == {"a": None, "z": [1, [2]]}
    hash(call)  # frozen all the way down


def test_memset_pattern_is_little_endian_and_repeated() -> None:
    assert MEMSET.pattern() == b"\xef\xbe" * 4
    assert MemsetThunk(S(0, 0, 3), 7).pattern() == b"\x07\x07\x07"


@pytest.mark.parametrize(
    ("build", "message"),
    [
        (lambda: S(-1, 0, 4), r"BufferSlice.allocation must be an integer >= 0"),
        (lambda: S(0, True, 4), r"BufferSlice.offset must be an integer"),
        (lambda: KernelThunk("9bad", "k", [], (1, 1, 1), (1, 1, 1)), r"kernel_name"),
        (lambda: KernelThunk("k", "../k", [], (1, 1, 1), (1, 1, 1)), r"image_key"),
        (lambda: KernelThunk("k", "k", [], (0, 1, 1), (1, 1, 1)), r"grid must be three positive"),
        (lambda: KernelThunk("k", "k", [], (1, 1), (1, 1, 1)), r"grid must be three"),
        (lambda: KernelThunk("k", "k", [4], (1, 1, 1), (1, 1, 1)), r"sequence of BufferSlice"),
        (lambda: KernelThunk("k", "k", [], (1, 1, 1), (1, 1, 1), -1), r"shared_bytes"),
        (lambda: CopyThunk(S(0, 0, 4), S(1, 0, 8)), r"source .* is 4 bytes but destination"),
        (lambda: CopyThunk(S(0, 0, 8), S(0, 4, 8)), r"overlap"),
        (lambda: MemsetThunk(S(0, 0, 4), 256), r"does not fit in 1 byte"),
        (lambda: MemsetThunk(S(0, 0, 6), 0, 4), r"not a multiple of the 4-byte pattern"),
        (lambda: MemsetThunk(S(0, 0, 6), 0, 3), r"width must be 1, 2 or 4"),
        (lambda: WhileThunk([], S(0, 0, 4), []), r"predicate .* must be 1 byte"),
        (lambda: WhileThunk([], S(0, 0, 1), [], trip_count=-1), r"trip_count"),
        (lambda: WhileThunk([1], S(0, 0, 1), []), r"condition must be a sequence of thunks"),
        (lambda: ConditionalThunk(S(0, 0, 1), "s64", [[]]), r"selector_type must be"),
        (lambda: ConditionalThunk(S(0, 0, 1), "s32", [[]]), r"must be 4 byte\(s\) for s32"),
        (lambda: ConditionalThunk(S(0, 0, 4), "s32", []), r"non-empty"),
        (lambda: ConditionalThunk(S(0, 0, 1), "pred", [[]]), r"exactly 2 branches"),
        (lambda: LibraryCallThunk("blas", "gemm", [], {"x": {"y": 1}}), r"attribute 'x'"),
        (lambda: LibraryCallThunk("blas", "gemm", [], {"x": float("nan")}), r"no JSON form"),
        (lambda: LibraryCallThunk("blas", "gemm", [], 5), r"a mapping of names to values"),
        (lambda: LibraryCallThunk("blas", "gemm", [], "ab"), r"a mapping of names to values"),
        (lambda: CommandBufferThunk([]), r"at least one thunk"),
        (lambda: CommandBufferThunk([SequentialThunk([])]), r"sequential thunk .* cannot be"),
        (lambda: CommandBufferThunk([CommandBufferThunk([KERNEL])]), r"command_buffer thunk"),
        (
            lambda: CommandBufferThunk([WhileThunk([SequentialThunk([])], S(0, 0, 1), [])]),
            r"while thunk \(or one inside it\) cannot be recorded",
        ),
    ],
)
def test_malformed_thunks_are_refused_naming_the_field(build, message: str) -> None:
    with pytest.raises(ThunkError, match=message):
        build()


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ([], r"a thunk is an object with a 'kind'"),
        ({"kind": "launch"}, r"unknown thunk kind 'launch'"),
        ({"kind": "copy", "source": [0, 0, 1]}, r"\(copy\): missing destination"),
        (
            {"kind": "copy", "source": [0, 0, 1], "destination": [1, 0, 1], "code": "x"},
            r"unknown code",
        ),
        ({"kind": "copy", "source": [0, 0], "destination": [1, 0, 1]}, r"source: a slice is"),
        ({"kind": "copy", "source": [0, 0, True], "destination": [1, 0, 1]}, r"a slice is"),
        ({"kind": "memset", "destination": [0, 0, 1], "value": 1.0, "width": 1}, r"an integer"),
        ({"kind": "sequential", "thunks": {}}, r"expected a list of thunks"),
        ({"kind": "sequential", "thunks": [{"kind": "x"}]}, r"thunks\[0\]: unknown thunk kind"),
        ({"kind": "memset", "destination": [0, 0, 1], "value": 999, "width": 1}, r"\(memset\)"),
    ],
)
def test_malformed_json_is_refused_naming_the_place(value, message: str) -> None:
    with pytest.raises(ThunkError, match=message):
        thunk_from_json(value)


def test_nesting_deeper_than_the_limit_is_refused_not_a_recursion_error() -> None:
    value: dict = {"kind": "sequential", "thunks": []}
    for _ in range(MAX_NESTING + 2):
        value = {"kind": "sequential", "thunks": [value]}
    with pytest.raises(ThunkError, match=f"nested more than {MAX_NESTING} levels"):
        thunk_from_json(value)


@pytest.mark.parametrize("index", [-(2**31), -1, 0, 1, 2, 3, 7, 2**31 - 1])
def test_s32_selector_agrees_with_the_evaluators_branch_index(index: int) -> None:
    selector = np.array(index, dtype="<i4").tobytes()
    assert COND.branch_for(selector) == branch_index(np.int32(index), 3)
    assert COND.branch_for(selector) == (index if 0 <= index < 3 else 2)  # last when out of range


def test_pred_selector_picks_true_first() -> None:
    cond = ConditionalThunk(S(0, 0, 1), "pred", [[], [KERNEL]])
    assert cond.branch_for(b"\x01") == 0 == branch_index(np.bool_(True), 2)
    assert cond.branch_for(b"\x00") == 1 == branch_index(np.bool_(False), 2)
    with pytest.raises(ThunkError, match="selector is 1 byte"):
        cond.branch_for(b"\x00\x00")


def test_check_slices_against_the_allocation_table() -> None:
    program = (SequentialThunk([WHILE]), COND)
    check_slices(program, [16, 16, 32, 8])
    with pytest.raises(
        ThunkError, match=r"alloc3\[4:8\] ends at byte 8, past the end of allocation 3 \(5 bytes\)"
    ):
        check_slices(program, [16, 16, 32, 5])
    with pytest.raises(ThunkError, match=r"names allocation 3, but there are 3"):
        check_slices(program, [16, 16, 32])


# -- property: any thunk tree round-trips ----------------------------------------------

names = st.from_regex(r"[A-Za-z_][A-Za-z0-9_.-]{0,12}", fullmatch=True)
slices = st.builds(BufferSlice, st.integers(0, 6), st.integers(0, 1 << 40), st.integers(0, 1 << 20))
dims = st.tuples(st.integers(1, 2**31 - 1), st.integers(1, 65535), st.integers(1, 65535))


@st.composite
def copies(draw) -> CopyThunk:
    size = draw(st.integers(0, 4096))
    source = BufferSlice(draw(st.integers(0, 3)), draw(st.integers(0, 1 << 20)), size)
    return CopyThunk(source, BufferSlice(source.allocation + 1, draw(st.integers(0, 99)), size))


@st.composite
def memsets(draw) -> MemsetThunk:
    width = draw(st.sampled_from([1, 2, 4]))
    size = width * draw(st.integers(0, 100))
    value = draw(st.integers(0, (1 << (8 * width)) - 1))
    return MemsetThunk(
        BufferSlice(draw(st.integers(0, 5)), draw(st.integers(0, 64)), size), value, width
    )


attribute_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**63), 2**63)
    | st.text(max_size=8)
    | st.floats(allow_nan=False, allow_infinity=False),
    lambda inner: st.lists(inner, max_size=3),
    max_leaves=6,
)
leaves = st.one_of(
    st.builds(
        KernelThunk, names, names, st.lists(slices, max_size=5), dims, dims, st.integers(0, 1 << 17)
    ),
    copies(),
    memsets(),
    st.builds(
        LibraryCallThunk,
        names,
        names,
        st.lists(slices, max_size=4),
        st.dictionaries(st.text(max_size=6), attribute_values, max_size=4),
    ),
)
pred_slices = st.builds(BufferSlice, st.integers(0, 6), st.integers(0, 100), st.just(1))
s32_slices = st.builds(BufferSlice, st.integers(0, 6), st.integers(0, 100), st.just(4))


def _control(children):
    sequences = st.lists(children, max_size=3)
    return st.one_of(
        st.builds(SequentialThunk, sequences),
        st.builds(WhileThunk, sequences, pred_slices, sequences, st.none() | st.integers(0, 10**6)),
        st.builds(
            ConditionalThunk,
            pred_slices,
            st.just("pred"),
            st.lists(sequences, min_size=2, max_size=2),
        ),
        st.builds(
            ConditionalThunk,
            s32_slices,
            st.just("s32"),
            st.lists(sequences, min_size=1, max_size=4),
        ),
    )


thunk_trees = st.recursive(leaves, _control, max_leaves=12)
recordable = st.recursive(
    leaves,
    lambda children: st.one_of(
        st.builds(
            WhileThunk, st.lists(children, max_size=2), pred_slices, st.lists(children, max_size=2)
        ),
        st.builds(
            ConditionalThunk,
            s32_slices,
            st.just("s32"),
            st.lists(st.lists(children, max_size=2), min_size=1, max_size=3),
        ),
    ),
    max_leaves=8,
)
command_buffers = st.builds(CommandBufferThunk, st.lists(recordable, min_size=1, max_size=4))


@settings(max_examples=150, deadline=None)
@given(st.lists(thunk_trees | command_buffers, max_size=4))
def test_any_thunk_program_round_trips_through_json_text(program: list[Thunk]) -> None:
    text = json.dumps(program_to_json(program), allow_nan=False)
    again = program_from_json(json.loads(text))
    assert again == tuple(program)
    assert json.dumps(program_to_json(again), allow_nan=False) == text
    assert [t.kind for t in walk(again)] == [t.kind for t in walk(program)]


def test_an_order_dependent_kernel_says_why_and_round_trips() -> None:
    from heron.runtime.core.thunks import order_dependent_kernels

    why = "scatter 's': updates that meet are combined by add (f32) in the order they arrive"
    atomic = KernelThunk(
        "scatter_1", "scatter_1", [S(0, 0, 16)], (1, 1, 1), (32, 1, 1), order_dependence=why
    )
    assert "order_dependence" not in KERNEL.to_json()  # absent: older artefacts read alike
    again = thunk_from_json(json.loads(json.dumps(atomic.to_json())))
    assert again == atomic and again.order_dependence == why
    program = [KERNEL, WhileThunk([KERNEL], S(3, 0, 1), [atomic, atomic])]
    assert order_dependent_kernels(program) == [("scatter_1", why)]
    assert order_dependent_kernels([KERNEL, COPY]) == []
    with pytest.raises(ThunkError, match="order_dependence: expected a string or null"):
        thunk_from_json({**atomic.to_json(), "order_dependence": 3})
