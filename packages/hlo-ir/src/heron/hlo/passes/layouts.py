"""Layouts: every shape gets one, and layout changes become explicit transposes.

Three passes, in the order XLA's GPU pipeline runs their counterparts:

- ``layout-assignment``: a shape without a layout gets the default
  (row-major) one, except the entry's parameters and result, which take the
  module's ``entry_computation_layout`` when it names them (the caller's
  buffers are laid out as the caller says). Then every pair of shapes that
  names one buffer (a tuple and its operands, a while's operand and its
  body's parameter, ... :mod:`heron.hlo.forwarded_layouts`) is made to agree:
  a computation's parameters keep their layouts and what is handed to them is
  copied into those (the copy is a transpose after normalisation), and a
  ``tuple``, ``get-tuple-element``, ``while``, ``conditional`` or ``call``
  takes the layout of what it forwards.
- ``layout-normalization``: a ``copy`` that changes the layout is, in memory,
  a transpose. It becomes ``bitcast`` (to the operand's physical order, row
  major) + ``transpose`` + ``bitcast`` (back to the result's layout), so the
  fusion passes and emitters see the transpose they have to emit.
- ``reshape-decomposer``: a ``reshape`` between shapes whose memory order is
  row-major (size-1 dimensions aside) moves no byte: it becomes a
  ``bitcast``. Any other reshape becomes copies to and from row-major around a
  bitcast (the copies then normalise to transposes).
Row-major-ness is decided by :func:`is_row_major`, the one definition of the
question for these passes (and :func:`transpose_is_bitcast` whether a transpose
moves any byte, for ``heron.compiler.fusion.transpose_bitcast``); the physical order itself is
``ArrayShape.major_to_minor`` (``heron.hlo.memory_layout`` has the rest of the
convention).
"""

from __future__ import annotations

import functools

from heron.hlo.attributes import RawAttribute
from heron.hlo.errors import UnsupportedError
from heron.hlo.input_output_alias import input_output_aliases, subshape
from heron.hlo.ir import Instruction, Module
from heron.hlo.parser import parse_shape
from heron.hlo.passes.layout_agreement import agree_forwarded_layouts
from heron.hlo.passes.registry import hlo_pass
from heron.hlo.passes.rewrite import (
    Inserter,
    module_names,
    non_fusion_computations,
    remove_instructions,
)
from heron.hlo.shapes import ArrayShape, Layout, Shape, TupleShape

__all__ = [
    "assign_layouts",
    "decompose_reshapes",
    "is_row_major",
    "normalize_layouts",
    "transpose_is_bitcast",
    "with_default_layout",
]


def with_default_layout(shape: Shape) -> Shape:
    """``shape`` with the row-major layout wherever it has none (tuples element by element)."""
    if isinstance(shape, TupleShape):
        return TupleShape(tuple(with_default_layout(e) for e in shape.elements))
    if shape.layout is not None or shape.element_type.is_token:
        return shape
    return ArrayShape(
        shape.element_type, shape.dims, Layout.default_for_rank(len(shape.dims)), shape.dynamic
    )


def _memory_order(shape: ArrayShape) -> list[int]:
    """The dimensions from major to minor in memory, size-1 dimensions aside."""
    return [d for d in shape.major_to_minor if shape.dims[d] != 1]


def is_row_major(shape: ArrayShape) -> bool:
    """Whether the elements lie in memory in logical row-major order (size-1 dims aside)."""
    order = _memory_order(shape)
    return order == sorted(order)


def _row_major(shape: ArrayShape, dims: tuple[int, ...] | None = None) -> ArrayShape:
    dims = shape.dims if dims is None else dims
    return ArrayShape(shape.element_type, tuple(dims), Layout.default_for_rank(len(dims)))


# -- layout assignment -----------------------------------------------------------------


def _entry_layout(module: Module) -> tuple[list[Shape], Shape] | None:
    raw = module.header.get("entry_computation_layout")
    if raw is None:
        return None
    text = raw.text if isinstance(raw, RawAttribute) else str(raw)
    text = text.strip()
    if text.startswith("{") and text.endswith("}"):
        text = text[1:-1]
    if "->" not in text:
        return None
    arguments, result = text.rsplit("->", 1)
    try:
        shape = parse_shape(arguments.strip())
        result_shape = parse_shape(result.strip())
    except Exception as exc:  # the header is free text to the parser: say which part
        raise UnsupportedError(
            f"entry_computation_layout {raw} is not '(shapes)->shape': {exc}"
        ) from exc
    parameters = list(shape.elements) if isinstance(shape, TupleShape) else [shape]
    return parameters, result_shape


@hlo_pass("layout-assignment", "default layouts, the entry's from entry_computation_layout")
def assign_layouts(module: Module) -> bool:
    changed = False
    entry = module.entry
    declared = _entry_layout(module)
    if declared is not None:
        parameters, result = declared
        for parameter in entry.parameters:
            number = parameter.parameter_number
            if (
                number is not None
                and number < len(parameters)
                and parameter.shape.without_layout() == parameters[number].without_layout()
                and parameter.shape != parameters[number]
                and _layout_free(parameter.shape)
            ):
                parameter.shape = with_default_layout(parameters[number])
                changed = True
        root = entry.root_instruction
        if _layout_free(root.shape) and root.shape.without_layout() == result.without_layout():
            root.shape = with_default_layout(result)
            changed = True
    for computation in non_fusion_computations(module):
        for inst in computation.instructions:
            shape = with_default_layout(inst.shape)
            if shape != inst.shape:
                inst.shape = shape
                changed = True
    changed |= _aliased_outputs_in_parameter_layouts(module)
    changed |= agree_forwarded_layouts(module)
    module.layouts_assigned = True
    return changed


