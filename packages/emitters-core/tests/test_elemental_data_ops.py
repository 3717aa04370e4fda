"""Data-creating and data-selecting lowerings (constant, iota, pad, concatenate,
dynamic-slice, dynamic-update-slice, gather, tuple, get-tuple-element, map) vs
the evaluator, bit for bit.

Array constants are ``arith.constant dense<...>`` tensors read with
``tensor.extract`` (the host harness bufferizes them, see
``heron_test_support.host_constants``). Start indices are fed out-of-bounds values of
several integer types to check the evaluator's clamping.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
from heron_test_support.elemental_cases import check, random_bits, resolution_sites
from heron_test_support.elemental_jit import run_hlo
from mlir import ir
from mlir.dialects import arith, func, scf

from heron.emitters.dialect import make_context
from heron.emitters.elemental import ElementalContext, emit_instruction
from heron.emitters.ir_utils import walk_ops
from heron.hlo import UnsupportedError, parse_module
from heron.hlo.element_types import ElementType as E

DTYPES = [E.F32, E.BF16, E.S8, E.PRED, E.S4, E.F8E4M3FN]


def _sites(text: str, rank: int) -> dict[str, list[str]]:
    """Where the root's operands are resolved; they are i32 and no computation is called."""
    return resolution_sites(text, rank, lambda: ir.IntegerType.get_signless(32))


# -- constants -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "literal",
    [
        "f32[] constant(-0)",
        "f32[] constant(nan)",
        "f32[] constant(-inf)",
        "f32[] constant(1e-45)",
        "f32[] constant(3.40282347e+38)",
        "bf16[] constant(-1.5)",
        "f16[] constant(6.1e-05)",
        "f64[] constant(-0.1)",
        "f8e4m3fn[] constant(-448)",
        "f8e5m2[] constant(-inf)",
        "f4e2m1fn[] constant(-6)",
        "s4[] constant(-8)",
        "u4[] constant(15)",
        "s8[] constant(-128)",
        "u32[] constant(4294967295)",
        "s64[] constant(-9223372036854775808)",
        "pred[] constant(true)",
        "c64[] constant((1.5, -0))",
        "f32[4] constant({2.5, 2.5, 2.5, 2.5})",
    ],
)
def test_scalar_and_splat_constants(literal: str) -> None:
    element = literal.split("[")[0]
    text = f"""
fusion {{
  c = {literal}
  ROOT b = {element}[3,4] broadcast(c), dimensions={{{"1" if "[4]" in literal else ""}}}
}}"""
    check(text, [])


@pytest.mark.parametrize(
    "literal",
    [
        "f32[2,3] constant({{0, -0, nan}, {inf, -1e-45, 7}})",
        "bf16[4] constant({1, -2, 3.5, -inf})",
        "f16[3] constant({65504, -0, 0.5})",
        "s4[3] constant({-2, -3, -4})",
        "u4[4] constant({0, 15, 7, 8})",
        "pred[2,2] constant({{true, false}, {false, true}})",
        "f8e4m3fn[3] constant({-448, 0.5, 0})",
        "f4e2m1fn[3] constant({-6, 0.5, 3})",
        "u8[3] constant({255, 0, 128})",
        "s64[2] constant({-9223372036854775808, 1})",
        "c64[2] constant({(1, -2), (0.5, 3)})",
    ],
)
def test_array_constants(literal: str) -> None:
    head, _ = literal.split(" constant")
    element, dims = head.rstrip("]").split("[")
    rank = len(dims.split(","))
    perm = ",".join(map(str, reversed(range(rank))))
    out_dims = ",".join(reversed(dims.split(",")))
    text = f"""
fusion {{
  c = {literal}
  ROOT t = {element}[{out_dims}] transpose(c), dimensions={{{perm}}}
}}"""
    check(text, [])


