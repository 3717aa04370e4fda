"""The in-place dynamic-update-slice emitter: iterate over the update, write into the operand.

A dynamic-update-slice whose operand is a fusion parameter is emitted as XLA
does: the output *is* the operand's buffer (``output_aliases``), so the kernel
only writes the updated window. One ``heron_gpu.loop`` walks the update's
shape with the loop emitter's thread map; each thread reads the update at its
index, computes the start indices (clamped to ``[0, operand_dim -
update_dim]``, HLO's rule, so the window always lies inside) and inserts the
value at ``start + index``. Every element outside the window keeps the
operand's value because nobody writes it.

Several roots (multi-output) are written in the same loop; they must have
updates of one shape. A root may be a bitcast of the dynamic-update-slice:
the index is then re-linearised into the root's shape, as the bitcast does.
"""

from __future__ import annotations

import numpy as np
from mlir import ir
from mlir.dialects import tensor

from heron.emitters import mlir_types
from heron.emitters.dialect import apply_indexing_op, loop_op
from heron.emitters.emitter_base import (
    EntryFunction,
    FusionEmitter,
    fusion_output_shapes,
    same_buffer,
)
from heron.emitters.fusion_analysis import FusionAnalysis, claims_kind, dynamic_update_slice_of
from heron.emitters.hookspecs import EmitterSpec, hookimpl
from heron.hlo.errors import UnsupportedError
from heron.hlo.ir import Instruction
from heron.hlo.shapes import ArrayShape
from heron.indexing import IndexingMap, Interval, Variable
from heron.indexing.affine import AffineExpr, Dim
from heron.indexing.thread_maps import LaunchDimensions
from heron.partitioner.subgraph import leaf_shapes
from heron.plugins.iteration import (
    Iteration,
    Write,
    chunks,
    clamp_index,
    fusion_writes,
    loop_iteration,
)
from heron.plugins.loop import reindex_map

__all__ = ["DynamicUpdateSliceEmitter", "heron_emitter_specs"]

#: Operand numbers of dynamic-update-slice: the operand, the update, the first start index.
OPERAND, UPDATE, FIRST_INDEX = 0, 1, 2


