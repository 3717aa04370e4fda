"""The ``lower-loops-to-scf`` pass: ``heron_gpu.loop`` becomes ``scf.for`` nests with a check.

A ``heron_gpu.loop`` iterates its map's range symbols and runs the body only
at the points of the map's domain. Upstream passes understand ``scf``, so the
loop becomes one ``scf.for`` per range symbol (constant bounds from the
symbol's interval, step 1, threading the iter_args) and, inside the
innermost, an ``scf.if`` on "the dims, runtime symbols and constraints lie in
the domain" whose then-branch evaluates the map (``heron_gpu.apply_indexing``)
and runs the body, and whose else-branch passes the iter_args through.

Checks that can never fail are not emitted: a dimension fed by
``gpu.thread_id x upper_bound 128`` always lies in ``[0, 127]``, and a
constraint implied by the variables' bounds always holds. That keeps the
condition as small as the seeds' examples, and where nothing is left to check
the body is not guarded at all (the seeds' ``scf.if %true``, which canonicalize
would fold away later, would hide from vectorize-loads-stores that every
iteration runs the body).

The constraint check evaluates a map without the symbols it does not use, and
is given only their values; when it uses no range symbol at all, the whole
condition is computed once before the ``scf.for`` nest (it is the same at
every iteration). Either way a later pass (vectorize-loads-stores) sees from
the operands alone that the condition does not depend on a loop variable.
"""

from __future__ import annotations

from collections.abc import Sequence

from mlir import ir
from mlir.dialects import arith, scf

from heron.emitters.dialect import apply_indexing_op, op_indexing_map
from heron.emitters.dialect.irdl_source import OPERAND_SEGMENTS_ATTR
from heron.emitters.ir_utils import clone_block_into, index_constant, mapped, walk_ops
from heron.emitters.pipeline.manager import Pass, PipelineOptions
from heron.hlo.errors import UnsupportedError
from heron.indexing import IndexingMap, Interval, is_known_empty
from heron.indexing.affine import AffineExpr, Symbol, replace, used_symbols
from heron.indexing.range_analysis import RangeEvaluator

LOOP = "heron_gpu.loop"

# Ops whose ``upper_bound`` attribute bounds their (non-negative) result.
_BOUNDED_ID_OPS = ("gpu.thread_id", "gpu.block_id", "gpu.block_dim", "gpu.grid_dim")


def _constant_index(value: ir.Value) -> int | None:
    owner = value.owner
    if isinstance(owner, ir.Block) or owner.operation.name != "arith.constant":
        return None
    attr = owner.attributes["value"]
    if not isinstance(attr, ir.IntegerAttr) or not isinstance(value.type, ir.IndexType):
        return None
    return ir.IntegerAttr(attr).value


def known_range(value: ir.Value) -> Interval | None:
    """What the IR alone says about an index value's range, or None when nothing.

    Knows the ids with ``upper_bound``, index constants and the induction
    variables of ``scf.for`` loops with constant bounds and step 1.
    """
    owner = value.owner
    if isinstance(owner, ir.Block):
        parent = owner.owner
        if parent is None or parent.operation.name != "scf.for":
            return None
        if ir.BlockArgument(value).arg_number != 0:
            return None
        lower, upper, step = (_constant_index(v) for v in list(parent.operands)[:3])
        if lower is None or upper is None or step != 1:
            return None
        return Interval(lower, upper - 1)
    owner = owner.operation
    if owner.name in _BOUNDED_ID_OPS:
        if "upper_bound" not in owner.attributes:
            return None
        return Interval(0, ir.IntegerAttr(owner.attributes["upper_bound"]).value - 1)
    constant = _constant_index(value)
    return None if constant is None else Interval(constant, constant)


def _checks(value: ir.Value, bounds: Interval, known: Interval | None) -> list[ir.Value]:
    """``value`` in ``bounds`` as i1 values, minus the halves ``known`` already proves."""
    conditions = []
    if known is None or known.lower < bounds.lower:
        lower = index_constant(bounds.lower)
        conditions.append(arith.cmpi(arith.CmpIPredicate.sge, value, lower))
    if known is None or known.upper > bounds.upper:
        upper = index_constant(bounds.upper)
        conditions.append(arith.cmpi(arith.CmpIPredicate.sle, value, upper))
    return conditions


