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


MIXING = """
mix {
  a = u32[2]{0} parameter(0)
  b = u32[2]{0} parameter(1)
  r = u32[4]{0} parameter(2)
  s = u32[1]{0} slice(r), slice={[0:1]}
  c = u32[] bitcast(s)
  cc = u32[2]{0} broadcast(c), dimensions={}
  x = u32[2]{0} add(A_READ, b)
  y = u32[2]{0} xor(b, cc)
  z = u32[2]{0} add(x, y)
  ROOT t = (u32[2]{0}, u32[2]{0}) tuple(x, z)
}

body {
  s = (s32[], u32[2]{0}, u32[2]{0}, u32[4]{0}) parameter(0)
  k = s32[] get-tuple-element(s), index=0
  a = u32[2]{0} get-tuple-element(s), index=1
  b = u32[2]{0} get-tuple-element(s), index=2
  r = u32[4]{0} get-tuple-element(s), index=3
  one = s32[] constant(1)
  k2 = s32[] add(k, one)
  f = (u32[2]{0}, u32[2]{0}) fusion(a, b, r), kind=kLoop, calls=mix
  f0 = u32[2]{0} get-tuple-element(f), index=0
  f1 = u32[2]{0} get-tuple-element(f), index=1
  ROOT n = (s32[], u32[2]{0}, u32[2]{0}, u32[4]{0}) tuple(k2, f0, f1, r)
}

cond {
  s = (s32[], u32[2]{0}, u32[2]{0}, u32[4]{0}) parameter(0)
  k = s32[] get-tuple-element(s), index=0
  three = s32[] constant(3)
  ROOT lt = pred[] compare(k, three), direction=LT
}

"""

MIXING_LOOP = (
    "  p = u32[2]{0} parameter(0)\n  q = u32[2]{0} parameter(1)\n"
    "  r = u32[4]{0} constant({13, 15, 26, 6})\n  zero = s32[] constant(0)\n"
    "  g = (u32[2]{0}, u32[2]{0}) fusion(p, q, r), kind=kLoop, calls=mix\n"
    "  g0 = u32[2]{0} get-tuple-element(g), index=0\n"
    "  g1 = u32[2]{0} get-tuple-element(g), index=1\n"
    "  init = (s32[], u32[2]{0}, u32[2]{0}, u32[4]{0}) tuple(zero, g0, g1, r)\n"
    "  l = (s32[], u32[2]{0}, u32[2]{0}, u32[4]{0}) while(init), condition=cond, body=body\n"
    "  l1 = u32[2]{0} get-tuple-element(l), index=1\n"
    "  l2 = u32[2]{0} get-tuple-element(l), index=2\n"
    "  ROOT o = (u32[2]{0}, u32[2]{0}) tuple(l1, l2)"
)


@pytest.mark.parametrize(("a_read", "copied"), [("a", []), ("ra", [1, 2])])
def test_a_multi_output_fusions_leaves_go_into_the_loop_state_without_copies(
    check_buffers, a_read: str, copied: list[int]
) -> None:
    # Threefry's round: one loop fusion computes both new key words from both old ones.
    # Each thread computes both roots of an element before storing either, reading the
    # old words element by element: the leaves are written over the old words in place
    # (rule 2), as they start the loop from the entry's fusion (rule 1). A root that
    # reads its old word at another element (a reverse) gets a copy; so does the other
    # root, which reads the first's old word: heron promises roots written together
    # only for fusions of elementwise ops, slices, bitcasts and broadcasts.
    mixing = MIXING.replace("A_READ", a_read)
    if a_read == "ra":
        mixing = mixing.replace(
            "  x = u32[2]", "  ra = u32[2]{0} reverse(a), dimensions={0}\n  x = u32[2]"
        )
    module = parse_module(_entry(MIXING_LOOP, mixing))
    insert_copies(module)
    init = module.entry.instruction("l").operands[0]
    assert [o.opcode for o in init.operands] == [
        "copy",
        "get-tuple-element",
        "get-tuple-element",
        "copy",
    ]
    root = module.computation("body").root_instruction
    assert [k for k, o in enumerate(root.operands) if o.opcode == "copy"] == copied
    check_buffers(module)


def test_a_leaf_read_twice_goes_into_a_loop_as_a_copy(check_buffers) -> None:
    # A second get-tuple-element of the same leaf reads the bytes the loop would write.
    text = MIXING_LOOP.replace(
        "  ROOT o = (u32[2]{0}, u32[2]{0}) tuple(l1, l2)",
        "  h0 = u32[2]{0} get-tuple-element(g), index=0\n"
        "  ROOT o = (u32[2]{0}, u32[2]{0}, u32[2]{0}) tuple(l1, l2, h0)",
    )
    module = parse_module(_entry(text, MIXING.replace("A_READ", "a")))
    insert_copies(module)
    init = module.entry.instruction("l").operands[0]
    assert [o.opcode for o in init.operands] == ["copy", "copy", "get-tuple-element", "copy"]
    check_buffers(module)


