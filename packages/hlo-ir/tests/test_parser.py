"""The HLO text parser: what each construct reads as."""

from __future__ import annotations

import math

import ml_dtypes
import numpy as np
import pytest

from heron.hlo import parser as parser_module
from heron.hlo.attributes import (
    ComputationRef,
    ConvDimensionNumbers,
    InstructionRefs,
    KeyValueList,
    PadDim,
    PaddingConfig,
    QuotedString,
    RawAttribute,
    SliceRange,
    Window,
    WindowDim,
)
from heron.hlo.element_types import ElementType
from heron.hlo.ir import structural_difference
from heron.hlo.opcodes import OPCODES
from heron.hlo.parser import parse_module, parse_module_file, parse_shape
from heron.hlo.shapes import ArrayShape, Layout, TupleShape


@pytest.fixture(params=["fast", "grammar"])
def both_paths(request, monkeypatch):
    """Run a test once with the fast path and once with the grammar alone."""
    monkeypatch.setattr(parser_module, "_USE_FAST_PATH", request.param == "fast")
    return request.param


def only(text: str):
    """The module's ENTRY root instruction."""
    return parse_module(text).entry.root_instruction


# -- module structure ------------------------------------------------------------------

JAX_STYLE = (
    (
        "HloModule jit_f, is_scheduled=true, entry_computation_layout={(f32[4]{0})->f32[4]{0}},"
        " allow_spmd_sharding_propagation_to_parameters={true,true}, replica_count=1\n"
    )
    + """
FileNames
1 "/tmp/x.py"

FunctionNames
1 "f"

FileLocations
1 {file_name_id=1 function_name_id=1 line=3 end_line=3 column=5 end_column=9}

StackFrames
1 {file_location_id=1 parent_frame_id=1}


%add.1 (x: f32[], y: f32[]) -> f32[] {
  %x = f32[] parameter(0)
  %y = f32[] parameter(1)
  ROOT %s = f32[] add(%x, %y), metadata={op_name="jit(f)/add" stack_frame_id=1}
}

ENTRY %main.2 (p.1: f32[4]) -> f32[4] {
  %p.1 = f32[4]{0} parameter(0), metadata={op_name="x"}
  %c = f32[] constant(0)
  %r = f32[] reduce(%p.1, %c), dimensions={0}, to_apply=%add.1
  ROOT %b = f32[4]{0} broadcast(%r), dimensions={}
}
"""
)


def test_module_header_sections_and_computations(both_paths):
    m = parse_module(JAX_STYLE, "jax.hlo")
    assert m.name == "jit_f"
    assert m.header["is_scheduled"] is True
    assert m.header["replica_count"] == 1
    assert m.header["entry_computation_layout"] == RawAttribute("{(f32[4]{0})->f32[4]{0}}")
    assert m.header["allow_spmd_sharding_propagation_to_parameters"] == RawAttribute("{true,true}")
    assert [title for title, _ in m.sections] == [
        "FileNames",
        "FunctionNames",
        "FileLocations",
        "StackFrames",
    ]
    assert m.sections[0][1] == ('1 "/tmp/x.py"',)
    assert m.fusion_under_test is None
    assert [c.name for c in m.computations] == ["add.1", "main.2"]
    assert m.entry.name == "main.2" and not m.computations[0].is_entry
    assert m.entry.root_instruction.name == "b"
    reduce = m.entry.instruction("r")
    assert [o.name for o in reduce.operands] == ["p.1", "c"]
    assert reduce.operands[0] is m.entry.instruction("p.1")
    assert reduce.attributes["to_apply"].computation is m.computations[0]
    assert reduce.called_computations() == [m.computations[0]]
    assert m.computations[0].instruction("s").attributes["metadata"] == KeyValueList(
        (("op_name", QuotedString("jit(f)/add")), ("stack_frame_id", "1"))
    )


def test_parent_and_locations(both_paths):
    m = parse_module(JAX_STYLE, "jax.hlo")
    add = m.computations[0]
    assert add.location.line == 16 and add.location.column == 1
    for inst in m.instructions():
        assert inst.parent is not None and inst in inst.parent.instructions
    s = add.instruction("s")
    assert (s.location.file, s.location.line, s.location.column) == ("jax.hlo", 19, 8)
    assert s.location.line_text.startswith("  ROOT %s = f32[] add(")


