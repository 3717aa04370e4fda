"""The verifier: valid modules pass; each kind of inconsistency is reported where it is."""

from __future__ import annotations

import numpy as np
import pytest

from heron.hlo.attributes import ComputationRef
from heron.hlo.builder import ComputationBuilder, ModuleBuilder
from heron.hlo.element_types import ElementType
from heron.hlo.errors import HloVerifyError, SourceLocation
from heron.hlo.ir import Computation, Instruction, Module
from heron.hlo.shapes import ArrayShape, Layout, TupleShape, array_shape, scalar_shape
from heron.hlo.verifier import verify_computation, verify_module

F32 = scalar_shape("f32")


def make_module() -> Module:
    """add (reducer) + fusion (the body) + main (entry calling the fusion)."""
    mb = ModuleBuilder("m")
    add = mb.computation("add")
    add.add(add.parameter(F32), add.parameter(F32))
    add_fn = add.build()

    fusion = mb.computation("fusion")
    x = fusion.parameter(array_shape("f32", (4, 4)), name="x")
    y = fusion.parameter(array_shape("f32", (4, 4)), name="y")
    s = fusion.add(x, y)
    s.name = "add.3"
    zero = fusion.constant(np.float32(0))
    r = fusion.reduce([s], [zero], (1,), add_fn)
    fusion.tuple([s, r])
    fusion_fn = fusion.build()

    main = mb.computation("main")
    a = main.parameter(array_shape("f32", (4, 4)))
    b = main.parameter(array_shape("f32", (4, 4)))
    f = main.fusion([a, b], fusion_fn)
    main.get_tuple_element(f, 1)
    return mb.build(entry=main.build())


def inst(module: Module, comp: str, name: str) -> Instruction:
    return module.computation(comp).instruction(name)


def test_valid_module_passes():
    module = make_module()
    verify_module(module)
    assert module.entry.name == "main"


def test_declared_shape_mismatch_message_and_location():
    module = make_module()
    add = inst(module, "fusion", "add.3")
    add.shape = array_shape("f32", (4, 5))
    add.location = SourceLocation("k.hlo", 7, 3, "  add.3 = f32[4,5] add(x, y)")
    with pytest.raises(HloVerifyError) as info:
        verify_module(module)
    error = info.value
    assert error.message == (
        "verify: computation 'fusion', instruction 'add.3' (add): declared shape f32[4,5]"
        " but operands give f32[4,4]"
    )
    assert error.location == add.location
    assert str(error).startswith("k.hlo:7:3: error: verify: computation 'fusion'")
    assert "^" in str(error)


def test_layouts_are_ignored_in_the_comparison():
    module = make_module()
    add = inst(module, "fusion", "add.3")
    add.shape = ArrayShape(ElementType.F32, (4, 4), Layout((0, 1)))
    verify_module(module)


def test_element_type_mismatch():
    module = make_module()
    inst(module, "fusion", "add.3").shape = array_shape("bf16", (4, 4))
    with pytest.raises(HloVerifyError, match=r"declared shape bf16\[4,4\] but operands give"):
        verify_module(module)


def test_fusion_shape_must_match_called_root():
    module = make_module()
    fusion = next(i for i in module.entry.instructions if i.opcode == "fusion")
    fusion.shape = TupleShape((array_shape("f32", (4, 4)), array_shape("f32", (3,))))
    with pytest.raises(HloVerifyError, match="but the called computation gives"):
        verify_module(module)


def test_wrong_operand_count():
    module = make_module()
    add = inst(module, "fusion", "add.3")
    add.operands.append(add.operands[0])
    with pytest.raises(
        HloVerifyError, match=r"instruction 'add.3' \(add\): expects 2 operands, has 3"
    ):
        verify_module(module)


def test_reduce_needs_even_operand_count():
    module = make_module()
    reduce = next(i for i in module.computation("fusion").instructions if i.opcode == "reduce")
    reduce.operands.append(reduce.operands[0])
    with pytest.raises(HloVerifyError, match=r"\(reduce\): expects N inputs followed by N init"):
        verify_module(module)


def test_operand_type_not_allowed_for_op():
    b = ComputationBuilder("main")
    x = b.parameter(array_shape("f32", (2,)))
    y = b.negate(x)
    y.opcode = "popcnt"
    comp = b.build()
    comp.is_entry = True
    module = Module("m", [comp])
    with pytest.raises(HloVerifyError, match=r"\(popcnt\): operand type f32 is not allowed"):
        verify_module(module)


