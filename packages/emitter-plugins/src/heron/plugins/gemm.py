"""The GEMM emitter: a canonical dot, tiled through shared memory.

heron's HLO passes put every dot into XLA's canonical form
``[batch..., M, K] x [batch..., K, N] -> [batch..., M, N]`` (at most one free
dimension a side, at most one contracting dimension;
``heron.hlo.passes.dot_decomposer``). This emitter claims fusions whose one
root is such a dot, elementwise ops of the dot's shape after it (an
epilogue: bias, activation, convert; ``gemm_hero``), or a transpose of it (a
weight gradient: each element of C is stored at the transposed index), or
whose several roots are such epilogues of one dot (a GELU and its argument,
the two outputs of a GEMM library call's ``GELU_AUX``: each thread stores
every root's element at its index), and
computes the dot as
the classic shared-memory tiled GEMM:

- a block of 256 threads computes a ``TM x TN`` tile of C: 16 x 16, one
  element a thread, or, where M and N both span at least 64, 64 x 64 with a
  4 x 4 register tile a thread (rows and columns 16 apart); blocks
  enumerate the tiles along x and the batch (all batch dimensions
  flattened) along y;
- the block walks K in steps of ``TK``: its threads copy the ``TM x TK``
  tile of A and the ``TK x TN`` tile of B into shared memory (converted to
  the accumulation type; consecutive threads take consecutive elements of a
  tile row, so global reads are coalesced along the operand's minor
  dimension), a barrier, every thread adds the ``TK`` products of its row of
  A and column of B to its accumulator, a barrier before the tiles are
  overwritten;
- edges need not be multiples of a tile: an element of a tile outside the
  operand is staged as zero (so a K edge adds exact zeros), and only threads
  whose (m, n) is inside C store;
- accumulation is XLA's: f32 for f16/bf16/f32 inputs (f64 for f64), s32 for
  s8/s32 (wrapping, which equals the evaluator's wider sum truncated to s32);
  the sum is rounded once, to the dot's element type, when it is stored;
- a side without a free dimension (matrix-vector, vector-matrix, a plain dot
  product) keeps its tile dimension at 1 and gives the threads to the other
  one (``plan_gemm``).

The operands are read with ``value_of``, so any elemental producer fused
into the dot's operands is computed as it is staged; the epilogue is called
by the thread that owns the element, with the rounded dot value injected.

On a Target whose ``mma_shapes`` has ``m16n8k16.f16`` (``.bf16``,
``m16n8k32.s8``), a dot of two f16 (bf16, s8) operands with M, N and K takes
the tensor-core path (``heron.plugins.gemm_mma``): the same staging (tiles
kept in the input type), 64 x 64 block tiles of 8 warps, each warp's products
one ``nvgpu.mma.sync`` per 16 x 8 piece of C and K step (16, or 32 for s8),
f32 (s32, wrapping) accumulators, and each accumulator element stored
(through the epilogue) by the thread the PTX ISA's fragment layout gives it
to. Other types (f32 keeps exact f32 products: XLA's default precision would
allow TF32, heron's harness bound does not), matrix-vector products, ROCm and
NVIDIA targets before sm_80 keep the scalar multiply-add.
"""

from __future__ import annotations

import math

import attrs
from mlir import ir
from mlir.dialects import arith, scf, tensor, vector

from heron.emitters import mlir_types
from heron.emitters.dialect import allocate_shared_op, apply_indexing_op, sync_threads_op
from heron.emitters.emitter_base import EntryFunction, FusionEmitter
from heron.emitters.fusion_analysis import FusionAnalysis, has_no_output_elements
from heron.emitters.hookspecs import EmitterSpec, hookimpl
from heron.emitters.ir_utils import both, index_constant
from heron.emitters.pipeline.gpu_lowering import MIN_BLOCKS_PER_CORE_ATTR
from heron.emitters.target import resident_blocks
from heron.hlo.element_types import ElementType
from heron.hlo.ir import Instruction
from heron.indexing import Dim, IndexingMap, Interval, Variable
from heron.indexing.thread_maps import LaunchDimensions
from heron.plugins import gemm_mma, gemm_vector
from heron.plugins.gemm_hero import (
    accumulates_in_floats,
    gemm_hero,
    gemm_roots_hero,
    is_canonical_gemm,
)
from heron.plugins.gemm_plan import GemmPlan, plan_gemm
from heron.plugins.gemm_vector import VectorStaging, vector_staging, write_vector

__all__ = [
    "GemmEmitter",
    "GemmPlan",
    "accumulates_in_floats",
    "gemm_hero",
    "heron_emitter_specs",
    "is_canonical_gemm",
    "plan_gemm",
]

Values = list[ir.Value]


@attrs.frozen
class _Slot:
    """One element a thread stages: ``used`` (None: always), its (row, column) in the
    tile, its index in the operand and whether it lies inside the operand (None: yes)."""

    used: ir.Value | None
    row: ir.Value
    col: ir.Value
    index: Values
    inside: ir.Value | None


