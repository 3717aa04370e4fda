"""Multi-output fusion: one kernel for siblings, and for a producer with its consumer.

XLA's ``MultiOutputFusion``, after priority fusion:

- *sibling*: two kernels reading the same operand, neither depending on the
  other, become one kernel with both outputs, so the operand is read once and
  one launch is saved (not through a scalar operand, as in XLA, unless both
  kernels' outputs are scalars too);
- *producer-consumer*: a producer that priority fusion could not fuse away
  (it has a user that cannot take it, or is an output of the module) is fused
  into one consumer and stays an output of the new fusion, so its kernel
  disappears while its other users read the fusion's output; never a producer
  that updates an operand in place (a dynamic-update-slice, a scatter), as
  in XLA.

A merge is made only when no path leads from one kernel to the other through
the rest of the graph (it would make a cycle: checked with
:class:`~heron.compiler.fusion.reachability.Reachability`), the emitters accept
the result, loop kernels' outputs have one shape (one thread per element of
all of them), and the cost model says it saves time.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Callable, Iterator

from heron.compiler.fusion.builder import Candidate, install_fusion, outputs_of
from heron.compiler.fusion.context import FusionContext
from heron.compiler.fusion.fusible import Verdict, is_fusible_consumer, is_fusible_producer
from heron.compiler.fusion.graph import FusionGraph
from heron.compiler.fusion.pair_key import MembersKey
from heron.compiler.fusion.reachability import Reachability
from heron.emitters.fusion_analysis import union_is_loop
from heron.emitters.heroes import reshape_is_bitcast
from heron.emitters.reductions import (
    is_real_reduction_hero,
    is_reduction_from_or_to_contiguous_dimensions,
)
from heron.emitters.transposes import tiled_transpose
from heron.hlo.buffers.dataflow import in_place_operands
from heron.hlo.errors import HloError
from heron.hlo.ir import Computation, Instruction, Module
from heron.hlo.passes.manager import HloPass
from heron.hlo.passes.outline import HOST_OPCODES
from heron.hlo.shapes import ArrayShape
from heron.target import Target

__all__ = ["fuse_multi_output", "multi_output_fusion"]


def _kernel(inst: Instruction) -> bool:
    return inst.opcode not in HOST_OPCODES and is_fusible_consumer(inst)


def _members(inst: Instruction, outputs: list[Instruction]) -> list[Instruction]:
    return [inst] + [o for o in outputs if o is not inst]


def _one_shape(outputs: list[Instruction]) -> bool:
    """Whether ``outputs``, a tuple-shaped one's leaves included, have one shape."""
    return len({leaf.dims for o in outputs for leaf in o.shape.leaves()}) <= 1


def _shapes_agree(verdict: Verdict, outputs: list[Instruction]) -> bool:
    """A loop kernel's outputs have one shape (one thread per element of all of them)."""
    if verdict.emitter_kind != "loop":
        return True  # the analysis checked the heroes' compatibility
    return _one_shape(outputs)


def _loop_outputs_differ(
    search: _Search, kernels: tuple[Instruction, Instruction], outputs: list[Instruction]
) -> bool:
    """Whether two sibling fusions would make a loop kernel with outputs of other shapes
    (what :func:`_shapes_agree` refuses), told from their own analyses before the merge
    is built (:func:`~heron.emitters.fusion_analysis.union_is_loop`): a GPT-2 training
    step built 512 such merges, 150,000 instructions cloned, to refuse each."""
    if _one_shape(outputs) or not all(k.opcode == "fusion" for k in kernels):
        return False
    try:
        analyses = [search.context.checker.analysis(kernel) for kernel in kernels]
    except HloError:
        return False  # the merge's own check decides
    return union_is_loop(analyses)


