"""Thread-to-output maps: which output element each GPU thread of a loop kernel writes.

The loop emitter launches a 1-d grid and gives every thread a contiguous run
of ``vector_size`` elements (so loads and stores can be vectorised), optionally
several such runs ``unroll`` grid-strides apart. Numbering the threads
``linear = ((chunk_id * blocks + block) * threads + th_x) * vector_size +
vector_index`` and reading that number as a row-major (layout-order) index of
the output gives the thread-to-output map, e.g. for bf16[6,512,4096]::

    (th_x, bl_x)[vector_index] -> (bl_x floordiv 4096, (bl_x floordiv 8) mod 512,
        (bl_x mod 8) * 512 + th_x * 4 + vector_index),
    domain: th_x in [0, 127], bl_x in [0, 24575], vector_index in [0, 3]

When the grid covers more elements than the output has (the last block is
partial) the map carries the bounds check ``linear in [0, elements - 1]`` as a
constraint; when it covers the output exactly there is none.

The delinearisation is done here with exact mixed-radix arithmetic rather
than left as ``(linear floordiv s) mod n`` for the simplifier: the launch
parameters make the linear index a positional number (each term's
coefficient divides the next stride or is divided by it), and exploiting that
directly gives the seeds' form without depending on how clever the general
simplifier is. Where the strides do not line up (a minor dimension of 300
with 512 elements per block) the plain floordiv/mod form is kept, which is
still exact, and ``simplify`` is applied when it is available.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import attrs

from heron.hlo.ir import Computation
from heron.indexing.affine import AffineExpr, Constant, Dim, Symbol, add, floordiv, mod, mul
from heron.indexing.indexing_map import IndexingError, IndexingMap, Variable
from heron.indexing.interval import Interval

#: Threads per block of the loop emitter: four warps, one per warp scheduler
#: of an SM, the default XLA uses for elementwise kernels.
DEFAULT_THREADS_PER_BLOCK = 128

#: The most blocks CUDA allows along x; beyond it the grid grows a y dimension.
MAX_BLOCKS_X = 2**31 - 1


@attrs.frozen
class LaunchDimensions:
    """A kernel's grid: ``block_x * block_y`` blocks of ``thread_x`` threads."""

    block_x: int
    thread_x: int
    block_y: int = 1

    def __attrs_post_init__(self) -> None:
        if min(self.block_x, self.thread_x, self.block_y) < 1:
            raise IndexingError(f"launch dimensions must be positive: {self}")

    @property
    def num_blocks(self) -> int:
        return self.block_x * self.block_y

    @property
    def num_threads(self) -> int:
        return self.num_blocks * self.thread_x

    def __str__(self) -> str:
        blocks = f"{self.block_x}" if self.block_y == 1 else f"{self.block_x}x{self.block_y}"
        return f"blocks={blocks} threads={self.thread_x}"


#: Ops after which XLA does not vectorise a loop fusion (their code is too
#: large to replicate per vector element, or they read with no locality).
VECTORIZATION_BLOCKERS = frozenset({"dot", "sort"})

#: The largest window (in elements) a reduce-window of a vectorised loop fusion may
#: have. A long window's loads, unrolled, are scalar and 16 bytes apart across a warp
#: (jax's cumsum on an H200 ran at 0.71x XLA's so); XLA:GPU (0.12) keeps one element a
#: thread from 9 elements on and unrolls shorter windows four times (its launches for
#: windows of 2, 3, 5, 6, 7 and 8 elements and of 9, 16; ``heron xla``).
MAX_VECTORIZED_WINDOW = 8

#: A concatenate with more operands than this keeps one element per thread
#: (XLA's empirical limit: more causes register spilling).
MAX_CONCAT_OPERANDS_FOR_VECTORIZATION = 10


