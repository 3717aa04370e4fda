"""Library GEMM fusion: each dot and what its library fuses, before any other fusion.

XLA:GPU's GEMM rewriter runs before its fusion passes: it turns a dot into a
cuBLASLt call and pulls in what cuBLASLt computes with it (a transposed
operand, alpha, a residual, a bias, RELU or GELU, and a GELU's argument as a
second output where something else reads it too), so that the fusion passes
never give those ops to another kernel first. This pass is that step on
heron's terms: for every dot the Target's library takes
(:func:`heron.compiler.library_gemm.match_gemm`), it makes the largest fusion
the library computes whole, trying smaller ones when the emitters refuse one
(heron's GEMM kernel stays the fallback and must emit it). The other passes
then leave these fusions as they are: :class:`~heron.compiler.fusion.fusible.
FusionChecker` refuses to add anything the library would not compute.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping

from heron.compiler.fusion.builder import install_fusion
from heron.compiler.fusion.context import FusionContext
from heron.compiler.fusion.graph import FusionGraph
from heron.compiler.library_gemm import (
    GemmMatch,
    dot_verdict,
    epilogue_members,
    match_gemm,
    target_features,
)
from heron.hlo.ir import Instruction, Module
from heron.hlo.passes.manager import HloPass
from heron.target import Target

__all__ = ["fuse_library_gemms", "gemm_fusion"]


def fuse_library_gemms(module: Module, target: Target) -> bool:
    """Give each library-typed dot of ``module``'s entry its library fusion."""
    if not target.gemm_library:
        return False
    features = target_features(target)
    context = FusionContext(module, target)
    computation = module.entry
    # One graph for the pass, kept current by each install: the users and the order of
    # the computation read from it cost what a query touches (read again from the whole
    # computation after each install, they took 5 s of a GPT-2 training step's compile).
    graph = FusionGraph(module, computation)
    users = _GraphUsers(graph)
    # Members are instructions the pass found (never a fusion it made), so a post-order
    # of the computation as it came orders them as one after any install would.
    order = {inst: n for n, inst in enumerate(computation.post_order())}
    changed = False
    for dot in [i for i in computation.instructions if i.opcode == "dot"]:
        if dot_verdict(dot, target):
            continue
        for members, outputs in epilogue_members(dot, users, features):
            ordered = sorted(members, key=order.__getitem__)
            made = context.candidate(ordered, outputs, consumer=outputs[0])
            if made is None:
                continue
            if not isinstance(match_gemm(made[0].body, target), GemmMatch):
                # a dot the library cannot read (an operand laid out column-major): the
                # checker lets heron's GEMM kernel take its epilogue, priority fusion's call
                made[0].discard()
                continue
            if not context.emits(made[0]):
                made[0].discard()
                continue
            install_fusion(module, computation, made[0], made[1].fusion_kind, graph)
            changed = True
            break
    if changed:
        graph.finish()  # the instruction order a post-order again
    return changed


class _GraphUsers(Mapping[Instruction, list[Instruction]]):
    """``computation.users()`` as the graph has it now: each user as often as it reads
    the instruction, in instruction order."""

    def __init__(self, graph: FusionGraph) -> None:
        self._graph = graph

    def __getitem__(self, inst: Instruction) -> list[Instruction]:
        if not self._graph.alive(inst):
            raise KeyError(inst.name)
        return [
            user for user in self._graph.users(inst) for operand in user.operands if operand is inst
        ]

    def __iter__(self) -> Iterator[Instruction]:
        return iter(list(self._graph.instructions()))

    def __len__(self) -> int:
        return len(self._graph.instructions())


def gemm_fusion(target: Target) -> HloPass:
    """The ``library-gemm-fusion`` pass for ``target``."""
    return HloPass(
        "library-gemm-fusion",
        lambda module: fuse_library_gemms(module, target),
        "each dot with what its GEMM library computes with it (XLA's GEMM rewriter)",
        entry_only=True,
    )
