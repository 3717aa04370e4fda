"""The top-k emitter: one block per row keeps the row's running top ``k``.

A ``topk`` (``k``, ``largest``) gives, along the last dimension, the ``k``
largest (smallest) values and their s32 indices, the best first and equal
values by increasing index, in total order for floats (NaN above +inf, -NaN
below -inf, -0.0 below +0.0): the evaluator's ``topk`` and XLA's TopK
kernel. The top-k decomposer (``heron.hlo.passes.topk_decomposer``) decides
which ``topk`` instructions reach this emitter (XLA's TopkSpecializer
conditions, ``k <= 16``); the emitter itself takes any ``k`` whose lists fit
the registers and shared memory, of any integer or float type.

The kernel, for a row of ``n`` elements and ``T`` threads (``T`` the power of
two nearest ``n / k``, at most ``library_kernels.ROW_THREADS``):

- each element becomes an integer *key* whose signed order is the wanted
  order: a float's bits, negative ones with every bit but the sign flipped
  (total order), an unsigned integer with its top bit flipped, all inverted
  for ``largest=false``; widened to 32 (64) bits. The key is invertible, so
  the lists hold keys and indices only and the output value is the key's
  inverse, bit for bit (NaN payloads included);
- thread ``t`` reads elements ``t, t + T, ...`` and keeps its best ``k`` in
  registers, a list sorted best first; an element that beats the list's last
  is inserted by ``k`` compare-and-swaps with selects (no local memory), and
  past a row's first elements most beat nothing and cost one comparison. "Better" is a larger key,
  then a lower index, a total order, so the merge order cannot change the
  result; unfilled slots hold a key below every element and index ``2^31-1``;
- ``log2(T)`` merge rounds through shared memory: every thread writes its
  list to a ``[T * k]`` key tile and index tile, a barrier, thread ``t`` with
  ``t % 2s == 0`` inserts the list of thread ``t + s`` into its own, a barrier;
- thread 0 writes the ``k`` values (keys turned back) and indices.

On a grid of one block a core (:func:`heron.emitters.target.one_block_per_core`)
the scan and the offers stay loops however few their trips (``TopkPlan.rolled``):
the kernel takes one block's latency there, and a smaller one compiles faster.

Launch: one block of ``T`` threads per row. XLA's TopK kernel is one block
per row too (its rows are loaded with vector loads and merged across warps
with shuffles); heron's merges go through shared memory.
"""

from __future__ import annotations

import math

import attrs
from mlir import ir
from mlir.dialects import arith, scf, tensor

from heron.emitters import mlir_types
from heron.emitters.dialect import allocate_shared_op, sync_threads_op
from heron.emitters.emitter_base import EntryFunction, FusionEmitter
from heron.emitters.fusion_analysis import FusionAnalysis, claims_root, has_no_output_elements
from heron.emitters.hookspecs import EmitterSpec, hookimpl
from heron.emitters.ir_utils import index_constant, int_constant
from heron.emitters.library_kernels import topk_key_width, topk_row_threads
from heron.emitters.pipeline.unroll import KEEP_ROLLED
from heron.emitters.target import one_block_per_core
from heron.hlo.element_types import ElementType
from heron.hlo.errors import UnsupportedError
from heron.hlo.ir import Instruction
from heron.indexing.thread_maps import LaunchDimensions
from heron.target import Target

__all__ = ["TopkEmitter", "TopkPlan", "check_shared_memory", "heron_emitter_specs", "plan_topk"]

Values = list[ir.Value]

#: The most ``k`` whose lists a thread keeps in registers (2k values).
MAX_K = 64
#: The index of an unfilled list slot: after every real element's.
NO_INDEX = 2**31 - 1