def test_bare_names_root_defaults_to_last_and_forward_references(both_paths):
    m = parse_module(
        """
        ENTRY e {
          b = f32[] negate(a)
          a = f32[] parameter(0)
          c = f32[] add(a, b)
        }
        """
    )
    e = m.entry
    assert e.root is e.instruction("c")
    assert e.instruction("b").operands == [e.instruction("a")]


def test_computations_may_be_referenced_before_they_are_defined(both_paths):
    m = parse_module(
        """HloModule m
        ENTRY e {
          p = f32[8] parameter(0)
          z = f32[] constant(0)
          ROOT r = f32[] reduce(p, z), dimensions={0}, to_apply=sum
        }
        sum {
          x = f32[] parameter(0)
          y = f32[] parameter(1)
          ROOT s = f32[] add(x, y)
        }
        """
    )
    ref = m.entry.root_instruction.attributes["to_apply"]
    assert isinstance(ref, ComputationRef) and ref.computation is m.computation("sum")


def test_comments_and_instructions_broken_across_lines(both_paths):
    m = parse_module(
        """// leading comment
        /* block
           comment */
        add { x = f32[] parameter(0)  // trailing
          y = f32[] parameter(1) /* inline */ ROOT s = f32[] add(x,
              y)
        }
        ENTRY e {
          p = f32[3,4] parameter(0)
          z = f32[] constant(0)
          ROOT r = f32[3] reduce(f32[3,4] p,
              f32[] %z),
              dimensions={1}
              , to_apply=add
        }
        """
    )
    r = m.entry.root_instruction
    assert [o.name for o in r.operands] == ["p", "z"]
    assert r.attributes == {
        "dimensions": (1,),
        "to_apply": ComputationRef("add"),
    }
    assert m.computation("add").root.name == "s"


def test_an_instruction_that_goes_on_after_a_complete_looking_line(both_paths):
    m = parse_module(
        """ENTRY e {
          p = f32[] parameter(0)
          ROOT n = f32[] negate(p)
             , metadata={op_name="x"}
          q = f32[] negate(p)
        }"""
    )
    n = m.entry.instruction("n")
    assert m.entry.root is n
    assert n.attributes == {"metadata": KeyValueList((("op_name", QuotedString("x")),))}
    assert [i.name for i in m.entry.instructions] == ["p", "n", "q"]


def test_operands_with_shapes_are_read_and_ignored(both_paths):
    r = only("ENTRY e {\n a = f32[4]{0} parameter(0)\n ROOT b = f32[4]{0} add(f32[4]{0} %a, %a)\n}")
    assert [o.name for o in r.operands] == ["a", "a"]


def test_computation_attributes_after_signature_are_kept(both_paths):
    m = parse_module(
        """
        %async_comp (p: f32[]) -> f32[], execution_thread="host" {
          %p = f32[] parameter(0)
          ROOT %n = f32[] negate(%p)
        }
        ENTRY %e (a: f32[]) -> f32[] {
          %a = f32[] parameter(0)
          ROOT %c = f32[] call(%a), to_apply=%async_comp
        }
        """
    )
    assert m.computation("async_comp").trailing_attributes == 'execution_thread="host"'


# -- the corpus form -------------------------------------------------------------------


def test_corpus_form_gets_a_synthesised_entry(both_paths):
    text = """
    add {
      a = f32[] parameter(0)
      b = f32[] parameter(1)
      ROOT c = f32[] add(a, b)
    }
    fused {
      p1 = s32[2] parameter(1)
      p0 = f32[3,4]{1,0} parameter(0)
      z = f32[] constant(0)
      r = f32[3]{0} reduce(p0, z), dimensions={1}, to_apply=add
      ROOT t = (f32[3]{0}, s32[2]) tuple(r, p1)
    }
    """
    m = parse_module(text, "/some/dir/my_test.hlo")
    assert m.name == "my_test"
    assert m.fusion_under_test == "fused"
    entry = m.entry
    assert entry is m.computations[-1] and entry.name == "main"
    params = entry.parameters
    assert [(p.name, p.parameter_number, p.shape) for p in params] == [
        ("p0", 0, parse_shape("f32[3,4]{1,0}")),
        ("p1", 1, parse_shape("s32[2]")),
    ]
    root = entry.root_instruction
    assert root.opcode == "fusion" and root.name == "fusion"
    assert root.operands == params
    assert root.shape == parse_shape("(f32[3]{0}, s32[2])")
    assert root.attributes["kind"] == "kLoop"
    assert root.attributes["calls"].computation is m.computation("fused")
    assert all(i.parent is entry for i in entry.instructions)


