"""Which instructions may be fused, and whether a candidate fusion can be emitted.

The rules here are the fusion passes' only source of "may": a fusion is made
only when heron's own analysis (:func:`heron.emitters.fusion_analysis.analyse_fusion`,
XLA's ``HloFusionAnalysis``) gives it a kind an installed emitter claims, every
fused op has a lowering, and every reduce in it is a reduction hero or is
read once per element (a reduce broadcast inside a loop fusion would be
recomputed for every element that reads it, which XLA never does). Ops no
emitter handles (dot, sort, custom-call, control flow, ...:
:data:`heron.hlo.passes.outline.REFUSED_OPCODES`) are never fused, as XLA
leaves them to libraries and thunks; scatter, which the scatter emitter takes,
is fused as a root only (:data:`ROOT_ONLY_OPCODES`), and sort, which the sort
emitter takes, gets a fusion of its own
(:data:`heron.hlo.passes.outline.HERO_OPCODES`).

:class:`FusionChecker` analyses each candidate once and hands the result to
the pass that asked (its kind decides ``kLoop``/``kInput`` and the cost
model's coalescing), so nothing is analysed twice. Before a pass installs a
fusion it has chosen, :meth:`FusionChecker.emits` has the emitter emit it:
the fusion passes never make a fusion the emitters refuse.
"""

from __future__ import annotations

import functools
import weakref
from typing import TYPE_CHECKING

import attrs

from heron.compiler.fusion.builder import Candidate, build_fusion, fusion_kind_of
from heron.compiler.fusion.cost_model import parallel_threads
from heron.compiler.fusion.emissions import MAX_EMISSIONS, Emissions, count_emissions
from heron.compiler.library_gemm import GemmMatch, match_gemm, splits_at_library
from heron.emitters.reductions import REDUCTION_KINDS
from heron.hlo.errors import HloError
from heron.hlo.ir import Computation, Instruction
from heron.hlo.opcodes import is_elementwise
from heron.hlo.passes.outline import HERO_OPCODES, HOST_OPCODES, REFUSED_OPCODES
from heron.hlo.plugin_loading import PluginError
from heron.hlo.shapes import ArrayShape, TupleShape
from heron.partitioner.regions import fusion_roots
from heron.target import Target

if TYPE_CHECKING:
    from heron.emitters.fusion_analysis import FusionAnalysis
    from heron.emitters.hookspecs import EmitterSpec

__all__ = [
    "MAX_FUSED_INSTRUCTIONS",
    "MAX_FUSION_PARAMETERS",
    "ROOT_ONLY_OPCODES",
    "FusionChecker",
    "decides_nothing",
    "Verdict",
    "fits_budget",
    "within_budget",
    "is_fusible_consumer",
    "is_fusible_producer",
    "is_wrappable",
    "verdict_of",
]

#: Operands plus outputs a fusion may have: XLA's
#: ``kMaxOperandsAndOutputsPerFusion``, which keeps kernel parameters within
#: the 4 KiB the CUDA ABI passes them in.
MAX_FUSION_PARAMETERS = 96


def fits_budget(candidate: Candidate, consumer: Instruction | None = None) -> bool:
    """Whether ``candidate`` keeps within :data:`MAX_FUSION_PARAMETERS` operands plus
    outputs, or, made by fusing producers into ``consumer``, reads no more operands
    than ``consumer`` does.

    XLA's ``FusionFitsInBudget`` with ``is_consumer_producer_fusion``: a fusion that
    reads no more than its consumer did makes no kernel's parameters grow, so it is
    accepted over the budget. Without that, a consumer already over the budget
    could take no producer at all, nor be a fusion of its own: a concatenate of
    196 slices of one array (the im2col of equinox's convolution weight gradient,
    issue 26) stayed outside every fusion and no emitter ran it; taking the slices
    one by one, the fusion ends up reading the one array. A fusion of one
    instruction reads what that instruction reads (pass it as its own
    ``consumer``: XLA's FusionWrapper wraps whatever is left).
    """
    return within_budget(
        len(candidate.fusion.operands), len(fusion_roots(candidate.body)), consumer
    )