INNER_LOOP_ON_AN_ELEMENT = """
update {
  a = f32[4,8]{1,0} parameter(0)
  u = f32[1,8]{1,0} parameter(1)
  i = s32[] parameter(2)
  z = s32[] constant(0)
  n = f32[1,8]{1,0} negate(u)
  ROOT d = f32[4,8]{1,0} dynamic-update-slice(a, n, i, z)
}

inner_body {
  s = (s32[], f32[4,8]{1,0}) parameter(0)
  i = s32[] get-tuple-element(s), index=0
  one = s32[] constant(1)
  next = s32[] add(i, one)
  x = f32[4,8]{1,0} get-tuple-element(s), index=1
  ROOT r = (s32[], f32[4,8]{1,0}) tuple(next, x)
}

inner_cond {
  s = (s32[], f32[4,8]{1,0}) parameter(0)
  i = s32[] get-tuple-element(s), index=0
  n = s32[] constant(2)
  ROOT lt = pred[] compare(i, n), direction=LT
}

body {
  s = (s32[], f32[4,8]{1,0}, f32[4,8]{1,0}) parameter(0)
  i = s32[] get-tuple-element(s), index=0
  x = f32[4,8]{1,0} get-tuple-element(s), index=1
  y = f32[4,8]{1,0} get-tuple-element(s), index=2
  v = f32[1,8]{1,0} slice(x), slice={[0:1], [0:8]}
  f = f32[4,8]{1,0} fusion(x, v, i), kind=kLoop, calls=update
  zero = s32[] constant(0)
  init = (s32[], f32[4,8]{1,0}) tuple(zero, f)
  l = (s32[], f32[4,8]{1,0}) while(init), condition=inner_cond, body=inner_body
  out = f32[4,8]{1,0} get-tuple-element(l), index=1
  one = s32[] constant(1)
  next = s32[] add(i, one)
  ROOT r = (s32[], f32[4,8]{1,0}, f32[4,8]{1,0}) tuple(next, y, out)
}

cond {
  s = (s32[], f32[4,8]{1,0}, f32[4,8]{1,0}) parameter(0)
  i = s32[] get-tuple-element(s), index=0
  n = s32[] constant(2)
  ROOT lt = pred[] compare(i, n), direction=LT
}

"""


def test_a_loop_running_in_an_elements_bytes_is_read_before_the_element_is_written(
    check_buffers,
) -> None:
    # The inner loop runs in element 1's bytes (its init is an in-place update of them);
    # its result goes to element 2 while element 2's old value goes to element 1. Reading
    # the inner loop's result reads element 1's bytes: that read comes before element 1
    # is written (a random module found the two copies the other way round).
    module = parse_module(
        _entry(
            "  p = f32[4,8]{1,0} parameter(0)\n  zero = s32[] constant(0)\n"
            "  init = (s32[], f32[4,8]{1,0}, f32[4,8]{1,0}) tuple(zero, p, p)\n"
            "  l = (s32[], f32[4,8]{1,0}, f32[4,8]{1,0}) while(init), condition=cond, body=body\n"
            "  ROOT o = f32[4,8]{1,0} get-tuple-element(l), index=2",
            INNER_LOOP_ON_AN_ELEMENT,
        )
    )
    check_buffers(module)


def test_a_finished_loops_state_starts_the_next_loop_without_copies(check_buffers) -> None:
    # The first loop's result elements are bytes nothing else holds: the second loop
    # runs in them (XLA shares them too), where a parameter or a constant is copied.
    second = LOOP.replace("body {", "body2 {").replace("cond {", "cond2 {")
    module = parse_module(
        _entry(
            "  p = f32[8]{0} parameter(0)\n  zero = s32[] constant(0)\n"
            "  q = f32[8]{0} negate(p)\n  e = f32[8]{0} exponential(p)\n"
            "  init = (s32[], f32[8]{0}, f32[8]{0}) tuple(zero, q, e)\n"
            "  w = (s32[], f32[8]{0}, f32[8]{0}) while(init), condition=cond, body=body\n"
            "  w0 = s32[] get-tuple-element(w), index=0\n"
            "  w1 = f32[8]{0} get-tuple-element(w), index=1\n"
            "  w2 = f32[8]{0} get-tuple-element(w), index=2\n"
            "  again = (s32[], f32[8]{0}, f32[8]{0}) tuple(w0, w2, w1)\n"
            "  v = (s32[], f32[8]{0}, f32[8]{0}) while(again), condition=cond2, body=body2\n"
            "  ROOT a = f32[8]{0} get-tuple-element(v), index=1",
            LOOP + second,
        )
    )
    insert_copies(module)
    init = module.entry.instruction("v").operands[0]
    assert [o.opcode for o in init.operands] == ["get-tuple-element"] * 3
    check_buffers(module)


