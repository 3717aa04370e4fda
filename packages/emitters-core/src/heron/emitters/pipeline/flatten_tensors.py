"""The ``flatten-tensors`` pass: every tensor becomes 1-D, in the buffer's physical order.

After it, an element access is "base pointer + one linear index", which is
what vectorisation analyses and what ``lower-tensors`` turns into a load or
store. The pass

* rewrites each access (``tensor.extract``/``insert``,
  ``heron_gpu.predicated_insert``/``predicated_extract``/``atomic_rmw``) to
  take one index: a ``heron_gpu.apply_indexing`` of the tensor's
  linearisation map (strides from the layout encoding, row-major without
  one) composed with the ``apply_indexing`` ops that produced the old
  indices, and simplified, so the loop emitter's
  ``(bl_x floordiv 4096, (bl_x floordiv 8) mod 512, ...)`` becomes
  ``th_x * 4 + bl_x * 512 + vector_index``; accesses of one block at the same
  indices into tensors of one shape and layout share that one op (a loop
  kernel reads each of its inputs at its thread's position: composed and
  simplified once, not once per input);
* then changes, in place, the type of every tensor value (block arguments,
  op results of scf/heron_gpu ops, function signatures) to
  ``tensor<N x T>`` without encoding (rank 0 becomes ``tensor<1 x T>``);
* reshapes ``arith.constant dense<...>`` tensors to 1-D in physical order.

Changing types in place (``Value.set_type``) instead of rebuilding functions
keeps every op, attribute and region as it was; only accesses are rebuilt.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence

import attrs
from mlir import ir
from mlir.dialects import arith

from heron.emitters.dialect import apply_indexing_op
from heron.emitters.ir_utils import walk_ops
from heron.emitters.mlir_types import minor_to_major
from heron.emitters.pipeline.manager import Pass, PipelineOptions
from heron.emitters.pipeline.simplify_indexing import APPLY_INDEXING, IndexExpressionBuilder
from heron.hlo.errors import UnsupportedError
from heron.indexing import AffineExpr, Constant, Dim, IndexingMap, Interval, Variable, compose
from heron.indexing.affine import add, mul
from heron.indexing.mod_expansion import simplify_with_mod_expansion
from heron.indexing.range_analysis import RangeEvaluator
from heron.indexing.simplifier import from_linear_form, linear_form

#: Element accesses: op name -> position of the tensor operand (the indices follow it).
ACCESS_OPS = {
    "tensor.extract": 0,
    "tensor.insert": 1,
    "heron_gpu.predicated_insert": 2,
    "heron_gpu.predicated_extract": 2,
    "heron_gpu.atomic_rmw": 0,
    "heron_gpu.ldmatrix": 0,
}

#: Ops that only pass tensors along (their types change, nothing else does).
TRANSPARENT_OPS = frozenset(
    {
        "func.func",
        "func.return",
        "func.call",
        "scf.for",
        "scf.if",
        "scf.yield",
        "scf.while",
        "scf.condition",
        "gpu.yield",
        "arith.select",
        "arith.constant",
        "heron_gpu.loop",
        "heron_gpu.pure_call",
        "heron_gpu.sync_threads",
        "heron_gpu.allocate_shared",
        *ACCESS_OPS,
    }
)


def _function_name(op: ir.Operation) -> str:
    parent = op
    while parent is not None and parent.operation.name != "func.func":
        parent = parent.operation.parent
    if parent is None:
        return "?"
    return ir.StringAttr(parent.attributes["sym_name"]).value


def _unsupported(op: ir.Operation, why: str) -> UnsupportedError:
    return UnsupportedError(
        f"flatten-tensors: fusion '{_function_name(op)}': '{op.name}' at {op.location}: {why}"
    )


def needs_flattening(t: ir.Type) -> bool:
    if not isinstance(t, ir.RankedTensorType):
        return False
    return t.rank != 1 or t.encoding is not None


def flat_type(t: ir.RankedTensorType) -> ir.RankedTensorType:
    """``tensor<N x T>``: the tensor's elements in physical order, no encoding."""
    if any(ir.ShapedType.is_dynamic_size(d) for d in t.shape):
        raise UnsupportedError(f"flatten-tensors: dynamic shape {t} is not supported")
    return ir.RankedTensorType.get([max(1, math.prod(t.shape))], t.element_type)