def test_array_constant_is_emitted_once_at_function_entry() -> None:
    module = parse_module(
        """
fusion {
  c = s32[4] constant({1, 2, 3, 4})
  r = s32[4] reverse(c), dimensions={0}
  ROOT x = s32[4] xor(c, r)
}"""
    )
    root = module.computation(module.fusion_under_test).root_instruction
    with make_context(), ir.Location.unknown():
        ir_module = ir.Module.create()
        index = ir.IndexType.get()
        i32 = ir.IntegerType.get_signless(32)
        with ir.InsertionPoint(ir_module.body):
            function = func.FuncOp("f", ir.FunctionType.get([index], [i32]))
            entry = function.add_entry_block()
        ctx = ElementalContext(
            resolve=lambda inst, idx: emit_instruction(inst, idx, ctx), call=None
        )
        with ir.InsertionPoint(entry):
            zero = arith.ConstantOp(index, 0).result
            two = arith.ConstantOp(index, 2).result
            one = arith.ConstantOp(index, 1).result
            loop = scf.ForOp(zero, two, one, [arith.ConstantOp(i32, 0).result])
            with ir.InsertionPoint(loop.body):
                (value,) = emit_instruction(root, [entry.arguments[0]], ctx)
                (again,) = emit_instruction(root, [loop.induction_variable], ctx)
                scf.YieldOp([arith.AddIOp(value, again).result])
            func.ReturnOp([loop.results[0]])
        ir_module.operation.verify()
        tensors = [
            op
            for op in walk_ops(ir_module.operation, "arith.constant")
            if isinstance(op.results[0].type, ir.RankedTensorType)
        ]
        assert len(tensors) == 1
        assert tensors[0].block == entry
        assert len(walk_ops(ir_module.operation, "tensor.extract")) == 4


def test_elided_constant_is_unsupported() -> None:
    with pytest.raises(UnsupportedError, match="elided"):
        run_hlo("fusion {\n ROOT c = f32[2,3] constant({...})\n}", [])


# -- iota ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "shape",
    [
        "f32[3,50]",
        "bf16[2,300]",
        "f16[2,3000]",
        "f64[4,7]",
        "s8[2,300]",
        "u4[2,20]",
        "s4[2,20]",
        "u64[3,9]",
        "pred[2,3]",
        "f8e4m3fn[2,600]",
        "f8e5m2[2,70000]",
        "c64[2,5]",
    ],
)
def test_iota(shape: str) -> None:
    check(f"fusion {{\n ROOT i = {shape} iota(), iota_dimension=1\n}}", [])


def test_iota_on_the_outer_dimension() -> None:
    check("fusion {\n ROOT i = s32[5,3,2] iota(), iota_dimension=0\n}", [])


# -- pad ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("element", DTYPES, ids=str)
@pytest.mark.parametrize(
    "padding,out",
    [
        ("1_2x0_0", "6,4"),
        ("0_0_2x1_1_1", "7,9"),
        ("-1_2x-2_-1", "4,1"),
        ("-1_-1_1x2_-3_2", "3,9"),
        ("0_0x0_0", "3,4"),
    ],
)
def test_pad(element: E, padding: str, out: str) -> None:
    t = element.value
    text = f"""
fusion {{
  p0 = {t}[3,4] parameter(0)
  v = {t}[] parameter(1)
  ROOT p = {t}[{out}] pad(p0, v), padding={padding}
}}"""
    rng = np.random.default_rng(11)
    check(text, [random_bits(element, (3, 4), rng), random_bits(element, (), rng)])


def test_pad_with_constant_value_and_epilogue() -> None:
    text = """
fusion {
  p0 = s32[2,3] parameter(0)
  c = s32[] constant(-7)
  p = s32[5,7] pad(p0, c), padding=1_2x2_0_1
  ROOT x = s32[5,7] xor(p, p)
}"""
    out = check(text, [np.arange(6, dtype=np.int32).reshape(2, 3)])
    assert not out[0].any()


# -- concatenate -----------------------------------------------------------------------------------


@pytest.mark.parametrize("element", DTYPES, ids=str)
def test_concatenate_many_operands(element: E) -> None:
    t = element.value
    text = f"""
fusion {{
  a = {t}[2,3] parameter(0)
  b = {t}[2,1] parameter(1)
  c = {t}[2,0] parameter(2)
  d = {t}[2,4] parameter(3)
  e = {t}[2,2] parameter(4)
  ROOT r = {t}[2,10] concatenate(a, b, c, d, e), dimensions={{1}}
}}"""
    rng = np.random.default_rng(12)
    dims = [(2, 3), (2, 1), (2, 0), (2, 4), (2, 2)]
    check(text, [random_bits(element, d, rng) for d in dims])


