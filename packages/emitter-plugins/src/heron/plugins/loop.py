"""The loop emitter: XLA's default hero emitter, for fusions with no special hero.

Every thread writes ``vector_size`` consecutive output elements (in the
output's physical order, so writes are coalesced and, after the pipeline's
vectorize pass, 4-wide where aligned). ``vector_size`` is XLA's loop unroll
factor (``heron.plugins.iteration.loop_unroll_factor``): 4 or 2 by the element
count once the output fills the target's resident threads, and a whole byte
for sub-byte outputs; a vector may span two rows. One ``heron_gpu.loop`` over
the thread-to-output map of ``heron.indexing.thread_maps`` (its range symbol
``vector_index`` is the element within a vector; its domain is the bounds
check), and in its body one
``pure_call`` per fusion root at that root's index and one ``tensor.insert``
per output. That is the seeds' GELU structure.

Multi-output fusions write every root in the same loop (up to
``OUTPUTS_WRITTEN_TOGETHER`` outputs a loop), each element's roots all
computed before any is stored, so that an output written over an input other
roots read (a donated optimizer state: copy insertion relies on it) is read
first. Roots may have
different shapes with the same element count (``mof_reshapes``): each
root's index is the first root's, linearised in the first root's layout and
delinearised in the root's own, so every root is walked in its physical
order. Outputs with different element counts are not a loop fusion, except
that outputs with zero elements are never written: beside other outputs they
are left out of the loop, and alone they get a kernel of one thread that
writes nothing (XLA launches none). This emitter is where heron handles
empty outputs; ``analyse_fusion`` sends every all-empty fusion here.

The emitter claims every fusion at priority 0: any specialised emitter
(transpose, reduction, ...) outranks it.
"""

from __future__ import annotations

from collections.abc import Sequence

from mlir import ir
from mlir.dialects import tensor

from heron.emitters import mlir_types
from heron.emitters.dialect import apply_indexing_op, loop_op
from heron.emitters.dialect.irdl_source import MAX_ITER_ARGS
from heron.emitters.emitter_base import EntryFunction, FusionEmitter, fusion_output_shapes
from heron.emitters.fusion_analysis import FusionAnalysis
from heron.emitters.hookspecs import EmitterSpec, hookimpl
from heron.hlo.errors import UnsupportedError
from heron.hlo.fusion_outputs import OUTPUTS_WRITTEN_TOGETHER
from heron.hlo.ir import Instruction
from heron.hlo.shapes import ArrayShape
from heron.indexing import Dim, IndexingError, IndexingMap, Interval, Variable, simplify
from heron.indexing.affine import AffineExpr, Constant
from heron.indexing.hlo_indexing import reshape_exprs
from heron.indexing.thread_maps import (
    LaunchDimensions,
    fusion_vectorization_limits,
    loop_thread_to_output_map,
)
from heron.plugins.iteration import loop_launch, loop_unroll_factor

__all__ = ["LoopEmitter", "heron_emitter_specs", "reindex_map"]

# A loop carries its outputs as iter_args: the promise copy insertion relies on must fit.
assert OUTPUTS_WRITTEN_TOGETHER <= MAX_ITER_ARGS


def reindex_map(source: ArrayShape, target: ArrayShape) -> IndexingMap:
    """``source`` index -> ``target`` index of the element at the same physical position.

    Both shapes have the same element count; the index is linearised in
    ``source``'s layout order and delinearised in ``target``'s.
    """
    source_order = source.major_to_minor
    target_order = target.major_to_minor
    physical = reshape_exprs(
        [Dim(d) for d in source_order],
        [source.dims[d] for d in source_order],
        [target.dims[d] for d in target_order],
    )
    results: list[AffineExpr] = [Constant(0)] * target.rank
    for position, d in enumerate(target_order):
        results[d] = physical[position]
    dimensions = tuple(
        Variable(f"d{i}", Interval(0, max(n, 1) - 1)) for i, n in enumerate(source.dims)
    )
    return simplify(IndexingMap(dimensions, tuple(results)))


def _same_iteration(a: ArrayShape, b: ArrayShape) -> bool:
    """Whether ``b`` is written at exactly ``a``'s index (same dims and same layout)."""
    if a.dims != b.dims:
        return False
    return a.rank <= 1 or a.minor_to_major == b.minor_to_major