@attrs.frozen
class _Staging:
    """How a block's threads copy one operand's tile (``GemmEmitter._slots``): ``word``
    consecutive elements of a tile row a copy, ``groups`` copies a tile row; where the
    threads cover whole tile rows a round (``whole_rows``) each round moves
    ``rows_per_round`` rows down, else a round is the next ``threads`` elements of the
    tile. Known from the plan alone, so the constructor can tell what emission needs."""

    rows: int
    cols: int
    threads: int
    word: int
    groups: int
    whole_rows: bool
    rounds: int

    @property
    def rows_per_round(self) -> int:
        return self.threads // self.groups

    @property
    def partial(self) -> bool:
        """Some thread has no element to copy in the last round (its copy is guarded)."""
        if self.whole_rows:
            return self.rounds * self.rows_per_round > self.rows
        return self.rounds * self.threads > self.rows * self.cols


def _offset(value: ir.Value, constant: int) -> ir.Value:
    return arith.addi(value, index_constant(constant)) if constant else value


def _chunks(items: list, size: int) -> list[list]:
    """``items`` in consecutive groups of ``size`` (the last may be shorter)."""
    return [items[i : i + size] for i in range(0, len(items), size)]


def _below(value: ir.Value, bound: int, extent: int) -> ir.Value | None:
    """``value < bound``, or None when every value of ``0 .. extent-1`` is below it."""
    if extent <= bound:
        return None
    return arith.cmpi(arith.CmpIPredicate.ult, value, index_constant(bound))


