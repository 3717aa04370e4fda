"""A producer fused into a fusion by growing the fusion's body in place, as XLA fuses.

Priority fusion grows a kernel one producer at a time, and :func:`build_fusion`
makes each step's body anew: the user's whole body cloned to take one more
producer (in jax-cosmo's Fisher matrix, 700,000 instructions cloned for 10,000
fusions, a quarter of the pass). XLA's ``HloFusionInstruction::FuseInstruction``
clones the producer into the consumer's fused computation instead.
:func:`grow_fusion` does that and gives exactly the candidate
``build_fusion([producer, user], [user])`` would: the same parameters in the same
order, the same instructions in the same order under the same names. An op of the
user's equal to one of the producer's is merged into it as the build's interning
merges them, a name the producer's clones took is renamed in the user as the build
renames it, and what then reads nothing is swept as the build sweeps. Names and
order matter beyond looks: the fusion's operand order is its kernel's argument
order, and the kernel compiled must not depend on how the pass got there
(tests/test_fusion_growth.py compares the two on random modules and the corpus).
Growing declines a tuple-shaped producer, a user that reads it twice and a body
whose parameters are not one per distinct operand (the caller builds those).

Where the producer's body is the larger, the pass made it and the user is its only
reader, :func:`grow_producer` grows the producer's body instead: the build's layout
starts with the producer's, so only the user's ops are cloned (a chain of
elementwise ops grows one kernel as the producer of each next op).

The user's body is only grown where the pass made it (built bodies are interned and
hold no dead code, which growing keeps); a grown candidate that is discarded gives
the body back as it was (:meth:`Growth.undo`), and one installed takes the user's
place with the body (:func:`~heron.compiler.fusion.builder.install_fusion`).
"""

from __future__ import annotations

from collections.abc import Callable

import attrs

from heron.compiler.fusion.builder import (
    Candidate,
    Interned,
    hero_opcode,
    inline_body,
    intern_key,
    needed_by,
    new_parameter,
    parameter_name,
)
from heron.hlo.attributes import ComputationRef
from heron.hlo.builder import NameUniquer
from heron.hlo.ir import Computation, Instruction
from heron.hlo.shapes import TupleShape

__all__ = ["Growth", "grow_fusion", "grow_producer"]


@attrs.define(eq=False)
class Growth:
    """What growing a body in place changed: enough to undo it, and the names the module
    counts for it (:meth:`~heron.compiler.fusion.graph.FusionGraph.regrow_computation`)."""

    #: The body's instruction list before.
    instructions: list[Instruction]
    #: The body's root before.
    root: Instruction
    #: The user's ops that read another op now, with their operand lists before.
    operands: list[tuple[Instruction, list[Instruction]]]
    #: The user's ops renamed, with their names before.
    names: list[tuple[Instruction, str]]
    #: The user's parameters, with their names and numbers before.
    parameters: list[tuple[Instruction, str, int | None]]
    #: Instructions added (new parameters and the producer's clones kept).
    added: list[Instruction]
    #: The names the body's instructions held before and hold no more (its parameters',
    #: the renamed ops' and the merged or swept ops'), and those they hold now and did
    #: not (its parameters', the renamed ops' and the clones').
    released: list[str]
    taken: list[str]
    #: The body's name once installed (``fused_<hero opcode>``, made unique then).
    name: str
    #: Nothing merged or swept: the body is the two bodies side by side.
    side_by_side: bool
    #: The member whose body grew (the user, or the producer that dies with the install).
    grew: Instruction
    #: Installed: the body is the fusion's, nothing to undo.
    installed: bool = False
    #: Told when the body is given back (a memo of what the grown body held).
    on_undo: Callable[[Computation], None] | None = None

    def undo(self, body: Computation) -> None:
        for inst, operands in self.operands:
            inst.operands = operands
        for inst, name in self.names:
            inst.name = name
        for param, name, number in self.parameters:
            param.name = name
            param.parameter_number = number
        for inst in self.added:
            inst.parent = None
        body.instructions = self.instructions
        body.root = self.root
        if self.on_undo is not None:
            self.on_undo(body)


