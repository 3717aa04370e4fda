"""The reduction emitter plugins: row, multi-row, column and small-column reductions.

The four variants (``reduction_row``, ``reduction_column``) share
``reduction_base``; this module registers them. Hero selection picks the
variant, with its parameters, once (``FusionAnalysis.kind`` and
``FusionAnalysis.reduction``); each variant claims the analyses of its kind,
at priority 10, so it outranks the loop emitter and nothing else, and its
factory builds exactly that variant. A kernel therefore names the variant
that emitted it.
"""

from __future__ import annotations

from heron.emitters.fusion_analysis import claims_kind
from heron.emitters.hookspecs import EmitterSpec, hookimpl
from heron.plugins.reduction_column import ColumnReductionEmitter, SmallColumnReductionEmitter
from heron.plugins.reduction_row import MultiRowReductionEmitter, RowReductionEmitter

__all__ = [
    "ColumnReductionEmitter",
    "MultiRowReductionEmitter",
    "RowReductionEmitter",
    "SmallColumnReductionEmitter",
    "heron_emitter_specs",
]

_EMITTERS = (
    (RowReductionEmitter, "row reduction: warp shuffles, shared memory between warps"),
    (MultiRowReductionEmitter, "several short rows per warp, shuffles within segments"),
    (ColumnReductionEmitter, "column reduction through a transposed shared-memory tile"),
    (SmallColumnReductionEmitter, "column reduction whose kept minor dimension divides a warp"),
)


@hookimpl
def heron_emitter_specs() -> list[EmitterSpec]:
    return [
        EmitterSpec(
            name=cls.name,
            priority=10,
            claims=claims_kind(cls.name),
            factory=cls,
            description=description,
            # every limit is checked when built (plan(), ReductionEmitterBase._check_roots)
            refuses_when_built=True,
        )
        for cls, description in _EMITTERS
    ]
