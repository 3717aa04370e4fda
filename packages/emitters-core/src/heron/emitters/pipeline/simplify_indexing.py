"""The ``simplify-indexing`` pass: ``heron_gpu.apply_indexing`` -> simplified ``arith`` on index.

Index arithmetic is where a naive lowering loses most: ``(bl_x floordiv 8) mod
512`` and friends, repeated per access. Each ``apply_indexing`` is first
merged with the ``apply_indexing`` ops that produce its operands (so a chain
becomes one map over the underlying values), simplified with
``heron.indexing.simplify`` using the ranges its map's domain promises, and
then written out as ``arith`` ops on ``index``, sharing equal sub-expressions.

Division and remainder by a constant use the unsigned ops when range
analysis proves the dividend non-negative (the common case, and cheaper);
otherwise a floor-division/modulo sequence that is correct for negative
values (``arith.divsi``/``remsi`` round toward zero, MLIR's ``floordiv`` and
``mod`` do not). Upstream ``canonicalize,cse`` then tidies across ops.

:class:`IndexExpressionBuilder` (looking through ``apply_indexing`` chains)
is shared with flatten-tensors, which composes access indices the same way.
"""

from __future__ import annotations

from collections.abc import Sequence

from mlir import ir
from mlir.dialects import arith

from heron.emitters.dialect import op_indexing_map
from heron.emitters.ir_utils import index_constant, walk_ops
from heron.emitters.pipeline.manager import Pass, PipelineOptions, run_upstream
from heron.hlo.errors import UnsupportedError
from heron.indexing import (
    AffineExpr,
    Constant,
    Dim,
    IndexingMap,
    Interval,
    Symbol,
    Variable,
)
from heron.indexing.affine import Binary, BinaryKind, replace
from heron.indexing.mod_expansion import simplify_with_mod_expansion
from heron.indexing.range_analysis import RangeEvaluator

APPLY_INDEXING = "heron_gpu.apply_indexing"

#: Bounds used for an index value nothing says anything about.
UNKNOWN = Interval(-(2**63), 2**63 - 1)


def _defining_op(value: ir.Value) -> ir.Operation | None:
    owner = value.owner
    return None if isinstance(owner, ir.Block) else owner.operation


def _index_constant_value(op: ir.Operation | None) -> int | None:
    if op is None or op.name != "arith.constant":
        return None
    attr = op.attributes["value"]
    if isinstance(attr, ir.IntegerAttr) and isinstance(op.results[0].type, ir.IndexType):
        return ir.IntegerAttr(attr).value
    return None


