"""input_output_alias: parsed, printed back, refused where the entry cannot honour it, and
honoured by copy insertion and buffer assignment (the donated output's bytes are its
parameter's; copies only where the parameter's old value is still read)."""

from __future__ import annotations

import pytest

from heron.hlo.errors import HloParseError, HloVerifyError
from heron.hlo.input_output_alias import AliasEntry, input_output_aliases
from heron.hlo.parser import parse_module
from heron.hlo.passes import pass_named, run_pipeline
from heron.hlo.passes.manager import pipeline_of
from heron.hlo.printer import print_module
from heron.hlo.shapes import TupleShape
from heron.hlo.verifier import verify_module

ALIAS = "{ {0}: (0, {}, may-alias), {1}: (1, {}) }"


def _module(body: str, alias: str = ALIAS) -> str:
    return f"HloModule m, input_output_alias={alias}\n\nENTRY main {{\n{body}\n}}\n"


TWO = """  a = f32[8]{0} parameter(0)
  b = f32[8]{0} parameter(1)
  s = s32[4]{0} parameter(2)
  x = f32[8]{0} add(a, b)
  ROOT t = (f32[8]{0}, f32[8]{0}) tuple(x, a)"""


def test_the_alias_is_kept_and_prints_back() -> None:
    module = parse_module(_module(TWO))
    assert input_output_aliases(module) == (
        AliasEntry((0,), 0, (), "may-alias"),
        AliasEntry((1,), 1, (), None),
    )
    text = print_module(module)
    assert f"input_output_alias={ALIAS}" in text.splitlines()[0]
    assert parse_module(text) == module


@pytest.mark.parametrize(
    ("alias", "message"),
    [
        ("{ {2}: (0, {}, may-alias) }", r"has no output \{2\}"),
        ("{ {0}: (7, {}, may-alias) }", "has no parameter 7"),
        ("{ {0}: (0, {1}, may-alias) }", r"parameter 0 \(f32\[8\]\{0\}\) has no shape index \{1\}"),
        ("{ {0}: (2, {}, may-alias) }", "must have its parameter's element type and dimensions"),
        ("{ {0}: (0, {}), {1}: (0, {}) }", r"parameter 0 \{\} is already aliased by output \{0\}"),
        ("{ {0}: (0, {}), {0}: (1, {}) }", r"output \{0\} is aliased twice"),
    ],
)
def test_an_alias_the_entry_cannot_honour_is_refused(alias: str, message: str) -> None:
    with pytest.raises(HloVerifyError, match=message) as error:
        parse_module(_module(TWO, alias))
    assert "input_output_alias entry" in str(error.value)
    assert error.value.location is not None and error.value.location.line == 1


COLUMN_MAJOR_RESULT = """HloModule m, input_output_alias={ {0}: (0, {}, may-alias) }, \
entry_computation_layout={(f32[4,6]{1,0}, f32[4,6]{1,0})->(f32[4,6]{0,1})}

ENTRY main {
  a = f32[4,6]{1,0} parameter(0)
  b = f32[4,6]{1,0} parameter(1)
  x = f32[4,6]{0,1} add(a, b)
  ROOT t = (f32[4,6]{0,1}) tuple(x)
}
""".replace("\\\n", "")


def test_an_aliased_output_takes_its_parameter_s_layout() -> None:
    # jax declares some results of an optax step column-major over row-major parameters:
    # the result lives in the parameter's bytes, so layout assignment lays it out so.
    module = parse_module(COLUMN_MAJOR_RESULT)
    run_pipeline(module, pipeline_of([pass_named("layout-assignment")]))
    root = module.entry.root_instruction
    (copy,) = root.operands
    assert copy.opcode == "copy" and str(copy.shape) == "f32[4,6]{1,0}"
    assert str(root.shape) == "(f32[4,6]{1,0})"
    # From then on the verifier holds the two to one layout.
    copy.shape = module.entry.instruction("x").shape
    root.shape = TupleShape((copy.shape,))
    with pytest.raises(HloVerifyError, match="different layouts"):
        verify_module(module)


