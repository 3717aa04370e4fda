"""Malformed HLO text: an HloParseError at the right file:line:col, with a caret."""

from __future__ import annotations

import random

import pytest

from heron.hlo import parser as parser_module
from heron.hlo.errors import HloParseError
from heron.hlo.ir import structural_difference
from heron.hlo.parser import parse_module, parse_shape

GOOD = """HloModule m

add {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT c = f32[] add(a, b)
}

ENTRY main {
  p = f32[4]{0} parameter(0)
  z = f32[] constant(0)
  ROOT r = f32[] reduce(p, z), dimensions={0}, to_apply=add
}
"""


@pytest.fixture(params=["fast", "grammar"], autouse=True)
def both_paths(request, monkeypatch):
    monkeypatch.setattr(parser_module, "_USE_FAST_PATH", request.param == "fast")


def parse_error(text: str) -> HloParseError:
    with pytest.raises(HloParseError) as info:
        parse_module(text, "bad.hlo")
    return info.value


def check(error: HloParseError, message: str, line: int, column: int, line_text: str) -> None:
    assert message in error.message
    loc = error.location
    assert (loc.file, loc.line, loc.column) == ("bad.hlo", line, column), str(error)
    assert loc.line_text == line_text
    shown = str(error)
    assert shown.startswith(f"bad.hlo:{line}:{column}: error: ")
    assert shown.endswith("\n  " + line_text + "\n  " + " " * (column - 1) + "^")


def edit(old: str, new: str) -> str:
    assert old in GOOD
    return GOOD.replace(old, new, 1)


def test_the_good_text_parses():
    assert parse_module(GOOD).entry.name == "main"


# -- truncated files -------------------------------------------------------------------


def test_end_of_file_inside_a_computation():
    text = GOOD[: GOOD.index("  ROOT r")]
    check(
        parse_error(text),
        "unexpected end of file: computation 'main' (line 9) is not closed",
        11,
        24,
        "  z = f32[] constant(0)",
    )


def test_end_of_file_inside_a_shape():
    text = GOOD[: GOOD.index("  ROOT r")] + "  ROOT r = f32[4"
    check(parse_error(text), "found end of file", 12, 17, "  ROOT r = f32[4")


def test_end_of_file_inside_a_tuple_shape():
    text = "f {\n  a = (f32[], s32["
    check(parse_error(text), "expected a dimension size", 2, 19, "  a = (f32[], s32[")
    text = "f {\n  a = (f32[], "
    check(parse_error(text), "inside a tuple shape", 2, 14, "  a = (f32[], ")


def test_end_of_file_inside_attribute_braces():
    text = GOOD[: GOOD.index("dimensions={0}") + len("dimensions={0")]
    check(
        parse_error(text),
        "unexpected end of file inside a list of integers",
        12,
        45,
        "  ROOT r = f32[] reduce(p, z), dimensions={0",
    )
    text = GOOD.replace("to_apply=add\n}\n", 'to_apply=add, metadata={op_name="x"')
    check(
        parse_error(text),
        "unexpected end of file inside {key=value ...}",
        12,
        83,
        '  ROOT r = f32[] reduce(p, z), dimensions={0}, to_apply=add, metadata={op_name="x"',
    )
    text = GOOD.replace("to_apply=add\n}\n", 'backend_config={"a": [1')
    line = '  ROOT r = f32[] reduce(p, z), dimensions={0}, backend_config={"a": [1'
    check(parse_error(text), "'[' opened at line 12 column 69 is never closed", 12, 71, line)


def test_end_of_file_in_operands_and_constants():
    check(
        parse_error("f {\n  a = f32[] parameter(0)\n  b = f32[] add(a,"),
        "unexpected end of file in the operands of 'b'",
        3,
        19,
        "  b = f32[] add(a,",
    )
    check(
        parse_error("f {\n  a = f32[3] constant({1, 2"),
        "inside an array constant",
        2,
        23,
        "  a = f32[3] constant({1, 2",
    )


def test_an_empty_file_has_no_computations():
    assert "no computations" in parse_error("").message
    assert "no computations" in parse_error("HloModule m\n// only a comment\n").message


