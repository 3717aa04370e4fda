"""``select-and-scatter`` becomes a variadic ``reduce-window`` and a ``scatter``.

jax's gradient of a max (or min) pool is a select-and-scatter: in every window
of the operand, ``select`` picks one element, and the window's ``source`` value
is combined into the result there with ``scatter``. No heron emitter runs it
as one op, so this pass rewrites it into ops that run (XLA's
SelectAndScatterExpander does the same for backends without an emitter):

1. an iota per operand dimension gives every element its position;
2. one variadic ``reduce-window`` over (operand, positions...) with the same
   window keeps, per window, the element ``select`` picks and its position.
   Its reducer combines an accumulator ``a`` and a window element ``b``: ``a``
   stays when it is valid and ``b`` is not, or ``select(a, b)`` holds; else
   ``b`` (the select-and-scatter rule: the first valid element, replaced by a
   later one that ``select`` does not prefer it to). The accumulator starts
   invalid (position -1), and padding, which reduce-window fills with the
   inits, is invalid too, so a window of padding only selects nothing;
3. the positions, stacked as an index vector, ``scatter`` the source into a
   broadcast of ``init`` with the ``scatter`` computation; a window that
   selected nothing has index -1, out of bounds, which scatter skips.

The window is walked in the order the evaluator walks it (row-major, the
accumulator first), and the scatter applies the updates in the source's
order, so the rewrite gives the evaluator's select-and-scatter bit for bit. A
select-and-scatter with base dilation (which XLA does not allow either) is
left as it is, and refused by name where it would run.
"""

from __future__ import annotations

import numpy as np

from heron.hlo.attributes import ComputationRef, Window
from heron.hlo.builder import NameUniquer
from heron.hlo.element_types import ElementType
from heron.hlo.ir import Computation, Instruction, Module
from heron.hlo.passes.registry import hlo_pass
from heron.hlo.passes.rewrite import (
    Inserter,
    module_names,
    non_fusion_computations,
    remove_instructions,
)
from heron.hlo.shapes import ArrayShape, TupleShape

__all__ = ["expand_select_and_scatter", "expandable"]


def expandable(inst: Instruction) -> bool:
    """Whether this pass rewrites ``inst``: a select-and-scatter of rank 1 or more
    without base dilation."""
    if inst.opcode != "select-and-scatter" or not isinstance(inst.shape, ArrayShape):
        return False
    if not inst.shape.dims:
        return False
    window = inst.attributes.get("window")
    return isinstance(window, Window) and all(d.base_dilation == 1 for d in window.dims)


@hlo_pass(
    "select-and-scatter-expander",
    "select-and-scatter as a reduce-window picking positions and a scatter",
)
def expand_select_and_scatter(module: Module) -> bool:
    names = module_names(module)
    changed = False
    for computation in non_fusion_computations(module):
        for inst in [i for i in computation.instructions if expandable(i)]:
            operand = inst.operands[0].array_shape
            index_type = (
                ElementType.S32 if max(operand.dims, default=0) < 2**31 else ElementType.S64
            )
            reducer = _reducer(inst, index_type, names)
            module.computations.insert(module.computations.index(computation), reducer)
            inserter = Inserter(computation, names)
            inserter.replace(inst, _expand(inserter, inst, index_type, reducer))
            remove_instructions(computation, [inst])
            changed = True
    return changed