def within_budget(operands: int, outputs: int, consumer: Instruction | None = None) -> bool:
    """:func:`fits_budget` from the counts, which a pass knows before it builds a body
    (:func:`heron.compiler.fusion.builder.fusion_operands`): a merge of two large
    kernels over the budget is refused without cloning them."""
    if operands + outputs <= MAX_FUSION_PARAMETERS:
        return True
    return consumer is not None and operands <= len(consumer.operands)


#: Instructions a fused computation may hold. Every step of the fusion passes
#: builds, signs and prices a candidate's whole body, and an emitter compiles it
#: as one kernel, so a fusion that may grow without bound makes both quadratic in
#: the module: a chain of row-local layers (each reduce broadcast back along its
#: row) is one row-normalisation fusion however long the chain. heron's own
#: budget, in the spirit of XLA's guards against fusions its emitters handle
#: badly; the largest fusion of the program corpus holds 315 (dropout_threefry's
#: loop body, 20 rounds of threefry, one kernel as in XLA).
MAX_FUSED_INSTRUCTIONS = 512


@functools.cache
def _lowerable() -> frozenset[str]:
    from heron.emitters.elemental.core import supported_opcodes

    return frozenset(supported_opcodes()) - REFUSED_OPCODES


#: Ops no elemental lowering computes but a hero emitter does, as a fusion's
#: root: scatter (the scatter emitter, updating its operand in place).
ROOT_ONLY_OPCODES = frozenset({"scatter"})


def _computes(inst: Instruction) -> bool:
    """An instruction that runs on the device: not a host op, not a refused op."""
    return _computes_opcode(inst.opcode)


@functools.cache
def _computes_opcode(opcode: str) -> bool:
    """:func:`_computes` by opcode, which is all it reads (priority fusion asks for every
    user of a producer each time it prices the producer)."""
    if opcode in HOST_OPCODES and opcode != "bitcast":
        return False
    if opcode == "fusion" or opcode in ROOT_ONLY_OPCODES:
        return True
    if opcode in REFUSED_OPCODES:
        return False
    return opcode in _lowerable()


def is_fusible_producer(inst: Instruction) -> bool:
    """Whether ``inst`` may be fused into its users: it computes an array on the device
    (a fusion with one output, a lowerable op), or is a scalar constant."""
    if inst.opcode == "constant":
        return isinstance(inst.shape, ArrayShape) and inst.shape.num_elements == 1
    if isinstance(inst.shape, TupleShape) or inst.opcode in ROOT_ONLY_OPCODES:
        return False
    return _computes(inst)


#: Heroes that take their iota operands into their fusion, as its root: XLA's
#: SortIotaFusion (an argsort's iota is computed in the sort's kernel as it
#: loads a row, never written); any other producer keeps a kernel of its own.
IOTA_TAKING_HEROES = frozenset({"sort"})


def _iota_like(inst: Instruction) -> bool:
    """An iota, or an iota broadcast (XLA's simplifier makes that an iota)."""
    return inst.opcode == "iota" or (
        inst.opcode == "broadcast" and inst.operands[0].opcode == "iota"
    )


def is_fusible_consumer(inst: Instruction) -> bool:
    """Whether producers may be fused into ``inst`` (a variadic reduce's tuple included).

    A dot takes the producers of its operands as a prologue (the GEMM emitter reads
    its operands element by element as it stages its tiles: im2col's pads, slices
    and concatenation, a transpose, an activation); a sort takes its iota operands
    only (``IOTA_TAKING_HEROES``, XLA's SortIotaFusion: the sort emitter makes the
    positions itself), every other producer is refused where it is checked."""
    opcode = inst.opcode
    if opcode == "dot" or opcode in IOTA_TAKING_HEROES:
        return True
    return opcode not in HERO_OPCODES and _computes_opcode(opcode)


def is_wrappable(inst: Instruction) -> bool:
    """Whether ``inst`` may become a fusion of its own: a consumer, or an op a hero
    emitter takes alone (sort: XLA gives it a kernel of its own)."""
    return inst.opcode in HERO_OPCODES or is_fusible_consumer(inst)


