"""copy-insertion and the heap: each rule on a module small enough to see what it did."""

from __future__ import annotations

import pytest

from heron.hlo.buffers import LiveRange, assign_buffers
from heron.hlo.buffers.heap import HeapRequest, place
from heron.hlo.errors import HloVerifyError, UnsupportedError
from heron.hlo.parser import parse_module
from heron.hlo.passes.copy_insertion import insert_copies
from heron.hlo.passes.scheduler import schedule_module

HEADER = "HloModule m\n\n"


def _entry(body: str, extra: str = "") -> str:
    return HEADER + extra + "ENTRY main {\n" + body + "\n}\n"


def _ops(module, computation: str = "main") -> list[str]:
    return [i.opcode for i in module.computation(computation).instructions]


UPDATE = """
  p = f32[8]{0} parameter(0)
  i = s32[] parameter(1)
  u = f32[2]{0} constant({1, 2})
"""


def test_update_of_a_parameter_goes_through_a_copy(check_buffers) -> None:
    module = parse_module(_entry(UPDATE + "  ROOT d = f32[8]{0} dynamic-update-slice(p, u, i)"))
    assert insert_copies(module)
    (update,) = [i for i in module.entry.instructions if i.opcode == "dynamic-update-slice"]
    assert update.operands[0].opcode == "copy" and update.operands[0].operands[0].name == "p"
    check_buffers(module)


def test_update_of_a_value_of_its_own_shares_its_bytes(check_buffers) -> None:
    module = parse_module(
        _entry(
            UPDATE
            + "  e = f32[8]{0} exponential(p)\n  ROOT d = f32[8]{0} dynamic-update-slice(e, u, i)"
        )
    )
    assert not insert_copies(module)
    assignment = check_buffers(module)
    entry = module.entry
    assert assignment.leaf_slices(entry.instruction("e")) == assignment.leaf_slices(
        entry.instruction("d")
    )


def test_a_later_reader_runs_before_the_update() -> None:
    module = parse_module(
        _entry(
            UPDATE + "  e = f32[8]{0} exponential(p)\n"
            "  d = f32[8]{0} dynamic-update-slice(e, u, i)\n"
            "  n = f32[8]{0} negate(e)\n"
            "  ROOT t = (f32[8]{0}, f32[8]{0}) tuple(d, n)"
        )
    )
    assert insert_copies(module)
    update = module.entry.instruction("d")
    assert update.operands[0].name == "e"
    assert update.attributes["control-predecessors"].names == ("n",)
    schedule_module(module)
    order = [i.name for i in module.entry.instructions]
    assert order.index("n") < order.index("d")


def test_a_reader_that_needs_the_update_forces_a_copy(check_buffers) -> None:
    module = parse_module(
        _entry(
            UPDATE + "  e = f32[8]{0} exponential(p)\n"
            "  d = f32[8]{0} dynamic-update-slice(e, u, i)\n"
            "  ROOT n = f32[8]{0} add(e, d)"
        )
    )
    insert_copies(module)
    assert module.entry.instruction("d").operands[0].opcode == "copy"
    check_buffers(module)


def test_an_in_place_fusion_shares_its_operands_bytes(check_buffers) -> None:
    fused = (
        "fused {\n  a = f32[8]{0} parameter(0)\n  b = f32[2]{0} parameter(1)\n"
        "  j = s32[] parameter(2)\n  ROOT x = f32[8]{0} dynamic-update-slice(a, b, j)\n}\n\n"
    )
    module = parse_module(
        _entry(
            UPDATE + "  e = f32[8]{0} exponential(p)\n"
            "  ROOT f = f32[8]{0} fusion(e, u, i), kind=kLoop, calls=fused",
            fused,
        )
    )
    assignment = check_buffers(module)
    entry = module.entry
    assert "copy" not in _ops(module)
    assert assignment.leaf_slices(entry.instruction("f")) == assignment.leaf_slices(
        entry.instruction("e")
    )