def test_corpus_form_entry_name_and_fusion_name_avoid_clashes():
    m = parse_module(
        """
        main { ROOT x = f32[] parameter(0) }
        fusion_comp {
          fusion = f32[] parameter(0)
          ROOT n = f32[] negate(fusion)
        }
        """
    )
    assert m.entry.name == "main.1"
    assert m.entry.root_instruction.name == "fusion.1"
    assert m.name == "module"


def test_module_with_header_and_no_entry_keeps_the_header_name():
    m = parse_module("HloModule named\nf {\n  ROOT p = f32[] parameter(0)\n}\n", "x/y.hlo")
    assert m.name == "named" and m.fusion_under_test == "f"


# -- shapes ----------------------------------------------------------------------------


def test_shapes():
    assert parse_shape("f32[8,4]{1,0}") == ArrayShape(ElementType.F32, (8, 4), Layout((1, 0)))
    assert parse_shape("f32[2,3]{1,0:T(8,128)(2,1)S(1)}").layout == Layout(
        (1, 0), "T(8,128)(2,1)S(1)"
    )
    assert parse_shape("s4[100,9]{1,0:E(4)}").layout == Layout((1, 0), "E(4)")
    assert parse_shape("f32[]{:T(256)}").layout == Layout((), "T(256)")
    dyn = parse_shape("f32[<=8,4]")
    assert dyn.dims == (8, 4) and dyn.dynamic == (True, False) and str(dyn) == "f32[<=8,4]"
    assert parse_shape("f32[4]").layout is None
    nested = parse_shape("((f32[3], f32[3]), f32[4])")
    assert isinstance(nested, TupleShape) and isinstance(nested.elements[0], TupleShape)
    assert str(nested) == "((f32[3], f32[3]), f32[4])"
    assert parse_shape("()") == TupleShape(())
    assert parse_shape("token[]").is_token
    assert parse_shape("(f32[], /*index=1*/s32[])") == parse_shape("(f32[], s32[])")
    for t in ElementType:
        if t is not ElementType.TOKEN:
            assert parse_shape(f"{t.value}[2]").element_type is t


def test_a_layout_needs_to_follow_the_dims_immediately():
    # '-> f32[] {' in a signature: the brace opens the body, it is no layout.
    m = parse_module("ENTRY %e () -> f32[] {\n  ROOT %c = f32[] constant(1)\n}")
    assert m.entry.root.shape.layout is None


# -- opcodes ---------------------------------------------------------------------------


def test_every_opcode_parses():
    lines = ["ENTRY e {", "  p = f32[4] parameter(0)"]
    for k, opcode in enumerate(sorted(OPCODES)):
        if opcode in ("constant", "parameter"):
            continue
        lines.append(f"  i{k} = f32[4] {opcode}(p)")
    lines.append("  ROOT c = f32[] constant(0)")
    lines.append("}")
    m = parse_module("\n".join(lines))
    assert {i.opcode for i in m.entry.instructions} == set(OPCODES)


# -- constants -------------------------------------------------------------------------


def constant(shape: str, literal: str):
    return only(f"ENTRY e {{\n  ROOT c = {shape} constant({literal})\n}}").literal


def bits(array: np.ndarray) -> bytes:
    return np.asarray(array).tobytes()


def test_scalar_constants(both_paths):
    assert constant("f32[]", "1.5") == np.float32(1.5)
    assert constant("f32[]", "1.5").dtype == np.float32
    assert constant("s32[]", "-7") == -7
    assert constant("u64[]", "18446744073709551615") == np.uint64(2**64 - 1)
    assert constant("s64[]", "-9223372036854775808") == np.int64(-(2**63))
    assert constant("pred[]", "true") == np.True_
    assert constant("pred[]", "false") == np.False_
    assert constant("f64[]", "inf") == math.inf
    assert constant("f64[]", "-inf") == -math.inf
    assert constant("f32[]", "-1.70141173e+38") == np.float32(-1.70141173e38)
    neg_zero = constant("f32[]", "-0")
    assert neg_zero == 0 and np.signbit(neg_zero)


def test_nan_sign_and_payload(both_paths):
    nan = constant("f32[]", "nan")
    assert bits(nan) == bits(np.array(np.nan, np.float32))
    neg = constant("f32[]", "-nan")
    assert np.isnan(neg) and np.signbit(neg)
    payload = constant("f32[]", "nan(0x1)")
    assert np.asarray(payload).view(np.uint32) == 0x7F800001
    neg_payload = constant("bf16[]", "-nan(0x3)")
    assert np.asarray(neg_payload).view(np.uint16) == 0xFF83


