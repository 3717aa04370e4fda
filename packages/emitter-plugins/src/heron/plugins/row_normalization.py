"""The row-resident normalisation emitter: softmax, log-softmax, layer and RMS norm in one kernel.

XLA:GPU gives a normalisation (a row reduction whose result is broadcast back
along the row and combined with the row again, possibly several times:
``max -> exp(x - max) -> sum -> divide``; ``mean -> variance -> (x - mean) *
rsqrt(var) * gamma + beta``) to its Triton "softmax" emitter: one kernel, a
row kept on chip across its reductions. heron's own passes would otherwise make
one reduction kernel per dependent reduction plus a loop kernel re-reading the
row. This emitter takes the whole chain as one fusion:

- **Which fusions.** ``describe_row_normalization(analysis)`` decides, once per
  analysis: XLA's kind is ``loop`` (no root has a reduction hero of its own:
  the reduces are broadcast back into the roots), every ``reduce`` is a plain
  row reduction of one row shape (``[rows, n]`` after collapsing, reduced
  dimensions minor, a constant or parameter init, no variadic reduce) that the reduction
  emitters would take as a real hero (``is_reduction_from_or_to_contiguous
  _dimensions``), every root has that row shape, and whatever depends on a
  reduce is a per-row value (elementwise on reduce results, reshapes) that
  reaches the row only through a broadcast along the reduced dimensions.
  A chain (a reduce whose row reads another reduce) may also have per-row roots
  (the max and sum a softmax's backward reads; a layer norm's mean and
  ``rsqrt(var + eps)``), written once a row, though XLA's kind for such a fusion
  is ``reduce_row``: the reduction emitters would compute the first reduce again
  per element of the second's row, so this spec outranks them (priority 20).
  Anything else keeps the emitter hero selection picked.
- **Threads.** ``T`` threads own a row (a multiple of the 32-lane logical warp,
  about ``ELEMENTS_PER_THREAD_TARGET`` elements each, at most 1,024 and the
  Target's block limit); short rows share a block (``256 / T`` rows). A thread
  holds ``E = ceil(n / T)`` elements of its row, in vectors of ``V`` adjacent
  elements (``row_vector_size``: 16 bytes of the narrowest input, 4 f32 or 8
  bf16, where whole vectors tile the row, else fewer): lane ``l`` holds vectors
  ``l, l + T, l + 2T, ...``, so a warp reads consecutive vectors (coalesced) and
  LLVM loads each vector with one ``ld.global.v4``. A row of 4096 f32 is 128
  threads of 32 elements, as XLA's Triton softmax has it.
  The kernel is straight-line code over those ``E`` elements, in registers:
  each parameter element is loaded once and every value computed from it is
  reused by each reduction and by the output (the elemental code is
  memoised per element).
- **Reductions**, in dependency order: each thread combines its ``E`` values
  with the reducer, ``shuffle_reduce`` combines a warp (the butterfly leaves
  the result in every lane), and when a row has several warps, lane 0 of each
  writes a shared-memory tile ``[rows per block, warps]``; after a barrier
  every thread combines the row's warp partials in the same order, so every
  thread of the row holds the same reduced value, which the later elements
  and reductions read instead of recomputing the reduce.
- **Outputs**: every root element a thread holds is written once
  (``predicated_insert`` where the row or the element may be out of range).
  Such an element also reads its parameters only where it is in range
  (``predicated_extract``): its index is clamped, and an output may share a
  parameter's buffer (a loop carry updated in place), whose clamped element
  another thread writes in the same launch.

Rows longer than ``MAX_ELEMENTS_PER_THREAD`` x 1,024 elements are not claimed
(the fusion keeps its loop emitter); a forced emitter refuses them naming the
fusion and the row length.
"""

from __future__ import annotations

import weakref
from collections.abc import Sequence

import attrs
from mlir import ir
from mlir.dialects import arith, tensor

