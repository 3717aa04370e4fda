"""The sort emitter: a bitonic sorting network per row, in shared memory.

A ``sort`` orders every row along its ``dimensions={d}`` by its comparator
(``to_apply``, ``lhs_0, rhs_0, lhs_1, rhs_1, ... -> pred``), moving all its
operands together (a key and an s32 iota is an argsort). As XLA's sort
emitter does for rows that fit a tile in shared memory, one block loads whole
rows into shared memory (one tile per operand), sorts them there with a
bitonic network, and writes them out:

- the row length ``n`` is padded to ``P``, the next power of two (at least
  2); a row holds ``P / 2`` compare-and-swap pairs, one thread per pair;
  short rows are packed several to a block (``SortPlan``);
- the network is the one in which every comparison goes the same way: for
  block sizes ``2^(s+1)``, ``s = 0 .. log2(P) - 1``, first the element at
  ``i`` is compared with its mirror ``i ^ (2^(s+1) - 1)``, then with
  ``i + 2^j`` for ``j = s - 1 .. 0``; a barrier follows every step. The lower
  index keeps the element that comes first; the higher one is swapped in when
  ``comparator(higher, lower)`` holds, as XLA calls it. The steps are written out
  with constant distances, except on a grid of one block a core
  (:func:`heron.emitters.target.one_block_per_core`), whose kernel takes one
  block's latency however they are written: there they are loops over the
  stages and their steps (``SortPlan.rolled``), and the kernel's size, and
  LLVM's and ptxas's time, no longer grow with the network. The padding behaves as
  elements ordered after everything and never moves, so a pair whose higher
  index is at or past ``n`` is skipped and never read;
- ``is_stable=true``: ties (neither element ordered before the other) are
  broken by the elements' original positions, which is XLA's
  StableSortExpander (an iota operand and a tie-breaking comparator) done
  inside the kernel. As XLA reuses an iota operand along the sorted dimension
  when the sort has one (argsort), so does the emitter (``SortPlan.positions``);
  otherwise an s32 tile holds the positions. Without ``is_stable``, equal
  elements come out in the network's order, as XLA's do;
- the comparator is emitted as a function (``pure_call``) and called as it
  is written: XLA's total order for floats (NaN, -0.0) is the comparator's
  ``compare`` with ``type=TOTALORDER``, nothing the emitter adds.

The outputs are written whole (in shared memory, every element once), so the
kernel needs no buffer shared with its operands; the operands may be any
elemental producers in the fusion.

Rows longer than a block's threads or its shared memory are sorted by one
block per row in the output buffers, with XLA's split of the network
(``SortPlan.phases``): the stages whose blocks fit a ``chunk``-element shared
tile run tile by tile in shared memory (loaded from the operands), then for
each later stage its long-distance steps run over the row in the outputs,
each thread doing several pairs, and its short ones tile by tile again
(loaded from the outputs). XLA launches one kernel per global step, all
blocks cooperating on a row; heron's kernels are one launch per fusion, so a
long row here uses one SM. A stable sort that long needs an iota operand for
its positions (they must survive the global steps, and there is no scratch
buffer for a position tile) and is refused without one, naming the sort, its
shape and the limit its rows exceed.
"""

from __future__ import annotations

import math

import attrs
from mlir import ir
from mlir.dialects import arith, scf, tensor

from heron.emitters import mlir_types
from heron.emitters.dialect import allocate_shared_op, sync_threads
from heron.emitters.dialect.irdl_source import MAX_ITER_ARGS
from heron.emitters.emitter_base import EntryFunction, FusionEmitter
from heron.emitters.fusion_analysis import FusionAnalysis, claims_root, has_no_output_elements
from heron.emitters.hookspecs import EmitterSpec, hookimpl
from heron.emitters.ir_utils import both, index_constant
from heron.emitters.pipeline.unroll import KEEP_ROLLED
from heron.emitters.target import one_block_per_core
from heron.hlo.element_types import ElementType
from heron.hlo.errors import UnsupportedError
from heron.hlo.ir import Instruction
from heron.hlo.passes.stable_sort_expander import counts_along
from heron.indexing.thread_maps import LaunchDimensions
from heron.target import Target