def strides(t: ir.RankedTensorType) -> list[int]:
    """Elements between neighbours along each logical dimension, in the physical layout."""
    shape = list(t.shape)
    result = [0] * len(shape)
    step = 1
    for d in minor_to_major(t):
        result[d] = step
        step *= shape[d]
    return result


def linearisation_map(t: ir.RankedTensorType) -> IndexingMap:
    """``(d0, ..., dn) -> (sum d_i * stride_i)`` over the tensor's index space."""
    shape = list(t.shape)
    result = sum((Dim(i) * s for i, s in enumerate(strides(t))), start=Dim(0) * 0)
    return IndexingMap.for_shape(shape, [result])


def linear_index(t: ir.RankedTensorType, indices: Sequence[ir.Value]) -> ir.Value:
    """One ``apply_indexing`` giving the physical position of ``t[indices]``.

    Emitted at the current insertion point; the maps that produced the indices
    are composed into it, so its operands are their operands.
    """
    builder = IndexExpressionBuilder()
    exprs = [
        builder.expr(v, f"d{i}", Interval(0, n - 1))
        for i, (v, n) in enumerate(zip(indices, t.shape, strict=True))
    ]
    first = IndexingMap(tuple(builder.variables), tuple(exprs), constraints=builder.constraints)
    composed = _offset_linearisation(first, t)
    if composed is None:
        composed = simplify_with_mod_expansion(compose(first, linearisation_map(t)))
    return apply_indexing_op(composed, builder.values).results[0]


def _offset_linearisation(first: IndexingMap, t: ir.RankedTensorType) -> IndexingMap | None:
    """``first`` composed with ``t``'s linearisation, from the map of the same access at
    offset zero, where the variables' own ranges keep every index in bounds and meet
    every constraint (else None: the caller composes ``first`` itself).

    The linearisation is linear (``sum index_i * stride_i``), so the constant term of
    each index only adds ``offset_i * stride_i`` to the position; the rest is the same
    for every access at another offset, and a kernel has many (a GEMM kernel's tiles:
    70 distinct access maps in ``mlp_silu_bf16``, 11 once the offsets are taken out),
    each composed and simplified once (:func:`_linear_sum`). With the constraints
    implied by the ranges, the domain is the variables' ranges either way, which is
    what the composed map's simplification would find."""
    ranges = RangeEvaluator(first, use_constraints=False)
    for expr, interval in first.constraints:
        if not interval.contains_interval(ranges.range(expr)):
            return None
    plain, offset = [], 0
    for expr, size, stride in zip(first.results, t.shape, strides(t), strict=True):
        if not Interval(0, size - 1).contains_interval(ranges.range(expr)):
            return None
        terms, constant = linear_form(expr)
        plain.append(from_linear_form(terms, 0))
        offset += constant * stride
    base = _linear_sum(first.dimensions, tuple(plain), tuple(strides(t)))
    (position,) = base.results
    return attrs.evolve(base, results=(add(position, Constant(offset)),))


def _linear_sum(
    variables: tuple[Variable, ...], indices: tuple[AffineExpr, ...], steps: tuple[int, ...]
) -> IndexingMap:
    """``sum indices_i * steps_i`` over ``variables``, simplified (mods expanded where
    cheaper; the simplification is memoised by the map)."""
    position = from_linear_form({}, 0)
    for index, step in zip(indices, steps, strict=True):
        position = add(position, mul(index, Constant(step)))
    return simplify_with_mod_expansion(IndexingMap(variables, (position,)))


