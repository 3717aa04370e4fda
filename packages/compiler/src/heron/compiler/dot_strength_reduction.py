"""Dot strength reduction: a dot with a vector side becomes a multiply and a reduce (issue 28).

A GEMM library (or a GEMM kernel) earns its launch by reusing each operand
tile across many products. A dot one of whose sides has no free dimension
(a matrix-vector product, a dot of two vectors, a batched one) reuses
nothing: it reads the matrix once and is bound by memory, like a reduction.
XLA:GPU's ``DotStrengthReduction`` (in its simplification pipeline) rewrites
such dots as ``reduce(multiply(broadcast(lhs), broadcast(rhs)))`` so that
the fusion passes can put them into the kernels around them (a per-example
gradient's norm, a DP-SGD update, an attention step over one query), and so
does this pass, with XLA's rules, which :func:`reduces` states:

- a dot that contracts nothing (an outer product) is a multiply, where its
  ``algorithm`` is unset or ``dot_f32_f32_f32`` (XLA's algebraic
  simplifier does this one);
- size-1 dimensions count as absent, as XLA's simplifier removes them from a
  dot first: ``[1, k] x [k, n]`` is a vector's dot, ``[m, 1] x [1, n]`` an
  outer product;
- a dot of two vectors, always;
- a dot with one vector side where the matrix side is small (XLA's
  ``IsMatrixMultiplicationTooSmallForRewriting``: the free sizes of both
  sides summed, times the contraction length, under :data:`SIZE_THRESHOLD`)
  or where XLA's GEMM fusion (Triton) would not take it (:func:`gemm_fusion_takes`:
  an output type other than f16, f32, bf16 and the fp8 types, a non-default
  operand precision without an algorithm, an algorithm Triton lacks, more
  than one batch dimension);
- an ``s32`` dot whose right side contracts its dimension 1, always (XLA:
  its loop emitter is slow on it).

The expansion is XLA's but for two things: the order of its dimensions and one
type. Each side is converted to the type the products are taken in and broadcast
to the product's shape, whose dimensions are the batch, lhs free, rhs free and
contracting ones in an order where each side's dimensions keep the order they have
in the operand (:func:`_product_order`: ``[k, 1] x [k, n]`` is multiplied as
``[k, 1, n]`` and summed over its dimension 0), so that no side is transposed
unless its own order contradicts the dot's output order (a side is then
transposed into the product's order). XLA transposes each side to [batch, free,
contracting] and its algebraic simplifier, under the layouts it assigns, makes those
transposes bitcasts; heron's would stay transposes (data movement a kernel pays for,
and an expensive op to the conditional simplifier, which kept optax's L-BFGS line
search a conditional with a copy per state element). Their product (each
side first rounded to the precision the dot's ``algorithm`` multiplies in,
where it names TF32 or bf16: :data:`heron.hlo.dot_precision.ALGORITHMS`; the
TF32 a GEMM library takes for an f32 dot without one is the library's choice,
not the dot's); a sum over the contracting dimensions in the dot's
accumulator type (f32 for f16 and bf16 outputs, the output type otherwise;
the algorithm's where it names one); a convert back to the output type.

XLA takes the products in the output type, so a bf16 dot's products are each
rounded to bf16 before the f32 sum: a dot of two bf16[8] vectors whose terms
cancel came out -1.9921875 where the dot (a GEMM library's, XLA:CPU's, the
reference's: exact products, an f32 sum) is -2.0625. heron takes the products
in the accumulator type where it is the wider one (:func:`_product_type`),
the excess precision XLA allows by default (``xla_allow_excess_precision``),
so that the rewrite keeps the dot's value; an outer product, which sums
nothing, still multiplies in the output type (one rounding either way).

It runs before :mod:`heron.hlo.passes.dot_decomposer` (where XLA's sees dots as
the program has them: its decomposer leaves one-free, one-contracting dots in
either order, and the ``s32`` rule reads that order). The sum is taken in
another order than a GEMM's (or the reference's), which the check's reassociation
bounds allow: the reduce is marked regrouped (:mod:`heron.compiler.summation_order`),
so a kernel it lands in is checked within them whatever else it holds; an
f32 dot at default precision that a GEMM multiplies in TF32 is multiplied in
f32 here, closer to the exact result. A dot of fp8 (or s8) operands is
reduced in its output type (f32, s32), as XLA's is after it converts them; one
whose output is fp8 stays a dot (its sum would be taken in fp8).
"""

from __future__ import annotations

import itertools
import math

import numpy as np