from heron.emitters import mlir_types
from heron.emitters.dialect import (
    allocate_shared_op,
    apply_indexing_op,
    predicated_insert_op,
    shuffle_reduce_op,
    sync_threads_op,
)
from heron.emitters.elemental import ElementalContext, emit_instruction
from heron.emitters.emitter_base import DominanceMemo, EntryFunction, FusionEmitter
from heron.emitters.fusion_analysis import FusionAnalysis
from heron.emitters.hookspecs import EmitterSpec, hookimpl
from heron.emitters.reductions import (
    is_reduction_from_or_to_contiguous_dimensions,
    reduction_dimensions,
)
from heron.hlo.ir import Computation, Instruction
from heron.hlo.opcodes import is_elementwise
from heron.hlo.shapes import ArrayShape
from heron.indexing import Dim, IndexingMap, Interval, Variable, input_to_output_map
from heron.indexing.thread_maps import LaunchDimensions
from heron.plugins.reduction_base import (
    LOGICAL_WARP_SIZE,
    THREADS_PER_BLOCK_TARGET,
    ThreadMap,
    delinearise,
    physical_index,
    vector_size_for,
)

__all__ = [
    "MAX_ELEMENTS_PER_THREAD",
    "RowNormalization",
    "RowNormalizationEmitter",
    "describe_row_normalization",
    "heron_emitter_specs",
]

#: Elements a thread of a long row aims for: enough work per thread to hide the
#: reductions' shuffles and barriers, few enough to keep a row in registers. XLA's
#: Triton softmax gives a row of 4096 f32 128 threads (32 each, in 16-byte loads);
#: heron's 512 threads of 8 (in 8-byte loads) ran softmax at 0.84x its speed on an
#: H200 (docs/gpu.md): four times fewer rows in flight on each multiprocessor.
ELEMENTS_PER_THREAD_TARGET = 32
#: The widest load a thread issues (``ld.global.v4.b32``): a vector of adjacent
#: elements fills it where whole vectors tile the row.
VECTOR_BYTES = 16
#: Most elements a thread keeps in registers (a design bound of this emitter:
#: every element is straight-line code, and the values computed from it stay live
#: until the outputs are written). Longer rows are not claimed.
MAX_ELEMENTS_PER_THREAD = 32
#: Most threads on one row (a block's worth on every Target heron has).
MAX_ROW_THREADS = 1024

#: Ops that may lie between a reduce and the row it is broadcast back into.
_PER_ROW_OPCODES = frozenset({"broadcast", "reshape", "bitcast", "reduce"})
#: The analyses' kinds of a row reduction this emitter may take: a fusion of one of
#: them is claimed only where a reduce reads another through the row (a chain no
#: reduction emitter computes but per element), its roots the chain's per-row values or
#: rows. Rows shorter than a warp (``reduce_multirow``) stay with their emitter: a
#: thread or a few hold the row, and recomputing the first reduce per element costs
#: little there, where this emitter would give each row a whole warp.
_ROW_REDUCTION_KINDS = frozenset({"reduce_row"})


@attrs.frozen(eq=False)
class RowNormalization:
    """A normalisation fusion as this emitter builds it.

    ``reduces`` are the fusion's reduces in dependency order; ``row_shape`` the
    shape they all reduce (logical, row-major), ``rows`` x ``row_length`` its
    collapsed ``[kept, reduced]`` extent; ``per_row`` the ids of the
    instructions that depend on a reduce and hold one value per row (computed
    once per row, at the row's index); ``dependent`` every instruction that
    depends on a reduce. A root may be a per-row value (``per_row`` holds its id):
    one thread of the row writes it.
    """

    reduces: tuple[Instruction, ...]
    row_shape: ArrayShape
    rows: int
    row_length: int
    per_row: frozenset[int]
    dependent: frozenset[int]


def _non_unit(shape: ArrayShape) -> tuple[int, ...]:
    return tuple(n for n in shape.dims if n != 1)


