"""Elemental lowerings of ops that create or select data: constants, iota, pad,
concatenate, dynamic slices, gather, tuples and map.

Unlike the pure index transformations (:mod:`.index_ops`), these ops decide
at run time *which* operand an element comes from (pad, concatenate,
dynamic-update-slice) or *where* (dynamic-slice, gather read start indices).
Two rules shape the code:

* an operand element is resolved only where it is used: inside the
  ``scf.if`` branch that selects it, so a fusion does not compute (or load)
  the elements it throws away;
* start indices are clamped exactly as the reference evaluator does
  (``min(max(start, 0), dim - size)``, read as signed or unsigned per the
  index type), so the runtime symbols of the ops' indexing maps stay inside
  the bounds the maps promise.

Array constants become one ``arith.constant dense<...>`` tensor per function
(hoisted to the entry block and shared by equal constants), read with
``tensor.extract``; scalars and splats become scalar constants. A complex
array constant becomes two float ones (real and imaginary parts) and a
``complex.create``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
from mlir import ir
from mlir.dialects import arith, scf, tensor
from mlir.dialects import complex as complex_dialect

from heron.emitters.elemental.core import ElementalContext, Values, lowering, unsupported
from heron.emitters.elemental.index_ops import (
    apply_expressions,
    apply_map,
    output_to_input_maps,
)
from heron.emitters.ir_utils import index_constant, int_constant
from heron.emitters.mlir_types import element_type, scalar_type, to_scalar
from heron.hlo.element_types import ElementType
from heron.hlo.ir import Instruction
from heron.hlo.shapes import TupleShape
from heron.indexing import IndexingMap

__all__ = [
    "clamped_start",
    "domain_condition",
    "if_else",
    "index_to_element",
    "leaf_types",
    "scalar_constant",
]


# -- shared helpers ------------------------------------------------------------------------


def leaf_types(inst: Instruction) -> list[ir.Type]:
    """The scalar MLIR type of each array leaf of ``inst``'s shape."""
    return [scalar_type(leaf.element_type) for leaf in inst.shape.leaves()]


def if_else(
    condition: ir.Value,
    result_types: Sequence[ir.Type],
    then_builder: Callable[[], Sequence[ir.Value]],
    else_builder: Callable[[], Sequence[ir.Value]],
) -> list[ir.Value]:
    """``scf.if`` whose branches are built (and their operands resolved) inside them."""
    op = scf.IfOp(condition, list(result_types), has_else=True)
    with ir.InsertionPoint(op.then_block):
        scf.YieldOp(list(then_builder()))
    with ir.InsertionPoint(op.else_block):
        scf.YieldOp(list(else_builder()))
    return list(op.results)


def _and(values: Sequence[ir.Value]) -> ir.Value | None:
    result = None
    for value in values:
        result = value if result is None else arith.AndIOp(result, value).result
    return result


def domain_condition(
    indexing_map: IndexingMap,
    dims: Sequence[ir.Value],
    symbols: Sequence[ir.Value] = (),
    extra: Sequence = (),
) -> tuple[ir.Value | None, list[ir.Value]]:
    """Whether ``(dims, symbols)`` satisfies the map's constraints, and ``extra``'s values.

    The constraint expressions and the ``extra`` expressions (usually the
    map's results) are evaluated by one ``apply_indexing``; the condition is
    None when the map has no constraints. Variable bounds are not checked:
    callers pass values that lie inside them.
    """
    exprs = [c for c, _ in indexing_map.constraints] + list(extra)
    # Evaluated under the variable ranges only: under the map's own constraints the
    # simplifier may (rightly, for apply_indexing) take each constraint as holding and
    # fold the very check computed here, e.g. a pad's `(d0 - 1) mod 2 in [0, 0]` to true.
    unconstrained = IndexingMap(
        indexing_map.dimensions,
        indexing_map.results,
        indexing_map.range_vars,
        indexing_map.runtime_vars,
    )
    values = apply_expressions(unconstrained, exprs, dims, symbols)
    checks = []
    for value, (_, bounds) in zip(values, indexing_map.constraints, strict=False):
        if bounds.lower == bounds.upper:
            checks.append(_cmp(arith.CmpIPredicate.eq, value, bounds.lower))
            continue
        checks.append(_cmp(arith.CmpIPredicate.sge, value, bounds.lower))
        checks.append(_cmp(arith.CmpIPredicate.sle, value, bounds.upper))
    return _and(checks), values[len(indexing_map.constraints) :]


