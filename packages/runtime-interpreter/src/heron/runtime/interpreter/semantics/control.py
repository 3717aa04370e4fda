"""Structured control flow and calls: ``scf.if``, ``scf.for``, ``scf.while``, ``func.call``.

Divergence (see :mod:`~..engine`): a condition or bound that differs
between active lanes splits the mask; results are merged lane by lane.
"""

from __future__ import annotations

import itertools

import numpy as np

from heron.runtime.interpreter.engine import (
    BlockPlan,
    Frame,
    Launch,
    WorkCounter,
    block_plan,
    operation_uses,
    semantics,
)
from heron.runtime.interpreter.lanes import LaneSpace
from heron.runtime.interpreter.program import Block, Op
from heron.runtime.interpreter.types import (
    FloatType,
    IndexType,
    IntegerType,
    VectorType,
    parse_type,
)


def _uniform_truth(frame: Frame, condition) -> bool | None:
    """The condition's value when every active lane agrees, else None."""
    if type(condition) is np.bool_:  # a uniform value (the common case in a uniform loop)
        return bool(condition)
    condition = np.asarray(condition)
    if condition.ndim == 0:
        return bool(condition)
    active = condition if frame.mask is None else condition[frame.mask]
    if active.size == 0:
        return False
    if active.all():
        return True
    if not active.any():
        return False
    return None


def merge(choose: np.ndarray, first, second, type_text: str):
    """Per lane: ``first`` where ``choose``, else ``second`` (vectors: the whole vector)."""
    vtype = parse_type(type_text)
    if hasattr(first, "memory") or hasattr(second, "memory"):
        if first is not second:
            raise ValueError("a divergent branch yields different memrefs")
        return first
    trailing = len(vtype.shape) if isinstance(vtype, VectorType) else 0
    pick = choose.reshape(choose.shape + (1,) * trailing)
    return np.where(pick, first, second)


@semantics("scf.if")
def scf_if(frame: Frame, op: Op) -> None:
    condition = frame.operand(op, 0)
    then_region, else_region = op.regions
    has_else = bool(else_region.blocks)
    truth = _uniform_truth(frame, condition)
    if truth is not None:  # every active lane takes one region: run it as it is
        region = then_region if truth else else_region
        if not region.blocks:
            return
        blocks = region.blocks
        yielded = (
            frame.run_block(blocks[0], ()) if len(blocks) == 1 else frame.run_region(region, [])
        )
        if len(yielded) != len(op.results):
            frame.set_results(op, *yielded)  # says what is wrong
        values = frame.values
        for value_id, value in zip(op.results, yielded):
            values[value_id] = value
        return
    condition = np.broadcast_to(np.asarray(condition, np.bool_), (frame.lanes.size,))
    active = frame.active()
    then_values = frame.run_region(then_region, [], active & condition)
    else_values = frame.run_region(else_region, [], active & ~condition) if has_else else []
    frame.set_results(
        op,
        *(
            merge(condition, t, e, type_text)
            for t, e, type_text in zip(then_values, else_values, op.result_types, strict=True)
        ),
    )


@semantics("scf.for")
def scf_for(frame: Frame, op: Op) -> None:
    lower, upper, step, *initial = frame.operands(op)
    (body,) = op.regions
    iv_dtype = parse_type(op.operand_types[0]).dtype
    unsigned = bool(op.attributes.get("unsignedCmp", False))
    values = list(initial)
    bounds = [np.asarray(b) for b in (lower, upper, step)]
    if all(b.ndim == 0 for b in bounds):
        lo, hi, st = (int(b) for b in bounds)
        if unsigned:
            bits = iv_dtype.itemsize * 8
            lo, hi = lo % (1 << bits), hi % (1 << bits)
        if st <= 0:
            raise frame.unsupported(op, f"step {st} is not positive")
        trips = range(lo, hi, st)
        if len(trips) >= HOIST_MIN_TRIPS and len(body.blocks) == 1:
            values = _hoisted_for(frame, body.entry, trips, values, iv_dtype)
        else:
            for iv in trips:
                values = frame.run_region(body, [iv_dtype.type(iv), *values])
        frame.set_results(op, *values)
        return
    _divergent_for(frame, op, bounds, values, iv_dtype)


