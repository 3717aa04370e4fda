"""The ``narrow-index-types`` pass: index arithmetic in ``i32`` wherever its ranges allow.

GPU index math is 64-bit by default (``index`` lowers to i64), and 64-bit
integer multiplies cost several instructions on NVIDIA and AMD hardware. Most
kernels never address more than 2^31 elements, and the ranges are known:
``gpu.thread_id``/``block_id`` carry ``upper_bound``, ``scf.for`` loops have
constant bounds, and simplify-indexing left plain ``arith`` on ``index``.
Upstream ``arith-int-range-narrowing`` runs integer range analysis over
exactly that and rewrites every op whose operands and result fit in 32 bits
into i32 (with ``index_castui`` at the edges); a tensor with more than 2^31
elements keeps its 64-bit math because its ranges do not fit. ``canonicalize``
and ``cse`` then fold the casts it introduced and share duplicates.
"""

from __future__ import annotations

from mlir import ir

from heron.emitters.pipeline.manager import Pass, PipelineOptions, run_upstream

NARROWING = "builtin.module(arith-int-range-narrowing{int-bitwidths-supported=32},canonicalize,cse)"


def run(module: ir.Module, options: PipelineOptions) -> None:
    """Narrow the module's index arithmetic (upstream pass; see the module docstring)."""
    run_upstream(module, NARROWING)


PASS = Pass(
    name="narrow-index-types",
    run=run,
    description="index arithmetic in i32 where ranges fit (upstream arith-int-range-narrowing)",
)
