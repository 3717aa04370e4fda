"""The IR builder: inferred shapes, unique names, roots, and modules that verify."""

from __future__ import annotations

import numpy as np
import pytest

from heron.hlo.attributes import ComputationRef, PadDim, PaddingConfig, SliceRange
from heron.hlo.builder import ComputationBuilder, ModuleBuilder, NameUniquer
from heron.hlo.element_types import ElementType
from heron.hlo.errors import HloVerifyError
from heron.hlo.ir import Instruction
from heron.hlo.shape_inference import ShapeInferenceError
from heron.hlo.shapes import ArrayShape, Layout, TupleShape, array_shape, scalar_shape
from heron.hlo.verifier import verify_module

F32 = scalar_shape("f32")


def test_brief_example():
    b = ComputationBuilder("add_f32")
    x = b.parameter(F32)
    y = b.parameter(F32)
    s = b.add(x, y)
    comp = b.build()
    assert s.shape == F32
    assert s.name == "add.1"
    assert comp.root is s
    assert [p.parameter_number for p in comp.parameters] == [0, 1]
    assert all(i.parent is comp for i in comp.instructions)


def test_names_are_unique_per_opcode_and_across_a_module():
    mb = ModuleBuilder("m")
    a = mb.computation("a")
    x = a.parameter(F32)
    first, second = a.add(x, x), a.add(x, x)
    neg = a.negate(second)
    a.build()
    b = mb.computation("b")
    y = b.parameter(F32)
    third = b.add(y, y)
    assert (first.name, second.name, neg.name, third.name) == (
        "add.1",
        "add.2",
        "negate.1",
        "add.3",
    )
    assert (x.name, y.name) == ("p0", "p0.1")


def test_explicit_names_stay_unless_taken():
    b = ComputationBuilder("c")
    x = b.parameter(F32, name="x")
    n1 = b.op("negate", [x], name="neg")
    n2 = b.op("negate", [x], name="neg")
    assert (x.name, n1.name, n2.name) == ("x", "neg", "neg.1")


def test_name_uniquer_skips_reserved_names():
    names = NameUniquer()
    names.reserve("add.1")
    assert names.unique("add") == "add.2"
    assert names.take("add.2") == "add.2.1"


def test_build_with_explicit_root_and_default_root():
    b = ComputationBuilder("c")
    x = b.parameter(array_shape("f32", (3,)))
    neg = b.negate(x)
    b.exp(x)
    comp = b.build(root=neg)
    assert comp.root is neg
    b2 = ComputationBuilder("d")
    b2.parameter(F32)
    last = b2.negate(b2.instructions[0])
    assert b2.build().root is last


def test_build_rejects_foreign_root_and_empty_computation():
    other = ComputationBuilder("other")
    stray = other.parameter(F32)
    b = ComputationBuilder("c")
    b.parameter(F32)
    with pytest.raises(ValueError, match="is not an instruction of 'c'"):
        b.build(root=stray)
    with pytest.raises(ValueError, match="has no instructions"):
        ComputationBuilder("empty").build()


def test_no_additions_after_build():
    b = ComputationBuilder("c")
    x = b.parameter(F32)
    b.build()
    with pytest.raises(RuntimeError, match="already built"):
        b.negate(x)


def test_operands_must_come_from_the_same_builder():
    a = ComputationBuilder("a")
    x = a.parameter(F32)
    b = ComputationBuilder("b")
    with pytest.raises(ValueError, match="belongs to another computation"):
        b.negate(x)


def test_shape_is_inferred_and_errors_point_at_the_bad_line():
    b = ComputationBuilder("c")
    x = b.parameter(array_shape("f32", (4,)))
    y = b.parameter(array_shape("f32", (5,)))
    with pytest.raises(ShapeInferenceError, match="operands have different dimensions"):
        b.add(x, y)
    assert len(b.instructions) == 2  # the failed instruction was not added


def test_given_shape_is_checked_and_kept_with_its_layout():
    b = ComputationBuilder("c")
    x = b.parameter(array_shape("f32", (2, 3)))
    with_layout = ArrayShape(ElementType.F32, (2, 3), Layout((0, 1)))
    neg = b.op("negate", [x], shape=with_layout)
    assert neg.shape == with_layout
    with pytest.raises(
        HloVerifyError, match=r"declared shape f32\[3,2\] but operands give f32\[2,3\]"
    ):
        b.op("negate", [x], shape=array_shape("f32", (3, 2)))


def test_ops_that_need_a_shape_say_so():
    b = ComputationBuilder("c")
    x = b.parameter(array_shape("f32", (2, 3)))
    with pytest.raises(ValueError, match="reshape needs shape="):
        b.op("reshape", [x])
    with pytest.raises(ValueError, match="convert needs shape="):
        b.op("convert", [x])
    converted = b.op("convert", [x], shape=scalar_shape("s32"))
    assert converted.shape == array_shape("s32", (2, 3))


def test_constant_from_numpy():
    b = ComputationBuilder("c")
    c = b.constant(np.arange(6, dtype=np.float32).reshape(2, 3))
    assert c.shape == array_shape("f32", (2, 3))
    assert c.literal.dtype == np.float32
    assert c.literal[1, 2] == 5
    half = b.constant([1.5, 2.5], element_type="bf16")
    assert half.shape == array_shape("bf16", (2,))
    assert half.literal.dtype == ElementType.BF16.numpy_dtype
    scalar = b.constant(np.int8(-3))
    assert scalar.shape == scalar_shape("s8")


