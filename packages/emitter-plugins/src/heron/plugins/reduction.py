"""The reduction emitter plugins: row, multi-row, column and small-column reductions.

The four variants (``reduction_row``, ``reduction_column``) share
``reduction_base``; this module registers them. Each claims the fusions for
which hero selection (``heron.emitters.fusion_analysis.fusion_kind``) names it,
at priority 10, so it outranks the loop emitter and nothing else.

A variant needs a certain shape (a row or column reduction; a power-of-two
row that fits a warp for multi-row; a kept minor dimension dividing the warp
for small-column). When a fusion named for a variant does not have it (a
corpus folder follows XLA's test files, e.g. ``reduction_groups_two_in_same_group``
sits with the row tests but reduces a middle dimension), the factory falls
back to the variant XLA's ``CreateReductionFusion`` would pick for the shape,
so the fusion is still emitted as a reduction and correctly.
"""

from __future__ import annotations

from collections.abc import Callable

from heron.emitters.hookspecs import EmitterSpec, hookimpl
from heron.hlo.ir import Instruction
from heron.plugins.reduction_base import ReductionEmitterBase, VariantMismatch
from heron.plugins.reduction_column import ColumnReductionEmitter, SmallColumnReductionEmitter
from heron.plugins.reduction_row import MultiRowReductionEmitter, RowReductionEmitter

__all__ = [
    "ColumnReductionEmitter",
    "MultiRowReductionEmitter",
    "RowReductionEmitter",
    "SmallColumnReductionEmitter",
    "VariantMismatch",
    "heron_emitter_specs",
    "natural_variant",
]

_EMITTERS = (
    (RowReductionEmitter, "row reduction: warp shuffles, shared memory between warps"),
    (MultiRowReductionEmitter, "several short rows per warp, shuffles within segments"),
    (ColumnReductionEmitter, "column reduction through a transposed shared-memory tile"),
    (SmallColumnReductionEmitter, "column reduction whose kept minor dimension divides a warp"),
)


def natural_variant(fusion: Instruction) -> ReductionEmitterBase:
    """XLA's choice for the reduction's shape: multi-row, else row; small column, else column."""
    order = (
        (MultiRowReductionEmitter, RowReductionEmitter, SmallColumnReductionEmitter),
        (ColumnReductionEmitter,),
    )
    last: VariantMismatch | None = None
    for cls in (*order[0], *order[1]):
        try:
            return cls(fusion)
        except VariantMismatch as exc:
            last = exc
    assert last is not None
    raise last


def _factory(cls: type[ReductionEmitterBase]) -> Callable[[Instruction], ReductionEmitterBase]:
    """``cls(fusion)``, or the variant that fits when the fusion lacks ``cls``'s shape."""

    def make(fusion: Instruction) -> ReductionEmitterBase:
        try:
            return cls(fusion)
        except VariantMismatch:
            return natural_variant(fusion)

    make.__name__ = f"make_{cls.name}"
    return make


def _claims_for(name: str) -> Callable[[object], bool]:
    """``fusion_kind(f) == name`` (fusion_analysis imported lazily: it loads on first use)."""

    def claims(fusion: object) -> bool:
        if getattr(fusion, "opcode", None) != "fusion":
            return False
        from heron.emitters import fusion_analysis

        return fusion_analysis.fusion_kind(fusion) == name

    return claims


@hookimpl
def heron_emitter_specs() -> list[EmitterSpec]:
    return [
        EmitterSpec(
            name=cls.name,
            priority=10,
            claims=_claims_for(cls.name),
            factory=_factory(cls),
            description=description,
        )
        for cls, description in _EMITTERS
    ]
