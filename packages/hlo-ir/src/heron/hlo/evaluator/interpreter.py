"""The evaluator's driver: walk a computation in post order, one handler per opcode.

Values follow one convention everywhere: an array is a numpy array of the
element type's dtype in logical (row-major) index order whatever the layout,
a tuple is a Python tuple, a token is ``TOKEN``. Values are never mutated once
produced (handlers that write in place copy first), so a handler may return a
view of an operand (broadcast, transpose, reshape) at no cost.

The driver, not the handlers, does what every instruction needs: refuse a
result larger than the byte limit before it is computed, check the value a
handler returns against the instruction's declared shape, free each value
after its last use, and turn any exception raised inside a handler into an
``HloEvaluationError`` that names the instruction and where it is.

Scalar computations (reducers, comparators, combiners) are also evaluated "in
array mode": their parameters are bound to whole arrays of values, and since
every instruction they contain is elementwise, running them once computes the
computation for every element (numpy broadcasting lines constants up). This
is what lets reduce, sort, scatter and friends run one numpy op per
instruction instead of a Python call per element. ``call_vectorized`` checks
that a computation only contains such instructions and otherwise falls back
to a per-element loop.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from typing import Any

import attrs
import numpy as np

from heron.hlo import memory_budget
from heron.hlo.devices import devices_declared
from heron.hlo.errors import HloError, HloEvaluationError, HloInputError
from heron.hlo.evaluator import control, data_movement, indexing_ops, linalg, reductions
from heron.hlo.evaluator.common import (
    MAX_WHILE_ITERATIONS_ENV,
    TOKEN,
    describe,
    elementwise_module,
    flatten_literal,
    instruction_error,
    unsupported,
)
from heron.hlo.ir import Computation, Instruction, Literal, Module
from heron.hlo.opcodes import is_elementwise
from heron.hlo.shapes import ArrayShape, Shape, TupleShape

#: Default for ``EvaluatorOptions.max_while_iterations``. Generous (real loops
#: in test programs run tens to thousands of iterations) but finite, so a loop
#: whose condition never turns false is reported instead of hanging forever.
DEFAULT_MAX_WHILE_ITERATIONS = 1_000_000

MAX_BYTES_ENV = "HERON_EVALUATOR_MAX_BYTES"


def _env_int(name: str, default: int) -> int:
    text = os.environ.get(name)
    if text is None or not text.strip():
        return default
    try:
        value = int(text.strip(), 0)
    except ValueError:
        raise ValueError(f"environment variable {name}={text!r} is not an integer") from None
    if value <= 0:
        raise ValueError(f"environment variable {name}={text!r} must be positive")
    return value


def _default_max_bytes() -> int:
    """``HERON_EVALUATOR_MAX_BYTES`` when set, else the memory budget."""
    if os.environ.get(MAX_BYTES_ENV, "").strip():
        return _env_int(MAX_BYTES_ENV, 0)
    return memory_budget.budget()


@attrs.frozen
class EvaluatorOptions:
    """Limits of one evaluation.

    ``max_bytes``: the largest result (bytes, all tuple leaves together) one
    instruction may produce; default ``HERON_EVALUATOR_MAX_BYTES`` when set, else
    heron's memory budget (:mod:`heron.hlo.memory_budget`).
    ``max_while_iterations``: how many times one ``while`` may run its body
    before evaluation stops with an error naming it; default 1,000,000 or
    ``HERON_EVALUATOR_MAX_WHILE_ITERATIONS``.
    ``devices``: how many devices the program is written for (its header's replicas
    times partitions; :func:`evaluate_module` reads it), so that a collective over all
    of them (``replica_groups={}``) is known to be one device's; None: not known (a
    computation evaluated alone), and such a collective is refused.
    """

    max_bytes: int = attrs.field(factory=lambda: _default_max_bytes())
    max_while_iterations: int = attrs.field(
        factory=lambda: _env_int(MAX_WHILE_ITERATIONS_ENV, DEFAULT_MAX_WHILE_ITERATIONS)
    )
    devices: int | None = None


Handler = Callable[["Evaluator", Instruction, list[Literal]], Literal]

#: Called with each instruction the evaluator evaluates, its operands' values and its
#: value; returns the value to use instead (the same value to only observe). The check's
#: random rounding (:mod:`heron.harness.random_rounding`) rounds results up or down.
StepHook = Callable[[Instruction, list[Literal], Literal], Literal]


# -- errors ----------------------------------------------------------------------


# -- sizes and value checks ------------------------------------------------------


def shape_bytes(shape: Shape) -> int:
    """Bytes a value of ``shape`` occupies as the evaluator holds it (sub-byte: 1 byte)."""
    if isinstance(shape, TupleShape):
        return sum(shape_bytes(e) for e in shape.elements)
    if shape.is_token:
        return 0
    return shape.num_elements * shape.element_type.byte_width


def _shape_of_value(value: Any) -> str:
    if isinstance(value, np.ndarray):
        return f"{value.dtype}{list(value.shape)}"
    if isinstance(value, tuple):
        return "(" + ", ".join(_shape_of_value(v) for v in value) + ")"
    if value is TOKEN:
        return "token"
    return type(value).__name__


def value_mismatch(shape: Shape, value: Any) -> str | None:
    """Why ``value`` is not a value of ``shape`` (None if it is)."""
    if isinstance(shape, TupleShape):
        if not isinstance(value, tuple):
            return f"expected a tuple {shape}, got {_shape_of_value(value)}"
        if len(value) != len(shape.elements):
            return f"expected {len(shape.elements)} tuple elements, got {len(value)}"
        for i, (s, v) in enumerate(zip(shape.elements, value)):
            why = value_mismatch(s, v)
            if why is not None:
                return f"tuple element {i}: {why}"
        return None
    if shape.is_token:
        return None if value is TOKEN else f"expected a token, got {_shape_of_value(value)}"
    if not isinstance(value, np.ndarray):
        return f"expected an array {shape}, got {_shape_of_value(value)}"
    if value.dtype != shape.numpy_dtype:
        return f"expected {shape.element_type} elements ({shape.numpy_dtype}), got {value.dtype}"
    if value.shape != shape.dims:
        return f"expected dimensions {list(shape.dims)}, got {list(value.shape)}"
    return None


def _normalize(value: Any) -> Any:
    """numpy scalars become 0-d arrays; lists become tuples."""
    if isinstance(value, np.ndarray):
        return value
    if isinstance(value, np.generic):
        return np.asarray(value)
    if isinstance(value, list):
        return tuple(_normalize(v) for v in value)
    return value


def _materialize(value: Any, inputs: set[int]) -> Any:
    """Give the caller arrays it owns: contiguous, writable, not views of broadcasts,
    constants or its own arguments (``inputs``: ids of the argument arrays)."""
    if isinstance(value, tuple):
        return tuple(_materialize(v, inputs) for v in value)
    if isinstance(value, np.ndarray) and (
        not value.flags.c_contiguous
        or not value.flags.writeable
        or value.base is not None
        or id(value) in inputs
    ):
        return np.array(value, copy=True, order="C")
    return value


def check_arguments(computation: Computation, args: Sequence[Literal]) -> list[Literal]:
    """Check ``args`` against ``computation``'s parameters, strictly (no conversions)."""
    params = computation.parameters
    numbers = [p.parameter_number for p in params]
    if numbers != list(range(len(params))):
        raise HloInputError(
            f"computation '{computation.name}' has parameter numbers {numbers},"
            f" expected 0..{len(params) - 1}",
            computation.location,
        )
    if len(args) != len(params):
        raise HloInputError(
            f"computation '{computation.name}' takes {len(params)} argument(s), got {len(args)}",
            computation.location,
        )
    checked = []
    for param, arg in zip(params, args):
        arg = _normalize(arg)
        why = value_mismatch(param.shape, arg)
        if why is not None:
            raise HloInputError(
                f"argument for parameter {param.parameter_number} '{param.name}'"
                f" ({param.shape}): {why}",
                param.location,
            )
        checked.append(arg)
    return checked


