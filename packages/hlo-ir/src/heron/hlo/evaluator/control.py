"""Calls and control flow: fusion, call, while, conditional; tokens and barriers.

A custom call is evaluated by its target's host implementation, found in the
``heron.custom_calls`` registry (:mod:`heron.hlo.custom_calls`); a target no
installed plugin provides is refused naming it, the instruction and its
computation.

Also the deliberate refusals: operations that need a device, other replicas,
the host or randomness (collectives, infeed/outfeed, send/recv, rng) have no
reference value, and say so naming the instruction. ``rng-bit-generator`` is the
exception: its bits are fixed by XLA's expansion (Philox or Threefry), which the
evaluator builds and evaluates (:mod:`heron.hlo.passes.rng_bit_generator_expander`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from heron.hlo.control_flow import branch_index, conditional_branches
from heron.hlo.custom_calls.call import CustomCallError
from heron.hlo.custom_calls.registry import resolve
from heron.hlo.custom_calls.sharding import is_sharding_annotation
from heron.hlo.errors import HloEvaluationError
from heron.hlo.evaluator.common import (
    MAX_WHILE_ITERATIONS_ENV,
    TOKEN,
    flatten_literal,
    instruction_error,
    unsupported,
)
from heron.hlo.ir import Instruction, Literal
from heron.hlo.opcodes import OPCODES, Category
from heron.hlo.shapes import Shape, TupleShape

if TYPE_CHECKING:
    from heron.hlo.evaluator.interpreter import Evaluator


def _fusion(ev: Evaluator, inst: Instruction, ops: list[Literal]) -> Literal:
    return ev.call(inst.called("calls"), ops)


def _call(ev: Evaluator, inst: Instruction, ops: list[Literal]) -> Literal:
    return ev.call(inst.called("to_apply"), ops)


def _vector_call(ev: Evaluator, inst: Instruction, ops: list[Literal]) -> Literal:
    (callee,) = inst.called_computations()
    return ev.run(callee, ops, vector=True)


def _truth(inst: Instruction, value: Literal, what: str) -> bool:
    array = np.asarray(value)
    if array.shape != ():
        raise instruction_error(
            inst, f"{what} returned {array.dtype}{list(array.shape)}, not pred[]"
        )
    return bool(array)


def _while(ev: Evaluator, inst: Instruction, ops: list[Literal]) -> Literal:
    """Run the body while the condition holds, at most ``max_while_iterations`` times."""
    condition = inst.called("condition")
    body = inst.called("body")
    (state,) = ops
    limit = ev.options.max_while_iterations
    for _ in range(limit):
        if not _truth(inst, ev.call(condition, [state]), f"condition '{condition.name}'"):
            return state
        state = ev.call(body, [state])
    if not _truth(inst, ev.call(condition, [state]), f"condition '{condition.name}'"):
        return state
    raise instruction_error(
        inst,
        f"loop still running after {limit} iterations: stopped (the limit is"
        f" EvaluatorOptions.max_while_iterations, or {MAX_WHILE_ITERATIONS_ENV})",
    )


def _conditional(ev: Evaluator, inst: Instruction, ops: list[Literal]) -> Literal:
    """A pred picks branch 0 (true) or 1 (false); an index out of range picks the last."""
    branches = conditional_branches(inst)
    if len(ops) != len(branches) + 1:
        raise instruction_error(
            inst, f"{len(branches)} branches need {len(branches) + 1} operands, got {len(ops)}"
        )
    index = branch_index(ops[0], len(branches))
    return ev.call(branches[index], [ops[index + 1]])


def _after_all(ev: Evaluator, inst: Instruction, ops: list[Literal]) -> Literal:
    return TOKEN


def _pass_through(ev: Evaluator, inst: Instruction, ops: list[Literal]) -> Literal:
    return ops[0]


def _opt_barrier(ev: Evaluator, inst: Instruction, ops: list[Literal]) -> Literal:
    return ops[0] if len(ops) == 1 else tuple(ops)


def _single_device_id(ev: Evaluator, inst: Instruction, ops: list[Literal]) -> Literal:
    # The evaluator models one device: replica 0 of partition 0.
    return np.zeros((), dtype=inst.array_shape.numpy_dtype)


def _one_device_collective(ev: Evaluator, inst: Instruction, ops: list[Literal]) -> Literal:
    """A collective as the one device the evaluator models runs it: over replica groups
    of one device (``{}`` where the program declares one: ``EvaluatorOptions.devices``),
    its operand (a reduction, gather or scatter of one contribution); a
    collective-permute, its operand where device 0 sends to itself, else zeros. Any
    other is refused (:mod:`heron.hlo.passes.one_device_collectives`: the same rule)."""
    # Imported here: heron.hlo.passes imports the evaluator (constant folding).
    from heron.hlo.passes.one_device_collectives import one_device_value

    found = one_device_value(inst, ops, ev.options.devices)
    if found is None:
        raise unsupported(inst, _NEEDS_DEVICES)
    return found


def _zeros(shape: Shape) -> Literal:
    if isinstance(shape, TupleShape):
        return tuple(_zeros(e) for e in shape.elements)
    return TOKEN if shape.is_token else np.zeros(shape.dims, dtype=shape.numpy_dtype)


def _context(inst: Instruction, first: int) -> tuple[Literal, ...]:
    """Zero values for the context elements of an async op's tuple shape (from ``first``)."""
    shape = inst.shape
    if not isinstance(shape, TupleShape) or len(shape.elements) < first:
        raise instruction_error(inst, f"expected a tuple of at least {first} elements, got {shape}")
    return tuple(_zeros(e) for e in shape.elements[first:])


