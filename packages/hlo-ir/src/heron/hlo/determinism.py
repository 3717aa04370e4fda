"""Which instructions give a result that depends on the order a GPU applies their updates.

A scatter whose updates may meet at one element (``unique_indices`` unset)
combines them in whatever order the threads get there: the scatter emitter
uses atomics. The result is the same whatever the order only when the
combiner is exactly commutative and associative: integer add, multiply,
and/or/xor, min and max, and float min and max. A float add or multiply
rounds differently in another order, and an overwrite (the combiner returns
the update) keeps whichever update came last. Those scatters are
*order-dependent*: run to run, a GPU may give different bits, as XLA:GPU's do
(``--xla_gpu_deterministic_ops`` expands them: heron's
``scatter-determinism-expander``).

This module is the one statement of that rule: the expander rewrites what it
names, and the scatter emitter reports the kernels it makes with atomics over
what it names.
"""

from __future__ import annotations

from heron.hlo.attributes import KeyValueList
from heron.hlo.ir import Computation, Instruction
from heron.hlo.shapes import TupleShape

__all__ = [
    "REGROUPED",
    "SERIAL_UPDATES",
    "combiner_opcode",
    "frontend_attributes",
    "mark_regrouped",
    "regrouped",
    "order_dependence",
    "order_independent_combiner",
    "serial_updates_requested",
]

#: The frontend attribute that asks the scatter emitter to apply a scatter's updates
#: one after another in update order (deterministic, and XLA:CPU's order) instead of
#: with atomics: ``--deterministic`` sets it on the order-dependent scatters the
#: scatter-determinism-expander cannot rewrite.
SERIAL_UPDATES = "_heron_serial_updates"
#: The frontend attribute a rewrite sets on the ops it made that compute a float
#: reduction in another grouping than the module wrote (the scan rewriter's block
#: scans and their combination): a check compares their results within the
#: reassociation bounds, not bit for bit.
REGROUPED = "_heron_regrouped"

#: Binary ops whose result, folded over any multiset of integers, is the same in any order.
_EXACT_INTEGER_OPS = frozenset({"add", "multiply", "and", "or", "xor", "maximum", "minimum"})
#: The same for floats (and pred): only the selections are exact.
_EXACT_FLOAT_OPS = frozenset({"maximum", "minimum", "and", "or"})


def combiner_opcode(combiner: Computation) -> str | None:
    """The opcode of ``combiner``'s one op when it is that op over its two parameters
    (``add(x, u)``), else None."""
    root = combiner.root_instruction
    parameters = combiner.parameters
    if len(parameters) != 2 or len(combiner.instructions) != 3:
        return None
    if sorted(map(id, root.operands)) != sorted(map(id, parameters)):
        return None
    return root.opcode


def order_independent_combiner(combiner: Computation) -> bool:
    """Whether ``combiner`` (two scalar parameters, one op over them) folds alike in any order."""
    opcode = combiner_opcode(combiner)
    shape = combiner.root_instruction.shape
    if isinstance(shape, TupleShape):  # a variadic combiner: several values, no one op
        return False
    element = shape.element_type
    exact = _EXACT_FLOAT_OPS if element.is_floating or element.is_complex else _EXACT_INTEGER_OPS
    return opcode in exact


def order_dependence(inst: Instruction) -> str | None:
    """Why ``inst``'s result depends on the order its updates are applied, or None."""
    if inst.opcode != "scatter" or inst.attr("unique_indices", False):
        return None
    combiner = inst.called("to_apply")
    if order_independent_combiner(combiner):
        return None
    count = (len(inst.operands) - 1) // 2
    updates = inst.operands[count + 1]
    if updates.array_shape.num_elements <= 1:
        return None
    root = combiner.root_instruction
    element = inst.operands[0].array_shape.element_type.name.lower()
    what = root.opcode if root.opcode != "parameter" else "overwrite"
    return (
        f"scatter '{inst.name}': updates that meet are combined by {what} ({element})"
        " in the order they arrive"
    )


def mark_regrouped(inst: Instruction) -> None:
    """Set :data:`REGROUPED` on ``inst``."""
    from heron.hlo.attributes import KeyValueList, QuotedString

    entries = frontend_attributes(inst)
    entries[REGROUPED] = QuotedString("true")
    inst.attributes["frontend_attributes"] = KeyValueList(tuple(entries.items()))


def regrouped(inst: Instruction) -> bool:
    """Whether a rewrite regrouped the reduction ``inst`` computes (:data:`REGROUPED`)."""
    return REGROUPED in frontend_attributes(inst)


def frontend_attributes(inst: Instruction) -> dict[str, object]:
    """``inst``'s ``frontend_attributes`` as a dict (empty when it has none)."""
    attributes = inst.attributes.get("frontend_attributes")
    if isinstance(attributes, KeyValueList):
        return dict(attributes.items)
    return {}


def serial_updates_requested(scatter: Instruction) -> bool:
    """Whether ``scatter`` carries :data:`SERIAL_UPDATES` (the scatter emitter's question)."""
    return SERIAL_UPDATES in frontend_attributes(scatter)
