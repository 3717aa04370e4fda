"""The GPU fusion passes: from an unfused module to the fusions heron's emitters compile.

One module per pass, each a factory taking the Target and returning an
:class:`~heron.hlo.passes.HloPass`:

- :mod:`heron.compiler.library_gemm_fp8`: fp8 and s8 dots' operands laid out as
  cuBLASLt reads them (XLA's "TN" transposes);
- :mod:`.gemm_fusion`: each dot with what its GEMM library computes with it;
- :mod:`.priority_fusion`: producers into all their consumers, by time saved;
- :mod:`.multi_output_fusion`: sibling and producer-consumer multi-output fusion;
- :mod:`.horizontal_fusion`: small independent loop fusions into one kernel;
- :mod:`.wrapper`: a fusion for every computing instruction left alone;
- :mod:`.fusion_cse`: identical fusions merged;

and their shared parts: :mod:`.builder` (making and installing fusions),
:mod:`.fusible` (what may be fused; the emitters' verdict),
:mod:`.cost_model` (the price of a kernel), :mod:`.pair_key` and :mod:`.pair_price`
(a producer-consumer pair told and priced without building it), :mod:`.reachability` (cycle checks),
:mod:`.graph` (users and names kept current while installing), :mod:`.context`.
:func:`gpu_pipeline` is the whole program pipeline
(``heron opt --target``), :func:`program_pipeline` what ``heron run`` puts a
module through (fused modules keep their fusions); :func:`register_gpu_passes` puts the
passes, for the default Target, in the registry ``heron opt --passes`` reads.
"""

from __future__ import annotations

from collections.abc import Callable

from heron.compiler.dot_strength_reduction import dot_strength_reduction
from heron.compiler.fusion.context import count_kernels
from heron.compiler.fusion.fusion_cse import fusion_cse
from heron.compiler.fusion.gemm_fusion import gemm_fusion
from heron.compiler.fusion.horizontal_fusion import horizontal_fusion
from heron.compiler.fusion.multi_output_fusion import multi_output_fusion
from heron.compiler.fusion.priority_fusion import priority_fusion
from heron.compiler.fusion.transpose_bitcast import transpose_bitcast
from heron.compiler.fusion.wrapper import fusion_wrapper
from heron.compiler.library_attention import library_attention_rewriter
from heron.compiler.library_attention_backward import library_attention_backward_rewriter
from heron.compiler.library_attention_pairing import library_attention_pairing
from heron.compiler.library_convolution import library_convolution_rewriter
from heron.compiler.library_convolution_fusion import library_convolution_fusion
from heron.compiler.library_fft import fft_rewriter
from heron.compiler.library_gemm_fp8 import operand_layout
from heron.compiler.library_triangular_solve import triangular_solve_rewriter
from heron.compiler.reduction_splitter import reduction_splitter
from heron.compiler.scan_rewriter import scan_rewriter
from heron.compiler.topk_library import topk_library
from heron.compiler.tree_reduction import tree_reduction_rewriter
from heron.hlo.ir import Module
from heron.hlo.passes import PASSES, HloPass, Pipeline, pass_named, register_pass
from heron.hlo.passes.pipelines import simplification_pipeline
from heron.target import Target

__all__ = [
    "GPU_PASSES",
    "count_kernels",
    "fusion_pipeline",
    "gpu_pass",
    "gpu_pipeline",
    "is_fused",
    "program_pipeline",
    "register_gpu_passes",
]

#: The GPU passes by name, each a factory of the pass for a Target.
GPU_PASSES: dict[str, Callable[[Target], HloPass]] = {
    "library-convolution-rewriter": library_convolution_rewriter,
    "triangular-solve-rewriter": triangular_solve_rewriter,
    "fft-rewriter": fft_rewriter,
    "dot-strength-reduction": dot_strength_reduction,
    "library-attention-rewriter": library_attention_rewriter,
    "library-attention-backward-rewriter": library_attention_backward_rewriter,
    "library-attention-pairing": library_attention_pairing,
    "library-convolution-fusion": library_convolution_fusion,
    "scan-rewriter": scan_rewriter,
    "reduction-splitter": reduction_splitter,
    "tree-reduction-rewriter": tree_reduction_rewriter,
    "library-gemm-operand-layout": operand_layout,
    "library-gemm-fusion": gemm_fusion,
    "transpose-bitcast": transpose_bitcast,
    "priority-fusion": priority_fusion,
    "multi-output-fusion": multi_output_fusion,
    "horizontal-fusion": horizontal_fusion,
    "fusion-wrapper": fusion_wrapper,
    "fusion-cse": fusion_cse,
    "topk-library": topk_library,
}