SCAN = """
body {
  s = (s32[], f32[8]{0}, f32[8]{0}) parameter(0)
  k = s32[] get-tuple-element(s), index=0
  h = f32[8]{0} get-tuple-element(s), index=1
  w = f32[8]{0} get-tuple-element(s), index=2
  one = s32[] constant(1)
  k2 = s32[] add(k, one)
  m = f32[8]{0} multiply(h, w)
  h2 = f32[8]{0} tanh(m)
  ROOT r = (s32[], f32[8]{0}, f32[8]{0}) tuple(k2, h2, W_NEXT)
}

cond {
  s = (s32[], f32[8]{0}, f32[8]{0}) parameter(0)
  k = s32[] get-tuple-element(s), index=0
  three = s32[] constant(3)
  ROOT lt = pred[] compare(k, three), direction=LT
}

"""


@pytest.mark.parametrize(
    ("w_next", "result", "copied"),
    [
        ("w", "h", False),  # the weights only read: the loop reads the caller's bytes
        ("w", "w", True),  # the loop's weights read after it: they would be the argument
        ("m", "h", True),  # the body writes the element
    ],
)
def test_a_parameter_the_loop_only_reads_is_not_copied_into_it(
    check_buffers, w_next: str, result: str, copied: bool
) -> None:
    index = {"h": 1, "w": 2}[result]
    module = parse_module(
        _entry(
            "  h0 = f32[8]{0} parameter(0)\n  w = f32[8]{0} parameter(1)\n"
            "  zero = s32[] constant(0)\n"
            "  init = (s32[], f32[8]{0}, f32[8]{0}) tuple(zero, h0, w)\n"
            "  l = (s32[], f32[8]{0}, f32[8]{0}) while(init), condition=cond, body=body\n"
            f"  ROOT o = f32[8]{{0}} get-tuple-element(l), index={index}",
            SCAN.replace("W_NEXT", w_next),
        )
    )
    insert_copies(module)
    init = module.entry.instruction("l").operands[0]
    assert (init.operands[2].opcode == "copy") is copied
    assert init.operands[1].opcode == "copy"  # h0: the body writes it
    assignment = check_buffers(module)
    if not copied:
        weights = module.entry.instruction("w")
        assert assignment.leaf_slices(weights) == assignment.leaf_slices(init.operands[2])


STACKING = """
stack {
  ys = f32[4,8]{1,0} parameter(0)
  zs = f32[4,8]{1,0} parameter(1)
  h = f32[1,8]{1,0} parameter(2)
  i = s32[] parameter(3)
  z = s32[] constant(0)
  n = f32[1,8]{1,0} negate(h)
  y = f32[4,8]{1,0} dynamic-update-slice(ys, h, i, z)
  w = f32[4,8]{1,0} dynamic-update-slice(zs, n, i, z)
  ROOT t = (f32[4,8]{1,0}, f32[4,8]{1,0}) tuple(y, w)
}

step {
  a = f32[8]{0} parameter(0)
  ROOT e = f32[8]{0} exponential(a)
}

body {
  s = (s32[], f32[8]{0}, f32[4,8]{1,0}, f32[4,8]{1,0}) parameter(0)
  k = s32[] get-tuple-element(s), index=0
  h = f32[8]{0} get-tuple-element(s), index=1
  ys = f32[4,8]{1,0} get-tuple-element(s), index=2
  zs = f32[4,8]{1,0} get-tuple-element(s), index=3
  one = s32[] constant(1)
  k2 = s32[] add(k, one)
  h2 = f32[8]{0} fusion(h), kind=kLoop, calls=step
  row = f32[1,8]{1,0} bitcast(h2)
  f = (f32[4,8]{1,0}, f32[4,8]{1,0}) fusion(ys, zs, row, k), kind=kLoop, calls=stack
  f0 = f32[4,8]{1,0} get-tuple-element(f), index=0
  f1 = f32[4,8]{1,0} get-tuple-element(f), index=1
  ROOT r = (s32[], f32[8]{0}, f32[4,8]{1,0}, f32[4,8]{1,0}) tuple(k2, h2, f0, f1)
}

cond {
  s = (s32[], f32[8]{0}, f32[4,8]{1,0}, f32[4,8]{1,0}) parameter(0)
  k = s32[] get-tuple-element(s), index=0
  four = s32[] constant(4)
  ROOT lt = pred[] compare(k, four), direction=LT
}

"""


