"""``topk`` becomes a stable sort of (values, iota) along the last dimension and two slices,
unless the top-k emitter takes it (:func:`kept_for_the_topk_kernel`).

XLA:GPU's ``TopkSpecializer`` turns a top-k of a small ``k`` into its TopK
kernel (``__gpu$TopK``) and decomposes every other one; heron keeps the same
``topk`` instructions for its top-k emitter (``heron.plugins.topk``, one
block per row keeping the running top ``k``), and this is the one place that
decides which: XLA's conditions, ``1 <= k <= 16`` (``max_k``), f32 or bf16
values, rank 1 or 2 (``[n]`` or ``[batch, n]``). XLA's source also asks for
rows of at least 1,024 elements (``min_n``), but the XLA of the corpus
(jaxlib 0.10.2) calls ``__gpu$TopK`` for the ``top_k`` program's rows of 32:
heron follows the measured compiler and asks nothing of ``n``.

Otherwise, as XLA's ``TopkDecomposer``: the comparator orders the values descending
(ascending for ``largest=false``) in total order for floating point (NaN
above +inf, -0 below +0), the iota carries each value's index along, and a
stable sort keeps equal values in index order, which is what ``topk``
promises. The first ``k`` columns of both are the result. After this pass
only ``sort`` reaches the backends.
"""

from __future__ import annotations

from heron.hlo.attributes import ComputationRef, SliceRange
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

__all__ = ["MAX_KERNEL_K", "decompose_topk", "kept_for_the_topk_kernel"]

#: The largest ``k`` the top-k kernel takes (XLA's TopkSpecializer ``max_k``).
MAX_KERNEL_K = 16
#: Value types the top-k kernel takes (XLA's TopkSpecializer: F32, BF16).
KERNEL_ELEMENT_TYPES = frozenset({ElementType.F32, ElementType.BF16})


def kept_for_the_topk_kernel(topk: Instruction) -> bool:
    """Whether ``topk`` stays a ``topk`` for the top-k emitter rather than a sort and
    slices: XLA's TopkSpecializer conditions (see the module docstring)."""
    shape = topk.operands[0].shape
    if not isinstance(shape, ArrayShape):
        return False
    k = int(topk.attr("k"))
    return (
        shape.element_type in KERNEL_ELEMENT_TYPES
        and 1 <= len(shape.dims) <= 2
        and 1 <= k <= MAX_KERNEL_K
    )


@hlo_pass("topk-decomposer", "topk as a stable sort of (values, iota) and slices")
def decompose_topk(module: Module) -> bool:
    names = module_names(module)
    changed = False
    for computation in non_fusion_computations(module):
        for topk in [i for i in computation.instructions if i.opcode == "topk"]:
            if kept_for_the_topk_kernel(topk):
                continue
            comparator = _comparator(topk, names)
            position = module.computations.index(computation)
            module.computations.insert(position, comparator)
            inserter = Inserter(computation, names)
            inserter.replace(topk, _decompose(inserter, topk, comparator))
            remove_instructions(computation, [topk])
            changed = True
    return changed


def _comparator(topk: Instruction, names: NameUniquer) -> Computation:
    element = topk.operands[0].shape.element_type
    scalar = ArrayShape(element, ())
    index = ArrayShape(ElementType.S32, ())
    computation = Computation(names.unique(f"{topk.name}.compare"), location=topk.location)
    parameters = [
        computation.add(
            Instruction(names.unique(f"{topk.name}.p{n}"), "parameter", shape, parameter_number=n)
        )
        for n, shape in enumerate((scalar, scalar, index, index))
    ]
    attributes: dict[str, object] = {
        "direction": "GT" if topk.attributes.get("largest", True) else "LT"
    }
    if element.is_floating:
        attributes["type"] = "TOTALORDER"
    computation.root = computation.add(
        Instruction(
            names.unique(f"{topk.name}.order"),
            "compare",
            ArrayShape(ElementType.PRED, ()),
            operands=parameters[:2],
            attributes=attributes,
        )
    )
    return computation


def _decompose(inserter: Inserter, topk: Instruction, comparator: Computation) -> Instruction:
    values = topk.operands[0]
    shape = values.shape
    last = len(shape.dims) - 1
    k = int(topk.attr("k"))

    def add(name: str, opcode: str, result, operands, attributes=None) -> Instruction:
        return inserter.add(opcode, result, operands, attributes, like=topk, suffix=name)

    index_shape = ArrayShape(ElementType.S32, shape.dims, shape.layout)
    iota = add("iota", "iota", index_shape, [], {"iota_dimension": last})
    sorted_pair = add(
        "sort",
        "sort",
        TupleShape((shape, index_shape)),
        [values, iota],
        {
            "dimensions": (last,),
            "is_stable": True,
            "to_apply": ComputationRef(comparator.name, comparator),
        },
    )
    ranges = tuple(SliceRange(0, k if d == last else size, 1) for d, size in enumerate(shape.dims))
    results = []
    for n, result in enumerate(topk.shape.elements):
        column = add(
            f"sorted{n}", "get-tuple-element", sorted_pair.shape.elements[n], [sorted_pair]
        )
        column.attributes["index"] = n
        results.append(add(f"top{n}", "slice", result, [column], {"slice": ranges}))
    return add("result", "tuple", topk.shape, results)