def _copy_attributes(op: ir.Operation) -> dict[str, ir.Attribute]:
    attributes = op.attributes
    return {attributes[i].name: attributes[i].attr for i in range(len(attributes))}


#: A linear position already computed in a block: by the block, the tensor's shape and
#: strides, and the index values (:func:`_rewrite_access`).
PositionKey = tuple[ir.Block, tuple[int, ...], tuple[int, ...], tuple[ir.Value, ...]]


def _rewrite_access(op: ir.Operation, positions: dict[PositionKey, ir.Value]) -> None:
    position = ACCESS_OPS[op.name]
    operands = list(op.operands)
    tensor = operands[position]
    indices = operands[position + 1 :]
    tensor_type = ir.RankedTensorType(tensor.type)
    if len(indices) != tensor_type.rank:
        raise _unsupported(op, f"{len(indices)} indices for {tensor_type}")
    with ir.InsertionPoint(op):
        if 0 in tensor_type.shape:
            # No element to reach: the access never runs (it sits in a zero-trip
            # loop or a loop over an empty output). The tensor's buffer is the
            # one-element placeholder (flat_type), so index 0 is still in bounds.
            index = arith.ConstantOp(ir.IndexType.get(), 0).result
        else:
            # An earlier access of this block at the same indices into a tensor of the
            # same shape and layout has the position already (a loop kernel reads
            # every input at its thread's indices): one apply_indexing for all.
            key = (op.block, tuple(tensor_type.shape), tuple(strides(tensor_type)), tuple(indices))
            index = positions.get(key)
            if index is None:
                index = positions[key] = linear_index(tensor_type, indices)
        new = ir.Operation.create(
            op.name,
            results=[r.type for r in op.results],
            operands=[*operands[: position + 1], index],
            attributes=_copy_attributes(op),
            regions=len(op.regions),
        )
    for old_region, new_region in zip(op.regions, new.regions, strict=True):
        for block in list(old_region.blocks):
            block.append_to(new_region)
    for old, result in zip(op.results, new.results, strict=True):
        old.replace_all_uses_with(result)
    op.erase()


def _dense_elements(text: str) -> list[str]:
    """The element literals of a ``[[a, b], [c, d]]`` list, in order (complex pairs kept)."""
    elements: list[str] = []
    depth = 0
    current = ""
    for char in text:
        if char == "(":
            depth += 1
        elif char == ")":
            depth -= 1
        if depth == 0 and char in "[],":
            if current.strip():
                elements.append(current.strip())
            current = ""
            continue
        current += char
    if current.strip():
        elements.append(current.strip())
    return elements


def _physical_order(t: ir.RankedTensorType) -> list[int]:
    """For each physical position, the row-major (logical) number of the element there."""
    shape = list(t.shape)
    order = [0] * max(1, math.prod(shape))
    step = strides(t)
    for logical in range(math.prod(shape)):
        rest, position = logical, 0
        for d in reversed(range(len(shape))):
            position += (rest % shape[d]) * step[d]
            rest //= shape[d]
        order[position] = logical
    return order


def flatten_dense(text: str, old: ir.RankedTensorType, where: str = "constant") -> str:
    """A dense tensor attribute's text as the 1-D attribute of its elements in physical order.

    Works on text because the bindings cannot hand out every dense attribute
    (complex element types fail to downcast) and have no reshape; the element
    literals are moved as they are printed.
    """
    new = flat_type(old)
    match = re.fullmatch(r"dense<(.*)> : (tensor<.*>)", text.strip(), re.DOTALL)
    if match is None:
        raise UnsupportedError(f"flatten-tensors: {where}: cannot flatten {text[:200]}")
    body = match.group(1)
    order = _physical_order(old)
    identity = order == list(range(len(order)))
    if body.startswith('"0x'):  # large constants print as a hex blob, row-major
        data = bytes.fromhex(body[3:-1])
        count = len(order)
        if len(data) % count:
            raise UnsupportedError(
                f"flatten-tensors: {where}: cannot flatten the packed constant of {old}"
            )
        width = len(data) // count
        if not identity:
            data = b"".join(data[i * width : (i + 1) * width] for i in order)
        return f'dense<"0x{data.hex().upper()}"> : {new}'
    if not body.startswith("["):  # a splat (or a rank-0 value)
        return f"dense<{body}> : {new}"
    elements = _dense_elements(body)
    if len(elements) != len(order):
        raise UnsupportedError(
            f"flatten-tensors: {where}: cannot read the {len(order)} elements of {text[:200]}"
        )
    return f"dense<[{', '.join(elements[i] for i in order)}]> : {new}"


