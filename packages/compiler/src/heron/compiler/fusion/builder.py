"""Building fusion instructions out of instructions of a computation, and putting them in.

Every fusion pass makes the same edit: a set of *members* (plain instructions
or fusions already made, in the entry computation) becomes one ``fusion``
instruction whose fused computation holds clones of them (a member fusion's
body is inlined), whose operands are the values the members read from outside
the set, and whose outputs are the members whose values are still needed
outside. :func:`build_fusion` makes that instruction without touching the
computation, so a pass can analyse and price a candidate first;
:func:`install_fusion` then puts it in: users of each output read the fusion
(through ``get-tuple-element`` for a multi-output fusion), and members nobody
uses any more leave the computation. A member that other instructions still use
stays: that is how a producer is duplicated into several consumers.

Names follow XLA's: the computation ``fused_<root opcode>``, the instruction
``loop_<root opcode>_fusion`` or ``input_<hero opcode>_fusion``, made unique in
the module.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import attrs

from heron.compiler.fusion.graph import FusionGraph
from heron.hlo.attributes import ComputationRef, InstructionRefs
from heron.hlo.builder import NameUniquer
from heron.hlo.errors import UnsupportedError
from heron.hlo.ir import Computation, Instruction, Module
from heron.hlo.passes.rewrite import CONTROL, rename_control_predecessors
from heron.hlo.shapes import ArrayShape, Shape, TupleShape

if TYPE_CHECKING:
    from heron.compiler.fusion.growth import Growth

__all__ = [
    "Candidate",
    "Interned",
    "OwnBodies",
    "build_fusion",
    "fusion_operands",
    "fusion_kind_of",
    "hero_opcode",
    "inline_body",
    "install_fusion",
    "intern_key",
    "is_small_constant",
    "needed_by",
    "new_parameter",
    "op_kind",
    "outputs_of",
    "parameter_name",
    "parameter_values",
]


def is_small_constant(inst: Instruction) -> bool:
    """A constant of one element (XLA's ``IsSmallConstant``): folded into the code of
    each kernel that reads it, which priority fusion does last."""
    return (
        inst.opcode == "constant"
        and isinstance(inst.shape, ArrayShape)
        and inst.shape.num_elements == 1
    )


@attrs.define(eq=False)
class Candidate:
    """A fusion made but not yet installed: the instruction, its body and what it replaces.

    ``outputs`` are the outer values the fusion's outputs stand for, in output
    order (an array-shaped member, or a ``get-tuple-element`` of a multi-output
    member fusion); ``members`` the outer instructions it was made of.
    """

    fusion: Instruction
    body: Computation
    members: tuple[Instruction, ...]
    outputs: tuple[Instruction, ...]
    #: How the body was grown from a member's own in place (:mod:`.growth`), until the
    #: candidate is installed or discarded; None for a body built anew.
    growth: Growth | None = None

    def discard(self) -> None:
        """Let go of a candidate that will not be installed: its body's instructions
        point back at the body (``parent``), a cycle only Python's cyclic collector
        would free, and the fusion passes price and drop a candidate per pair of
        instructions; the collector's passes over a growing heap made them
        superlinear in the module. A body grown in place is given back to its member
        as it was."""
        if self.growth is not None:
            if not self.growth.installed:
                self.growth.undo(self.body)
                self.growth = None
            return
        for inst in self.body.instructions:
            inst.parent = None
        self.body.instructions = []


@attrs.define
class OwnBodies:
    """Each instruction's own fused body while it lives: a fusion's computation, or the
    one-member fusion of anything else (its clone over a parameter per distinct
    operand), built once. The fusion passes sign it and read its demand many times
    (:mod:`heron.compiler.fusion.pair_key`, :mod:`heron.compiler.fusion.pair_price`);
    a rewrite replaces instructions rather than changing them, and an operand
    replaced has the shape of the one it replaces."""

    _built: dict[Instruction, Candidate] = attrs.field(factory=dict)

    def of(self, inst: Instruction) -> Computation:
        if inst.opcode == "fusion":
            return inst.called("calls")
        return self.candidate(inst).body

    def candidate(self, inst: Instruction) -> Candidate:
        """The one-member fusion of ``inst`` (not a fusion), owned here: not to be discarded."""
        made = self._built.get(inst)
        if made is None:
            made = self._built[inst] = build_fusion([inst], [inst])
        return made

    def forget(self, inst: Instruction) -> None:
        """Let go of ``inst``'s body (it left the computation)."""
        made = self._built.pop(inst, None)
        if made is not None:
            made.discard()


def parameter_values(inst: Instruction) -> list[Instruction]:
    """The outer value each parameter of ``inst``'s own body stands for, by number: a
    fusion's operands, or the distinct operands of anything else in order (its
    one-member fusion, :func:`build_fusion`)."""
    if inst.opcode == "fusion":
        return list(inst.operands)
    return list(dict.fromkeys(inst.operands))


def is_multi_output(inst: Instruction) -> bool:
    """A fusion whose root is a ``tuple``: several outputs, each its own value.

    A fusion whose root is one tuple-shaped value (a variadic reduce: jax's
    argmax, value and index) is not: that tuple is one output, kept whole.
    """
    return inst.opcode == "fusion" and inst.called("calls").root_instruction.opcode == "tuple"


def outputs_of(inst: Instruction, graph: FusionGraph) -> list[Instruction] | None:
    """The values ``inst`` produces: itself, or for a multi-output fusion its users (gtes),
    read from the pass's ``graph`` (scanning the computation made a pass over a model of
    thousands of kernels quadratic).

    An array, or one tuple-shaped value (a variadic reduce, fused or not), is
    one output: merged with another kernel it stays a root whole, its users
    reading it through nested ``get-tuple-element`` as in XLA (splitting it
    into the gtes of its leaves would make the merged roots gtes of a reduce,
    which is then no reduction hero: the loop emitter would compute it, one
    thread per output element).

    None when a multi-output fusion's value is used other than through
    ``get-tuple-element`` (then its outputs cannot be told apart), or not at all.
    """
    if not isinstance(inst.shape, TupleShape) or not is_multi_output(inst):
        return [inst]
    if graph.computation.root is inst:
        return None
    users = graph.users(inst)
    if not users or any(u.opcode != "get-tuple-element" for u in users):
        return None
    return users


def fusion_kind_of(analysis_kind: str) -> str:
    """XLA's ``kind=`` for an emitter kind: ``kInput`` for reduction, transpose, scatter
    and input-slices heroes (the hero reads its input in its own order), else ``kLoop``."""
    if analysis_kind.startswith("reduce") or analysis_kind in (
        "transpose",
        "scatter",
        "input_slices",
    ):
        return "kInput"
    return "kLoop"


def fusion_operands(members: Sequence[Instruction]) -> list[Instruction]:
    """The operands :func:`build_fusion` gives the fusion of ``members``: what they read
    from outside, each once, in the order first read."""
    member_ids = {id(m) for m in members}
    operands: dict[int, Instruction] = {}
    for member in members:
        for operand in member.operands:
            if id(operand) not in member_ids:
                operands.setdefault(id(operand), operand)
    return list(operands.values())


def build_fusion(
    members: Sequence[Instruction],
    outputs: Sequence[Instruction],
    *,
    root_name_hint: str | None = None,
) -> Candidate:
    """A fusion instruction computing ``outputs`` from ``members`` (not installed).

    ``members`` must be in an order where each comes after the members it reads
    (post-order of the computation); ``outputs`` are members, or
    ``get-tuple-element`` users of a multi-output member fusion. Reading a
    multi-output member fusion inside the set goes through its
    ``get-tuple-element`` users, which must then be members too.
    """
    member_ids = {id(m) for m in members}
    body = Computation("fused_computation")
    body_names = NameUniquer()
    params: dict[int, Instruction] = {}
    operands: list[Instruction] = []
    mapped: dict[int, Instruction] = {}

    def value_of(outer: Instruction) -> Instruction:
        if id(outer) in mapped:
            return mapped[id(outer)]
        if id(outer) in member_ids:
            raise UnsupportedError(f"fusion member '{outer.name}' used before it is built")
        if id(outer) not in params:
            param = new_parameter(body_names, outer.shape, len(operands))
            body.add(param)
            params[id(outer)] = param
            operands.append(outer)
        return params[id(outer)]

    interned = Interned(body, body_names)
    for member in members:
        inner_operands = [value_of(op) for op in member.operands]
        if member.opcode == "fusion":
            mapped[id(member)] = inline_body(member, inner_operands, body, body_names, interned)
        elif (
            member.opcode == "get-tuple-element"
            and inner_operands[0].opcode == "tuple"
            and inner_operands[0].parent is body
        ):
            mapped[id(member)] = inner_operands[0].operands[member.attr("index")]
        else:
            mapped[id(member)] = interned.clone(member, inner_operands)
    roots = [mapped[id(output)] for output in outputs]
    if len(roots) == 1:
        body.root = roots[0]
    else:
        body.root = body.add(
            Instruction(
                name=body_names.take("tuple"),
                opcode="tuple",
                shape=TupleShape(tuple(r.shape for r in roots)),
                operands=list(roots),
            )
        )
    _drop_unused(body)
    hint = root_name_hint or hero_opcode(body.root)
    body.name = f"fused_{hint}"  # made unique in the module when installed
    fusion = Instruction(
        name=f"loop_{hint}_fusion",
        opcode="fusion",
        shape=body.root.shape,
        operands=operands,
        attributes={"kind": "kLoop", "calls": ComputationRef(body.name, body)},
        location=outputs[-1].location,
    )
    return Candidate(fusion, body, tuple(members), tuple(outputs))


def parameter_name(names: NameUniquer, number: int) -> str:
    """The name a fused body's parameter ``number`` takes in ``names`` (the body's):
    ``param_<number>``, made unique there. Growing a body in place (:mod:`.growth`)
    names its parameters by the same rule, so a grown body is the built one."""
    return names.take(f"param_{number}")


def new_parameter(names: NameUniquer, shape: Shape, number: int) -> Instruction:
    """A fused body's parameter ``number`` of ``shape``, named by :func:`parameter_name`."""
    return Instruction(
        name=parameter_name(names, number),
        opcode="parameter",
        shape=shape,
        parameter_number=number,
    )


def hero_opcode(root: Instruction) -> str:
    if root.opcode == "tuple":
        root = root.operands[0]
    return root.opcode.replace("-", "_")


#: Ops a body may compute twice from the same operands and keep once: every op a fusion
#: holds but those with an identity of their own (a parameter, a constant's value).
_NOT_INTERNED = frozenset({"parameter", "constant", "rng", "rng-bit-generator", "custom-call"})


class Interned:
    """The instructions of a body being built, each computation once.

    A producer fused into several users is cloned into each; when those users
    are fused together, the clones meet in one body (exact GELU's broadcasts of
    one constant: 56 in its kernel instead of XLA's 30, and a body of 200
    instructions instead of 126 that every later step of priority fusion
    clones, signs and prices). An op of the same opcode, shape and attributes
    (its source metadata aside) over the same operands is the one already made.
    """

    def __init__(self, body: Computation, names: NameUniquer) -> None:
        self.body = body
        self.names = names
        self._made: dict[tuple[object, ...], Instruction] = {}

    def get(self, key: tuple[object, ...]) -> Instruction | None:
        """The op of ``key`` (:func:`intern_key`) made so far, if any."""
        return self._made.get(key)

    def remember(self, key: tuple[object, ...], inst: Instruction) -> None:
        """Take ``inst``, already in the body, as the op of ``key``."""
        self._made[key] = inst

    def clone(self, inst: Instruction, operands: list[Instruction]) -> Instruction:
        key = intern_key(inst, tuple(map(id, operands)))
        if key is not None:
            known = self._made.get(key)
            if known is not None:
                return known
        made = self.body.add(inst.clone(operands, self.names.take(inst.name)))
        if key is not None:
            self._made[key] = made
        return made


def intern_key(inst: Instruction, operands: tuple[int, ...]) -> tuple[object, ...] | None:
    """What makes ``inst`` over ``operands`` (numbers standing for them) the same op as
    another (:class:`Interned`), or None where it is always made again."""
    kind = op_kind(inst)
    return None if kind is None else (kind, operands)


def op_kind(inst: Instruction) -> tuple[object, ...] | None:
    """What makes ``inst`` the same op as another over the same operands, for
    :class:`Interned`: its opcode, shape and attributes (source metadata aside); None
    where it is always made again (an op of :data:`_NOT_INTERNED`, an attribute value
    without a hash)."""
    if inst.opcode in _NOT_INTERNED:
        return None
    attributes = inst.attributes
    kind = (
        inst.opcode,
        inst.shape,
        tuple(kv for kv in attributes.items() if kv[0] != "metadata")
        if "metadata" in attributes
        else tuple(attributes.items()),
    )
    try:
        hash(kind)
    except TypeError:
        return None
    return kind


def inline_body(
    fusion: Instruction,
    operands: list[Instruction],
    body: Computation,
    names: NameUniquer,
    interned: Interned,
) -> Instruction:
    """Clone ``fusion``'s body into ``body`` reading ``operands``; the clone of its root."""
    inner = fusion.called("calls")
    mapped: dict[int, Instruction] = {}
    for inst in inner.post_order():
        if inst.opcode == "parameter":
            mapped[id(inst)] = operands[inst.parameter_number]
            continue
        new_operands = [mapped[id(op)] for op in inst.operands]
        mapped[id(inst)] = interned.clone(inst, new_operands)
    return mapped[id(inner.root_instruction)]


def _drop_unused(body: Computation) -> None:
    """Remove instructions the root does not need (a member's unused tuple, say).

    Parameters stay, with their numbers: the fusion's operand list matches them.
    """
    body.instructions = needed_by(body.instructions, body.root_instruction, True)


def needed_by(
    instructions: list[Instruction], root: Instruction, keep_parameters: bool = False
) -> list[Instruction]:
    """Those of ``instructions`` ``root`` needs (and the parameters, if asked), in their
    order: what a built body keeps (:func:`build_fusion` sweeps the others)."""
    needed: set[Instruction] = set()  # by identity (eq=False)
    stack = [root]
    while stack:
        inst = stack.pop()
        if inst not in needed:
            needed.add(inst)
            stack.extend(inst.operands)
    return [
        inst
        for inst in instructions
        if inst in needed or (keep_parameters and inst.opcode == "parameter")
    ]


def install_fusion(
    module: Module,
    computation: Computation,
    candidate: Candidate,
    kind: str,
    graph: FusionGraph | None = None,
) -> Instruction:
    """Put ``candidate`` into ``computation`` with XLA's ``kind``; return the fusion.

    Users of each output now read the fusion; members left without users are
    removed (with the computations only they called, when those were fusion
    bodies). The fusion takes the place of its last member in instruction order.
    A pass installing many fusions hands its :class:`FusionGraph` (kept current
    here, so an install costs what it touches) and calls its ``finish`` at the
    end; without one, the graph is made for this install and finished at once.
    """
    own_graph = graph is None
    if graph is None:
        graph = FusionGraph(module, computation)
    fusion = candidate.fusion
    fusion.attributes["kind"] = kind
    if kind == "kInput" and fusion.name.startswith("loop_"):
        fusion.name = "input_" + fusion.name.removeprefix("loop_")
    growth = candidate.growth
    if growth is None:
        graph.add_computation(candidate.body)
    else:  # the member's body, grown in place: it moves and is named as a new one
        graph.regrow_computation(candidate.body, growth.name, growth.released, growth.taken)
        growth.installed = True  # nothing to undo any more
    last = max(candidate.members, key=graph.rank)
    graph.insert_after(last, fusion)
    graph.add(fusion, after=last)
    renamed: list[tuple[Instruction, Instruction | None]] = []
    if len(candidate.outputs) == 1:
        graph.replace(candidate.outputs[0], fusion)
    else:
        assert isinstance(fusion.shape, TupleShape)
        for index, output in enumerate(candidate.outputs):
            gte = Instruction(
                name="__renaming__",  # named below
                opcode="get-tuple-element",
                shape=fusion.shape.elements[index],
                operands=[fusion],
                attributes={"index": index},
            )
            graph.append(gte)
            graph.add(gte, after=fusion)
            value, cast = gte, None
            flat = isinstance(output.shape, ArrayShape) and gte.shape.dims != output.shape.dims
            if flat:  # a horizontal fusion's flat output
                cast = Instruction(
                    name="__renaming__",  # named below
                    opcode="bitcast",
                    shape=output.shape,
                    operands=[gte],
                )
                graph.append(cast)
                graph.add(cast, after=fusion)
                value = cast
            graph.replace(output, value)
            renamed.append((gte, cast))
    ordered_after = _control_predecessors(candidate.members)
    _remove_dead_members(graph, candidate.members, candidate.body)
    # Named once the members are gone, so a fusion replacing one can take its name.
    graph.rename(fusion, graph.module_names.first_free(fusion.name, itself=1))
    graph.rename_computation(
        candidate.body, graph.module_names.first_free(candidate.body.name, itself=1)
    )
    fusion.attributes["calls"] = ComputationRef(candidate.body.name, candidate.body)
    for gte, cast in renamed:
        index = gte.attr("index")
        graph.rename(gte, graph.names.first_free(f"get-tuple-element.{fusion.name}.{index}"))
        if cast is not None:
            graph.rename(cast, graph.names.first_free(f"bitcast.{fusion.name}.{index}"))
    if ordered_after:  # XLA's optimized modules order work by control edges: keep them
        fusion.attributes[CONTROL] = InstructionRefs(ordered_after)
    if graph.has_control_edges:
        removed = {m.name: fusion.name for m in candidate.members if not graph.alive(m)}
        if removed:
            rename_control_predecessors(graph.instructions(), removed)
    if own_graph:
        graph.finish()
    return fusion


def _control_predecessors(members: Sequence[Instruction]) -> tuple[str, ...]:
    """The instructions outside ``members`` that one of them must come after."""
    inside = {m.name for m in members}
    names: dict[str, None] = {}
    for member in members:
        refs = member.attributes.get(CONTROL)
        if isinstance(refs, InstructionRefs):
            names.update((n, None) for n in refs.names if n not in inside)
    return tuple(names)


def _remove_dead_members(
    graph: FusionGraph, members: Sequence[Instruction], body: Computation
) -> None:
    """Drop members nothing uses any more (users first, so chains go in one sweep), and
    the bodies they called but ``body``, the fusion's (grown from a member's)."""
    pending = list(members)
    changed = True
    while changed:
        changed = False
        for member in list(pending):
            if graph.used(member) or graph.computation.root is member:
                continue
            if member.opcode == "fusion" and member.called("calls") is not body:
                graph.remove_computation(member.called("calls"))
            graph.remove(member)
            pending.remove(member)
            changed = True