# -- names -----------------------------------------------------------------------------


def test_unknown_opcode_with_a_hint():
    error = parse_error(edit("add(a, b)", "multipy(a, b)"))
    check(
        error,
        "unknown opcode 'multipy' (did you mean 'multiply'?)",
        6,
        18,
        "  ROOT c = f32[] multipy(a, b)",
    )


def test_unknown_opcode_without_a_hint():
    error = parse_error(edit("add(a, b)", "zzzzzzz(a, b)"))
    assert error.message == "unknown opcode 'zzzzzzz'"


def test_undefined_operand():
    check(
        parse_error(edit("add(a, b)", "add(a, bb)")),
        "undefined operand 'bb' of 'c' in computation 'add' (did you mean 'b'?)",
        6,
        25,
        "  ROOT c = f32[] add(a, bb)",
    )


def test_an_operand_of_another_computation_is_undefined():
    error = parse_error(edit("reduce(p, z)", "reduce(p, a)"))
    check(
        error,
        "undefined operand 'a' of 'r'",
        12,
        28,
        "  ROOT r = f32[] reduce(p, a), dimensions={0}, to_apply=add",
    )


def test_undefined_computation():
    check(
        parse_error(edit("to_apply=add", "to_apply=%addd")),
        "undefined computation 'addd' in to_apply= of 'r' (did you mean 'add'?)",
        12,
        57,
        "  ROOT r = f32[] reduce(p, z), dimensions={0}, to_apply=%addd",
    )


def test_undefined_control_predecessor():
    error = parse_error(edit("to_apply=add", "to_apply=add, control-predecessors={%q}"))
    assert "undefined control predecessor 'q'" in error.message
    assert error.location.column == 83


def test_duplicate_instruction_name():
    check(
        parse_error(edit("b = f32[] parameter(1)", "a = f32[] parameter(1)")),
        "duplicate instruction name 'a' in computation 'add' (first defined at line 4)",
        5,
        3,
        "  a = f32[] parameter(1)",
    )


def test_duplicate_computation_name():
    check(
        parse_error(edit("ENTRY main {", "ENTRY add {")),
        "duplicate computation name 'add' (first defined at line 3)",
        9,
        7,
        "ENTRY add {",
    )


def test_two_roots():
    check(
        parse_error(edit("  b = f32[]", "  ROOT b = f32[]")),
        "second ROOT in computation 'add'",
        6,
        8,
        "  ROOT c = f32[] add(a, b)",
    )


def test_two_entries():
    assert "second ENTRY computation 'main'" in parse_error(edit("add {", "ENTRY add {")).message


def test_a_computation_without_instructions():
    text = GOOD.replace(
        "add {\n  a = f32[] parameter(0)\n  b = f32[] parameter(1)\n  ROOT c = f32[] add(a, b)\n}",
        "add {\n}",
    )
    check(parse_error(text), "computation 'add' has no instructions", 3, 1, "add {")


# -- shapes ----------------------------------------------------------------------------


def test_bad_element_type():
    check(
        parse_error(edit("p = f32[4]{0}", "p = f33[4]{0}")),
        "unknown element type 'f33' (did you mean 'f32'?)",
        10,
        7,
        "  p = f33[4]{0} parameter(0)",
    )


@pytest.mark.parametrize("layout", ["{1}", "{0,1}", "{0,0}", "{}", "{x}"])
def test_bad_layout(layout):
    error = parse_error(edit("p = f32[4]{0}", f"p = f32[4]{layout}"))
    assert error.location.line == 10
    assert "layout" in error.message or "dimension number" in error.message


def test_absurd_shape_is_refused_before_anything_is_allocated():
    error = parse_error(edit("p = f32[4]{0}", "p = f32[4294967296,4294967296]{1,0}"))
    check(
        error,
        "has 18446744073709551616 elements",
        10,
        7,
        "  p = f32[4294967296,4294967296]{1,0} parameter(0)",
    )
    with pytest.raises(HloParseError, match="elements"):
        parse_shape("(f32[2], u8[1073741824,1073741824,4])")