def test_an_unknown_alias_kind_is_a_parse_error() -> None:
    with pytest.raises(HloParseError, match="kind 'maybe' is not one of may-alias, must-alias"):
        parse_module(_module(TWO, "{ {0}: (0, {}, maybe) }"))


def test_the_verifier_catches_a_pass_that_breaks_the_alias() -> None:
    from heron.hlo.verifier import verify_module

    module = parse_module(_module(TWO))
    entry = module.entry
    entry.root = entry.instruction("x")  # the result is no tuple any more
    with pytest.raises(HloVerifyError, match=r"has no output \{0\}"):
        verify_module(module)


def _copies(module) -> list[str]:
    return [i.operands[0].name for i in module.entry.instructions if i.opcode == "copy"]


UPDATE = """  p = f32[8]{0} parameter(0)
  i = s32[] parameter(1)
  u = f32[2]{0} constant({1, 2})
  d = f32[8]{0} dynamic-update-slice(p, u, i)
"""


def test_an_update_of_a_donated_parameter_is_in_place(check_buffers) -> None:
    module = parse_module(
        _module(
            UPDATE + "  ROOT t = (f32[8]{0}) tuple(d)",
            "{ {0}: (0, {}, must-alias) }",
        )
    )
    assignment = check_buffers(module)
    assert _copies(module) == []
    (donated,) = [a for a in assignment.allocations if a.kind == "parameter" and a.live_out]
    assert donated.parameter_number == 0
    assert not [a for a in assignment.allocations if a.kind == "output"]


def test_a_reader_of_the_old_value_runs_first_or_gets_a_copy(check_buffers) -> None:
    # The reduction of p can run before the update: ordered, no copy.
    module = parse_module(
        _module(
            UPDATE + "  z = f32[] constant(0)\n"
            "  s = f32[] reduce(p, z), dimensions={0}, to_apply=add\n"
            "  ROOT t = (f32[8]{0}, f32[]) tuple(d, s)",
            "{ {0}: (0, {}) }",
        ).replace(
            "ENTRY",
            "add {\n  x = f32[] parameter(0)\n  y = f32[] parameter(1)\n"
            "  ROOT r = f32[] add(x, y)\n}\n\nENTRY",
        )
    )
    check_buffers(module)
    assert _copies(module) == []
    assert module.entry.instruction("d").attributes["control-predecessors"].names == ("s",)
    # A reader that needs the update too cannot run first: the old value is copied.
    module = parse_module(
        _module(
            UPDATE + "  n = f32[8]{0} add(d, p)\n  ROOT t = (f32[8]{0}, f32[8]{0}) tuple(d, n)",
            "{ {0}: (0, {}) }",
        )
    )
    check_buffers(module)
    assert "p" in _copies(module)


@pytest.mark.parametrize(
    ("root", "copied"),
    [
        ("tuple(q, p)", {"q", "p"}),  # another parameter, and the donated one elsewhere
        ("tuple(c, q)", {"c", "q"}),  # a constant
        ("tuple(p, q)", {"q"}),  # the donated parameter, unchanged: its bytes already
        ("tuple(r, q)", {"r", "q"}),  # reads p at other elements: written after, by a copy
        ("tuple(e, p)", {"p"}),  # elementwise: written over p after p's copy reads it
    ],
)
def test_outputs_that_cannot_be_written_into_the_parameter_are_copied(
    check_buffers, root: str, copied: set[str]
) -> None:
    body = (
        "  p = f32[8]{0} parameter(0)\n  q = f32[8]{0} parameter(1)\n"
        "  c = f32[8]{0} constant({1, 2, 3, 4, 5, 6, 7, 8})\n"
        "  r = f32[8]{0} reverse(p), dimensions={0}\n  e = f32[8]{0} exponential(p)\n"
        f"  ROOT t = (f32[8]{{0}}, f32[8]{{0}}) {root}"
    )
    module = parse_module(_module(body, "{ {0}: (0, {}) }"))
    check_buffers(module)
    assert set(_copies(module)) == copied