def fusion_vectorization_limits(computation: Computation) -> tuple[int, int, bool]:
    """``(widest element bits, narrowest output bits, may vectorise)`` of a fused computation.

    The widest type among the parameters and outputs bounds the vector size
    (128-bit accesses); the narrowest output decides how many sub-byte
    elements one thread must write; ops that XLA's ``MayPreventVectorization``
    lists (dot, sort, a reduce-window of more than :data:`MAX_VECTORIZED_WINDOW`
    elements, a concatenate of more than ten operands, a variadic reduce) turn
    vectorisation off.
    """
    widest = 0
    for parameter in computation.parameters:
        for leaf in parameter.shape.leaves():
            if not leaf.is_token:
                widest = max(widest, leaf.element_type.bit_width)
    outputs = [leaf for leaf in computation.root_instruction.shape.leaves() if not leaf.is_token]
    narrowest = min((leaf.element_type.bit_width for leaf in outputs), default=0)
    widest = max([widest, *(leaf.element_type.bit_width for leaf in outputs)])
    may_vectorize = True
    for inst in computation.instructions:
        if inst.opcode in VECTORIZATION_BLOCKERS:
            may_vectorize = False
        elif inst.opcode == "reduce-window":
            window = inst.attributes.get("window")
            sizes = [d.size for d in window.dims] if window is not None else []
            if math.prod(sizes) > MAX_VECTORIZED_WINDOW:
                may_vectorize = False
        elif inst.opcode == "concatenate":
            if len(inst.operands) > MAX_CONCAT_OPERANDS_FOR_VECTORIZATION:
                may_vectorize = False
        elif inst.opcode == "reduce" and inst.shape.is_tuple:
            may_vectorize = False
    return widest, narrowest, may_vectorize


# -- mixed-radix delinearisation ---------------------------------------------


@attrs.frozen
class _Term:
    """``coefficient * ((base floordiv divisor) mod modulus)`` with a known size.

    ``size`` is the number of values the bracket takes (it ranges over
    ``[0, size - 1]``); ``modulus`` 0 means no mod.
    """

    coefficient: int
    base: AffineExpr
    size: int
    divisor: int = 1
    modulus: int = 0

    def value(self) -> AffineExpr:
        expr = floordiv(self.base, Constant(self.divisor))
        if self.modulus:
            expr = mod(expr, Constant(self.modulus))
        return mul(expr, Constant(self.coefficient))

    @property
    def max(self) -> int:
        return self.coefficient * (self.size - 1)


def _sum(terms: Sequence[_Term]) -> AffineExpr:
    result: AffineExpr = Constant(0)
    for term in terms:
        result = add(result, term.value())
    return result