def _heroes_compatible(search: _Search, a: Instruction, b: Instruction) -> bool:
    """XLA's ``ShapesCompatibleForMultiOutputFusion`` where a reduction or a tiled
    transpose is a hero: never a transpose with a reduction, transposes only of one
    tiling, and the loops the two kernels run over (a reduce's or a transpose's input,
    else the output) equal or a bitcast of each other. Decided from each kernel's own
    analysis before the merge is built; two reductions, and two kernels with neither
    hero, are left to the merge's analysis and :func:`_shapes_agree`.

    The merge's own analysis alone took a reduction with transposes of its input as
    side outputs (their element counts agree): a GPT-2 step's attention-gradient
    reduce with both transposed copies of its operand, where XLA makes three kernels,
    one of heron's slowest to compile (0.9 s).
    """
    target = search.context.target
    heroes = [_real_hero(search, kernel) for kernel in (a, b)]
    if heroes[0] is None or heroes[1] is None:
        return True  # an analysis refused: the merge's own check decides
    reduces = [is_reduction_from_or_to_contiguous_dimensions(h, target) for h in heroes]
    transposes = [tiled_transpose(h) for h in heroes]
    if (reduces[0] and transposes[1] is not None) or (reduces[1] and transposes[0] is not None):
        return False  # "MOF-fusion of a transpose and a reduction"
    if not any(reduces) and all(t is None for t in transposes):
        return True
    if transposes[0] is not None and transposes[1] is not None:
        if not transposes[0].equivalent(transposes[1]):
            return False
    loops = [
        h.operands[0].shape if reduces[k] or transposes[k] is not None else h.shape
        for k, h in enumerate(heroes)
    ]
    return _same_loop(loops[0], loops[1])


def _real_hero(search: _Search, kernel: Instruction) -> Instruction | None:
    """XLA's ``GetRealHeroForMultiOutputFusion``: an unfused instruction itself; in a
    fusion the first root whose hero is a real reduction or a tiled transpose, else its
    first root. None when the fusion's analysis refuses it."""
    if kernel.opcode != "fusion":
        return kernel
    try:
        analysis = search.context.checker.analysis(kernel)
    except HloError:
        return None
    target = search.context.target
    for root, hero in zip(analysis.roots, analysis.heroes, strict=True):
        if is_real_reduction_hero(root, hero, target) or tiled_transpose(hero) is not None:
            return hero
    return analysis.roots[0]


def _same_loop(first: object, second: object) -> bool:
    """``EqualIgnoringElementType`` or ``IsReshapeOrTransposeBitcast`` of two loop shapes:
    the same dimensions and layout, or the same elements in the same physical order (a
    reshape between row-major shapes, or a transpose that moves nothing)."""
    if not isinstance(first, ArrayShape) or not isinstance(second, ArrayShape):
        return first == second
    if first.dims == second.dims and first.major_to_minor == second.major_to_minor:
        return True
    if reshape_is_bitcast(first, second):
        return True
    return len(first.dims) == len(second.dims) and _physical(first) == _physical(second)


def _physical(shape: ArrayShape) -> tuple[int, ...]:
    """The dimensions' sizes major to minor in memory."""
    return tuple(shape.dims[d] for d in shape.major_to_minor)


