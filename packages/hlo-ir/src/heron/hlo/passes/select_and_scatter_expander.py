"""``select-and-scatter`` becomes a variadic ``reduce-window`` and a ``scatter``.

jax's gradient of a max (or min) pool is a select-and-scatter: in every window
of the operand, ``select`` picks one element, and the window's ``source`` value
is combined into the result there with ``scatter``. No heron emitter runs it
as one op, so this pass rewrites it into ops that run (XLA's
SelectAndScatterExpander does the same for backends without an emitter):

1. an iota over the operand's elements, reshaped to the operand's shape,
   gives every element its row-major position;
2. one variadic ``reduce-window`` over (operand, positions) with the same
   window keeps, per window, the element ``select`` picks and its position.
   Its reducer combines an accumulator ``a`` and a window element ``b``: ``a``
   stays when it is valid and ``b`` is not, or ``select(a, b)`` holds; else
   ``b`` (the select-and-scatter rule: the first valid element, replaced by a
   later one that ``select`` does not prefer it to). The accumulator starts
   invalid (position -1), and padding, which reduce-window fills with the
   inits, is invalid too, so a window of padding only selects nothing;
3. the positions ``scatter`` the source into a broadcast of ``init`` over the
   operand's elements (rank 1) with the ``scatter`` computation, reshaped back
   to the operand's shape; a window that selected nothing has position -1,
   out of bounds, which scatter skips. One position rather than one per
   dimension: no index vector to stack, and the reshapes are bitcasts.

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
            # Flat positions: s32 while they fit, as XLA's iotas are.
            elements = inst.operands[0].array_shape.num_elements
            index_type = ElementType.S32 if elements < 2**31 else ElementType.S64
            reducer = _reducer(inst, index_type, names)
            module.computations.insert(module.computations.index(computation), reducer)
            inserter = Inserter(computation, names)
            inserter.replace(inst, _expand(inserter, inst, index_type, reducer))
            remove_instructions(computation, [inst])
            changed = True
    return changed


def _reducer(inst: Instruction, index_type: ElementType, names: NameUniquer) -> Computation:
    """(value, position) x (value, position) -> the pair ``select`` keeps."""
    select = inst.called("select")
    value_type = inst.operands[0].array_shape.element_type
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

    leaf_shapes = [scalar_value, scalar_index]
    params = [
        add("parameter", shape, parameter_number=n) for n, shape in enumerate(leaf_shapes * 2)
    ]
    a, b = params[:2], params[2:]
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
    operand_shape = operand.array_shape
    elements = operand_shape.num_elements
    out_dims = source.array_shape.dims

    def add(opcode: str, shape, operands, attributes=None, *, suffix: str, **fields):
        return inserter.add(opcode, shape, operands, attributes, like=inst, suffix=suffix, **fields)

    flat = add(
        "iota", ArrayShape(index_type, (elements,)), [], {"iota_dimension": 0}, suffix="iota"
    )
    positions = add(
        "reshape", ArrayShape(index_type, operand_shape.dims), [flat], suffix="positions"
    )
    invalid = add(
        "constant",
        ArrayShape(index_type, ()),
        [],
        suffix="invalid",
        literal=np.array(-1, index_type.numpy_dtype),
    )
    index_out = ArrayShape(index_type, out_dims)
    picked = add(
        "reduce-window",
        TupleShape((ArrayShape(operand_shape.element_type, out_dims), index_out)),
        [operand, positions, init, invalid],
        {"window": inst.attributes["window"], "to_apply": ComputationRef(reducer.name, reducer)},
        suffix="picked",
    )
    position = add("get-tuple-element", index_out, [picked], {"index": 1}, suffix="position")
    indices = add("reshape", ArrayShape(index_type, (*out_dims, 1)), [position], suffix="indices")
    flat_shape = ArrayShape(operand_shape.element_type, (elements,))
    base = add("broadcast", flat_shape, [init], {"dimensions": ()}, suffix="base")
    scattered = add(
        "scatter",
        flat_shape,
        [base, indices, source],
        {
            "update_window_dims": (),
            "inserted_window_dims": (0,),
            "scatter_dims_to_operand_dims": (0,),
            "index_vector_dim": len(out_dims),
            "to_apply": inst.attributes["scatter"],
        },
        suffix="scattered",
    )
    return add("reshape", inst.shape, [scattered], suffix="result")