# -- handler tables ----------------------------------------------------------------

_HANDLERS: dict[str, Handler] | None = None
_VECTOR_HANDLERS: dict[str, Handler] | None = None


def _elementwise_opcodes() -> frozenset[str]:
    return frozenset(elementwise_module().ELEMENTWISE_OPCODES)


def _handle_elementwise(ev: Evaluator, inst: Instruction, operands: list[Literal]) -> Literal:
    return elementwise_module().evaluate_elementwise(
        inst.opcode, inst.attributes, operands, inst.array_shape.element_type
    )


def _handle_elementwise_vector(
    ev: Evaluator, inst: Instruction, operands: list[Literal]
) -> Literal:
    # In array mode operands are arrays of one batch shape or scalars (constants):
    # HLO has no implicit broadcasting, so line them up explicitly (views, no copies).
    dims = np.broadcast_shapes(*(np.shape(o) for o in operands)) if operands else ()
    lined_up = [o if np.shape(o) == dims else np.broadcast_to(o, dims) for o in operands]
    return elementwise_module().evaluate_elementwise(
        inst.opcode, inst.attributes, lined_up, inst.array_shape.element_type
    )


def _handle_unsupported(ev: Evaluator, inst: Instruction, operands: list[Literal]) -> Literal:
    raise unsupported(inst)