def test_array_constants(both_paths):
    np.testing.assert_array_equal(constant("s32[2,2]", "{{1,2},{3,4}}"), [[1, 2], [3, 4]])
    np.testing.assert_array_equal(constant("s32[2,2]", "{ { 1, 2 }, { 3, 4 } }"), [[1, 2], [3, 4]])
    np.testing.assert_array_equal(constant("s32[3,1]", "{{1}, {3}, {5}}"), [[1], [3], [5]])
    assert constant("f32[0]", "{}").shape == (0,)
    assert constant("f32[2,0]", "{ {}, {} }").shape == (2, 0)
    assert constant("f32[0,3]", "{}").shape == (0, 3)
    assert constant("f32[2]{0}", "{1, -inf}").tolist() == [1.0, -math.inf]
    np.testing.assert_array_equal(
        constant("pred[3]", "{true, false, true}"), np.array([True, False, True])
    )
    # The values are in logical (row-major) order whatever the layout.
    np.testing.assert_array_equal(constant("s32[2,2]{0,1}", "{{1,2},{3,4}}"), [[1, 2], [3, 4]])


def test_small_and_exotic_types(both_paths):
    s4 = constant("s4[3]{0}", "{-2, -3, -4}")
    assert s4.dtype == ml_dtypes.int4 and s4.astype(int).tolist() == [-2, -3, -4]
    assert constant("u2[2]", "{0, 3}").astype(int).tolist() == [0, 3]
    assert constant("bf16[]", "1.5").dtype == ml_dtypes.bfloat16
    f8 = constant("f8e4m3fn[2]", "{448, -0.5}")
    assert f8.dtype == ml_dtypes.float8_e4m3fn and f8.astype(float).tolist() == [448.0, -0.5]
    assert constant("f8e5m2[]", "-inf") == -np.inf
    f4 = constant("f4e2m1fn[2]", "{6, -1.5}")
    assert f4.astype(float).tolist() == [6.0, -1.5]
    assert constant("f8e8m0fnu[]", "0.25").astype(float) == 0.25


def test_complex_constants(both_paths):
    c = constant("c64[]", "(1, 2)")
    assert c.dtype == np.complex64 and c == 1 + 2j
    arr = constant("c128[2]", "{(1, -2.5), (nan, inf)}")
    assert arr[0] == 1 - 2.5j
    assert math.isnan(arr[1].real) and arr[1].imag == math.inf


def test_tuple_constants(both_paths):
    value = constant("(f32[], s32[2], (pred[]))", "(1.5, {1, 2}, (true))")
    assert isinstance(value, tuple) and len(value) == 3
    assert value[0] == np.float32(1.5)
    assert value[1].tolist() == [1, 2]
    assert value[2][0] == np.True_


def test_elided_constant_reads_as_no_value(both_paths):
    assert constant("f32[1000]{0}", "{...}") is None


def test_large_constant_is_read_in_full(both_paths):
    values = ", ".join(str(i) for i in range(5000))
    assert constant("s32[5000]", "{" + values + "}").tolist() == list(range(5000))


# -- attributes ------------------------------------------------------------------------


def attributes_of(line: str) -> dict:
    text = f"ENTRY e {{\n  p = f32[4] parameter(0)\n  ROOT r = f32[4] {line}\n}}"
    return parse_module(text).entry.root_instruction.attributes