def _reducer(inst: Instruction, index_type: ElementType, names: NameUniquer) -> Computation:
    """(value, positions...) x (value, positions...) -> the one ``select`` keeps."""
    select = inst.called("select")
    value_type = inst.operands[0].array_shape.element_type
    rank = len(inst.operands[0].array_shape.dims)
    reducer = Computation(names.unique(f"{select.name}.position"), location=select.location)
    scalar_value, scalar_index = ArrayShape(value_type, ()), ArrayShape(index_type, ())
    pred = ArrayShape(ElementType.PRED, ())

    def add(opcode: str, shape, operands=(), attributes=None, **fields) -> Instruction:
        return reducer.add(
            Instruction(
                names.unique(f"{select.name}.{opcode}"),
                opcode,
                shape,
                operands=list(operands),
                attributes=dict(attributes or {}),
                location=select.location,
                **fields,
            )
        )

    leaf_shapes = [scalar_value] + [scalar_index] * rank
    params = [
        add("parameter", shape, parameter_number=n) for n, shape in enumerate(leaf_shapes * 2)
    ]
    a, b = params[: rank + 1], params[rank + 1 :]
    # select's body, inlined on the two values.
    mapping: dict[int, Instruction] = {}
    for node in select.post_order():
        if node.opcode == "parameter":
            mapping[id(node)] = (a[0], b[0])[node.parameter_number]
            continue
        clone = node.clone([mapping[id(op)] for op in node.operands], names.unique(node.name))
        mapping[id(node)] = reducer.add(clone)
    prefers_a = mapping[id(select.root_instruction)]
    invalid = add("constant", scalar_index, literal=np.array(-1, index_type.numpy_dtype))
    a_valid = add("compare", pred, [a[1], invalid], {"direction": "NE"})
    b_invalid = add("compare", pred, [b[1], invalid], {"direction": "EQ"})
    keep_a = add("and", pred, [a_valid, add("or", pred, [b_invalid, prefers_a])])
    kept = [
        add("select", shape, [keep_a, x, y]) for shape, x, y in zip(leaf_shapes, a, b, strict=True)
    ]
    reducer.root = add("tuple", TupleShape(tuple(leaf_shapes)), kept)
    return reducer


def _expand(
    inserter: Inserter, inst: Instruction, index_type: ElementType, reducer: Computation
) -> Instruction:
    operand, source, init = inst.operands
    dims = operand.array_shape.dims
    rank = len(dims)
    out_dims = source.array_shape.dims
    index_shape = ArrayShape(index_type, dims)
    positions = [
        inserter.add("iota", index_shape, [], {"iota_dimension": d}, like=inst, suffix=f"iota{d}")
        for d in range(rank)
    ]
    invalid = inserter.add(
        "constant",
        ArrayShape(index_type, ()),
        like=inst,
        suffix="invalid",
        literal=np.array(-1, index_type.numpy_dtype),
    )
    value_out = ArrayShape(operand.array_shape.element_type, out_dims)
    index_out = ArrayShape(index_type, out_dims)
    picked = inserter.add(
        "reduce-window",
        TupleShape((value_out, *[index_out] * rank)),
        [operand, *positions, init, *[invalid] * rank],
        {"window": inst.attributes["window"], "to_apply": ComputationRef(reducer.name, reducer)},
        like=inst,
        suffix="picked",
    )
    columns = []
    for d in range(rank):
        gte = inserter.add(
            "get-tuple-element", index_out, [picked], {"index": d + 1}, like=inst, suffix=f"at{d}"
        )
        column = ArrayShape(index_type, (*out_dims, 1))
        columns.append(inserter.add("reshape", column, [gte], like=inst, suffix=f"column{d}"))
    indices_shape = ArrayShape(index_type, (*out_dims, rank))
    indices = (
        columns[0]
        if rank == 1
        else inserter.add(
            "concatenate",
            indices_shape,
            columns,
            {"dimensions": (len(out_dims),)},
            like=inst,
            suffix="indices",
        )
    )
    base = inserter.add(
        "broadcast", inst.shape, [init], {"dimensions": ()}, like=inst, suffix="base"
    )
    return inserter.add(
        "scatter",
        inst.shape,
        [base, indices, source],
        {
            "update_window_dims": (),
            "inserted_window_dims": tuple(range(rank)),
            "scatter_dims_to_operand_dims": tuple(range(rank)),
            "index_vector_dim": len(out_dims),
            "to_apply": inst.attributes["scatter"],
        },
        like=inst,
        suffix="scattered",
    )
