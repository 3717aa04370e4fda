"""The price of a producer fused into one user, composed from the two bodies' own reads.

Priority fusion prices a producer into each of its users around every fusion
it performs, and the fusion it just made is one side of most of those pairs:
running the cost model over each built pair (demand from the roots down to the
parameters, :func:`heron.compiler.fusion.cost_model.estimate_computation`)
walked the same large body again for every operand it has. XLA's
``GpuPerformanceModel`` estimates a producer-consumer fusion from analyses it
keeps per instruction; heron keeps each instruction's own
:class:`~heron.compiler.fusion.cost_model.BodyReads` (its fusion body, or its
one-member fusion) while it lives, and composes:

- the user's part of the fused body is the user's body, demanded as it was
  (demand flows from the roots, which are the user's);
- the producer's part is the producer's body with its root demanded as the
  user's parameter for it was (each element once when the user reads it
  elementwise: the producer's own reads, else walked once with that seed);
- an operand both read is one parameter of the fused body: the larger demand,
  coalesced only if both are, the distinct elements both need added (at most its
  size);
- without a dot, the lane operations add up (a dot's operand producers count
  at their demand, so a pair with a dot is priced from its built body).

The byte counts are whole numbers, so the sums do not depend on the parameters'
order and the price is the built body's to the last bit
(:func:`~heron.compiler.fusion.cost_model.kernel_cost` prices both).
"""

from __future__ import annotations

import attrs

from heron.compiler.fusion.builder import (
    Candidate,
    OwnBodies,
    is_small_constant,
    parameter_values,
)
from heron.compiler.fusion.cost_model import (
    BodyReads,
    KernelCost,
    LaneCosts,
    ReadPatterns,
    body_reads,
    kernel_cost,
    lane_costs,
    largest_value,
    read_traffic,
    traffic_cost,
)
from heron.compiler.fusion.fusible import Verdict
from heron.hlo.ir import Instruction
from heron.hlo.shapes import ArrayShape, TupleShape
from heron.target import Target

__all__ = ["PairPrices"]


@attrs.frozen
class _UserTraffic:
    """A user's reads as a pair's price needs them: per outer value its demand (merged
    where two parameters read one value) and the DRAM and cache bytes that demand takes
    (nothing for a small constant), and those bytes summed over every value."""

    #: The outer values the user's parameters stand for when it was made: a fusion
    #: installed elsewhere replaces the user's operands in place (its body, and so its
    #: reads, stay).
    values: tuple[Instruction, ...]
    by_value: dict[Instruction, tuple[tuple[int, bool, int], float, float]]
    dram: float
    cached: float

    @classmethod
    def of(cls, values: tuple[Instruction, ...], reads: BodyReads, tiled: bool) -> _UserTraffic:
        demand: dict[Instruction, tuple[int, bool, int]] = {}
        for k, value in enumerate(values):
            demand[value] = _both(value, demand.get(value), reads.reads[k])
        by_value = {}
        dram = cached = 0.0
        for value, read in demand.items():
            from_dram = from_cache = 0.0
            if not is_small_constant(value):
                from_dram, from_cache = read_traffic(value.shape, *read, tiled)
            by_value[value] = (read, from_dram, from_cache)
            dram += from_dram
            cached += from_cache
        return cls(values, by_value, dram, cached)