def _cmp(predicate, value: ir.Value, bound: int) -> ir.Value:
    return arith.CmpIOp(predicate, value, index_constant(bound)).result


def clamped_start(value: ir.Value, element: ElementType, upper: int) -> ir.Value:
    """A start index read as ``element`` clamped to ``[0, upper]``, as ``index``.

    Signed types are read signed, unsigned ones unsigned (the evaluator's
    ``index_value``); the clamp happens in 64 bits so no value wraps first.
    """
    if upper <= 0:
        return index_constant(0)
    i64 = ir.IntegerType.get_signless(64)
    if element.is_pred:
        wide = arith.ExtUIOp(i64, value).result
        return arith.IndexCastOp(ir.IndexType.get(), wide).result
    if not element.is_integral:
        raise ValueError(f"start index of type {element}")
    width = element.bit_width
    bound = arith.ConstantOp(i64, upper).result
    if element.is_unsigned_integral:
        wide = arith.ExtUIOp(i64, value).result if width < 64 else value
        clamped = arith.MinUIOp(wide, bound).result
    else:
        wide = arith.ExtSIOp(i64, value).result if width < 64 else value
        zero = arith.ConstantOp(i64, 0).result
        clamped = arith.MinSIOp(arith.MaxSIOp(wide, zero).result, bound).result
    return arith.IndexCastOp(ir.IndexType.get(), clamped).result


def index_to_element(value: ir.Value, element: ElementType, inst: Instruction, ctx) -> ir.Value:
    """A non-negative ``index`` value converted to ``element`` as XLA's convert does."""
    if element.is_pred:
        return arith.CmpIOp(arith.CmpIPredicate.ne, value, index_constant(0)).result
    if element.is_integral:
        return arith.IndexCastOp(scalar_type(element), value).result  # wraps at the width
    i64 = ir.IntegerType.get_signless(64)
    wide = arith.IndexCastOp(i64, value).result
    if element.is_complex:
        part_type = element_type(element.component_type)
        real = arith.SIToFPOp(part_type, wide).result
        zero = arith.ConstantOp(part_type, 0.0).result
        return complex_dialect.CreateOp(element_type(element), real, zero).result
    if element is ElementType.F64:
        return arith.SIToFPOp(ir.F64Type.get(), wide).result
    as_f32 = arith.SIToFPOp(ir.F32Type.get(), wide).result
    if element is ElementType.F32:
        return as_f32
    if element in (ElementType.BF16, ElementType.F16):
        return arith.TruncFOp(element_type(element), as_f32).result
    return _from_f32(as_f32, element, inst, ctx)


def _from_f32(value: ir.Value, element: ElementType, inst: Instruction, ctx) -> ir.Value:
    """f32 -> an fp8/f4 bit pattern, through the conversions module (written elsewhere)."""
    from heron.emitters.elemental import conversions

    convert = getattr(conversions, "from_f32", None)
    if convert is None:
        raise unsupported(ctx, inst, f"conversion to {element} is not available yet")
    return convert(value, element)


# -- constants -----------------------------------------------------------------------------


def _float_bits(value, element: ElementType) -> int:
    """The bit pattern of one float element (sub-byte types in the low bits)."""
    array = np.asarray(value, dtype=element.numpy_dtype).reshape(1)
    if element.bit_width < 8:
        return int(array.view(np.uint8)[0]) & ((1 << element.bit_width) - 1)
    return int(array.view(f"uint{element.bit_width}")[0])


def _float_constant(value, element: ElementType) -> ir.Value:
    bits = int_constant(_float_bits(value, element), element.bit_width)
    target = scalar_type(element)
    return bits if bits.type == target else arith.BitcastOp(target, bits).result