class _Search:
    """What one pass run knows: the graph, the reachability of its current version,
    and the merges already found impossible.

    A merge that was refused stays refused while its instructions stay (the
    emitters' and the cost model's answers depend on them only, and merging
    elsewhere only adds paths, so a pair that was dependent stays so): after a
    merge only the instructions around it are examined again, producer-consumer
    first, as if the search restarted. Producers are taken uses before defs, as
    XLA's ``DoMultiOutputFusion`` walks them (from the back of the post-order): a
    value read by another consumer of its producer goes into their common consumer
    first (an optimizer's second moment into the update), and then the producer
    joins them both; defs before uses, the producer went into the first consumer,
    a multi-output kernel that no consumer takes (equinox's AdaBelief step: two
    kernels a parameter, 42 against XLA's 32; now 36). Shared operands are taken
    in instruction order.
    """

    def __init__(self, context: FusionContext, computation: Computation) -> None:
        self.context = context
        self.computation = computation
        self.graph = FusionGraph(context.module, computation)
        self._order: Reachability | None = None
        self._sequence = itertools.count()
        self.producers: list[tuple[tuple[int, int], int, Instruction]] = []
        self.operands: list[tuple[tuple[int, int], int, Instruction]] = []
        #: Instructions examined with nothing to merge (by id, with the instruction).
        self.settled_producers: dict[int, Instruction] = {}
        #: Shared operands examined, with the users their pairs were tried for.
        self.settled_operands: dict[int, tuple[Instruction, set[int]]] = {}
        self._refused: set[tuple[int, int]] = set()
        self._keep: list[Instruction] = []  # refused ids stay unique while kept
        #: Merges refused by what they would build (:meth:`FusionContext.members_key`):
        #: None when no emitter takes that body or a loop kernel's outputs differ in
        #: shape, else its price, refused where the kernels apart cost no more. A
        #: model repeating a layer offers the same merges in every layer (5,300 of the
        #: 6,300 a GPT-2 training step built were refused, most of them seen before).
        self.refused_bodies: dict[MembersKey, float | None] = {}
        for inst in computation.post_order():
            self.touch(inst)

    @property
    def order(self) -> Reachability:
        if self._order is None:
            self._order = Reachability(self.computation)
        return self._order

    def touch(self, inst: Instruction) -> None:
        """Examine ``inst`` again (as a producer and as a shared operand)."""
        self.settled_producers.pop(id(inst), None)
        rank = self.graph.rank(inst)
        uses_first = (-rank[0], -rank[1])
        heapq.heappush(self.producers, (uses_first, next(self._sequence), inst))
        heapq.heappush(self.operands, (rank, next(self._sequence), inst))

    def _stand_ins(
        self, fusion: Instruction, outputs: tuple[Instruction, ...], order: Reachability
    ) -> tuple[list[tuple[Instruction, list[Instruction]]], list[Instruction]]:
        """Each value read now in place of an output, with its readers, and what the
        install made (the fusion, its ``get-tuple-element``s and the bitcasts after
        them), in order."""
        if len(outputs) == 1:
            return [(fusion, self.graph.users(fusion))], [fusion]
        stand_ins: list[tuple[Instruction, list[Instruction]]] = []
        new = [fusion]
        for gte in self.graph.users(fusion):
            value = gte
            new.append(gte)
            for user in self.graph.users(gte):
                if user.opcode == "bitcast" and not order.knows(user):
                    value = user  # a horizontal output's shape restored
                    new.append(user)
            stand_ins.append((value, self.graph.users(value)))
        return stand_ins, new

    def refuse(self, a: Instruction, b: Instruction) -> None:
        self._refused.add((id(a), id(b)))
        self._keep.extend((a, b))

    def is_refused(self, a: Instruction, b: Instruction) -> bool:
        return (id(a), id(b)) in self._refused

    def install(self, made: tuple[Candidate, Verdict]) -> None:
        candidate = made[0]
        fusion = install_fusion(
            self.context.module, self.computation, candidate, made[1].fusion_kind, self.graph
        )
        self.graph.sync()  # the reachability's post-order reads the instruction list
        if self._order is not None:
            stand_ins, new = self._stand_ins(fusion, candidate.outputs, self._order)
            self._order.fused(candidate.members, stand_ins, new, self.graph.alive)
        self.touch(fusion)
        for operand in fusion.operands:
            self.touch(operand)
        for user in self.graph.users(fusion):
            self.touch(user)


def _try(
    search: _Search,
    members: list[Instruction],
    outputs: list[Instruction],
    apart: float,
) -> bool:
    members = sorted(members, key=search.order.position)
    key = search.context.members_key(members, outputs)
    if key in search.refused_bodies:
        seconds = search.refused_bodies[key]
        if seconds is None or seconds >= apart:
            return False
    made = search.context.candidate(members, outputs)
    if made is None or not _shapes_agree(made[1], outputs):
        search.refused_bodies[key] = None
        if made is not None:
            made[0].discard()
        return False
    seconds = search.context.price(*made).seconds
    if seconds >= apart or not search.context.emits(made[0]):
        search.refused_bodies[key] = seconds if seconds >= apart else None
        made[0].discard()
        return False
    search.install(made)
    return True