# -- uniform loops: what depends only on the induction variable, for every iteration at once
#
# A loop with uniform bounds whose body computes indices from its induction variable
# (masks, comparisons, address arithmetic) runs those operations once per iteration on
# 0-d values: on a loop that runs long on few threads, numpy's per-call cost per
# operation per iteration is the whole cost. Such operations, when they read only the
# induction variable, uniform values from outside the loop and each other, are computed
# for a chunk of iterations at once (the iterations as lanes: the same elementwise numpy
# operations, so the same bits), and each iteration takes its element.

#: Operations computed ahead for a chunk of iterations: pure and elementwise, no effect,
#: no fault (the divisions, which can report a division by zero, are not in it).
HOISTABLE = frozenset(
    "arith." + name
    for name in (
        "constant addi subi muli andi ori xori maxsi minsi maxui minui shli shrui shrsi cmpi"
        " extsi extui trunci index_cast index_castui addf subf mulf divf remf negf maximumf"
        " minimumf maxnumf minnumf cmpf extf truncf fptosi fptoui sitofp uitofp bitcast select"
    ).split()
)
#: Loops with fewer iterations run as written (computing ahead would cost more).
HOIST_MIN_TRIPS = 16
#: Iterations computed ahead together (bounds the memory of the values computed ahead).
HOIST_CHUNK = 4096

_SCALAR = (IntegerType, IndexType, FloatType)


def _hoist_candidates(block: Block, plan: BlockPlan) -> tuple[tuple[int, bool], ...]:
    """Steps of ``block`` (a loop body) that may be computed ahead, each with whether it
    depends on the induction variable (its first argument); made once per program."""
    defined = set(block.arguments).union(*(op.results for _, op, _ in plan.steps))
    iv = block.arguments[0]
    ahead: set[int] = {iv}
    varying: set[int] = {iv}
    out = []
    for index, (_, op, _) in enumerate(plan.steps):
        if (
            op.name not in HOISTABLE
            or op.regions
            or not all(
                isinstance(parse_type(t), _SCALAR) for t in (*op.operand_types, *op.result_types)
            )
            or not all(v in ahead or v not in defined for v in op.operands)
        ):
            continue
        ahead.update(op.results)
        depends = any(v in varying for v in op.operands)
        if depends:
            varying.update(op.results)
        out.append((index, depends))
    return tuple(out)


class _AheadPlan:
    """A loop body split for one choice of operations computed ahead (kept per program).

    ``steps``: the operations computed ahead, in order; ``rest``: the body's plan
    without them (and without dropping what they compute); ``outer``: the values
    from outside they read; ``varying`` / ``invariant``: their results that depend on
    the induction variable or not; ``needed``: the varying ones the rest reads.
    """

    def __init__(self, plan: BlockPlan, chosen, defined: set[int], computed: set[int]):
        skipped = {index for index, _ in chosen}
        self.rest = BlockPlan(
            tuple(
                (handler, op, tuple(v for v in dead if v not in computed))
                for k, (handler, op, dead) in enumerate(plan.steps)
                if k not in skipped
            ),
            plan.terminator,
            plan.op_count,
        )
        self.steps = [plan.steps[index] for index, _ in chosen]
        self.outer = {v for _, op, _ in self.steps for v in op.operands if v not in defined}
        results = [(plan.steps[index][1].results, depends) for index, depends in chosen]
        self.varying = [v for ids, depends in results if depends for v in ids]
        self.invariant = [v for ids, depends in results if not depends for v in ids]
        read = set(plan.terminator.operands if plan.terminator is not None else ())
        read = read.union(*(operation_uses(op) for _, op, _ in self.rest.steps))
        self.needed = [v for v in self.varying if v in read]