def _needed_constraints(
    indexing_map: IndexingMap, ranges: RangeEvaluator
) -> list[tuple[AffineExpr, Interval]]:
    """The constraints that the variables' bounds alone do not prove."""
    return [
        (expr, interval)
        for expr, interval in indexing_map.constraints
        if not interval.contains_interval(ranges.range(expr))
    ]


def _renumber_symbols(expr: AffineExpr, renumber: dict[int, int]) -> AffineExpr:
    """``expr`` with symbol ``i`` renamed to ``renumber[i]`` (every used symbol is a key)."""
    symbols = [Symbol(renumber.get(i, 0)) for i in range(max(renumber, default=-1) + 1)]
    return replace(expr, symbols=symbols)


def uses_range_symbols(indexing_map: IndexingMap) -> bool:
    """Whether the in-domain condition needs a range symbol (else it is loop-invariant)."""
    ranges = RangeEvaluator(indexing_map, use_constraints=False)
    n_range = len(indexing_map.range_vars)
    return any(
        i < n_range
        for expr, _ in _needed_constraints(indexing_map, ranges)
        for i in used_symbols(expr)
    )


def in_domain_condition(
    indexing_map: IndexingMap,
    dims: Sequence[ir.Value],
    range_symbols: Sequence[ir.Value],
    runtime_symbols: Sequence[ir.Value],
) -> ir.Value:
    """An i1 value: the point lies in the map's domain (range symbols are assumed in bounds).

    ``range_symbols`` may be empty when no needed constraint uses one
    (``uses_range_symbols`` is false).

    Emitted at the current insertion point. Constraints are evaluated with one
    ``heron_gpu.apply_indexing`` of a map (without constraints) computing the
    constrained expressions; the checks are and-ed, so simplifying those
    expressions on the variables' bounds is exact whenever it matters.
    """
    conditions: list[ir.Value] = []
    for value, var in zip(dims, indexing_map.dimensions, strict=True):
        conditions += _checks(value, var.bounds, known_range(value))
    for value, var in zip(runtime_symbols, indexing_map.runtime_vars, strict=True):
        conditions += _checks(value, var.bounds, known_range(value))
    ranges = RangeEvaluator(indexing_map, use_constraints=False)
    needed = _needed_constraints(indexing_map, ranges)
    if needed:
        used = sorted(set().union(*(used_symbols(expr) for expr, _ in needed)))
        renumber = {old: new for new, old in enumerate(used)}
        n_range = len(indexing_map.range_vars)
        all_vars = indexing_map.symbols

        def symbol_value(i: int) -> ir.Value:
            return range_symbols[i] if i < n_range else runtime_symbols[i - n_range]

        check_map = IndexingMap(
            indexing_map.dimensions,
            tuple(_renumber_symbols(expr, renumber) for expr, _ in needed),
            tuple(all_vars[i] for i in used if i < n_range),
            tuple(all_vars[i] for i in used if i >= n_range),
        )
        values = apply_indexing_op(check_map, dims, [symbol_value(i) for i in used]).results
        for value, (expr, interval) in zip(values, needed, strict=True):
            conditions += _checks(value, interval, ranges.range(expr))
    if not conditions:
        return arith.constant(ir.IntegerType.get_signless(1), 1)
    result = conditions[0]
    for condition in conditions[1:]:
        result = arith.andi(result, condition)
    return result


