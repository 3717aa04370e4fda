"""How long a kernel takes, estimated from its fused computation and the Target.

The fusion passes compare "these kernels apart" with "these kernels fused", in
the spirit of XLA's ``GpuPerformanceModel``: a kernel's time is its launch
overhead plus the larger of its memory time and its compute time.

- *Bytes read*: how many elements of each fusion operand are read, from the
  ops' output-to-input indexing maps (:func:`heron.indexing.output_to_input_maps`;
  :func:`operand_reads` follows the demand from the outputs to the
  parameters: a reduction reads its input once per reduced element, a
  broadcast operand once per output element). Up to the operand's size those
  reads come from DRAM; the rest hit the cache and cost ``1 / CACHE_SPEEDUP``
  of that. Up to its size, or fewer: the distinct elements the kernel can
  touch are followed from the roots too (each op needs at most its distinct
  elements times its reads per element of each operand, users' needs added),
  so that a value read through a slice by a window (a scan's block totals,
  a sixteenth of their array, each read sixteen times) is priced as the slice's
  bytes from DRAM and the re-reads from the cache, not as the whole array.
  (Composing the maps through the whole fusion,
  ``heron.indexing.fusion_input_maps``, would see reads at the same index exactly,
  but costs a hundred times more on JAX's large elementwise bodies, and priority
  fusion prices thousands of candidates.)
- *Coalescing*: a read through a map whose minor-most result does not follow
  the minor-most loop variable, while another result does (a transpose read
  outside a transpose hero, which tiles through shared memory), pays
  ``UNCOALESCED_PENALTY``.
- *Small constants*: an operand that is a constant of one element costs nothing
  to read: priority fusion folds every one into the kernels that read it at its
  end (as XLA's does), so a fusion reading one as a parameter is priced as the
  kernel it will be (at a kernel's low occupancy a scalar read per thread would
  otherwise outweigh fusing an index computation into a scatter).
- *Bytes written*: every output, once.
- *Flops*: per fused instruction, its elements times the opcode's cost
  (a dot: one multiply-add per output element and contracted element,
  :func:`dot_multiply_adds`); a reduce costs its input's elements times its
  reducer. On a Target with a measured op profile (``Target.op_cycles``: XLA's
  ``HloOpProfiles``) an op costs what XLA's model charges it, half its measured
  cycles on its element type (:class:`LaneCosts`): a c128 division is 120 f32
  divisions on an H100, an f64 one 28, and priority fusion does not duplicate a
  chain of them into each of its users to save a launch. Without one,
  ``FLOPS_PER_ELEMENT`` (throughput figures relative to an add).
- *Parallelism* (:func:`parallel_rates`): as in XLA's ``GpuPerformanceModelBase``,
  a kernel's threads form blocks of 128; each block reads at most
  ``memory_bytes_per_block_per_clock`` a clock (a 16-thread kernel reads at one
  block's bandwidth) and uses at most one core's lanes (a loop kernel summing a
  whole array in one thread runs on one lane: slow, however few bytes it moves).
- Bandwidth, clock, cores and lanes and the launch overhead come from the
  Target (``memory_bandwidth``, ``clock_rate_ghz``, ``core_count``,
  ``fpus_per_core``, ``memory_bytes_per_block_per_clock``,
  ``launch_overhead_seconds``).

Host instructions (parameters, constants, tuples, get-tuple-element,
bitcasts) launch nothing and cost nothing.
"""

from __future__ import annotations

import functools
import math
import weakref
from collections.abc import Iterable, Mapping
from types import MappingProxyType

import attrs

from heron.compiler.fusion.builder import is_small_constant
from heron.hlo.dot_precision import contraction_length
from heron.hlo.errors import HloError
from heron.hlo.ir import Computation, Instruction
from heron.hlo.passes.outline import HOST_OPCODES
from heron.hlo.shapes import ArrayShape, Shape, TupleShape
from heron.indexing import IndexingError, IndexingMap, output_to_input_maps
from heron.indexing.affine import AffineExpr, used_dims, used_symbols
from heron.indexing.hlo_indexing import indexing_form
from heron.indexing.thread_maps import DEFAULT_THREADS_PER_BLOCK
from heron.partitioner.regions import fusion_roots
from heron.target import Target

