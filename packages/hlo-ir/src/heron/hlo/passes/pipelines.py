"""The target-independent pipeline a module as JAX prints it goes through first.

The order follows XLA's ``OptimizeHloModule``: inline calls first (everything
after sees one flat graph per computation), then simplify to a fixed point,
since each rewrite exposes work for the others (a folded constant decides a
conditional, whose branch becomes a call to inline; a merged constant makes a
tuple element identical; an eliminated tuple leaves dead code). Layouts come
last, as in XLA: every shape gets one, reshapes that move no byte become
bitcasts and layout-changing copies become transposes, and a last round of
simplification folds the bitcast chains that leaves.
"""

from __future__ import annotations

from collections.abc import Sequence

from heron.hlo.passes import (
    algebraic_simplifier,
    async_to_sync,
    call_inliner,
    conditional_simplifier,
    convolution_to_dot,
    copy_insertion,
    cse,
    dce,
    dot_decomposer,
    dot_merger,
    flatten_call_graph,
    layouts,
    one_device_collectives,
    optimization_barrier_expander,
    rng_bit_generator_expander,
    scatter_determinism_expander,
    scheduler,
    select_and_scatter_expander,
    sharding_remover,
    stable_sort_expander,
    topk_decomposer,
    tuple_simplifier,
    while_loop_constant_sinking,
    while_loop_simplifier,
    xla_library_calls,
)
from heron.hlo.passes.manager import FixedPoint, HloPass, Pipeline
from heron.hlo.passes.registry import pass_named

__all__ = ["layout_pipeline", "simplification_pipeline"]

# The modules above register their passes when imported; name them so the
# imports are visibly needed.
_REGISTERING = (
    algebraic_simplifier,
    async_to_sync,
    call_inliner,
    conditional_simplifier,
    convolution_to_dot,
    copy_insertion,
    cse,
    dce,
    dot_decomposer,
    dot_merger,
    flatten_call_graph,
    layouts,
    one_device_collectives,
    optimization_barrier_expander,
    rng_bit_generator_expander,
    scatter_determinism_expander,
    scheduler,
    select_and_scatter_expander,
    sharding_remover,
    stable_sort_expander,
    topk_decomposer,
    tuple_simplifier,
    while_loop_constant_sinking,
    while_loop_simplifier,
    xla_library_calls,
)


def simplification_pipeline(
    *,
    deterministic: bool = False,
    before_dots: Sequence[HloPass] = (),
    before_layout: Sequence[HloPass] = (),
    layouts: bool = True,
) -> Pipeline:
    """Remove sharding annotations (one device), make async pairs calls, simplify the
    collectives of a one-device program away, inline calls (then
    give each loop body, condition and branch one caller), remove optimization barriers,
    expand rng-bit-generators,
    decompose topk, expand stable sorts and select-and-scatter, lower convolutions to dots, run
    ``before_dots`` (a target's rewrites of dots as the program has them: the GPU
    pipeline's dot strength reduction), canonicalise dots; then simplify to a
    fixed point, run ``before_layout`` (a target's rewrites that read the simplified graph
    before it has layouts: the GPU pipeline's fused attention and its dot merger), and
    assign layouts (unless ``layouts`` is False: what a report of those rewrites' verdicts
    reads).
    ``deterministic`` (``--deterministic``, XLA's ``--xla_gpu_deterministic_ops``)
    also rewrites the scatters whose result depends on the order of their updates
    (``scatter-determinism-expander``)."""
    determinism = (pass_named("scatter-determinism-expander"),) if deterministic else ()
    return Pipeline(
        "simplification",
        (
            pass_named("sharding-remover"),
            pass_named("async-to-sync"),
            pass_named("one-device-collectives"),
            pass_named("call-inliner"),
            pass_named("flatten-call-graph"),
            pass_named("optimization-barrier-expander"),
            pass_named("rng-bit-generator-expander"),
            pass_named("topk-decomposer"),
            pass_named("stable-sort-expander"),
            pass_named("select-and-scatter-expander"),
            *determinism,
            pass_named("convolution-to-dot"),
            *before_dots,
            pass_named("dot-decomposer"),
            FixedPoint(
                "simplify",
                (
                    pass_named("algebraic-simplifier"),
                    pass_named("conditional-simplifier"),
                    pass_named("while-loop-constant-sinking"),
                    pass_named("while-loop-simplifier"),
                    pass_named("call-inliner"),
                    pass_named("flatten-call-graph"),
                    pass_named("tuple-simplifier"),
                    pass_named("hlo-dce"),
                    pass_named("hlo-cse"),
                ),
                verify_each_pass=False,  # verified when it converges (XLA's debug checker)
            ),
            *before_layout,
            *((layout_pipeline(),) if layouts else ()),
        ),
    )


def layout_pipeline() -> Pipeline:
    """Layout assignment, reshapes that move no byte as bitcasts, layout-changing copies as
    transposes, and the simplification that folds the bitcast chains that leaves."""
    return Pipeline(
        "layout",
        (
            pass_named("layout-assignment"),
            pass_named("reshape-decomposer"),
            pass_named("layout-normalization"),
            FixedPoint(
                "cleanup",
                (
                    pass_named("algebraic-simplifier"),
                    pass_named("hlo-dce"),
                    pass_named("hlo-cse"),
                ),
                verify_each_pass=False,
            ),
        ),
    )