def handlers() -> dict[str, Handler]:
    """The opcode -> handler table (built on first use: the family modules import this one)."""
    global _HANDLERS
    if _HANDLERS is None:
        table: dict[str, Handler] = {}
        for family in (data_movement, indexing_ops, reductions, linalg, control):
            table.update(family.HANDLERS)
        _HANDLERS = table
    return _HANDLERS


def vector_handlers() -> dict[str, Handler]:
    global _VECTOR_HANDLERS
    if _VECTOR_HANDLERS is None:
        table: dict[str, Handler] = {}
        table.update(data_movement.VECTOR_HANDLERS)
        table.update(control.VECTOR_HANDLERS)
        _VECTOR_HANDLERS = table
    return _VECTOR_HANDLERS


def _handler_for(opcode: str, vector: bool) -> Handler:
    table = vector_handlers() if vector else handlers()
    handler = table.get(opcode)
    if handler is not None:
        return handler
    if opcode in _elementwise_opcodes() or is_elementwise(opcode):
        return _handle_elementwise_vector if vector else _handle_elementwise
    return _handle_unsupported


# -- plans ---------------------------------------------------------------------------


@attrs.define
class _Step:
    inst: Instruction
    handler: Handler
    slot: int
    operand_slots: tuple[int, ...]
    free_after: tuple[int, ...]
    result_bytes: int


@attrs.define
class _Plan:
    """A computation prepared for repeated evaluation (while bodies, reducers)."""

    steps: list[_Step]
    params: list[tuple[int, int]]  # (slot, parameter number)
    num_params: int
    root_slot: int
    num_slots: int


def _reachable(comp: Computation) -> set[int]:
    root = comp.root_instruction
    seen = {id(root)}
    stack = [root]
    while stack:
        inst = stack.pop()
        for op in inst.operands:
            if id(op) not in seen:
                seen.add(id(op))
                stack.append(op)
    return seen


def _build_plan(comp: Computation, vector: bool) -> _Plan:
    reachable = _reachable(comp)
    order = [i for i in comp.post_order() if id(i) in reachable]
    slot_of = {id(inst): n for n, inst in enumerate(order)}
    root_slot = slot_of[id(comp.root_instruction)]
    last_use: dict[int, int] = {}
    for n, inst in enumerate(order):
        for op in inst.operands:
            last_use[slot_of[id(op)]] = n
    frees: dict[int, list[int]] = {}
    for slot, n in last_use.items():
        if slot != root_slot:
            frees.setdefault(n, []).append(slot)
    steps: list[_Step] = []
    params: list[tuple[int, int]] = []
    for n, inst in enumerate(order):
        if inst.opcode == "parameter":
            params.append((n, inst.parameter_number if inst.parameter_number is not None else -1))
            continue
        steps.append(
            _Step(
                inst=inst,
                handler=_handler_for(inst.opcode, vector),
                slot=n,
                operand_slots=tuple(slot_of[id(op)] for op in inst.operands),
                free_after=tuple(frees.get(n, ())),
                result_bytes=0 if vector else shape_bytes(inst.shape),
            )
        )
    num_params = len(comp.parameters)
    return _Plan(steps, params, num_params, root_slot, len(order))


# -- the evaluator ---------------------------------------------------------------------

#: Opcodes a scalar computation may contain and still run in array mode
#: (besides elementwise ones).
_VECTOR_SAFE_STRUCTURAL = frozenset(
    {
        "parameter",
        "constant",
        "tuple",
        "get-tuple-element",
        "copy",
        "reshape",
        "bitcast",
        "broadcast",
        "call",
        "fusion",
        "opt-barrier",
        "optimization-barrier",
    }
)


def _all_scalar(shape: Shape) -> bool:
    return all(leaf.is_scalar and not leaf.is_token for leaf in shape.leaves())