__all__ = [
    "CACHE_SPEEDUP",
    "DEFAULT_OP_CYCLES",
    "ReadPatterns",
    "FLOPS_PER_ELEMENT",
    "UNCOALESCED_PENALTY",
    "BodyReads",
    "KernelCost",
    "LaneCosts",
    "body_reads",
    "dot_multiply_adds",
    "estimate_computation",
    "estimate_instruction",
    "kernel_cost",
    "read_traffic",
    "traffic_cost",
    "lane_costs",
    "lane_operations",
    "throughput_costs",
    "largest_value",
    "parallel_rates",
    "parallel_threads",
]

#: Re-reads of bytes already read by the kernel come from L1/L2; XLA's model
#: charges them a fraction of DRAM time (its L2 speedup is 2.5, L1 8): heron
#: uses the L2 figure, the conservative one.
CACHE_SPEEDUP = 2.5

#: An uncoalesced read moves a 32-byte sector for every element it uses.
#: For 4-byte elements that is 8x the useful bytes; XLA's model prices such
#: reads at a fraction of bandwidth too. heron charges 4x: between the full
#: sector cost and a partly cached one.
UNCOALESCED_PENALTY = 4.0

#: Cost of one element of an opcode in floating-point operations, relative to
#: an add; what is not listed costs 1 (moves of data cost 0).
FLOPS_PER_ELEMENT: dict[str, int] = {
    **dict.fromkeys(
        (
            "broadcast",
            "reshape",
            "bitcast",
            "transpose",
            "slice",
            "dynamic-slice",
            "dynamic-update-slice",
            "concatenate",
            "pad",
            "copy",
            "reverse",
            "iota",
            "constant",
            "parameter",
            "tuple",
            "get-tuple-element",
            "gather",
        ),
        0,
    ),
    **dict.fromkeys(("divide", "sqrt", "rsqrt", "remainder", "cbrt"), 4),
    **dict.fromkeys(
        (
            "exponential",
            "exponential-minus-one",
            "log",
            "log-plus-one",
            "logistic",
            "tanh",
            "sine",
            "cosine",
            "tan",
            "atan2",
            "power",
            "erf",
            "acos",
            "asin",
            "atanh",
            "acosh",
            "asinh",
            "cosh",
            "sinh",
        ),
        16,
    ),
}


@attrs.frozen
class KernelCost:
    """One kernel's estimate: what it moves and computes, and the seconds that make."""

    dram_bytes: float
    cached_bytes: float
    write_bytes: float
    flops: float
    seconds: float


NO_KERNEL = KernelCost(0.0, 0.0, 0.0, 0.0, 0.0)


#: XLA's cycles for an op its profile does not list (``kDefaultFlopsPerElement``:
#: "elementwise instructions typically take at least a few clock cycles").
DEFAULT_OP_CYCLES = 3


@attrs.frozen
class LaneCosts:
    """Lane operations per element of each op on one Target (:func:`lane_costs`).

    On a Target with a measured op profile (``Target.op_cycles``: XLA's
    ``HloOpProfiles``, an H100's sm_90 table) an op costs half its measured cycles
    on its element type (``cycles``), :data:`DEFAULT_OP_CYCLES` where the profile
    does not list it: what XLA's ``GpuHloCostAnalysis`` charges, whose compute time
    divides by two flops per lane and clock (an FMA). The cycles are latencies (an
    f32 tanh 467, an add 7): priced per thread (:func:`parallel_rates` grants a
    kernel one lane per thread), a small kernel's chain of transcendental or complex
    ops costs what it waits. Without a profile (``cycles`` empty) an op costs
    :data:`FLOPS_PER_ELEMENT`, throughput figures relative to an add; ``heron
    profile``'s roofline always uses those, times the profile's ratio of the type's
    cycles to f32's for the op (``ratios``, :func:`throughput_costs`).
    """

    ratios: Mapping[tuple[str, str], float]
    cycles: Mapping[tuple[str, str], int]

    def per_element(self, inst: Instruction) -> float:
        """What one element of ``inst`` costs, in lane operations."""
        flops = FLOPS_PER_ELEMENT.get(inst.opcode, 1)
        if not flops:
            return flops
        shape = inst.shape
        if not isinstance(shape, ArrayShape):
            return flops
        key = (inst.opcode, str(shape.element_type))
        if self.cycles:
            return self.cycles.get(key, DEFAULT_OP_CYCLES) / 2
        return flops * self.ratios.get(key, 1.0)