def test_cycle_is_reported_with_location():
    module = make_module()
    fusion = module.computation("fusion")
    add = fusion.instruction("add.3")
    tup = fusion.root
    add.operands[1] = tup  # add -> tuple -> add
    add.location = SourceLocation("k.hlo", 4, 1, "")
    tup.location = SourceLocation("k.hlo", 9, 1, "")
    with pytest.raises(HloVerifyError, match="cycle in computation 'fusion'") as info:
        verify_module(module)
    assert info.value.location is not None


def test_parameter_numbers_must_be_contiguous():
    module = make_module()
    inst(module, "fusion", "y").parameter_number = 2
    with pytest.raises(HloVerifyError, match=r"parameters are numbered \[0, 2\]"):
        verify_module(module)


def test_parameter_numbers_must_be_unique():
    module = make_module()
    inst(module, "fusion", "y").parameter_number = 0
    with pytest.raises(HloVerifyError, match="parameter number 0 is also used by 'x'"):
        verify_module(module)


def test_missing_root():
    module = make_module()
    module.computation("fusion").root = None
    with pytest.raises(HloVerifyError, match="computation 'fusion' has no ROOT"):
        verify_module(module)


def test_root_from_another_computation():
    module = make_module()
    module.computation("fusion").root = module.entry.root
    with pytest.raises(HloVerifyError, match="is not one of its instructions"):
        verify_module(module)


def test_operand_from_another_computation():
    module = make_module()
    add = inst(module, "fusion", "add.3")
    add.operands[0] = module.entry.parameters[0]
    with pytest.raises(HloVerifyError, match="is not an instruction of 'fusion'"):
        verify_module(module)


def test_duplicate_instruction_name():
    module = make_module()
    inst(module, "fusion", "y").name = "x"
    with pytest.raises(HloVerifyError, match="the name 'x' is used twice"):
        verify_module(module)


def _reducer_with_params(n: int) -> Computation:
    b = ComputationBuilder("bad_add")
    params = [b.parameter(F32) for _ in range(n)]
    b.add(params[0], params[1])
    return b.build()


def test_to_apply_with_wrong_arity():
    module = make_module()
    bad = _reducer_with_params(3)
    module.computations.insert(0, bad)
    reduce = next(i for i in module.computation("fusion").instructions if i.opcode == "reduce")
    reduce.attributes["to_apply"] = ComputationRef(bad.name, bad)
    with pytest.raises(
        HloVerifyError, match=r"\(reduce\): to_apply=bad_add must take 2 scalar parameters"
    ):
        verify_module(module)


def test_to_apply_not_in_module():
    module = make_module()
    reduce = next(i for i in module.computation("fusion").instructions if i.opcode == "reduce")
    reduce.attributes["to_apply"] = ComputationRef("elsewhere", _reducer_with_params(2))
    with pytest.raises(HloVerifyError, match="names a computation that is not in the module"):
        verify_module(module)


def test_unresolved_computation_reference():
    module = make_module()
    reduce = next(i for i in module.computation("fusion").instructions if i.opcode == "reduce")
    reduce.attributes["to_apply"] = ComputationRef("nowhere")
    with pytest.raises(HloVerifyError, match="to_apply=nowhere names no computation"):
        verify_module(module)


def test_recursion_is_rejected():
    module = make_module()
    fusion = module.computation("fusion")
    # Let the reducer call the fusion computation: add -> fusion -> add.
    add_comp = module.computation("add")
    p0 = add_comp.parameters[0]
    call = Instruction(
        "call.9",
        "call",
        fusion.root.shape,
        [p0, p0],
        {"to_apply": ComputationRef("fusion", fusion)},
    )
    add_comp.add(call)
    with pytest.raises(HloVerifyError, match="call each other in a cycle"):
        verify_module(module)


def test_bad_layout_permutation():
    module = make_module()
    add = inst(module, "fusion", "add.3")
    add.shape = ArrayShape(ElementType.F32, (4, 4), Layout((1, 1)))
    with pytest.raises(HloVerifyError, match=r"layout \{1,1\} of f32\[4,4\] is not a permutation"):
        verify_module(module)


def test_layout_of_wrong_length():
    module = make_module()
    inst(module, "fusion", "x").shape = ArrayShape(ElementType.F32, (4, 4), Layout((0,)))
    with pytest.raises(HloVerifyError, match="not a permutation of 0..1"):
        verify_module(module)


def test_too_many_elements():
    module = make_module()
    inst(module, "fusion", "x").shape = array_shape("f32", (2**25, 2**25))
    with pytest.raises(HloVerifyError, match="more than the limit"):
        verify_module(module)