LOOP = """
cond {
  s = (s32[], f32[8]{0}) parameter(0)
  i = s32[] get-tuple-element(s), index=0
  n = s32[] constant(3)
  ROOT lt = pred[] compare(i, n), direction=LT
}

body {
  s = (s32[], f32[8]{0}) parameter(0)
  i = s32[] get-tuple-element(s), index=0
  one = s32[] constant(1)
  j = s32[] add(i, one)
  x = f32[8]{0} get-tuple-element(s), index=1
  y = f32[8]{0} exponential(x)
  ROOT t = (s32[], f32[8]{0}) tuple(j, y)
}

ENTRY main {
  p = f32[8]{0} parameter(0)
  k = s32[] parameter(1)
  init = (s32[], f32[8]{0}) tuple(k, p)
  w = (s32[], f32[8]{0}) while(init), condition=cond, body=body
  ROOT r = f32[8]{0} get-tuple-element(w), index=1
}
"""


def test_a_loop_carrying_a_donated_parameter_runs_in_its_bytes(check_buffers) -> None:
    module = parse_module("HloModule m, input_output_alias={ {}: (0, {}) }\n" + LOOP)
    assignment = check_buffers(module)
    assert _copies(module) == ["k"]  # the counter: a parameter not donated
    state = assignment.leaf_slices(module.entry.instruction("w"))[1]
    parameter = assignment.leaf_slices(module.entry.instruction("p"))[0]
    assert state == parameter


def test_copy_insertion_then_the_scheduler_verify_with_the_alias() -> None:
    module = parse_module(_module(TWO))
    run_pipeline(module, pipeline_of([pass_named("copy-insertion"), pass_named("scheduler")]))
    assert input_output_aliases(module)


MOMENT = """HloModule m, input_output_alias={{ {{0}}: (0, {{}}), {{1}}: (1, {{}}) }}

fused {{
  m = f32[8]{{0}} parameter(0)
  w = f32[8]{{0}} parameter(1)
  g = f32[8]{{0}} parameter(2)
  c = f32[] constant(0.9)
  b = f32[8]{{0}} broadcast(c), dimensions={{}}
  k = f32[8]{{0}} multiply(m, b)
  n = f32[8]{{0}} add(k, g)
  u = f32[8]{{0}} subtract(w, n){extra}
  ROOT t = (f32[8]{{0}}, f32[8]{{0}}) tuple(n, u)
}}

ENTRY main {{
  m0 = f32[8]{{0}} parameter(0)
  w0 = f32[8]{{0}} parameter(1)
  g0 = f32[8]{{0}} parameter(2)
  f = (f32[8]{{0}}, f32[8]{{0}}) fusion(m0, w0, g0), kind={kind}, calls=fused
  n0 = f32[8]{{0}} get-tuple-element(f), index=0
  u0 = f32[8]{{0}} get-tuple-element(f), index=1
  ROOT r = (f32[8]{{0}}, f32[8]{{0}}) tuple(n0, u0)
}}
"""


@pytest.mark.parametrize(
    ("kind", "extra", "copied"),
    [
        # An optimizer step: the moment m is read by its own update n and, through n, by
        # the parameter's u; the loop emitter computes both roots of an element before it
        # stores either, so both are written in place.
        ("kLoop", "", set()),
        # Another emitter's fusion (a hero besides the elementwise ops) promises no order.
        ("kLoop", "\n  x = f32[8]{0} reverse(g), dimensions={0}", {"f"}),
        ("kInput", "", {"f"}),
    ],
)
def test_outputs_of_one_fusion_written_over_inputs_its_roots_share(
    check_buffers, kind: str, extra: str, copied: set[str]
) -> None:
    module = parse_module(MOMENT.format(kind=kind, extra=extra))
    check_buffers(module)
    copies = {
        i.operands[0].operands[0].name for i in module.entry.instructions if i.opcode == "copy"
    }
    assert copies == copied
