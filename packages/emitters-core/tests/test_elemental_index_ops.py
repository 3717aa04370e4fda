"""Index transformations of the elemental emitter (broadcast, reshape, bitcast, transpose,
copy, slice, reverse) vs the evaluator, and the IR they emit.

Data movement is bit-exact, so inputs are random bit patterns (NaNs with
payloads, infinities, subnormals included) and results are compared byte for
byte. Layouts are logical-index transparent for everything but bitcast, whose
meaning depends on them; both are covered. The IR tests emit into a function
by hand and check that non-trivial map results become ``heron_gpu.apply_indexing``
while identity results and constants need no op.
"""

from __future__ import annotations

import numpy as np
import pytest
from heron_test_support.elemental_cases import check, random_bits
from mlir import ir
from mlir.dialects import func

from heron.emitters.dialect import make_context
from heron.emitters.elemental import ElementalContext, emit_instruction
from heron.emitters.elemental.index_ops import output_to_input_maps
from heron.emitters.ir_utils import walk_ops
from heron.hlo import parse_module
from heron.hlo.element_types import ElementType as E

DTYPES = [E.F32, E.BF16, E.S8, E.PRED, E.S4, E.F8E4M3FN]


@pytest.mark.parametrize("element", DTYPES, ids=str)
def test_chain_of_transforms(element: E) -> None:
    t = element.value
    text = f"""
fusion {{
  p0 = {t}[2,3] parameter(0)
  b = {t}[4,2,3,5] broadcast(p0), dimensions={{1,2}}
  t = {t}[5,3,2,4] transpose(b), dimensions={{3,2,1,0}}
  r = {t}[15,8] reshape(t)
  s = {t}[7,3] slice(r), slice={{[1:15:2], [2:8:2]}}
  c = {t}[7,3] copy(s)
  ROOT v = {t}[7,3] reverse(c), dimensions={{0,1}}
}}"""
    check(text, [random_bits(element, (2, 3), np.random.default_rng(1))])


@pytest.mark.parametrize("element", DTYPES, ids=str)
@pytest.mark.parametrize(
    "source,target",
    [
        ((6, 4), (2, 3, 4)),
        ((2, 3, 4), (24,)),
        ((24,), (4, 6)),
        ((1, 6, 1), (6,)),
        ((6,), (1, 2, 1, 3)),
        ((4, 6), (3, 8)),
        ((), (1, 1)),
    ],
)
def test_reshape(element: E, source, target) -> None:
    t = element.value
    src = ",".join(map(str, source))
    dst = ",".join(map(str, target))
    text = f"""
fusion {{
  p0 = {t}[{src}] parameter(0)
  ROOT r = {t}[{dst}] reshape(p0)
}}"""
    check(text, [random_bits(element, source, np.random.default_rng(2))])


@pytest.mark.parametrize("element", [E.F32, E.S4, E.PRED], ids=str)
def test_broadcast_scalar_and_permuted_dims(element: E) -> None:
    t = element.value
    text = f"""
fusion {{
  p0 = {t}[] parameter(0)
  p1 = {t}[3,2] parameter(1)
  a = {t}[2,4,3] broadcast(p0), dimensions={{}}
  b = {t}[2,4,3] broadcast(p1), dimensions={{2,0}}
  ROOT t = ({t}[2,4,3], {t}[2,4,3]) tuple(a, b)
}}"""
    rng = np.random.default_rng(3)
    check(text, [random_bits(element, (), rng), random_bits(element, (3, 2), rng)])


@pytest.mark.parametrize("element", [E.F32, E.BF16, E.S8], ids=str)
def test_non_default_layouts_are_transparent(element: E) -> None:
    t = element.value
    text = f"""
fusion {{
  p0 = {t}[3,4,5]{{0,2,1}} parameter(0)
  c = {t}[3,4,5]{{2,1,0}} copy(p0)
  t = {t}[5,3,4]{{0,1,2}} transpose(c), dimensions={{2,0,1}}
  ROOT s = {t}[2,3,2]{{1,0,2}} slice(t), slice={{[1:5:2], [0:3], [1:4:2]}}
}}"""
    check(text, [random_bits(element, (3, 4, 5), np.random.default_rng(4))])


@pytest.mark.parametrize(
    "source,target",
    [
        ("f32[2,3]{0,1}", "f32[3,2]{1,0}"),
        ("f32[2,3]{1,0}", "f32[3,2]{0,1}"),
        ("s8[4,6]{0,1}", "s8[2,3,4]{2,1,0}"),
        ("f16[20]{0}", "s16[4,5]{1,0}"),
        ("f8e4m3fn[3,4]{1,0}", "s8[12]{0}"),
        ("u8[2,6]{0,1}", "f8e4m3fn[6,2]{0,1}"),
        ("bf16[2,2,3]{2,0,1}", "f16[12]{0}"),
    ],
)
def test_bitcast_follows_layouts_and_keeps_bits(source: str, target: str) -> None:
    module = parse_module(
        f"fusion {{\n p0 = {source} parameter(0)\n ROOT b = {target} bitcast(p0)\n}}"
    )
    shape = module.computations[-1].parameters[0].array_shape
    text = f"fusion {{\n p0 = {source} parameter(0)\n ROOT b = {target} bitcast(p0)\n}}"
    check(text, [random_bits(shape.element_type, shape.dims, np.random.default_rng(5))])