def test_unbounded_dynamic_dimension_and_token_dims():
    assert "unbounded" in parse_error("f {\n  a = f32[?] parameter(0)\n}").message
    assert "token shape" in parse_error("f {\n  a = token[3] parameter(0)\n}").message


def test_parse_shape_errors():
    with pytest.raises(HloParseError, match="unexpected text after the shape"):
        parse_shape("f32[2] x")
    with pytest.raises(HloParseError, match="expected a shape"):
        parse_shape("[2]")


# -- values ----------------------------------------------------------------------------


def test_unterminated_string():
    text = edit("to_apply=add", 'to_apply=add, custom_call_target="abc')
    check(
        parse_error(text),
        "unterminated string",
        12,
        81,
        '  ROOT r = f32[] reduce(p, z), dimensions={0}, to_apply=add, custom_call_target="abc',
    )


def test_unterminated_comment():
    check(
        parse_error(edit("ENTRY main", "/* hello\nENTRY main")),
        "unterminated comment",
        9,
        1,
        "/* hello",
    )


def test_bad_attribute_values():
    assert (
        "expected an integer, found 'x'"
        in parse_error(edit("dimensions={0}", "dimensions={0,x}")).message
    )
    assert (
        "given twice"
        in parse_error(edit("dimensions={0}", "dimensions={0}, dimensions={0}")).message
    )
    error = parse_error(edit("dimensions={0}", "dimensions={0}, sharding={devices=[2,1)0,1}"))
    assert "')' does not match the '['" in error.message
    error = parse_error(edit("dimensions={0}", "dimensions={0}, window={size=3 strde=2}"))
    assert "unknown window field 'strde'" in error.message
    error = parse_error(edit("dimensions={0}", "dimensions={0}, dim_labels=bxf_01io->b01f"))
    assert "bad input dim_labels" in error.message
    error = parse_error(edit("dimensions={0}", "dimensions={0}, is_stable=maybe"))
    assert "true or false" in error.message


@pytest.mark.parametrize(
    "shape, literal, message",
    [
        ("s8[]", "300", "value 300 is out of range for s8"),
        ("u4[]", "-1", "out of range for u4"),
        ("f16[]", "70000", "out of range for f16"),
        ("f32[2]", "{1,2,3}", "expected 2 elements in dimension 0 of f32[2], found 3"),
        ("f32[2,2]", "{1,2}", "expected '{' for dimension 1"),
        ("f32[2]", "{{1},{2}}", "too many nested '{'"),
        ("s32[]", "1.5", "expected an integer for s32"),
        ("pred[]", "2", "expected true or false"),
        ("f4e2m1fn[]", "nan", "has no NaN"),
        ("f8e4m3fn[]", "inf", "has no infinity"),
        ("f16[]", "nan(0x7ff)", "does not fit f16"),
        ("f8e4m3fnuz[]", "nan(0x1)", "has no NaN payloads"),
        ("f32[]", "abc", "expected a f32 value"),
        ("c64[]", "1", "expected '('"),
        ("(f32[], s32[])", "(1)", "expected ','"),
    ],
)
def test_bad_constants(shape, literal, message):
    error = parse_error(f"f {{\n  ROOT c = {shape} constant({literal})\n}}")
    assert message in error.message
    assert error.location.line == 2


def test_shapes_can_be_left_out_only_where_they_can_be_inferred():
    error = parse_error(
        'f {\n  a = f32[] parameter(0)\n  ROOT b = custom-call(a), custom_call_target="x"\n}'
    )
    assert "custom-call needs an explicit shape" in error.message and error.location.line == 3
    assert "a constant needs its shape" in parse_error("f {\n  ROOT b = constant(1)\n}").message


# -- structure -------------------------------------------------------------------------


def test_garbage_after_the_module():
    check(parse_error(GOOD + "\n}\n"), "expected a computation", 15, 1, "}")
    check(
        parse_error(GOOD + "foo bar\n"), "expected '{' to open computation 'foo'", 14, 5, "foo bar"
    )