class LoopEmitter(FusionEmitter):
    """One ``heron_gpu.loop`` over the (first) output, every root written in its body."""

    name = "loop"

    def __init__(self, analysis: FusionAnalysis) -> None:
        super().__init__(analysis)
        fusion = self.fusion
        outputs = fusion_output_shapes(fusion)
        if not outputs:
            raise UnsupportedError(
                f"fusion '{fusion.name}': the loop emitter needs an array output, the fusion"
                f" has shape {fusion.shape}",
                fusion.location,
            )
        for root, positions in zip(
            analysis.roots, analysis.output_positions, strict=True
        ):  # one root's outputs share a loop's iter_args
            if len(positions) > MAX_ITER_ARGS:
                raise UnsupportedError(
                    f"fusion '{fusion.name}': {len(positions)} outputs from its root"
                    f" '{root.name}' exceed a loop's {MAX_ITER_ARGS}",
                    fusion.location,
                )
        # The loop walks the first output with elements; empty outputs get no write.
        self.first = next((s for s in outputs if s.num_elements), outputs[0])
        counts = {shape.num_elements for shape in outputs} - {0} or {0}
        if len(counts) != 1:
            shapes = ", ".join(str(s) for s in outputs)
            raise UnsupportedError(
                f"fusion '{fusion.name}': a loop fusion's outputs must have the same number of"
                f" elements ({shapes})",
                fusion.location,
            )
        if self.first.num_elements == 0:
            # Nothing to write (analyse_fusion sends every fusion whose outputs are
            # all empty here): a kernel of one thread whose body does nothing.
            # XLA launches no kernel; a launch that does no work keeps the
            # compile -> image -> run path the same for every fusion.
            self._launch, self.vector_size, self.unroll = LaunchDimensions(1, 1), 1, 1
            return
        _, narrowest, may_vectorize = fusion_vectorization_limits(self.computation)
        # XLA's unroll factor: a device fact (resident threads) decides whether to
        # vectorise, the element count how wide (see heron.plugins.iteration).
        self.vector_size = loop_unroll_factor(
            self.first.num_elements,
            self.target,
            may_vectorize=may_vectorize,
            smallest_output_bits=narrowest,
        )
        self.unroll = 1
        try:
            self._launch = loop_launch(self.first.num_elements, self.vector_size, self.target)
        except IndexingError as exc:
            raise UnsupportedError(f"fusion '{fusion.name}': {exc}", fusion.location) from exc

    def launch_dimensions(self) -> LaunchDimensions:
        return self._launch

    def thread_map(self) -> IndexingMap:
        """``(th_x, bl_x[, bl_y])[vector_index?] -> first output index``, with the bounds check."""
        return loop_thread_to_output_map(
            self.first.dims,
            self._launch,
            self.vector_size,
            self.unroll,
            minor_to_major=self.first.minor_to_major,
        )

    def _writes(self) -> list[tuple[Instruction, list[int]]]:
        """(root, output positions of its leaves) in output order."""
        analysis = self.analysis
        shapes = fusion_output_shapes(self.fusion)
        return [
            (root, list(positions))
            for root, positions in zip(analysis.roots, analysis.output_positions, strict=True)
            if any(shapes[k].num_elements for k in positions)
        ]

    def emit_entry(self, entry: EntryFunction) -> list[ir.Value]:
        if self.first.num_elements == 0:
            return list(entry.outputs)  # zero elements: no loop, no write
        outputs = entry.output_shapes
        writes = self._writes()
        dims = [entry.thread_ids[0], *entry.block_ids]
        reindex: dict[tuple[int, ...], IndexingMap] = {}

        def indices_for(
            shape: ArrayShape, first_indices: Sequence[ir.Value], seen: dict
        ) -> list[ir.Value]:
            if _same_iteration(self.first, shape):
                return list(first_indices)
            key = (*shape.dims, -1, *shape.minor_to_major)
            if key not in seen:
                if key not in reindex:
                    reindex[key] = reindex_map(self.first, shape)
                seen[key] = list(apply_indexing_op(reindex[key], list(first_indices)).results)
            return seen[key]

        def body_for(chunk: list[tuple[Instruction, list[int]]]):
            slots = {k: n for n, k in enumerate(k for _, ks in chunk for k in ks)}

            def body(symbols, first_indices, iter_args):
                del symbols
                tensors = list(iter_args)
                seen: dict = {}
                # Every root of the element is computed before any is stored: an output
                # written over an input another root reads (a donated optimizer state)
                # is read first (OUTPUTS_WRITTEN_TOGETHER, which copy insertion relies on).
                computed = []
                for root, positions in chunk:
                    root_shape = outputs[positions[0]]
                    indices = indices_for(root_shape, first_indices, seen)
                    computed.append((positions, root_shape, indices, entry.value_of(root, indices)))
                for positions, root_shape, indices, values in computed:
                    for value, k in zip(values, positions, strict=True):
                        leaf = outputs[k]
                        leaf_indices = (
                            indices
                            if leaf.dims == root_shape.dims
                            else indices_for(leaf, first_indices, seen)
                        )
                        element = mlir_types.to_element(value, leaf.element_type)
                        tensors[slots[k]] = tensor.insert(element, tensors[slots[k]], leaf_indices)
                return tensors

            return body

        thread_map = self.thread_map()
        results = list(entry.outputs)
        for chunk in self._chunks(writes, entry):
            positions = [k for _, ks in chunk for k in ks]
            loop = loop_op(thread_map, dims, [results[k] for k in positions], body_for(chunk))
            for k, value in zip(positions, loop.results, strict=True):
                results[k] = value
        return results

    def _chunks(
        self, writes: list[tuple[Instruction, list[int]]], entry: EntryFunction
    ) -> list[list[tuple[Instruction, list[int]]]]:
        """The writes split into loops of at most ``OUTPUTS_WRITTEN_TOGETHER`` outputs each.

        One loop is what XLA emits; the dialect caps a loop's iter_args, so a
        fusion with more outputs (``mof_reshapes`` has 46) gets several loops
        over the same thread map, in output order (and copy insertion, told by
        ``OUTPUTS_WRITTEN_TOGETHER``, writes no output of such a fusion over an
        input another root reads).
        """
        chunks: list[list[tuple[Instruction, list[int]]]] = [[]]
        count = 0
        for root, positions in writes:  # each at most MAX_ITER_ARGS: the constructor says
            if count + len(positions) > OUTPUTS_WRITTEN_TOGETHER:
                chunks.append([])
                count = 0
            chunks[-1].append((root, positions))
            count += len(positions)
        return [chunk for chunk in chunks if chunk]


def _claims(analysis: object) -> bool:
    """Every fusion's analysis, whatever its kind: the loop emitter is the fallback.

    Only analyses are claimed, so that anything else still gets the registry's
    "no emitter" error.
    """
    return isinstance(analysis, FusionAnalysis)


@hookimpl
def heron_emitter_specs() -> list[EmitterSpec]:
    return [
        EmitterSpec(
            name="loop",
            priority=0,
            claims=_claims,
            factory=LoopEmitter,
            description="elementwise loop over the output (the default emitter)",
            refuses_when_built=True,
        )
    ]
