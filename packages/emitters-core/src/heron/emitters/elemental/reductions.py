"""Elemental lowerings of ops that combine many operand elements into one: reduce,
reduce-window and dot.

One output element is a loop (``scf.for``) over the elements it combines,
carrying the accumulators as ``iter_args``; operand elements and reducer
calls are emitted inside the loop body, so the resolver's values live there.

Numerics follow the reference evaluator exactly:

* ``reduce`` combines the reduced elements (row-major order) by a pairwise
  tree -- (0,1), (2,3), ..., then pairs of pairs, an odd last element carried
  up -- and combines the init value last, as the left operand. A loop
  computes that tree with one pending partial result per tree level (a
  binary counter: element ``i`` merges with the pending results of the
  levels where ``i`` has its trailing one bits). When the reducer is known
  not to depend on the order (integer add/multiply/and/or/xor/max/min, float
  max/min) a plain accumulation ``acc = f(acc, x)`` from the init value is
  used instead: same result, less code.
* ``reduce-window`` folds the window in row-major order starting from the
  init value; padding and base-dilation holes are skipped.
* ``dot`` accumulates products in a wide type (f32 for floats of 32 bits or
  fewer, f64 when an f64 is involved, i64 for integers, complex likewise)
  and converts once at the end (``linalg.accumulation_dtype``).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

from mlir import ir
from mlir.dialects import arith, scf
from mlir.dialects import complex as complex_dialect

from heron.emitters.elemental.core import ElementalContext, Values, lowering, unsupported
from heron.emitters.elemental.data_ops import domain_condition, if_else, leaf_types
from heron.emitters.elemental.index_ops import apply_expressions, apply_map, output_to_input_maps
from heron.emitters.ir_utils import index_constant
from heron.emitters.mlir_types import element_type, scalar_type
from heron.hlo.element_types import ElementType
from heron.hlo.ir import Computation, Instruction
from heron.hlo.shapes import TupleShape
from heron.indexing import Dim, IndexingMap
from heron.indexing.hlo_indexing import reshape_exprs

#: Reducer ops whose result does not depend on the order of the combined elements.
_INTEGER_ORDERLESS = frozenset({"add", "multiply", "and", "or", "xor", "maximum", "minimum"})
_FLOAT_ORDERLESS = frozenset({"maximum", "minimum"})

LoopBody = Callable[[list[ir.Value], list[ir.Value]], list[ir.Value]]


def _loop_nest(sizes: Sequence[int], inits: Sequence[ir.Value], body: LoopBody) -> list[ir.Value]:
    """``scf.for`` over each of ``sizes`` (row-major) carrying ``inits``.

    ``body(ivs, accumulators)`` runs in the innermost body and returns the
    new accumulators. Dimensions of size 1 get no loop (index 0).
    """

    def level(position: int, ivs: list[ir.Value], accumulators: list[ir.Value]) -> list[ir.Value]:
        if position == len(sizes):
            return list(body(ivs, accumulators))
        if sizes[position] == 1:
            return level(position + 1, [*ivs, index_constant(0)], accumulators)
        loop = scf.ForOp(
            index_constant(0), index_constant(sizes[position]), index_constant(1), accumulators
        )
        with ir.InsertionPoint(loop.body):
            inner = level(position + 1, [*ivs, loop.induction_variable], list(loop.inner_iter_args))
            scf.YieldOp(inner)
        return list(loop.results)

    return level(0, [], list(inits))


def _is_orderless(computation: Computation, elements: Sequence[ElementType]) -> bool:
    """Whether the reducer is one binary op whose fold does not depend on the order."""
    params = computation.parameters
    root = computation.root_instruction
    if len(params) != 2 or len(elements) != 1 or len(root.operands) != 2:
        return False
    if {id(op) for op in root.operands} != {id(p) for p in params}:
        return False
    (element,) = elements
    if element.is_integral or element.is_pred:
        return root.opcode in _INTEGER_ORDERLESS
    if element.is_floating:
        return root.opcode in _FLOAT_ORDERLESS
    return False


def _call(ctx: ElementalContext, inst: Instruction, comp: Computation, args) -> list[ir.Value]:
    values = list(ctx.call(comp, list(args)))
    expected = len(args) // 2
    if len(values) != expected:
        raise unsupported(
            ctx, inst, f"reducer '{comp.name}' returns {len(values)} values, {expected} expected"
        )
    return values


# -- reduce --------------------------------------------------------------------------------


@lowering("reduce")
def _reduce(inst: Instruction, indices: Sequence[ir.Value], ctx: ElementalContext) -> Values:
    count = len(inst.operands) // 2
    if count == 0 or len(inst.operands) != 2 * count:
        raise unsupported(ctx, inst, f"{len(inst.operands)} operands (inputs, then inits)")
    input_map = output_to_input_maps(inst, ctx)[0]
    sizes = [v.bounds.upper + 1 for v in input_map.range_vars]
    total = math.prod(sizes)
    comp = inst.called("to_apply")
    inits = [ctx.operand(inst, count + k, []) for k in range(count)]
    if total == 0:
        return inits
    elements = [leaf.element_type for leaf in inst.shape.leaves()]

    def element_values(symbols: Sequence[ir.Value]) -> list[ir.Value]:
        operand_indices = apply_map(input_map, indices, symbols)
        return [ctx.operand(inst, k, operand_indices) for k in range(count)]

    if _is_orderless(comp, elements):
        return _loop_nest(
            sizes,
            inits,
            lambda ivs, acc: _call(ctx, inst, comp, [*acc, *element_values(ivs)]),
        )
    folded = _tree_fold(inst, ctx, comp, sizes, inits, element_values)
    return _call(ctx, inst, comp, [*inits, *folded])


def _tree_fold(
    inst: Instruction,
    ctx: ElementalContext,
    comp: Computation,
    sizes: Sequence[int],
    placeholders: Sequence[ir.Value],
    element_values: Callable[[Sequence[ir.Value]], list[ir.Value]],
) -> list[ir.Value]:
    """The evaluator's pairwise tree over ``prod(sizes)`` elements, in one loop.

    Slot ``L`` holds the pending result of a complete block of ``2**L``
    elements. Element ``i`` is carried up through the levels where ``i`` has
    a one bit (merging with that level's slot, the left operand) and stored
    at the first level where it has a zero bit -- so after the loop the
    slots that hold blocks are the one bits of the element count, folded
    right to left at the end.
    """
    total = math.prod(sizes)
    count = len(placeholders)
    types = [v.type for v in placeholders]
    levels = (total - 1).bit_length() + 1
    if total == 1:
        return element_values([index_constant(0)] * len(sizes))
    position_map = IndexingMap.for_shape([total], [Dim(0)])
    split = reshape_exprs([Dim(0)], [total], list(sizes))
    loop = scf.ForOp(
        index_constant(0), index_constant(total), index_constant(1), list(placeholders) * levels
    )
    with ir.InsertionPoint(loop.body):
        i = loop.induction_variable
        slots = list(loop.inner_iter_args)
        carry = element_values(apply_expressions(position_map, split, [i]))
        new_slots: list[ir.Value] = []
        for level in range(levels):
            slot = slots[level * count : (level + 1) * count]
            low_ones = _bits_all_set(i, (1 << level) - 1)
            if level == levels - 1:  # i < 2**level: the bit is 0, the carry stops here
                store = low_ones
            else:
                bit = _bits_all_set(i, 1 << level)
                merge = _and(low_ones, bit)
                not_bit = arith.XOrIOp(bit, _true()).result
                store = _and(low_ones, not_bit)
                previous = carry
                carry = if_else(
                    merge,
                    types,
                    lambda slot=slot, previous=previous: _call(ctx, inst, comp, [*slot, *previous]),
                    lambda previous=previous: previous,
                )
            new_slots += [
                v if store is None else arith.SelectOp(store, c, v).result
                for c, v in zip(carry, slot, strict=True)
            ]
        scf.YieldOp(new_slots)
    final = list(loop.results)
    result: list[ir.Value] | None = None
    for level in range(levels):
        if total >> level & 1:
            slot = final[level * count : (level + 1) * count]
            result = slot if result is None else _call(ctx, inst, comp, [*slot, *result])
    assert result is not None
    return result


def _true() -> ir.Value:
    return arith.ConstantOp(ir.IntegerType.get_signless(1), 1).result


def _and(a: ir.Value | None, b: ir.Value) -> ir.Value:
    return b if a is None else arith.AndIOp(a, b).result


def _bits_all_set(value: ir.Value, mask: int) -> ir.Value | None:
    """``(value & mask) == mask`` on an index (None, meaning true, for an empty mask)."""
    if mask == 0:
        return None
    masked = arith.AndIOp(value, index_constant(mask)).result
    return arith.CmpIOp(arith.CmpIPredicate.eq, masked, index_constant(mask)).result


# -- reduce-window -------------------------------------------------------------------------


@lowering("reduce-window")
def _reduce_window(inst: Instruction, indices: Sequence[ir.Value], ctx: ElementalContext) -> Values:
    count = len(inst.operands) // 2
    if count == 0 or len(inst.operands) != 2 * count:
        raise unsupported(ctx, inst, f"{len(inst.operands)} operands (inputs, then inits)")
    input_map = output_to_input_maps(inst, ctx)[0]
    sizes = [v.bounds.upper + 1 for v in input_map.range_vars]
    comp = inst.called("to_apply")
    inits = [ctx.operand(inst, count + k, []) for k in range(count)]
    if math.prod(sizes) == 0:
        return inits
    types = leaf_types(inst)

    def body(ivs: list[ir.Value], acc: list[ir.Value]) -> list[ir.Value]:
        condition, operand_indices = domain_condition(
            input_map, indices, ivs, extra=input_map.results
        )

        def combine() -> list[ir.Value]:
            values = [ctx.operand(inst, k, operand_indices) for k in range(count)]
            return _call(ctx, inst, comp, [*acc, *values])

        if condition is None:
            return combine()
        return if_else(condition, types, combine, lambda: acc)

    return _loop_nest(sizes, inits, body)


# -- dot -----------------------------------------------------------------------------------


def _accumulation_type(types: Sequence[ElementType]) -> ElementType:
    """The evaluator's ``linalg.accumulation_dtype`` as an HLO element type."""
    if any(t.is_complex for t in types):
        wide = any(t in (ElementType.C128, ElementType.F64) for t in types)
        return ElementType.C128 if wide else ElementType.C64
    if any(t.is_floating for t in types):
        return ElementType.F64 if ElementType.F64 in types else ElementType.F32
    return ElementType.U64 if ElementType.U64 in types else ElementType.S64


def _fp8_to_f32(value: ir.Value, element: ElementType, inst: Instruction, ctx) -> ir.Value:
    from heron.emitters.elemental import conversions

    convert = getattr(conversions, "to_f32", None)
    if convert is None:
        raise unsupported(ctx, inst, f"conversion from {element} is not available yet")
    return convert(value, element)


def _fp8_from_f32(value: ir.Value, element: ElementType, inst: Instruction, ctx) -> ir.Value:
    from heron.emitters.elemental import conversions

    convert = getattr(conversions, "from_f32", None)
    if convert is None:
        raise unsupported(ctx, inst, f"conversion to {element} is not available yet")
    return convert(value, element)


def _widen(value: ir.Value, src: ElementType, acc: ElementType, inst, ctx) -> ir.Value:
    """An operand element converted (exactly, as the evaluator's astype) to the accumulator."""
    target = scalar_type(acc)
    if acc.is_complex:
        part = element_type(acc.component_type)
        if src.is_complex:
            if src is acc:
                return value
            real = arith.ExtFOp(part, complex_dialect.ReOp(value).result).result
            imag = arith.ExtFOp(part, complex_dialect.ImOp(value).result).result
            return complex_dialect.CreateOp(target, real, imag).result
        real = _widen(value, src, acc.component_type, inst, ctx)
        zero = arith.ConstantOp(part, 0.0).result
        return complex_dialect.CreateOp(target, real, zero).result
    if acc.is_integral:
        if src.bit_width == 64:
            return value
        extend = arith.ExtSIOp if src.is_signed_integral else arith.ExtUIOp
        return extend(target, value).result
    # float accumulator
    if src.is_pred or src.is_unsigned_integral:
        return arith.UIToFPOp(target, value).result
    if src.is_signed_integral:
        return arith.SIToFPOp(target, value).result
    if src.is_fp8_or_smaller:
        value = _fp8_to_f32(value, src, inst, ctx)
        src = ElementType.F32
    if value.type == target:
        return value
    return arith.ExtFOp(target, value).result


def _finish(value: ir.Value, acc: ElementType, out: ElementType, inst, ctx) -> ir.Value:
    """The accumulated sum converted to the result type (the evaluator's ``_finish``)."""
    if out.is_pred:
        if acc.is_integral:
            zero = arith.ConstantOp(value.type, 0).result
            return arith.CmpIOp(arith.CmpIPredicate.ne, value, zero).result
        if acc.is_floating:
            zero = arith.ConstantOp(value.type, 0.0).result
            return arith.CmpFOp(arith.CmpFPredicate.UNE, value, zero).result
        raise unsupported(ctx, inst, f"a {acc} dot with a pred result")
    if acc.is_integral:
        if not out.is_integral:
            raise unsupported(ctx, inst, f"an integer dot with a {out} result")
        return value if out.bit_width == 64 else arith.TruncIOp(scalar_type(out), value).result
    if acc.is_complex:
        if not out.is_complex:
            raise unsupported(ctx, inst, f"a complex dot with a {out} result")
        if out is acc:
            return value
        part = element_type(out.component_type)
        real = arith.TruncFOp(part, complex_dialect.ReOp(value).result).result
        imag = arith.TruncFOp(part, complex_dialect.ImOp(value).result).result
        return complex_dialect.CreateOp(scalar_type(out), real, imag).result
    if not out.is_floating:
        raise unsupported(ctx, inst, f"a floating-point dot with a {out} result")
    if out is acc:
        return value
    if acc is ElementType.F64:
        if out is ElementType.F16:
            return arith.TruncFOp(scalar_type(out), value).result  # one rounding, as numpy
        if out.is_fp8_or_smaller:
            raise unsupported(ctx, inst, f"an f64 dot with a {out} result")
        value = arith.TruncFOp(ir.F32Type.get(), value).result
        if out is ElementType.F32:
            return value
    if out.is_fp8_or_smaller:
        return _fp8_from_f32(value, out, inst, ctx)
    return arith.TruncFOp(scalar_type(out), value).result


#: The dot's two operations on its accumulation type: (complex, integer, float) ops.
_DOT_OPS = {
    "multiply": (complex_dialect.MulOp, arith.MulIOp, arith.MulFOp),
    "add": (complex_dialect.AddOp, arith.AddIOp, arith.AddFOp),
}


def _dot_op(name: str, a: ir.Value, b: ir.Value, acc: ElementType) -> ir.Value:
    """``a`` times or plus ``b`` in the accumulation type ``acc``."""
    complex_op, integer_op, float_op = _DOT_OPS[name]
    op = complex_op if acc.is_complex else integer_op if acc.is_integral else float_op
    return op(a, b).result


def _zero(acc: ElementType) -> ir.Value:
    target = scalar_type(acc)
    if acc.is_complex:
        part = element_type(acc.component_type)
        zero = arith.ConstantOp(part, 0.0).result
        return complex_dialect.CreateOp(target, zero, zero).result
    if acc.is_integral:
        return arith.ConstantOp(target, 0).result
    return arith.ConstantOp(target, 0.0).result


@lowering("dot")
def _dot(inst: Instruction, indices: Sequence[ir.Value], ctx: ElementalContext) -> Values:
    if isinstance(inst.shape, TupleShape) or len(inst.operands) != 2:
        raise unsupported(ctx, inst, "a dot needs two array operands and an array result")
    lhs_map, rhs_map = output_to_input_maps(inst, ctx)
    sizes = [v.bounds.upper + 1 for v in lhs_map.range_vars]
    lhs_type = inst.operands[0].array_shape.element_type
    rhs_type = inst.operands[1].array_shape.element_type
    out_type = inst.array_shape.element_type
    acc = _accumulation_type([lhs_type, rhs_type, out_type])

    def product(ivs: list[ir.Value]) -> ir.Value:
        a = ctx.operand(inst, 0, apply_map(lhs_map, indices, ivs))
        b = ctx.operand(inst, 1, apply_map(rhs_map, indices, ivs))
        a = _widen(a, lhs_type, acc, inst, ctx)
        b = _widen(b, rhs_type, acc, inst, ctx)
        return _dot_op("multiply", a, b, acc)

    if not sizes:
        # Nothing contracted: each element is one product, as XLA makes such a dot (a
        # multiply); a sum from +0.0 would turn the product's -0.0 into +0.0.
        return [_finish(product([]), acc, out_type, inst, ctx)]
    (total,) = _loop_nest(
        sizes,
        [_zero(acc)],
        lambda ivs, accumulators: [_dot_op("add", accumulators[0], product(ivs), acc)],
    )
    return [_finish(total, acc, out_type, inst, ctx)]