def test_concatenate_outer_dimension_with_layouts() -> None:
    text = """
fusion {
  a = f32[1,4]{0,1} parameter(0)
  b = f32[3,4]{1,0} parameter(1)
  c = f32[2,4]{0,1} parameter(2)
  ROOT r = f32[6,4]{0,1} concatenate(a, b, c), dimensions={0}
}"""
    rng = np.random.default_rng(13)
    check(text, [random_bits(E.F32, d, rng) for d in [(1, 4), (3, 4), (2, 4)]])


# -- dynamic-slice and dynamic-update-slice ----------------------------------------------

STARTS = [
    ("s32", [0, 0]),
    ("s32", [5, -3]),
    ("s32", [-2147483648, 2147483647]),
    ("u32", [4294967295, 1]),
    ("s8", [-128, 2]),
    ("u8", [255, 3]),
    ("s64", [-(2**63), 2**63 - 1]),
    ("u64", [2**64 - 1, 2**63]),
    ("s16", [1, 1]),
]


@pytest.mark.parametrize("index_type,starts", STARTS)
@pytest.mark.parametrize("element", [E.F32, E.S4], ids=str)
def test_dynamic_slice_clamps_starts(element: E, index_type: str, starts) -> None:
    t = element.value
    text = f"""
fusion {{
  p0 = {t}[5,6] parameter(0)
  i = {index_type}[] parameter(1)
  j = {index_type}[] parameter(2)
  ROOT s = {t}[2,3] dynamic-slice(p0, i, j), dynamic_slice_sizes={{2,3}}
}}"""
    dtype = E(index_type).numpy_dtype
    rng = np.random.default_rng(14)
    inputs = [random_bits(element, (5, 6), rng), *(np.asarray(s).astype(dtype) for s in starts)]
    check(text, inputs)


def test_dynamic_slice_of_the_whole_dimension_reads_no_start() -> None:
    text = """
fusion {
  p0 = s32[4,6] parameter(0)
  i = s32[] parameter(1)
  j = s32[] parameter(2)
  ROOT s = s32[4,2] dynamic-slice(p0, i, j), dynamic_slice_sizes={4,2}
}"""
    check(text, [np.arange(24, dtype=np.int32).reshape(4, 6), np.int32(3), np.int32(9)])


@pytest.mark.parametrize("index_type,starts", STARTS)
@pytest.mark.parametrize("element", [E.PRED, E.F8E4M3FN], ids=str)
def test_dynamic_update_slice_clamps_starts(element: E, index_type: str, starts) -> None:
    t = element.value
    text = f"""
fusion {{
  p0 = {t}[4,5] parameter(0)
  u = {t}[2,3] parameter(1)
  i = {index_type}[] parameter(2)
  j = {index_type}[] parameter(3)
  ROOT s = {t}[4,5] dynamic-update-slice(p0, u, i, j)
}}"""
    dtype = E(index_type).numpy_dtype
    rng = np.random.default_rng(15)
    inputs = [
        random_bits(element, (4, 5), rng),
        random_bits(element, (2, 3), rng),
        *(np.asarray(s).astype(dtype) for s in starts),
    ]
    check(text, inputs)


def test_dynamic_update_slice_complex_corpus_form() -> None:
    text = """
fusion {
  in = c64[2,3] parameter(0)
  updates = c64[2,2] parameter(1)
  i0 = s32[] parameter(2)
  i1 = s32[] parameter(3)
  ROOT updated = c64[2,3] dynamic-update-slice(in, updates, i0, i1)
}"""
    rng = np.random.default_rng(16)
    for i1 in (-1, 0, 1, 2, 7):
        inputs = [
            random_bits(E.C64, (2, 3), rng),
            random_bits(E.C64, (2, 2), rng),
            np.int32(5),
            np.int32(i1),
        ]
        check(text, inputs)


# -- gather ---------------------------------------------------------------------------------------