def _in_place(inst: Instruction, operands: Sequence[Instruction]) -> bool:
    """Whether ``inst`` (a reshape, bitcast or broadcast of row values into the row's
    dimensions) leaves each element at its logical index: the emitter evaluates it at
    the index of its operand. A bitcast to another layout of the same dimensions moves
    elements (jnp's ``x.T`` of a square row block, once layouts are assigned), and so
    does a broadcast that permutes them."""
    for k, operand in enumerate(inst.operands):
        if any(operand is o for o in operands):
            identity = IndexingMap.identity(operand.array_shape.dims)
            if input_to_output_map(inst, k).results != identity.results:
                return False
    return True


def _is_default_layout(shape: ArrayShape) -> bool:
    return tuple(shape.minor_to_major) == tuple(reversed(range(shape.rank)))


def _broadcast_keeps_rows(inst: Instruction, kept: tuple[int, ...]) -> bool:
    """A broadcast of a per-row value into the row shape: its operand's non-unit
    dimensions go, in order, to exactly the row's kept dimensions."""
    operand = inst.operands[0].array_shape
    mapped = [d for o, d in zip(operand.dims, inst.attr("dimensions", ()), strict=True) if o != 1]
    return tuple(mapped) == kept


def _broadcast_adds_unit_dims(inst: Instruction) -> bool:
    """A broadcast that only adds size-1 dimensions, keeping the order of the others."""
    operand = inst.operands[0].array_shape
    dims = list(inst.attr("dimensions", ()))
    if _non_unit(inst.array_shape) != _non_unit(operand):
        return False
    mapped = [d for o, d in zip(operand.dims, dims, strict=True) if o != 1]
    return mapped == sorted(mapped)


def _describe(analysis: FusionAnalysis) -> RowNormalization | None:
    if analysis.kind not in ("loop", *_ROW_REDUCTION_KINDS):
        return None
    if "reduce" not in analysis.graph.opcodes:
        return None
    computation = analysis.computation
    order = computation.post_order()
    reduces = [i for i in order if i.opcode == "reduce"]
    if not reduces:
        return None
    first = reduces[0]
    if first.shape.is_tuple or len(first.operands) != 2:
        return None
    row_shape = first.operands[0].array_shape
    if not _is_default_layout(row_shape):
        return None
    dimensions = reduction_dimensions(first)
    major, rows, row_length = dimensions.dimensions
    if not dimensions.is_row_reduction or major != 1 or row_length < 2:
        return None
    for reduce in reduces:
        if reduce.shape.is_tuple or len(reduce.operands) != 2:
            return None
        if reduce.operands[1].opcode not in ("constant", "parameter"):
            return None
        shape = reduce.operands[0].array_shape
        if shape.dims != row_shape.dims or not _is_default_layout(shape):
            return None
        if set(reduce.attr("dimensions", ())) != set(first.attr("dimensions", ())):
            return None
        if not is_reduction_from_or_to_contiguous_dimensions(reduce, analysis.target):
            return None
    reduced = set(first.attr("dimensions", ()))
    kept = tuple(d for d in range(row_shape.rank) if d not in reduced and row_shape.dims[d] > 1)
    dependent: set[int] = set()
    per_row: set[int] = set()
    for inst in order:
        if inst.opcode == "reduce":
            if id(inst.operands[0]) in per_row:
                return None
            dependent.add(id(inst))
            per_row.add(id(inst))
            continue
        touched = [o for o in inst.operands if id(o) in dependent]
        if not touched:
            continue
        if inst.shape.is_tuple:
            if inst is computation.root_instruction and inst.opcode == "tuple":
                continue
            return None
        if not (is_elementwise(inst.opcode) or inst.opcode in _PER_ROW_OPCODES):
            return None
        dependent.add(id(inst))
        shape = inst.array_shape
        from_rows = any(id(o) in per_row for o in touched)
        if inst.opcode == "broadcast" and from_rows and shape.dims == row_shape.dims:
            if not _broadcast_keeps_rows(inst, kept):
                return None
            continue  # a row value from here on
        if from_rows:
            if shape.num_elements != rows:
                return None  # one value a row, in row-major order (reshapes keep it)
            if inst.opcode == "broadcast" and not _broadcast_adds_unit_dims(inst):
                return None
            if any(id(o) in dependent and id(o) not in per_row for o in touched):
                return None  # a row value and a per-row value in one op
            per_row.add(id(inst))
        elif shape.dims != row_shape.dims:
            return None  # a row value reshaped or broadcast: not the row any more
        elif not is_elementwise(inst.opcode) and not _in_place(inst, touched):
            return None  # a bitcast to another layout, a broadcast that transposes
    # A chain: a reduce whose row depends on another reduce (softmax's sum of exp(x -
    # max)). Its per-row values may be roots (the max and sum a backward pass reads).
    chained = any(id(reduce.operands[0]) in dependent for reduce in reduces)
    for root in analysis.roots:
        if root.shape.is_tuple:
            return None
        if chained and id(root) in per_row:
            continue
        if root.array_shape.dims != row_shape.dims:
            return None
    if analysis.kind != "loop" and not chained:
        return None  # one reduction, however many roots: the reduction emitters' own
    rows_written = any(id(root) in dependent and id(root) not in per_row for root in analysis.roots)
    if not (rows_written or chained):
        return None
    return RowNormalization(
        tuple(reduces), row_shape, rows, row_length, frozenset(per_row), frozenset(dependent)
    )