def _hoisted_for(frame: Frame, block: Block, trips: range, values: list, iv_dtype) -> list:
    """Run a uniform loop, the operations of :func:`_hoist_candidates` computed ahead."""
    program = frame.launch.program
    plan = block_plan(program, block)
    cache = program.derived.setdefault("control.hoist_candidates", {})
    entry = cache.get(id(block))
    if entry is None:
        defined = set(block.arguments).union(*(op.results for _, op, _ in plan.steps))
        entry = cache[id(block)] = (block, _hoist_candidates(block, plan), defined)
    candidates = entry[1]
    limits = np.iinfo(iv_dtype) if iv_dtype.kind in "iu" else None
    if not candidates or (
        limits is not None and not (limits.min <= trips.start and trips[-1] <= limits.max)
    ):
        return _plain_for(frame, block, trips, values, iv_dtype, plan)
    # Which candidates run ahead here: those whose outer operands are uniform (0-d).
    defined, iv = entry[2], block.arguments[0]
    ahead_ids: set[int] = {iv}
    chosen: list[tuple[int, bool]] = []
    for index, depends in candidates:
        op = plan.steps[index][1]
        if all(
            (v in ahead_ids) if v in defined else np.ndim(frame.values[v]) == 0 for v in op.operands
        ):
            chosen.append((index, depends))
            ahead_ids.update(op.results)
    if not chosen:
        return _plain_for(frame, block, trips, values, iv_dtype, plan)
    key = (id(block), tuple(index for index, _ in chosen))
    ahead_plan = cache.get(key)
    if ahead_plan is None:
        ahead_plan = cache[key] = _AheadPlan(plan, chosen, defined, ahead_ids - {iv})
    rest, steps, outer = ahead_plan.rest, ahead_plan.steps, ahead_plan.outer
    varying, invariant, needed = ahead_plan.varying, ahead_plan.invariant, ahead_plan.needed
    frame_values = frame.values
    for start in range(0, len(trips), HOIST_CHUNK):
        chunk = trips[start : start + HOIST_CHUNK]
        ivs = np.arange(chunk.start, chunk.stop, chunk.step, dtype=np.int64).astype(iv_dtype)
        ahead = Frame(
            Launch(
                program,
                frame.launch.kernel,
                LaneSpace((len(chunk), 1, 1), (1, 1, 1), 0, len(chunk)),
                frame.launch.globals_memory,
                WorkCounter(frame.launch.kernel_name, None),
            ),
            frame.function,
        )
        ahead.values = {v: frame_values[v] for v in outer}
        ahead.values[iv] = ivs
        for handler, op, _ in steps:
            handler(ahead, op)
        if any(np.shape(ahead.values[v]) != (len(chunk),) for v in varying):
            # Not elementwise after all: the rest of the loop as written.
            return _plain_for(frame, block, trips[start:], values, iv_dtype, plan)
        for v in invariant:
            frame_values[v] = ahead.values[v]
        # Iterating an array gives its elements as numpy scalars, as indexing does.
        columns = [list(ahead.values[v]) for v in needed]
        rows = zip(*columns) if columns else itertools.repeat(())
        for iv_value, row in zip(list(ivs), rows):
            frame_values.update(zip(needed, row))
            values = frame.run_block(block, [iv_value, *values], rest)
    return values


def _plain_for(frame: Frame, block: Block, trips: range, values: list, iv_dtype, plan) -> list:
    for iv in trips:
        values = frame.run_block(block, [iv_dtype.type(iv), *values], plan)
    return values