@functools.cache
def _lane_costs(op_cycles: tuple[tuple[str, int], ...], latency: bool) -> LaneCosts:
    cycles = {tuple(key.split(".", 1)): value for key, value in op_cycles}
    ratios = {
        (opcode, element_type): value / cycles[(opcode, "f32")]
        for (opcode, element_type), value in cycles.items()
        if element_type != "f32" and (opcode, "f32") in cycles
    }
    return LaneCosts(MappingProxyType(ratios), MappingProxyType(cycles if latency else {}))


def lane_costs(target: Target) -> LaneCosts:
    """The :class:`LaneCosts` of ``target``'s measured op profile (made once per profile)."""
    return _lane_costs(target.op_cycles, True)


def throughput_costs(target: Target) -> LaneCosts:
    """:data:`FLOPS_PER_ELEMENT`, times the profile's ratio of a type's cycles to f32's
    for the same op where both are measured (``ratios``): the arithmetic a kernel
    issues, for a roofline (``heron profile``), not the latency a small kernel waits."""
    return _lane_costs(target.op_cycles, False)


def _bytes(shape: Shape) -> int:
    if isinstance(shape, TupleShape):
        return sum(_bytes(element) for element in shape.elements)
    assert isinstance(shape, ArrayShape)
    if shape.element_type.is_token:
        return 0
    return shape.num_elements * shape.element_type.byte_width


@functools.lru_cache(maxsize=4096)
def _array_bytes(shape: ArrayShape) -> tuple[int, int]:
    """An array's bytes (:func:`_bytes`) and its element's, once per shape: a fusion's
    price reads them for each of its operands, and priority fusion prices thousands."""
    return _bytes(shape), shape.element_type.byte_width


def _elements(shape: Shape) -> int:
    if isinstance(shape, TupleShape):
        return max((_elements(element) for element in shape.elements), default=0)
    assert isinstance(shape, ArrayShape)
    return shape.num_elements


def parallel_threads(computation: Computation, reduction_hero: Instruction | None) -> int:
    """How many elements a kernel works on in parallel: a reduction hero's input (its
    emitters split the reduced dimensions across threads), else the largest output."""
    if reduction_hero is not None:
        return max(reduction_hero.operands[0].array_shape.num_elements, 1)
    return max(_elements(computation.root_instruction.shape), 1)


def _varies(m: IndexingMap, expr: AffineExpr) -> bool:
    """Whether a result of ``m`` takes more than one value: it uses a dimension or a
    range symbol of extent above 1 (a size-1 dimension's index is always 0)."""
    dims, ranges = m.dimensions, m.range_vars
    if any(dims[d].bounds.upper > dims[d].bounds.lower for d in used_dims(expr)):
        return True
    return any(
        s >= len(ranges) or ranges[s].bounds.upper > ranges[s].bounds.lower
        for s in used_symbols(expr)
    )


def _coalesced(m: IndexingMap) -> bool:
    """Neighbouring threads (the minor-most loop variable) read neighbouring elements
    (the minor-most result that varies moves with it) or the same one (no result
    uses it). A result that is always 0 (a size-1 dimension of the operand, jax's
    ``keepdims`` ``[n, 1]``) is no minor dimension: ``[16, 1]`` is read as ``[16]``."""
    varying = [r for r in m.results if _varies(m, r)]
    if not varying:
        return True
    last = varying[-1]
    if m.range_vars and (len(m.range_vars) - 1) in used_symbols(last):
        return True  # the innermost reduced dimension walks the minor one
    big = [i for i, v in enumerate(m.dimensions) if v.bounds.upper > v.bounds.lower]
    if not big:
        return True
    minor = big[-1]
    if minor in used_dims(last):
        return True
    return not any(minor in used_dims(result) for result in m.results)


def _reads_per_element(m: IndexingMap) -> int:
    """Operand elements one output element reads through ``m`` (its range symbols)."""
    return math.prod(max(v.bounds.upper - v.bounds.lower + 1, 0) for v in m.range_vars)