def _divmod_terms(terms: Sequence[_Term], divisor: int) -> tuple[list[_Term], list[_Term]]:
    """Split ``sum(terms) = divisor * quotient + remainder`` with 0 <= remainder < divisor.

    Exact whenever every coefficient is a multiple or a divisor of
    ``divisor`` and the remainders add up to less than it (the positional
    case); otherwise falls back to one opaque floordiv/mod term each.
    """
    quotient: list[_Term] = []
    remainder: list[_Term] = []
    ok = True
    for term in terms:
        if term.size <= 1:
            continue
        c = term.coefficient
        if c % divisor == 0:
            quotient.append(attrs.evolve(term, coefficient=c // divisor))
        elif divisor % c == 0 and term.modulus == 0:
            k = divisor // c
            if term.size <= k:
                remainder.append(term)
            else:
                quotient.append(
                    attrs.evolve(
                        term, coefficient=1, divisor=term.divisor * k, size=math.ceil(term.size / k)
                    )
                )
                remainder.append(attrs.evolve(term, modulus=k, size=k))
        else:
            ok = False
            break
    if ok and sum(t.max for t in remainder) < divisor:
        return quotient, remainder
    total = _sum(terms)
    top = sum(t.max for t in terms)
    q = _Term(1, floordiv(total, Constant(divisor)), top // divisor + 1)
    r = _Term(1, mod(total, Constant(divisor)), min(divisor, top + 1))
    return [q], [r]


def loop_thread_to_output_map(
    dims: Sequence[int],
    launch: LaunchDimensions,
    vector_size: int = 1,
    unroll: int = 1,
    *,
    minor_to_major: Sequence[int] | None = None,
    simplify: bool = True,
) -> IndexingMap:
    """The map ``(th_x, bl_x[, bl_y])[chunk_id?, vector_index?] -> output index``.

    ``chunk_id`` (present when ``unroll > 1``) selects which of the thread's
    grid-strided chunks; ``vector_index`` (present when ``vector_size > 1``)
    the element inside its vector. The output index is the linear thread
    number delinearised in layout order (row-major when ``minor_to_major`` is
    None), with a bounds constraint when the grid over-covers the output.
    """
    dims = tuple(int(d) for d in dims)
    if any(d < 1 for d in dims):
        raise IndexingError(f"thread map for an empty output {list(dims)}")
    if vector_size < 1 or unroll < 1:
        raise IndexingError(f"vector size {vector_size} and unroll {unroll} must be positive")
    rank = len(dims)
    order = tuple(range(rank - 1, -1, -1)) if minor_to_major is None else tuple(minor_to_major)
    if sorted(order) != list(range(rank)):
        raise IndexingError(f"layout {list(order)} is not a permutation of {rank} dimensions")
    elements = math.prod(dims)

    dimensions = [
        Variable("th_x", Interval(0, launch.thread_x - 1)),
        Variable("bl_x", Interval(0, launch.block_x - 1)),
    ]
    if launch.block_y > 1:
        dimensions.append(Variable("bl_y", Interval(0, launch.block_y - 1)))
    range_vars: list[Variable] = []
    chunk = vector = None
    if unroll > 1:
        chunk = Symbol(len(range_vars))
        range_vars.append(Variable("chunk_id", Interval(0, unroll - 1)))
    if vector_size > 1:
        vector = Symbol(len(range_vars))
        range_vars.append(Variable("vector_index", Interval(0, vector_size - 1)))

    # The linear index as positional terms, most significant first.
    per_thread = vector_size
    per_block = launch.thread_x * per_thread
    terms: list[_Term] = []
    if chunk is not None:
        terms.append(_Term(launch.num_blocks * per_block, chunk, unroll))
    if launch.block_y > 1:
        terms.append(_Term(launch.block_x * per_block, Dim(2), launch.block_y))
    terms.append(_Term(per_block, Dim(1), launch.block_x))
    terms.append(_Term(per_thread, Dim(0), launch.thread_x))
    if vector is not None:
        terms.append(_Term(1, vector, vector_size))
    covered = unroll * launch.num_blocks * per_block
    if covered < elements:
        raise IndexingError(
            f"launch ({launch}, vector {vector_size}, unroll {unroll}) covers {covered} elements;"
            f" the output {list(dims)} has {elements}"
        )

    # Delinearise from the physical minor dimension outwards.
    results: list[AffineExpr] = [Constant(0)] * rank
    remaining = [t for t in terms if t.size > 1]
    physical = list(order)  # minor first
    for position, logical in enumerate(physical):
        if position == rank - 1:
            results[logical] = _sum(remaining)  # the bounds constraint keeps it in range
            break
        remaining, digit = _divmod_terms(remaining, dims[logical])
        results[logical] = _sum(digit)

    constraints: tuple[tuple[AffineExpr, Interval], ...] = ()
    if covered > elements:
        constraints = (_bounds_constraint(terms, vector_size, elements),)
    result = IndexingMap(tuple(dimensions), tuple(results), tuple(range_vars), (), constraints)
    return _maybe_simplify(result) if simplify else result


def _bounds_constraint(
    terms: Sequence[_Term], vector_size: int, elements: int
) -> tuple[AffineExpr, Interval]:
    """The bounds check of a partial last block, on whole vectors where that is exact.

    When the vector size divides the element count, a vector is either all
    in bounds or all out, so the check is on the work item (the linear index
    without ``vector_index``, divided by the vector size): it then does not
    depend on ``vector_index``, and the loop over a vector needs no
    per-element condition, which is what lets its loads and stores become
    vector accesses (XLA's simplifier makes the same rewrite).
    """
    live = [t for t in terms if t.size > 1]
    if vector_size > 1 and elements % vector_size == 0:
        outer = [t for t in live if t.coefficient % vector_size == 0 and t.coefficient > 1]
        if len(outer) == len(live) - 1:  # everything but the vector_index term
            scaled = [attrs.evolve(t, coefficient=t.coefficient // vector_size) for t in outer]
            return _sum(scaled), Interval(0, elements // vector_size - 1)
    return _sum(live), Interval(0, elements - 1)


def _maybe_simplify(indexing_map: IndexingMap) -> IndexingMap:
    """Run the general simplifier when it is installed (it is written separately)."""
    try:
        from heron.indexing.simplifier import simplify
    except ImportError:
        return indexing_map
    return simplify(indexing_map)