def test_outputs_are_never_parameters_constants_or_twice_the_same(check_buffers) -> None:
    module = parse_module(
        _entry(
            UPDATE + "  e = f32[8]{0} exponential(p)\n  ROOT t = (f32[8]{0}, f32[2]{0},"
            " f32[8]{0}, f32[8]{0}) tuple(p, u, e, e)"
        )
    )
    insert_copies(module)
    root = module.entry.root_instruction
    assert [o.opcode for o in root.operands] == ["copy", "copy", "exponential", "copy"]
    assignment = check_buffers(module)
    assert [a.kind for a in assignment.allocations].count("output") == 4


LOOP = """
body {
  s = (s32[], f32[8]{0}, f32[8]{0}) parameter(0)
  k = s32[] get-tuple-element(s), index=0
  a = f32[8]{0} get-tuple-element(s), index=1
  b = f32[8]{0} get-tuple-element(s), index=2
  one = s32[] constant(1)
  k2 = s32[] add(k, one)
  ROOT r = (s32[], f32[8]{0}, f32[8]{0}) tuple(k2, b, a)
}

cond {
  s = (s32[], f32[8]{0}, f32[8]{0}) parameter(0)
  k = s32[] get-tuple-element(s), index=0
  three = s32[] constant(3)
  ROOT lt = pred[] compare(k, three), direction=LT
}

"""


def test_a_loop_that_swaps_its_state_copies_it(check_buffers) -> None:
    module = parse_module(
        _entry(
            "  p = f32[8]{0} parameter(0)\n  zero = s32[] constant(0)\n"
            "  q = f32[8]{0} negate(p)\n"
            "  init = (s32[], f32[8]{0}, f32[8]{0}) tuple(zero, p, q)\n"
            "  w = (s32[], f32[8]{0}, f32[8]{0}) while(init), condition=cond, body=body\n"
            "  ROOT a = f32[8]{0} get-tuple-element(w), index=1",
            LOOP,
        )
    )
    insert_copies(module)
    init = module.entry.instruction("w").operands[0]
    # zero is a constant and p a parameter: copied; q is a value of its own, only the loop's.
    assert [o.opcode for o in init.operands] == ["copy", "copy", "negate"]
    root = module.computation("body").root_instruction
    assert [o.opcode for o in root.operands] == ["add", "copy", "copy"]
    check_buffers(module)


def test_assignment_refuses_an_unprepared_module() -> None:
    module = parse_module(_entry(UPDATE + "  ROOT d = f32[8]{0} dynamic-update-slice(p, u, i)"))
    with pytest.raises(HloVerifyError, match="run copy insertion"):
        assign_buffers(module, alignment=16)
    insert_copies(module)
    entry = module.entry
    entry.instructions = list(reversed(entry.instructions))
    with pytest.raises(HloVerifyError, match="not scheduled"):
        assign_buffers(module, alignment=16)


def test_nested_tuple_loop_state_is_refused_by_name() -> None:
    text = (
        HEADER
        + "b {\n  s = (f32[2]{0}, (f32[2]{0})) parameter(0)\n  ROOT r = (f32[2]{0}, (f32[2]{0}))"
        " copy(s)\n}\n\nc {\n  s = (f32[2]{0}, (f32[2]{0})) parameter(0)\n"
        "  ROOT f = pred[] constant(false)\n}\n\nENTRY main {\n  p = f32[2]{0} parameter(0)\n"
        "  i = (f32[2]{0}) tuple(p)\n  t = (f32[2]{0}, (f32[2]{0})) tuple(p, i)\n"
        "  ROOT w = (f32[2]{0}, (f32[2]{0})) while(t), condition=c, body=b\n}\n"
    )
    with pytest.raises(UnsupportedError, match="while 'w' carries nested tuples"):
        insert_copies(parse_module(text))


def test_heap_reuses_bytes_of_dead_buffers_at_aligned_offsets() -> None:
    requests = [
        HeapRequest(0, 100, LiveRange(0, 3)),
        HeapRequest(1, 100, LiveRange(4, 6)),  # after 0 dies: same bytes
        HeapRequest(2, 10, LiveRange(2, 5)),  # beside both
    ]
    chunks, size = place(requests, alignment=64)
    assert chunks[0].offset == chunks[1].offset == 0
    assert chunks[2].offset == 128 and size == 138
    with pytest.raises(UnsupportedError, match="alignment"):
        place(requests, alignment=0)