def _divergent_for(frame: Frame, op: Op, bounds, values, iv_dtype) -> None:
    lanes = frame.lanes.size
    lower, upper, step = (np.broadcast_to(b, (lanes,)).astype(iv_dtype) for b in bounds)
    if (step[frame.active()] <= 0).any():
        raise frame.unsupported(op, "a step that is not positive")
    iv = lower.copy()
    active = frame.active()
    (body,) = op.regions
    result_types = op.result_types
    while True:
        running = active & (iv < upper)
        if not running.any():
            break
        new = frame.run_region(body, [iv, *values], running)
        values = [
            merge(running, n, v, t) for n, v, t in zip(new, values, result_types, strict=True)
        ]
        iv = np.where(running, iv + step, iv)
    frame.set_results(op, *values)


@semantics("scf.while")
def scf_while(frame: Frame, op: Op) -> None:
    before, after = op.regions
    values = frame.operands(op)
    active = frame.active().copy()
    results: list | None = None
    types = op.result_types
    while True:
        condition, *forwarded = frame.run_region(before, values, active)
        condition = np.broadcast_to(np.asarray(condition, np.bool_), (frame.lanes.size,))
        leaving = active & ~condition
        if results is None:
            results = list(forwarded)
        else:
            results = [
                merge(leaving, f, r, t) for f, r, t in zip(forwarded, results, types, strict=True)
            ]
        active = active & condition
        if not active.any():
            break
        values = frame.run_region(after, forwarded, active)
    frame.set_results(op, *results)


#: Operations after which a function is not pure (its calls cannot be shared).
_EFFECTS = (
    "memref.store",
    "vector.store",
    "memref.atomic_rmw",
    "memref.generic_atomic_rmw",
    "gpu.barrier",
    "gpu.shuffle",
    "memref.alloca",
    "vector.maskedstore",
)


def _is_pure(frame: Frame, name: str) -> bool:
    """Whether calls of ``name`` (and what it calls) have no effect: their results can be shared."""
    cache = frame.launch.state.setdefault("pure_functions", {})
    if name not in cache:
        cache[name] = False  # a recursive call is not shared
        function = frame.launch.program.functions[name]
        pure = True
        stack = [function.body]
        while stack and pure:
            for block in stack.pop().blocks:
                for inner in block.ops:
                    if inner.name in _EFFECTS or (
                        inner.name == "func.call"
                        and not _is_pure(frame, inner.attributes["callee"])
                    ):
                        pure = False
                    stack.extend(inner.regions)
        cache[name] = pure
    return cache[name]


#: Arguments up to this many elements are compared by value, larger ones by identity.
_BY_VALUE = 1 << 12


def _identity(value) -> object:
    """What makes two call arguments the same: small arrays by value, the rest by object."""
    if isinstance(value, np.ndarray) and value.size <= _BY_VALUE:
        return (value.dtype.str, value.shape, value.tobytes())
    if isinstance(value, np.generic):
        return (value.dtype.str, (), value.tobytes())
    return id(value)


@semantics("func.call")
def func_call(frame: Frame, op: Op) -> None:
    """Run the callee; a pure callee called again with the very same values is not rerun.

    heron's surviving subgraph functions are pure and are often called
    several times with the same operands (nested calls multiply that); the
    GPU's compiler folds those calls, and so does the interpreter, across the
    whole batch, keyed on the argument values (small arrays) or the argument
    arrays themselves (large ones), the mask, and on memory not having
    changed since (a store or atomic in between starts afresh).
    """
    name = op.attributes["callee"]
    function = frame.launch.program.functions.get(name)
    if function is None:
        raise frame.unsupported(op, f"calls '{name}', which the program does not define")
    arguments = frame.operands(op)
    if not _is_pure(frame, name):
        frame.set_results(op, *frame.call(function, arguments))
        return
    memo = frame.launch.state.setdefault("pure_calls", {})
    generation = frame.launch.state.get("memory_generation", 0)
    key = (name, generation, id(frame.mask), *(_identity(a) for a in arguments))
    hit = memo.get(key)
    if hit is None:
        hit = (arguments, frame.mask, frame.call(function, arguments))  # keeps the ids alive
        memo[key] = hit
    frame.set_results(op, *hit[2])