class Evaluator:
    """One evaluation: options plus caches of prepared computations.

    Handlers call back into it to evaluate the computations an instruction
    calls (``call``) or to apply a scalar computation to arrays of values
    (``call_vectorized``).
    """

    def __init__(self, options: EvaluatorOptions | None = None, hook: StepHook | None = None):
        self.options = options if options is not None else EvaluatorOptions()
        self.hook = hook
        self._plans: dict[tuple[int, bool], tuple[Computation, _Plan]] = {}
        self._vector_safe: dict[int, tuple[Computation, bool]] = {}
        #: Per-evaluation cache for handlers (e.g. computations derived from called ones).
        self.memo: dict[Any, Any] = {}

    # -- entry points used by handlers ------------------------------------------
    def call(self, comp: Computation, args: Sequence[Literal]) -> Literal:
        """Evaluate ``comp`` on ``args`` (values already of the right shapes)."""
        return self.run(comp, args, vector=False)

    def call_vectorized(self, comp: Computation, args: Sequence[Literal]) -> Literal:
        """Apply scalar computation ``comp`` elementwise to arrays ``args``.

        ``args`` broadcast together to a batch shape; each result leaf has that
        batch shape and the dtype of the corresponding leaf of the root.
        """
        batch = np.broadcast_shapes(*(np.shape(a) for a in args)) if args else ()
        if self.is_vector_safe(comp):
            result = self.run(comp, args, vector=True)
        else:
            result = self._call_per_element(comp, args, batch)
        return _broadcast_leaves(result, tuple(batch))

    def is_vector_safe(self, comp: Computation) -> bool:
        """Whether ``comp`` holds only scalar elementwise-style instructions."""
        cached = self._vector_safe.get(id(comp))
        if cached is not None and cached[0] is comp:
            return cached[1]
        self._vector_safe[id(comp)] = (comp, False)  # guards against recursion
        safe = self._check_vector_safe(comp)
        self._vector_safe[id(comp)] = (comp, safe)
        return safe

    def _check_vector_safe(self, comp: Computation) -> bool:
        ew = _elementwise_opcodes()
        reachable = _reachable(comp)
        for inst in comp.instructions:
            if id(inst) not in reachable:
                continue
            if not _all_scalar(inst.shape):
                return False
            op = inst.opcode
            if op in ("call", "fusion"):
                callees = inst.called_computations()
                if len(callees) != 1 or not self.is_vector_safe(callees[0]):
                    return False
            elif op in ("reshape", "bitcast", "broadcast", "copy"):
                operand = inst.operands[0].shape if inst.operands else None
                if not isinstance(operand, ArrayShape) or not operand.same_type_and_dims(
                    inst.shape
                ):
                    return False
            elif op not in _VECTOR_SAFE_STRUCTURAL and op not in ew and not is_elementwise(op):
                return False
        return True

    def check_allocation(self, inst: Instruction, shape: Shape | None = None) -> None:
        """Refuse to build a value of ``shape`` (default: the instruction's) over the limit."""
        size = shape_bytes(shape if shape is not None else inst.shape)
        if size > self.options.max_bytes:
            raise self._too_big(inst, shape if shape is not None else inst.shape, size)

    def _too_big(self, inst: Instruction, shape: Shape, size: int) -> HloError:
        limit = self.options.max_bytes
        if os.environ.get(MAX_BYTES_ENV, "").strip():
            how = f"raise it with {MAX_BYTES_ENV}"
        else:
            how = f"raise it with --memory-budget or {memory_budget.ENV}"
        return instruction_error(
            inst,
            f"result {shape} needs {memory_budget.format_size(size)}, over the"
            f" evaluator's limit of {memory_budget.format_size(limit)} ({how})",
        )

    # -- the walk ---------------------------------------------------------------
    def _plan(self, comp: Computation, vector: bool) -> _Plan:
        key = (id(comp), vector)
        cached = self._plans.get(key)
        if cached is not None and cached[0] is comp:
            return cached[1]
        plan = _build_plan(comp, vector)
        self._plans[key] = (comp, plan)
        return plan

    def run(self, comp: Computation, args: Sequence[Literal], vector: bool) -> Literal:
        """Evaluate ``comp``; ``vector`` selects array mode (see the module docstring)."""
        plan = self._plan(comp, vector)
        if len(args) != plan.num_params:
            raise HloEvaluationError(
                f"computation '{comp.name}' takes {plan.num_params} argument(s),"
                f" called with {len(args)}",
                comp.location,
            )
        values: list[Any] = [None] * plan.num_slots
        for slot, number in plan.params:
            if not 0 <= number < len(args):
                raise HloEvaluationError(
                    f"computation '{comp.name}' has parameter number {number}"
                    f" but {len(args)} argument(s)",
                    comp.location,
                )
            values[slot] = args[number]
        max_bytes = self.options.max_bytes
        hook = self.hook
        for step in plan.steps:
            inst = step.inst
            if step.result_bytes > max_bytes:
                raise self._too_big(inst, inst.shape, step.result_bytes)
            operands = [values[s] for s in step.operand_slots]
            try:
                with np.errstate(all="ignore"):
                    value = step.handler(self, inst, operands)
            except HloError as error:
                if not getattr(error, "names_instruction", False):
                    # Raised by a helper that does not know the instruction: name it.
                    raise instruction_error(inst, error.message, type(error)) from error
                if error.location != inst.location:
                    error.add_note(f"  while evaluating {describe(inst)}")
                raise
            except Exception as error:
                raise instruction_error(
                    inst, f"evaluation failed: {type(error).__name__}: {error}"
                ) from error
            value = _normalize(value)
            if hook is not None:
                value = hook(inst, operands, value)
            if not vector:
                why = value_mismatch(inst.shape, value)
                if why is not None:
                    raise instruction_error(
                        inst, f"produced a value that does not match its shape {inst.shape}: {why}"
                    )
            values[step.slot] = value
            for slot in step.free_after:
                values[slot] = None
        return values[plan.root_slot]

    def _call_per_element(
        self, comp: Computation, args: Sequence[Literal], batch: tuple[int, ...]
    ) -> Literal:
        """The slow path of ``call_vectorized``: one scalar evaluation per element."""
        root_shape = comp.root_instruction.shape
        leaves = list(root_shape.leaves())
        if any(leaf.is_token or not leaf.is_scalar for leaf in leaves):
            raise HloEvaluationError(
                f"computation '{comp.name}' must return scalars to be applied elementwise,"
                f" it returns {root_shape}",
                comp.location,
            )
        outs = [np.empty(batch, dtype=leaf.numpy_dtype) for leaf in leaves]
        wide = [np.broadcast_to(np.asarray(a), batch) for a in args]
        for index in np.ndindex(*batch):
            result = self.run(comp, [np.asarray(w[index]) for w in wide], vector=False)
            for out, leaf in zip(outs, flatten_literal(result)):
                out[index] = leaf
        return _unflatten(root_shape, outs)


