"""CSE after fusion: two fusions computing the same thing from the same operands merge.

``hlo-cse`` compares instructions by their attributes, and two fusions made
by different producers have different fused computations (different names,
different instruction names) even when they compute the same values: priority
fusion duplicates a producer into each consumer, and two consumers that
were identical apart from that become identical fusions. This pass compares
fusions by their kind, shape, operands and a structural signature of their
body (opcodes, shapes, attributes, literals and operand positions, names
ignored; called computations such as reducers by their own signature), and
keeps the first of each group.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from heron.hlo.attribute_syntax import format_attribute
from heron.hlo.attributes import ComputationRef
from heron.hlo.ir import Computation, Instruction, Literal, Module
from heron.hlo.passes.manager import HloPass
from heron.hlo.passes.rewrite import remove_instructions, replace_all_uses
from heron.hlo.shapes import ArrayShape

__all__ = ["eliminate_common_fusions", "fusion_cse", "signature"]

_IGNORED = frozenset({"metadata", "calls", "to_apply"})


def _literal(literal: Literal | None) -> Any:
    if literal is None:
        return None
    if isinstance(literal, tuple):
        return tuple(_literal(element) for element in literal)
    array = np.asarray(literal)
    # The dtype itself, not its name: numpy makes ``str(dtype)`` in Python, a third of
    # signing a GPT-2 step's candidate bodies (dtypes compare and hash as their types).
    return (array.dtype, array.shape, array.tobytes())


def signature(
    computation: Computation,
    called_memo: dict[int, tuple[Any, Any]] | None = None,
    scalar_values: list[Any] | None = None,
    formatted: dict[tuple[str, int], tuple[Any, str]] | None = None,
) -> tuple[Any, ...]:
    """What ``computation`` computes, independent of the names in it.

    ``called_memo`` keeps the signatures of called computations (reducers) for a
    caller that signs many bodies calling the same ones, none of which changes.
    With ``scalar_values``, the values of scalar constants are left out of the
    signature and appended there instead (in post-order): the signature is then
    the body's *form*, which decides its price and whether it can be emitted.
    ``formatted`` keeps formatted attribute values (by name and value object, with
    the value) for a caller that signs many clones of the same instructions (a
    clone shares its attribute values).
    """
    order = computation.post_order()
    # By identity (Instruction has eq=False): the walk runs for every candidate a fusion
    # pass prices, so each instruction costs a few C-level lookups, not id() calls.
    position: dict[Instruction, int] = {}
    rows = []
    for k, inst in enumerate(order):
        position[inst] = k
        called = []
        shown = []
        for name, value in inst.attributes.items():
            refs = value if isinstance(value, tuple) else (value,)
            for ref in refs:
                if isinstance(ref, ComputationRef) and ref.computation is not None:
                    called.append((name, _called_signature(ref.computation, called_memo)))
            if name not in _IGNORED:
                shown.append(_format(name, value, formatted))
        rows.append(
            (
                inst.opcode,
                inst.shape,
                tuple(map(position.__getitem__, inst.operands)),
                inst.parameter_number,
                tuple(shown),
                tuple(called),
                _value(inst, scalar_values)
                if inst.literal is not None or inst.opcode == "constant"
                else None,
            )
        )
    return (tuple(rows), position[computation.root_instruction])


def _format(name: str, value: Any, memo: dict[tuple[str, int], tuple[Any, str]] | None) -> str:
    if memo is None:
        return format_attribute(name, value)
    known = memo.get((name, id(value)))
    if known is None or known[0] is not value:
        known = memo[(name, id(value))] = (value, format_attribute(name, value))
    return known[1]


def _value(inst: Instruction, scalar_values: list[Any] | None) -> Any:
    if (
        scalar_values is not None
        and inst.opcode == "constant"
        and isinstance(inst.shape, ArrayShape)
        and inst.shape.num_elements == 1
    ):
        scalar_values.append(_literal(inst.literal))
        return None
    return _literal(inst.literal)


def _called_signature(
    computation: Computation, memo: dict[int, tuple[Any, Any]] | None
) -> tuple[Any, ...]:
    if memo is None:
        return signature(computation)
    known = memo.get(id(computation))
    if known is None or known[0] is not computation:
        known = memo[id(computation)] = (computation, signature(computation, memo))
    return known[1]


def _key(inst: Instruction) -> tuple[Any, ...]:
    return (
        inst.attr("kind"),
        str(inst.shape),
        tuple(id(op) for op in inst.operands),
        signature(inst.called("calls")),
    )


def eliminate_common_fusions(module: Module) -> bool:
    """Merge identical fusions of the entry computation; drop the bodies left unused."""
    computation = module.entry
    kept: dict[tuple[Any, ...], Instruction] = {}
    merged: list[Instruction] = []
    for inst in computation.post_order():
        if inst.opcode != "fusion":
            continue
        original = kept.setdefault(_key(inst), inst)
        if original is not inst:
            replace_all_uses(computation, inst, original)
            merged.append(inst)
    if not merged:
        return False
    remove_instructions(computation, merged)
    bodies = {id(inst.called("calls")) for inst in merged}
    module.computations = [c for c in module.computations if id(c) not in bodies]
    return True


def fusion_cse(target: object = None) -> HloPass:
    """The ``fusion-cse`` pass (target-independent; the argument keeps the factories alike)."""
    del target
    return HloPass(
        "fusion-cse",
        eliminate_common_fusions,
        "merge fusions that compute the same",
        entry_only=True,
    )