def lower_loop(loop: ir.Operation) -> None:
    """Replace one ``heron_gpu.loop`` (whose body holds no loop any more) by scf."""
    indexing_map = op_indexing_map(loop)
    n_dim_operands = list(ir.DenseI32ArrayAttr(loop.attributes[OPERAND_SEGMENTS_ATTR]))[0]
    operands = list(loop.operands)
    dims = operands[: indexing_map.num_dims]
    runtime_symbols = operands[indexing_map.num_dims : n_dim_operands]
    inits = operands[n_dim_operands:]
    body = loop.regions[0].blocks[0]

    if is_known_empty(indexing_map):  # no point runs the body
        for result, init in zip(loop.results, inits, strict=True):
            result.replace_all_uses_with(init)
        loop.erase()
        return

    with ir.InsertionPoint(loop):
        step = index_constant(1)
        # A condition on the dims and runtime symbols only is computed once, outside the nest.
        hoisted = (
            None
            if uses_range_symbols(indexing_map)
            else in_domain_condition(indexing_map, dims, [], runtime_symbols)
        )
        bounds = [
            (index_constant(v.bounds.lower), index_constant(v.bounds.upper + 1))
            for v in indexing_map.range_vars
        ]
    iters = inits
    fors: list[scf.ForOp] = []
    point = ir.InsertionPoint(loop)
    for lower, upper in bounds:
        with point:
            for_op = scf.ForOp(lower, upper, step, iters)
        fors.append(for_op)
        iters = list(for_op.inner_iter_args)
        point = ir.InsertionPoint(for_op.body)
    induction_vars = [f.induction_variable for f in fors]
    with point:
        condition = hoisted
        if condition is None:
            condition = in_domain_condition(indexing_map, dims, induction_vars, runtime_symbols)
    if _is_true(condition):  # every point lies in the domain: no check
        if not list(condition.uses):
            condition.owner.erase()
        with point:
            inner_results = _clone_body(
                loop, body, indexing_map, dims, induction_vars, runtime_symbols, iters
            )
    else:
        with point:
            if_op = scf.IfOp(condition, [v.type for v in iters], has_else=True)
            with ir.InsertionPoint(if_op.then_block):
                scf.YieldOp(
                    _clone_body(
                        loop, body, indexing_map, dims, induction_vars, runtime_symbols, iters
                    )
                )
            with ir.InsertionPoint(if_op.else_block):
                scf.YieldOp(iters)
        inner_results = list(if_op.results)
    for for_op in reversed(fors):
        with ir.InsertionPoint(for_op.body):
            scf.YieldOp(inner_results)
        inner_results = list(for_op.results)
    for old, new in zip(loop.results, inner_results, strict=True):
        old.replace_all_uses_with(new)
    loop.erase()


def _is_true(condition: ir.Value) -> bool:
    """Whether ``condition`` is the ``arith.constant true`` of a check with nothing to check."""
    if not isinstance(condition, ir.OpResult) or condition.owner.name != "arith.constant":
        return False
    value = condition.owner.attributes["value"]
    return (
        isinstance(value, ir.BoolAttr)
        and ir.BoolAttr(value).value
        or (isinstance(value, ir.IntegerAttr) and ir.IntegerAttr(value).value != 0)
    )


def _clone_body(
    loop: ir.Operation,
    body: ir.Block,
    indexing_map: IndexingMap,
    dims: Sequence[ir.Value],
    induction_vars: Sequence[ir.Value],
    runtime_symbols: Sequence[ir.Value],
    iters: Sequence[ir.Value],
) -> list[ir.Value]:
    """The loop's body at the current insertion point, for the point the induction
    variables name: the map evaluated, the body cloned; the values it yields."""
    symbols = [*induction_vars, *runtime_symbols]
    n_results = indexing_map.num_results
    results = list(apply_indexing_op(indexing_map, dims, symbols).results) if n_results else []
    mapping = dict(zip(list(body.arguments), [*induction_vars, *results, *iters], strict=True))
    terminator = clone_block_into(body, mapping)
    if terminator is None or terminator.name != "gpu.yield":
        raise UnsupportedError(f"'{LOOP}' at {loop.location}: body must end in gpu.yield")
    return mapped(terminator.operands, mapping)


def run(module: ir.Module, options: PipelineOptions) -> None:
    """Lower every loop, inner loops first (post-order) so bodies are cloned once lowered."""
    loops = walk_ops(module.operation, LOOP)
    # walk_ops is pre-order: reversing it visits nested loops before the loops holding them.
    for loop in reversed(loops):
        lower_loop(loop)


PASS = Pass(
    name="lower-loops-to-scf",
    run=run,
    description="heron_gpu.loop -> scf.for per range symbol + scf.if in-domain check",
)