def test_typed_attributes(both_paths):
    a = attributes_of(
        "dot(p, p), lhs_batch_dims={}, lhs_contracting_dims={0}, rhs_batch_dims={},"
        " rhs_contracting_dims={0}, operand_precision={highest,default}"
    )
    assert a["lhs_contracting_dims"] == (0,) and a["lhs_batch_dims"] == ()
    assert a["operand_precision"] == RawAttribute("{highest,default}")
    a = attributes_of("slice(p), slice={[0:4], [2:8:2]}")
    assert a["slice"] == (SliceRange(0, 4), SliceRange(2, 8, 2))
    a = attributes_of("pad(p, p), padding=0_0x1_2_1")
    assert a["padding"] == PaddingConfig((PadDim(0, 0), PadDim(1, 2, 1)))
    a = attributes_of("pad(p, p), padding=-1_2")
    assert a["padding"] == PaddingConfig((PadDim(-1, 2),))
    a = attributes_of(
        "convolution(p, p), window={size=3x3 stride=2x1 pad=1_1x0_0 lhs_dilate=1x2 rhs_dilate=3x1"
        " rhs_reversal=1x0}, dim_labels=b01f_01io->b01f, feature_group_count=2"
    )
    assert a["window"] == Window(
        (
            WindowDim(3, 2, 1, 1, window_dilation=3, base_dilation=1, window_reversal=True),
            WindowDim(3, 1, 0, 0, window_dilation=1, base_dilation=2, window_reversal=False),
        )
    )
    assert a["dim_labels"] == ConvDimensionNumbers(0, 3, (1, 2), 2, 3, (0, 1), 0, 3, (1, 2))
    assert a["feature_group_count"] == 2
    a = attributes_of("compare(p, p), direction=LT, type=TOTALORDER")
    assert a == {"direction": "LT", "type": "TOTALORDER"}
    a = attributes_of("sort(p), dimensions={0}, is_stable=true")
    assert a["is_stable"] is True
    a = attributes_of(
        'custom-call(p), custom_call_target="__cublas$gemm", backend_config={"a":[1,2],"b":"}"}'
    )
    assert a["custom_call_target"] == QuotedString("__cublas$gemm")
    assert a["backend_config"] == RawAttribute('{"a":[1,2],"b":"}"}')
    a = attributes_of('custom-call(p), custom_call_target="x", backend_config="opaque \\"text\\""')
    assert a["backend_config"] == RawAttribute('"opaque \\"text\\""')
    a = attributes_of("reduce-precision(p), exponent_bits=5, mantissa_bits=10")
    assert a == {"exponent_bits": 5, "mantissa_bits": 10}
    a = attributes_of("fft(p), fft_type=IRFFT, fft_length={16, 8}")
    assert a == {"fft_type": "IRFFT", "fft_length": (16, 8)}
    a = attributes_of("rng(p, p), distribution=rng_uniform")
    assert a == {"distribution": "rng_uniform"}
    a = attributes_of("batch-norm-inference(p, p), epsilon=0.001, feature_index=1")
    assert a == {"epsilon": 0.001, "feature_index": 1}


def test_gather_and_scatter_dimension_numbers(both_paths):
    a = attributes_of(
        "gather(p, p), offset_dims={1}, collapsed_slice_dims={0}, start_index_map={0},"
        " index_vector_dim=1, slice_sizes={1,4}, indices_are_sorted=true"
    )
    assert a["offset_dims"] == (1,) and a["slice_sizes"] == (1, 4)
    assert a["index_vector_dim"] == 1 and a["indices_are_sorted"] is True
    a = attributes_of("dynamic-slice(p, p), dynamic_slice_sizes={2}")
    assert a["dynamic_slice_sizes"] == (2,)


def test_metadata_frontend_attributes_statistics_and_unknown_attributes(both_paths):
    a = attributes_of(
        'negate(p), metadata={op_type="Neg" op_name="a \\"b\\"" source_file="f.py"'
        ' source_line=12 profile_type={relative}}, frontend_attributes={_xla_x="1",y="2"},'
        " statistics={visualizing_index=1,stat-0=0.5}, sharding={{replicated}, {maximal"
        ' device=0}}, origin={{"x"}}, output_to_operand_aliasing={{}: (0, {})},'
        " some_future_attribute=[2,2]<=[4]"
    )
    assert a["metadata"] == KeyValueList(
        (
            ("op_type", QuotedString("Neg")),
            ("op_name", QuotedString('a "b"')),
            ("source_file", QuotedString("f.py")),
            ("source_line", "12"),
            ("profile_type", "{relative}"),
        )
    )
    assert a["frontend_attributes"].get("_xla_x") == QuotedString("1")
    assert a["statistics"] == KeyValueList((("visualizing_index", "1"), ("stat-0", "0.5")))
    assert a["sharding"] == RawAttribute("{{replicated}, {maximal device=0}}")
    assert a["origin"] == RawAttribute('{{"x"}}')
    assert a["output_to_operand_aliasing"] == RawAttribute("{{}: (0, {})}")
    assert a["some_future_attribute"] == RawAttribute("[2,2]<=[4]")
    assert list(a) == [
        "metadata",
        "frontend_attributes",
        "statistics",
        "sharding",
        "origin",
        "output_to_operand_aliasing",
        "some_future_attribute",
    ]