#: A memo's "not computed yet" (None is an answer: no maps).
_UNKNOWN = object()


@attrs.define
class ReadPatterns:
    """How each op reads its operands (elements per output element, coalesced), by the
    op's form: its opcode, shapes and indexing attributes, which are all the indexing
    maps depend on. One per fusion pass run: the passes price thousands of candidate
    bodies, each holding clones of the same ops, and building the maps (a
    concatenate's with im2col's nine operands, say) is most of a price."""

    _known: dict[object, tuple[tuple[float, bool], ...] | None] = attrs.field(factory=dict)
    #: The same by instruction, while it lives: the bodies of the fusions a pass made
    #: are read again and again (with each demand a consumer puts on them), and
    #: making an op's form and comparing it cost more than its maps' answer.
    _by_inst: weakref.WeakKeyDictionary[Instruction, tuple[tuple[float, bool], ...] | None] = (
        attrs.field(factory=weakref.WeakKeyDictionary)
    )

    def of(self, inst: Instruction) -> tuple[tuple[float, bool], ...] | None:
        """Per operand, (reads per element, coalesced); None when heron has no maps."""
        known = self._by_inst.get(inst, _UNKNOWN)
        if known is _UNKNOWN:
            known = self._by_inst[inst] = self._of_form(inst)
        return known  # type: ignore[return-value]

    def _of_form(self, inst: Instruction) -> tuple[tuple[float, bool], ...] | None:
        key = indexing_form(inst)
        if key is None:  # an attribute value without a hash: no memo for this op
            return _read_patterns(inst)
        known = self._known.get(key, _UNKNOWN)
        if known is _UNKNOWN:
            known = self._known[key] = _read_patterns(inst)
        return known


def _read_patterns(inst: Instruction) -> tuple[tuple[float, bool], ...] | None:
    try:
        maps = output_to_input_maps(inst, 0)
    except (HloError, IndexingError, KeyError, NotImplementedError):
        return None
    return tuple((float(_reads_per_element(m)), _coalesced(m)) for m in maps)


def operand_reads(
    computation: Computation, reduces_once: bool = False
) -> dict[int, tuple[int, bool, int]]:
    """Per parameter (by id): elements read, whether every read is coalesced, and the
    distinct elements read (:func:`_demand`)."""
    state = _demand(computation, reduces_once)
    return {id(p): tuple(state.get(p, _NOT_READ)) for p in computation.parameters}


