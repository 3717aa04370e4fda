"""A stable ``sort`` without an iota operand gets one: XLA:GPU's StableSortExpander.

A stable sort breaks ties by the elements' original positions. The sort
emitter (``heron.plugins.sort``) keeps them in a shared-memory tile while a
row fits one, but a row sorted in the output buffers (longer than a block)
has nowhere to keep them but an operand: there it needs a signed iota along
the sorted dimension, sorted with the keys, whose values are the positions.
XLA:GPU gives every stable sort such an iota operand (and fuses it into the
sort's kernel, SortIotaFusion); heron does the same, so the emitter always
finds one (``jnp.sort`` of a long row runs), and the fusion passes compute it
in the sort's kernel (``heron.compiler.fusion.fusible.IOTA_TAKING_HEROES``).

The new operand comes last: ``sort(a, b, iota)``, its comparator taking two
more (unused) parameters, ``is_stable`` kept (the evaluator and the emitter
break ties by position, the iota's values); the sort's users read the old
leaves through ``get-tuple-element``, the tuple simplifier removes the rest.
A sort that already has an iota along its dimension (an argsort, a
decomposed top-k) is left as it is.
"""

from __future__ import annotations

from heron.hlo.attributes import ComputationRef
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

__all__ = ["counts_along", "expand_stable_sorts"]


@hlo_pass("stable-sort-expander", "a stable sort gets an s32 iota operand for its positions")
def expand_stable_sorts(module: Module) -> bool:
    names = module_names(module)
    changed = False
    for computation in non_fusion_computations(module):
        for sort in [i for i in computation.instructions if i.opcode == "sort"]:
            if not sort.attributes.get("is_stable", False):
                continue
            (dimension,) = tuple(sort.attributes.get("dimensions", ()))
            length = sort.operands[0].array_shape.dims[dimension]
            if any(counts_along(op, dimension, length) for op in sort.operands):
                continue
            comparator = _with_position_parameters(sort, names)
            module.computations.insert(module.computations.index(computation), comparator)
            inserter = Inserter(computation, names)
            inserter.replace(sort, _expand(inserter, sort, dimension, comparator))
            remove_instructions(computation, [sort])
            changed = True
    return changed


def counts_along(operand: Instruction, dimension: int, length: int) -> bool:
    """Whether ``operand`` holds every position ``0 .. length-1`` along ``dimension``: a
    signed iota along it, or an iota of its type broadcast so that it counts along it."""
    shape = operand.shape
    if not isinstance(shape, ArrayShape) or not shape.element_type.is_signed_integral:
        return False
    if length - 1 >= 2 ** (shape.element_type.bit_width - 1):
        return False
    if operand.opcode == "iota":
        return operand.attributes.get("iota_dimension") == dimension
    if operand.opcode == "broadcast" and operand.operands[0].opcode == "iota":
        (iota,) = operand.operands
        if iota.shape != ArrayShape(shape.element_type, iota.shape.dims, iota.shape.layout):
            return False
        dims = tuple(operand.attributes.get("dimensions", ()))
        return dims[iota.attributes.get("iota_dimension")] == dimension
    return False


def _with_position_parameters(sort: Instruction, names: NameUniquer) -> Computation:
    """The sort's comparator with two more s32 parameters (the positions), unused."""
    old = sort.called("to_apply")
    new = Computation(names.unique(f"{old.name}.positions"), location=old.location)
    mapping: dict[int, Instruction] = {}
    for inst in old.post_order():
        clone = inst.clone([mapping[id(op)] for op in inst.operands], names.unique(inst.name))
        mapping[id(inst)] = new.add(clone)
    count = len(old.parameters)
    scalar = ArrayShape(ElementType.S32, ())
    for n in (count, count + 1):
        new.add(
            Instruction(
                names.unique(f"{old.name}.position{n - count}"),
                "parameter",
                scalar,
                parameter_number=n,
                location=old.location,
            )
        )
    new.root = mapping[id(old.root_instruction)]
    return new


def _expand(
    inserter: Inserter, sort: Instruction, dimension: int, comparator: Computation
) -> Instruction:
    operands = list(sort.operands)
    first = operands[0].array_shape
    index = ArrayShape(ElementType.S32, first.dims, first.layout)
    iota = inserter.add("iota", index, [], {"iota_dimension": dimension}, like=sort, suffix="iota")
    leaves = list(sort.shape.elements) if isinstance(sort.shape, TupleShape) else [sort.shape]
    attributes = dict(sort.attributes)
    attributes["to_apply"] = ComputationRef(comparator.name, comparator)
    expanded = inserter.add(
        "sort",
        TupleShape((*leaves, index)),
        [*operands, iota],
        attributes,
        like=sort,
        suffix="positions",
    )
    picked = []
    for n, leaf in enumerate(leaves):
        gte = inserter.add("get-tuple-element", leaf, [expanded], like=sort, suffix=f"leaf{n}")
        gte.attributes["index"] = n
        picked.append(gte)
    if not isinstance(sort.shape, TupleShape):
        return picked[0]
    return inserter.add("tuple", sort.shape, picked, like=sort, suffix="leaves")