def _moves_each_element_once(inst: Instruction) -> bool:
    """An elementwise op, a bitcast-like reshape or copy, or a reduce whose reduced
    dimensions all have size 1 (jax's ``sum(reshape(sum(x), (1, n)), 0)``: each input
    element is one output element)."""
    if is_elementwise(inst.opcode) or inst.opcode in ("bitcast", "reshape", "copy"):
        return True
    if inst.opcode == "reduce" and len(inst.operands) == 2:
        dims = inst.operands[0].array_shape.dims
        return all(dims[d] == 1 for d in inst.attr("dimensions", ()))
    return False


#: A reduce computing each output element from at most this many input elements is
#: cheap to compute again for every element that reads it: XLA's
#: ``kMaxInputsPerOutput`` (``IsExpensiveToRepeat``, gpu_fusible.cc), under which
#: its fusion passes fuse a small reduction like an elementwise op, behind a
#: broadcast too (jax's log-softmax over 10 classes: XLA computes the row's max in
#: every element of the kernel that reads it).
MAX_INPUTS_PER_REPEATED_OUTPUT = 10


def _cheap_to_repeat(reduce: Instruction) -> bool:
    """A reduce with at most ``MAX_INPUTS_PER_REPEATED_OUTPUT`` inputs per output
    element (XLA's ``IsExpensiveToRepeat`` is false)."""
    if not isinstance(reduce.shape, ArrayShape) or len(reduce.operands) != 2:
        return False
    inputs = reduce.operands[0].array_shape.num_elements
    outputs = max(reduce.array_shape.num_elements, 1)
    return inputs // outputs <= MAX_INPUTS_PER_REPEATED_OUTPUT


def sums_serially(body: Computation) -> bool:
    """Whether the loop emitter would compute some reduce of ``body`` in one thread per
    output element over more than ``MAX_INPUTS_PER_REPEATED_OUTPUT`` inputs each: a
    serial loop, as slow as its inputs are many (XLA never makes such a loop fusion
    of a reduction kernel, :meth:`FusionContext.pair_seconds`)."""
    return any(inst.opcode == "reduce" and not _cheap_to_repeat(inst) for inst in body.instructions)


def _read_once(inst: Instruction, users: dict[Instruction, list[Instruction]]) -> bool:
    """Whether each element of ``inst`` is computed once: every path to a root goes
    through ops of its own size that move each element once (elementwise ops,
    bitcast-like reshapes, reduces over size-1 dimensions) only."""
    size = inst.array_shape.num_elements if isinstance(inst.shape, ArrayShape) else None
    stack, seen = [inst], set()
    while stack:
        node = stack.pop()
        for user in users.get(node, ()):
            if id(user) in seen or user.opcode == "tuple":
                continue
            seen.add(id(user))
            if user.opcode == "get-tuple-element" and node is inst:
                stack.append(user)
                continue
            same_size = isinstance(user.shape, ArrayShape) and user.shape.num_elements == size
            if not same_size or not _moves_each_element_once(user):
                return False
            stack.append(user)
    return True


def _complex_dot_read_once(inst: Instruction, users: dict[Instruction, list[Instruction]]) -> bool:
    """A complex dot (which heron's GEMM emitter does not take, so its fallback kernel is
    the loop emitter's) whose each element is computed once (:func:`_read_once`)."""
    return (
        inst.opcode == "dot"
        and isinstance(inst.shape, ArrayShape)
        and inst.shape.element_type.is_complex
        and _read_once(inst, users)
    )


#: Ops besides the elementwise ones that decide nothing of a fusion's analysis: no
#: hero search stops at them (:func:`heron.emitters.heroes.find_hero` looks for
#: reduces, transposes and concatenates, and a copy may be a transpose) and no
#: emitter but the loop emitter claims a fusion for them (a scatter, an in-place
#: update, a sort or a dot at its root).
_DECIDING_NOTHING = frozenset(
    {
        "parameter",
        "constant",
        "broadcast",
        "reshape",
        "bitcast",
        "convert",
        "bitcast-convert",
        "iota",
        "slice",
        "dynamic-slice",
        "pad",
        "reverse",
        "gather",
    }
)