def _demand(
    computation: Computation,
    reduces_once: bool = False,
    patterns: ReadPatterns | None = None,
    seed: tuple[int, bool, int] | None = None,
) -> dict[Instruction, list]:
    """Per instruction: elements demanded, whether every read is coalesced, and
    how many distinct elements are read (one record each, :data:`_NOT_READ` for one
    nothing reads: priority fusion walks bodies tens of thousands of times).

    Demand flows from the roots (each output element once) to the parameters
    through each op's output-to-input indexing maps: an operand is read, per
    element of its user that is computed, once per point of the map's range
    symbols (a reduction's reduced elements, a broadcast's single element). A
    value two users read counts the larger demand (the kernel computes an
    element once per index, whoever reads it). An op whose maps heron cannot
    build reads each operand once per element. ``reduces_once``: the emitter
    computes each reduce once per element of its result however many read it
    (the row-normalisation emitter keeps a row's reduction in registers), so a
    reduce broadcast back along its row is not demanded once per broadcast
    element. ``seed``: the root's demand and coalescing when the body is a
    producer's inside a consumer that reads it so (:func:`body_reads`), instead
    of each element once.

    The distinct elements bound the DRAM bytes (:func:`kernel_cost`): a value's are at
    most its size and at most the sum of what its users need of it, each user
    needing its own distinct elements times its reads per element (a slice of a
    sixteenth of an array needs a sixteenth of it, however often a window reads
    the slice). Added, not the larger, so that two slices of one operand count
    both; capped by the size, so that two elementwise users count it once.

    The order is any in which users come before their operands: a value's
    demand is the largest of its users', final once they are all seen.
    """
    # By instruction (identity: a C-level hash each, not an id() call), the records lists.
    state: dict[Instruction, list] = {}
    if seed is not None:
        state[computation.root_instruction] = list(seed)
    else:
        for r in fusion_roots(computation):
            elements = _elements(r.shape)
            known = state.get(r)
            if known is None:
                state[r] = [elements, True, elements]
            else:
                known[0] += elements
                known[1] = True
                known[2] = min(elements, known[2] + elements)
    of = patterns.of if patterns is not None else _read_patterns
    for inst in reversed(computation.post_order()):
        known = state.get(inst)
        if known is None:
            continue
        operands = inst.operands
        if not operands or inst.opcode in _NO_DEMAND_PASSED:
            continue
        count, ok, needed = known
        if count == 0:
            continue
        if reduces_once and inst.opcode == "reduce":
            count = min(count, _elements(inst.shape))
        reads = of(inst)
        for k, operand in enumerate(operands):
            if reads is None or k >= len(reads):
                per, straight = 1.0, True
            else:
                per, straight = reads[k]
            # Demand is in elements of ``inst``; broadcasts and slices change the count.
            # Two users reading an element at the same index share it (the
            # kernel computes it once): the demand is the larger one, not the sum.
            wanted, distinct = int(count * per), int(needed * per)
            shape = operand.shape
            size = shape.num_elements if isinstance(shape, ArrayShape) else _elements(shape)
            entry = state.get(operand)
            if entry is None:
                state[operand] = [max(0, wanted), ok and straight, min(size, distinct)]
            else:
                if wanted > entry[0]:
                    entry[0] = wanted
                entry[1] = entry[1] and ok and straight
                entry[2] = min(size, entry[2] + distinct)
    return state


#: Ops whose demand stops at them: a parameter reads nothing in the body, a tuple's
#: elements are roots demanded as such.
_NO_DEMAND_PASSED = frozenset({"parameter", "tuple"})


#: What :func:`_demand` says of an instruction nothing reads.
_NOT_READ = (0, True, 0)


def dot_multiply_adds(dot: Instruction) -> int:
    """The multiply-adds a dot computes: each output element sums over its contracted dims.

    One lane operation each (an FMA), the unit of the cost model's compute time; a
    FLOP count is twice this (``heron profile`` reports both). The sum's length is
    :func:`heron.hlo.dot_precision.contraction_length`, as the check's tolerance sees it."""
    return dot.array_shape.num_elements * contraction_length(dot)


def _dot_prologue(computation: Computation) -> set[int]:
    """The instructions a dot of ``computation`` reads (its operands' producers, by id)."""
    prologue: set[int] = set()
    stack = [
        op for inst in computation.instructions if inst.opcode == "dot" for op in inst.operands
    ]
    while stack:
        inst = stack.pop()
        if id(inst) not in prologue:
            prologue.add(id(inst))
            stack.extend(inst.operands)
    return prologue


def lane_operations(
    computation: Computation, costs: LaneCosts, demand: dict[Instruction, list] | None = None
) -> float:
    """Arithmetic lane operations of one run of ``computation`` (an FMA is one): its
    elements times what ``costs`` charges each, a reduce its input times its reducer, a dot
    its multiply-adds. With ``demand`` (:func:`_demand`'s records), a
    dot's operand producers (computed as the GEMM stages its tiles, so once per read,
    not once per element) count at their demand instead: an upper bound, since a
    staged tile element serves a whole tile of the other side."""
    prologue = _dot_prologue(computation) if demand is not None else set()
    total = 0.0
    for inst in computation.instructions:
        if inst.opcode == "dot":
            total += dot_multiply_adds(inst)
        elif inst.opcode == "reduce":
            reducer = inst.called("to_apply")
            per = max(1, sum(costs.per_element(i) for i in reducer.instructions))
            total += inst.operands[0].array_shape.num_elements * per
        elif isinstance(inst.shape, ArrayShape):
            elements = inst.shape.num_elements
            if id(inst) in prologue:
                elements = max(elements, (demand or {}).get(inst, _NOT_READ)[0])
            total += elements * costs.per_element(inst)
    return total


