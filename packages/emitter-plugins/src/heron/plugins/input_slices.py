"""The input-slices emitter: several slice roots of one input, written in one pass over it.

A fusion whose roots are all slices of inputs of one shape (XLA's "input
fusible slices", e.g. splitting a fused computation's result into pieces) is
emitted as the loop emitter over the *input* rather than any output: each
thread computes the sliced value(s) at its input index once and, for every
slice whose window contains that index, stores it at the slice's output index
(``(index - start) / stride``) with a ``predicated_insert``. Input elements
no slice keeps are computed and dropped, as in XLA; each output element is
written exactly once.

Elements per thread: one, or enough sub-byte elements to fill a byte (XLA's
unroll factor for this emitter), since the predicated stores do not vectorise.
"""

from __future__ import annotations

import math

from mlir import ir
from mlir.dialects import arith, tensor

from heron.emitters import mlir_types
from heron.emitters.dialect import apply_indexing_op, loop_op, predicated_insert_op
from heron.emitters.emitter_base import EntryFunction, FusionEmitter, fusion_output_shapes
from heron.emitters.fusion_analysis import FusionAnalysis, claims_kind
from heron.emitters.hookspecs import EmitterSpec, hookimpl
from heron.hlo.attributes import SliceRange
from heron.hlo.errors import UnsupportedError
from heron.hlo.ir import Instruction
from heron.hlo.shapes import ArrayShape
from heron.indexing import IndexingMap, Interval, Variable
from heron.indexing.affine import AffineExpr, Dim
from heron.plugins.iteration import Iteration, Write, chunks, fusion_writes, index_constant
from heron.plugins.iteration import loop_iteration as iterate

__all__ = ["InputSlicesEmitter", "heron_emitter_specs"]


class InputSlicesEmitter(FusionEmitter):
    """One loop over the common input shape of the slice roots."""

    name = "input_slices"

    def __init__(self, analysis: FusionAnalysis) -> None:
        super().__init__(analysis)
        fusion = self.fusion
        self.writes: list[Write] = fusion_writes(analysis)
        for write in self.writes:
            if write.root.opcode != "slice":
                raise UnsupportedError(
                    f"fusion '{fusion.name}': root {write.root.opcode} '{write.root.name}' is"
                    " not a slice; the input_slices emitter writes slices only",
                    write.root.location,
                )
        self.input: ArrayShape = self.writes[0].root.operands[0].shape
        for write in self.writes[1:]:
            shape = write.root.operands[0].shape
            if shape.dims != self.input.dims:
                raise UnsupportedError(
                    f"fusion '{fusion.name}': slice '{write.root.name}' reads {shape}, but"
                    f" '{self.writes[0].root.name}' reads {self.input}; the slices must share"
                    " one input shape",
                    write.root.location,
                )
        narrowest = min(shape.element_type.bit_width for shape in fusion_output_shapes(fusion))
        per_byte = math.ceil(8 / narrowest) if narrowest < 8 else 1
        minor = self.input.dims[self.input.major_to_minor[-1]] if self.input.dims else 1
        vector = per_byte if minor % per_byte == 0 else 1
        try:
            self.iteration: Iteration = iterate(
                self.input, self.computation, self.target, vector_size=vector
            )
        except Exception as exc:
            raise UnsupportedError(f"fusion '{fusion.name}': {exc}", fusion.location) from exc

    def launch_dimensions(self):
        return self.iteration.launch

    def heroes(self) -> tuple[Instruction, ...]:
        # The slices are emitted here, not as functions: as heroes, their operands
        # become the functions the loop calls at the input index.
        return tuple(write.root for write in self.writes)

    def emit_entry(self, entry: EntryFunction) -> list[ir.Value]:
        dims = [entry.thread_ids[0], *entry.block_ids]
        results = list(entry.outputs)
        for group in chunks(self.writes, entry):
            positions = [k for write in group for k in write.positions]
            loop = loop_op(
                self.iteration.thread_map,
                dims,
                [results[k] for k in positions],
                self._body(entry, group),
            )
            for k, value in zip(positions, loop.results, strict=True):
                results[k] = value
        return results

    def _body(self, entry: EntryFunction, group: list[Write]):
        outputs = fusion_output_shapes(self.fusion)

        def body(symbols, input_indices, iter_args):
            del symbols
            indices = list(input_indices)
            tensors = list(iter_args)
            # Every sliced value first (each input once), then the predicated stores.
            values = [entry.value_of(w.root.operands[0], indices)[0] for w in group]
            for n, (write, value) in enumerate(zip(group, values, strict=True)):
                ranges: tuple[SliceRange, ...] = write.root.attributes["slice"]
                output = outputs[write.positions[0]]
                where = list(apply_indexing_op(_slice_map(self.input, ranges), indices).results)
                element = mlir_types.to_element(value, output.element_type)
                condition = _inside(indices, ranges, self.input)
                if condition is None:
                    tensors[n] = tensor.insert(element, tensors[n], where)
                else:
                    op = predicated_insert_op(condition, element, tensors[n], where)
                    tensors[n] = op.results[0]
            return tensors

        return body


def _slice_map(input_shape: ArrayShape, ranges: tuple[SliceRange, ...]) -> IndexingMap:
    """Input index -> the slice's output index ``(index - start) floordiv stride``."""
    variables = tuple(Variable(f"d{d}", Interval(0, n - 1)) for d, n in enumerate(input_shape.dims))
    results: list[AffineExpr] = []
    for d, r in enumerate(ranges):
        shifted = Dim(d) - r.start
        results.append(shifted // r.stride if r.stride > 1 else shifted)
    return IndexingMap(variables, tuple(results))


def _inside(
    indices: list[ir.Value], ranges: tuple[SliceRange, ...], input_shape: ArrayShape
) -> ir.Value | None:
    """Whether the input index lies in the slice's window (None: always, no test needed)."""
    conditions: list[ir.Value] = []
    for d, (index, r) in enumerate(zip(indices, ranges, strict=True)):
        last = r.start + ((r.limit - r.start - 1) // r.stride) * r.stride  # last index kept
        if r.start > 0:
            conditions.append(_compare("sge", index, r.start))
        if last < input_shape.dims[d] - 1:
            conditions.append(_compare("sle", index, last))
        if r.stride > 1:
            offset = arith.subi(index, index_constant(r.start))
            remainder = arith.remsi(offset, index_constant(r.stride))
            conditions.append(_compare("eq", remainder, 0))
    if not conditions:
        return None
    result = conditions[0]
    for condition in conditions[1:]:
        result = arith.andi(result, condition)
    return result


def _compare(predicate: str, value: ir.Value, bound: int) -> ir.Value:
    kind = getattr(arith.CmpIPredicate, predicate)
    return arith.cmpi(kind, value, index_constant(bound))


@hookimpl
def heron_emitter_specs() -> list[EmitterSpec]:
    return [
        EmitterSpec(
            name="input_slices",
            priority=10,
            claims=claims_kind("input_slices"),
            factory=InputSlicesEmitter,
            description="slice roots of one input, written in one loop over the input",
            refuses_when_built=True,  # every limit is its constructor's
        )
    ]
