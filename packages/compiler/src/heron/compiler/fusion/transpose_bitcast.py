"""Transposes handed on as buffers that move no byte: bitcasts, not kernels.

JAX often lays a transpose's result out so that it is its operand's own bytes
(``f32[32,48]{1,0}`` transposed to ``f32[48,32]{0,1}``:
:func:`heron.hlo.passes.layouts.transpose_is_bitcast`). XLA's layout-sensitive
simplifier makes every such transpose a bitcast. heron keeps JAX's layouts
inside computations, and its emitters read a transposed value through the
transpose at no cost, so a transpose that a kernel reads stays, to be fused
into that kernel as before. The others, whose value leaves as a buffer (a
program's output, a loop's or a branch's operand, a library call's), would be
a kernel of their own that only copies: they become bitcasts, and where the
value is an output the executable copies the buffer (a device memcpy), as
XLA does.

The pass runs in the fusion pipeline after the library GEMM passes, which read
such a transpose as a transposed operand, and before priority fusion; the
algebraic simplifier after it folds the bitcast chains it leaves.
"""

from __future__ import annotations

from heron.compiler.fusion.fusible import is_fusible_consumer
from heron.hlo.ir import Instruction, Module
from heron.hlo.passes.layouts import transpose_is_bitcast
from heron.hlo.passes.manager import HloPass
from heron.hlo.passes.rewrite import (
    Inserter,
    module_names,
    non_fusion_computations,
    remove_instructions,
)
from heron.hlo.shapes import ArrayShape
from heron.target import Target

__all__ = ["transpose_bitcast", "transposes_as_bitcasts"]


def transposes_as_bitcasts(module: Module) -> bool:
    """Make each transpose of ``module`` (fused computations aside) that moves no byte and
    that no kernel reads a bitcast; True if any changed."""
    names = module_names(module)
    changed = False
    for computation in non_fusion_computations(module):
        inserter, removed = Inserter(computation, names), []
        for transpose in [i for i in computation.instructions if i.opcode == "transpose"]:
            if not _moves_no_byte(transpose):
                continue
            if any(is_fusible_consumer(user) for user in inserter.uses.users(transpose)):
                continue  # read by a kernel: fused into it, at no cost
            bitcast = inserter.add("bitcast", transpose.shape, transpose.operands, like=transpose)
            inserter.replace(transpose, bitcast)
            removed.append(transpose)
            changed = True
        remove_instructions(computation, removed)
    return changed


def _moves_no_byte(transpose: Instruction) -> bool:
    source, target = transpose.operands[0].shape, transpose.shape
    return (
        isinstance(source, ArrayShape)
        and isinstance(target, ArrayShape)
        and source.layout is not None
        and target.layout is not None
        and transpose_is_bitcast(transpose)
    )


def transpose_bitcast(target: Target) -> HloPass:
    """The ``transpose-bitcast`` pass (the same for every Target)."""
    return HloPass(
        "transpose-bitcast",
        transposes_as_bitcasts,
        "transposes no kernel reads that move no byte as bitcasts",
    )
