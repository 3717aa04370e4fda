"""Which instructions every kernel sums in an order of its own: the one rule.

The reference evaluator sums in one order (a dot's products in index order,
a reduce's elements in a pairwise tree). Some instructions are never
computed in that order, whichever emitter or library computes them:

- a dot or a convolution (:data:`ORDER_FREE_OPCODES`): the GEMM emitter's
  tiles and MMA fragments, a library's split-K;
- one of heron's library custom calls
  (:func:`heron.hlo.custom_calls.library.library_call_target`): the library
  sums as it likes;
- a float cumulative sum or product the scan rewriter regroups into blocks
  (:func:`heron.compiler.scan_rewriter.scan_of`);
- an op a rewrite made to compute another in its own order
  (:func:`heron.hlo.determinism.regrouped`): the scan rewriter's blocks, the
  sum a dot with a vector side becomes (:mod:`heron.compiler.dot_strength_reduction`),
  which the reference computes as the dot (or the convolution the dot came from),
  and the scan a deterministic float scatter-add or -multiply combines its colliding
  updates in (:mod:`heron.hlo.passes.scatter_determinism_expander`), which the
  reference applies in order.

:func:`sums_in_its_own_order` says it of one instruction;
:func:`heron.compiler.driver.CompiledKernel.sums_in_its_own_order` of a
kernel (these, or a reduction emitter's own order), and
:func:`heron.harness.tolerance.output_tolerance` of an output (the
reassociation bounds apply to what these reach).
"""

from __future__ import annotations

from heron.compiler.scan_rewriter import scan_of
from heron.hlo.custom_calls.library import library_call_target
from heron.hlo.determinism import regrouped
from heron.hlo.ir import Computation, Instruction
from heron.hlo.passes.rewrite import computations_reached

__all__ = ["ORDER_FREE_OPCODES", "ordered_by_their_kernels", "sums_in_its_own_order"]

#: Ops whose every kernel sums in an order of its own (a dot's products, a
#: convolution's window).
ORDER_FREE_OPCODES = frozenset({"dot", "convolution"})


def sums_in_its_own_order(inst: Instruction) -> bool:
    """Whether every kernel (or library call) computing ``inst`` sums in an order of its
    own, never the reference's: see the module docstring."""
    return (
        inst.opcode in ORDER_FREE_OPCODES
        or bool(library_call_target(inst))
        or (_floating(inst) and regrouped(inst))
        or _regrouped_scan(inst)
    )


def ordered_by_their_kernels(computation: Computation) -> tuple[str, ...]:
    """The names of the instructions of ``computation`` (and of the computations it
    calls) that :func:`sums_in_its_own_order` names, in order."""
    found: list[str] = []
    for current in computations_reached([computation]):
        found.extend(inst.name for inst in current.instructions if sums_in_its_own_order(inst))
    return tuple(found)


def _regrouped_scan(inst: Instruction) -> bool:
    """A float sum or product scan the compiler will compute in blocks, in another order
    than the reference's (:func:`heron.compiler.scan_rewriter.scan_of`)."""
    if inst.opcode != "reduce-window" or not _floating(inst):
        return False
    found = scan_of(inst)
    return found is not None and found[2] in ("add", "multiply")


def _floating(inst: Instruction) -> bool:
    return all(leaf.element_type.is_floating for leaf in inst.shape.leaves())