__all__ = ["SortEmitter", "SortPlan", "heron_emitter_specs", "plan_sort"]

Values = list[ir.Value]

#: Threads a block of short rows is filled up to (rows are packed until then).
MIN_THREADS_PER_BLOCK = 128
#: Bytes of the position tile of a stable sort (s32 per element).
POSITION_BYTES = 4


@attrs.frozen
class SortPlan:
    """How a sort is laid out: rows, their padded length, rows and threads per block."""

    dimension: int
    length: int  #: n, the elements of one row
    padded: int  #: P, the next power of two >= max(n, 2)
    rows: int  #: the product of the other dimensions
    rows_per_block: int
    stable: bool
    #: For a stable sort, the operand that is an iota along the sorted dimension
    #: (its tile holds the original positions), or None: an extra position tile.
    positions: int | None = None
    #: Whether rows are sorted in shared memory (else in the output buffers).
    in_shared: bool = True
    #: Threads that sort one row (``pairs`` in shared memory; at most a block).
    threads_per_row: int = 0
    #: For rows sorted in the outputs: the elements of the shared-memory tile the
    #: in-tile steps run in (a power of two below ``padded``), 0 when none fits.
    chunk: int = 0
    #: Whether a network in shared memory is emitted as loops over its stages and steps
    #: (the distances computed at run time) instead of written out step by step: on a
    #: grid of one block a core (:func:`heron.emitters.target.one_block_per_core`).
    rolled: bool = False

    @property
    def rounds(self) -> int:
        """Pairs each thread compares per step (1 in shared memory)."""
        return self.pairs // self.threads_per_row

    @property
    def position_tile(self) -> bool:
        """Whether the kernel keeps a tile of its own for the original positions."""
        return self.stable and self.positions is None

    @property
    def pairs(self) -> int:
        """Compare-and-swap pairs of one row: one thread each."""
        return self.padded // 2

    @property
    def launch(self) -> LaunchDimensions:
        blocks = math.ceil(self.rows / self.rows_per_block)
        return LaunchDimensions(block_x=blocks, thread_x=self.rows_per_block * self.threads_per_row)

    @property
    def steps(self) -> list[tuple[int, bool]]:
        """The network: (distance exponent, mirrored) per step, in order."""
        stages = self.padded.bit_length() - 1
        return [(j, j == s) for s in range(stages) for j in range(s, -1, -1)]

    @property
    def phases(self) -> list[tuple[bool, list[tuple[int, bool]]]]:
        """The network of a row sorted in the outputs through ``chunk``-element tiles,
        as XLA's sort emitter splits it: (in a tile, steps) in order.

        Every stage whose blocks fit a tile, and the steps of a later stage whose
        pairs lie within a tile (distance below ``chunk / 2``), run tile by tile
        in shared memory; the others are steps over the whole row in the outputs.
        """
        stages = self.padded.bit_length() - 1
        tile = self.chunk.bit_length() - 1
        phases = [(True, [(j, j == s) for s in range(tile) for j in range(s, -1, -1)])]
        for s in range(tile, stages):
            phases += [(False, [(j, j == s)]) for j in range(s, tile - 1, -1)]
            phases.append((True, [(j, False) for j in range(tile - 1, -1, -1)]))
        return phases


def _kept_rolled(loop: scf.ForOp) -> scf.ForOp:
    """``loop``, marked so that unroll-loops leaves it a loop (a phase, not elements)."""
    loop.operation.attributes[KEEP_ROLLED] = ir.UnitAttr.get()
    return loop


def _shared_type(element: ElementType) -> ir.Type:
    """A tile's element type: the register type, sub-byte integers widened to ``i8``."""
    scalar = mlir_types.scalar_type(element)
    if isinstance(scalar, ir.IntegerType) and 1 < ir.IntegerType(scalar).width < 8:
        return ir.IntegerType.get_signless(8)
    return scalar


