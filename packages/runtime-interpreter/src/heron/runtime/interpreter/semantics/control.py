"""Structured control flow and calls: ``scf.if``, ``scf.for``, ``scf.while``, ``func.call``.

Divergence (see :mod:`~..engine`): a condition or bound that differs
between active lanes splits the mask; results are merged lane by lane.
"""

from __future__ import annotations

import numpy as np

from heron.runtime.interpreter.engine import Frame, semantics
from heron.runtime.interpreter.program import Op
from heron.runtime.interpreter.types import VectorType, parse_type


def _uniform_truth(frame: Frame, condition) -> bool | None:
    """The condition's value when every active lane agrees, else None."""
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
    if truth is True:
        frame.set_results(op, *frame.run_region(then_region, []))
        return
    if truth is False:
        if has_else:
            frame.set_results(op, *frame.run_region(else_region, []))
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
        for iv in range(lo, hi, st):
            values = frame.run_region(body, [iv_dtype.type(iv), *values])
        frame.set_results(op, *values)
        return
    _divergent_for(frame, op, bounds, values, iv_dtype)


def _divergent_for(frame: Frame, op: Op, bounds, values, iv_dtype) -> None:
    lanes = frame.lanes.size
    lower, upper, step = (np.broadcast_to(b, (lanes,)).astype(iv_dtype) for b in bounds)
    if np.any(step[frame.active()] <= 0):
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