def scalar_constant(value, element: ElementType) -> ir.Value:
    """One element of a literal as a :func:`scalar_type` constant, bit-exact.

    Floats are built from their bits (NaN payloads and -0 survive); fp8 and
    f4 stay integer bit patterns; complex values are built from their parts.
    """
    if element.is_pred:
        return int_constant(1 if bool(value) else 0, 1)
    if element.is_integral:
        return int_constant(int(value), element.bit_width)
    if element.is_complex:
        part = element.component_type
        number = complex(value)
        return complex_dialect.CreateOp(
            element_type(element),
            _float_constant(number.real, part),
            _float_constant(number.imag, part),
        ).result
    if element.is_floating:
        return _float_constant(value, element)
    raise ValueError(f"no scalar constant of type {element}")


def _element_text(value, element: ElementType) -> str:
    if element.is_pred:
        return "true" if bool(value) else "false"
    if element.is_integral:
        return str(int(value))
    if element.is_complex:
        part = element.component_type
        number = complex(value)
        return f"({_hex(number.real, part)}, {_hex(number.imag, part)})"
    return _hex(value, element)


def _hex(value, element: ElementType) -> str:
    digits = max(1, (element.bit_width + 3) // 4)
    return f"0x{_float_bits(value, element):0{digits}X}"


def _nested_text(array: np.ndarray, element: ElementType) -> str:
    if array.ndim == 0:
        return _element_text(array[()], element)
    return "[" + ", ".join(_nested_text(sub, element) for sub in array) + "]"


def _function_entry() -> ir.Block | None:
    """The entry block of the function enclosing the current insertion point."""
    try:
        block = ir.InsertionPoint.current.block
    except ValueError:
        return None
    op = block.owner
    while op is not None:
        operation = op.operation
        if operation.name in ("func.func", "gpu.func", "llvm.func"):
            return operation.regions[0].blocks[0]
        op = operation.parent
    return None


#: Discardable attribute naming a hoisted constant's value (how equal constants are found).
_CONSTANT_KEY = "heron.dense_constant"


def _dense_constant(literal: np.ndarray, element: ElementType) -> ir.Value:
    """The literal as an ``arith.constant`` tensor, once per function (entry block)."""
    tensor_type = ir.RankedTensorType.get(list(literal.shape), element_type(element))
    text = f"dense<{_nested_text(literal, element)}> : {tensor_type}"
    entry = _function_entry()
    if entry is not None:
        for op in entry.operations:
            operation = op.operation
            if operation.name != "arith.constant":
                break
            attributes = operation.attributes
            key = attributes[_CONSTANT_KEY] if _CONSTANT_KEY in attributes else None
            if key is not None and ir.StringAttr(key).value == text:
                return operation.results[0]
    point = ir.InsertionPoint.current if entry is None else ir.InsertionPoint.at_block_begin(entry)
    # Built from text: the Python attribute classes cannot hold dense complex values.
    op = ir.Operation.parse(
        f'%c = "arith.constant"() <{{value = {text}}}> {{{_CONSTANT_KEY} = "{text}"}}'
        f" : () -> {tensor_type}"
    )
    point.insert(op)
    return op.results[0]


@lowering("constant")
def _constant(inst: Instruction, indices: Sequence[ir.Value], ctx: ElementalContext) -> Values:
    if inst.literal is None:
        raise unsupported(ctx, inst, "the constant's value is elided ({...})")
    if isinstance(inst.shape, TupleShape):
        leaves = _literal_leaves(inst.literal)
        if any(np.asarray(leaf).size != 1 for leaf in leaves):
            raise unsupported(ctx, inst, "a tuple constant with non-scalar elements")
        types = list(inst.shape.leaves())
        return [
            scalar_constant(np.asarray(leaf).reshape(-1)[0], shape.element_type)
            for leaf, shape in zip(leaves, types, strict=True)
        ]
    element = inst.array_shape.element_type
    literal = np.asarray(inst.literal)
    flat = literal.reshape(-1)
    if flat.size == 0:
        raise unsupported(ctx, inst, "an element of an empty constant")
    if _is_splat(flat, element):
        return [scalar_constant(flat[0], element)]
    if element.is_complex:
        # Two float constants, the real and the imaginary parts: no dense complex
        # attribute travels down the pipeline (memref globals of complex elements
        # reach neither the interpreter nor LLVM).
        part = element.component_type
        numbers = literal.astype(element.numpy_dtype)
        real, imaginary = (
            _array_element(np.ascontiguousarray(p), part, indices)
            for p in (numbers.real, numbers.imag)
        )
        return [complex_dialect.CreateOp(element_type(element), real, imaginary).result]
    return [_array_element(literal, element, indices)]


def _array_element(literal: np.ndarray, element: ElementType, indices: Sequence[ir.Value]):
    """The element of a (real) array literal at ``indices``: a scalar constant for a splat."""
    flat = literal.reshape(-1)
    if _is_splat(flat, element):
        return scalar_constant(flat[0], element)
    value = tensor.ExtractOp(_dense_constant(literal, element), list(indices)).result
    return to_scalar(value, element)


def _literal_leaves(literal) -> list:
    if isinstance(literal, tuple):
        return [leaf for item in literal for leaf in _literal_leaves(item)]
    return [literal]


def _is_splat(flat: np.ndarray, element: ElementType) -> bool:
    """Whether every element is the same (floats and complex compared by their bits)."""
    if flat.size == 1:
        return True
    if element.is_floating or element.is_complex:
        rows = np.ascontiguousarray(flat).view(np.uint8).reshape(flat.size, -1)
        return bool(np.all(rows == rows[0]))
    return bool(np.all(flat == flat[0]))


# -- iota ----------------------------------------------------------------------------------


@lowering("iota")
def _iota(inst: Instruction, indices: Sequence[ir.Value], ctx: ElementalContext) -> Values:
    axis = inst.attributes.get("iota_dimension")
    shape = inst.array_shape
    if not isinstance(axis, int) or not 0 <= axis < shape.rank:
        raise unsupported(ctx, inst, f"iota_dimension={axis!r} out of range")
    element = shape.element_type
    if element.is_floating and element.bit_width <= 16 and shape.dims[axis] > 2**24:
        raise unsupported(ctx, inst, f"an iota of {shape.dims[axis]} {element} values")
    return [index_to_element(indices[axis], element, inst, ctx)]


# -- pad -----------------------------------------------------------------------------------


@lowering("pad")
def _pad(inst: Instruction, indices: Sequence[ir.Value], ctx: ElementalContext) -> Values:
    operand_map = output_to_input_maps(inst, ctx)[0]
    types = leaf_types(inst)
    condition, operand_indices = domain_condition(operand_map, indices, extra=operand_map.results)
    if condition is None:  # no padding is ever read (e.g. only negative edges)
        return [ctx.operand(inst, 0, operand_indices)]
    return if_else(
        condition,
        types,
        lambda: [ctx.operand(inst, 0, operand_indices)],
        lambda: [ctx.operand(inst, 1, [])],
    )


# -- concatenate ---------------------------------------------------------------------------


@lowering("concatenate")
def _concatenate(inst: Instruction, indices: Sequence[ir.Value], ctx: ElementalContext) -> Values:
    maps = output_to_input_maps(inst, ctx)
    (axis,) = tuple(inst.attributes.get("dimensions", ()))
    # Operands of size 0 along the axis are never read.
    live = [k for k, m in enumerate(maps) if not m.constraints[0][1].is_empty]
    types = leaf_types(inst)

    def select(begin: int, end: int) -> list[ir.Value]:
        """The element of the one live operand in ``live[begin:end]`` holding it: the
        range is halved at each ``scf.if`` (XLA's ``EmitConcat``), so a concatenate of
        N operands nests log2(N) deep, not N (an im2col of 196 columns made a chain
        of 196 nested regions, past the recursion limit of what walks them)."""
        if end - begin == 1:
            k = live[begin]
            return [ctx.operand(inst, k, apply_map(maps[k], indices))]
        middle = (begin + end) // 2
        limit = maps[live[middle - 1]].constraints[0][1].upper
        condition = _cmp(arith.CmpIPredicate.sle, indices[axis], limit)
        return if_else(condition, types, lambda: select(begin, middle), lambda: select(middle, end))

    if not live:
        raise unsupported(ctx, inst, "every operand is empty")
    return select(0, len(live))


# -- dynamic slices -----------------------------------------------------------------------


def _start_values(inst: Instruction, ctx: ElementalContext, first: int, uppers: Sequence[int]):
    """The clamped start index of each dimension, as ``index`` (read only where needed)."""
    operands = inst.operands[first:]
    vector = len(operands) == 1 and operands[0].array_shape.rank == 1
    if not vector and len(operands) != len(uppers):
        raise unsupported(ctx, inst, f"expected {len(uppers)} start indices, got {len(operands)}")
    starts = []
    for d, upper in enumerate(uppers):
        if upper <= 0:
            starts.append(index_constant(0))
            continue
        if vector:
            raw = ctx.operand(inst, first, [index_constant(d)])
            element = operands[0].array_shape.element_type
        else:
            raw = ctx.operand(inst, first + d, [])
            element = operands[d].array_shape.element_type
        if not (element.is_integral or element.is_pred):
            raise unsupported(ctx, inst, f"start index of type {element}")
        starts.append(clamped_start(raw, element, upper))
    return starts


@lowering("dynamic-slice")
def _dynamic_slice(inst: Instruction, indices: Sequence[ir.Value], ctx: ElementalContext) -> Values:
    operand_map = output_to_input_maps(inst, ctx)[0]
    uppers = [v.bounds.upper for v in operand_map.runtime_vars]
    starts = _start_values(inst, ctx, 1, uppers)
    return [ctx.operand(inst, 0, apply_map(operand_map, indices, starts))]


@lowering("dynamic-update-slice")
def _dynamic_update_slice(
    inst: Instruction, indices: Sequence[ir.Value], ctx: ElementalContext
) -> Values:
    update_map = output_to_input_maps(inst, ctx)[1]
    uppers = [v.bounds.upper for v in update_map.runtime_vars]
    starts = _start_values(inst, ctx, 2, uppers)
    condition, update_indices = domain_condition(
        update_map, indices, starts, extra=update_map.results
    )
    if condition is None:
        return [ctx.operand(inst, 1, update_indices)]
    return if_else(
        condition,
        leaf_types(inst),
        lambda: [ctx.operand(inst, 1, update_indices)],
        lambda: [ctx.operand(inst, 0, indices)],
    )


# -- gather --------------------------------------------------------------------------------


@lowering("gather")
def _gather(inst: Instruction, indices: Sequence[ir.Value], ctx: ElementalContext) -> Values:
    operand_map, indices_map = output_to_input_maps(inst, ctx)
    index_shape = inst.operands[1].array_shape
    element = index_shape.element_type
    if not element.is_integral:
        raise unsupported(ctx, inst, f"start indices of type {element}")
    starts = []
    for j, var in enumerate(operand_map.runtime_vars):
        upper = var.bounds.upper
        if upper <= 0:
            starts.append(index_constant(0))
            continue
        symbols = [index_constant(j)] if indices_map.range_vars else []
        position = apply_map(indices_map, indices, symbols)
        raw = ctx.operand(inst, 1, position)
        starts.append(clamped_start(raw, element, upper))
    return [ctx.operand(inst, 0, apply_map(operand_map, indices, starts))]


# -- tuples and map ------------------------------------------------------------------------


def _leaf_count(shape) -> int:
    return len(list(shape.leaves()))


@lowering("get-tuple-element")
def _get_tuple_element(
    inst: Instruction, indices: Sequence[ir.Value], ctx: ElementalContext
) -> Values:
    operand = inst.operands[0]
    shape = operand.shape
    index = inst.attributes.get("index")
    if not isinstance(shape, TupleShape) or not isinstance(index, int):
        raise unsupported(ctx, inst, f"index={index!r} of a {shape} operand")
    if not 0 <= index < len(shape.elements):
        raise unsupported(ctx, inst, f"index={index} out of range for {shape}")
    first = sum(_leaf_count(e) for e in shape.elements[:index])
    count = _leaf_count(shape.elements[index])
    values = ctx.resolve(operand, indices)
    return list(values[first : first + count])


@lowering("tuple")
def _tuple(inst: Instruction, indices: Sequence[ir.Value], ctx: ElementalContext) -> Values:
    values: list[ir.Value] = []
    for operand in inst.operands:
        values += ctx.resolve(operand, indices)
    return values


@lowering("map")
def _map(inst: Instruction, indices: Sequence[ir.Value], ctx: ElementalContext) -> Values:
    scalars = [ctx.operand(inst, k, indices) for k in range(len(inst.operands))]
    return list(ctx.call(inst.called("to_apply"), scalars))