@attrs.define
class PairPrices:
    """Composed pair prices for one pass run (see the module's doc)."""

    target: Target
    patterns: ReadPatterns
    bodies: OwnBodies
    #: Each instruction's own reads, by instruction then (reduces_once, root's seed),
    #: while it lives (a constant every reduce reads is read with one seed by all).
    _own: dict[Instruction, dict[tuple[bool, tuple[int, bool, int] | None], BodyReads]] = (
        attrs.field(init=False, factory=dict)
    )
    #: Each user's reads summed (:class:`_UserTraffic`), by user then (reduces_once,
    #: tiled), while it lives.
    _traffic: dict[Instruction, dict[tuple[bool, bool], _UserTraffic]] = attrs.field(
        init=False, factory=dict
    )
    #: What each op costs on the Target (its measured op profile), made once.
    _costs: LaneCosts = attrs.field(init=False)

    def __attrs_post_init__(self) -> None:
        self._costs = lane_costs(self.target)

    def _reads(
        self, inst: Instruction, reduces_once: bool, seed: tuple[int, bool, int] | None = None
    ) -> BodyReads:
        known = self._own.get(inst)
        if known is None:
            known = self._own[inst] = {}
        reads = known.get((reduces_once, seed))
        if reads is not None:
            return reads
        if known and not next(iter(known.values())).has_reduce:
            # Without a reduce, reducing once changes nothing (:func:`body_reads`): a
            # pair's floor asks with it whenever the other side reduces, and walked a
            # tenth of the Fisher matrix's bodies again for the same answer.
            reads = known.get((not reduces_once, seed))
            if reads is not None:
                known[(reduces_once, seed)] = reads
                return reads
        like = next(iter(known.values()), None)  # the same body's, under another seed
        reads = body_reads(
            self.bodies.of(inst), self._costs, reduces_once, self.patterns, seed, like
        )
        known[(reduces_once, seed)] = reads
        if not reads.has_reduce:
            known[(not reduces_once, seed)] = reads
        return reads

    def _known_reads(
        self, inst: Instruction, reduces_once: bool, seed: tuple[int, bool, int] | None = None
    ) -> BodyReads | None:
        """``inst``'s reads (:meth:`_reads`) where they are known, without walking its body
        (one grown in place: :mod:`.growth`)."""
        known = self._own.get(inst)
        if not known:
            return None
        reads = known.get((reduces_once, seed))
        if reads is None and not next(iter(known.values())).has_reduce:
            reads = known.get((not reduces_once, seed))
        return reads

    def cost(self, inst: Instruction, verdict: Verdict) -> KernelCost:
        """What ``inst`` costs as the kernel ``verdict`` says (its own body)."""
        own = self._reads(inst, verdict.reduces_once)
        values = parameter_values(inst)
        reads = [(v.shape, *own.reads[k]) for k, v in enumerate(values) if not is_small_constant(v)]
        return kernel_cost(
            reads, own.write, own.flops, self.target, tiled=verdict.tiled, threads=verdict.threads
        )

    def pair(self, producer: Instruction, user: Instruction, verdict: Verdict) -> KernelCost | None:
        """The cost of ``producer`` fused into ``user`` as ``verdict`` says, or None when
        it is not composed here (a dot in either body, the user reading the producer
        through more than one parameter or not at all): the caller prices the built body."""
        return self._compose(producer, user, verdict.reduces_once, verdict.tiled, verdict.threads)

    def bound(self, producer: Instruction, user: Instruction) -> KernelCost | None:
        """At most the cost of ``producer`` fused into ``user`` whatever the emitters'
        verdict, told without building the fusion (None where :meth:`pair` would not
        compose it). The cost only falls as the verdict's kernel reads through shared
        memory (every read coalesced), computes each reduce once (less demand) and
        works on more elements in parallel (up to the largest value in the body, which
        bounds the root's and any reduction hero's input): the price with all three
        is a floor, and the floor of a loop fusion without reductions is its price."""
        facts = self._facts(producer), self._facts(user)
        once = facts[0][0] or facts[1][0]  # without a reduce, the same reads
        return self._compose(producer, user, once, True, max(facts[0][1], facts[1][1], 1))

    def _facts(self, inst: Instruction) -> tuple[bool, int]:
        """Whether ``inst``'s own body holds a reduce, and its largest value's elements
        (read from whichever of its reads is known, else from the body)."""
        known = self._own.get(inst)
        if known:
            reads = next(iter(known.values()))
            return reads.has_reduce, reads.largest
        body = self.bodies.of(inst)
        return any(i.opcode == "reduce" for i in body.instructions), largest_value(body)

    def _compose(
        self, producer: Instruction, user: Instruction, once: bool, tiled: bool, threads: int
    ) -> KernelCost | None:
        """The fused kernel's cost, its reads summed from the user's (:class:`_UserTraffic`,
        made once per user) less the producer's parameter, plus the producer's operands':
        a fusion with many operands is priced with each of them after every step of
        priority fusion, and summing all its operands for each pair made those steps
        quadratic in them (a third of the Fisher matrix's pass). The sums are whole
        numbers (:func:`read_traffic`), so the cost is the one summed over the demand
        :meth:`_composed_reads` gives, to the last bit."""
        parts = self._parts(producer, user, once)
        if parts is None:
            return None
        values, _, consumer, own = parts
        traffic = self._user_traffic(user, values, once, tiled, consumer)
        dram, cached = traffic.dram, traffic.cached
        _, left_dram, left_cached = traffic.by_value[producer]
        dram -= left_dram
        cached -= left_cached
        demand: dict[Instruction, tuple[int, bool, int]] = {}
        for k, value in enumerate(parameter_values(producer)):
            demand[value] = _both(value, demand.get(value), own.reads[k])
        by_value = traffic.by_value
        for value, read in demand.items():
            shared = by_value.get(value)
            if shared is not None:
                read = _both(value, read, shared[0])
                dram -= shared[1]
                cached -= shared[2]
            if not is_small_constant(value):
                from_dram, from_cache = read_traffic(value.shape, *read, tiled)
                dram += from_dram
                cached += from_cache
        flops = own.flops + consumer.flops
        return traffic_cost(dram, cached, consumer.write, flops, self.target, threads)

    def _user_traffic(
        self,
        user: Instruction,
        values: tuple[Instruction, ...],
        once: bool,
        tiled: bool,
        consumer: BodyReads,
    ) -> _UserTraffic:
        known = self._traffic.get(user)
        if known is None:
            known = self._traffic[user] = {}
        traffic = known.get((once, tiled))
        if traffic is None or traffic.values != values:
            traffic = known[(once, tiled)] = _UserTraffic.of(values, consumer, tiled)
        return traffic

    def _parts(
        self, producer: Instruction, user: Instruction, once: bool, grown: Instruction | None = None
    ) -> tuple[tuple[Instruction, ...], int, BodyReads, BodyReads] | None:
        """The values the user's parameters stand for, its parameter for the producer, its
        reads and the producer's (seeded with the user's demand on it); None where not
        composed (see :meth:`pair`), or where the reads of ``grown`` (a member whose
        body grew in place) are not known without walking it."""

        def reads(inst: Instruction, seed: tuple[int, bool, int] | None = None) -> BodyReads | None:
            if inst is grown:
                return self._known_reads(inst, once, seed)
            return self._reads(inst, once, seed)

        user_values = tuple(parameter_values(user))
        at = [k for k, v in enumerate(user_values) if v is producer]
        if len(at) != 1 or isinstance(producer.shape, TupleShape):
            return None
        consumer = reads(user)
        if consumer is None or consumer.has_dot or at[0] not in consumer.used:
            return None
        seed = consumer.reads[at[0]]
        own = reads(producer)
        if own is None or own.has_dot:
            return None
        if seed != own_root_seed(producer):
            own = reads(producer, seed)
            if own is None:
                return None
        return user_values, at[0], consumer, own

    def _composed_reads(
        self, producer: Instruction, user: Instruction, once: bool, grown: Instruction | None = None
    ) -> tuple[dict[Instruction, tuple[int, bool, int]], float, BodyReads, BodyReads] | None:
        """The fused body's demand per outer value (the producer's operands, then the
        user's others), its lane operations, and the user's and (seeded) producer's
        reads; None where not composed (see :meth:`pair`) or ``grown``'s reads are
        not known (:meth:`_parts`)."""
        parts = self._parts(producer, user, once, grown)
        if parts is None:
            return None
        user_values, at, consumer, own = parts
        demand: dict[Instruction, tuple[int, bool, int]] = {}
        for k, value in enumerate(parameter_values(producer)):
            demand[value] = _both(value, demand.get(value), own.reads[k])
        for k, value in enumerate(user_values):
            if k != at:
                demand[value] = _both(value, demand.get(value), consumer.reads[k])
        return demand, own.flops + consumer.flops, consumer, own

    def installed(
        self,
        fusion: Instruction,
        producer: Instruction,
        user: Instruction,
        once: bool,
        candidate: Candidate,
    ) -> None:
        """Know ``fusion``'s own reads (``reduces_once`` = ``once``) from ``producer``'s and
        ``user``'s, as :meth:`pair` composed them, instead of walking its body when it is
        next priced: priority fusion grows a fusion one producer at a time, and walking
        the whole body each time made the pass quadratic in it (a quarter of its time on
        the model corpus). Only where the body is the two bodies side by side: no op of
        one merged with an equal op of the other (:func:`build_fusion` interns them) or
        dropped, so the composed demand, lane operations and largest value are the
        walk's; otherwise the body is walked when asked. A body grown from one member's
        (:mod:`.growth`) is that member's no more: its reads are composed only where
        they are known, and the growth tells whether the two are side by side."""
        growth = candidate.growth
        if growth is not None:
            if not growth.side_by_side:
                return
        else:
            members = self.bodies.of(producer), self.bodies.of(user)
            if _ops(fusion.called("calls")) != _ops(members[0]) + _ops(members[1]):
                return
        grown = growth.grew if growth is not None else None
        composed = self._composed_reads(producer, user, once, grown)
        if composed is None:
            return
        demand, flops, consumer, own = composed
        if len(demand) != len(fusion.operands) or any(v not in demand for v in fusion.operands):
            return  # parameters other than the two sides' operands: not side by side
        reads = [demand[value] for value in fusion.operands]
        self._own[fusion] = {
            (once, None): BodyReads(
                tuple(reads),
                frozenset(range(len(reads))),
                flops,
                consumer.write,
                False,
                own.has_reduce or consumer.has_reduce,
                max(own.largest, consumer.largest),
            )
        }

    def forget(self, inst: Instruction) -> None:
        """Drop ``inst``'s own reads (it left the computation)."""
        self._own.pop(inst, None)
        self._traffic.pop(inst, None)


def _ops(body) -> int:
    """The instructions of a body that are not its parameters."""
    return sum(1 for inst in body.instructions if inst.opcode != "parameter")


def own_root_seed(inst: Instruction) -> tuple[int, bool, int]:
    """The demand a body's own root gets: each of its elements once, coalesced."""
    shape = inst.shape
    assert not isinstance(shape, TupleShape)
    return shape.num_elements, True, shape.num_elements


def _both(
    value: Instruction, first: tuple[int, bool, int] | None, second: tuple[int, bool, int]
) -> tuple[int, bool, int]:
    """``value``, one parameter read by two parts: the larger demand, coalesced if both
    are, the distinct elements both need added up to its size (as the walk adds them)."""
    if first is None:
        return second
    size = value.shape.num_elements if isinstance(value.shape, ArrayShape) else 0
    return (
        max(first[0], second[0]),
        first[1] and second[1],
        min(size, first[2] + second[2]),
    )