class IndexExpressionBuilder:
    """Builds one indexing map over the *leaf* values behind some index values.

    :meth:`expr` turns an index value into an affine expression: a result of
    ``heron_gpu.apply_indexing`` becomes its map's expression over that op's
    operands (recursively), an index constant becomes a constant, and any
    other value becomes a dimension of the map being built (bounded by what
    its uses promise: the domain of the map it fed, or a tensor's extent).
    The domains of the maps looked through become constraints, which the
    simplifier keeps only where they say something. A producer used by several
    operands is looked through once, and a constraint met again (every map of a
    chain repeats the thread domain) is kept once: the simplifier's time grows
    with the constraints it is handed.
    """

    def __init__(self) -> None:
        self.values: list[ir.Value] = []
        self.variables: list[Variable] = []
        self._constraints: dict[tuple[AffineExpr, Interval], None] = {}
        self._dims: dict[ir.Value, int] = {}
        self._names: set[str] = set()
        self._results: dict[ir.Operation, list[AffineExpr]] = {}

    @property
    def constraints(self) -> tuple[tuple[AffineExpr, Interval], ...]:
        """The constraints met so far, each once, in the order first met."""
        return tuple(self._constraints)

    def _constrain(self, expr: AffineExpr, bounds: Interval) -> None:
        self._constraints[(expr, bounds)] = None

    def _variable(self, value: ir.Value, name: str, bounds: Interval) -> AffineExpr:
        index = self._dims.get(value)
        if index is not None:
            old = self.variables[index]
            merged = old.bounds.intersect(bounds)
            if merged.is_empty:  # contradictory promises: keep one, record the other
                self._constrain(Dim(index), bounds)
            else:
                self.variables[index] = Variable(old.name, merged)
            return Dim(index)
        unique, suffix = name, 0
        while unique in self._names:
            suffix += 1
            unique = f"{name}_{suffix}"
        self._names.add(unique)
        self._dims[value] = len(self.variables)
        self.values.append(value)
        self.variables.append(Variable(unique, bounds))
        return Dim(len(self.variables) - 1)

    def expr(self, value: ir.Value, name: str = "d", bounds: Interval = UNKNOWN) -> AffineExpr:
        """``value`` as an expression over the leaves; ``bounds`` is what its use promises."""
        op = _defining_op(value)
        constant = _index_constant_value(op)
        if constant is not None:
            return Constant(constant)
        if op is None or op.name != APPLY_INDEXING:
            return self._variable(value, name, bounds)
        expr = self.results(op)[ir.OpResult(value).result_number]
        if bounds != UNKNOWN:
            self._constrain(expr, bounds)
        return expr

    def results(self, op: ir.Operation) -> list[AffineExpr]:
        """The results of one ``apply_indexing`` op as expressions over the leaves."""
        known = self._results.get(op)
        if known is None:
            known = self._results[op] = self._look_through(op)
        return known

    def _look_through(self, op: ir.Operation) -> list[AffineExpr]:
        indexing_map = op_indexing_map(op)
        variables = [*indexing_map.dimensions, *indexing_map.symbols]
        operands = list(op.operands)
        subs = [self.expr(v, var.name, var.bounds) for v, var in zip(operands, variables)]
        dims, symbols = subs[: indexing_map.num_dims], subs[indexing_map.num_dims :]
        for expr, interval in indexing_map.constraints:
            self._constrain(replace(expr, dims, symbols), interval)
        return [replace(e, dims, symbols) for e in indexing_map.results]

    def build(self, results: Sequence[AffineExpr]) -> IndexingMap:
        """The map (leaves as dimensions, no symbols) computing ``results``, simplified."""
        return simplify_with_mod_expansion(
            IndexingMap(tuple(self.variables), tuple(results), constraints=self.constraints)
        )


