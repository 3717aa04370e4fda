"""Look through tuples: an element of a tuple is its operand; a rebuilt tuple is the original.

Two rewrites, as XLA's ``TupleSimplifier``:

- ``get-tuple-element(tuple(x0, ..., xn), i)`` -> ``xi``;
- ``tuple(get-tuple-element(t, 0), ..., get-tuple-element(t, n))`` -> ``t``
  when every element of ``t`` is taken, in order, and the shapes agree.

JAX's output is full of both (calls and control flow pass values in tuples);
without them fusion would see tuple plumbing between producers and consumers.
The instructions left unused are removed by ``hlo-dce``, not here.
"""

from __future__ import annotations

from heron.hlo.ir import Instruction, Module
from heron.hlo.passes.registry import hlo_pass
from heron.hlo.passes.rewrite import Uses, non_fusion_computations
from heron.hlo.shapes import TupleShape

__all__ = ["simplify_tuples"]


@hlo_pass("tuple-simplifier", "get-tuple-element of a tuple, and tuples rebuilt from one tuple")
def simplify_tuples(module: Module) -> bool:
    """Apply both rewrites everywhere outside fusion bodies; True when anything changed."""
    changed = False
    for computation in non_fusion_computations(module):
        uses = Uses(computation)
        for inst in computation.post_order():
            replacement = _element_of_tuple(inst) or _rebuilt_tuple(inst)
            if replacement is not None:
                changed |= uses.replace(inst, replacement)
    return changed


def _element_of_tuple(inst: Instruction) -> Instruction | None:
    if inst.opcode != "get-tuple-element" or inst.operands[0].opcode != "tuple":
        return None
    element = inst.operands[0].operands[inst.attr("index")]
    return element if element.shape == inst.shape else None


def _rebuilt_tuple(inst: Instruction) -> Instruction | None:
    if inst.opcode != "tuple" or not inst.operands:
        return None
    first = inst.operands[0]
    if first.opcode != "get-tuple-element":
        return None
    source = first.operands[0]
    if not isinstance(source.shape, TupleShape) or source.shape != inst.shape:
        return None
    if len(source.shape.elements) != len(inst.operands):
        return None
    for index, operand in enumerate(inst.operands):
        if (
            operand.opcode != "get-tuple-element"
            or operand.operands[0] is not source
            or operand.attr("index") != index
        ):
            return None
    return source