def test_gather_general_start_index_map() -> None:
    text = """
fusion {
  operand = f32[30,20] parameter(0)
  indices = s32[10,2] parameter(1)
  ROOT gather = f32[10,4,8] gather(operand, indices), offset_dims={1,2},
    collapsed_slice_dims={}, start_index_map={1,0}, index_vector_dim=1, slice_sizes={4,8}
}"""
    rng = np.random.default_rng(17)
    indices = rng.integers(-40, 60, (10, 2)).astype(np.int32)
    indices[0] = [2**31 - 1, -(2**31)]
    check(text, [random_bits(E.F32, (30, 20), rng), indices])


@pytest.mark.parametrize("index_type", ["s32", "u8", "s64", "u32"])
def test_gather_canonical_take(index_type: str) -> None:
    text = f"""
fusion {{
  operand = bf16[5,4] parameter(0)
  indices = {index_type}[3,1] parameter(1)
  ROOT g = bf16[3,4] gather(operand, indices), offset_dims={{1}},
    collapsed_slice_dims={{0}}, start_index_map={{0}}, index_vector_dim=1, slice_sizes={{1,4}}
}}"""
    rng = np.random.default_rng(18)
    dtype = E(index_type).numpy_dtype
    info = np.iinfo(dtype)
    indices = np.array([[info.max], [info.min], [3]]).astype(dtype)
    check(text, [random_bits(E.BF16, (5, 4), rng), indices])


def test_gather_implicit_index_vector_dim() -> None:
    text = """
fusion {
  operand = s8[7,3] parameter(0)
  indices = s32[2,2] parameter(1)
  ROOT g = s8[2,2,2,3] gather(operand, indices), offset_dims={2,3},
    collapsed_slice_dims={}, start_index_map={0}, index_vector_dim=2, slice_sizes={2,3}
}"""
    rng = np.random.default_rng(19)
    indices = np.array([[0, 6], [-1, 3]], np.int32)
    check(text, [random_bits(E.S8, (7, 3), rng), indices])


def test_gather_with_batching_dims() -> None:
    text = """
fusion {
  operand = f32[2,5,3] parameter(0)
  indices = s32[2,4,1] parameter(1)
  ROOT g = f32[2,4,3] gather(operand, indices), offset_dims={2},
    collapsed_slice_dims={1}, start_index_map={1}, index_vector_dim=2, slice_sizes={1,1,3},
    operand_batching_dims={0}, start_indices_batching_dims={0}
}"""
    rng = np.random.default_rng(20)
    indices = rng.integers(-2, 7, (2, 4, 1)).astype(np.int32)
    check(text, [random_bits(E.F32, (2, 5, 3), rng), indices])


# -- tuples and map --------------------------------------------------------------------


def test_nested_tuples_and_get_tuple_element() -> None:
    text = """
fusion {
  p0 = s32[4] parameter(0)
  p1 = s32[4] parameter(1)
  p2 = u8[4] parameter(2)
  inner = (s32[4], s32[4]) tuple(p0, p1)
  outer = ((s32[4], s32[4]), u8[4]) tuple(inner, p2)
  g0 = (s32[4], s32[4]) get-tuple-element(outer), index=0
  g1 = s32[4] get-tuple-element(g0), index=1
  g2 = u8[4] get-tuple-element(outer), index=1
  x = s32[4] xor(g1, p0)
  ROOT t = (s32[4], u8[4]) tuple(x, g2)
}"""
    rng = np.random.default_rng(21)
    inputs = [
        random_bits(E.S32, (4,), rng),
        random_bits(E.S32, (4,), rng),
        random_bits(E.U8, (4,), rng),
    ]
    check(text, inputs)


def test_map_applies_its_computation() -> None:
    text = """
body {
  a = s32[] parameter(0)
  b = s32[] parameter(1)
  three = s32[] constant(3)
  s = s32[] shift-left(a, three)
  ROOT x = s32[] xor(s, b)
}

fusion {
  p0 = s32[3,4] parameter(0)
  p1 = s32[3,4] parameter(1)
  ROOT m = s32[3,4] map(p0, p1), dimensions={0,1}, to_apply=body
}"""
    rng = np.random.default_rng(22)
    check(text, [random_bits(E.S32, (3, 4), rng), random_bits(E.S32, (3, 4), rng)])


