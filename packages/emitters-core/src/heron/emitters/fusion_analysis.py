"""The analysis of one fusion for one target, computed once: its kind, roots and heroes.

``analyse_fusion(fusion, target)`` is XLA's ``HloFusionAnalysis`` with
``GetEmitterFusionKind`` and the emitter factories: it finds every root's hero
(``heron.emitters.heroes.find_hero``), decides which emitter XLA would use and
describes what that emitter needs (the normalised, tiled transpose; the
collapsed reduction and its variant's parameters). The result is handed, as
is, to every emitter plugin's ``claims(analysis)`` and to the chosen one's
``factory(analysis)``; emitters read it and never search for heroes, roots or
normalised transposes again.

``kind`` is XLA's decision, a string among ``FUSION_KINDS``; it is not a list
of installed emitters. heron's built-in plugins each claim one kind, and a
third-party emitter may claim whatever analyses it likes (by kind, by the
heroes, by the fusion's name) and outrank them by priority.

There is no buffer assignment here. XLA's in-place dynamic-update-slice test
compares the buffer of the updated operand with the output buffer; heron
treats the updated operand as aliasable with the output when it is a fusion
parameter, reached from the DUS only through bitcasts, and neither it nor those
bitcasts have any user besides that path (see ``_dus_operand_aliases_output``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import attrs

from heron.emitters.fusion_graph import FusionGraph, output_positions
from heron.emitters.heroes import find_hero
from heron.emitters.reductions import ReductionDescription, describe_reduction
from heron.emitters.transposes import TransposeDescription, tiled_transpose
from heron.hlo.errors import UnsupportedError
from heron.hlo.ir import Computation, Instruction
from heron.partitioner.subgraph import leaf_shapes
from heron.target import Target

__all__ = [
    "FUSION_KINDS",
    "FusionAnalysis",
    "analyse_fusion",
    "claims_kind",
    "claims_root",
    "dynamic_update_slice_of",
    "has_no_output_elements",
    "union_is_loop",
]

#: The emitter kinds XLA decides between (``EmitterFusionKind`` and the reduction
#: and transpose factories), as ``FusionAnalysis.kind`` spells them:
#:
#: - ``loop``: no special hero; one thread per output element (or vector).
#: - ``transpose``: every root is a tiled transpose hero (all equivalent) or a
#:   bitcast of its input; ``FusionAnalysis.transpose`` describes the tile problem.
#: - ``reduce_row``, ``reduce_multirow``, ``reduce_column``,
#:   ``reduce_column_small``: a real reduction hero; ``FusionAnalysis.reduction``
#:   holds the collapsed dimensions and the variant's parameters.
#: - ``scatter``: one scatter root.
#: - ``concatenate``: one root, whose hero is a concatenate of at most 4 operands.
#: - ``dynamic_update_slice``: every root is a DUS updating a parameter in place.
#: - ``input_slices``: several roots, all unit-stride slices of same-shaped inputs.
FUSION_KINDS = (
    "loop",
    "transpose",
    "reduce_row",
    "reduce_multirow",
    "reduce_column",
    "reduce_column_small",
    "scatter",
    "concatenate",
    "dynamic_update_slice",
    "input_slices",
)

#: ``UseConcatenateFusion``: more operands hurt occupancy.
MAX_CONCATENATE_OPERANDS = 4


@attrs.frozen(eq=False)
class FusionAnalysis:
    """A fusion analysed for a target: what XLA would emit it with, and the facts behind it.

    ``roots`` are the fused computation's roots (the root tuple's operands) and
    ``output_positions[i]`` the fusion outputs root ``i`` fills; ``heroes[i]``
    is root ``i``'s hero (the root itself when it has none). ``transpose`` is
    set for the ``transpose`` kind, ``reduction`` for the reduction kinds.
    ``graph`` is the fusion-adaptor view the heroes were found in, built once
    for this analysis.
    """

    fusion: Instruction
    target: Target
    kind: str
    roots: tuple[Instruction, ...]
    heroes: tuple[Instruction, ...]
    output_positions: tuple[tuple[int, ...], ...]
    graph: FusionGraph = attrs.field(repr=False)
    transpose: TransposeDescription | None = None
    reduction: ReductionDescription | None = None

    @property
    def computation(self) -> Computation:
        """The fused computation."""
        return self.graph.computation

    def hero_of(self, root: Instruction) -> Instruction:
        """The hero of ``root`` (one of ``roots``)."""
        for candidate, hero in zip(self.roots, self.heroes, strict=True):
            if candidate is root:
                return hero
        raise UnsupportedError(
            f"fusion '{self.fusion.name}': {root.opcode} '{root.name}' is not one of its roots"
        )


def claims_kind(kind: str) -> Callable[[object], bool]:
    """A ``claims`` function for an emitter plugin: analyses of fusions of kind ``kind``.

    Anything that is not a ``FusionAnalysis`` is claimed by nobody (the
    registry then names it), never an exception.
    """

    def claims(analysis: object) -> bool:
        return isinstance(analysis, FusionAnalysis) and analysis.kind == kind

    claims.__name__ = f"claims_{kind}"
    claims.__doc__ = f"Analyses whose kind is {kind!r} (XLA's choice)."
    return claims


def claims_root(opcode: str) -> Callable[[object], bool]:
    """A ``claims`` function for an emitter plugin that takes one op alone: analyses of
    fusions whose one root is an ``opcode`` (a sort, a topk: XLA gives each a kernel
    of its own, whatever kind the analysis gives the fusion)."""

    def claims(analysis: object) -> bool:
        if not isinstance(analysis, FusionAnalysis):
            return False
        roots = analysis.roots
        return len(roots) == 1 and roots[0].opcode == opcode

    claims.__name__ = f"claims_{opcode}_root"
    claims.__doc__ = f"Analyses of fusions whose one root is a {opcode!r}."
    return claims


# ---------------------------------------------------------------------------
# Transposes: ``FindConsistentTransposeHero``.
# ---------------------------------------------------------------------------
def _consistent_transpose(
    roots: Sequence[Instruction], heroes: Sequence[Instruction]
) -> TransposeDescription | None:
    """Equivalent tiled heroes; every other root a bitcast of the transpose input."""
    found: TransposeDescription | None = None
    tiled: list[Instruction] = []
    others: list[Instruction] = []
    for root, hero in zip(roots, heroes, strict=True):
        desc = tiled_transpose(hero)
        if desc is None:
            others.append(root)
            continue
        if found is None:
            found = desc
        elif not found.equivalent(desc):
            return None
        if not any(hero is t for t in tiled):
            tiled.append(hero)
    if found is None:
        return None
    elements = found.instruction.operands[0].array_shape.num_elements
    if any(r.array_shape.num_elements != elements for r in others):
        return None
    return attrs.evolve(found, heroes=tuple(tiled))


# ---------------------------------------------------------------------------
# Input slices and concatenates.
# ---------------------------------------------------------------------------
def _is_input_fusible_non_strided_slices(roots: Sequence[Instruction]) -> bool:
    """``IsInputFusibleNonStridedSlices``: every root a slice with unit strides."""
    for root in roots:
        if root.opcode != "slice":
            return False
        ranges = root.attr("slice")
        if ranges is None:
            raise UnsupportedError(f"'{root.name}' (slice) has no slice attribute")
        if any(r.stride != 1 for r in ranges):
            return False
    return True


def _all_slice_inputs_compatible(roots: Sequence[Instruction]) -> bool:
    """``AllSliceInputsAreCompatible``: slice operands of one shape (element type ignored)."""
    first = roots[0].operands[0].array_shape
    return all(r.operands[0].array_shape.dims == first.dims for r in roots)


def _use_concatenate(roots: Sequence[Instruction], heroes: Sequence[Instruction]) -> bool:
    """``UseConcatenateFusion``: one root whose hero is a concatenate of at most 4 operands.

    XLA's concatenate emitter writes one output; a fusion with several roots
    (even roots sharing one concatenate hero, or RoPE's q and k concatenates)
    is a loop fusion in XLA 0.12, which ``analyse_fusion`` decides before
    asking this (the roots-count test of ``GetEmitterFusionKind``). More
    operands would repeat the loop per operand and hurt occupancy.
    """
    if len(roots) != 1 or heroes[0].opcode != "concatenate":
        return False
    return len(heroes[0].operands) <= MAX_CONCATENATE_OPERANDS


# ---------------------------------------------------------------------------
# In-place dynamic-update-slice.
# ---------------------------------------------------------------------------
def dynamic_update_slice_of(root: Instruction) -> Instruction | None:
    """The dynamic-update-slice ``root`` is, or is a chain of bitcasts of; else None.

    XLA's ``GetOutputDefiningDynamicUpdateSlices`` for one root; the in-place
    emitter reads its roots' updates through this too.
    """
    while root.opcode == "bitcast":
        root = root.operands[0]
    return root if root.opcode == "dynamic-update-slice" else None


def _dus_operand_aliases_output(dus: Instruction, graph: FusionGraph) -> bool:
    """Buffer-assignment stand-in: the updated operand is a parameter used only here."""
    operand = dus.operands[0]
    path = [dus]
    if operand.opcode == "bitcast":
        path.append(operand)
        operand = operand.operands[0]
    if operand.opcode != "parameter":
        return False
    for inst, expected in ((operand, path[-1]),) + (((path[1], dus),) if len(path) > 1 else ()):
        if any(u is not expected for u in graph.users(inst)):
            return False
    return True


def _can_emit_dynamic_update_slice_in_place(
    roots: Sequence[Instruction], graph: FusionGraph
) -> bool:
    """``CanEmitFusedDynamicUpdateSliceInPlaceForGpu`` without buffer assignment."""
    duses = [dynamic_update_slice_of(r) for r in roots]
    if any(d is None for d in duses):
        return False
    update_dims = duses[0].operands[1].array_shape.dims
    for dus in duses:
        node = dus
        users = graph.users(node)
        while users:
            if len(users) > 1 or users[0].opcode != "bitcast":
                return False
            node = users[0]
            users = graph.users(node)
        if dus.operands[1].array_shape.dims != update_dims:
            return False
        if not _dus_operand_aliases_output(dus, graph):
            return False
    return True


def _is_dus_fusion(roots: Sequence[Instruction]) -> bool:
    """``IsDynamicUpdateSliceFusion``: every root a DUS or a bitcast of one."""
    return all(
        r.opcode == "dynamic-update-slice"
        or (r.opcode == "bitcast" and r.operands[0].opcode == "dynamic-update-slice")
        for r in roots
    )


# ---------------------------------------------------------------------------
# The analysis.
# ---------------------------------------------------------------------------
def _check_inputs(fusion: object, target: object) -> Computation:
    if getattr(fusion, "opcode", None) != "fusion":
        what = (
            f"'{fusion.name}' is a {fusion.opcode}"
            if isinstance(fusion, Instruction)
            else f"{type(fusion).__name__} {fusion!r} is not an HLO instruction"
        )
        raise UnsupportedError(f"analyse_fusion: {what}, not a fusion")
    if not isinstance(target, Target):
        raise UnsupportedError(
            f"analyse_fusion: fusion '{fusion.name}': {type(target).__name__} {target!r:.60}"
            " is not a heron.target.Target"
        )
    return fusion.called("calls")


def has_no_output_elements(fusion: Instruction) -> bool:
    """Whether every array output of ``fusion`` has zero elements (nothing to write)."""
    leaves = leaf_shapes(fusion.shape)
    return bool(leaves) and all(leaf.num_elements == 0 for leaf in leaves)


def analyse_fusion(fusion: Instruction, target: Target) -> FusionAnalysis:
    """``HloFusionAnalysis`` + ``GetEmitterFusionKind`` + the emitter factories, once.

    Order: a real reduction hero (with compatible other roots) picks a reduction
    emitter; consistent tiled transposes pick transpose; several roots pick
    input slices or loop; one scatter root picks scatter; a single root with a
    concatenate hero picks concatenate; a loop fusion whose roots are DUSes updating an
    aliasable parameter picks dynamic_update_slice; everything else is loop.
    A fusion whose outputs all have zero elements is loop before anything else
    (the loop emitter writes nothing, see ``heron.plugins.loop``); a reduce of
    an input with zero elements is never a reduction hero
    (``is_reduction_from_or_to_contiguous_dimensions``).
    """
    computation = _check_inputs(fusion, target)
    graph = FusionGraph(computation)
    roots = graph.roots
    heroes = tuple(find_hero(r, graph) for r in roots)

    def result(kind: str, **extra: object) -> FusionAnalysis:
        return FusionAnalysis(
            fusion, target, kind, roots, heroes, output_positions(roots), graph, **extra
        )

    if has_no_output_elements(fusion):
        # Zero-size outputs: no work at all. XLA launches nothing; heron gives
        # the loop emitter an empty kernel (one thread that writes nothing),
        # so no hero's plan ever divides by an empty extent.
        return result("loop")
    reduction = describe_reduction(roots, heroes, computation.parameters, target)
    if reduction is not None:
        kind, description = reduction
        return result(kind, reduction=description)
    transpose = _consistent_transpose(roots, heroes)
    if transpose is not None:
        return result("transpose", transpose=transpose)
    if len(roots) > 1:
        # Several roots: input slices or a loop (XLA tests this before scatter and
        # concatenate, so a multi-output concatenate fusion is a loop).
        if _is_input_fusible_non_strided_slices(roots) and _all_slice_inputs_compatible(roots):
            return result("input_slices")
    elif roots[0].opcode == "scatter":
        return result("scatter")
    elif _use_concatenate(roots, heroes):
        return result("concatenate")
    if _is_dus_fusion(roots) and _can_emit_dynamic_update_slice_in_place(roots, graph):
        return result("dynamic_update_slice")
    return result("loop")


def union_is_loop(analyses: Sequence[FusionAnalysis]) -> bool:
    """Whether one fusion computing the roots of the fusions ``analyses`` describe, none
    of them reading another's outputs (siblings merged into a multi-output fusion), is
    certainly a loop fusion: told from their own analyses, without building it (False
    also where the union's own analysis must decide).

    Each must be a loop or a transpose fusion with no reduce hero, and no root a slice
    or an update of a slice (several roots that all are go to the input-slices or the
    in-place emitter). A root's hero in the union is its hero in its own fusion or the
    root itself: the union gives an instruction more users, which can only end a
    transpose's claim, and no new operands. So no reduction emitter takes it, and
    the transpose emitter only with every other root of its transposes' input size
    (:func:`_consistent_transpose`): with equivalent transposes of one input size and a
    root of another, the union is a loop fusion whichever transposes keep their claim.
    XLA's multi-output fusion, too, decides from each fusion's own hero which merges
    cannot share a kernel (``ShapesCompatibleForMultiOutputFusion``).
    """
    tiled: list[TransposeDescription] = []
    others: list[Instruction] = []
    for analysis in analyses:
        if analysis.kind not in ("loop", "transpose"):
            return False
        for root, hero in zip(analysis.roots, analysis.heroes, strict=True):
            if hero.opcode == "reduce":
                return False
            if root.opcode == "slice" or dynamic_update_slice_of(root) is not None:
                return False
            description = tiled_transpose(hero)
            if description is None:
                others.append(root)
            elif analysis.kind == "loop":
                return False  # a claim its own fusion refused: the union decides
            else:
                tiled.append(description)
    if not tiled:
        return True
    first = tiled[0]
    elements = first.instruction.operands[0].array_shape.num_elements
    if not all(
        first.equivalent(t) and t.instruction.operands[0].array_shape.num_elements == elements
        for t in tiled[1:]
    ):
        return False
    return any(root.array_shape.num_elements != elements for root in others)