def _kernel_users(search: _Search, operand: Instruction) -> list[Instruction]:
    return [user for user in search.graph.users(operand) if _kernel(user)]


def _pairable_users(search: _Search, operand: Instruction) -> list[Instruction]:
    """The kernels reading ``operand`` that may merge as its siblings.

    XLA's ``IsProfitableOperand``: an effective scalar (one element) read by two kernels
    is no reason to merge them, since reading it twice costs nothing. A model's optimizer
    reads its step count and learning rate in every parameter's update: merging siblings
    through them made one kernel of every layer's update of one shape (a GPT-2 step's
    AdamW, 36 outputs and 487 instructions a kernel, 0.4-0.8 s each to compile), where
    XLA makes one small kernel per parameter, all of them one compiled kernel. Kernels
    whose outputs are scalars themselves (a line search's arithmetic) still merge through
    one: each costs its launch alone and compiles in little, and XLA's count of such
    programs' launches is lower than heron's would be without it (an L-BFGS step 74
    kernels against XLA's 63; 57 with them).
    """
    users = _kernel_users(search, operand)
    if isinstance(operand.shape, ArrayShape) and operand.shape.num_elements == 1:
        return [user for user in users if _scalar_outputs(user)]
    return users


def _scalar_outputs(inst: Instruction) -> bool:
    return all(leaf.num_elements == 1 for leaf in inst.shape.leaves())


def _unique_slice(parent: Instruction, user: Instruction) -> Instruction | None:
    """XLA's ``FindUniqueSlice``: the one ``slice`` through which ``user`` reads ``parent``
    (``user`` itself, or in a fusion the slice that is the only reader of the only
    parameter bound to ``parent``); None when there is none or more than one."""
    if user.opcode == "slice":
        return user
    if user.opcode != "fusion":
        return None
    positions = [k for k, operand in enumerate(user.operands) if operand is parent]
    if len(positions) != 1:
        return None
    body = user.called("calls")
    (parameter,) = [p for p in body.parameters if p.parameter_number == positions[0]]
    readers = [inst for inst in body.instructions if parameter in inst.operands]
    if len(readers) != 1 or readers[0].operands.count(parameter) != 1:
        return None
    return readers[0] if readers[0].opcode == "slice" else None


def _disjoint_slices(parent: Instruction, a: Instruction, b: Instruction) -> bool:
    """XLA's ``ParameterSlicesAreNonOverlapping``, negated: two siblings that read
    disjoint slices of a shared operand of 1 KiB or more share no read, so merging them
    saves no memory traffic (a fused projection's q, k and v, read by their own kernels)."""
    shape = parent.shape
    if not isinstance(shape, ArrayShape):
        return False
    if shape.num_elements * shape.element_type.byte_width < 1024:
        return False
    first, second = _unique_slice(parent, a), _unique_slice(parent, b)
    if first is None or second is None:
        return False
    return any(
        not (x.start < y.limit and y.start < x.limit)
        for x, y in zip(first.attr("slice"), second.attr("slice"), strict=True)
    )


def _siblings(search: _Search, operand: Instruction) -> bool:
    """Merge two kernels reading ``operand``: the first pair that works, in instruction
    order (pairs among users examined before were refused and are not tried again)."""
    users = _pairable_users(search, operand)
    settled = search.settled_operands.get(id(operand))
    old = settled[1] if settled is not None and settled[0] is operand else set()
    fresh = {k for k, user in enumerate(users) if id(user) not in old}
    context = search.context
    for i, j in _pairs_with(len(users), fresh):
        a, b = users[i], users[j]
        if search.is_refused(a, b):
            continue
        if not search.order.independent(a, b) or _disjoint_slices(operand, a, b):
            search.refuse(a, b)
            continue
        outs_a, outs_b = outputs_of(a, search.graph), outputs_of(b, search.graph)
        if outs_a is None or outs_b is None:
            continue
        if not _heroes_compatible(search, a, b) or _loop_outputs_differ(
            search, (a, b), outs_a + outs_b
        ):
            search.refuse(a, b)
            continue
        apart = context.cost(a).seconds + context.cost(b).seconds
        members = _members(a, outs_a) + _members(b, outs_b)
        if _try(search, members, outs_a + outs_b, apart):
            return True
        search.refuse(a, b)
    search.settled_operands[id(operand)] = (operand, {id(user) for user in users})
    return False