from heron.hlo.attributes import ComputationRef
from heron.hlo.builder import NameUniquer
from heron.hlo.determinism import mark_regrouped
from heron.hlo.dot_precision import ALGORITHMS, default_precision
from heron.hlo.element_types import ElementType
from heron.hlo.ir import Computation, Instruction, Module
from heron.hlo.passes.dot_decomposer import dimension_lists, free_dimensions, rewrite_size
from heron.hlo.passes.manager import HloPass
from heron.hlo.passes.rewrite import Inserter, rewrite_each
from heron.hlo.shapes import ArrayShape
from heron.target import Target

__all__ = [
    "SIZE_THRESHOLD",
    "dot_strength_reduction",
    "gemm_fusion_takes",
    "reduces",
    "strength_reduce_dots",
]

#: XLA's threshold: a one-vector-side dot whose (lhs free + rhs free) x contraction
#: is under this is a multiply and a reduce.
SIZE_THRESHOLD = 10_000_000
#: Output types XLA's GEMM fusion computes (fp8 ones by device: :func:`gemm_fusion_takes`).
_GEMM_OUTPUTS = frozenset({"f16", "f32", "bf16"})
#: Input types it reads besides those.
_GEMM_INPUTS = _GEMM_OUTPUTS | {"pred", "s8", "s16", "s32"}
_FP8 = frozenset({"f8e4m3fn", "f8e5m2"})
#: Algorithms XLA's GEMM fusion runs (on CUDA; the bf16 ones on ROCm too).
_GEMM_ALGORITHMS = frozenset(
    {"dot_tf32_tf32_f32", "dot_bf16_bf16_f32", "dot_bf16_bf16_f32_x3", "dot_bf16_bf16_f32_x6"}
)
#: Algorithms an outer product may have and still be a plain multiply.
_OUTER_ALGORITHMS = frozenset({None, "dot_f32_f32_f32"})
#: (exponent bits, mantissa bits) of the compute a narrowed algorithm multiplies in.
_ROUNDING = {"tf32": (8, 10), "bf16": (8, 7)}


def _algorithm(dot: Instruction) -> str | None:
    algorithm = dot.attributes.get("algorithm")
    return None if algorithm is None else str(algorithm).lower()


def _types(dot: Instruction) -> tuple[str, str, str]:
    lhs, rhs = (operand.array_shape.element_type.value for operand in dot.operands)
    return lhs, rhs, dot.array_shape.element_type.value


def gemm_fusion_takes(dot: Instruction, target: Target) -> bool:
    """Whether XLA's GEMM fusion (its legacy Triton rules) would compute ``dot`` on
    ``target``; a dot with a vector side that it would not take is strength-reduced."""
    algorithm = _algorithm(dot)
    if algorithm is None:
        if not default_precision(dot):
            return False
    elif algorithm not in _GEMM_ALGORITHMS or (
        target.backend != "cuda" and algorithm == "dot_tf32_tf32_f32"
    ):
        return False
    lhs, rhs, out = _types(dot)
    fp8_outputs = set()
    if target.backend == "cuda" and target.compute_capability is not None:
        if target.compute_capability >= (8, 0):
            fp8_outputs.add("f8e5m2")
        if target.compute_capability >= (9, 0):
            fp8_outputs.add("f8e4m3fn")
    if out not in _GEMM_OUTPUTS | fp8_outputs:
        return False
    if lhs not in _GEMM_INPUTS | fp8_outputs or rhs not in _GEMM_INPUTS | fp8_outputs:
        return False
    lhs_dims = dot.operands[0].array_shape.dims
    return sum(lhs_dims[d] != 1 for d in dot.attributes.get("lhs_batch_dims", ())) <= 1


def reduces(dot: Instruction, target: Target) -> bool:
    """Whether ``dot`` becomes a multiply and a reduce (the module docstring's rules)."""
    if not isinstance(dot.shape, ArrayShape) or _types(dot)[2] in _FP8:
        return False
    lb, rb, lc, rc = dimension_lists(dot)
    lhs, rhs = (operand.array_shape for operand in dot.operands)
    # XLA's simplifier drops a dot's size-1 dimensions first: [1, k] x [k, n] is a
    # vector's dot, a dot contracting only size-1 dimensions an outer product
    if not [d for d in lc if lhs.dims[d] != 1]:
        return _algorithm(dot) in _OUTER_ALGORITHMS
    if _algorithm(dot) is not None and _algorithm(dot) not in ALGORITHMS:
        return False  # dot_precision names the unknown algorithm when the dot is compiled
    lhs_free = [d for d in free_dimensions(len(lhs.dims), lb, lc) if lhs.dims[d] != 1]
    rhs_free = [d for d in free_dimensions(len(rhs.dims), rb, rc) if rhs.dims[d] != 1]
    if not lhs_free and not rhs_free:
        return True
    if lhs_free and rhs_free:
        return _types(dot) == ("s32", "s32", "s32") and rc == [1]
    if rewrite_size(dot) < SIZE_THRESHOLD:
        return True
    return not gemm_fusion_takes(dot, target)