def test_control_flow_attributes(both_paths):
    m = parse_module(
        """
        c0 { p = f32[] parameter(0)
             ROOT n = f32[] negate(p) }
        c1 { p = f32[] parameter(0)
             ROOT a = f32[] abs(p) }
        cond { p = f32[] parameter(0)
               ROOT t = pred[] constant(false) }
        ENTRY e {
          i = s32[] parameter(0)
          x = f32[] parameter(1)
          k = f32[] conditional(i, x, x), branch_computations={%c0, c1}
          w = f32[] while(k), condition=cond, body=%c0, control-predecessors={x}
          ROOT t = f32[] conditional(i, x, w), true_computation=c0, false_computation=c1
        }
        """
    )
    e = m.entry
    branches = e.instruction("k").attributes["branch_computations"]
    assert [b.computation for b in branches] == [m.computation("c0"), m.computation("c1")]
    w = e.instruction("w")
    assert w.attributes["condition"].computation is m.computation("cond")
    assert w.attributes["control-predecessors"] == InstructionRefs(("x",))
    assert e.root.called("false_computation") is m.computation("c1")


def test_iota_and_get_tuple_element(both_paths):
    m = parse_module(
        """ENTRY e {
          t = (f32[2], s32[]) parameter(0)
          g = s32[] get-tuple-element(t), index=1
          ROOT i = s32[4,3] iota(), iota_dimension=1
        }"""
    )
    assert m.entry.instruction("g").attributes == {"index": 1}
    assert m.entry.root.attributes == {"iota_dimension": 1}
    assert m.entry.root.operands == []


def test_instruction_without_shape_gets_an_inferred_shape(both_paths):
    m = parse_module(
        """f {
          p0 = f32[] parameter(0)
          p1 = s32[2] parameter(1)
          ROOT t = tuple(p0, p1)
        }"""
    )
    assert m.computation("f").root.shape == parse_shape("(f32[], s32[2])")


# -- robustness ------------------------------------------------------------------------


def test_a_cycle_is_read_without_recursing(both_paths):
    m = parse_module(
        """ENTRY e {
          a = f32[] add(b, b)
          ROOT b = f32[] add(a, a)
        }"""
    )
    a, b = m.entry.instructions
    assert a.operands == [b, b] and b.operands == [a, a]


def test_windows_line_endings(both_paths):
    m = parse_module("ENTRY e {\r\n  ROOT p = f32[] parameter(0)\r\n}\r\n")
    assert m.entry.root.location.line_text == "  ROOT p = f32[] parameter(0)"


def test_fast_path_and_grammar_agree_on_a_jax_dump(monkeypatch):
    a = parse_module(JAX_STYLE, "x")
    monkeypatch.setattr(parser_module, "_USE_FAST_PATH", False)
    b = parse_module(JAX_STYLE, "x")
    assert structural_difference(a, b) is None
    assert [i.location for i in a.instructions()] == [i.location for i in b.instructions()]


def test_parse_module_file(tmp_path):
    path = tmp_path / "some-test.hlo"
    path.write_text("f {\n  ROOT p = f32[] parameter(0)\n}\n")
    m = parse_module_file(path)
    assert m.name == "some-test" and m.source == str(path)
    assert m.computation("f").root.location.file == str(path)


@pytest.mark.parametrize("where", ["result", "signature", "constant"])
def test_tuple_shapes_nested_past_the_limit_are_refused_not_a_recursion_error(where):
    """Found by the parser's coverage-guided fuzzer (tests/fuzz/heron_fuzz/parser_atheris.py):
    3,000 nested '(' in a shape ended in a RecursionError (exit 3 from the CLI)."""
    from heron.hlo.errors import HloParseError
    from heron.hlo.shape_syntax import MAX_TUPLE_NESTING

    def module(depth: int) -> str:
        shape = "(" * depth + "f32[]" + ")" * depth
        if where == "signature":
            return f"HloModule m\nENTRY e (a: {shape}) -> f32[] {{ ROOT p = f32[] parameter(0) }}"
        if where == "constant":
            value = "(" * depth + "1" + ")" * depth
            return f"HloModule m\nENTRY e {{ ROOT c = {shape} constant({value}) }}"
        return f"HloModule m\nENTRY e {{ ROOT p = {shape} parameter(0) }}"

    parse_module(module(MAX_TUPLE_NESTING))
    for depth in (MAX_TUPLE_NESTING + 1, 3000):
        too_deep = f"tuple shapes nested more than {MAX_TUPLE_NESTING}"
        with pytest.raises(HloParseError, match=too_deep):
            parse_module(module(depth))