@pytest.mark.parametrize("swapped", [False, True])
def test_a_scans_stacked_outputs_are_updated_in_place_without_copies(
    check_buffers, swapped: bool
) -> None:
    # One multi-output fusion writes both stacked outputs of a scan step in place (a
    # dynamic-update-slice root per leaf): each leaf is its state element's bytes, so
    # the new state is already where it goes (copying it would copy bytes onto
    # themselves). Swapped into each other's elements, each leaf is the other
    # element's bytes, not its own: both are copied (a random module found the
    # leaves taken for bytes of their own).
    stacking = (
        STACKING.replace("tuple(k2, h2, f0, f1)", "tuple(k2, h2, f1, f0)") if swapped else STACKING
    )
    module = parse_module(
        _entry(
            "  h0 = f32[8]{0} parameter(0)\n  zero = s32[] constant(0)\n"
            "  fz = f32[] constant(0)\n  ys = f32[4,8]{1,0} broadcast(fz), dimensions={}\n"
            "  zs = f32[4,8]{1,0} broadcast(fz), dimensions={}\n"
            "  init = (s32[], f32[8]{0}, f32[4,8]{1,0}, f32[4,8]{1,0}) tuple(zero, h0, ys, zs)\n"
            "  l = (s32[], f32[8]{0}, f32[4,8]{1,0}, f32[4,8]{1,0}) while(init),"
            " condition=cond, body=body\n"
            "  a = f32[4,8]{1,0} get-tuple-element(l), index=2\n"
            "  b = f32[4,8]{1,0} get-tuple-element(l), index=3\n"
            "  ROOT o = (f32[4,8]{1,0}, f32[4,8]{1,0}) tuple(a, b)",
            stacking,
        )
    )
    insert_copies(module)
    body = module.computation("body")
    root = body.root_instruction
    assert [o.opcode == "copy" for o in root.operands[2:]] == [swapped, swapped]
    assignment = check_buffers(module)
    state = body.parameters[0]
    for leaf, element in ((0, 2), (1, 3)):
        fused = body.instruction(f"f{leaf}")
        assert assignment.leaf_slices(fused) == [assignment.leaf_slices(state)[element]]


CG_STEP = """
sum {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}

step {
  p = f32[2]{0} parameter(0)
  w = f32[2]{0} parameter(1)
  x = f32[2]{0} parameter(2)
  zero = f32[] constant(0)
  pw = f32[2]{0} multiply(p, w)
  d = f32[] reduce(pw, zero), dimensions={0}, to_apply=sum
  db = f32[2]{0} broadcast(d), dimensions={}
  dp = f32[2]{0} multiply(db, p)
  x2 = f32[2]{0} add(x, dp)
  ROOT t = (f32[], f32[2]{0}) tuple(d, x2)
}

body {
  s = (s32[], f32[2]{0}, f32[2]{0}) parameter(0)
  k = s32[] get-tuple-element(s), index=0
  p = f32[2]{0} get-tuple-element(s), index=1
  x = f32[2]{0} get-tuple-element(s), index=2
  one = s32[] constant(1)
  k2 = s32[] add(k, one)
  f = (f32[], f32[2]{0}) fusion(p, p, x), kind=KIND, calls=step
  x2 = f32[2]{0} get-tuple-element(f), index=1
  ROOT r = (s32[], f32[2]{0}, f32[2]{0}) tuple(k2, p, x2)
}

cond {
  s = (s32[], f32[2]{0}, f32[2]{0}) parameter(0)
  k = s32[] get-tuple-element(s), index=0
  three = s32[] constant(3)
  ROOT lt = pred[] compare(k, three), direction=LT
}

"""


@pytest.mark.parametrize(("kind", "copied"), [("kInput", True), ("kLoop", False)])
def test_a_reductions_epilogue_is_not_written_over_what_it_reads(
    check_buffers, kind: str, copied: bool
) -> None:
    # A conjugate-gradient step: x + (p.w) p. As a reduction fusion (kInput), every
    # thread of the row computes the epilogue and one stores it: written over x, the
    # other threads would read elements the storing thread overwrites (a library sweep
    # met the race on 2- and 4-unknown systems). Only a loop fusion's threads each
    # write what they read.
    module = parse_module(
        _entry(
            "  p0 = f32[2]{0} parameter(0)\n  x0 = f32[2]{0} parameter(1)\n"
            "  zero = s32[] constant(0)\n"
            "  init = (s32[], f32[2]{0}, f32[2]{0}) tuple(zero, p0, x0)\n"
            "  l = (s32[], f32[2]{0}, f32[2]{0}) while(init), condition=cond, body=body\n"
            "  ROOT o = f32[2]{0} get-tuple-element(l), index=2",
            CG_STEP.replace("KIND", kind),
        )
    )
    insert_copies(module)
    root = module.computation("body").root_instruction
    assert (root.operands[2].opcode == "copy") is copied
    check_buffers(module)