class _Lowering:
    """Emits one simplified map as arith on index, each distinct sub-expression once."""

    def __init__(self, indexing_map: IndexingMap, operands: Sequence[ir.Value], where: str):
        self.map = indexing_map
        self.operands = list(operands)
        self.ranges = RangeEvaluator(indexing_map)
        self.memo: dict[AffineExpr, ir.Value] = {}
        self.where = where

    def constant(self, value: int) -> ir.Value:
        return self.emit(Constant(value))

    def non_negative(self, expr: AffineExpr) -> bool:
        interval = self.ranges.range(expr)
        return not interval.is_empty and interval.lower >= 0

    def emit(self, expr: AffineExpr) -> ir.Value:
        cached = self.memo.get(expr)
        if cached is None:
            cached = self._emit(expr)
            self.memo[expr] = cached
        return cached

    def _emit(self, expr: AffineExpr) -> ir.Value:
        if isinstance(expr, Constant):
            return index_constant(expr.value)
        if isinstance(expr, Dim):
            return self.operands[expr.index]
        if isinstance(expr, Symbol):  # the built maps have none; kept for completeness
            return self.operands[self.map.num_dims + expr.index]
        assert isinstance(expr, Binary)
        if expr.kind is BinaryKind.ADD:
            return self._add(expr)
        if expr.kind is BinaryKind.MUL:
            if isinstance(expr.rhs, Constant) and expr.rhs.value == -1:
                return arith.subi(self.constant(0), self.emit(expr.lhs))
            return arith.muli(self.emit(expr.lhs), self.emit(expr.rhs))
        if not isinstance(expr.rhs, Constant):
            raise UnsupportedError(
                f"simplify-indexing: {self.where}: division by a non-constant in {expr}"
            )
        return self._division(expr.kind, expr.lhs, expr.rhs.value)

    def _add(self, expr: Binary) -> ir.Value:
        lhs = self.emit(expr.lhs)
        rhs = expr.rhs
        if isinstance(rhs, Constant) and rhs.value < 0:
            return arith.subi(lhs, self.constant(-rhs.value))
        if isinstance(rhs, Binary) and rhs.kind is BinaryKind.MUL:
            if isinstance(rhs.rhs, Constant) and rhs.rhs.value < 0:
                positive = rhs.lhs if rhs.rhs.value == -1 else rhs.lhs * (-rhs.rhs.value)
                return arith.subi(lhs, self.emit(positive))
        return arith.addi(lhs, self.emit(rhs))

    def _floordiv(self, lhs: AffineExpr, value: ir.Value, c: int) -> ir.Value:
        """floor(value / c) for c > 0."""
        divisor = self.constant(c)
        if self.non_negative(lhs):
            return arith.divui(value, divisor)
        quotient = arith.divsi(value, divisor)
        remainder = arith.remsi(value, divisor)
        negative = arith.cmpi(arith.CmpIPredicate.slt, remainder, self.constant(0))
        return arith.select(negative, arith.subi(quotient, self.constant(1)), quotient)

    def _division(self, kind: BinaryKind, lhs: AffineExpr, c: int) -> ir.Value:
        if c == 0:
            raise UnsupportedError(f"simplify-indexing: {self.where}: {kind.value} by zero")
        if c < 0:  # x floordiv -c = (-x) floordiv c; mod from the quotient
            if kind is BinaryKind.MOD:
                quotient = self._division(BinaryKind.FLOORDIV, lhs, c)
                product = arith.muli(quotient, self.constant(c))
                return arith.subi(self.emit(lhs), product)
            return self._division(kind, lhs * -1, -c)
        value = self.emit(lhs)
        if kind is BinaryKind.FLOORDIV:
            return self._floordiv(lhs, value, c)
        if kind is BinaryKind.CEILDIV:  # ceil(x / c) = floor((x + c - 1) / c)
            shifted = lhs + (c - 1)
            return self._floordiv(shifted, self.emit(shifted), c)
        divisor = self.constant(c)
        if self.non_negative(lhs):
            return arith.remui(value, divisor)
        remainder = arith.remsi(value, divisor)
        negative = arith.cmpi(arith.CmpIPredicate.slt, remainder, self.constant(0))
        return arith.select(negative, arith.addi(remainder, divisor), remainder)


def lower_map(
    indexing_map: IndexingMap, operands: Sequence[ir.Value], where: str = "apply_indexing"
) -> list[ir.Value]:
    """The map's results at ``operands`` (dims then symbols) as arith at the insertion point."""
    lowering = _Lowering(indexing_map, operands, where)
    return [lowering.emit(e) for e in indexing_map.results]


def _unused(op: ir.Operation) -> bool:
    return all(not list(result.uses) for result in op.results)


def lower_apply_indexing(op: ir.Operation) -> None:
    """Replace one ``apply_indexing`` (merged with its producers) by arith, and erase it."""
    builder = IndexExpressionBuilder()
    simplified = builder.build(builder.results(op))
    with ir.InsertionPoint(op):
        values = lower_map(simplified, builder.values, f"'{op.name}' at {op.location}")
    for old, new in zip(op.results, values, strict=True):
        old.replace_all_uses_with(new)
    op.erase()


def run(module: ir.Module, options: PipelineOptions) -> None:
    """Lower every apply_indexing, users before producers, then canonicalize and CSE."""
    for op in reversed(walk_ops(module.operation, APPLY_INDEXING)):
        if _unused(op):
            op.erase()  # IRDL ops have unknown effects: nothing upstream would drop them
        else:
            lower_apply_indexing(op)
    run_upstream(module, "builtin.module(canonicalize,cse)")


PASS = Pass(
    name="simplify-indexing",
    run=run,
    description="simplify heron_gpu.apply_indexing with heron.indexing and lower it to arith",
)