def test_bitcast_then_arithmetic_corpus_form() -> None:
    text = """
fusion {
  input = f16[20] parameter(0)
  bitcast = s16[4,5] bitcast(input)
  ROOT x = s16[4,5] xor(bitcast, bitcast)
}"""
    out = check(text, [random_bits(E.F16, (20,), np.random.default_rng(6))])
    assert not out[0].any()


def test_tuple_copy() -> None:
    text = """
fusion {
  p0 = s8[3] parameter(0)
  p1 = s8[3] parameter(1)
  t = (s8[3], s8[3]) tuple(p0, p1)
  c = (s8[3], s8[3]) copy(t)
  ROOT g = s8[3] get-tuple-element(c), index=1
}"""
    rng = np.random.default_rng(7)
    check(text, [random_bits(E.S8, (3,), rng), random_bits(E.S8, (3,), rng)])


# -- the emitted IR ------------------------------------------------------------------------------


def _computation(text: str):
    module = parse_module(text)
    return module.computation(module.fusion_under_test)


def _emit(text: str, rank: int):
    """Emit the root of ``text`` into ``@f(index x rank, f32)``; return (module text, resolved)."""
    root = _computation(text).root_instruction
    resolved: list[list[ir.Value]] = []
    with make_context(), ir.Location.unknown():
        module = ir.Module.create()
        index = ir.IndexType.get()
        f32 = ir.F32Type.get()
        with ir.InsertionPoint(module.body):
            function = func.FuncOp("f", ir.FunctionType.get([index] * rank + [f32], [f32]))
            block = function.add_entry_block()
        args = list(block.arguments)

        def resolve(inst, indices):
            resolved.append(list(indices))
            return [args[-1]]

        ctx = ElementalContext(resolve=resolve, call=lambda c, s: [], fusion_name="f")
        with ir.InsertionPoint(block):
            (value,) = emit_instruction(root, args[:rank], ctx)
            func.ReturnOp([value])
        module.operation.verify()
        ops = [op.name for op in walk_ops(module.operation)]
        identity = [[i for i, a in enumerate(args) if a == v] for v in resolved[0]]
        return str(module), ops, identity


def test_reshape_emits_apply_indexing() -> None:
    text, ops, identity = _emit(
        "fusion {\n p0 = f32[6,4] parameter(0)\n ROOT r = f32[24] reshape(p0)\n}", 1
    )
    assert ops.count("heron_gpu.apply_indexing") == 1
    assert "d0 floordiv 4" in text and "d0 mod 4" in text
    assert identity == [[], []]  # both operand indices come from the op


def test_transpose_and_broadcast_need_no_op() -> None:
    _, ops, identity = _emit(
        "fusion {\n p0 = f32[3,4] parameter(0)\n"
        " ROOT t = f32[4,3] transpose(p0), dimensions={1,0}\n}",
        2,
    )
    assert "heron_gpu.apply_indexing" not in ops
    assert identity == [[1], [0]]
    _, ops, identity = _emit(
        "fusion {\n p0 = f32[3] parameter(0)\n"
        " ROOT b = f32[2,3,5] broadcast(p0), dimensions={1}\n}",
        3,
    )
    assert "heron_gpu.apply_indexing" not in ops
    assert identity == [[1]]


def test_unit_dimensions_fold_to_constants() -> None:
    _, ops, identity = _emit(
        "fusion {\n p0 = f32[1,6,1] parameter(0)\n ROOT r = f32[6] reshape(p0)\n}", 1
    )
    assert "heron_gpu.apply_indexing" not in ops
    assert identity == [[], [0], []]
    assert ops.count("arith.constant") == 2


def test_slice_offset_is_one_apply_indexing_for_the_shifted_dims() -> None:
    text, ops, identity = _emit(
        "fusion {\n p0 = f32[8,8] parameter(0)\n"
        " ROOT s = f32[3,8] slice(p0), slice={[2:8:2], [0:8]}\n}",
        2,
    )
    assert ops.count("heron_gpu.apply_indexing") == 1
    assert "d0 * 2 + 2" in text
    assert identity == [[], [1]]


def test_maps_are_cached_per_instruction() -> None:
    text = "fusion {\n p0 = f32[6,4] parameter(0)\n ROOT r = f32[24] reshape(p0)\n}"
    inst = _computation(text).root_instruction
    ctx = ElementalContext(resolve=None, call=None)
    first = output_to_input_maps(inst, ctx)
    assert output_to_input_maps(inst, ctx) is first