def _unflatten(shape: Shape, leaves: list[Any]) -> Any:
    iterator = iter(leaves)

    def build(s: Shape) -> Any:
        if isinstance(s, TupleShape):
            return tuple(build(e) for e in s.elements)
        return next(iterator)

    return build(shape)


def _broadcast_leaves(value: Any, batch: tuple[int, ...]) -> Any:
    if isinstance(value, tuple):
        return tuple(_broadcast_leaves(v, batch) for v in value)
    value = np.asarray(value)
    if value.shape != batch:
        value = np.broadcast_to(value, batch)
    return value


# -- public API -------------------------------------------------------------------------


def evaluate_computation(
    computation: Computation,
    args: Sequence[Literal],
    *,
    options: EvaluatorOptions | None = None,
    hook: StepHook | None = None,
) -> Literal:
    """Evaluate ``computation`` on ``args`` (one value per parameter, in order).

    Arguments must match the parameters exactly (dtype and dimensions; tuples
    as Python tuples, tokens as ``TOKEN``): ``HloInputError`` names the first
    that does not. Returns the root's value: an array or a nested tuple.
    ``hook``: sees (and may replace) every instruction's value (:data:`StepHook`).
    """
    checked = check_arguments(computation, args)
    evaluator = Evaluator(options, hook)
    inputs = {id(leaf) for leaf in flatten_literal(tuple(checked))}
    return _materialize(evaluator.call(computation, checked), inputs)


def evaluate_module(
    module: Module,
    args: Sequence[Literal],
    *,
    options: EvaluatorOptions | None = None,
    hook: StepHook | None = None,
) -> Literal:
    """Evaluate ``module``'s entry computation on ``args`` (see ``evaluate_computation``),
    for the devices its header declares (``EvaluatorOptions.devices``, unless given)."""
    options = options if options is not None else EvaluatorOptions()
    if options.devices is None:
        options = attrs.evolve(options, devices=devices_declared(module))
    return evaluate_computation(module.entry, args, options=options, hook=hook)