def decides_nothing(body: Computation) -> bool:
    """Whether every op of ``body`` is elementwise or of :data:`_DECIDING_NOTHING`, and
    lowered by every emitter (the root may be a tuple of several outputs).

    A producer whose body decides nothing, fused into a user whose own verdict is the
    loop emitter's, makes a loop fusion with the user's roots, heroes and threads:
    the user's verdict (:meth:`FusionChecker.check` on the built pair says the same
    wherever it accepts it, and the pair's size and budget are checked apart).
    Priority fusion prices such pairs without building them (most of the pairs of an
    elementwise program, and the largest: a grown fusion into each of its users)."""
    lowerable = _lowerable()
    for inst in body.instructions:
        opcode = inst.opcode
        if opcode == "tuple" and inst is body.root:
            continue
        if not (is_elementwise(opcode) or opcode in _DECIDING_NOTHING):
            return False
        if opcode not in ("parameter", "constant") and opcode not in lowerable:
            return False
    return True


@attrs.frozen
class Verdict:
    """A candidate the emitters take: its emitter kind, XLA's ``kind=``, how many
    elements its emitter works on in parallel (the cost model's parallelism), and
    whether its emitter computes each reduce once however many elements read it
    (``computes_each_reduce_once`` on the emitter class: the row-resident
    normalisation emitter), so a reduce broadcast back along its row reads its
    input once, not once per element of the broadcast."""

    emitter_kind: str
    fusion_kind: str
    threads: int
    reduces_once: bool = False

    @property
    def tiled(self) -> bool:
        """The emitter reads through shared-memory tiles (coalesced whatever the maps)."""
        return self.emitter_kind == "transpose"

    @property
    def reduction(self) -> bool:
        """A reduction emitter's kernel (a real reduction hero, XLA's ``kReduction``)."""
        return self.emitter_kind in REDUCTION_KINDS


def verdict_of(analysis: FusionAnalysis, spec: EmitterSpec | None = None) -> Verdict:
    """The verdict for an analysed fusion the emitters take (``spec``: its selected
    emitter, selected here when not given)."""
    from heron.emitters.selection import select_emitter

    if spec is None:
        try:
            spec = select_emitter(analysis)
        except PluginError:
            spec = None
    hero = None
    if analysis.reduction is not None:
        # The first root whose hero is a reduce, not the first root's hero: a root may be
        # a side output (an iota, a broadcast of a scalar) that reads nothing or one
        # element. A reduce computed per element (a short row behind the real hero)
        # counts as the hero: its input's elements are the kernel's parallelism.
        hero = next(h for h in analysis.heroes if h.opcode == "reduce")
    threads = parallel_threads(analysis.computation, hero)
    once = bool(getattr(getattr(spec, "factory", None), "computes_each_reduce_once", False))
    return Verdict(analysis.kind, fusion_kind_of(analysis.kind), threads, once)