def test_float8_values_are_moved_as_bits() -> None:
    values = np.arange(256, dtype=np.uint8).view(ml_dtypes.float8_e4m3fn).reshape(16, 16)
    text = """
fusion {
  p0 = f8e4m3fn[16,16] parameter(0)
  v = f8e4m3fn[] parameter(1)
  p = f8e4m3fn[18,16] pad(p0, v), padding=1_1x0_0
  ROOT s = f8e4m3fn[16,16] slice(p), slice={[1:17], [0:16]}
}"""
    out = check(text, [values, np.asarray(0, ml_dtypes.float8_e4m3fn)])
    np.testing.assert_array_equal(out[0].view(np.uint8), values.view(np.uint8))


def test_selected_operands_are_resolved_only_in_their_branch() -> None:
    sites = _sites(
        "fusion {\n p0 = s32[3] parameter(0)\n v = s32[] parameter(1)\n"
        " ROOT p = s32[7] pad(p0, v), padding=2_2\n}",
        1,
    )
    assert sites == {"p0": ["scf.if"], "v": ["scf.if"]}
    sites = _sites(
        "fusion {\n a = s32[2] parameter(0)\n b = s32[3] parameter(1)\n c = s32[1] parameter(2)\n"
        " ROOT r = s32[6] concatenate(a, b, c), dimensions={0}\n}",
        1,
    )
    assert sites == {"a": ["scf.if"], "b": ["scf.if"], "c": ["scf.if"]}
    sites = _sites(
        "fusion {\n p = s32[4] parameter(0)\n u = s32[2] parameter(1)\n"
        " i = s32[] parameter(2)\n ROOT r = s32[4] dynamic-update-slice(p, u, i)\n}",
        1,
    )
    assert sites == {"i": ["func.func"], "u": ["scf.if"], "p": ["scf.if"]}


def _if_depths(text: str, rank: int) -> dict[str, int]:
    """Emit the root of ``text`` by hand; for each operand, how many ``scf.if`` enclose
    the point where it is read."""
    module = parse_module(text)
    root = module.computation(module.fusion_under_test).root_instruction
    depths: dict[str, int] = {}
    with make_context(), ir.Location.unknown():
        ir_module = ir.Module.create()
        index = ir.IndexType.get()
        operand = ir.IntegerType.get_signless(32)
        with ir.InsertionPoint(ir_module.body):
            function = func.FuncOp("f", ir.FunctionType.get([index] * rank + [operand], []))
            block = function.add_entry_block()
        args = list(block.arguments)

        def resolve(inst, indices):
            depth, op = 0, ir.InsertionPoint.current.block.owner.operation
            while op.name != "func.func":
                depth += op.name == "scf.if"
                op = op.parent
            depths[inst.name] = depth
            return [args[-1]]

        with ir.InsertionPoint(block):
            emit_instruction(root, args[:rank], ElementalContext(resolve=resolve, call=None))
            func.ReturnOp([])
        ir_module.operation.verify()
    return depths


def test_a_concatenate_selects_its_operand_by_halving_the_range() -> None:
    # XLA's EmitConcat: each scf.if halves the operands left, so 64 operands nest
    # 6 deep. A chain of ifs nested 63 deep; the 196 columns of a convolution's
    # im2col went past the recursion limit of what walks regions (the
    # interpreter's capture stage).
    count = 64
    parameters = "\n".join(f"  p{i} = s32[2,{1 + i % 3}] parameter({i})" for i in range(count))
    names = ", ".join(f"p{i}" for i in range(count))
    width = sum(1 + i % 3 for i in range(count))
    text = (
        f"fusion {{\n{parameters}\n"
        f"  ROOT r = s32[2,{width}] concatenate({names}), dimensions={{1}}\n}}"
    )
    depths = _if_depths(text, 2)
    assert sorted(depths) == sorted(f"p{i}" for i in range(count))
    assert set(depths.values()) == {6}
    rng = np.random.default_rng(14)
    check(text, [random_bits(E.S32, (2, 1 + i % 3), rng) for i in range(count)])