def test_a_control_predecessor_cycle_is_refused_by_name() -> None:
    module = parse_module(
        _entry(
            "  p = f32[8]{0} parameter(0)\n  a = f32[8]{0} negate(p), control-predecessors={b}\n"
            "  b = f32[8]{0} exponential(a)\n  ROOT r = f32[8]{0} add(a, b)"
        )
    )
    with pytest.raises(HloVerifyError, match="cannot be scheduled: '(a|b)' depends on itself"):
        schedule_module(module)


STATE_WRITER = """
reversing {
  v = f32[8]{0} parameter(0)
  ROOT r = f32[8]{0} reverse(v), dimensions={0}
}

exponential {
  v = f32[8]{0} parameter(0)
  ROOT e = f32[8]{0} exponential(v)
}

body {
  s = (s32[], f32[8]{0}) parameter(0)
  k = s32[] get-tuple-element(s), index=0
  a = f32[8]{0} get-tuple-element(s), index=1
  one = s32[] constant(1)
  k2 = s32[] add(k, one)
  w = f32[8]{0} fusion(a), kind=kLoop, calls=WRITER
  ROOT r = (s32[], f32[8]{0}) tuple(k2, w)
}

cond {
  s = (s32[], f32[8]{0}) parameter(0)
  k = s32[] get-tuple-element(s), index=0
  three = s32[] constant(3)
  ROOT lt = pred[] compare(k, three), direction=LT
}

"""

STATE_LOOP = (
    "  p = f32[8]{0} parameter(0)\n  zero = s32[] constant(0)\n"
    "  q = f32[8]{0} negate(p)\n"
    "  init = (s32[], f32[8]{0}) tuple(zero, q)\n"
    "  l = (s32[], f32[8]{0}) while(init), condition=cond, body=body\n"
    "  ROOT a = f32[8]{0} get-tuple-element(l), index=1"
)


@pytest.mark.parametrize(("writer", "in_place"), [("exponential", True), ("reversing", False)])
def test_a_state_writer_reads_its_old_element_in_place_only_element_by_element(
    check_buffers, writer: str, in_place: bool
) -> None:
    # The new state element is written into the loop's buffer for that element,
    # which holds the old one. A kernel reading it element by element (exp) may
    # write over it; one reading it at the mirrored index (reverse) would read
    # elements another thread has already written, so its result is copied in.
    module = parse_module(_entry(STATE_LOOP, STATE_WRITER.replace("WRITER", writer)))
    insert_copies(module)
    body = module.computation("body")
    element = body.root_instruction.operands[1]
    assert element.opcode == ("fusion" if in_place else "copy")
    assignment = check_buffers(module)
    state = assignment.leaf_slices(body.instruction("a"))
    written = assignment.leaf_slices(body.instruction("w"))
    assert (state == written) is in_place
    if not in_place:  # the copy runs after the kernel that read the old element
        order = [i.name for i in body.instructions]
        assert order.index("w") < order.index(element.name)
        assert assignment.leaf_slices(element) == state


def test_only_elementwise_reads_may_share_an_operands_bytes() -> None:
    from heron.hlo.passes.copy_insertion import reads_in_place

    module = parse_module(
        _entry(
            "  x = f32[8]{0} parameter(0)\n  y = f32[8]{0} parameter(1)\n"
            "  m = f32[2,4]{1,0} parameter(2)\n"
            "  f = f32[8]{0} fusion(x, y), kind=kLoop, calls=mixed\n"
            "  e = f32[8]{0} exponential(x)\n"
            "  t = f32[4,2]{0,1} transpose(m), dimensions={1,0}\n"
            "  ROOT o = (f32[8]{0}, f32[8]{0}, f32[4,2]{0,1}) tuple(f, e, t)",
            "mixed {\n  a = f32[8]{0} parameter(0)\n  b = f32[8]{0} parameter(1)\n"
            "  r = f32[8]{0} reverse(a), dimensions={0}\n"
            "  ROOT s = f32[8]{0} add(r, b)\n}\n\n",
        )
    )
    entry = module.entry
    fused = entry.instruction("f")
    assert not reads_in_place(fused, 0)  # x is read at the mirrored index
    assert reads_in_place(fused, 1)  # y element by element
    assert reads_in_place(entry.instruction("e"), 0)
    assert not reads_in_place(entry.instruction("t"), 0)  # another shape