def _shared_bytes(element: ElementType) -> int:
    return max(1, math.ceil(element.bit_width / 8))


def plan_sort(sort: Instruction, target: Target) -> SortPlan:
    """The layout of ``sort`` on ``target``; ``UnsupportedError`` when a row does not fit."""
    (dimension,) = tuple(sort.attributes.get("dimensions", ()))
    shape = sort.operands[0].array_shape
    length = shape.dims[dimension]
    rows = math.prod(n for d, n in enumerate(shape.dims) if d != dimension)
    stable = bool(sort.attributes.get("is_stable", False))
    positions = _iota_operand(sort, dimension, length) if stable else None
    padded = max(2, 1 << max(0, length - 1).bit_length())
    pairs = padded // 2
    row_bytes = padded * (
        sum(_shared_bytes(op.array_shape.element_type) for op in sort.operands)
        + (POSITION_BYTES if stable and positions is None else 0)
    )
    where = f"sort '{sort.name}' of {shape} along dimension {dimension}"
    limit = target.threads_per_block_limit
    too_long = []
    if pairs > limit:
        too_long.append(f"needs {pairs} threads (a block has at most {limit})")
    if row_bytes > target.shared_memory_per_block:
        too_long.append(
            f"needs {row_bytes} bytes of shared memory (a block has"
            f" {target.shared_memory_per_block})"
        )
    if too_long:
        if stable and positions is None:
            raise UnsupportedError(
                f"{where}: a row in shared memory {' and '.join(too_long)}; sorted in the"
                " output buffers instead, a stable sort needs an iota operand along the sorted"
                " dimension for the original positions, and it has none",
                sort.location,
            )
        threads = min(pairs, limit)
        element_bytes = row_bytes // padded
        chunk = (
            1 << (min(2 * threads, target.shared_memory_per_block // element_bytes)).bit_length()
        )
        chunk = min(chunk // 2, padded // 2)
        chunk = chunk if chunk >= 2 else 0
        return SortPlan(
            dimension, length, padded, rows, 1, stable, positions, False, threads, chunk
        )
    per_block = max(1, MIN_THREADS_PER_BLOCK // pairs)
    per_block = min(
        per_block,
        rows,
        target.shared_memory_per_block // row_bytes,
        target.threads_per_block_limit // pairs,
    )
    per_block = max(1, per_block)
    rolled = one_block_per_core(math.ceil(rows / per_block), target) and padded > 2
    return SortPlan(
        dimension, length, padded, rows, per_block, stable, positions, True, pairs, rolled=rolled
    )


def _iota_operand(sort: Instruction, dimension: int, length: int) -> int | None:
    """The first operand that holds every position along ``dimension`` (an iota)."""
    for k, operand in enumerate(sort.operands):
        if counts_along(operand, dimension, length):
            return k
    return None


class SortEmitter(FusionEmitter):
    """One block sorts ``rows_per_block`` rows in shared memory (see the module docstring)."""

    name = "sort"

    def __init__(self, analysis: FusionAnalysis) -> None:
        super().__init__(analysis)
        self.sort = self.only_root("sort")
        self.operands = tuple(self.sort.operands)
        if len(self.operands) + 1 > MAX_ITER_ARGS:
            raise self.error(
                f"{len(self.operands)} operands (and a position tile) exceed the {MAX_ITER_ARGS}"
                " tensors a barrier threads",
                self.sort,
            )
        self.plan = plan_sort(self.sort, self.target)
        # Nothing to sort: a kernel of one thread that writes nothing, as the loop
        # emitter gives empty outputs (it cannot: a sort has no elemental lowering).
        self.empty = has_no_output_elements(self.fusion)
        # Sorted in the output buffers, an element is written at every step that moves it.
        self.writes_each_element_once = self.plan.in_shared

    def launch_dimensions(self) -> LaunchDimensions:
        if self.empty:
            return LaunchDimensions(block_x=1, thread_x=1)
        return self.plan.launch

    def heroes(self) -> tuple[Instruction, ...]:
        return (self.sort,)

    def unemitted_heroes(self) -> tuple[Instruction, ...]:
        """The sort has no elemental lowering: the entry function is the sort."""
        return (self.sort,)

    # -- the kernel ----------------------------------------------------------------------

    def emit_entry(self, entry: EntryFunction) -> Values:
        if self.empty:
            return list(entry.outputs)
        plan = self.plan
        thread = entry.thread_ids[0]
        block = entry.block_ids[0]
        threads = index_constant(plan.threads_per_row)
        local_row = arith.divui(thread, threads)
        lane = arith.remui(thread, threads)
        row = arith.addi(arith.muli(block, index_constant(plan.rows_per_block)), local_row)
        row_ok = None
        if plan.rows % plan.rows_per_block:
            row_ok = arith.cmpi(arith.CmpIPredicate.ult, row, index_constant(plan.rows))
        self._row_index = self._row_prefix(row)
        self._local_row = local_row
        if not plan.in_shared:
            return self._sort_in_outputs(entry, lane)
        pair = lane
        tiles = [
            allocate_shared_op(self._tile_type(_shared_type(e))).results[0]
            for e in self._elements()
        ]
        if plan.position_tile:
            tiles.append(allocate_shared_op(self._tile_type(self._position_type())).results[0])
        halves = [pair, arith.addi(pair, index_constant(plan.pairs))]
        for position in halves:
            tiles = self._load(entry, tiles, position, row_ok)
        tiles = sync_threads(tiles)
        # Written out, each step's distances constants: in shared memory a step is a few
        # accesses and a barrier, and its index arithmetic counts (these are the kernels
        # the GPU measured). A grid of one block a core keeps the loops (SortPlan.rolled).
        if plan.rolled:
            tiles = self._network(
                plan.steps,
                tiles,
                lambda d, m, current: sync_threads(self._step(entry, current, pair, d, m, row_ok)),
            )
        else:
            for distance, mirrored in plan.steps:
                tiles = self._step(entry, tiles, pair, distance, mirrored, row_ok)
                tiles = sync_threads(tiles)
        outputs = list(entry.outputs)
        for position in halves:
            outputs = self._store(tiles, outputs, position, row_ok)
        return outputs

    def _sort_in_outputs(self, entry: EntryFunction, lane: ir.Value) -> Values:
        """Rows too long for a tile: one block per row, sorted in the output buffers.

        Each thread copies every ``threads_per_row``-th element of the row to
        the outputs, then does ``rounds`` pairs of every step; a barrier
        follows the copy and each step (global memory is coherent within a
        block across ``bar.sync``).
        """
        plan = self.plan
        stride = index_constant(plan.threads_per_row)

        def nth(r: ir.Value) -> ir.Value:
            return arith.addi(lane, arith.muli(r, stride))

        outputs = list(entry.outputs)
        if plan.chunk:
            return self._sort_in_chunks(entry, lane, outputs, nth)
        copies = math.ceil(plan.length / plan.threads_per_row)
        outputs = self._rounds(
            copies, outputs, lambda r, current: self._copy(entry, current, nth(r))
        )
        outputs = sync_threads(outputs)
        return self._network(
            plan.steps, outputs, lambda d, m, current: self._global_step(entry, nth, d, m, current)
        )

    def _global_step(
        self, entry: EntryFunction, nth, distance: int | ir.Value, mirrored, outputs: Values
    ) -> Values:
        """One step of the network over a row in the outputs: each thread's ``rounds``
        pairs (its ``nth(r)``), then a barrier."""
        outputs = self._rounds(
            self.plan.rounds,
            outputs,
            lambda r, carried: self._step(entry, carried, nth(r), distance, mirrored, None),
        )
        return sync_threads(outputs)

    def _sort_in_chunks(self, entry: EntryFunction, lane: ir.Value, outputs: Values, nth) -> Values:
        """The row through ``chunk``-element shared tiles (``SortPlan.phases``).

        A tile phase goes over the row's tiles in turn: threads ``lane < chunk/2``
        load a tile (from the operands in the first phase, else from the
        outputs), run the phase's steps on it, and store it into the outputs; a
        global step compares pairs in the outputs, ``rounds`` pairs a thread.
        A barrier follows each load, step and store.
        """
        plan = self.plan
        half = plan.chunk // 2
        tiles = [
            allocate_shared_op(ir.RankedTensorType.get([1, plan.chunk], _shared_type(e))).results[0]
            for e in self._elements()
        ]
        active = None
        if plan.threads_per_row > half:
            active = arith.cmpi(arith.CmpIPredicate.ult, lane, index_constant(half))
        chunks = math.ceil(plan.length / plan.chunk)
        count = len(tiles)

        def tile_phase(carried: Values, steps: list[tuple[int, bool]], first: bool) -> Values:
            """The row's tiles in turn through ``steps`` (see the docstring)."""

            def one_tile(c: ir.Value, carried: Values) -> Values:
                base = arith.muli(c, index_constant(plan.chunk))
                current_tiles, current = carried[:count], carried[count:]
                for position in (lane, arith.addi(lane, index_constant(half))):
                    current_tiles = self._guarded(
                        active,
                        current_tiles,
                        lambda t, p=position: self._load_chunk(entry, t, current, base, p, first),
                    )
                current_tiles = sync_threads(current_tiles)
                current_tiles = self._network(
                    steps,
                    current_tiles,
                    lambda d, m, t: sync_threads(
                        self._step(entry, t, lane, d, m, active, base=base)
                    ),
                )
                for position in (lane, arith.addi(lane, index_constant(half))):
                    current = self._guarded(
                        active,
                        current,
                        lambda o, p=position: self._store_chunk(current_tiles, o, base, p),
                    )
                return sync_threads([*current_tiles, *current])

            return self._rounds(chunks, carried, one_tile, keep_rolled=True)

        # SortPlan.phases as loops: the first stages in tiles, then for each later stage s
        # its steps of distance s down to the tile's in the outputs, the rest in tiles.
        stages = plan.padded.bit_length() - 1
        tile = plan.chunk.bit_length() - 1
        first_steps = [(j, j == s) for s in range(tile) for j in range(s, -1, -1)]
        carried = tile_phase([*tiles, *outputs], first_steps, True)
        stage_loop = _kept_rolled(
            scf.ForOp(index_constant(tile), index_constant(stages), index_constant(1), carried)
        )
        with ir.InsertionPoint(stage_loop.body):
            stage = stage_loop.induction_variable
            current_tiles, current = (
                list(stage_loop.inner_iter_args)[:count],
                list(stage_loop.inner_iter_args)[count:],
            )
            far = scf.ForOp(
                index_constant(0),
                arith.subi(arith.addi(stage, index_constant(1)), index_constant(tile)),
                index_constant(1),
                current,
            )
            with ir.InsertionPoint(far.body):
                t = far.induction_variable
                mirrored = arith.cmpi(arith.CmpIPredicate.eq, t, index_constant(0))
                distance = arith.subi(stage, t)
                scf.YieldOp(
                    self._global_step(entry, nth, distance, mirrored, list(far.inner_iter_args))
                )
            near = [(j, False) for j in range(tile - 1, -1, -1)]
            scf.YieldOp(tile_phase([*current_tiles, *far.results], near, False))
        tiles, outputs = list(stage_loop.results)[:count], list(stage_loop.results)[count:]
        return outputs

    def _load_chunk(
        self,
        entry: EntryFunction,
        tiles: Values,
        outputs: Values,
        base: ir.Value,
        position: ir.Value,
        from_operands: bool,
    ) -> Values:
        """Element ``base + position`` of the row into the tiles: from the operands
        (any elemental producer computed) or, after the first phase, the outputs."""
        where = arith.addi(base, position)
        inside = self._in_row(where)
        slot = [index_constant(0), position]

        def fill(current: Values) -> Values:
            index = self._operand_index(where)
            result = list(current)
            for k, (operand, element) in enumerate(
                zip(self.operands, self._elements(), strict=True)
            ):
                if from_operands:
                    (value,) = entry.value_of(operand, index)
                else:
                    value = mlir_types.to_scalar(tensor.extract(outputs[k], index), element)
                result[k] = tensor.insert(_to_shared(value, element), result[k], slot)
            return result

        return self._guarded(inside, tiles, fill)

    def _store_chunk(
        self, tiles: Values, outputs: Values, base: ir.Value, position: ir.Value
    ) -> Values:
        """Element ``position`` of the tiles into the outputs at ``base + position``."""
        where = arith.addi(base, position)
        inside = self._in_row(where)
        slot = [index_constant(0), position]

        def write(current: Values) -> Values:
            index = self._operand_index(where)
            result = list(current)
            for k, element in enumerate(self._elements()):
                value = _from_shared(tensor.extract(tiles[k], slot), element)
                result[k] = tensor.insert(mlir_types.to_element(value, element), result[k], index)
            return result

        return self._guarded(inside, outputs, write)

    def _network(self, steps: list[tuple[int, bool]], carried: Values, step) -> Values:
        """``step(distance, mirrored, carried)`` for each of ``steps`` in order, as loops
        (over the stages, then a stage's steps), the distance and whether the step is
        mirrored computed at run time: written out, a row of 16,384 elements held its
        network's 105 steps and the tile phases' 91 (1.3 s of compile for one sort).
        The two shapes of step list a long row makes are rolled: a whole network (a
        tile phase of the first stages, ``SortPlan.steps``) and a run of unmirrored
        steps down to distance 0; any other list is written out.
        """
        stages = (math.isqrt(8 * len(steps) + 1) - 1) // 2
        if steps == [(j, j == s) for s in range(stages) for j in range(s, -1, -1)]:
            outer = _kept_rolled(
                scf.ForOp(index_constant(0), index_constant(stages), index_constant(1), carried)
            )
            with ir.InsertionPoint(outer.body):
                stage = outer.induction_variable
                inner = scf.ForOp(
                    index_constant(0),
                    arith.addi(stage, index_constant(1)),
                    index_constant(1),
                    list(outer.inner_iter_args),
                )
                with ir.InsertionPoint(inner.body):
                    t = inner.induction_variable
                    distance = arith.subi(stage, t)
                    mirrored = arith.cmpi(arith.CmpIPredicate.eq, t, index_constant(0))
                    scf.YieldOp(step(distance, mirrored, list(inner.inner_iter_args)))
                scf.YieldOp(list(inner.results))
            return list(outer.results)
        if steps == [(j, False) for j in range(len(steps) - 1, -1, -1)]:
            top = index_constant(len(steps) - 1)
            loop = _kept_rolled(
                scf.ForOp(index_constant(0), index_constant(len(steps)), index_constant(1), carried)
            )
            with ir.InsertionPoint(loop.body):
                distance = arith.subi(top, loop.induction_variable)
                scf.YieldOp(step(distance, False, list(loop.inner_iter_args)))
            return list(loop.results)
        for distance, mirrored in steps:
            carried = step(distance, mirrored, carried)
        return carried

    def _rounds(self, count: int, carried: Values, body, keep_rolled: bool = False) -> Values:
        """``body(r, carried)`` for ``r`` in ``0 .. count-1`` (an ``scf.for`` when > 1;
        ``keep_rolled``: one unroll-loops leaves a loop, a phase over a row's tiles)."""
        if count == 1:
            return body(index_constant(0), carried)
        loop = scf.ForOp(index_constant(0), index_constant(count), index_constant(1), carried)
        if keep_rolled:
            _kept_rolled(loop)
        with ir.InsertionPoint(loop.body):
            scf.YieldOp(body(loop.induction_variable, list(loop.inner_iter_args)))
        return list(loop.results)

    def _copy(self, entry: EntryFunction, outputs: Values, position: ir.Value) -> Values:
        """Element ``position`` of the row, every operand, into the outputs."""
        inside = arith.cmpi(arith.CmpIPredicate.ult, position, index_constant(self.plan.length))

        def copy(current: Values) -> Values:
            index = self._operand_index(position)
            result = list(current)
            for k, (operand, element) in enumerate(
                zip(self.operands, self._elements(), strict=True)
            ):
                (value,) = entry.value_of(operand, index)
                stored = mlir_types.to_element(value, element)
                result[k] = tensor.insert(stored, result[k], index)
            return result

        return self._guarded(inside, outputs, copy)

    def _in_row(self, position: ir.Value) -> ir.Value | None:
        """``position < n`` for a position below ``P``; None (always) when ``n == P``."""
        if self.plan.length == self.plan.padded:
            return None
        return arith.cmpi(arith.CmpIPredicate.ult, position, index_constant(self.plan.length))

    def _slot(self, position: ir.Value, in_tile: bool) -> Values:
        """Where element ``position`` of the thread's row (or chunk) is: its tile or
        its output."""
        if in_tile:
            return [self._local_row, position]
        return self._operand_index(position)

    def _scalar(self, value: ir.Value, element: ElementType, in_tile: bool) -> ir.Value:
        """A value read from a tile or an output as the comparator takes it."""
        if in_tile:
            return _from_shared(value, element)
        return mlir_types.to_scalar(value, element)

    def _elements(self) -> list[ElementType]:
        return [op.array_shape.element_type for op in self.operands]

    def _position_type(self) -> ir.Type:
        return ir.IntegerType.get_signless(32)

    def _tile_type(self, element: ir.Type) -> ir.RankedTensorType:
        return ir.RankedTensorType.get([self.plan.rows_per_block, self.plan.padded], element)

    def _row_prefix(self, row: ir.Value) -> list[ir.Value | None]:
        """The operand index of ``row``'s elements, the sorted dimension left as None.

        Rows enumerate the other dimensions in the operand's physical order
        (most major first), so consecutive blocks read neighbouring memory.
        """
        shape = self.operands[0].array_shape
        index: list[ir.Value | None] = [None] * shape.rank
        remaining = row
        others = [d for d in shape.minor_to_major if d != self.plan.dimension]
        for position, d in enumerate(others):
            size = shape.dims[d]
            if position == len(others) - 1:
                index[d] = remaining
            else:
                index[d] = arith.remui(remaining, index_constant(size))
                remaining = arith.divui(remaining, index_constant(size))
        return index

    def _operand_index(self, position: ir.Value) -> Values:
        index = list(self._row_index)
        index[self.plan.dimension] = position
        return [v for v in index if v is not None]

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

    def _load(
        self, entry: EntryFunction, tiles: Values, position: ir.Value, row_ok: ir.Value | None
    ) -> Values:
        """Element ``position`` of the thread's row, every operand, into the tiles."""
        plan = self.plan
        inside = self._in_row(position)
        slot = [self._local_row, position]

        def fill(current: Values) -> Values:
            index = self._operand_index(position)
            result = list(current)
            for k, (operand, element) in enumerate(
                zip(self.operands, self._elements(), strict=True)
            ):
                (value,) = entry.value_of(operand, index)
                stored = _to_shared(value, element)
                result[k] = tensor.insert(stored, result[k], slot)
            if plan.position_tile:
                original = arith.index_cast(self._position_type(), position)
                result[-1] = tensor.insert(original, result[-1], slot)
            return result

        return self._guarded(both(row_ok, inside), tiles, fill)

    def _step(
        self,
        entry: EntryFunction,
        tiles: Values,
        pair: ir.Value,
        distance: int | ir.Value,
        mirrored: bool | ir.Value,
        row_ok: ir.Value | None,
        base: ir.Value | None = None,
    ) -> Values:
        """One compare-and-swap of the thread's pair for one step of the network
        (``base``: in the shared tile of the row's chunk starting there). The distance
        exponent and whether the step is mirrored are constants, or index and i1 values
        of a rolled network (:meth:`_network`)."""
        if isinstance(distance, int):
            span = 1 << distance
            low = arith.addi(
                arith.muli(arith.divui(pair, index_constant(span)), index_constant(2 * span)),
                arith.remui(pair, index_constant(span)),
            )
            mask = index_constant(2 * span - 1)
            width = index_constant(span)
        else:
            one = index_constant(1)
            width = arith.shli(one, distance)
            mask = arith.subi(arith.shli(width, one), one)
            low = arith.addi(
                arith.shli(arith.shrui(pair, distance), arith.addi(distance, one)),
                arith.andi(pair, arith.subi(width, one)),
            )
        if isinstance(mirrored, bool):
            high = arith.xori(low, mask) if mirrored else arith.addi(low, width)
        else:
            high = arith.select(mirrored, arith.xori(low, mask), arith.addi(low, width))
        in_tile = self.plan.in_shared or base is not None
        inside = self._in_row(high if base is None else arith.addi(base, high))
        low_slot = self._slot(low, in_tile)
        high_slot = self._slot(high, in_tile)

        def exchange(current: Values) -> Values:
            lows = [tensor.extract(t, low_slot) for t in current]
            highs = [tensor.extract(t, high_slot) for t in current]
            swap = self._ordered_before(entry, highs, lows, in_tile)
            result = list(current)
            for k, tile in enumerate(current):
                first = arith.select(swap, highs[k], lows[k])
                second = arith.select(swap, lows[k], highs[k])
                result[k] = tensor.insert(second, tensor.insert(first, tile, low_slot), high_slot)
            return result

        return self._guarded(both(row_ok, inside), tiles, exchange)

    def _ordered_before(
        self, entry: EntryFunction, a: Values, b: Values, in_tile: bool
    ) -> ir.Value:
        """Whether the element ``a`` (tile values) goes before ``b``: the comparator, then
        for a stable sort the original positions of elements neither orders first."""
        comparator = self.sort.called("to_apply")

        def compare(x: Values, y: Values) -> ir.Value:
            scalars = []
            for element, xv, yv in zip(self._elements(), x, y, strict=False):
                scalars += [
                    self._scalar(xv, element, in_tile),
                    self._scalar(yv, element, in_tile),
                ]
            (result,) = entry.call_computation(comparator, scalars)
            return result

        before = compare(a, b)
        if not self.plan.stable:
            return before
        after = compare(b, a)
        true = arith.ConstantOp(ir.IntegerType.get_signless(1), 1).result
        tie = arith.xori(arith.ori(before, after), true)
        k = -1 if self.plan.positions is None else self.plan.positions
        earlier = arith.cmpi(arith.CmpIPredicate.slt, a[k], b[k])
        return arith.ori(before, arith.andi(tie, earlier))

    def _store(
        self, tiles: Values, outputs: Values, position: ir.Value, row_ok: ir.Value | None
    ) -> Values:
        """Element ``position`` of the sorted row into every output."""
        inside = self._in_row(position)
        slot = [self._local_row, position]

        def write(current: Values) -> Values:
            index = self._operand_index(position)
            result = list(current)
            for k, element in enumerate(self._elements()):
                value = _from_shared(tensor.extract(tiles[k], slot), element)
                stored = mlir_types.to_element(value, element)
                result[k] = tensor.insert(stored, result[k], index)
            return result

        return self._guarded(both(row_ok, inside), outputs, write)


def _to_shared(value: ir.Value, element: ElementType) -> ir.Value:
    target = _shared_type(element)
    if value.type == target:
        return value
    return arith.extui(target, value)


def _from_shared(value: ir.Value, element: ElementType) -> ir.Value:
    scalar = mlir_types.scalar_type(element)
    if value.type == scalar:
        return value
    return arith.trunci(scalar, value)


@hookimpl
def heron_emitter_specs() -> list[EmitterSpec]:
    return [
        EmitterSpec(
            name="sort",
            priority=10,
            claims=claims_root("sort"),
            factory=SortEmitter,
            description="sort: bitonic sorting network per row in shared memory",
            refuses_when_built=True,  # every limit is its constructor's
        )
    ]