def estimate_computation(
    computation: Computation,
    operands: list[Instruction],
    target: Target,
    *,
    tiled: bool = False,
    threads: int | None = None,
    reduces_once: bool = False,
    patterns: ReadPatterns | None = None,
) -> KernelCost:
    """The cost of one kernel computing ``computation`` (a fused body) from ``operands``
    (the values its parameters stand for, by number: those that are small constants
    are read for nothing; none given, every parameter is read).

    ``tiled`` says the emitter reads through shared memory (a transpose hero),
    so its reads count as coalesced whatever their maps. ``threads`` is how
    many elements the emitter works on in parallel (default: the largest
    output): they decide the bandwidth and lanes the kernel gets
    (:func:`parallel_rates`), so one thread summing a whole array is priced as
    slow as it is. ``reduces_once``: see :func:`operand_reads`. ``patterns``: the
    pass run's memo of how ops read their operands (:class:`ReadPatterns`).
    """
    state = _demand(computation, reduces_once, patterns)
    constants = {k for k, operand in enumerate(operands) if is_small_constant(operand)}
    reads = [
        (p.shape, *state.get(p, _NOT_READ))
        for p in computation.parameters
        if p.parameter_number not in constants
    ]
    write = float(_bytes(computation.root_instruction.shape))
    flops = lane_operations(computation, lane_costs(target), state)
    if threads is None:
        threads = max(_elements(computation.root_instruction.shape), 1)
    return kernel_cost(reads, write, flops, target, tiled=tiled, threads=threads)


def kernel_cost(
    reads: Iterable[tuple[Shape, int, bool, int]],
    write: float,
    flops: float,
    target: Target,
    *,
    tiled: bool,
    threads: int,
) -> KernelCost:
    """The cost of one kernel that reads, per operand of ``reads`` (its shape, the
    elements read, whether every read is coalesced, the distinct elements read: at
    most that many come from DRAM), writes ``write`` bytes and
    computes ``flops`` lane operations on ``threads`` elements in parallel (see
    :func:`estimate_computation`). The byte counts are whole numbers, so their
    sums are exact in any order: a price composed from parts
    (:mod:`heron.compiler.fusion.pair_price`) is the price of the built body."""
    dram = cached = 0.0
    for shape, elements, straight, touched in reads:
        from_dram, from_cache = read_traffic(shape, elements, straight, touched, tiled)
        dram += from_dram
        cached += from_cache
    return traffic_cost(dram, cached, write, flops, target, threads)


def read_traffic(
    shape: Shape, elements: int, straight: bool, touched: int, tiled: bool
) -> tuple[float, float]:
    """The bytes one operand's reads take from DRAM (its distinct bytes, an uncoalesced
    read's at :data:`UNCOALESCED_PENALTY` times) and from the caches (the re-reads):
    whole numbers, whose sums are exact in any order and after any subtraction
    (:class:`~heron.compiler.fusion.pair_price.PairPrices` composes a pair's sums from
    its user's less the producer's parameter)."""
    if not isinstance(shape, ArrayShape):
        return float(_bytes(shape)), 0.0
    size, width = _array_bytes(shape)
    read = elements * width
    unique = min(size, read, touched * width)
    penalty = 1.0 if tiled or straight else UNCOALESCED_PENALTY
    return unique * penalty, float(max(0, read - unique))


def traffic_cost(
    dram: float, cached: float, write: float, flops: float, target: Target, threads: int
) -> KernelCost:
    """The cost of a kernel that reads ``dram`` bytes from DRAM and ``cached`` from the
    caches (:func:`read_traffic`, summed), writes ``write`` and computes ``flops`` lane
    operations on ``threads`` elements in parallel (:func:`parallel_rates`)."""
    bandwidth, lanes = parallel_rates(threads, target)
    memory_seconds = (dram + cached / CACHE_SPEEDUP) / bandwidth + write / target.memory_bandwidth
    compute_seconds = flops / (lanes * target.clock_rate_ghz * 1e9)
    seconds = target.launch_overhead_seconds + max(memory_seconds, compute_seconds)
    return KernelCost(dram, cached, write, flops, seconds)