def grow_fusion(producer: Instruction, user: Instruction) -> Candidate | None:
    """``producer`` fused into ``user``, a fusion whose body this pass made, by growing
    that body in place: the candidate ``build_fusion([producer, user], [user])`` makes,
    or None where growing would not make that one (the caller builds it then)."""
    body = user.called("calls")
    old_params = body.parameters
    at = [k for k, operand in enumerate(user.operands) if operand is producer]
    if (
        len(at) != 1
        or isinstance(producer.shape, TupleShape)
        or len(old_params) != len(user.operands)
        or len(set(user.operands)) != len(user.operands)
        or body.root is None
        or body.root is old_params[at[0]]
    ):
        return None
    producer_param = old_params[at[0]]
    by_value = dict(zip(user.operands, old_params))

    # The plan, in the order build_fusion makes the body: the producer's operands'
    # parameters, its clones, then the user's other parameters and its ops.
    names = NameUniquer()
    operands: list[Instruction] = []
    params: list[Instruction] = []
    planned_names: list[str] = []
    added: list[Instruction] = []
    placed: dict[Instruction, Instruction] = {}

    def param_for(outer: Instruction) -> Instruction:
        param = placed.get(outer)
        if param is not None:
            return param
        param = by_value.get(outer)
        if param is None:
            param = new_parameter(names, outer.shape, len(operands))
            name = param.name
            added.append(param)
        else:
            name = parameter_name(names, len(operands))
        params.append(param)
        planned_names.append(name)
        operands.append(outer)
        placed[outer] = param
        return param

    producer_params = [param_for(operand) for operand in producer.operands]
    leading = len(params)
    section = Computation("grown")
    interned = Interned(section, names)
    if producer.opcode == "fusion":
        producer_root = inline_body(producer, producer_params, section, names, interned)
        producer_ops = sum(
            1 for i in producer.called("calls").instructions if i.opcode != "parameter"
        )
    else:
        producer_root = interned.clone(producer, producer_params)
        producer_ops = 1
    for operand in user.operands:
        if operand is not producer:
            param_for(operand)

    # The user's ops, as the build would intern and name them after the producer's: an
    # op over a merged one (or the producer's parameter) reads what replaced it and
    # may be equal to an op made before; one over the user's parameters alone may be
    # equal to one of the producer's.
    user_params = set(old_params)
    replaced: dict[Instruction, Instruction] = {producer_param: producer_root}
    kept: list[Instruction] = []
    rewired: list[tuple[Instruction, list[Instruction]]] = []
    renamed: list[tuple[Instruction, str]] = []
    for inst in body.instructions:
        if inst.opcode == "parameter":
            continue
        inst_operands = inst.operands
        if not replaced.keys().isdisjoint(inst_operands):
            new_operands = [replaced.get(op, op) for op in inst_operands]
            known = _made_before(interned, inst, new_operands, remember=True)
            if known is not None:
                replaced[inst] = known
                continue
            rewired.append((inst, new_operands))
        elif user_params.issuperset(inst_operands):
            known = _made_before(interned, inst, inst_operands, remember=False)
            if known is not None:
                replaced[inst] = known
                continue
        name = names.take(inst.name)
        if name != inst.name:
            renamed.append((inst, name))
        kept.append(inst)
    root = replaced.get(body.root, body.root)
    merged = len(replaced) > 1
    clones = section.instructions
    if not merged:  # every op of the user's is kept and reads what it read, or the root
        clones = needed_by(clones, producer_root)

    # Apply it (the ops read what they read in the grown body before it is swept).
    before = [(inst, inst.operands) for inst, _ in rewired]
    for inst, new_operands in rewired:
        inst.operands = new_operands
    instructions = [*params[:leading], *clones, *params[leading:], *kept]
    if merged or not rewired:
        instructions = needed_by(instructions, root, keep_parameters=True)
    in_body = set(instructions)
    dropped = [inst for inst in replaced if inst is not producer_param]
    dropped += [inst for inst in kept if inst not in in_body]
    renamed = [(inst, name) for inst, name in renamed if inst in in_body]
    growth = Growth(
        instructions=body.instructions,
        root=body.root,
        operands=before,
        names=[(inst, inst.name) for inst, _ in renamed],
        parameters=[(p, p.name, p.parameter_number) for p in old_params],
        added=[inst for inst in added + section.instructions if inst in in_body],
        released=[p.name for p in old_params]
        + [inst.name for inst, _ in renamed]
        + [inst.name for inst in dropped],
        taken=planned_names
        + [inst.name for inst in section.instructions if inst in in_body]
        + [name for _, name in renamed],
        name=f"fused_{hero_opcode(root)}",
        side_by_side=not dropped and len(clones) == producer_ops,
        grew=user,
    )
    for number, (param, name) in enumerate(zip(params, planned_names)):
        param.name = name
        param.parameter_number = number
    for inst in growth.added:
        inst.parent = body
    for inst, name in renamed:
        inst.name = name
    body.root = root
    body.instructions = instructions
    for inst in section.instructions:
        if inst not in in_body:
            inst.parent = None
    return _grown_candidate(body, operands, producer, user, growth)