class GemmEmitter(FusionEmitter):
    """A canonical dot as a shared-memory tiled GEMM (see the module docstring)."""

    name = "gemm"

    def __init__(self, analysis: FusionAnalysis) -> None:
        super().__init__(analysis)
        roots = analysis.roots
        dot = gemm_roots_hero(roots)
        if dot is None and len(roots) == 1 and roots[0].opcode == "dot":
            dot = roots[0]
        if dot is None:
            found = ", ".join(f"{r.opcode} '{r.name}'" for r in roots)
            raise self.error(
                "the gemm emitter needs one root that is a dot or elementwise ops of a dot's"
                " shape after one dot (or several such roots of the same dot, none a"
                f" transpose), not {found}"
            )
        self.dot = dot
        self.root = roots[0]
        self.roots = tuple(roots)
        if not is_canonical_gemm(self.dot):
            raise self.error(
                "the dot is not in the canonical form [batch..., M, K] x [batch..., K, N]"
                " (run heron's dot canonicalisation pass first)",
                self.dot,
            )
        self.inputs = tuple(op.array_shape.element_type for op in self.dot.operands)
        self.output = self.dot.array_shape.element_type
        floating = accumulates_in_floats(self.dot)
        if floating is None:
            names = ", ".join(sorted({t.value for t in (*self.inputs, self.output)}))
            raise self.error(
                f"element types {names}: the gemm emitter takes f16/bf16/f32/f64 inputs with a"
                " float result or s8/s32 inputs with an integer result",
                self.dot,
            )
        self.floating = floating
        self.plan = plan_gemm(self.dot, self.target)
        self.empty = has_no_output_elements(self.fusion)
        self.vector_staging = (
            vector_staging(
                self.dot,
                self.plan,
                self.plan.threads,
                self.inputs[0].bit_width // 8,
                self.target.warp_size,
            )
            if self.plan.mma is not None
            else None
        )
        #: The blocks an SM should keep resident, told to the backend
        #: (``.minnctapersm``) so that it fits the registers to them: with chunk
        #: staging, the blocks ``gemm_vector.REGISTERS_PER_THREAD`` and the tiles'
        #: shared memory allow; None (the backend's choice) otherwise.
        self.min_blocks_per_core = (
            resident_blocks(
                self.target,
                self.plan.threads,
                gemm_vector.REGISTERS_PER_THREAD,
                self._shared_tiles.bytes,
            )
            if self.vector_staging is not None
            else None
        )
        self._check_emittable()

    def _check_emittable(self) -> None:
        """Refuse, when built, what emission could not write (the spec says
        ``refuses_when_built``, so the fusion passes build this emitter instead of
        emitting every fusion they make): on the MMA path without chunk staging the
        fetched K step travels in whole words, so every thread copies in every round;
        a root other than the dot is its epilogue, called with the dot's value alone; no
        function reads a value only an epilogue computes."""
        if self.empty:
            return
        if self.plan.mma is not None and self.vector_staging is None:
            if any(self._staging(side).partial for side in (0, 1)):
                raise self.error("the MMA tiles must be whole rounds of the block", self.dot)
        partitioned = self.partitioned()
        for root in self.roots:
            if root is self.dot:
                continue
            sub = partitioned.epilogue_of(root)
            if sub is None or len(sub.injected) != 1 or sub.injected[0] is not self.dot:
                raise self.error("its epilogue is not a subgraph after the dot alone", root)
        self.refuse_uncallable_reads(self.dot.operands)

    def launch_dimensions(self) -> LaunchDimensions:
        if self.empty:
            return LaunchDimensions(block_x=1, thread_x=1)
        return self.plan.launch

    def heroes(self) -> tuple[Instruction, ...]:
        return (self.dot,)

    def unemitted_heroes(self) -> tuple[Instruction, ...]:
        return (self.dot,)

    # -- types ---------------------------------------------------------------------------

    @property
    def _accumulator(self) -> ir.Type:
        if not self.floating:
            return ir.IntegerType.get_signless(32)
        wide = ElementType.F64 in (*self.inputs, self.output)
        return ir.F64Type.get() if wide else ir.F32Type.get()

    def _zero(self) -> ir.Value:
        kind = self._accumulator
        value = 0.0 if self.floating else 0
        return arith.ConstantOp(kind, value).result

    def _widen(self, value: ir.Value) -> ir.Value:
        """An operand element (its register type) in the accumulation type."""
        target = self._accumulator
        if value.type == target:
            return value
        if self.floating:
            return arith.extf(target, value)
        return arith.extsi(target, value)

    def _narrow(self, value: ir.Value) -> ir.Value:
        """The accumulator rounded once to the dot's element type (as the tensor holds it)."""
        scalar = mlir_types.scalar_type(self.output)
        if value.type != scalar:
            if self.floating:
                width = ir.FloatType(scalar).width
                wider = width > ir.FloatType(value.type).width
                value = arith.extf(scalar, value) if wider else arith.truncf(scalar, value)
            else:
                width = ir.IntegerType(scalar).width
                value = arith.extsi(scalar, value) if width > 32 else arith.trunci(scalar, value)
        return mlir_types.to_element(value, self.output)

    # -- the kernel ----------------------------------------------------------------------

    def emit_entry(self, entry: EntryFunction) -> Values:
        if self.empty:
            return list(entry.outputs)
        if self.plan.mma is not None:
            return self._emit_mma(entry)
        plan = self.plan
        thread = entry.thread_ids[0]
        tile = entry.block_ids[0]
        batch = self._batch_index(entry.block_ids[1] if len(entry.block_ids) > 1 else None)
        row0 = arith.muli(arith.divui(tile, index_constant(plan.tiles_n)), index_constant(plan.tm))
        col0 = arith.muli(arith.remui(tile, index_constant(plan.tiles_n)), index_constant(plan.tn))
        local_row = arith.divui(thread, index_constant(plan.threads_n))
        local_col = arith.remui(thread, index_constant(plan.threads_n))
        rows = [
            arith.addi(local_row, index_constant(i * plan.threads_m)) if i else local_row
            for i in range(plan.rm)
        ]
        cols = [
            arith.addi(local_col, index_constant(j * plan.threads_n)) if j else local_col
            for j in range(plan.rn)
        ]
        a_tile = allocate_shared_op(self._tile_type(plan.tm, plan.tk)).results[0]
        b_tile = allocate_shared_op(self._tile_type(plan.tk, plan.tn)).results[0]
        cells = plan.rm * plan.rn
        loop = scf.ForOp(
            index_constant(0),
            index_constant(plan.k_steps),
            index_constant(1),
            [*(self._zero() for _ in range(cells)), a_tile, b_tile],
        )
        with ir.InsertionPoint(loop.body):
            *accs, a_tile, b_tile = loop.inner_iter_args
            k0 = arith.muli(loop.induction_variable, index_constant(plan.tk))
            a_tile = self._stage(entry, a_tile, 0, batch, row0, k0, thread)
            b_tile = self._stage(entry, b_tile, 1, batch, k0, col0, thread)
            a_tile, b_tile = sync_threads_op([a_tile, b_tile]).results
            for kk in range(plan.tk):
                a = [tensor.extract(a_tile, [r, index_constant(kk)]) for r in rows]
                b = [tensor.extract(b_tile, [index_constant(kk), c]) for c in cols]
                for i in range(plan.rm):
                    for j in range(plan.rn):
                        cell = i * plan.rn + j
                        if self.floating:
                            accs[cell] = arith.addf(accs[cell], arith.mulf(a[i], b[j]))
                        else:
                            accs[cell] = arith.addi(accs[cell], arith.muli(a[i], b[j]))
            a_tile, b_tile = sync_threads_op([a_tile, b_tile]).results
            scf.YieldOp([*accs, a_tile, b_tile])
        outputs = list(entry.outputs)
        for i in range(plan.rm):
            for j in range(plan.rn):
                acc = loop.results[i * plan.rn + j]
                row = arith.addi(row0, rows[i])
                col = arith.addi(col0, cols[j])
                outputs = self._store(entry, outputs, batch, row, col, acc)
        return outputs

    def _emit_mma(self, entry: EntryFunction) -> Values:
        """The tensor-core path: tiles staged in the input type, four MMAs a warp and K step."""
        plan = self.plan
        if self.min_blocks_per_core is not None:
            entry.function.attributes[MIN_BLOCKS_PER_CORE_ATTR] = ir.IntegerAttr.get(
                ir.IntegerType.get_signless(64), self.min_blocks_per_core
            )
        thread = entry.thread_ids[0]
        tile = entry.block_ids[0]
        batch = self._batch_index(entry.block_ids[1] if len(entry.block_ids) > 1 else None)
        row0 = arith.muli(arith.divui(tile, index_constant(plan.tiles_n)), index_constant(plan.tm))
        col0 = arith.muli(arith.remui(tile, index_constant(plan.tiles_n)), index_constant(plan.tn))
        lane, warp_row, warp_col = gemm_mma.warp_origin(thread)
        element = self._operand_scalar
        tiles = self._shared_tiles
        a_tile = allocate_shared_op(ir.RankedTensorType.get([tiles.a_size], element)).results[0]
        b_tile = allocate_shared_op(ir.RankedTensorType.get([tiles.b_size], element)).results[0]
        pieces = gemm_mma.MmaTiles().tiles_n
        fragments = gemm_mma.fragment_indices(tiles, lane, warp_row, warp_col)
        # Double buffering: K step 0 is staged into stage 0 before the loop; step i
        # reads step i + 1 from global memory into registers, runs its MMAs on stage
        # i % 2, stores the registers into the other stage and waits once. A stage is
        # overwritten only after the barrier that ends the step which read it. The
        # loop takes two steps an iteration, so each one's stages are constants.
        zero = index_constant(0)
        if self.vector_staging is not None:
            chunk = self._fetch_chunk(entry, self.vector_staging, zero, thread, batch)
            a_tile, b_tile = self._store_chunk(
                self.vector_staging, chunk, 0, a_tile, b_tile, thread
            )
        else:
            a_tile = self._stage(entry, a_tile, 0, batch, row0, zero, thread, tiles.a_index)
            b_tile = self._stage(entry, b_tile, 1, batch, zero, col0, thread, tiles.b_index)
        a_tile, b_tile = sync_threads_op([a_tile, b_tile]).results
        loop = scf.ForOp(
            zero,
            index_constant(math.ceil(plan.k_steps / gemm_mma.STAGES)),
            index_constant(1),
            [
                *(gemm_mma.zero_accumulator(self._accumulator) for _ in range(pieces)),
                a_tile,
                b_tile,
            ],
        )
        with ir.InsertionPoint(loop.body):
            carried = list(loop.inner_iter_args)
            first = arith.muli(loop.induction_variable, index_constant(gemm_mma.STAGES))
            for stage in range(gemm_mma.STAGES):
                step = _offset(first, stage)
                if stage and plan.k_steps % gemm_mma.STAGES:  # the last iteration's is past K
                    inside = arith.cmpi(arith.CmpIPredicate.ult, step, index_constant(plan.k_steps))
                    branch = scf.IfOp(inside, [v.type for v in carried], has_else=True)
                    with ir.InsertionPoint(branch.then_block):
                        scf.YieldOp(
                            self._mma_step(
                                entry, stage, step, carried, fragments, row0, col0, thread, batch
                            )
                        )
                    with ir.InsertionPoint(branch.else_block):
                        scf.YieldOp(carried)
                    carried = list(branch.results)
                else:
                    carried = self._mma_step(
                        entry, stage, step, carried, fragments, row0, col0, thread, batch
                    )
            scf.YieldOp(carried)
        outputs = list(entry.outputs)
        for j in range(pieces):
            acc = loop.results[j]
            for row, col, value in gemm_mma.accumulator_elements(acc, j, lane, warp_row, warp_col):
                row = arith.addi(row0, row)
                col = arith.addi(col0, col)
                outputs = self._store(entry, outputs, batch, row, col, value)
        return outputs

    def _mma_step(
        self,
        entry: EntryFunction,
        stage: int,
        step: ir.Value,
        carried: Values,
        fragments: gemm_mma.FragmentIndices,
        row0: ir.Value,
        col0: ir.Value,
        thread: ir.Value,
        batch: Values,
    ) -> Values:
        """K step ``step``, whose tiles are in stage ``stage``: fetch step + 1 into
        registers, the MMAs, the registers into the other stage, one barrier."""
        plan = self.plan
        tiles = self._shared_tiles
        *accs, a_tile, b_tile = carried
        nxt = arith.addi(step, index_constant(1))
        has_next = arith.cmpi(arith.CmpIPredicate.ult, nxt, index_constant(plan.k_steps))
        if self.vector_staging is not None:
            return self._mma_step_chunked(
                entry, self.vector_staging, stage, nxt, has_next, carried, fragments, thread, batch
            )
        k_next = arith.muli(nxt, index_constant(plan.tk))
        # One register a word: the fetched elements travel across the MMAs in vectors
        # of a 32-bit word (A's are the words it read; B's are consecutive rounds).
        words = [
            (side, group)
            for side, slots in (
                (0, self._slots(0, batch, row0, k_next, thread)),
                (1, self._slots(1, batch, k_next, col0, thread)),
            )
            for group in _chunks(slots, self._word)
        ]
        assert all(slot.used is None for _, word in words for slot in word), "refused when built"
        kinds = [ir.VectorType.get([len(word)], self._staged) for _, word in words]
        fetched = scf.IfOp(has_next, kinds, has_else=True)
        with ir.InsertionPoint(fetched.then_block):
            scf.YieldOp(
                [
                    vector.from_elements(
                        kind,
                        [
                            self._read(entry, self.dot.operands[side], slot.index, slot.inside)
                            for slot in word
                        ],
                    )
                    for (side, word), kind in zip(words, kinds, strict=True)
                ]
            )
        with ir.InsertionPoint(fetched.else_block):
            scf.YieldOp([gemm_mma.zeros(kind) for kind in kinds])
        offsets = (
            stage * tiles.a_stage,
            stage * tiles.b_stage,
        )
        accs = gemm_mma.warp_step(tiles, a_tile, b_tile, list(accs), fragments, *offsets)
        following = (stage + 1) % gemm_mma.STAGES
        nexts = (following * tiles.a_stage, following * tiles.b_stage)
        stored = scf.IfOp(has_next, [a_tile.type, b_tile.type], has_else=True)
        with ir.InsertionPoint(stored.then_block):
            staged = [a_tile, b_tile]
            for (side, word), fetched_word in zip(words, fetched.results, strict=True):
                place = tiles.a_index if side == 0 else tiles.b_index
                for e, slot in enumerate(word):
                    value = vector.extract(fetched_word, [], [e])
                    at = _offset(place(slot.row, slot.col), nexts[side])
                    staged[side] = tensor.insert(value, staged[side], [at])
            scf.YieldOp(staged)
        with ir.InsertionPoint(stored.else_block):
            scf.YieldOp([a_tile, b_tile])
        a_tile, b_tile = sync_threads_op(list(stored.results)).results
        return [*accs, a_tile, b_tile]

    def _mma_step_chunked(
        self,
        entry: EntryFunction,
        staging: VectorStaging,
        stage: int,
        nxt: ir.Value,
        has_next: ir.Value,
        carried: Values,
        fragments: gemm_mma.FragmentIndices,
        thread: ir.Value,
        batch: Values,
    ) -> Values:
        """``_mma_step`` with the next K step fetched as one 16-byte chunk a thread
        (``heron.plugins.gemm_vector``): held across the MMAs as one vector."""
        tiles = self._shared_tiles
        *accs, a_tile, b_tile = carried
        kind = self._chunk_words(staging)
        fetched = scf.IfOp(has_next, [kind], has_else=True)
        with ir.InsertionPoint(fetched.then_block):
            scf.YieldOp([self._fetch_chunk(entry, staging, nxt, thread, batch)])
        with ir.InsertionPoint(fetched.else_block):
            scf.YieldOp([gemm_mma.zeros(kind)])
        offsets = (stage * tiles.a_stage, stage * tiles.b_stage)
        accs = gemm_mma.warp_step(tiles, a_tile, b_tile, list(accs), fragments, *offsets)
        following = (stage + 1) % gemm_mma.STAGES
        stored = scf.IfOp(has_next, [a_tile.type, b_tile.type], has_else=True)
        with ir.InsertionPoint(stored.then_block):
            scf.YieldOp(
                self._store_chunk(staging, fetched.results[0], following, a_tile, b_tile, thread)
            )
        with ir.InsertionPoint(stored.else_block):
            scf.YieldOp([a_tile, b_tile])
        a_tile, b_tile = sync_threads_op(list(stored.results)).results
        return [*accs, a_tile, b_tile]

    def _fetch_chunk(
        self,
        entry: EntryFunction,
        staging: VectorStaging,
        step: ir.Value,
        thread: ir.Value,
        batch: Values,
    ) -> ir.Value:
        """The thread's chunk of K step ``step``: ``staging.vector`` consecutive elements of
        a row of A (the first ``a_threads`` threads) or of B (the others), zeros where the
        chunk lies outside the operand (it lies inside or outside as a whole)."""
        plan = self.plan
        kind = self._chunk_words(staging)
        elements = ir.VectorType.get([staging.vector], self._staged)
        tile = entry.block_ids[0]
        is_a = arith.cmpi(arith.CmpIPredicate.ult, thread, index_constant(staging.a_threads))
        branch = scf.IfOp(is_a, [kind], has_else=True)
        sides = (
            (branch.then_block, 0, thread, staging.a_map, (plan.m, plan.k)),
            (branch.else_block, 1, None, staging.b_map, (plan.k, plan.n)),
        )
        for block, side, local, chunk_map, extents in sides:
            with ir.InsertionPoint(block):
                if local is None:
                    local = arith.subi(thread, index_constant(staging.a_threads))
                dims = [local, tile, step, *batch]
                indices = [
                    list(apply_indexing_op(chunk_map(e), dims).results)
                    for e in range(staging.vector)
                ]
                row, col = indices[0][-2:]
                spans = (plan.tiles_m * plan.tm, plan.k_steps * plan.tk)
                if side == 1:
                    spans = (plan.k_steps * plan.tk, plan.tiles_n * plan.tn)
                inside = both(_below(row, extents[0], spans[0]), _below(col, extents[1], spans[1]))
                operand = self.dot.operands[side]

                def read(operand=operand, indices=indices) -> ir.Value:
                    values = []
                    for index in indices:
                        (value,) = entry.value_of(operand, index)
                        values.append(mlir_types.to_scalar(value, operand.array_shape.element_type))
                    return vector.bitcast(kind, vector.from_elements(elements, values))

                if inside is None:
                    scf.YieldOp([read()])
                    continue
                guarded = scf.IfOp(inside, [kind], has_else=True)
                with ir.InsertionPoint(guarded.then_block):
                    scf.YieldOp([read()])
                with ir.InsertionPoint(guarded.else_block):
                    scf.YieldOp([gemm_mma.zeros(kind)])
                scf.YieldOp(list(guarded.results))
        return branch.results[0]

    def _store_chunk(
        self,
        staging: VectorStaging,
        chunk: ir.Value,
        stage: int,
        a_tile: ir.Value,
        b_tile: ir.Value,
        thread: ir.Value,
    ) -> Values:
        """The thread's ``chunk`` (``_fetch_chunk``) into stage ``stage`` of its tile: A's
        elements along a tile row, B's transposed (one n-row each)."""
        tiles = self._shared_tiles
        chunk = vector.bitcast(ir.VectorType.get([staging.vector], self._staged), chunk)
        is_a = arith.cmpi(arith.CmpIPredicate.ult, thread, index_constant(staging.a_threads))
        branch = scf.IfOp(is_a, [a_tile.type, b_tile.type], has_else=True)
        with ir.InsertionPoint(branch.then_block):
            row = arith.divui(thread, index_constant(staging.a_per_row))
            col = arith.muli(
                arith.remui(thread, index_constant(staging.a_per_row)),
                index_constant(staging.vector),
            )
            first = _offset(tiles.a_index(row, col), stage * tiles.a_stage)
            scf.YieldOp([write_vector(chunk, a_tile, first), b_tile])
        with ir.InsertionPoint(branch.else_block):
            local = arith.subi(thread, index_constant(staging.a_threads))
            k, piece = (
                apply_indexing_op(
                    IndexingMap(
                        (Variable("th", Interval(0, staging.b_threads - 1)),),
                        (staging.b_row(Dim(0)), staging.b_chunk(Dim(0))),
                    ),
                    [local],
                )
            ).results
            n = arith.muli(piece, index_constant(staging.vector))
            tile = b_tile
            for e in range(staging.vector):
                value = vector.extract(chunk, [], [e])
                at = _offset(tiles.b_index(k, _offset(n, e)), stage * tiles.b_stage)
                tile = tensor.insert(value, tile, [at])
            scf.YieldOp([a_tile, tile])
        return list(branch.results)

    def _chunk_words(self, staging: VectorStaging) -> ir.VectorType:
        """A fetched chunk as it crosses the MMAs: 32-bit words (``vector<4xi32>``), one
        register each. As ``vector<8xbf16>`` the NVPTX backend splits a value carried
        through a branch into 8 16-bit registers and stores it element by element."""
        words = staging.vector * self._shared_tiles.element_bytes // gemm_mma.WORD_BYTES
        return ir.VectorType.get([words], ir.IntegerType.get_signless(32))

    def _store(
        self,
        entry: EntryFunction,
        outputs: Values,
        batch: Values,
        row: ir.Value,
        col: ir.Value,
        acc: ir.Value,
    ) -> Values:
        """C[row, col] (through the epilogue) where it lies inside C."""
        plan = self.plan
        inside = both(
            _below(row, plan.m, plan.tiles_m * plan.tm), _below(col, plan.n, plan.tiles_n * plan.tn)
        )
        index = [*batch, *([row] if plan.has_m else []), *([col] if plan.has_n else [])]

        def store(current: Values) -> Values:
            value = self._narrow(acc)
            if self.root.opcode == "transpose":
                # C stored transposed: the root's element i is C's at permutation[i].
                permutation = self.root.attr("dimensions")
                return [tensor.insert(value, current[0], [index[d] for d in permutation])]
            stored = []
            for root, output in zip(self.roots, current, strict=True):
                element = value if root is self.dot else self._epilogue(entry, root, index, value)
                stored.append(tensor.insert(element, output, index))
            return stored

        return self._guarded(inside, outputs, store)

    def _epilogue(
        self, entry: EntryFunction, root: Instruction, index: Values, value: ir.Value
    ) -> ir.Value:
        """``root``'s element at ``index``: its epilogue called with the dot's ``value``
        (one call per epilogue computes all of its roots: ``call_subgraph`` memoises)."""
        sub = entry.partitioned.epilogue_of(root)
        assert sub is not None, "the constructor refuses a root without an epilogue"
        scalar = mlir_types.to_scalar(value, self.output)
        results = entry.call_subgraph(sub, index, [scalar])
        result = results[[id(r) for r in sub.roots].index(id(root))]
        return mlir_types.to_element(result, root.array_shape.element_type)

    def _tile_type(
        self, rows: int, cols: int, element: ir.Type | None = None
    ) -> ir.RankedTensorType:
        return ir.RankedTensorType.get([rows, cols], element or self._accumulator)

    @property
    def _shared_tiles(self) -> gemm_mma.SharedTiles:
        plan = self.plan
        return gemm_mma.SharedTiles(plan.tm, plan.tn, plan.tk, self.inputs[0].bit_width // 8)

    @property
    def _operand_scalar(self) -> ir.Type:
        """The operands' register type (one type on the MMA path)."""
        return mlir_types.scalar_type(self.inputs[0])

    @property
    def _staged(self) -> ir.Type:
        """What the shared tiles hold: the inputs for an MMA, else the accumulation type."""
        return self._operand_scalar if self.plan.mma is not None else self._accumulator

    def _batch_index(self, flat: ir.Value | None) -> Values:
        """The batch dimensions' indices of the flattened batch id (row-major)."""
        dims = self.plan.batch
        if not dims:
            return []
        assert flat is not None or math.prod(dims) == 1
        remaining = flat if flat is not None else index_constant(0)
        index: Values = []
        for d, size in reversed(list(enumerate(dims))):
            if d == 0:
                index.append(remaining)
            else:
                index.append(arith.remui(remaining, index_constant(size)))
                remaining = arith.divui(remaining, index_constant(size))
        return list(reversed(index))

    def _stage(
        self,
        entry: EntryFunction,
        tile: ir.Value,
        side: int,
        batch: Values,
        row0: ir.Value,
        col0: ir.Value,
        thread: ir.Value,
        place=None,
    ) -> ir.Value:
        """Copy one tile of operand ``side`` (0: A ``TM x TK``, 1: B ``TK x TN``) into
        shared memory, elements outside the operand as zeros; ``place(r, c)`` is the 1-D
        index of the tile's element ``(r, c)`` (the MMA path's ``SharedTiles``), else the
        tile is 2-D."""
        operand = self.dot.operands[side]
        for slot in self._slots(side, batch, row0, col0, thread):

            def stage(current: Values, slot=slot):
                value = self._read(entry, operand, slot.index, slot.inside)
                at = [slot.row, slot.col] if place is None else [place(slot.row, slot.col)]
                return [tensor.insert(value, current[0], at)]

            (tile,) = self._guarded(slot.used, [tile], stage)
        return tile

    def _slots(
        self, side: int, batch: Values, row0: ir.Value, col0: ir.Value, thread: ir.Value
    ) -> list[_Slot]:
        """The elements ``thread`` copies of the tile of operand ``side`` whose first
        element is (``row0``, ``col0``) of the operand: consecutive threads take
        consecutive elements of a tile row (coalesced global reads), or consecutive
        words of it (``_layout_word``: each thread's elements in order)."""
        plan = self.plan
        staging = self._staging(side)
        rows, cols, word, groups = staging.rows, staging.cols, staging.word, staging.groups
        whole_rows = staging.whole_rows
        extent_rows = (plan.m, plan.k) if side == 0 else (plan.k, plan.n)
        spans = (plan.tiles_m * plan.tm, plan.k_steps * plan.tk)
        if side == 1:
            spans = (plan.k_steps * plan.tk, plan.tiles_n * plan.tn)
        has_row = plan.has_m if side == 0 else plan.has_k
        has_col = plan.has_k if side == 0 else plan.has_n
        elements = rows * cols
        first_r = arith.divui(thread, index_constant(groups))
        first_c = arith.remui(thread, index_constant(groups))
        if word > 1:
            first_c = arith.muli(first_c, index_constant(word))
        slots = []
        for r in range(staging.rounds):
            if whole_rows:
                step = r * staging.rows_per_round
                local_r = _offset(first_r, step)
                used = _below(local_r, rows, step + staging.rows_per_round)
                g_row = _offset(arith.addi(row0, first_r), step)
                columns = [(_offset(first_c, e), e) for e in range(word)]
            else:
                slot = arith.addi(thread, index_constant(r * plan.threads)) if r else thread
                used = _below(slot, elements, (r + 1) * plan.threads)
                local_r = arith.divui(slot, index_constant(cols))
                g_row = arith.addi(row0, local_r)
                columns = [(arith.remui(slot, index_constant(cols)), None)]
            for local_c, e in columns:
                if e is None:
                    g_col = arith.addi(col0, local_c)
                else:
                    g_col = _offset(arith.addi(col0, first_c), e)
                inside = both(
                    _below(g_row, extent_rows[0], spans[0]),
                    _below(g_col, extent_rows[1], spans[1]),
                )
                index = [*batch, *([g_row] if has_row else []), *([g_col] if has_col else [])]
                slots.append(_Slot(used, local_r, local_c, index, inside))
        return slots

    def _staging(self, side: int) -> _Staging:
        """How the block copies operand ``side``'s tile. Where its threads cover whole tile
        rows a round, a thread keeps its column and moves down a fixed number of rows:
        every round's address is the first one plus a constant (an immediate offset, not
        a register of its own), the constant added last so that LLVM keeps one pointer
        for all rounds."""
        plan = self.plan
        rows, cols = (plan.tm, plan.tk) if side == 0 else (plan.tk, plan.tn)
        word = self._layout_word(side)
        word = word if cols % word == 0 else 1
        groups = cols // word
        whole_rows = plan.threads % groups == 0
        if not whole_rows:
            word, groups = 1, cols
        rounds = math.ceil(rows * cols / (plan.threads * word))
        return _Staging(rows, cols, plan.threads, word, groups, whole_rows, rounds)

    @property
    def _word(self) -> int:
        """Operand elements in a 32-bit word (1 off the MMA path): the fetched next K
        step is held one vector a word, one register each, instead of one register an
        element (s8: 16 bytes a thread)."""
        if self.plan.mma is None:
            return 1
        return gemm_mma.WORD_BYTES // self._shared_tiles.element_bytes

    def _layout_word(self, side: int) -> int:
        """Consecutive elements of a tile row a thread stages (``_slots``): a word of A on
        the MMA path (one 32-bit global load and shared store where A's rows are
        word-aligned; a thread's global addresses 4 words, not 16 bytes, apart), else 1.
        B is staged transposed: a word of its row would go to 4 tile rows, a warp's
        stores into rows 4 apart fall in 2 banks (4 conflicts a store request against
        1.5 element by element), so it stays element by element."""
        return self._word if side == 0 else 1

    def _read(
        self, entry: EntryFunction, operand: Instruction, index: Values, inside: ir.Value | None
    ) -> ir.Value:
        """``operand[index]`` as the tiles hold it (``_staged``), or zero where ``inside``
        fails."""
        element = operand.array_shape.element_type
        staged = self._staged

        def load() -> ir.Value:
            (value,) = entry.value_of(operand, index)
            scalar = mlir_types.to_scalar(value, element)
            return scalar if staged != self._accumulator else self._widen(scalar)

        if inside is None:
            return load()
        branch = scf.IfOp(inside, [staged], has_else=True)
        with ir.InsertionPoint(branch.then_block):
            scf.YieldOp([load()])
        with ir.InsertionPoint(branch.else_block):
            scf.YieldOp([self._staged_zero()])
        return branch.results[0]

    def _staged_zero(self) -> ir.Value:
        """A zero as the tiles hold it (``_staged``)."""
        if self._staged == self._accumulator:
            return self._zero()
        return arith.ConstantOp(self._staged, 0.0 if self.floating else 0).result

    def _guarded(self, condition: ir.Value | None, carried: Values, then) -> Values:
        """``then(carried)`` where ``condition`` holds (always when None), else ``carried``."""
        if condition is None:
            return then(carried)
        branch = scf.IfOp(condition, [v.type for v in carried], has_else=True)
        with ir.InsertionPoint(branch.then_block):
            scf.YieldOp(then(list(carried)))
        with ir.InsertionPoint(branch.else_block):
            scf.YieldOp(list(carried))
        return list(branch.results)


def _claims(analysis: object) -> bool:
    """Fusions whose one root is a canonical dot of types the emitter takes, or an
    elementwise epilogue of one (XLA gives a dot a kernel of its own). Zero-size
    dots (no output elements, or nothing to contract) stay with the loop emitter,
    which handles zero sizes for every fusion, and so do dots of other types (fp8:
    the loop emitter's elemental dot)."""
    if not isinstance(analysis, FusionAnalysis) or "dot" not in analysis.graph.opcodes:
        return False
    dot = gemm_roots_hero(analysis.roots)
    if dot is None:
        return False
    if accumulates_in_floats(dot) is None or has_no_output_elements(analysis.fusion):
        return False
    return all(op.array_shape.num_elements > 0 for op in dot.operands)


@hookimpl
def heron_emitter_specs() -> list[EmitterSpec]:
    return [
        EmitterSpec(
            name="gemm",
            priority=10,
            claims=_claims,
            factory=GemmEmitter,
            refuses_when_built=True,
            description="gemm: canonical dot, shared-memory tiles, mma.sync or scalar multiply-add",
        )
    ]