def _accumulator(dot: Instruction) -> ElementType:
    """XLA's ``GetGemmAccumulatorType``: the algorithm's accumulator where it names one
    (``..._f16``, ``..._bf16``, ``..._f64``, else f32), f32 for f16 and bf16 outputs,
    the output type otherwise."""
    out = dot.array_shape.element_type
    algorithm = _algorithm(dot)
    if algorithm is not None:
        return ElementType(
            algorithm.rsplit("_", 1)[-1] if algorithm.endswith(("16", "64")) else "f32"
        )
    return ElementType.F32 if out.value in ("f16", "bf16") else out


def _product_type(dot: Instruction) -> ElementType:
    """The type a summed expansion multiplies in: the accumulator where it is a wider
    float than the output (a bf16 or f16 dot's f32), else the output type (module
    docstring: XLA multiplies in the output type and rounds each product)."""
    out, accumulator = dot.array_shape.element_type, _accumulator(dot)
    if out.is_floating and accumulator.is_floating and accumulator.bit_width > out.bit_width:
        return accumulator
    return out


class _Reducer:
    """Builds each dot's expansion; one scalar add computation per accumulator type."""

    def __init__(self, module: Module, target: Target) -> None:
        self.module = module
        self.target = target
        self.adders: dict[ElementType, Computation] = {}

    def rewrite(self, inserter: Inserter, dot: Instruction) -> Instruction | None:
        if not reduces(dot, self.target):
            return None
        out = dot.array_shape.element_type
        lb, rb, lc, rc = dimension_lists(dot)
        lhs, rhs = dot.operands
        lhs_free = free_dimensions(len(lhs.array_shape.dims), lb, lc)
        rhs_free = free_dimensions(len(rhs.array_shape.dims), rb, rc)
        batch = [lhs.array_shape.dims[d] for d in lb]
        m = [lhs.array_shape.dims[d] for d in lhs_free]
        n = [rhs.array_shape.dims[d] for d in rhs_free]
        k = [lhs.array_shape.dims[d] for d in lc]
        multiplied = _product_type(dot) if math.prod(k) != 1 else out

        def add(opcode: str, shape: ArrayShape, operands, attributes=None, suffix=None):
            return inserter.add(opcode, shape, operands, attributes, like=dot, suffix=suffix)

        def side(operand: Instruction, order: list[int], placed: list[int], name: str):
            value = operand
            if value.array_shape.element_type != multiplied:
                shape = ArrayShape(multiplied, value.array_shape.dims)
                value = add("convert", shape, [value], suffix=f"{name}_convert")
            if order != list(range(len(order))):
                dims = tuple(value.array_shape.dims[d] for d in order)
                value = add(
                    "transpose",
                    ArrayShape(multiplied, dims),
                    [value],
                    {"dimensions": tuple(order)},
                    suffix=f"{name}_transpose",
                )
            compute = ALGORITHMS.get(_algorithm(dot) or "", "")
            if compute in _ROUNDING:
                exponent, mantissa = _ROUNDING[compute]
                value = add(
                    "reduce-precision",
                    value.array_shape,
                    [value],
                    {"exponent_bits": exponent, "mantissa_bits": mantissa},
                    suffix=f"{name}_rounded",
                )
            if list(value.array_shape.dims) == list(full.dims):
                return value
            return add(
                "broadcast",
                full,
                [value],
                {"dimensions": tuple(placed)},
                suffix=f"{name}_broadcast",
            )

        lhs_roles = _roles(len(lhs.array_shape.dims), lb, lc, lhs_free, "m")
        rhs_roles = _roles(len(rhs.array_shape.dims), rb, rc, rhs_free, "n")
        order = _product_order(len(batch), len(m), len(n), len(k), lhs_roles, rhs_roles)
        position = {role: i for i, role in enumerate(order)}
        sizes = {
            **{role: lhs.array_shape.dims[d] for d, role in enumerate(lhs_roles)},
            **{role: rhs.array_shape.dims[d] for d, role in enumerate(rhs_roles)},
        }
        full = ArrayShape(multiplied, tuple(sizes[role] for role in order))

        def arranged(roles: list[tuple[str, int]]) -> tuple[list[int], list[int]]:
            """The operand's dimensions in the product's order, and where each lands."""
            dims = sorted(range(len(roles)), key=lambda d: position[roles[d]])
            return dims, [position[roles[d]] for d in dims]

        product = add(
            "multiply",
            full,
            [
                side(lhs, *arranged(lhs_roles), "lhs"),
                side(rhs, *arranged(rhs_roles), "rhs"),
            ],
            suffix="product",
        )
        if math.prod(k) == 1:  # nothing summed (an outer product): the product, reshaped
            if list(full.dims) == list(dot.array_shape.dims):
                return product
            return add("reshape", ArrayShape(out, dot.array_shape.dims), [product], suffix="result")
        accumulator = _accumulator(dot)
        if accumulator != multiplied:
            product = add(
                "convert", ArrayShape(accumulator, full.dims), [product], suffix="widened"
            )
        zero = inserter.add(
            "constant",
            ArrayShape(accumulator, ()),
            like=dot,
            suffix="zero",
            literal=np.zeros((), accumulator.numpy_dtype),
        )
        adder = self._adder(accumulator, inserter.names)
        summed = add(
            "reduce",
            ArrayShape(accumulator, tuple(batch + m + n)),
            [product, zero],
            {
                "dimensions": tuple(i for i, role in enumerate(order) if role[0] == "k"),
                "to_apply": ComputationRef(adder.name, adder),
            },
            suffix="sum",
        )
        # The reference sums the dot (or the convolution it came from) in its own order.
        mark_regrouped(summed)
        if accumulator != out:
            summed = add(
                "convert", ArrayShape(out, summed.array_shape.dims), [summed], suffix="narrowed"
            )
        return summed

    def _adder(self, element_type: ElementType, names: NameUniquer) -> Computation:
        adder = self.adders.get(element_type)
        if adder is not None:
            return adder
        scalar = ArrayShape(element_type, ())
        adder = Computation(names.unique(f"dot_sum_{element_type.value}"))
        x, y = (
            adder.add(
                Instruction(
                    names.unique(f"{adder.name}.{p}"), "parameter", scalar, parameter_number=i
                )
            )
            for i, p in enumerate(("x", "y"))
        )
        adder.root = adder.add(
            Instruction(names.unique(f"{adder.name}.add"), "add", scalar, operands=[x, y])
        )
        self.module.computations.insert(0, adder)
        self.adders[element_type] = adder
        return adder


