"""The top-k library kernel: heron's top-k built once, for rows of any length and number.

The top-k emitter's algorithm (:mod:`heron.plugins.topk`: the keys, the per-thread
lists, the merge rounds) with the row length read from an argument at run time and one
block per row of the grid it is launched on, so that one compiled kernel serves every
shape of one element type, ``k``, order and thread count: the fusion
:class:`heron.emitters.library_kernels.TopkRowsKernel` describes (a ``heron$topk_rows``
call; XLA's counterpart is its precompiled ``__gpu$TopK``).
:mod:`heron.compiler.library_kernels` builds it once and launches it for a program's
top-k fusions. The fusion's shapes are upper bounds: the emitter is shape-generic
(``FusionEmitter.shape_generic``), so its arguments get no ``dereferenceable`` size, it
declares no grid, and a device binds each argument at its buffer's size.
"""

from __future__ import annotations

from mlir import ir
from mlir.dialects import arith

from heron.emitters.emitter_base import EntryFunction, FusionEmitter
from heron.emitters.fusion_analysis import FusionAnalysis
from heron.emitters.hookspecs import EmitterSpec, hookimpl
from heron.emitters.ir_utils import index_constant
from heron.emitters.library_kernels import MAX_ROWS, ROWS_BOUND, TOPK_ROWS_TARGET, TopkRowsKernel
from heron.hlo.errors import UnsupportedError
from heron.hlo.ir import Instruction
from heron.indexing.thread_maps import LaunchDimensions
from heron.plugins.topk import MAX_K, TopkEmitter, TopkPlan, check_shared_memory

__all__ = ["TopkRowsEmitter", "heron_emitter_specs"]


def _kernel_of(call: Instruction) -> TopkRowsKernel:
    """The kernel a ``heron$topk_rows`` call describes (its ``k``, ``largest`` and
    ``opaque="threads=T"``), or an error naming what is wrong."""
    where = f"custom-call '{call.name}' ({TOPK_ROWS_TARGET})"
    element = call.operands[0].array_shape.element_type
    opaque = call.attributes.get("opaque")
    text = str(getattr(opaque, "text", ""))
    name, _, value = text.partition("=")
    if name != "threads" or not value.isdigit():
        raise UnsupportedError(f'{where}: needs opaque="threads=T", not {text!r}', call.location)
    kernel = TopkRowsKernel(
        element, int(call.attr("k")), bool(call.attributes.get("largest", True)), int(value)
    )
    threads = kernel.threads
    if not 1 <= kernel.k <= MAX_K or threads < 1 or threads & (threads - 1):
        raise UnsupportedError(
            f"{where}: k={kernel.k} (1 to {MAX_K}) and {threads} threads (a power of two)",
            call.location,
        )
    return kernel


def _claims(analysis: object) -> bool:
    """Fusions whose one root is a ``heron$topk_rows`` call."""
    if not isinstance(analysis, FusionAnalysis) or len(analysis.roots) != 1:
        return False
    root = analysis.roots[0]
    target = root.attributes.get("custom_call_target")
    return root.opcode == "custom-call" and getattr(target, "text", None) == TOPK_ROWS_TARGET


class TopkRowsEmitter(TopkEmitter):
    """The top-k emitter's kernel with the row length and the row count left to run time."""

    name = "topk_rows"
    shape_generic = True

    def __init__(self, analysis: FusionAnalysis) -> None:
        FusionEmitter.__init__(self, analysis)
        self.call = self.only_root("custom-call")
        self.operand, self.length = self.call.operands
        self.element = self.operand.array_shape.element_type
        self.kernel = _kernel_of(self.call)
        kernel = self.kernel
        self.plan = TopkPlan(
            ROWS_BOUND, MAX_ROWS, kernel.k, kernel.threads, kernel.key_width, kernel.largest
        )
        check_shared_memory(self.plan, self.target, f"{TOPK_ROWS_TARGET} {kernel.name}", self.call)
        self.empty = False

    def launch_dimensions(self) -> LaunchDimensions:
        """The largest launch: a block per row, up to ``MAX_ROWS`` (launched with fewer)."""
        return LaunchDimensions(block_x=MAX_ROWS, thread_x=self.plan.threads)

    def heroes(self) -> tuple[Instruction, ...]:
        return (self.call,)

    def unemitted_heroes(self) -> tuple[Instruction, ...]:
        return (self.call,)

    def emit_entry(self, entry: EntryFunction) -> list[ir.Value]:
        # The row length, read once at the kernel's start.
        (length,) = entry.value_of(self.length, [index_constant(0)])
        self._length = arith.index_cast(ir.IndexType.get(), length)
        return super().emit_entry(entry)

    def _row_prefix(self, row: ir.Value) -> list[ir.Value]:
        return [row]

    def _trips(self, entry: EntryFunction) -> ir.Value:
        """``ceil(n / T)``: the row length is an argument."""
        threads = index_constant(self.plan.threads)
        padded = arith.addi(self._length, index_constant(self.plan.threads - 1))
        return arith.divui(padded, threads)

    def _row_end(self, entry: EntryFunction) -> ir.Value:
        return self._length

    def _read(self, entry: EntryFunction, position: ir.Value) -> ir.Value:
        (row,) = self._row
        start = arith.muli(row, self._length)
        (value,) = entry.value_of(self.operand, [arith.addi(start, position)])
        return value

    def _output_index(self, j: int) -> list[ir.Value]:
        (row,) = self._row
        return [arith.addi(arith.muli(row, index_constant(self.plan.k)), index_constant(j))]


@hookimpl
def heron_emitter_specs() -> list[EmitterSpec]:
    return [
        EmitterSpec(
            name="topk_rows",
            priority=10,
            claims=_claims,
            factory=TopkRowsEmitter,
            description="heron$topk_rows: the top-k library kernel, for rows of any length",
            refuses_when_built=True,
        )
    ]