def _copy_start(ev: Evaluator, inst: Instruction, ops: list[Literal]) -> Literal:
    # (destination, source, context): the copy has happened once it "starts".
    return (ops[0], ops[0], *_context(inst, 2))


def _async_start(ev: Evaluator, inst: Instruction, ops: list[Literal]) -> Literal:
    # ((operands), result, context...): the wrapped computation runs synchronously.
    (callee,) = inst.called_computations()
    return (tuple(ops), ev.call(callee, ops), *_context(inst, 2))


def _done(ev: Evaluator, inst: Instruction, ops: list[Literal]) -> Literal:
    value = ops[0]
    index = 0 if inst.opcode == "copy-done" else 1
    if not isinstance(value, tuple) or len(value) <= index:
        raise instruction_error(inst, "operand is not the tuple its start op produces")
    return value[index]


def _custom_call(ev: Evaluator, inst: Instruction, ops: list[Literal]) -> Literal:
    """The target's host implementation on the operands' array leaves (the plugin ABI);
    a sharding annotation is its operand (one device)."""
    if is_sharding_annotation(inst):
        return ops[0]
    # Imported here: heron.hlo.passes imports the evaluator (constant folding).
    from heron.hlo.passes.xla_library_calls import equivalent_computation

    equivalent = equivalent_computation(inst)  # XLA's library calls: the same rewrite
    if equivalent is not None:
        return ev.call(equivalent, ops)
    call, registry = resolve(inst)  # an unknown target: UnsupportedError, named and placed
    try:
        results = registry.invoke(call, [leaf for op in ops for leaf in flatten_literal(op)])
    except CustomCallError as error:
        # The message names the call, the target and the plugin; the error carries the place.
        refused = HloEvaluationError(str(error), inst.location)
        refused.names_instruction = True  # type: ignore[attr-defined]
        raise refused from error
    return call.nest(results)


def _rng_bit_generator(ev: Evaluator, inst: Instruction, ops: list[Literal]) -> Literal:
    """The bits XLA computes: its expansion (Philox or Threefry in plain HLO), evaluated."""
    # Imported here: heron.hlo.passes imports the evaluator (constant folding).
    from heron.hlo.passes.rng_bit_generator_expander import generator_computation, refusal

    why = refusal(inst)
    if why is not None:
        raise unsupported(inst, why)
    return ev.call(generator_computation(inst), ops)


def _refuse(why: str):
    def handler(ev: Evaluator, inst: Instruction, ops: list[Literal]) -> Literal:
        raise unsupported(inst, why)

    return handler


_NEEDS_DEVICES = "it communicates between devices, and the evaluator models one device"

HANDLERS = {
    "fusion": _fusion,
    "call": _call,
    "while": _while,
    "conditional": _conditional,
    "after-all": _after_all,
    "add-dependency": _pass_through,
    "domain": _pass_through,
    "opt-barrier": _opt_barrier,
    "optimization-barrier": _opt_barrier,
    "replica-id": _single_device_id,
    "copy-start": _copy_start,
    "copy-done": _done,
    "async-start": _async_start,
    "async-update": _pass_through,
    "async-done": _done,
    "partition-id": _single_device_id,
    "custom-call": _custom_call,
    "rng": _refuse("random number generation has no reference value"),
    "rng-bit-generator": _rng_bit_generator,
    "rng-get-and-update-state": _refuse("random number generation has no reference value"),
    "infeed": _refuse("it reads from the host"),
    "outfeed": _refuse("it writes to the host"),
    "send": _refuse(_NEEDS_DEVICES),
    "send-done": _refuse(_NEEDS_DEVICES),
    "recv": _refuse(_NEEDS_DEVICES),
    "recv-done": _refuse(_NEEDS_DEVICES),
    **{
        name: _refuse(_NEEDS_DEVICES)
        for name, info in OPCODES.items()
        if info.category is Category.COLLECTIVE
    },
    **{
        name: _one_device_collective
        for name in (
            "all-reduce",
            "all-gather",
            "reduce-scatter",
            "all-to-all",
            "collective-permute",
        )
    },
}

VECTOR_HANDLERS = {
    "call": _vector_call,
    "fusion": _vector_call,
    "opt-barrier": _opt_barrier,
    "optimization-barrier": _opt_barrier,
}