def test_convenience_methods_write_typed_attributes():
    b = ComputationBuilder("c")
    x = b.parameter(array_shape("f32", (6, 4)))
    zero = b.constant(np.float32(0))
    sl = b.slice(x, [0, 1], [6, 4], [2, 1])
    assert sl.attributes == {"slice": (SliceRange(0, 6, 2), SliceRange(1, 4, 1))}
    assert sl.shape == array_shape("f32", (3, 3))
    padded = b.pad(x, zero, [(1, -1), (0, 0, 2)])
    assert padded.attributes["padding"] == PaddingConfig((PadDim(1, -1, 0), PadDim(0, 0, 2)))
    assert padded.shape == array_shape("f32", (6, 10))
    bc = b.broadcast(zero, (2, 3))
    assert bc.attributes == {"dimensions": ()}
    dot = b.dot(x, x, (0,), (0,))
    assert list(dot.attributes) == ["lhs_contracting_dims", "rhs_contracting_dims"]
    assert dot.shape == array_shape("f32", (4, 4))
    cmp = b.compare(x, x, "GE", type="TOTALORDER")
    assert cmp.attributes == {"direction": "GE", "type": "TOTALORDER"}


def test_module_builder_assembles_and_verifies():
    mb = ModuleBuilder("m")
    add = mb.computation("add")
    add.add(add.parameter(F32), add.parameter(F32))
    add_fn = add.build()

    fused = mb.computation("fused")
    p = fused.parameter(array_shape("f32", (4, 8)))
    r = fused.reduce([p], [fused.constant(np.float32(0))], (1,), add_fn)
    fused.tuple([r, fused.exp(p)])
    fused_fn = fused.build()

    main = mb.computation("main")
    arg = main.parameter(array_shape("f32", (4, 8)))
    out = main.fusion([arg], fused_fn)
    main.get_tuple_element(out, 0)
    module = mb.build(entry=main)

    assert [c.name for c in module.computations] == ["add", "fused", "main"]
    assert [c.is_entry for c in module.computations] == [False, False, True]
    assert module.entry.root.shape == array_shape("f32", (4,))
    assert out.shape == TupleShape((array_shape("f32", (4,)), array_shape("f32", (4, 8))))
    ref = out.attributes["calls"]
    assert isinstance(ref, ComputationRef) and ref.computation is fused_fn
    assert out.attributes["kind"] == "kLoop"
    verify_module(module)


def test_module_builder_entry_defaults_to_last_created_and_goes_last():
    mb = ModuleBuilder("m")
    helper = mb.computation("helper")
    helper.negate(helper.parameter(F32))
    main = mb.computation("main")
    main.exp(main.parameter(F32))
    module = mb.build()  # builds both; main was created last
    assert [c.name for c in module.computations] == ["helper", "main"]
    assert module.entry.name == "main"

    mb = ModuleBuilder("m2")
    first = mb.computation("first")
    first.negate(first.parameter(F32))
    first_fn = first.build()
    other = mb.computation("other")
    other.negate(other.parameter(F32))
    module = mb.build(entry=first_fn)
    assert [c.name for c in module.computations] == ["other", "first"]
    assert [c.is_entry for c in module.computations] == [False, True]


def test_module_builder_verifies_unless_told_not_to():
    mb = ModuleBuilder("m")
    main = mb.computation("main")
    x = main.parameter(array_shape("f32", (2,)))
    neg = main.negate(x)
    main.build()
    neg.shape = array_shape("f32", (3,))  # corrupt it after the fact
    with pytest.raises(HloVerifyError, match="declared shape f32\\[3\\]"):
        mb.build()
    module = mb.build(verify=False)
    assert module.entry.root is neg


def test_module_builder_unique_computation_names_and_added_computations():
    mb = ModuleBuilder("m")
    one = mb.computation("f")
    two = mb.computation("f")
    assert (one.name, two.name) == ("f", "f.1")
    outside = ComputationBuilder("outside")
    p = outside.parameter(F32, name="p0")
    outside.negate(p)
    mb.add(outside.build())
    inner = mb.computation("inner")
    q = inner.parameter(F32)
    assert q.name != "p0"


def test_while_and_call_through_builder():
    mb = ModuleBuilder("m")
    state = TupleShape((scalar_shape("s32"), array_shape("f32", (3,))))
    cond = mb.computation("cond")
    cond.compare(cond.get_tuple_element(cond.parameter(state), 0), cond.constant(np.int32(5)), "LT")
    cond_fn = cond.build()
    body = mb.computation("body")
    s = body.parameter(state)
    i = body.get_tuple_element(s, 0)
    v = body.get_tuple_element(s, 1)
    body.tuple([body.add(i, body.constant(np.int32(1))), body.tanh(v)])
    body_fn = body.build()
    main = mb.computation("main")
    init = main.tuple([main.constant(np.int32(0)), main.parameter(array_shape("f32", (3,)))])
    loop = main.while_(init, cond_fn, body_fn)
    main.get_tuple_element(loop, 1)
    module = mb.build()
    assert loop.shape == state
    assert module.entry.name == "main"


def test_generic_op_with_instruction_check():
    b = ComputationBuilder("c")
    x = b.parameter(array_shape("f32", (2,)))
    with pytest.raises(TypeError, match="not an Instruction"):
        b.op("negate", ["x"])  # type: ignore[list-item]
    inst = b.op("negate", [x])
    assert isinstance(inst, Instruction) and inst.opcode == "negate"