_DESCRIPTIONS: weakref.WeakKeyDictionary[FusionAnalysis, RowNormalization | None] = (
    weakref.WeakKeyDictionary()
)


def describe_row_normalization(analysis: FusionAnalysis) -> RowNormalization | None:
    """The normalisation ``analysis``'s fusion is (see the module docstring), or None.

    Computed once per analysis: ``claims`` and the factory read the same object.
    """
    if analysis not in _DESCRIPTIONS:
        _DESCRIPTIONS[analysis] = _describe(analysis)
    return _DESCRIPTIONS[analysis]


def row_threads(row_length: int, target_limit: int) -> int:
    """Threads on one row: a multiple of the logical warp, about
    :data:`ELEMENTS_PER_THREAD_TARGET` elements each."""
    wanted = -(-row_length // ELEMENTS_PER_THREAD_TARGET)
    threads = -(-wanted // LOGICAL_WARP_SIZE) * LOGICAL_WARP_SIZE
    return max(LOGICAL_WARP_SIZE, min(threads, MAX_ROW_THREADS, target_limit))


def row_vector_size(
    computation: Computation, norm: RowNormalization, threads: int, elements: int
) -> int:
    """Adjacent elements a thread reads together: :data:`VECTOR_BYTES` of the narrowest
    parameter, at most a thread's ``elements``, halved until whole vectors tile the row
    (LLVM then loads each with one vector load); 1 where the reduction emitters' rule
    (``vector_size_for``) reads one at a time (complex or variadic reduces, 64-bit
    inputs, an odd row)."""
    if vector_size_for(computation, norm.reduces, norm.row_length, threads) == 1:
        return 1
    narrowest = min(
        (
            max(leaf.element_type.bit_width, 8) // 8
            for parameter in computation.parameters
            for leaf in parameter.shape.leaves()
            if not leaf.is_token
        ),
        default=4,
    )
    vector = max(1, min(VECTOR_BYTES // narrowest, elements))
    while vector > 1 and norm.row_length % (threads * vector):
        vector //= 2
    return vector


def fits_in_registers(row_length: int, target_limit: int) -> bool:
    """Whether a row is short enough for this emitter (``MAX_ELEMENTS_PER_THREAD``)."""
    return -(-row_length // row_threads(row_length, target_limit)) <= MAX_ELEMENTS_PER_THREAD


def claims(analysis: object) -> bool:
    """A loop-kind fusion that is a row normalisation whose rows fit in registers."""
    if not isinstance(analysis, FusionAnalysis):
        return False
    description = describe_row_normalization(analysis)
    return description is not None and fits_in_registers(
        description.row_length, analysis.target.threads_per_block_limit
    )


class RowNormalizationEmitter(FusionEmitter):
    """One block (or warp) per row, the row in registers across its reductions."""

    name = "row_normalization"
    #: Each output element is written by one thread, once, but its reductions are
    #: summed in this kernel's order (per thread, then the warp's butterfly, then
    #: the warps in order), not the reference evaluator's: the harness reads this
    #: flag as "reduces in its own order" too (reassociation bounds, edge inputs
    #: compared for coverage only), as for the reduction emitters.
    writes_each_element_once = False
    #: The fusion checker's question: the reduces of a fusion this emitter
    #: takes are computed once per row, never once per element that reads them.
    computes_each_reduce_once = True

    def __init__(self, analysis: FusionAnalysis) -> None:
        super().__init__(analysis)
        description = describe_row_normalization(analysis)
        if description is None:
            raise self.error(
                "it is not a row normalisation (row reductions of one shape broadcast back"
                " along the row into roots of that shape)"
            )
        self.norm = description
        limit = self.target.threads_per_block_limit
        self.row_threads = row_threads(description.row_length, limit)
        self.elements = -(-description.row_length // self.row_threads)
        if self.elements > MAX_ELEMENTS_PER_THREAD:
            raise self.error(
                f"its rows of {description.row_length} elements need {self.elements} elements a"
                f" thread with {self.row_threads} threads a row, over the"
                f" {MAX_ELEMENTS_PER_THREAD} a thread keeps in registers"
            )
        self.vector_size = row_vector_size(
            self.computation, description, self.row_threads, self.elements
        )
        per_block = max(1, THREADS_PER_BLOCK_TARGET // self.row_threads)
        self.rows_per_block = min(per_block, description.rows)
        self.blocks = -(-description.rows // self.rows_per_block)

    def launch_dimensions(self) -> LaunchDimensions:
        return LaunchDimensions(
            block_x=self.blocks, thread_x=self.rows_per_block * self.row_threads
        )

    def emit_entry(self, entry: EntryFunction) -> list[ir.Value]:
        return _RowEmission(self, entry).run()


class _RowEmission:
    """One entry function's body (see the module docstring)."""

    def __init__(self, emitter: RowNormalizationEmitter, entry: EntryFunction) -> None:
        self.e = emitter
        self.norm = emitter.norm
        self.entry = entry
        self.dims = [entry.thread_ids[0], entry.block_ids[0]]
        self.threads = emitter.rows_per_block * emitter.row_threads
        #: Values by instruction and index, found again only where they dominate: a
        #: concatenate's or a pad's operands are emitted inside the ``scf.if`` that
        #: selects them, and a value shared by two operands (a constant) must be
        #: emitted again in the other's branch.
        self.memo = DominanceMemo()
        self.reduced: dict[int, ir.Value] = {}
        #: While a slot is evaluated: the condition under which it is an output element
        #: (None: always); parameter reads are predicated on it (see :meth:`value`).
        self.guard: ir.Value | None = None
        self.context = ElementalContext(
            resolve=self.value, call=entry.call_computation, fusion_name=entry.fusion_name
        )
        self.index_type = ir.IndexType.get()

    # -- indices -------------------------------------------------------------------------
    def apply(self, results: Sequence, ranges: Sequence[int] = (), values=()) -> list[ir.Value]:
        """``apply_indexing`` of expressions over (thread, block), or over ``ranges`` dims."""
        if ranges:
            indexing = IndexingMap(
                tuple(Variable(f"d{i}", Interval(0, n - 1)) for i, n in enumerate(ranges)),
                tuple(results),
            )
            return list(apply_indexing_op(indexing, list(values)).results)
        thread_map = ThreadMap(self.threads, self.e.blocks, (), tuple(results))
        return list(apply_indexing_op(thread_map.indexing_map(), self.dims).results)

    def constant(self, value: int) -> ir.Value:
        return arith.constant(self.index_type, value)

    def below(self, value: ir.Value, bound: int) -> ir.Value:
        return arith.cmpi(arith.CmpIPredicate.slt, value, self.constant(bound))

    def run(self) -> list[ir.Value]:
        e, norm = self.e, self.norm
        T, n = e.row_threads, norm.row_length
        thread = Dim(0)
        (self.lane,) = self.apply([thread % T])
        (self.row_in_block,) = self.apply([thread // T])
        (row,) = self.apply([Dim(1) * e.rows_per_block + thread // T])
        self.row_valid = None
        if norm.rows % e.rows_per_block:
            self.row_valid = self.below(row, norm.rows)
            row = arith.minsi(row, self.constant(norm.rows - 1))
        self.row = row
        # Per element a thread holds: its row-shape index, whether it is in the row, and
        # whether it is an element of the output at all (in the row, of a real row).
        linear = Dim(0) * n + Dim(1)
        self.slots: list[tuple[list[ir.Value], ir.Value | None, ir.Value | None]] = []
        V = e.vector_size
        for k in range(e.elements // V):
            for v in range(V):
                (column,) = self.apply([(thread % T + k * T) * V + v])
                valid = None
                if (k + 1) * T * V > n:
                    valid = self.below(column, n)
                    column = arith.minsi(column, self.constant(n - 1))
                index = self.apply(
                    physical_index(linear, norm.row_shape), (norm.rows, n), [row, column]
                )
                written = valid
                if self.row_valid is not None:
                    written = self.row_valid if valid is None else arith.andi(valid, self.row_valid)
                self.slots.append((index, valid, written))
        for reduce in norm.reduces:
            self.reduced[id(reduce)] = self.reduce_row(reduce)
        return self.write_outputs()

    def row_index(self, shape: ArrayShape) -> list[ir.Value]:
        """The index of this thread's row in a per-row value of ``shape``."""
        key = ("row index", shape.dims)
        found = self.memo.get(key)
        if found is None:
            exprs = delinearise(Dim(0), shape.dims)  # row-major, as reshapes number elements
            found = self.apply(exprs, (self.norm.rows,), [self.row]) if exprs else []
            self.memo.put(key, found)
        return found

    # -- values --------------------------------------------------------------------------
    def value(self, inst: Instruction, indices: Sequence[ir.Value]) -> list[ir.Value]:
        """``inst`` at ``indices``: a reduce's row value, a per-row value computed once,
        a parameter read, anything else emitted once per distinct index (and per
        :attr:`guard`).

        While a slot that may hold no output element is evaluated (``guard``: its
        condition), parameters are read only where it holds. Its column and row are
        clamped into range, so an unguarded read would load an element another thread
        writes in this launch when an output shares that parameter's buffer (a loop
        carry updated in place: copy insertion lets a loop fusion write over an input
        its roots read elementwise); the value is discarded, but it is a race, and the
        interpreter's sanitizer refuses it."""
        if id(inst) in self.reduced:
            return [self.reduced[id(inst)]]
        guard = self.guard
        if id(inst) in self.norm.per_row:
            # Computed once for the row, from reduces and per-row values: never guarded.
            key: tuple = (id(inst),)
            indices = self.row_index(inst.array_shape)
            self.guard = None
        else:
            key = (id(inst), *indices, guard)
        try:
            found = self.memo.get(key)
            if found is None:
                if inst.opcode == "parameter":
                    found = self.entry.value_of(inst, list(indices), self.guard)
                else:
                    found = emit_instruction(inst, list(indices), self.context)
                self.memo.put(key, found)
        finally:
            self.guard = guard
        return found

    # -- reductions ----------------------------------------------------------------------
    def reduce_row(self, reduce: Instruction) -> ir.Value:
        e, entry = self.e, self.entry
        computation = reduce.called("to_apply")
        (accumulator,) = self.value(reduce.operands[1], [])
        for index, valid, written in self.slots:
            self.guard = written
            (element,) = self.value(reduce.operands[0], index)
            self.guard = None
            (combined,) = entry.call_computation(computation, [accumulator, element])
            accumulator = combined if valid is None else arith.select(valid, combined, accumulator)
        reducer = entry.computation_function(computation)
        (accumulator,) = shuffle_reduce_op([accumulator], LOGICAL_WARP_SIZE // 2, reducer).results
        warps = e.row_threads // LOGICAL_WARP_SIZE
        if warps == 1:
            return accumulator
        element_type = reduce.array_shape.element_type
        tile_type = mlir_types.tensor_type(ArrayShape(element_type, (e.rows_per_block, warps)))
        tile = allocate_shared_op(tile_type).results[0]
        (warp,) = self.apply([Dim(0) % e.row_threads // LOGICAL_WARP_SIZE])
        (lane,) = self.apply([Dim(0) % LOGICAL_WARP_SIZE])
        lane_zero = arith.cmpi(arith.CmpIPredicate.eq, lane, self.constant(0))
        stored = mlir_types.to_element(accumulator, element_type)
        tile = predicated_insert_op(lane_zero, stored, tile, [self.row_in_block, warp]).results[0]
        (tile,) = sync_threads_op([tile]).results
        partials = [
            mlir_types.to_scalar(
                tensor.extract(tile, [self.row_in_block, self.constant(w)]), element_type
            )
            for w in range(warps)
        ]
        total = partials[0]
        for partial in partials[1:]:
            (total,) = entry.call_computation(computation, [total, partial])
        return total

    # -- outputs -------------------------------------------------------------------------
    def write_outputs(self) -> list[ir.Value]:
        outputs = list(self.entry.outputs)
        shapes = self.entry.output_shapes
        analysis = self.e.analysis
        for root, positions in zip(analysis.roots, analysis.output_positions, strict=True):
            if id(root) in self.norm.per_row:
                outputs = self.write_per_row(root, positions, outputs)
                continue
            for index, _, condition in self.slots:
                self.guard = condition
                (value,) = self.value(root, index)
                self.guard = None
                for position in positions:
                    element = mlir_types.to_element(value, shapes[position].element_type)
                    if condition is None:
                        outputs[position] = tensor.insert(element, outputs[position], index)
                    else:
                        outputs[position] = predicated_insert_op(
                            condition, element, outputs[position], index
                        ).results[0]
        return outputs

    def write_per_row(
        self, root: Instruction, positions: Sequence[int], outputs: list[ir.Value]
    ) -> list[ir.Value]:
        """A per-row root (a reduce, or a value computed from reduces once a row): every
        thread of the row holds it; the row's first lane writes it, in a real row."""
        index = self.row_index(root.array_shape)
        (value,) = self.value(root, index)
        condition = arith.cmpi(arith.CmpIPredicate.eq, self.lane, self.constant(0))
        if self.row_valid is not None:
            condition = arith.andi(condition, self.row_valid)
        shapes = self.entry.output_shapes
        for position in positions:
            element = mlir_types.to_element(value, shapes[position].element_type)
            outputs[position] = predicated_insert_op(
                condition, element, outputs[position], index
            ).results[0]
        return outputs


@hookimpl
def heron_emitter_specs() -> list[EmitterSpec]:
    return [
        EmitterSpec(
            name=RowNormalizationEmitter.name,
            # above the reduction emitters, whose kinds a chain of reductions has
            priority=20,
            claims=claims,
            factory=RowNormalizationEmitter,
            description="softmax/norm rows kept in registers across their reductions (one kernel)",
            refuses_when_built=True,
        )
    ]