@attrs.define
class FusionChecker:
    """Decides, for one Target, whether candidates can be emitted."""

    target: Target
    #: Whether each member asked about is a library GEMM as it stands
    #: (:meth:`library_members`), by the member itself: a rewrite replaces
    #: instructions rather than changing them, so the answer holds while it lives.
    _library: dict[Instruction, bool] = attrs.field(init=False, factory=dict)
    #: Each fusion's analysis (a candidate's, or one installed since), made once while
    #: the fusion lives: a candidate is analysed to be checked, again before it is
    #: installed (:meth:`emits`) and again when priced as an installed fusion. A fusion
    #: pass builds bodies and installs them whole, never changing one it analysed.
    _analyses: weakref.WeakKeyDictionary[Instruction, FusionAnalysis] = attrs.field(
        init=False, factory=weakref.WeakKeyDictionary
    )
    #: Each body's evaluation count, made once while it lives: a candidate's when it is
    #: checked, read again as an installed fusion's own (the body installed is the one
    #: checked) when its pairs are priced unbuilt.
    _emissions: weakref.WeakKeyDictionary[Computation, Emissions] = attrs.field(
        init=False, factory=weakref.WeakKeyDictionary
    )
    #: The emitter selected for each analysis (:meth:`selected`), while it lives.
    _specs: weakref.WeakKeyDictionary[FusionAnalysis, EmitterSpec] = attrs.field(
        init=False, factory=weakref.WeakKeyDictionary
    )

    def emissions(self, body: Computation) -> Emissions:
        """``body``'s :func:`~heron.compiler.fusion.emissions.count_emissions`, counted once."""
        known = self._emissions.get(body)
        if known is None:
            known = self._emissions[body] = count_emissions(body)
        return known

    def selected(self, analysis: FusionAnalysis) -> EmitterSpec:
        """The emitter :func:`~heron.emitters.selection.select_emitter` selects for
        ``analysis``, asked of the emitters once: a candidate is checked, its verdict
        made and its emission confirmed from one analysis, and every emitter's
        ``claims`` looks at it each time (``PluginError`` when none claims it)."""
        known = self._specs.get(analysis)
        if known is None:
            from heron.emitters.selection import default_registry, select_emitter

            known = self._specs[analysis] = select_emitter(analysis, default_registry())
        return known

    def verdict(self, fusion: Instruction) -> Verdict:
        """:func:`verdict_of` ``fusion``'s analysis and selected emitter (none selected:
        the analysis's alone)."""
        analysis = self.analysis(fusion)
        try:
            spec = self.selected(analysis)
        except PluginError:
            spec = None
        return verdict_of(analysis, spec)

    def forget_body(self, body: Computation) -> None:
        """Forget ``body``'s count: it was grown in place (:mod:`.growth`), or given back."""
        self._emissions.pop(body, None)

    def analysis(self, fusion: Instruction) -> FusionAnalysis:
        """``fusion``'s :func:`~heron.emitters.fusion_analysis.analyse_fusion` for this
        Target, made once (a refusal is raised every time, not kept)."""
        known = self._analyses.get(fusion)
        if known is None:
            from heron.emitters.fusion_analysis import analyse_fusion

            known = self._analyses[fusion] = analyse_fusion(fusion, self.target)
        return known

    def library_members(self, candidate: Candidate) -> tuple[int, ...]:
        """The positions of ``candidate``'s members that are library GEMMs as they stand:
        a fusion :func:`~heron.compiler.library_gemm.match_gemm` matches, or a dot the
        library takes alone.

        Only a fusion that takes a dot away from its library call is split at the
        library (:meth:`check`). A dot that is heron's GEMM kernel as it stands (an
        operand the library cannot read, XLA's Triton GEMM fusions' territory: a
        transposed batch operand, an operand laid out column-major) loses nothing
        to its operands' producers, its epilogue or a transpose after it, which the
        GEMM emitter computes with it. The fusion passes build members into larger
        fusions only, so whether a member is one is a function of its body, which
        the callers' memos (by body signature, by pair) key on.
        """
        return tuple(n for n, member in enumerate(candidate.members) if self.is_library(member))

    def is_library(self, member: Instruction) -> bool:
        """Whether ``member`` is a library GEMM as it stands (:meth:`library_members`)."""
        known = self._library.get(member)
        if known is not None:
            return known
        if member.opcode == "fusion":
            body = member.called("calls")
            found = any(i.opcode == "dot" for i in body.instructions) and isinstance(
                match_gemm(body, self.target), GemmMatch
            )
        elif member.opcode == "dot":
            alone = build_fusion([member], [member])
            found = isinstance(match_gemm(alone.body, self.target), GemmMatch)
            alone.discard()
        else:
            found = False
        self._library[member] = found
        return found

    def check(
        self,
        candidate: Candidate,
        consumer: Instruction | None = None,
        emissions_at_most: int | None = None,
    ) -> Verdict | None:
        """The verdict for ``candidate``, or None when no emitter can emit it.

        ``consumer``: the instruction the candidate fuses producers into, whose
        operand count may stand for the budget (:func:`fits_budget`).
        ``emissions_at_most``: a bound on the body's evaluations known from its members
        (:func:`~heron.compiler.fusion.emissions.fused_emissions`); within
        :data:`MAX_EMISSIONS`, the body's own count is not made.
        """
        from heron.emitters.selection import default_registry, emitter_heroes

        default_registry()  # a plugin that fails to load is an error, not a "no"
        body = candidate.body
        if not fits_budget(candidate, consumer):
            return None
        if len(body.instructions) > MAX_FUSED_INSTRUCTIONS:
            return None
        if (emissions_at_most is None or emissions_at_most > MAX_EMISSIONS) and self.emissions(
            body
        ).total > MAX_EMISSIONS:
            return None  # evaluations duplicated past XLA's limit (:mod:`.emissions`)
        fused_heroes: list[Instruction] = []
        for inst in body.instructions:
            if inst.opcode in ("parameter", "tuple", "constant", "get-tuple-element"):
                continue
            if inst.opcode in IOTA_TAKING_HEROES and inst is not body.root:
                return None  # its emitter takes it as the fusion's one root only
            if body.root.opcode in IOTA_TAKING_HEROES and inst is not body.root:
                if not _iota_like(inst):
                    return None
            if inst.opcode in HERO_OPCODES:
                if inst is not body.root or len(candidate.members) != 1:
                    fused_heroes.append(inst)
            elif inst.opcode in ROOT_ONLY_OPCODES:
                if inst is not body.root:
                    return None
            elif inst.opcode not in _lowerable():
                return None
        try:
            analysis = self.analysis(candidate.fusion)
            spec = self.selected(analysis)
            if fused_heroes:
                # A dot or a sort with other ops must be the selected emitter's own
                # hero (the GEMM emitter's dot under its epilogue and over its
                # operands' producers): any other emitter (loop, row normalisation)
                # would compute it once per element that reads it. A complex dot, which
                # the GEMM emitter does not take, may keep the epilogue its library call
                # computes (alpha, a residual): the loop emitter computes it per output
                # element, once each where only elementwise ops of its size follow.
                heroes = {id(hero) for hero in emitter_heroes(analysis, spec)}
                strays = [inst for inst in fused_heroes if id(inst) not in heroes]
                if strays:
                    users = body.users()
                    if not all(_complex_dot_read_once(i, users) for i in strays):
                        return None
        except (HloError, PluginError):
            return None
        if splits_at_library(body, self.target) and self.library_members(candidate):
            # the library computes the dot and its epilogue, a kernel the rest; a dot
            # already heron's kernel computes with it what its emitter takes
            return None
        verdict = verdict_of(analysis, spec)
        if verdict.reduces_once:
            return verdict  # every reduce computed once (per row), however many read it
        # A reduce that is not a reduction hero is computed by the loop emitter
        # once per element of whatever reads it: fine when only elementwise
        # ops of its own size lead from it to the roots (once per output
        # element, XLA's loop fusion of a small reduction), or when it is cheap
        # to repeat (XLA's rule: at most 10 inputs per output element), never
        # where a broadcast or a slice would make a larger reduction computed
        # again and again.
        heroes = {id(hero) for hero in analysis.heroes}
        users: dict[Instruction, list[Instruction]] | None = None  # made when needed
        for inst in body.instructions:
            if inst.opcode == "reduce" and id(inst) not in heroes and not _cheap_to_repeat(inst):
                users = body.users() if users is None else users
                if not _read_once(inst, users):
                    return None
        return verdict

    def emits(self, candidate: Candidate) -> bool:
        """Whether the chosen emitter really emits ``candidate`` (stage ``emitted``).

        The analysis says which emitter claims a fusion; some limits are only
        known to the emitter while it emits (a reduction epilogue root of
        another shape than its reduce, say). A pass calls this once for each
        fusion it is about to make, not for every candidate it prices. An emitter
        whose spec says it ``refuses_when_built`` is only built, not emitted.
        """
        from heron.emitters.selection import emit_fusion

        try:
            analysis = self.analysis(candidate.fusion)
            spec = self.selected(analysis)
            if spec.refuses_when_built:
                spec.factory(analysis)
            else:
                emit_fusion(candidate.fusion, self.target)
        except (HloError, PluginError):
            return False
        return True
