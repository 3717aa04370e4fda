"""Fusions analysed for a target, as hero emitters are built from them in tests.

An emitter is built from a fusion's analysis (``FusionEmitter(analysis)``);
tests that build one directly analyse the fusion first, for the H100 preset
unless they say otherwise, and compile its kernel with the one compile
driver (``compile_everywhere``).
"""

from __future__ import annotations

from collections.abc import Callable

from heron.compiler import CompiledKernel, compile_emitted
from heron.emitters.emitter_base import FusionEmitter
from heron.emitters.fusion_analysis import FusionAnalysis, analyse_fusion
from heron.hlo.ir import Instruction
from heron.target import Target

__all__ = ["A100", "H100", "MI300X", "analysed", "artefact_text", "compile_everywhere"]

#: The default targets of the two backends (32-lane warps; 64-lane wavefronts),
#: and the A100 (sm_80, fewer SMs).
H100 = Target.preset("h100")
MI300X = Target.preset("mi300x")
A100 = Target.preset("a100")


def analysed(fusion: Instruction, target: Target = H100) -> FusionAnalysis:
    """``fusion``'s analysis for ``target`` (H100 by default)."""
    return analyse_fusion(fusion, target)


def compile_everywhere(
    build: Callable[[FusionAnalysis], FusionEmitter], fusion: Instruction
) -> list[CompiledKernel]:
    """``build(analysis)``'s kernel for ``fusion``, compiled for A100, H100 and MI300X.

    Every backend stage runs (PTX and, with ptxas, a cubin; an HSACO the ROCm
    backend checks is AMDGPU); each compile ends in an image a device loads.
    """
    compiled = []
    for target in (A100, H100, MI300X):
        kernel = compile_emitted(build(analysed(fusion, target)).emit(), target)
        skipped = [r for r in kernel.skipped if r.name != "cubin"]  # ptxas is optional
        assert not skipped, skipped
        assert kernel.image is not None, f"{target.name}: no kernel image"
        compiled.append(kernel)
    return compiled


def artefact_text(kernel: CompiledKernel, stage: str) -> str:
    """The text a stage of ``kernel``'s compile made (``"ptx"``, ``"llvm-ir"``...)."""
    for artefact in kernel.artefacts:
        if artefact.stage == stage:
            return artefact.data.decode()
    made = ", ".join(a.stage for a in kernel.artefacts) or "none"
    raise KeyError(f"no {stage!r} artefact (the compile made: {made})")
