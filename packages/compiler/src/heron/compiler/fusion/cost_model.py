"""How long a kernel takes, estimated from its fused computation and the Target.

The fusion passes compare "these kernels apart" with "these kernels fused", in
the spirit of XLA's ``GpuPerformanceModel``: a kernel's time is its launch
overhead plus the larger of its memory time and its compute time.

- *Bytes read*: for each fusion operand, the indexing maps from the fusion's
  outputs to it (:func:`heron.indexing.fusion_input_maps`) say how many
  elements are read (every map's domain, range symbols included: a reduction
  reads its input once per reduced element, a broadcast operand once per output
  element). Up to the operand's size those reads come from DRAM; the rest hit
  the cache and cost ``1 / CACHE_SPEEDUP`` of that.
- *Coalescing*: a read whose map's minor-most result does not follow the
  minor-most loop variable (a transpose read outside a transpose hero, which
  tiles through shared memory) pays ``UNCOALESCED_PENALTY``.
- *Bytes written*: every output, once.
- *Flops*: per fused instruction, its elements times the opcode's cost
  (``FLOPS_PER_ELEMENT``); a reduce costs its input's elements times its
  reducer.
- *Parallelism*: a kernel working on fewer elements than the device has
  thread slots gets that fraction of its bandwidth and lanes (a loop kernel
  summing a whole array in one thread is slow, however few bytes it moves).
- Bandwidth, clock, cores and lanes and the launch overhead come from the
  Target (``memory_bandwidth``, ``clock_rate_ghz``, ``core_count``,
  ``fpus_per_core``, ``launch_overhead_seconds``).

Host instructions (parameters, constants, tuples, get-tuple-element,
bitcasts) launch nothing and cost nothing.
"""

from __future__ import annotations

import math

import attrs

from heron.compiler.target import Target
from heron.hlo.errors import HloError
from heron.hlo.ir import Computation, Instruction
from heron.hlo.passes.outline import HOST_OPCODES
from heron.hlo.shapes import ArrayShape, Shape, TupleShape
from heron.indexing import IndexingError, IndexingMap, fusion_input_maps
from heron.indexing.affine import used_dims, used_symbols

__all__ = [
    "CACHE_SPEEDUP",
    "FLOPS_PER_ELEMENT",
    "UNCOALESCED_PENALTY",
    "KernelCost",
    "estimate_computation",
    "estimate_instruction",
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


def _bytes(shape: Shape) -> int:
    if isinstance(shape, TupleShape):
        return sum(_bytes(element) for element in shape.elements)
    assert isinstance(shape, ArrayShape)
    if shape.element_type.is_token:
        return 0
    return shape.num_elements * shape.element_type.byte_width


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


def _points(m: IndexingMap) -> int:
    """How many (dimension, symbol) points the map's domain has (constraints ignored)."""
    sizes = [v.bounds.upper - v.bounds.lower + 1 for v in (*m.dimensions, *m.range_vars)]
    return math.prod(max(size, 0) for size in sizes)


def _coalesced(m: IndexingMap) -> bool:
    """The minor-most result moves with the minor-most loop variable (or not at all)."""
    if not m.results:
        return True
    last = m.results[-1]
    dims, symbols = used_dims(last), used_symbols(last)
    if not dims and not symbols:
        return True  # one element per row: a broadcast read, cached
    if m.range_vars and (len(m.range_vars) - 1) in symbols:
        return True  # the innermost reduced dimension walks the minor one
    big = [i for i, v in enumerate(m.dimensions) if v.bounds.upper > v.bounds.lower]
    return not big or big[-1] in dims


def _flops(computation: Computation) -> float:
    total = 0.0
    for inst in computation.instructions:
        if inst.opcode == "reduce":
            reducer = inst.called("to_apply")
            per = max(1, sum(FLOPS_PER_ELEMENT.get(i.opcode, 1) for i in reducer.instructions))
            total += inst.operands[0].array_shape.num_elements * per
        elif isinstance(inst.shape, ArrayShape):
            total += inst.shape.num_elements * FLOPS_PER_ELEMENT.get(inst.opcode, 1)
    return total


def estimate_computation(
    computation: Computation,
    operands: list[Instruction],
    target: Target,
    *,
    tiled: bool = False,
    threads: int | None = None,
) -> KernelCost:
    """The cost of one kernel computing ``computation`` (a fused body) from ``operands``.

    ``tiled`` says the emitter reads through shared memory (a transpose hero),
    so its reads count as coalesced whatever their maps. ``threads`` is how
    many elements the emitter works on in parallel (default: the largest
    output): a kernel with fewer than the device's thread slots
    (``core_count * threads_per_core_limit``) gets that fraction of its
    bandwidth and lanes, so one thread summing a whole array is priced as slow
    as it is.
    """
    try:
        maps = fusion_input_maps(computation)
    except (HloError, IndexingError):
        maps = None  # an op the analysis cannot model: every operand read once
    dram = cached = 0.0
    for param in computation.parameters:
        size = _bytes(param.shape)
        if maps is None or not isinstance(param.shape, ArrayShape):
            dram += size
            continue
        width = param.shape.element_type.byte_width
        param_maps = maps.get(param, [])
        reads = sum(_points(m) for m in param_maps) * width
        unique = min(size, reads)
        penalty = 1.0
        if not tiled and not all(_coalesced(m) for m in param_maps):
            penalty = UNCOALESCED_PENALTY
        dram += unique * penalty
        cached += max(0, reads - unique)
    del operands  # the parameters carry the operands' shapes
    write = float(_bytes(computation.root_instruction.shape))
    flops = _flops(computation)
    if threads is None:
        threads = max(_elements(computation.root_instruction.shape), 1)
    slots = target.core_count * target.threads_per_core_limit
    utilisation = min(1.0, threads / slots)
    memory_seconds = (dram + write + cached / CACHE_SPEEDUP) / (
        target.memory_bandwidth * utilisation
    )
    compute_seconds = flops / (
        target.core_count * target.fpus_per_core * target.clock_rate_ghz * 1e9 * utilisation
    )
    seconds = target.launch_overhead_seconds + max(memory_seconds, compute_seconds)
    return KernelCost(dram, cached, write, flops, seconds)


def estimate_instruction(
    inst: Instruction, body: Computation | None, target: Target, *, tiled: bool = False
) -> KernelCost:
    """The cost of the kernel ``inst`` is (a fusion with ``body``), or none for host ops."""
    if inst.opcode in HOST_OPCODES or body is None:
        return NO_KERNEL
    return estimate_computation(body, list(inst.operands), target, tiled=tiled)