_CONSTANT_VALUE = re.compile(r"<\{value = (.*?)\}>(?: \{.*\})? : \(\) -> ", re.DOTALL)


def _flatten_constant(op: ir.Operation) -> None:
    """Replace a tensor ``arith.constant`` by its flattened copy (made from text, see above)."""
    old = ir.RankedTensorType(op.results[0].type)
    asm = op.get_asm(print_generic_op_form=True)
    match = _CONSTANT_VALUE.search(asm)
    if match is None:
        raise _unsupported(op, f"cannot read the constant {asm[:200]}")
    where = f"fusion '{_function_name(op)}': '{op.name}' at {op.location}"
    value = flatten_dense(match.group(1), old, where)
    new = ir.Operation.parse(
        f'"arith.constant"() <{{value = {value}}}> : () -> {flat_type(old)}'
    ).operation
    ir.InsertionPoint(op).insert(new)
    op.results[0].replace_all_uses_with(new.results[0])
    op.erase()


def _flatten_value(value: ir.Value) -> None:
    if needs_flattening(value.type):
        value.set_type(flat_type(ir.RankedTensorType(value.type)))


def _flatten_function_type(op: ir.Operation) -> None:
    fn_type = ir.FunctionType(ir.TypeAttr(op.attributes["function_type"]).value)

    def convert(types: Sequence[ir.Type]) -> list[ir.Type]:
        return [flat_type(ir.RankedTensorType(t)) if needs_flattening(t) else t for t in types]

    new = ir.FunctionType.get(convert(fn_type.inputs), convert(fn_type.results))
    op.attributes["function_type"] = ir.TypeAttr.get(new)


def _check_supported(op: ir.Operation) -> None:
    if op.name in TRANSPARENT_OPS:
        return
    values = [*op.operands, *op.results]
    types = [str(v.type) for v in values if needs_flattening(v.type)]
    if types:
        raise _unsupported(op, f"cannot flatten this op on {', '.join(dict.fromkeys(types))}")


def _erase_dead_apply_indexing(module: ir.Module) -> None:
    """The ops that computed the old indices; nothing upstream erases IRDL ops."""
    for op in reversed(walk_ops(module.operation, APPLY_INDEXING)):
        if all(not list(r.uses) for r in op.results):
            op.erase()


def run(module: ir.Module, options: PipelineOptions) -> None:
    ops = walk_ops(module.operation)
    for op in ops:
        _check_supported(op)
    positions: dict[PositionKey, ir.Value] = {}
    for op in ops:  # every op is checked before any is rewritten
        if op.name in ACCESS_OPS:
            _rewrite_access(op, positions)
    for op in walk_ops(module.operation, "arith.constant"):
        if needs_flattening(op.results[0].type):
            _flatten_constant(op)
    for op in walk_ops(module.operation):
        if op.name == "func.func":
            _flatten_function_type(op)
        for region in op.regions:
            for block in region.blocks:
                for argument in block.arguments:
                    _flatten_value(argument)
        for result in op.results:
            _flatten_value(result)
    _erase_dead_apply_indexing(module)


PASS = Pass(
    name="flatten-tensors",
    run=run,
    description="N-d tensors -> 1-D in layout order; each access position one composed"
    " apply_indexing (shared in a block)",
)
