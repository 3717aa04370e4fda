"""What a fusion pass run knows: the module, the Target, the checker and the prices so far.

One :class:`FusionContext` per pass run: a kernel's price is computed once
(keyed by the instruction object, which a rewrite replaces rather than
changes) and handed to whichever decision needs it; a pass that removes
instructions says so (:meth:`FusionContext.forget`), as XLA's priority fusion
invalidates its caches around a fusion it performed.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Sequence

import attrs

from heron.compiler.fusion.builder import (
    Candidate,
    OwnBodies,
    build_fusion,
    fusion_operands,
    is_small_constant,
    parameter_values,
)
from heron.compiler.fusion.cost_model import (
    NO_KERNEL,
    KernelCost,
    ReadPatterns,
    estimate_computation,
)
from heron.compiler.fusion.emissions import MAX_EMISSIONS, fused_emissions
from heron.compiler.fusion.fusible import (
    MAX_FUSED_INSTRUCTIONS,
    FusionChecker,
    Verdict,
    decides_nothing,
    fits_budget,
    is_wrappable,
    sums_serially,
    within_budget,
)
from heron.compiler.fusion.fusion_cse import signature
from heron.compiler.fusion.growth import grow_fusion, grow_producer
from heron.compiler.fusion.pair_key import MembersKey, PairKey, PairKeys
from heron.compiler.fusion.pair_price import PairPrices
from heron.compiler.fusion.sizes import FusionSizes
from heron.emitters.reductions import REDUCTION_KINDS
from heron.hlo.fusion_outputs import fusion_roots
from heron.hlo.ir import Computation, Instruction, Module
from heron.hlo.passes.outline import HOST_OPCODES
from heron.target import Target

__all__ = ["FusionContext", "count_kernels"]

#: A memo's "not known yet" (None is an answer: not emittable).
_UNKNOWN: object = object()

#: Emitters whose hero reads its operands and updates none in place: a producer whose body
#: decides nothing, fused into one's input, adds ops above a hero the analysis finds as
#: before, and the emitter is the user's (:meth:`FusionContext._plain_pair`). Built and
#: checked, 6,700 such pairs of both corpora and the library programs had the user's
#: verdict, and they were a third of what the Fisher matrix's priority fusion cloned (a
#: column reduction's body of 300 instructions built for each operand priced into it).
#: Not the in-place heroes: an update's buffer read through a producer is no update.
_READING_HEROES = frozenset({*REDUCTION_KINDS, "transpose", "concatenate"})

#: Pairs built for their price kept for installing (:meth:`FusionContext.built_pair`).
_KEPT_PAIRS = 32

#: How much of itself a floor of a fusion's price leaves out
#: (:meth:`FusionContext.fused_floor`): far above the ulps its arithmetic differs by
#: from the price's, far below any difference the queue's order would notice.
FLOOR_SLACK = 1e-9


@attrs.define
class FusionContext:
    module: Module
    target: Target
    checker: FusionChecker = attrs.field(init=False)
    _costs: dict[Instruction, KernelCost] = attrs.field(init=False, factory=dict)
    #: Each instruction's verdict as a kernel of its own (:meth:`own_verdict`).
    _own_verdicts: dict[Instruction, Verdict | None] = attrs.field(init=False, factory=dict)
    #: Whether each instruction's own body decides nothing (:func:`decides_nothing`).
    _plain_bodies: dict[Instruction, bool] = attrs.field(init=False, factory=dict)
    _prices: dict[tuple[object, ...], KernelCost] = attrs.field(init=False, factory=dict)
    #: A candidate's body signature and form (names aside), made once per candidate
    #: while it lives: the candidates priced and dropped do not stay in memory.
    _signatures: weakref.WeakKeyDictionary[Candidate, tuple[object, object]] = attrs.field(
        init=False, factory=weakref.WeakKeyDictionary
    )
    #: The checker's answers by body signature and which members are library GEMMs:
    #: programs repeat the same layer, and priority fusion re-plans the same fusions
    #: after every rewrite around them.
    _verdicts: dict[object, Verdict | None] = attrs.field(init=False, factory=dict)
    _emitted: dict[object, bool] = attrs.field(init=False, factory=dict)
    #: The price of a producer fused into one user, by producer then user (None: not
    #: emittable), while both live.
    _pairs: dict[Instruction, dict[Instruction, float | None]] = attrs.field(
        init=False, factory=dict
    )
    #: The same prices by what the pair is made of (:mod:`.pair_key`): a module that
    #: repeats a layer fuses the same producer bodies into the same consumer bodies.
    _pair_prices: dict[PairKey, float | None] = attrs.field(init=False, factory=dict)
    #: Each instruction's own body (:class:`OwnBodies`), for the pairs' keys and prices.
    _own_bodies: OwnBodies = attrs.field(init=False, factory=OwnBodies)
    #: Sizes of fusions told before they are built (:meth:`_oversized`).
    _sizes: FusionSizes = attrs.field(init=False, factory=FusionSizes)
    _pair_keys: PairKeys = attrs.field(init=False)
    #: Pair prices composed from each instruction's own reads (:mod:`.pair_price`).
    _composed: PairPrices = attrs.field(init=False)
    #: Floors of pair prices not known yet, by producer then user (None: no floor).
    _floors: dict[Instruction, dict[Instruction, float | None]] = attrs.field(
        init=False, factory=dict
    )
    #: Signatures of called computations (reducers), which no fusion pass changes.
    _called: dict[int, tuple[object, object]] = attrs.field(init=False, factory=dict)
    #: How each op form reads its operands, for the cost model (built once per form).
    _read_patterns: ReadPatterns = attrs.field(init=False, factory=ReadPatterns)
    #: Formatted attribute values for the signatures (a clone shares its values).
    _formatted: dict[tuple[str, int], tuple[object, str]] = attrs.field(init=False, factory=dict)
    #: The last pairs built and checked to be priced (:meth:`pair_seconds`), with the
    #: operands they were built from, kept for the fusion about to be installed
    #: (:meth:`built_pair`): the producer priced last is most often fused next.
    _built: dict[
        tuple[Instruction, Instruction],
        tuple[Candidate, Verdict, tuple[Instruction, ...], tuple[Instruction, ...]],
    ] = attrs.field(init=False, factory=dict)
    #: The bodies of the fusions this run installed, which a later step may grow in place
    #: (:meth:`grown`): built here, so interned and without dead code.
    _made_bodies: weakref.WeakSet[Computation] = attrs.field(init=False, factory=weakref.WeakSet)

    def __attrs_post_init__(self) -> None:
        self.checker = FusionChecker(self.target)
        self._pair_keys = PairKeys(self._called, self._formatted, self._own_bodies)
        self._composed = PairPrices(self.target, self._read_patterns, self._own_bodies)

    def candidate(
        self,
        members: list[Instruction],
        outputs: list[Instruction],
        consumer: Instruction | None = None,
    ) -> tuple[Candidate, Verdict] | None:
        """A fusion of ``members`` computing ``outputs``, if an emitter can emit it
        (``consumer``: the member the others are fused into, see :func:`fits_budget`).

        A candidate over the budget or the size limit is refused before it is built:
        both are told from the members (in a GPT-2 training step, multi-output fusion
        cloned 300,000 instructions into siblings' merges refused for the budget; in
        sax's lattice, 900,000 into merges refused for their size)."""
        if self._refused_unmade(members, outputs, consumer):
            return None
        return self._build_checked(members, outputs, consumer)

    def _refused_unmade(
        self,
        members: list[Instruction],
        outputs: list[Instruction],
        consumer: Instruction | None,
    ) -> bool:
        """Whether a fusion of ``members`` is over the budget or the size limit, told from
        the members before anything is built or grown."""
        if not within_budget(len(fusion_operands(members)), len(outputs), consumer):
            return True
        return self._oversized(members, outputs)

    def _build_checked(
        self,
        members: list[Instruction],
        outputs: list[Instruction],
        consumer: Instruction | None,
    ) -> tuple[Candidate, Verdict] | None:
        """:meth:`candidate` past its refusals told unbuilt: built, then checked."""
        candidate = build_fusion(members, outputs)
        verdict = self._verdict(candidate, consumer)
        if verdict is None:
            candidate.discard()
            return None
        return candidate, verdict

    def grown(
        self, producer: Instruction, user: Instruction, sole_user: bool = False
    ) -> tuple[Candidate, Verdict] | None:
        """What :meth:`candidate` gives for ``producer`` fused into ``user``, made by growing
        one of the two bodies in place where this run made it and growing makes the same
        body (:mod:`.growth`): the user's (:func:`grow_fusion`), or the producer's
        (:func:`grow_producer`) where it is the larger and ``user`` is its only user
        (``sole_user``: it dies with the install). No step of priority fusion then clones
        the kernel it grows. Whatever is known of the two from their bodies is known
        before one grows (both leave the computation when the fusion is installed)."""
        grow = self._growth_for(producer, user, sole_user)
        if grow is None:
            return self.candidate([producer, user], [user], consumer=user)
        members = [producer, user]
        if self._refused_unmade(members, [user], user):
            return None
        for member in members:  # asked of the candidate's members, as they stand
            self.checker.is_library(member)
        candidate = grow(producer, user)
        if candidate is None:
            return self._build_checked(members, [user], user)
        assert candidate.growth is not None
        self.checker.forget_body(candidate.body)  # its counts are the member's body's
        candidate.growth.on_undo = self.checker.forget_body  # and then the grown body's
        # Checked without a bound from the two sides' counts (one body is grown): a
        # body not seen before is counted itself, and the count stays its fusion's.
        verdict = self._verdict(candidate, user, None)
        if verdict is None:
            candidate.discard()
            return None
        return candidate, verdict

    def _growth_for(
        self, producer: Instruction, user: Instruction, sole_user: bool
    ) -> Callable[[Instruction, Instruction], Candidate | None] | None:
        """Which body :meth:`grown` grows: the larger of the two this run made, the
        producer's only where it dies with the install; None: neither (built)."""
        made = self._made_bodies
        user_body = user.called("calls") if user.opcode == "fusion" else None
        user_made = user_body is not None and user_body in made
        if sole_user and producer.opcode == "fusion" and (user_body is None or user_made):
            producer_body = producer.called("calls")
            user_size = 1 if user_body is None else len(user_body.instructions)
            if producer_body in made and len(producer_body.instructions) > user_size:
                return grow_producer
        return grow_fusion if user_made else None

    def members_key(self, members: list[Instruction], outputs: list[Instruction]) -> MembersKey:
        """What :meth:`candidate` would build of ``members`` and ``outputs``, told without
        building it (:meth:`PairKeys.of_members`): a pass remembers its answers by it."""
        return self._pair_keys.of_members(members, outputs)

    def _verdict(
        self,
        candidate: Candidate,
        consumer: Instruction | None = None,
        emissions_at_most: object = _UNKNOWN,
    ) -> Verdict | None:
        """The checker's verdict on ``candidate``, asked once per body signature.

        The budget is checked first, for every candidate: it depends on
        ``consumer`` too, which the body's signature does not tell (the same body
        may be a producer fused into a consumer with more operands or fewer).
        """
        if not fits_budget(candidate, consumer):
            return None
        # the same body made of other members may take a dot away from its library call
        # where these do not (FusionChecker.library_members)
        key = (self._signature(candidate), self.checker.library_members(candidate))
        if key in self._verdicts:
            return self._verdicts[key]
        bound = emissions_at_most
        if bound is _UNKNOWN:
            bound = self._emissions_at_most(candidate.members, consumer)
        assert bound is None or isinstance(bound, int)
        verdict = self._verdicts[key] = self.checker.check(candidate, consumer, bound)
        return verdict

    def _emissions_at_most(
        self, members: Sequence[Instruction], consumer: Instruction | None
    ) -> int | None:
        """A bound on the evaluations of a producer fused into ``consumer`` (``members``: the
        two), from each one's own count (:func:`fused_emissions`, made once per body), so
        that the checker counts the fused body only where the bound is over the limit:
        the count walks the body, which a priority fusion step builds around a fusion
        grown to hundreds of instructions (a twelfth of the Fisher matrix's pass). None
        for other candidates."""
        if consumer is None or len(members) != 2 or members[1] is not consumer:
            return None
        producer = members[0]
        reads = [k for k, value in enumerate(parameter_values(consumer)) if value is producer]
        if not reads:
            return None
        bodies, checker = self._own_bodies, self.checker
        return fused_emissions(
            checker.emissions(bodies.of(producer)), checker.emissions(bodies.of(consumer)), reads
        )

    def pair_seconds(self, producer: Instruction, user: Instruction) -> float | None:
        """The price of ``producer`` fused into ``user`` (None when no emitter takes it).

        Asked once per pair of instructions: the fused body depends on the two
        only (their other operands are parameters of the same shapes whatever
        becomes of them), and a rewrite replaces instructions rather than
        changing them. Built, checked and priced once per :class:`PairKey`: the
        body and whether it fits the budget are functions of the key, so a pair
        made of bodies fused before reads the price found then (what the
        verdict and price memos below would have answered for the built body).
        """
        by_user = self._pairs.setdefault(producer, {})
        if user in by_user:
            return by_user[user]
        key = self._pair_keys.of(producer, user)
        if key in self._pair_prices:
            seconds = self._pair_prices[key]
        elif self._refused_unbuilt(producer, user):
            seconds = self._pair_prices[key] = None
        elif (cost := self._plain_pair(producer, user)) is not None:
            seconds = self._pair_prices[key] = cost.seconds
        else:
            candidate = build_fusion([producer, user], [user])
            # Checked, not looked up by its signature: signing the clone cost about
            # what checking it does, and a pair key seen before has been answered.
            bound = self._emissions_at_most(candidate.members, user)
            verdict = self.checker.check(candidate, consumer=user, emissions_at_most=bound)
            seconds = None
            if verdict is not None and self._reduction_made_loop(producer, candidate, verdict):
                verdict = None
            if verdict is not None:
                cost = self._composed.pair(producer, user, verdict)
                seconds = (cost if cost is not None else self.price(candidate, verdict)).seconds
                self._keep_built(producer, user, candidate, verdict)
            else:
                candidate.discard()
            self._pair_prices[key] = seconds
        by_user[user] = seconds
        return seconds

    def _reduction_made_loop(
        self, producer: Instruction, candidate: Candidate, verdict: Verdict
    ) -> bool:
        """XLA's priority fusion refuses a reduction kernel fused into a user when the
        result is a loop kernel ("fusion into output of a reduce fusion would create a
        loop fusion"): the loop emitter sums each output's inputs in one thread, a
        serial loop whose memory latency no bandwidth figure prices (a batch norm's
        mean over 256 elements in each of 8 threads). heron refuses it where a reduce
        has more inputs per output than XLA repeats elementwise
        (:func:`sums_serially`): a loss's mean over 4 elements is a loop kernel's
        work, one launch saved. A row-resident normalisation kernel computes each
        reduce once per row (``reduces_once``; XLA's Triton softmax fusion): it is
        no such loop."""
        if verdict.emitter_kind != "loop" or verdict.reduces_once:
            return False
        own = self.own_verdict(producer)
        return own is not None and own.reduction and sums_serially(candidate.body)

    def _refused_unbuilt(self, producer: Instruction, user: Instruction) -> bool:
        """Whether the checker would refuse ``producer`` fused into ``user`` for its size
        alone (:func:`within_budget`, :data:`MAX_FUSED_INSTRUCTIONS`), told before it is
        built: a fusion grown near the limit is priced into each of its users and
        producers after every step, and building those pairs to be refused was a
        third of what the Fisher matrix's priority fusion cloned (530,000 of 1.44
        million instructions)."""
        if not within_budget(len(fusion_operands([producer, user])), 1, user):
            return True
        return self._oversized([producer, user], [user])

    def _oversized(self, members: list[Instruction], outputs: list[Instruction]) -> bool:
        """Whether the fusion of ``members`` would hold more than
        :data:`MAX_FUSED_INSTRUCTIONS` (:meth:`FusionSizes.planned`, counted only where the
        members' own bodies and operands together are over it)."""
        most = len(outputs) + sum(
            len(m.called("calls").instructions) if m.opcode == "fusion" else 1 + len(m.operands)
            for m in members
        )
        return most > MAX_FUSED_INSTRUCTIONS and (
            self._sizes.planned(members, outputs) > MAX_FUSED_INSTRUCTIONS
        )

    def _plain_pair(self, producer: Instruction, user: Instruction) -> KernelCost | None:
        """The price of ``producer`` fused into ``user`` where it is told without building
        the pair: the producer's body decides nothing (:func:`decides_nothing`), and the
        user's own verdict is the loop emitter's on a body that decides nothing either,
        or a hero's that only reads what the producer computes (:data:`_READING_HEROES`):
        the user's verdict is the pair's then; the pair keeps within the
        budget and the evaluations' limit (:func:`fused_emissions`, which the built pair
        counts at most), and its reads compose (:meth:`PairPrices.pair`); within the size
        limit it is, since :meth:`pair_seconds` asks :meth:`_refused_unbuilt` first.
        None otherwise: the pair is built and checked. A pair priced so that is fused is
        built and checked when it is installed (:func:`~.priority_fusion._build`)."""
        bodies = self._own_bodies
        if not self._plain(producer):
            return None
        verdict = self.own_verdict(user)
        if verdict is None:
            return None
        if verdict.emitter_kind == "loop":
            if not self._plain(user):
                return None  # its reduces, dots, sorts may refuse what it reads
        elif verdict.emitter_kind not in _READING_HEROES:
            return None
        operands = len(fusion_operands([producer, user]))
        user_body = bodies.of(user)
        if not within_budget(operands, len(fusion_roots(user_body)), user):
            return None
        emissions = self._emissions_at_most([producer, user], user)
        if emissions is None or emissions > MAX_EMISSIONS:
            return None  # at most this once built: the checker tells
        return self._composed.pair(producer, user, verdict)

    def _plain(self, inst: Instruction) -> bool:
        known = self._plain_bodies.get(inst)
        if known is None:
            known = self._plain_bodies[inst] = decides_nothing(self._own_bodies.of(inst))
        return known

    def own_verdict(self, inst: Instruction) -> Verdict | None:
        """The verdict on ``inst`` as a kernel of its own (None: it is none: a host
        instruction, or one no emitter takes alone), made once while it lives."""
        known = self._own_verdicts.get(inst, _UNKNOWN)
        if known is not _UNKNOWN:
            return known
        verdict = None
        if inst.opcode not in HOST_OPCODES and is_wrappable(inst):
            if inst.opcode == "fusion":
                verdict = self.checker.verdict(inst)
            else:
                # The instruction's own body, which its pairs' keys and prices read too:
                # what :meth:`candidate` would build, built once.
                own = self._own_bodies.candidate(inst)
                if within_budget(len(own.fusion.operands), 1, inst):
                    verdict = self._verdict(own, inst)
        self._own_verdicts[inst] = verdict
        return verdict

    def _keep_built(
        self, producer: Instruction, user: Instruction, candidate: Candidate, verdict: Verdict
    ) -> None:
        if len(self._built) >= _KEPT_PAIRS:
            oldest = next(iter(self._built))
            self._built.pop(oldest)[0].discard()
        self._built[(producer, user)] = (
            candidate,
            verdict,
            tuple(producer.operands),
            tuple(user.operands),
        )

    def built_pair(
        self, producer: Instruction, user: Instruction
    ) -> tuple[Candidate, Verdict] | None:
        """The fusion of ``producer`` into ``user`` built and checked when the pair was
        priced, if it is still what a build would make now (neither side's operands
        replaced since), handed over once; None otherwise."""
        kept = self._built.pop((producer, user), None)
        if kept is None:
            return None
        candidate, verdict, producer_operands, user_operands = kept
        if not (
            _identical(producer_operands, producer.operands)
            and _identical(user_operands, user.operands)
        ):
            candidate.discard()
            return None
        return candidate, verdict

    def fused_seconds(self, producer: Instruction, users: list[Instruction]) -> float | None:
        """The prices of ``producer`` fused into each of ``users``, added in order (None
        as soon as one is not emittable). A producer with many users (a constant
        every reduce reads) is priced again each time one of them changes: the
        others' prices are looked up here without a call each."""
        by_user = self._pairs.get(producer)
        if by_user is None:
            by_user = self._pairs[producer] = {}
        total = 0.0
        for user in users:
            seconds = by_user.get(user, _UNKNOWN)
            if seconds is _UNKNOWN:
                seconds = self.pair_seconds(producer, user)
            if seconds is None:
                return None
            total += seconds
        return total

    def fused_floor(self, producer: Instruction, users: list[Instruction]) -> float | None:
        """At most :meth:`fused_seconds`, without building a pair not priced yet where
        its floor can be told (:meth:`PairPrices.bound`); None when a pair is known
        not to be emittable (then so is the producer's fusion). A pair whose floor
        cannot be told is priced.

        A floor is composed in other arithmetic than the price it bounds (the verdict's
        parameters relaxed, the pair composed where the price may be the built body's
        estimate) and came out an ulp above it (a tfp f64 gradient: 3.4179742177080934e-06
        against 3.4179742177080925e-06), so the total is lowered by
        :data:`FLOOR_SLACK` of itself: a floor stays a floor."""
        by_user = self._pairs.get(producer)
        if by_user is None:
            by_user = self._pairs[producer] = {}
        floors = self._floors.get(producer)
        if floors is None:
            floors = self._floors[producer] = {}
        total = 0.0
        for user in users:
            seconds = by_user.get(user, _UNKNOWN)
            if seconds is _UNKNOWN:
                seconds = floors.get(user, _UNKNOWN)
                if seconds is _UNKNOWN:
                    floor = self._composed.bound(producer, user)
                    seconds = floors[user] = None if floor is None else floor.seconds
                if seconds is None:  # no floor: the price itself
                    seconds = self.pair_seconds(producer, user)
            if seconds is None:
                return None
            total += seconds
        return total * (1.0 - FLOOR_SLACK)

    def apart_seconds(self, producer: Instruction, users: list[Instruction]) -> float:
        """What ``producer`` and ``users`` cost as kernels of their own, added in order."""
        costs = self._costs
        return self.cost(producer).seconds + sum(
            (costs.get(user) or self.cost(user)).seconds for user in users
        )

    def installed(
        self,
        fusion: Instruction,
        producer: Instruction,
        user: Instruction,
        verdict: Verdict,
        candidate: Candidate,
    ) -> None:
        """``producer`` was fused into ``user`` as ``fusion``, ``candidate``'s body
        (installed, the two not yet forgotten): its own reads are composed from theirs
        (:meth:`~heron.compiler.fusion.pair_price.PairPrices.installed`), and its body's
        signature, where the candidate was signed, is its own (:meth:`PairKeys.adopt`)."""
        self._made_bodies.add(candidate.body)
        self._composed.installed(fusion, producer, user, verdict.reduces_once, candidate)
        signed = self._signatures.get(candidate)
        if signed is not None:
            self._pair_keys.adopt(fusion, signed[0])

    def forget(self, inst: Instruction) -> None:
        """Drop what is known about ``inst``, which left the computation: its own price
        and the pairs it is a side of (the pairs of its operands with it included)."""
        self._costs.pop(inst, None)
        self._own_verdicts.pop(inst, None)
        self._plain_bodies.pop(inst, None)
        for pair in [pair for pair in self._built if inst in pair]:
            self._built.pop(pair)[0].discard()
        self._composed.forget(inst)
        self._own_bodies.forget(inst)
        self._sizes.forget(inst)
        for pairs in (self._pairs, self._floors):
            pairs.pop(inst, None)
            for operand in inst.operands:
                by_user = pairs.get(operand)
                if by_user is not None:
                    by_user.pop(inst, None)

    def _signatures_of(self, candidate: Candidate) -> tuple[object, object]:
        """The candidate's body signature and its form (scalar constants' values aside)."""
        known = self._signatures.get(candidate)
        if known is not None:
            return known
        values: list[object] = []
        form = signature(candidate.body, self._called, values, self._formatted)
        keys = ((form, tuple(values)), form)
        self._signatures[candidate] = keys
        return keys

    def _estimate(
        self, form: object, body: Computation, operands: list[Instruction], verdict: Verdict
    ) -> KernelCost:
        """The cost of a kernel computing ``body`` (of ``form``) as ``verdict`` says,
        estimated once per form, verdict and which operands are small constants: the
        model reads shapes, maps and opcodes, and reads a small constant for nothing."""
        constants = tuple(k for k, operand in enumerate(operands) if is_small_constant(operand))
        key = (form, verdict.tiled, verdict.threads, verdict.reduces_once, constants)
        cost = self._prices.get(key)
        if cost is None:
            cost = estimate_computation(
                body,
                operands,
                self.target,
                tiled=verdict.tiled,
                threads=verdict.threads,
                reduces_once=verdict.reduces_once,
                patterns=self._read_patterns,
            )
            self._prices[key] = cost
        return cost

    def _signature(self, candidate: Candidate) -> object:
        return self._signatures_of(candidate)[0]

    def _form(self, candidate: Candidate) -> object:
        return self._signatures_of(candidate)[1]

    def emits(self, candidate: Candidate) -> bool:
        """The emitter's last word on a fusion a pass is about to install (asked once
        per distinct body form: the emitters see nothing of a fusion but its body, and
        the value of a scalar constant in it changes the code, never whether it can be
        emitted; programs repeat a layer with other constants)."""
        key = self._form(candidate)
        if key not in self._emitted:
            self._emitted[key] = self.checker.emits(candidate)
        return self._emitted[key]

    def price(self, candidate: Candidate, verdict: Verdict) -> KernelCost:
        """The candidate's cost; a body priced before (the same computation, names and
        scalar constants' values aside: the model reads shapes, maps and opcodes only)
        is not priced again."""
        return self._estimate(
            self._form(candidate), candidate.body, list(candidate.fusion.operands), verdict
        )

    def cost(self, inst: Instruction) -> KernelCost:
        """What ``inst`` costs as a kernel of its own (nothing for host instructions)."""
        cached = self._costs.get(inst)
        if cached is not None:
            return cached
        cost = NO_KERNEL
        verdict = self.own_verdict(inst)
        if verdict is not None:
            if inst.opcode == "fusion":
                cost = self._composed.cost(inst, verdict)
            else:
                cost = self.price(self._own_bodies.candidate(inst), verdict)
        self._costs[inst] = cost
        return cost


def _identical(before: Sequence[Instruction], now: Sequence[Instruction]) -> bool:
    """The same instructions in the same order (an operand replaced is another object)."""
    return len(before) == len(now) and all(a is b for a, b in zip(before, now))


def count_kernels(module: Module) -> int:
    """Kernels the entry computation launches: its fusions and its other non-host ops."""
    return sum(
        1
        for inst in module.entry.instructions
        if inst.opcode == "fusion" or inst.opcode not in HOST_OPCODES
    )