def _aliased_outputs_in_parameter_layouts(module: Module) -> bool:
    """An output aliased with a parameter (``input_output_alias``) lives in the parameter's
    bytes, so it is laid out as the parameter is: where the module declares another
    layout for it (jax may), the root's element becomes a copy into the parameter's
    layout, which normalisation makes a transpose, and the entry's result says so. XLA's
    layout assignment constrains an aliased output the same way."""
    entry = module.entry
    parameters = {p.parameter_number: p for p in entry.parameters}
    names = module_names(module)
    changed = False
    for alias in input_output_aliases(module):
        root = entry.root_instruction
        output = subshape(root.shape, alias.output_index)
        parameter = subshape(parameters[alias.parameter_number].shape, alias.parameter_index)
        if not isinstance(output, ArrayShape) or not isinstance(parameter, ArrayShape):
            continue
        if output.minor_to_major == parameter.minor_to_major:
            continue
        target = ArrayShape(output.element_type, output.dims, parameter.layout)
        inserter = Inserter(entry, names)
        if not alias.output_index:
            copy = inserter.add("copy", target, [root], like=root, suffix="donated_layout")
            entry.root = copy
        elif len(alias.output_index) == 1 and root.opcode == "tuple":
            (k,) = alias.output_index
            element = root.operands[k]
            copy = inserter.add("copy", target, [element], like=element, suffix="donated_layout")
            root.operands[k] = copy
            elements = list(root.shape.elements)
            elements[k] = target
            root.shape = TupleShape(tuple(elements))
        else:
            raise UnsupportedError(
                f"module '{module.name}': output {list(alias.output_index)} is aliased with"
                f" parameter {alias.parameter_number} of layout {parameter.layout} but laid out"
                f" {output.layout}; heron relays out aliased outputs of a flat result tuple only"
            )
        changed = True
    return changed


def _layout_free(shape: Shape) -> bool:
    return all(leaf.layout is None for leaf in shape.leaves())


# -- layout normalisation --------------------------------------------------------------


def _physical_transpose(
    inserter: Inserter, copy: Instruction, operand: Instruction, target: ArrayShape
) -> Instruction:
    """``operand`` laid out as ``target`` (same dims, another layout) through a transpose."""
    source = operand.array_shape
    source_order, target_order = list(source.major_to_minor), list(target.major_to_minor)
    physical_shape = _row_major(source, tuple(source.dims[d] for d in source_order))
    physical = inserter.add("bitcast", physical_shape, [operand], like=copy, suffix="physical")
    moved = inserter.add(
        "transpose",
        _row_major(source, tuple(source.dims[d] for d in target_order)),
        [physical],
        {"dimensions": tuple(source_order.index(d) for d in target_order)},
        like=copy,
        suffix="transpose",
    )
    return inserter.add("bitcast", target, [moved], like=copy, suffix="relaid")


@hlo_pass("layout-normalization", "layout-changing copies as bitcast + transpose + bitcast")
def normalize_layouts(module: Module) -> bool:
    names = module_names(module)
    changed = False
    for computation in non_fusion_computations(module):
        inserter, removed = Inserter(computation, names), []
        for copy in [i for i in computation.instructions if i.opcode == "copy"]:
            source, target = copy.operands[0].shape, copy.shape
            if not isinstance(source, ArrayShape) or not isinstance(target, ArrayShape):
                continue
            if source.layout is None or target.layout is None:
                continue
            if _memory_order(source) == _memory_order(target):
                continue  # the same memory order: the simplifier's business, not a transpose
            replacement = _physical_transpose(inserter, copy, copy.operands[0], target)
            inserter.replace(copy, replacement)
            removed.append(copy)
            changed = True
        remove_instructions(computation, removed)
    return changed


def transpose_is_bitcast(transpose: Instruction) -> bool:
    """Whether ``transpose`` (operand and result laid out) moves no byte: its result's
    dimensions, from major to minor in memory, are the operand's in the operand's memory
    order (size-1 dimensions aside). A JAX program often transposes into a layout that
    is the operand's own bytes (``f32[32,48]{1,0}`` to ``f32[48,32]{0,1}``); XLA's
    layout-sensitive simplifier makes such a transpose a bitcast
    (``ShapeUtil::TransposeIsBitcast``), a copy of the buffer where it is an output."""
    source, target = transpose.operands[0].array_shape, transpose.array_shape
    permutation = tuple(transpose.attr("dimensions"))
    through = [permutation[d] for d in _memory_order(target)]
    return through == _memory_order(source)


# -- reshapes ----------------------------------------------------------------------------


@hlo_pass("reshape-decomposer", "reshapes as bitcasts, with copies where memory order differs")
def decompose_reshapes(module: Module) -> bool:
    names = module_names(module)
    changed = False
    for computation in non_fusion_computations(module):
        inserter, removed = Inserter(computation, names), []
        for reshape in [i for i in computation.instructions if i.opcode == "reshape"]:
            operand = reshape.operands[0]
            source, target = operand.shape, reshape.shape
            if not isinstance(source, ArrayShape) or not isinstance(target, ArrayShape):
                continue
            if source.layout is None or target.layout is None:
                continue
            add = functools.partial(inserter.add, like=reshape)
            if not is_row_major(source):
                operand = add("copy", _row_major(source), [operand], suffix="row_major")
            if is_row_major(target):
                replacement = add("bitcast", target, [operand], suffix="bitcast")
            else:
                flat = add("bitcast", _row_major(target), [operand], suffix="bitcast")
                replacement = add("copy", target, [flat], suffix="relaid")
            inserter.replace(reshape, replacement)
            removed.append(reshape)
            changed = True
        remove_instructions(computation, removed)
    return changed