def grow_producer(producer: Instruction, user: Instruction) -> Candidate | None:
    """``producer``, a fusion whose body this pass made, fused into ``user``, its only
    user (plain, or a fusion this pass made), by growing the *producer's* body in
    place: the candidate ``build_fusion([producer, user], [user])`` makes, or None
    where growing would not make that one (the caller grows the user's or builds).

    A chain of elementwise ops grows one kernel from its first op to its last, and
    each step fuses that kernel as the producer into the next op: growing the user
    cloned the whole kernel into it every step (quadratic in the chain). The build
    lays out the producer's parameters (one per operand, in order), then its ops, then
    the user's new parameters and its ops, so the producer's body is already the
    build's first part: only the user's ops are cloned, after it. The producer dies
    with the install (the user was its only reader), so nothing else sees its body
    grow."""
    body = producer.called("calls")
    params = body.parameters
    count = len(producer.operands)
    if (
        isinstance(producer.shape, TupleShape)
        or body.root is None
        or body.root.opcode == "parameter"
        or len(params) != count
        or len(set(producer.operands)) != count
        or any(param.parameter_number != n for n, param in enumerate(params))
    ):
        return None
    user_body = user.called("calls") if user.opcode == "fusion" else None
    if user_body is not None and not _reads_producer(user, user_body, producer):
        return None  # the build would sweep the producer's ops: not its body grown
    ops = [inst for inst in body.instructions if inst.opcode != "parameter"]
    op_names = {inst.name for inst in ops}
    leading = NameUniquer()  # the build names the producer's parameters first
    planned = [parameter_name(leading, n) for n in range(count)]
    if len(op_names) != len(ops) or not op_names.isdisjoint(planned):
        return None  # the build would rename one of the producer's ops

    # The build's names after the producer's part: its parameters', then its ops'.
    names = NameUniquer(taken=frozenset(op_names.union(planned)))
    value: dict[Instruction, Instruction] = dict(zip(producer.operands, params))
    value[producer] = body.root
    operands = list(producer.operands)
    new_params: list[Instruction] = []
    for outer in user.operands:
        if outer not in value:
            param = new_parameter(names, outer.shape, len(operands))
            new_params.append(param)
            operands.append(outer)
            value[outer] = param

    # The user's ops after the producer's, interned as the build interns them: one over
    # the producer's values alone may be equal to one of the producer's ops (none reads
    # the producer's root: nothing in a body the pass made reads its root).
    section = Computation("grown")
    interned = Interned(section, names)
    producer_ops: dict[tuple[object, ...], Instruction] | None = None
    merged = False
    producer_root = body.root

    def place(inst: Instruction, inst_operands: list[Instruction]) -> Instruction:
        nonlocal producer_ops, merged
        if all(
            operand.parent is body and operand is not producer_root for operand in inst_operands
        ):
            key = intern_key(inst, tuple(map(id, inst_operands)))
            if key is not None:
                if producer_ops is None:
                    producer_ops = _interned_ops(ops)
                known = producer_ops.get(key)
                if known is not None:
                    merged = True
                    return known
        return interned.clone(inst, inst_operands)

    if user_body is None:
        root = place(user, [value[operand] for operand in user.operands])
    else:
        inner: dict[Instruction, Instruction] = {}
        for inst in user_body.post_order():
            if inst.opcode == "parameter":
                inner[inst] = value[user.operands[inst.parameter_number]]
            else:
                inner[inst] = place(inst, [inner[operand] for operand in inst.operands])
        root = inner[user_body.root_instruction]
    clones = section.instructions

    growth = Growth(
        instructions=body.instructions,
        root=body.root,
        operands=[],
        names=[],
        parameters=[(param, param.name, param.parameter_number) for param in params],
        added=[*new_params, *clones],
        released=[param.name for param in params],
        taken=[*planned, *(param.name for param in new_params), *(c.name for c in clones)],
        name=f"fused_{hero_opcode(root)}",
        side_by_side=not merged,
        grew=producer,
    )
    for param, name in zip(params, planned):
        param.name = name
    for inst in growth.added:
        inst.parent = body
    body.instructions = [*params, *ops, *new_params, *clones]
    body.root = root
    return _grown_candidate(body, operands, producer, user, growth)