@pytest.mark.parametrize(
    "attribute, value, pattern",
    [
        ("dimensions", (2,), r"dimensions=\{2\}: dimension 2 is out of range for rank 2"),
        ("dimensions", (-1,), "out of range"),
    ],
)
def test_out_of_range_dimension(attribute, value, pattern):
    module = make_module()
    reduce = next(i for i in module.computation("fusion").instructions if i.opcode == "reduce")
    reduce.attributes[attribute] = value
    with pytest.raises(HloVerifyError, match=pattern):
        verify_module(module)


def test_out_of_range_tuple_index():
    module = make_module()
    module.entry.root.attributes["index"] = 2
    with pytest.raises(HloVerifyError, match=r"\(get-tuple-element\): index=2 is out of range"):
        verify_module(module)


def test_out_of_range_iota_dimension():
    b = ComputationBuilder("main")
    iota = b.iota(array_shape("s32", (3, 4)), 1)
    comp = b.build()
    comp.is_entry = True
    iota.attributes["iota_dimension"] = 2
    with pytest.raises(HloVerifyError, match="iota_dimension"):
        verify_module(Module("m", [comp]))


def test_bitcast_checks_byte_size_only():
    b = ComputationBuilder("main")
    x = b.parameter(array_shape("f16", (20,)))
    cast = b.bitcast(x, array_shape("s16", (4, 5)))
    comp = b.build()
    comp.is_entry = True
    module = Module("m", [comp])
    verify_module(module)
    cast.shape = ArrayShape(ElementType.U8, (40,), Layout((0,)))
    verify_module(module)
    cast.shape = array_shape("f32", (20,))
    with pytest.raises(HloVerifyError, match="size in bytes"):
        verify_module(module)


def test_entry_count():
    module = make_module()
    module.entry.is_entry = False
    with pytest.raises(HloVerifyError, match="has 0 ENTRY computations"):
        verify_module(module)
    module = make_module()
    module.computation("fusion").is_entry = True
    with pytest.raises(HloVerifyError, match="has 2 ENTRY computations"):
        verify_module(module)


def test_duplicate_computation_names():
    module = make_module()
    module.computation("add").name = "fusion"
    with pytest.raises(HloVerifyError, match="two computations named 'fusion'"):
        verify_module(module)


def test_unknown_opcode_gets_a_hint():
    module = make_module()
    inst(module, "fusion", "add.3").opcode = "multipy"
    with pytest.raises(HloVerifyError, match=r"unknown opcode \(did you mean 'multiply'\?\)"):
        verify_module(module)


def test_while_condition_must_return_pred():
    state = TupleShape((scalar_shape("s32"),))
    cond = ComputationBuilder("cond")
    cond.get_tuple_element(cond.parameter(state), 0)  # returns s32[], not pred[]
    body = ComputationBuilder("body")
    body.parameter(state)
    main = ComputationBuilder("main")
    init = main.tuple([main.constant(np.int32(0))])
    with pytest.raises(HloVerifyError, match=r"condition must return pred\[\]"):
        main.while_(init, cond.build(), body.build())


def test_verify_computation_alone():
    b = ComputationBuilder("c")
    x = b.parameter(array_shape("f32", (3,)))
    neg = b.negate(x)
    comp = b.build()
    verify_computation(comp)
    neg.shape = array_shape("f32", (4,))
    with pytest.raises(HloVerifyError, match=r"declared shape f32\[4\] but operands give f32\[3\]"):
        verify_computation(comp)


def test_constant_without_value():
    module = make_module()
    constant = next(i for i in module.computation("fusion").instructions if i.opcode == "constant")
    constant.literal = None
    with pytest.raises(HloVerifyError, match="constant has no value"):
        verify_module(module)


def test_corpus_file_verifies(corpus_file):
    """Every corpus file parses and verifies (needs heron.hlo.parser)."""
    from heron.hlo.parser import parse_module_file

    verify_module(parse_module_file(corpus_file))


def test_error_from_parsed_text_points_at_the_line():
    from heron.hlo.parser import parse_module

    text = "\n".join(
        [
            "HloModule m",
            "",
            "ENTRY main {",
            "  a = f32[4,4] parameter(0)",
            "  b = f32[4,4] parameter(1)",
            "  ROOT c = f32[4,5] add(a, b)",
            "}",
        ]
    )
    with pytest.raises(HloVerifyError) as info:
        verify_module(parse_module(text, source="t.hlo"))
    error = info.value
    assert error.location is not None
    assert (error.location.file, error.location.line) == ("t.hlo", 6)
    assert "instruction 'c' (add): declared shape f32[4,5] but operands give f32[4,4]" in str(error)