def _roles(
    rank: int, batch: list[int], contracting: list[int], free: list[int], free_role: str
) -> list[tuple[str, int]]:
    """Each operand dimension's role in the product: ``("b", i)`` for its i-th batch
    dimension, ``("k", i)`` for its i-th contracting one, ``(free_role, i)`` for its i-th
    free one (``"m"`` on the left, ``"n"`` on the right)."""
    roles = {d: ("b", i) for i, d in enumerate(batch)}
    roles |= {d: ("k", i) for i, d in enumerate(contracting)}
    roles |= {d: (free_role, i) for i, d in enumerate(free)}
    return [roles[d] for d in range(rank)]


def _product_order(
    batch: int, m: int, n: int, k: int, *sides: list[tuple[str, int]]
) -> list[tuple[str, int]]:
    """The product's dimensions in an order that keeps the dot's output order (batch,
    lhs free, rhs free: the sum removes the contracting ones) and, where it can, each
    side's own order, so that the side is broadcast without a transpose: a topological
    order of those constraints, ties broken in [batch, m, n, k] order. Where both sides'
    orders cannot hold together, the left one's is kept (the right one transposed), then
    the right one's, then neither ([batch, m, n, k], both transposed)."""
    canonical = [
        *(("b", i) for i in range(batch)),
        *(("m", i) for i in range(m)),
        *(("n", i) for i in range(n)),
        *(("k", i) for i in range(k)),
    ]
    output = canonical[: batch + m + n]
    for kept in (sides, sides[:1], sides[1:], ()):
        chains = [output, *kept]
        after = {role: set() for role in canonical}
        for chain in chains:
            for first, second in itertools.pairwise(chain):
                after[second].add(first)
        order: list[tuple[str, int]] = []
        placed: set[tuple[str, int]] = set()
        while len(order) < len(canonical):
            ready = [r for r in canonical if r not in placed and after[r] <= placed]
            if not ready:
                break  # a cycle: these sides' orders contradict the output's or each other's
            order.append(ready[0])
            placed.add(ready[0])
        if len(order) == len(canonical):
            return order
    raise AssertionError("unreachable: the output order alone is acyclic")


def strength_reduce_dots(module: Module, target: Target) -> bool:
    """Rewrite every dot of ``module`` that :func:`reduces` says (module docstring)."""
    return rewrite_each(module, "dot", _Reducer(module, target).rewrite)


def dot_strength_reduction(target: Target) -> HloPass:
    """The ``dot-strength-reduction`` pass for ``target``."""
    return HloPass(
        "dot-strength-reduction",
        lambda module: strength_reduce_dots(module, target),
        "a dot with a vector side becomes a multiply and a reduce (XLA's DotStrengthReduction)",
    )
