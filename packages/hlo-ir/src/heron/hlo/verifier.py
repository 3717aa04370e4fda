"""The HLO verifier: is this module internally consistent?

Parsing only proves the text is well-formed; the verifier proves the graph
means something: one ENTRY, every computation with one root of its own,
parameters numbered 0..n-1, no cycles, every called computation present and
with the right signature, valid layouts, and every declared result shape equal
to what its operands give (``heron.hlo.shape_inference``); once layouts are
assigned, shapes that name one buffer agree on its layout
(``heron.hlo.forwarded_layouts``). Passes rely on these
invariants, so the verifier runs after parsing and after each pass in tests.

Every error is an ``HloVerifyError`` whose message starts with
``verify: computation 'c', instruction 'i' (opcode): ...`` and which carries
the offending instruction's source location when it came from text.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence

from heron.hlo.attributes import ComputationRef
from heron.hlo.errors import HloVerifyError, SourceLocation
from heron.hlo.forwarded_layouts import layout_disagreement
from heron.hlo.input_output_alias import check_input_output_alias
from heron.hlo.ir import Computation, Instruction, Module
from heron.hlo.opcodes import OPCODES, VARIADIC, closest_opcode
from heron.hlo.shape_inference import ShapeInferenceError, describe_instruction, infer_shape
from heron.hlo.shapes import MAX_ELEMENTS, ArrayShape, Shape, TupleShape

__all__ = ["verify_computation", "verify_module"]

#: Ops whose result comes from a called computation rather than from operands.
_CALLING_OPS = frozenset({"call", "fusion", "while", "conditional"})


def verify_module(module: Module, computations: Sequence[Computation] | None = None) -> None:
    """Raise ``HloVerifyError`` at the first inconsistency in ``module``.

    ``computations``: check the instructions of these only (computations of the
    module), trusting the others as verified before and unchanged since: the pass
    manager's scope after a pass that changes the entry computation alone
    (``HloPass.entry_only``). What the module must be as a whole (one entry, names
    of computations unique, no recursion, its input-output aliases) is checked
    either way.
    """
    entries = [c for c in module.computations if c.is_entry]
    if len(entries) != 1:
        location = entries[1].location if len(entries) > 1 else None
        raise HloVerifyError(
            f"verify: module '{module.name}' has {len(entries)} ENTRY computations;"
            " exactly one is needed",
            location,
        )
    seen: dict[str, Computation] = {}
    for comp in module.computations:
        if comp.name in seen:
            raise HloVerifyError(
                f"verify: module '{module.name}' has two computations named '{comp.name}'",
                comp.location,
            )
        seen[comp.name] = comp
    if module.fusion_under_test is not None and module.fusion_under_test not in seen:
        raise HloVerifyError(
            f"verify: module '{module.name}' names fusion under test"
            f" '{module.fusion_under_test}', which is not one of its computations"
        )

    checked = module.computations if computations is None else computations
    orders = {id(comp): _verify_structure(comp) for comp in checked}
    members = {id(comp) for comp in module.computations}
    for comp in checked:
        for inst in comp.instructions:
            _verify_references(inst, members)
    _verify_no_recursion(module, computations)
    for comp in checked:
        for inst in orders[id(comp)]:
            _verify_instruction(inst)
    check_input_output_alias(module)
    if module.layouts_assigned:
        for comp in checked:
            for inst in orders[id(comp)]:
                disagreement = layout_disagreement(inst)
                if disagreement is not None:
                    raise _fail(inst, disagreement)


def verify_computation(comp: Computation) -> None:
    """Verify one computation on its own (its callees are trusted, not verified)."""
    for inst in _verify_structure(comp):
        _verify_instruction(inst)


# -- structure ------------------------------------------------------------------


def _fail(inst: Instruction, detail: str) -> HloVerifyError:
    return HloVerifyError(f"verify: {describe_instruction(inst)}: {detail}", _location(inst))


def _location(inst: Instruction) -> SourceLocation | None:
    if inst.location is not None:
        return inst.location
    return inst.parent.location if inst.parent is not None else None


def _verify_structure(comp: Computation) -> list[Instruction]:
    """Root, membership, names and parameter numbering; returns a def-before-use order."""
    where = f"verify: computation '{comp.name}'"
    if comp.root is None:
        raise HloVerifyError(f"{where} has no ROOT instruction", comp.location)
    members = {id(inst) for inst in comp.instructions}
    if id(comp.root) not in members:
        raise HloVerifyError(
            f"{where}: its root '{comp.root.name}' is not one of its instructions",
            comp.root.location or comp.location,
        )
    names: set[str] = set()
    parameters: dict[int, Instruction] = {}
    for inst in comp.instructions:
        if inst.parent is not comp:
            other = inst.parent.name if inst.parent is not None else "no computation"
            raise _fail(inst, f"belongs to {other}, not to '{comp.name}'")
        if inst.name in names:
            raise _fail(inst, f"the name '{inst.name}' is used twice in the computation")
        names.add(inst.name)
        for i, op in enumerate(inst.operands):
            if id(op) not in members:
                raise _fail(
                    inst, f"operand {i} ('{op.name}') is not an instruction of '{comp.name}'"
                )
        if inst.opcode == "parameter":
            number = inst.parameter_number
            if not isinstance(number, int) or isinstance(number, bool) or number < 0:
                raise _fail(inst, f"parameter number {number!r} is not an integer >= 0")
            if number in parameters:
                raise _fail(
                    inst,
                    f"parameter number {number} is also used by '{parameters[number].name}'",
                )
            parameters[number] = inst
        elif inst.parameter_number is not None:
            raise _fail(inst, "only a parameter may have a parameter number")
    if sorted(parameters) != list(range(len(parameters))):
        missing = min(set(range(len(parameters))) - set(parameters))
        raise HloVerifyError(
            f"{where}: parameters are numbered {sorted(parameters)};"
            f" they must be 0..{len(parameters) - 1} (parameter({missing}) is missing)",
            comp.location,
        )
    # Raises HloVerifyError (with the location of an instruction on the cycle).
    return comp.post_order()


def _verify_references(inst: Instruction, members: set[int]) -> None:
    for attr, value in inst.attributes.items():
        refs = value if isinstance(value, tuple) else (value,)
        for ref in refs:
            if not isinstance(ref, ComputationRef):
                continue
            if ref.computation is None:
                raise _fail(inst, f"{attr}={ref.name} names no computation of the module")
            if id(ref.computation) not in members:
                raise _fail(
                    inst, f"{attr}={ref.name} names a computation that is not in the module"
                )


def _verify_no_recursion(module: Module, scope: Sequence[Computation] | None = None) -> None:
    """The call graph must be acyclic (XLA has no recursion).

    ``scope``: walk from these only. The others were verified before and are unchanged,
    so a cycle, if there is one now, passes through one of these and is found from it.
    """
    state: dict[int, int] = {}  # 1 = on the current path, 2 = done

    def visit(comp: Computation, path: list[str]) -> None:
        state[id(comp)] = 1
        for inst in comp.instructions:
            for callee in inst.called_computations():
                s = state.get(id(callee))
                if s == 1:
                    cycle = " -> ".join([*path[path.index(callee.name) :], callee.name])
                    raise _fail(inst, f"computations call each other in a cycle: {cycle}")
                if s is None:
                    visit(callee, [*path, callee.name])
        state[id(comp)] = 2

    for comp in module.computations if scope is None else scope:
        if id(comp) not in state:
            visit(comp, [comp.name])


# -- instructions -----------------------------------------------------------------


@functools.lru_cache(maxsize=4096)
def _shape_problem(shape: Shape) -> str | None:
    """What is wrong with ``shape`` on its own, or None; memoised (shapes are frozen
    values, and a module verified after each pass asks about the same few again)."""
    if isinstance(shape, TupleShape):
        for element in shape.elements:
            problem = _shape_problem(element)
            if problem is not None:
                return problem
        return None
    assert isinstance(shape, ArrayShape)
    if shape.is_token and shape.dims:
        return f"a token has no dimensions, got {shape}"
    if any(d < 0 for d in shape.dims):
        return f"shape {shape} has a negative dimension"
    if shape.dynamic and len(shape.dynamic) != shape.rank:
        return f"shape {shape} marks {len(shape.dynamic)} dynamic flags for rank {shape.rank}"
    if shape.num_elements > MAX_ELEMENTS:
        return f"shape {shape} has {shape.num_elements} elements, more than the limit 2**48"
    if shape.layout is not None:
        order = shape.layout.minor_to_major
        if sorted(order) != list(range(shape.rank)):
            return (
                f"layout {{{','.join(map(str, order))}}} of {shape.without_layout()} is not a"
                f" permutation of 0..{shape.rank - 1}"
            )
    return None


def _verify_instruction(inst: Instruction) -> None:
    info = OPCODES.get(inst.opcode)
    if info is None:
        hint = closest_opcode(inst.opcode)
        raise _fail(inst, "unknown opcode" + (f" (did you mean '{hint}'?)" if hint else ""))
    if info.arity != VARIADIC and len(inst.operands) != info.arity:
        plural = "" if info.arity == 1 else "s"
        raise _fail(inst, f"expects {info.arity} operand{plural}, has {len(inst.operands)}")
    problem = _shape_problem(inst.shape)
    if problem is not None:
        raise _fail(inst, problem)
    try:
        inferred = infer_shape(inst)
    except ShapeInferenceError as error:
        raise HloVerifyError(f"verify: {error.message}", error.location) from None
    if inferred is None or inst.opcode == "bitcast":
        # bitcast: the declared shape is the truth; inference checked the byte size.
        return
    if not inferred.same_type_and_dims(inst.shape):
        source = "the called computation gives" if inst.opcode in _CALLING_OPS else "operands give"
        raise _fail(
            inst,
            f"declared shape {inst.shape.without_layout()} but {source}"
            f" {inferred.without_layout()}",
        )
