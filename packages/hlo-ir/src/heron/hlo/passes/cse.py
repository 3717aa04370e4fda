"""Common subexpression elimination: one instruction for each distinct computation.

Two instructions are the same computation when they have the same opcode,
shape (layout included), operands (the same instruction objects, after
earlier merges), attributes other than ``metadata``, and constant value (bit
for bit, so ``-0.0`` and ``0.0`` stay apart and NaN payloads count).
Instructions with a side effect and parameters are never merged; neither are
instructions with control predecessors, whose ordering is the point. Walking in
post-order makes one run reach the fixed point of this rule: operands are
merged before their users are compared.

JAX repeats broadcasts, constants and iotas for every use; fusion would
otherwise read each copy separately.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from heron.hlo.attribute_syntax import format_attribute
from heron.hlo.ir import Computation, Instruction, Literal, Module
from heron.hlo.passes.registry import hlo_pass
from heron.hlo.passes.rewrite import (
    Uses,
    has_side_effect,
    non_fusion_computations,
    remove_instructions,
)

__all__ = ["eliminate_common_subexpressions", "instruction_signature"]

#: Attributes that describe where an instruction came from, not what it computes.
_IGNORED_ATTRIBUTES = frozenset({"metadata"})


@hlo_pass("hlo-cse", "merge identical instructions")
def eliminate_common_subexpressions(module: Module) -> bool:
    """Merge identical instructions in every computation outside fusion bodies."""
    changed = False
    for computation in non_fusion_computations(module):
        changed |= _merge(computation)
    return changed


def _merge(computation: Computation) -> bool:
    kept: dict[tuple[Any, ...], Instruction] = {}
    merged: list[Instruction] = []
    uses = Uses(computation)
    for inst in computation.post_order():
        if not _mergeable(inst):
            continue
        key = _key(inst)
        original = kept.setdefault(key, inst)
        if original is not inst:
            uses.replace(inst, original)
            merged.append(inst)
    return remove_instructions(computation, merged) > 0


def _mergeable(inst: Instruction) -> bool:
    return (
        inst.opcode != "parameter"
        and "control-predecessors" not in inst.attributes
        and not has_side_effect(inst)
    )


def _key(inst: Instruction) -> tuple[Any, ...]:
    return (instruction_signature(inst), tuple(id(operand) for operand in inst.operands))


def instruction_signature(inst: Instruction) -> tuple[Any, ...]:
    """What ``inst`` computes from its operands: two instructions with equal signatures
    over equal operands compute the same value (unless one has a side effect)."""
    attributes = tuple(
        format_attribute(name, value)
        for name, value in inst.attributes.items()
        if name not in _IGNORED_ATTRIBUTES
    )
    return (inst.opcode, str(inst.shape), attributes, _literal_key(inst.literal))


def _literal_key(literal: Literal | None) -> Any:
    if literal is None:
        return None
    if isinstance(literal, tuple):
        return tuple(_literal_key(element) for element in literal)
    array = np.asarray(literal)
    return (str(array.dtype), array.shape, array.tobytes())