def test_an_instruction_outside_any_computation():
    error = parse_error("%x = f32[] parameter(0)\n")
    assert "an instruction outside any computation?" in error.message


def test_missing_equals_sign():
    check(
        parse_error("f {\n  a f32[] parameter(0)\n}"),
        "expected '=' after instruction name 'a'",
        2,
        5,
        "  a f32[] parameter(0)",
    )


def test_a_cycle_is_left_to_the_verifier():
    module = parse_module("ENTRY e {\n  a = f32[] add(b, b)\n  ROOT b = f32[] add(a, a)\n}")
    assert [len(i.operands) for i in module.entry.instructions] == [2, 2]


def test_a_cycle_of_instructions_without_shapes_is_an_error():
    error = parse_error("f {\n  a = tuple(b)\n  ROOT b = tuple(a)\n}")
    assert "depends on itself" in error.message


# -- the fast path never disagrees with the grammar ------------------------------------

MUTATIONS = list('{}(),=%" \n:[]<-.0ax') + ["ROOT ", "//", "/*", "*/", ", ", "f32[]", "{1,0}"]


def outcome(text: str, fast: bool, monkeypatch) -> tuple[str, object]:
    monkeypatch.setattr(parser_module, "_USE_FAST_PATH", fast)
    try:
        module = parse_module(text, "mutated.hlo")
    except HloParseError as error:
        return "error", str(error)
    return "module", module


@pytest.mark.parametrize("seed", range(4))
def test_fast_path_and_grammar_agree_on_damaged_text(seed, monkeypatch):
    """Damage valid text at random: both paths give the same error (message and
    location) or the same module. The fast path must accept nothing the
    grammar refuses, and must not hide the first error behind a later one."""
    rng = random.Random(seed)
    for _ in range(150):
        text = GOOD if rng.random() < 0.5 else JAX_LIKE
        for _ in range(rng.randint(1, 2)):
            p = rng.randrange(len(text))
            r = rng.random()
            if r < 0.35:
                text = text[:p] + text[p + 1 :]
            elif r < 0.7:
                text = text[:p] + rng.choice(MUTATIONS) + text[p:]
            else:
                text = text[:p] + rng.choice(MUTATIONS) + text[p + 1 :]
        fast = outcome(text, True, monkeypatch)
        grammar = outcome(text, False, monkeypatch)
        assert fast[0] == grammar[0], text
        if fast[0] == "error":
            assert fast[1] == grammar[1], text
        else:
            assert structural_difference(fast[1], grammar[1]) is None, text
            assert [i.location for i in fast[1].instructions()] == [
                i.location for i in grammar[1].instructions()
            ]


JAX_LIKE = """HloModule jit_f, entry_computation_layout={(f32[4,4]{1,0})->f32[4]{0}}

%region.1 (a: f32[], b: f32[]) -> f32[] {
  %a = f32[] parameter(0), metadata={op_name="reduce_sum"}
  %b = f32[] parameter(1), metadata={op_name="reduce_sum"}
  ROOT %s = f32[] add(%a, %b), metadata={op_name="jit(f)/reduce_sum" stack_frame_id=3}
}

%fused (p0: f32[4,4], p1: f32[]) -> f32[4] {
  %p0 = f32[4,4]{1,0} parameter(0)
  %p1 = f32[] parameter(1)
  %t = f32[4,4]{1,0} tanh(%p0), metadata={op_name="jit(f)/tanh"}
  ROOT %r = f32[4]{0} reduce(%t, %p1), dimensions={1}, to_apply=%region.1
}

ENTRY %main.2 (x.1: f32[4,4]) -> f32[4] {
  %x.1 = f32[4,4]{1,0} parameter(0), metadata={op_name="x"}
  %c = f32[] constant(0)
  %k = s32[2,2]{1,0} constant({ {1, 2}, {3, 4} })
  %tp = (f32[4,4]{1,0}, f32[]) tuple(%x.1, %c)
  ROOT %f = f32[4]{0} fusion(%x.1, %c), kind=kLoop, calls=%fused, backend_config={"a":[1]}
}
"""