@attrs.frozen
class TopkPlan:
    """How a top-k is laid out: rows, their length, ``k`` and threads per row."""

    length: int  #: n, the elements of one row
    rows: int
    k: int
    threads: int  #: T, a power of two
    key_width: int  #: 32 or 64: the keys' integer width
    largest: bool
    #: Whether the scan and a merge round's offers stay loops however few their trips
    #: (:func:`heron.emitters.target.one_block_per_core`: a grid of one block a core).
    rolled: bool = False

    @property
    def per_thread(self) -> int:
        """Elements each thread reads (the last ones guarded)."""
        return math.ceil(self.length / self.threads)

    @property
    def tile_bytes(self) -> int:
        """The shared memory of the merge rounds: a key and an index per list slot."""
        return self.threads * self.k * (self.key_width // 8 + 4)

    @property
    def rounds(self) -> int:
        return self.threads.bit_length() - 1

    @property
    def launch(self) -> LaunchDimensions:
        return LaunchDimensions(block_x=max(1, self.rows), thread_x=self.threads)


def plan_topk(topk: Instruction, target: Target) -> TopkPlan:
    """The layout of ``topk`` on ``target``; ``UnsupportedError`` naming what does not fit."""
    shape = topk.operands[0].array_shape
    element = shape.element_type
    where = f"topk '{topk.name}' of {shape}"
    if element.is_complex or not (element.is_integral or element.is_floating):
        raise UnsupportedError(f"{where}: no order for {element.value} values", topk.location)
    if shape.rank < 1:
        raise UnsupportedError(f"{where}: a topk needs an operand of rank >= 1", topk.location)
    k = int(topk.attr("k"))
    length = shape.dims[-1]
    if k > MAX_K:
        raise UnsupportedError(
            f"{where}: k={k} exceeds the {MAX_K} a thread keeps in registers", topk.location
        )
    width = topk_key_width(element)
    threads = topk_row_threads(length, k, target)
    rows = math.prod(shape.dims[:-1])
    largest = bool(topk.attributes.get("largest", True))
    rolled = one_block_per_core(max(1, rows), target)
    plan = TopkPlan(length, rows, k, threads, width, largest, rolled)
    check_shared_memory(plan, target, where, topk)
    return plan


def check_shared_memory(plan: TopkPlan, target: Target, where: str, inst: Instruction) -> None:
    """Refuse ``plan`` where its merge tiles exceed a block's shared memory on ``target``."""
    if plan.tile_bytes > target.shared_memory_per_block:
        raise UnsupportedError(
            f"{where}: k={plan.k} lists of {plan.threads} threads need {plan.tile_bytes} bytes"
            f" of shared memory (a block has {target.shared_memory_per_block})",
            inst.location,
        )


class TopkEmitter(FusionEmitter):
    """One block per row keeps the running top ``k`` (see the module docstring)."""

    name = "topk"

    def __init__(self, analysis: FusionAnalysis) -> None:
        super().__init__(analysis)
        self.topk = self.only_root("topk")
        (self.operand,) = self.topk.operands
        self.element: ElementType = self.operand.array_shape.element_type
        self.plan = plan_topk(self.topk, self.target)
        self.empty = has_no_output_elements(self.fusion)
        # Only thread 0 of a row writes it, each element once.
        self.writes_each_element_once = True

    def launch_dimensions(self) -> LaunchDimensions:
        if self.empty:
            return LaunchDimensions(block_x=1, thread_x=1)
        return self.plan.launch

    def heroes(self) -> tuple[Instruction, ...]:
        return (self.topk,)

    def unemitted_heroes(self) -> tuple[Instruction, ...]:
        """The topk has no elemental lowering: the entry function is the topk."""
        return (self.topk,)

    # -- keys ----------------------------------------------------------------------------

    def _key_type(self) -> ir.IntegerType:
        return ir.IntegerType.get_signless(self.plan.key_width)

    def _bits_type(self) -> ir.IntegerType:
        return ir.IntegerType.get_signless(self.element.bit_width)

    def _to_key(self, value: ir.Value) -> ir.Value:
        """The element as a key whose signed order is the wanted order."""
        width = self.element.bit_width
        bits = value
        if value.type != self._bits_type():
            bits = arith.bitcast(self._bits_type(), value)
        bits = self._flip(bits, width)
        key = arith.extsi(self._key_type(), bits) if width < self.plan.key_width else bits
        if not self.plan.largest:
            key = arith.xori(key, int_constant(-1, self.plan.key_width))
        return key

    def _from_key(self, key: ir.Value) -> ir.Value:
        """The element a key came from, bit for bit (``_to_key`` inverted)."""
        width = self.element.bit_width
        if not self.plan.largest:
            key = arith.xori(key, int_constant(-1, self.plan.key_width))
        bits = arith.trunci(self._bits_type(), key) if width < self.plan.key_width else key
        bits = self._flip(bits, width)
        scalar = mlir_types.scalar_type(self.element)
        return bits if scalar == bits.type else arith.bitcast(scalar, bits)

    def _flip(self, bits: ir.Value, width: int) -> ir.Value:
        """The order-preserving bit flip of the type (its own inverse)."""
        if self.element.is_floating:
            negative = arith.cmpi(arith.CmpIPredicate.slt, bits, int_constant(0, width))
            flipped = arith.xori(bits, int_constant((1 << (width - 1)) - 1, width))
            return arith.select(negative, flipped, bits)
        if self.element.is_unsigned_integral or self.element.is_pred:
            return arith.xori(bits, int_constant(-(1 << (width - 1)), width))
        return bits

    # -- lists ---------------------------------------------------------------------------

    def _empty_list(self) -> Values:
        low = int_constant(-(1 << (self.plan.key_width - 1)), self.plan.key_width)
        none = int_constant(NO_INDEX, 32)
        return [low] * self.plan.k + [none] * self.plan.k

    def _offer(self, items: Values, key: ir.Value, index: ir.Value) -> Values:
        """``items`` with (key, index) inserted if it beats the list's last: past the
        first elements of a row most do not, and then cost one comparison."""
        k = self.plan.k
        beats = _better(key, index, items[k - 1], items[2 * k - 1])
        return _guarded(beats, items, lambda current: self._insert(current, key, index))

    def _insert(self, items: Values, key: ir.Value, index: ir.Value) -> Values:
        """``items`` (k keys then k indices, best first) with (key, index) inserted."""
        k = self.plan.k
        keys, indices = list(items[:k]), list(items[k:])
        for j in range(k):
            better = _better(key, index, keys[j], indices[j])
            keys[j], key = arith.select(better, key, keys[j]), arith.select(better, keys[j], key)
            indices[j], index = (
                arith.select(better, index, indices[j]),
                arith.select(better, indices[j], index),
            )
        return keys + indices

    # -- the kernel ----------------------------------------------------------------------

    def emit_entry(self, entry: EntryFunction) -> Values:
        if self.empty:
            return list(entry.outputs)
        plan = self.plan
        lane = entry.thread_ids[0]
        self._row = self._row_prefix(entry.block_ids[0])
        items = self._scan(entry, lane)
        if plan.rounds:
            items = self._merge(lane, items)
        is_first = arith.cmpi(arith.CmpIPredicate.eq, lane, index_constant(0))
        return _guarded(is_first, list(entry.outputs), lambda outs: self._write(outs, items))

    def _row_prefix(self, row: ir.Value) -> Values:
        """The indices of the leading dimensions of ``row`` (row-major)."""
        dims = self.operand.array_shape.dims[:-1]
        index: Values = []
        remaining = row
        for position in range(len(dims) - 1, -1, -1):
            if position == 0:
                index.insert(0, remaining)
            else:
                index.insert(0, arith.remui(remaining, index_constant(dims[position])))
                remaining = arith.divui(remaining, index_constant(dims[position]))
        return index

    # -- what a row is: its length, where its elements and results lie (the library
    # -- kernel, heron.plugins.topk_rows, reads them at run time) ------------------------

    def _trips(self, entry: EntryFunction) -> int | ir.Value:
        """How many elements each thread reads (its scan loop's trips)."""
        return self.plan.per_thread

    def _row_end(self, entry: EntryFunction) -> ir.Value | None:
        """The row length to guard reads with, None where every read is inside the row."""
        plan = self.plan
        return index_constant(plan.length) if plan.length % plan.threads != 0 else None

    def _read(self, entry: EntryFunction, position: ir.Value) -> ir.Value:
        """Element ``position`` of this block's row."""
        (value,) = entry.value_of(self.operand, [*self._row, position])
        return value

    def _output_index(self, j: int) -> Values:
        """Where this block's ``j``-th result goes in the two outputs."""
        return [*self._row, index_constant(j)]

    def _scan(self, entry: EntryFunction, lane: ir.Value) -> Values:
        """The thread's best ``k`` of elements ``lane, lane + T, ...``."""
        plan = self.plan
        end = self._row_end(entry)

        def step(m: ir.Value, items: Values) -> Values:
            position = arith.addi(lane, arith.muli(m, index_constant(plan.threads)))

            def read(current: Values) -> Values:
                scalar = mlir_types.to_scalar(self._read(entry, position), self.element)
                index = arith.index_cast(ir.IntegerType.get_signless(32), position)
                return self._offer(current, self._to_key(scalar), index)

            if end is None:
                return read(items)
            inside = arith.cmpi(arith.CmpIPredicate.ult, position, end)
            return _guarded(inside, items, read)

        items = self._empty_list()
        trips = self._trips(entry)
        if isinstance(trips, int) and trips == 1:
            return step(index_constant(0), items)
        upper = index_constant(trips) if isinstance(trips, int) else trips
        loop = scf.ForOp(index_constant(0), upper, index_constant(1), items)
        if plan.rolled:
            loop.operation.attributes[KEEP_ROLLED] = ir.UnitAttr.get()
        with ir.InsertionPoint(loop.body):
            scf.YieldOp(step(loop.induction_variable, list(loop.inner_iter_args)))
        return list(loop.results)

    def _merge(self, lane: ir.Value, items: Values) -> Values:
        """``log2(T)`` rounds: thread ``t % 2s == 0`` takes in thread ``t + s``'s list.

        The rounds are a loop, and so are the ``k`` offers of a partner's list: written
        out, the kernel held ``log2(T) * k`` copies of an offer's ``k`` compare-and-swaps
        (1,792 for a top 16 of 32,768: 8 s of LLVM and ptxas, a 200 KiB cubin). A list
        stays in registers (``k`` keys and ``k`` indices carried by the loops).
        """
        plan = self.plan
        k = plan.k
        size = plan.threads * k
        keys = allocate_shared_op(ir.RankedTensorType.get([size], self._key_type())).results[0]
        indices = allocate_shared_op(
            ir.RankedTensorType.get([size], ir.IntegerType.get_signless(32))
        ).results[0]
        base = arith.muli(lane, index_constant(k))
        rounds = scf.ForOp(
            index_constant(0),
            index_constant(plan.rounds),
            index_constant(1),
            [*items, keys, indices, index_constant(1)],
        )
        # A phase per round, each ending in a barrier: a loop even when it has few rounds.
        rounds.operation.attributes[KEEP_ROLLED] = ir.UnitAttr.get()
        with ir.InsertionPoint(rounds.body):
            *items, keys, indices, span = rounds.inner_iter_args
            for j in range(k):
                slot = [arith.addi(base, index_constant(j))]
                keys = tensor.insert(items[j], keys, slot)
                indices = tensor.insert(items[k + j], indices, slot)
            keys, indices = sync_threads_op([keys, indices]).results
            twice = arith.muli(span, index_constant(2))
            receiver = arith.cmpi(
                arith.CmpIPredicate.eq, arith.remui(lane, twice), index_constant(0)
            )
            partner = arith.muli(arith.addi(lane, span), index_constant(k))

            def take(current: Values, keys=keys, indices=indices, partner=partner) -> Values:
                offers = scf.ForOp(index_constant(0), index_constant(k), index_constant(1), current)
                if plan.rolled:
                    offers.operation.attributes[KEEP_ROLLED] = ir.UnitAttr.get()
                with ir.InsertionPoint(offers.body):
                    slot = [arith.addi(partner, offers.induction_variable)]
                    key = tensor.extract(keys, slot)
                    index = tensor.extract(indices, slot)
                    scf.YieldOp(self._offer(list(offers.inner_iter_args), key, index))
                return list(offers.results)

            items = _guarded(receiver, list(items), take)
            # the partners' lists are read before the next round writes over them
            keys, indices = sync_threads_op([keys, indices]).results
            scf.YieldOp([*items, keys, indices, twice])
        return list(rounds.results)[: 2 * k]

    def _write(self, outputs: Values, items: Values) -> Values:
        """The row's ``k`` values and indices into the two outputs."""
        k = self.plan.k
        values, positions = outputs
        for j in range(k):
            index = self._output_index(j)
            value = mlir_types.to_element(self._from_key(items[j]), self.element)
            values = tensor.insert(value, values, index)
            positions = tensor.insert(items[k + j], positions, index)
        return [values, positions]


def _better(key: ir.Value, index: ir.Value, other_key: ir.Value, other_index: ir.Value):
    """Whether (key, index) goes before (other_key, other_index): a larger key, then a
    lower index (a total order: the result does not depend on the merge order)."""
    greater = arith.cmpi(arith.CmpIPredicate.sgt, key, other_key)
    equal = arith.cmpi(arith.CmpIPredicate.eq, key, other_key)
    earlier = arith.cmpi(arith.CmpIPredicate.slt, index, other_index)
    return arith.ori(greater, arith.andi(equal, earlier))


def _guarded(condition: ir.Value, carried: Values, then) -> Values:
    """``then(carried)`` where ``condition`` holds, else ``carried``."""
    branch = scf.IfOp(condition, [v.type for v in carried], has_else=True)
    with ir.InsertionPoint(branch.then_block):
        scf.YieldOp(then(list(carried)))
    with ir.InsertionPoint(branch.else_block):
        scf.YieldOp(list(carried))
    return list(branch.results)


@hookimpl
def heron_emitter_specs() -> list[EmitterSpec]:
    return [
        EmitterSpec(
            name="topk",
            priority=10,
            claims=claims_root("topk"),
            factory=TopkEmitter,
            description="topk: one block per row keeps the running top k",
            refuses_when_built=True,  # every limit is its constructor's
        )
    ]