def test_xla_nested_tuple_element_operands_become_chained_get_tuple_elements():
    """XLA prints ``%f#0#1`` for element 1 of element 0 of a nested tuple ``f`` (a
    multi-output fusion of two variadic reduces: jax's argmax and argmin); the
    parser stopped at the second ``#``."""
    from heron.hlo.parser import parse_module
    from heron.hlo.printer import print_module
    from heron.hlo.verifier import verify_module

    module = parse_module(
        """HloModule m
ENTRY main {
  f = ((f32[2], s32[2]), (f32[2], s32[2])) parameter(0)
  ROOT d = s32[2] subtract(%f#0#1, %f#1#1)
}
"""
    )
    verify_module(module)
    root = module.entry.root_instruction
    for operand, outer in zip(root.operands, (0, 1), strict=True):
        assert operand.opcode == "get-tuple-element" and operand.attr("index") == 1
        (inner,) = operand.operands
        assert inner.opcode == "get-tuple-element" and inner.attr("index") == outer
        assert inner.operands == [module.entry.instruction("f")]
    assert parse_module(print_module(module)) == module
    import pytest

    from heron.hlo.errors import HloParseError

    with pytest.raises(HloParseError, match=r"'f#0' has shape s32\[2\], which has no tuple"):
        parse_module(
            "HloModule m\nENTRY main {\n  f = (s32[2], s32[2]) parameter(0)\n"
            "  ROOT n = s32[2] negate(%f#0#1)\n}\n"
        )


def test_xla_tuple_element_operands_become_get_tuple_elements():
    """XLA 0.12 prints ``%t#1`` for element 1 of tuple ``t`` (no get-tuple-element line)."""
    from heron.hlo.parser import parse_module
    from heron.hlo.printer import print_module
    from heron.hlo.verifier import verify_module

    module = parse_module(
        """HloModule m
ENTRY main {
  p = (f32[2], s32[3]) parameter(0)
  a = f32[2] negate(%p#0)
  b = f32[2] add(%p#0, a)
  ROOT t = (f32[2], s32[3]) tuple(b, %p#1)
}
"""
    )
    verify_module(module)
    elements = [i for i in module.entry.instructions if i.opcode == "get-tuple-element"]
    assert sorted(i.attr("index") for i in elements) == [0, 1]  # one per element, shared
    first = next(i for i in elements if i.attr("index") == 0)
    assert module.entry.instruction("b").operands[0] is first
    assert module.entry.instruction("a").operands[0] is first
    assert parse_module(print_module(module)) == module
    import pytest

    from heron.hlo.errors import HloParseError

    with pytest.raises(
        HloParseError, match=r"'p' has shape f32\[2\], which has no tuple element 1"
    ):
        parse_module(
            "HloModule m\nENTRY main {\n  p = f32[2] parameter(0)\n"
            "  ROOT n = f32[2] negate(%p#1)\n}\n"
        )


def test_a_scalar_broadcast_may_leave_its_dimensions_out(both_paths):
    """XLA's parser makes ``dimensions`` optional for a scalar operand (XLA's scatter corpus
    file ``scatter_s4_unique_indices.hlo`` leaves it out): heron fills in ``{}`` so that
    the passes, which read it, meet it (the algebraic simplifier failed on it)."""
    from heron.hlo.errors import HloError
    from heron.hlo.passes.algebraic_simplifier import simplify_algebra
    from heron.hlo.verifier import verify_module

    text = "HloModule m\nENTRY e {\n  k = f32[] constant(2)\n  ROOT n = f32[8] broadcast(k)\n}\n"
    module = parse_module(text)
    assert module.entry.root_instruction.attr("dimensions") == ()
    verify_module(module)
    simplify_algebra(module)
    verify_module(module)
    vector = text.replace("f32[] constant(2)", "f32[8] parameter(0)")
    with pytest.raises(HloError, match="dimensions"):
        verify_module(parse_module(vector))


_REDUCER = (
    "add {\n  x = f32[] parameter(0)\n  y = f32[] parameter(1)\n  ROOT s = f32[] add(x, y)\n}\n"
)
_SELECT = (
    "ge {\n  x = f32[] parameter(0)\n  y = f32[] parameter(1)\n"
    "  ROOT c = pred[] compare(x, y), direction=GE\n}\n"
)