class DynamicUpdateSliceEmitter(FusionEmitter):
    """One loop over the update; every root's window written in place."""

    name = "dynamic_update_slice"

    def __init__(self, analysis: FusionAnalysis) -> None:
        super().__init__(analysis)
        fusion = self.fusion
        self.writes: list[Write] = fusion_writes(analysis)
        outputs = fusion_output_shapes(fusion)
        self.dus: dict[int, Instruction] = {}
        for write in self.writes:
            dus = dynamic_update_slice_of(write.root)
            if dus is None or len(write.positions) != 1:
                raise UnsupportedError(
                    f"fusion '{fusion.name}': root {write.root.opcode} '{write.root.name}' is"
                    " not a dynamic-update-slice (or a bitcast of one)",
                    write.root.location,
                )
            self.dus[id(write.root)] = dus
        first = self.dus[id(self.writes[0].root)]
        self.update: ArrayShape = first.operands[UPDATE].shape
        for dus in self.dus.values():
            self._check(dus)
        self._aliases = {
            write.positions[0]: self._aliased_leaf(write.root, outputs[write.positions[0]])
            for write in self.writes
        }
        if len(set(self._aliases.values())) != len(self._aliases):
            raise UnsupportedError(
                f"fusion '{fusion.name}': two outputs update the same parameter in place",
                fusion.location,
            )
        # An empty update changes nothing: the output is the operand (in place), and
        # the kernel (one thread) writes nothing.
        self.empty = self.update.num_elements == 0
        if self.empty:
            self._launch = LaunchDimensions(1, 1)
            return
        try:
            self.iteration: Iteration = loop_iteration(self.update, self.computation, self.target)
        except Exception as exc:
            raise UnsupportedError(f"fusion '{fusion.name}': {exc}", fusion.location) from exc
        self._launch = self.iteration.launch

    def _check(self, dus: Instruction) -> None:
        update = dus.operands[UPDATE].shape
        if update.dims != self.update.dims:
            raise UnsupportedError(
                f"fusion '{self.fusion.name}': dynamic-update-slice '{dus.name}' has update"
                f" {update}, another root's is {self.update}; one loop walks both",
                dus.location,
            )
        for operand in dus.operands[FIRST_INDEX:]:
            if operand.shape.is_tuple or operand.shape.rank != 0:
                raise UnsupportedError(
                    f"fusion '{self.fusion.name}': dynamic-update-slice '{dus.name}' has start"
                    f" index operand '{operand.name}' of shape {operand.shape}; scalars expected",
                    dus.location,
                )

    def _aliased_leaf(self, root: Instruction, output: ArrayShape) -> int:
        """The parameter leaf whose buffer the root's output is: the operand of its DUS."""
        dus = self.dus[id(root)]
        param = dus.operands[OPERAND]
        # A bitcast moves no byte: XLA's fusions update a parameter laid out otherwise
        # through one (a scan's stacked outputs, batch-major in the loop's carry).
        while param.opcode == "bitcast":
            param = param.operands[0]
        if param.opcode != "parameter":
            raise UnsupportedError(
                f"fusion '{self.fusion.name}': dynamic-update-slice '{dus.name}' updates"
                f" {param.opcode} '{param.name}', not a fusion parameter (or a bitcast of"
                " one); it cannot be in place",
                dus.location,
            )
        if param.shape.is_tuple or not same_buffer(param.shape, output):
            raise UnsupportedError(
                f"fusion '{self.fusion.name}': output {output} of '{root.name}' cannot share"
                f" the buffer of parameter '{param.name}' ({param.shape})",
                dus.location,
            )
        leaf = 0
        for other in self.computation.parameters:
            if other is param:
                return leaf
            leaf += len(leaf_shapes(other.shape))
        raise UnsupportedError(
            f"'{param.name}' is not a parameter of fusion '{self.fusion.name}'", param.location
        )

    # -- FusionEmitter ------------------------------------------------------------------

    def launch_dimensions(self):
        return self._launch

    def heroes(self) -> tuple[Instruction, ...]:
        unique: list[Instruction] = []
        for dus in self.dus.values():
            if not any(dus is u for u in unique):
                unique.append(dus)
        return tuple(unique)

    def unemitted_heroes(self) -> tuple[Instruction, ...]:
        """With an empty update nothing reads the DUS elementally (its window is empty)."""
        return self.heroes() if self.empty else ()

    def output_aliases(self) -> dict[int, int]:
        return dict(self._aliases)

    def emit_entry(self, entry: EntryFunction) -> list[ir.Value]:
        if self.empty:
            return list(entry.outputs)
        dims = [entry.thread_ids[0], *entry.block_ids]
        results = list(entry.outputs)
        # Start indices are scalars, the same for every thread: read and clamp them once,
        # before the loop, so the loop body's stores stay provably vectorisable.
        starts = {id(dus): self._clamped_starts(entry, dus) for dus in self.heroes()}
        for group in chunks(self.writes, entry):
            positions = [k for write in group for k in write.positions]
            loop = loop_op(
                self.iteration.thread_map,
                dims,
                [results[k] for k in positions],
                self._body(entry, group, starts),
            )
            for k, value in zip(positions, loop.results, strict=True):
                results[k] = value
        return results

    def _body(self, entry: EntryFunction, group: list[Write], starts: dict):
        outputs = fusion_output_shapes(self.fusion)

        def body(symbols, update_indices, iter_args):
            del symbols
            tensors = list(iter_args)
            for n, write in enumerate(group):
                dus = self.dus[id(write.root)]
                window, operands = starts[id(dus)]
                indices = list(apply_indexing_op(window, [*update_indices, *operands]).results)
                root_shape = outputs[write.positions[0]]
                if root_shape.dims != dus.shape.dims or (
                    root_shape.rank > 1 and root_shape.minor_to_major != dus.shape.minor_to_major
                ):
                    bitcast = reindex_map(dus.shape, root_shape)
                    indices = list(apply_indexing_op(bitcast, indices).results)
                [value] = entry.value_of(dus.operands[UPDATE], list(update_indices))
                element = mlir_types.to_element(value, root_shape.element_type)
                tensors[n] = tensor.insert(element, tensors[n], indices)
            return tensors

        return body

    def _clamped_starts(
        self, entry: EntryFunction, dus: Instruction
    ) -> tuple[IndexingMap, list[ir.Value]]:
        """The window map ``update index -> clamp(start) + update index`` and its extra operands.

        A constant start is clamped here and becomes part of the map (``d0 + 3``),
        so the vectorize pass can see a store's alignment; a start read at run
        time is clamped in the kernel and is an extra dimension of the map whose
        range is the clamped one.
        """
        variables = [Variable(f"d{d}", Interval(0, n - 1)) for d, n in enumerate(self.update.dims)]
        operands: list[ir.Value] = []
        results: list[AffineExpr] = []
        for d, operand in enumerate(dus.operands[FIRST_INDEX:]):
            upper = dus.shape.dims[d] - self.update.dims[d]
            known = _constant_start(operand)
            if known is not None:
                results.append(Dim(d) + min(max(known, 0), upper))
                continue
            [start] = entry.value_of(operand, [])
            unsigned = operand.shape.element_type.is_unsigned_integral
            operands.append(clamp_index(start, upper, unsigned))
            variables.append(Variable(f"start{d}", Interval(0, upper)))
            results.append(Dim(d) + Dim(len(variables) - 1))
        return IndexingMap(tuple(variables), tuple(results)), operands


def _constant_start(operand: Instruction) -> int | None:
    """The value of a start index that is a scalar integer constant, else None."""
    if operand.opcode != "constant" or operand.literal is None:
        return None
    flat = np.asarray(operand.literal).reshape(-1)
    return int(flat[0]) if flat.size == 1 else None


@hookimpl
def heron_emitter_specs() -> list[EmitterSpec]:
    return [
        EmitterSpec(
            name="dynamic_update_slice",
            priority=10,
            claims=claims_kind("dynamic_update_slice"),
            factory=DynamicUpdateSliceEmitter,
            description="in-place dynamic-update-slice: a loop over the update",
            refuses_when_built=True,  # every limit is its constructor's
        )
    ]
