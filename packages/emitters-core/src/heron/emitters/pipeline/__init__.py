"""heron's MLIR pipeline: from the emitters' IR to the last backend-neutral stage.

The passes, in order (docs/pipeline.md says what the IR looks like after each):

==========================  ===================================================
inline                      inline subgraph functions that are small or called
                            once (post-order); drop unused private functions
lower-loops-to-scf          heron_gpu.loop -> scf.for nests with in-domain checks
flatten-tensors             N-d tensors -> 1-D in layout order; composed indexing
vectorize-loads-stores      contiguous aligned extract/insert in a vector loop ->
                            vector.transfer_read/write
unroll-loops                unroll small constant-trip scf.for loops
simplify-indexing           simplify heron_gpu.apply_indexing with heron.indexing
                            and lower it to arith on index
narrow-index-types          index arithmetic in i32 where ranges allow
expand-math                 math ops -> arith approximations (no vendor library)
lower-heron-gpu-to-scf      predicated accesses -> scf.if, warp reductions ->
                            gpu.shuffle and calls (XLA's LowerXlaGpuToScf)
lower-tensors               tensors -> memref loads/stores in a gpu.module kernel
==========================  ===================================================

After ``lower-tensors`` the module holds one ``gpu.module`` and is handed to a
backend (NVVM or ROCDL) in ``heron.runtime.cuda`` / ``heron.runtime.rocm``.
"""

from __future__ import annotations

from heron.emitters.pipeline.manager import (
    Dump,
    InvalidAfterPasses,
    Pass,
    PassFailure,
    PipelineOptions,
    run_passes,
    run_upstream,
)


def heron_passes() -> list[Pass]:
    """The pipeline's passes in order (imported lazily: each module is one pass)."""
    from heron.emitters.pipeline import (
        expand_math,
        flatten_tensors,
        inline,
        lower_loops,
        lower_tensors,
        lower_to_scf,
        narrow_index,
        simplify_indexing,
        unroll,
        vectorize,
    )

    return [
        inline.PASS,
        lower_loops.PASS,
        flatten_tensors.PASS,
        vectorize.PASS,
        unroll.PASS,
        simplify_indexing.PASS,
        narrow_index.PASS,
        expand_math.PASS,
        lower_to_scf.PASS,
        lower_tensors.PASS,
    ]


def pass_names() -> list[str]:
    return ["emitted", *(p.name for p in heron_passes())]


__all__ = [
    "Dump",
    "Pass",
    "InvalidAfterPasses",
    "PassFailure",
    "PipelineOptions",
    "heron_passes",
    "pass_names",
    "run_passes",
    "run_upstream",
]