@pytest.mark.parametrize(
    "body",
    [
        "  a = f32[] parameter(0)\n  z = f32[] constant(0)\n"
        "  ROOT r = f32[] reduce-window(a, z), to_apply=add\n",
        "  a = f32[] parameter(0)\n  s = f32[] parameter(1)\n  z = f32[] constant(0)\n"
        "  ROOT r = f32[] select-and-scatter(a, s, z), select=ge, scatter=add\n",
        "  a = f32[2,3] parameter(0)\n  b = f32[3,4] parameter(1)\n"
        "  ROOT r = f32[2,4] convolution(a, b), dim_labels=bf_io->bf\n",
    ],
    ids=["reduce-window", "select-and-scatter", "convolution"],
)
def test_a_windowed_op_may_leave_its_window_out(both_paths, body):
    """XLA's parser makes ``window`` optional for convolution, reduce-window and
    select-and-scatter and takes an empty window: heron fills in ``{}`` (its evaluator
    refused a scalar reduce-window without one, its emitter failed on it), and the
    module computes what it computes with ``window={}`` written out."""
    from heron.hlo.evaluator import evaluate_module, random_arguments
    from heron.hlo.verifier import verify_module

    text = f"HloModule m\n\n{_REDUCER}\n{_SELECT}\nENTRY e {{\n{body}}}\n"
    module = parse_module(text)
    assert module.entry.root_instruction.attr("window") == Window(())
    verify_module(module)
    explicit = parse_module(text.replace(body, body.rstrip("\n") + ", window={}\n"))
    arguments = random_arguments(module)
    assert np.array_equal(evaluate_module(module, arguments), evaluate_module(explicit, arguments))


def test_an_empty_implied_window_is_refused_for_a_windowed_operand(both_paths):
    from heron.hlo.errors import HloError
    from heron.hlo.verifier import verify_module

    text = (
        f"HloModule m\n\n{_REDUCER}\nENTRY e {{\n  a = f32[4] parameter(0)\n"
        "  z = f32[] constant(0)\n  ROOT r = f32[4] reduce-window(a, z), to_apply=add\n}\n"
    )
    with pytest.raises(HloError, match="window has 0 dimensions but the input has rank 1"):
        verify_module(parse_module(text))


@pytest.mark.parametrize(
    ("body", "attribute"),
    [
        ("  a = f32[8] parameter(0)\n  ROOT r = f32[8] all-gather(a)\n", "dimensions"),
        (
            "  a = f32[8] parameter(0)\n  ROOT r = f32[8] reduce-scatter(a), to_apply=add\n",
            "dimensions",
        ),
        ("  a = f32[8] parameter(0)\n  ROOT r = f32[8] all-reduce(a)\n", "to_apply"),
        (
            "  a = f32[8] parameter(0)\n  ROOT r = f32[8] collective-permute(a)\n",
            "source_target_pairs",
        ),
        ("  a = f32[8] parameter(0)\n  ROOT c = pred[8] compare(a, a)\n", "direction"),
        (
            "  a = f32[3,3] parameter(0)\n"
            "  ROOT c = f32[3,3] triangular-solve(a, a), left_side=true, lower=true\n",
            "transpose_a",
        ),
        (
            "  s = u64[2] parameter(0)\n  ROOT r = (u64[2], u32[8]) rng-bit-generator(s)\n",
            "algorithm",
        ),
        ("  ROOT r = u64[2] rng-get-and-update-state()\n", "delta"),
        (
            "  a = f32[2,4] parameter(0)\n  v = f32[4] parameter(1)\n"
            "  ROOT r = f32[2,4] batch-norm-inference(a, v, v, v, v), feature_index=1\n",
            "epsilon",
        ),
        ("  a = f32[] parameter(0)\n  ROOT r = f32[] fusion(a, a), calls=add\n", "kind"),
    ],
    ids=lambda v: v if "\n" not in v else v.split("ROOT")[1].split("(")[0].split()[-1],
)
def test_attributes_xla_requires_are_refused_by_name(both_paths, body, attribute):
    """XLA's parser requires these (a triangular-solve without transpose_a gets
    TRANSPOSE_INVALID, which its shape inference refuses): heron ran such modules with a
    guessed default, or failed late; its verifier now names the attribute."""
    from heron.hlo.errors import HloError
    from heron.hlo.verifier import verify_module

    module = parse_module(f"HloModule m\n\n{_REDUCER}\nENTRY e {{\n{body}}}\n")
    with pytest.raises(HloError, match=f"needs attribute {attribute}="):
        verify_module(module)