def _grown_candidate(
    body: Computation,
    operands: list[Instruction],
    producer: Instruction,
    user: Instruction,
    growth: Growth,
) -> Candidate:
    """The candidate of ``producer`` fused into ``user`` as ``body`` (grown), named and
    placed as :func:`build_fusion` names and places it."""
    root = body.root
    assert root is not None
    fusion = Instruction(
        name=f"loop_{hero_opcode(root)}_fusion",
        opcode="fusion",
        shape=root.shape,
        operands=operands,
        attributes={"kind": "kLoop", "calls": ComputationRef(body.name, body)},
        location=user.location,
    )
    return Candidate(fusion, body, (producer, user), (user,), growth)


def _reads_producer(user: Instruction, user_body: Computation, producer: Instruction) -> bool:
    """Whether an op of ``user``'s body (one this pass made: interned, no dead code, a
    parameter per operand) reads the parameter for ``producer``, once an operand."""
    at = [k for k, operand in enumerate(user.operands) if operand is producer]
    params = user_body.parameters
    if len(at) != 1 or len(params) != len(user.operands):
        return False
    param = params[at[0]]
    return any(param in inst.operands for inst in user_body.instructions)


def _interned_ops(ops: list[Instruction]) -> dict[tuple[object, ...], Instruction]:
    """The first of ``ops`` of each :func:`intern_key`, as the build's interning keeps."""
    found: dict[tuple[object, ...], Instruction] = {}
    for inst in ops:
        key = intern_key(inst, tuple(map(id, inst.operands)))
        if key is not None:
            found.setdefault(key, inst)
    return found


def _made_before(
    interned: Interned, inst: Instruction, operands: list[Instruction], remember: bool
) -> Instruction | None:
    """The op equal to ``inst`` over ``operands`` made before (the build would keep that
    one), if any; else, with ``remember``, ``inst`` stands for its kind from now on."""
    key = intern_key(inst, tuple(map(id, operands)))
    if key is None:
        return None
    known = interned.get(key)
    if known is None and remember:
        interned.remember(key, inst)
    return known