def parallel_rates(threads: int, target: Target) -> tuple[float, float]:
    """The read bandwidth (bytes/s) and the FP32 lanes a kernel of ``threads`` threads
    gets, as XLA's GpuPerformanceModelBase grants them: the threads form blocks of the
    loop emitter's 128 (``DEFAULT_THREADS_PER_BLOCK``); each block reads at most
    ``memory_bytes_per_block_per_clock`` a clock (``AdjustBandwidth``: an H100 needs
    53 busy blocks to reach its bandwidth) and uses at most ``fpus_per_core`` lanes
    of one core, on at most ``core_count`` cores (``CalculateEffectiveFlopsPerNs``).

    Until session 53 heron granted both as the threads' share of the device's thread
    slots: a 16-thread kernel read at 200 MB/s on an H100 where XLA's model says
    63 GB/s, and small kernels (a spectral norm's power iteration, a batch's
    statistics, L-BFGS's line search) were not fused where XLA fuses them."""
    threads = max(threads, 1)
    blocks = math.ceil(threads / DEFAULT_THREADS_PER_BLOCK)
    block_bandwidth = target.clock_rate_ghz * 1e9 * target.memory_bytes_per_block_per_clock
    bandwidth = min(float(target.memory_bandwidth), blocks * block_bandwidth)
    per_block = min(threads, DEFAULT_THREADS_PER_BLOCK)
    lanes = min(per_block, target.fpus_per_core) * min(blocks, target.core_count)
    return bandwidth, lanes


@attrs.frozen
class BodyReads:
    """A fused body's part of its kernel's price, apart from the emitter and the Target:
    per parameter number, the elements read, whether every read is coalesced and the
    distinct elements read (``reads``); the parameters something in the body reads
    (``used``); its lane operations (``flops``), bytes written (``write``), whether it holds a dot
    (whose operands' producers count at their demand, :func:`lane_operations`)
    or a reduce (without one, ``reduces_once`` changes nothing), and the elements
    of its largest value (``largest``: no emitter works on more in parallel,
    :func:`parallel_threads`)."""

    reads: tuple[tuple[int, bool, int], ...]
    used: frozenset[int]
    flops: float
    write: float
    has_dot: bool
    has_reduce: bool
    largest: int


def body_reads(
    computation: Computation,
    costs: LaneCosts,
    reduces_once: bool = False,
    patterns: ReadPatterns | None = None,
    seed: tuple[int, bool, int] | None = None,
    like: BodyReads | None = None,
) -> BodyReads:
    """``computation``'s :class:`BodyReads`, its lane operations as ``costs`` charges them
    (``seed``: see :func:`_demand`). ``like``: the same body's reads under another seed or
    ``reduces_once``; without a dot nothing but the demand depends on either, so only the
    demand is walked (priority fusion prices a producer under each of its users' seeds:
    half the bodies it walks)."""
    state = _demand(computation, reduces_once, patterns, seed)
    params = computation.parameters
    read = [_NOT_READ] * len(params)
    for param in params:
        number = param.parameter_number
        assert number is not None and 0 <= number < len(params), "parameters 0..n-1"
        read[number] = tuple(state.get(param, _NOT_READ))
    if like is not None and not like.has_dot:
        return attrs.evolve(like, reads=tuple(read))
    used = set()
    for inst in computation.instructions:
        for operand in inst.operands:
            if operand.opcode == "parameter" and operand.parameter_number is not None:
                used.add(operand.parameter_number)
    return BodyReads(
        tuple(read),
        frozenset(used),
        lane_operations(computation, costs, state),
        float(_bytes(computation.root_instruction.shape)),
        any(inst.opcode == "dot" for inst in computation.instructions),
        any(inst.opcode == "reduce" for inst in computation.instructions),
        largest_value(computation),
    )


def largest_value(computation: Computation) -> int:
    """The elements of ``computation``'s largest value (:attr:`BodyReads.largest`)."""
    return max((_elements(inst.shape) for inst in computation.instructions), default=1)


def estimate_instruction(
    inst: Instruction, body: Computation | None, target: Target, *, tiled: bool = False
) -> KernelCost:
    """The cost of the kernel ``inst`` is (a fusion with ``body``), or none for host ops."""
    if inst.opcode in HOST_OPCODES or body is None:
        return NO_KERNEL
    return estimate_computation(body, list(inst.operands), target, tiled=tiled)