def _pairs_with(count: int, fresh: set[int]) -> Iterator[tuple[int, int]]:
    """The pairs ``i < j`` of ``range(count)`` with at least one in ``fresh``, in order,
    made as they are asked for: an operand read by hundreds of kernels (a model's
    inputs, a learning rate) has tens of thousands, and the first merge ends the search."""
    for i in range(count):
        if i in fresh:
            yield from ((i, j) for j in range(i + 1, count))
        else:
            yield from ((i, j) for j in range(i + 1, count) if j in fresh)


def _into_consumer(search: _Search, producer: Instruction) -> bool:
    """Fuse ``producer`` (an output, or read by several users) into one consumer."""
    computation = search.computation
    if producer.opcode in HOST_OPCODES or not is_fusible_producer(producer):
        return False
    if in_place_operands(producer):
        # XLA's ban (IsProducerMultiOutputFusible): an update in place fused with a
        # consumer that reads it would have other threads read the bytes it writes, so
        # the update could no longer be in place and the kernel would copy the array
        return False
    users = search.graph.users(producer)
    if len(users) < 2 and computation.root is not producer:
        return False  # priority fusion's business
    context = search.context
    for consumer in users:
        if not _kernel(consumer) or search.is_refused(producer, consumer):
            continue
        order = search.order
        if any(op is not producer and order.reaches(producer, op) for op in consumer.operands):
            search.refuse(producer, consumer)
            continue  # another path from the producer into the consumer: a cycle
        outs = outputs_of(consumer, search.graph)
        if outs is None:
            continue
        if not _heroes_compatible(search, consumer, producer):
            search.refuse(producer, consumer)
            continue
        apart = context.cost(producer).seconds + context.cost(consumer).seconds
        members = [producer, *_members(consumer, outs)]
        if _try(search, members, [producer, *outs], apart):
            return True
        search.refuse(producer, consumer)
    return False


def _next(
    search: _Search,
    heap: list[tuple[tuple[int, int], int, Instruction]],
    settled: Callable[[Instruction], bool],
) -> Instruction | None:
    while heap:
        _, _, inst = heapq.heappop(heap)
        if search.graph.alive(inst) and not settled(inst):
            return inst
    return None


def fuse_multi_output(module: Module, target: Target) -> bool:
    """Producer-consumer, then sibling multi-output fusion of the entry, to a fixed point."""
    search = _Search(FusionContext(module, target), module.entry)

    def producer_settled(inst: Instruction) -> bool:
        return search.settled_producers.get(id(inst)) is inst

    def operand_settled(inst: Instruction) -> bool:
        known = search.settled_operands.get(id(inst))
        if known is None or known[0] is not inst:
            return False
        return {id(user) for user in _pairable_users(search, inst)} <= known[1]

    changed = False
    while True:
        merged = False
        while (producer := _next(search, search.producers, producer_settled)) is not None:
            if _into_consumer(search, producer):
                merged = True
                break
            search.settled_producers[id(producer)] = producer
        if not merged:
            while (operand := _next(search, search.operands, operand_settled)) is not None:
                if _siblings(search, operand):
                    merged = True
                    break
        if not merged:
            break
        changed = True
    search.graph.finish()
    return changed


def multi_output_fusion(target: Target) -> HloPass:
    """The ``multi-output-fusion`` pass for ``target``."""
    return HloPass(
        "multi-output-fusion",
        lambda module: fuse_multi_output(module, target),
        "merge sibling kernels and producers with a consumer into multi-output fusions",
        entry_only=True,
    )