def fusion_pipeline(target: Target) -> Pipeline:
    """Library GEMMs (their operands laid out as the library reads them first), the
    transposes no kernel reads that move no byte made bitcasts (their chains folded),
    priority, multi-output and horizontal fusion, the wrapper, then CSE and DCE; the
    module verified once at the end (XLA's fusion pipeline checks after each pass in
    debug builds only: ``HERON_VERIFY_EACH_PASS=1``)."""
    return Pipeline(
        "fusion",
        (
            operand_layout(target),
            gemm_fusion(target),
            transpose_bitcast(target),
            pass_named("algebraic-simplifier"),
            pass_named("hlo-dce"),
            priority_fusion(target),
            fusion_cse(target),
            multi_output_fusion(target),
            fusion_wrapper(target),
            horizontal_fusion(target),
            fusion_cse(target),
            pass_named("hlo-dce"),
        ),
        verify_each_pass=False,
    )


def gpu_pipeline(target: Target, *, deterministic: bool = False) -> Pipeline:
    """The program pipeline for ``target``: XLA's library calls as heron's
    (``xla-library-calls``: a module XLA optimized), the convolutions its DNN library takes, the
    triangular solves and the FFTs made library calls, simplification (the dots with a
    vector side made multiplies and reduces before dots are canonicalised; before layouts, the
    attention its fused-attention library takes made one call, a training step's forward
    and backward calls paired, the convolutions' bias and ReLU made part of their
    calls, and dots that share an operand merged), scans in log depth, the reductions
    too long for one block split in two, then fusion (``deterministic``: see
    :func:`heron.hlo.passes.simplification_pipeline`)."""
    return Pipeline(
        "gpu",
        (
            pass_named("xla-library-calls"),
            library_convolution_rewriter(target),
            triangular_solve_rewriter(target),
            fft_rewriter(target),
            simplification_pipeline(
                deterministic=deterministic,
                before_dots=(dot_strength_reduction(target),),
                before_layout=(
                    library_attention_backward_rewriter(target),
                    library_attention_rewriter(target),
                    library_attention_pairing(target),
                    library_convolution_fusion(target),
                    # XLA's DotMerger (after its simplification, before its attention
                    # rewriter): here after the library rewriters, which match the dots
                    # as the program wrote them
                    pass_named("dot-merger"),
                ),
            ),
            scan_rewriter(target),
            reduction_splitter(target),
            tree_reduction_rewriter(target),
            fusion_pipeline(target),
        ),
    )


def is_fused(module: Module) -> bool:
    """Whether ``module``'s entry already holds fusions (an optimized module, as XLA dumps it)."""
    return any(inst.opcode == "fusion" for inst in module.entry.instructions)


def program_pipeline(module: Module, target: Target, *, deterministic: bool = False) -> Pipeline:
    """What a module goes through before it runs: the GPU pipeline when it is not fused yet.

    An optimized module (XLA's ``after_optimizations`` dump, a corpus fusion)
    keeps its fusions: XLA's library calls become heron's (``xla-library-calls``),
    its triangular solves and FFTs library calls (XLA keeps ``fft`` an instruction
    of its own, run by cuFFT), it is simplified outside them, and what
    computes outside a fusion gets one of its own (:mod:`.wrapper`), nothing is
    fused further.
    """
    if not is_fused(module):
        return gpu_pipeline(target, deterministic=deterministic)
    return Pipeline(
        "fused-module",
        (
            pass_named("xla-library-calls"),
            triangular_solve_rewriter(target),
            fft_rewriter(target),
            simplification_pipeline(deterministic=deterministic),
            fusion_wrapper(target),
        ),
    )


def gpu_pass(name: str, target: Target) -> HloPass:
    """Pass ``name`` for ``target``: a GPU pass made for it, else the registered pass."""
    factory = GPU_PASSES.get(name)
    return factory(target) if factory is not None else pass_named(name)


def register_gpu_passes(target: Target) -> None:
    """Register the GPU passes for ``target`` (once; ``heron opt --list-passes`` shows them)."""
    for name, factory in GPU_PASSES.items():
        if name not in PASSES:
            register_pass(factory(target))
