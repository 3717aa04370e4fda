"""Elemental lowerings of pure index transformations (broadcast, reshape, transpose...).

These ops compute nothing: the element of the result at some indices *is* an
element of the operand at other indices. Which one is exactly what
:func:`heron.indexing.output_to_input_maps` says, so every op here is the
same lowering: apply the op's output-to-input map to the output indices and
resolve the operand there. The map is applied by emitting a
``heron_gpu.apply_indexing`` op, which the pipeline later simplifies (with
the ranges the map carries) and lowers to ``arith``; results that are plain
dimensions, symbols or constants are used directly (no op), so an identity
part of a map costs nothing.

The helpers here (:func:`output_to_input_maps`, :func:`apply_map`,
:func:`apply_expressions`) are shared with the data-movement and reduction
lowerings, which apply their maps piecewise.
"""

from __future__ import annotations

import weakref
from collections.abc import Sequence

from mlir import ir
from mlir.dialects import arith

from heron.emitters.dialect import apply_indexing_op
from heron.emitters.elemental.core import ElementalContext, Values, lowering, unsupported
from heron.emitters.ir_utils import index_constant
from heron.emitters.mlir_types import scalar_type
from heron.hlo.errors import UnsupportedError
from heron.hlo.ir import Instruction
from heron.indexing import Constant, Dim, IndexingMap, Symbol, simplify
from heron.indexing import output_to_input_maps as _analysis_maps

__all__ = [
    "apply_expressions",
    "apply_map",
    "output_to_input_maps",
]

#: Maps per instruction (and output leaf): computing a map costs more than emitting it,
#: and one instruction is emitted many times (once per use, per unrolled index...).
_MAPS: weakref.WeakKeyDictionary[Instruction, dict[tuple[int, bool], list[IndexingMap]]] = (
    weakref.WeakKeyDictionary()
)


def output_to_input_maps(
    inst: Instruction, ctx: ElementalContext, output_index: int = 0, simplified: bool = False
) -> list[IndexingMap]:
    """The operand maps of ``inst`` (cached); ``simplified`` runs the range-aware simplifier.

    Simplifying is only worth it for maps applied as a whole (index ops): it
    turns e.g. a reshape that merely adds unit dimensions into plain ``d_i``
    results, which then need no op at all.
    """
    per_inst = _MAPS.setdefault(inst, {})
    key = (output_index, simplified)
    maps = per_inst.get(key)
    if maps is None:
        try:
            maps = _analysis_maps(inst, output_index)
        except UnsupportedError as error:
            raise unsupported(ctx, inst, str(error)) from None
        if simplified:
            maps = [simplify(m) if not m.constraints else m for m in maps]
        per_inst[key] = maps
    return maps


def _trivial(expr, dims: Sequence[ir.Value], symbols: Sequence[ir.Value]) -> ir.Value | None:
    """The value of ``expr`` when it needs no op (a dimension, a symbol, a constant)."""
    if isinstance(expr, Dim):
        return dims[expr.index]
    if isinstance(expr, Symbol):
        return symbols[expr.index]
    if isinstance(expr, Constant):
        return index_constant(expr.value)
    return None


def apply_expressions(
    indexing_map: IndexingMap,
    results: Sequence,
    dims: Sequence[ir.Value],
    symbols: Sequence[ir.Value] = (),
) -> list[ir.Value]:
    """The values of ``results`` (expressions over ``indexing_map``'s variables) at a point.

    Plain dimensions and symbols are returned as they are and constants as
    ``index`` constants; the other expressions are evaluated together by one
    ``heron_gpu.apply_indexing`` whose map has ``indexing_map``'s domain.
    """
    if len(dims) != indexing_map.num_dims or len(symbols) != indexing_map.num_symbols:
        raise ValueError(
            f"map {indexing_map} applied to {len(dims)} dims and {len(symbols)} symbols"
        )
    values: list[ir.Value | None] = [_trivial(e, dims, symbols) for e in results]
    pending = [i for i, v in enumerate(values) if v is None]
    if pending:
        sub_map = IndexingMap(
            indexing_map.dimensions,
            tuple(results[i] for i in pending),
            indexing_map.range_vars,
            indexing_map.runtime_vars,
            indexing_map.constraints,
        )
        op = apply_indexing_op(sub_map, list(dims), list(symbols))
        for i, result in zip(pending, op.results, strict=True):
            values[i] = result
    return values  # type: ignore[return-value]


def apply_map(
    indexing_map: IndexingMap, dims: Sequence[ir.Value], symbols: Sequence[ir.Value] = ()
) -> list[ir.Value]:
    """All results of ``indexing_map`` at ``(dims, symbols)`` (see :func:`apply_expressions`)."""
    return apply_expressions(indexing_map, indexing_map.results, dims, symbols)


def _has_plain_map(indexing_map: IndexingMap) -> bool:
    return not (indexing_map.range_vars or indexing_map.runtime_vars or indexing_map.constraints)


@lowering("broadcast", "reshape", "bitcast", "transpose", "copy", "slice", "reverse")
def _index_transform(
    inst: Instruction, indices: Sequence[ir.Value], ctx: ElementalContext
) -> Values:
    """The operand's element at the op's output-to-input map applied to ``indices``."""
    if inst.opcode == "copy" and inst.shape.is_tuple:
        return ctx.resolve(inst.operands[0], indices)  # a tuple copy: every leaf, same indices
    if len(inst.operands) != 1:
        raise unsupported(ctx, inst, f"expected one operand, got {len(inst.operands)}")
    (indexing_map,) = output_to_input_maps(inst, ctx, simplified=True)
    if not _has_plain_map(indexing_map):
        raise unsupported(ctx, inst, f"its indexing map {indexing_map} is not a plain transform")
    values = ctx.resolve(inst.operands[0], apply_map(indexing_map, indices))
    if inst.opcode == "bitcast":
        return [_reinterpret(inst, values[0], ctx)]
    return values


def _reinterpret(inst: Instruction, value: ir.Value, ctx: ElementalContext) -> ir.Value:
    """A bitcast's element as the result type: same bits (pred reads as ``bits != 0``)."""
    src = inst.operands[0].array_shape.element_type
    dst = inst.array_shape.element_type
    if src is dst:
        return value
    if src.is_complex or dst.is_complex:
        raise unsupported(ctx, inst, f"bitcast between {src} and {dst} elements")
    if dst.is_pred:
        zero = arith.ConstantOp(value.type, 0).result
        return arith.CmpIOp(arith.CmpIPredicate.ne, value, zero).result
    target = scalar_type(dst)
    if src.is_pred:
        return arith.ExtUIOp(target, value).result
    if value.type == target:
        return value
    if src.bit_width != dst.bit_width:
        raise unsupported(ctx, inst, f"bitcast between {src} and {dst} (different widths)")
    return arith.BitcastOp(target, value).result
