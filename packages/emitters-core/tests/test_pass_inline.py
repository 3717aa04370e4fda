"""The inline pass: which calls are inlined, in what order, what is erased, and semantics kept."""

from __future__ import annotations

import ctypes

import numpy as np
import pytest
from heron_test_support.host_jit import jit
from heron_test_support.seed_modules import gelu_emitted_module
from mlir import ir
from mlir.dialects import arith, func, scf, tensor

from heron.emitters.dialect import (
    loop_op,
    pure_call_op,
    shuffle_reduce_op,
    verify_xla_ops,
)
from heron.emitters.ir_utils import walk_ops
from heron.emitters.pipeline import PipelineOptions
from heron.emitters.pipeline.inline import PASS, SCALAR_GROWTH, SMALL_FUNCTION_OPS


def _private(name: str, inputs, results) -> func.FuncOp:
    op = func.FuncOp(name, ir.FunctionType.get(inputs, results))
    op.sym_visibility = ir.StringAttr.get("private")
    return op


def _run(module: ir.Module) -> None:
    verify_xla_ops(module)
    PASS.run(module, PipelineOptions())
    module.operation.verify()
    verify_xla_ops(module)


def _function_names(module: ir.Module) -> list[str]:
    return [
        ir.StringAttr(op.attributes["sym_name"]).value
        for op in module.body.operations
        if op.operation.name == "func.func"
    ]


def test_gelu_becomes_one_function(ctx):
    module = gelu_emitted_module("tanh")
    _run(module)
    assert _function_names(module) == ["main"]
    assert not walk_ops(module.operation, "heron_gpu.pure_call")
    (loop,) = walk_ops(module.operation, "heron_gpu.loop")
    names = [op.name for op in walk_ops(loop)]
    assert names.count("tensor.extract") == 1 and names.count("math.tanh") == 1
    # the extract reads the loop's map results (the call's index operands were mapped)
    (extract,) = walk_ops(loop, "tensor.extract")
    block_args = list(loop.regions[0].blocks[0].arguments)
    assert list(extract.operands)[1:] == block_args[1:4]


def _big_body(block_args, n_ops: int) -> ir.Value:
    value = block_args[0]
    for _ in range(n_ops):
        value = arith.addf(value, block_args[-1])
    return value


def _main_and_f(callee_ops: int) -> tuple[ir.Module, func.FuncOp, func.FuncOp]:
    """A module of an empty @main(f32, f32) and private @f of ``callee_ops`` adds."""
    f32 = ir.F32Type.get()
    module = ir.Module.create()
    with ir.InsertionPoint(module.body):
        main = func.FuncOp("main", ir.FunctionType.get([f32, f32], [f32]))
        f = _private("f", [f32, f32], [f32])
    with ir.InsertionPoint(f.add_entry_block()):
        func.ReturnOp([_big_body(list(f.arguments), callee_ops)])
    return module, main, f


def _call_module(callee_ops: int, n_calls: int) -> ir.Module:
    """@main calls private @f (``callee_ops`` adds) ``n_calls`` times."""
    f32 = ir.F32Type.get()
    module, main, f = _main_and_f(callee_ops)
    with ir.InsertionPoint(main.add_entry_block()):
        value = main.arguments[0]
        for _ in range(n_calls):
            value = pure_call_op(f, [value, main.arguments[1]], [f32]).results[0]
        func.ReturnOp([value])
    return module


@pytest.mark.parametrize(
    ("callee_ops", "n_calls", "inlined"),
    [
        (SMALL_FUNCTION_OPS, 3, True),  # small: inlined at every call
        (SMALL_FUNCTION_OPS + 5, 1, True),  # big but called once
        (SMALL_FUNCTION_OPS + 5, 2, False),  # big and shared: stays a function
        (10, SCALAR_GROWTH // 10, True),  # small on scalars, copies within the growth
        (10, SCALAR_GROWTH // 10 + 1, False),  # small on scalars, too many copies: LLVM's
    ],
)
def test_inlining_rule(ctx, callee_ops, n_calls, inlined):
    module = _call_module(callee_ops, n_calls)
    _run(module)
    calls = walk_ops(module.operation, "heron_gpu.pure_call")
    if inlined:
        assert not calls and _function_names(module) == ["main"]
        assert len(walk_ops(module.operation, "arith.addf")) == callee_ops * n_calls
    else:
        assert len(calls) == n_calls and _function_names(module) == ["main", "f"]
        (f,) = walk_ops(module.operation, "func.func")[1:]
        passthrough = str(f.attributes["passthrough"]) if "passthrough" in f.attributes else ""
        always = "alwaysinline" in passthrough
        # a small function left to LLVM is inlined there; a big shared one is LLVM's choice
        assert always == (callee_ops <= SMALL_FUNCTION_OPS)


def test_small_function_on_indices_is_inlined_whatever_its_copies(ctx):
    """Only functions on plain scalars are left to LLVM: one taking an index has copies
    whose indexing the later passes simplify in place."""
    f32, index = ir.F32Type.get(), ir.IndexType.get()
    n_calls = SCALAR_GROWTH  # 1-op body: SCALAR_GROWTH copies would be the limit, 2 ops past it
    module = ir.Module.create()
    with ir.InsertionPoint(module.body):
        main = func.FuncOp("main", ir.FunctionType.get([f32, index], [f32]))
        f = _private("f", [f32, index], [f32])
    with ir.InsertionPoint(f.add_entry_block()):
        cast = arith.index_cast(ir.IntegerType.get_signless(32), f.arguments[1])
        func.ReturnOp([arith.addf(f.arguments[0], arith.sitofp(f32, cast))])
    with ir.InsertionPoint(main.add_entry_block()):
        value = main.arguments[0]
        for _ in range(n_calls):
            value = pure_call_op(f, [value, main.arguments[1]], [f32]).results[0]
        func.ReturnOp([value])
    _run(module)
    assert not walk_ops(module.operation, "heron_gpu.pure_call")
    assert _function_names(module) == ["main"]


def test_post_order_and_nested_regions(ctx):
    """main -> a (inside an scf.for) -> b (inside a heron_gpu.loop): all inlined, callees first."""
    f32, index = ir.F32Type.get(), ir.IndexType.get()
    t = ir.RankedTensorType.get([4], f32)
    module = ir.Module.create()
    with ir.InsertionPoint(module.body):
        main = func.FuncOp("main", ir.FunctionType.get([t, f32], [t]))
        a = _private("a", [t, f32], [t])
        b = _private("b", [f32, index], [f32])
        unused = _private("unused", [f32], [f32])
    with ir.InsertionPoint(unused.add_entry_block()):
        func.ReturnOp([unused.arguments[0]])
    with ir.InsertionPoint(b.add_entry_block()):
        x, i = b.arguments
        as_f32 = arith.uitofp(f32, arith.index_cast(ir.IntegerType.get_signless(32), i))
        func.ReturnOp([_big_body([arith.addf(x, as_f32), x], SMALL_FUNCTION_OPS + 1)])
    with ir.InsertionPoint(a.add_entry_block()):
        out, x = a.arguments

        def body(symbols, idx, iters):
            value = pure_call_op(b, [x, idx[0]], [f32]).results[0]
            return [tensor.insert(value, iters[0], idx)]

        loop = loop_op(
            "(d0) -> (d0), domain: d0 in [0, 3]", [arith.constant(index, 0)], [out], body
        )
        func.ReturnOp([loop.results[0]])
    with ir.InsertionPoint(main.add_entry_block()):
        c0, c1 = arith.constant(index, 0), arith.constant(index, 1)
        for_op = scf.ForOp(c0, c1, c1, [main.arguments[0]])
        with ir.InsertionPoint(for_op.body):
            call = pure_call_op(a, [for_op.inner_iter_args[0], main.arguments[1]], [t])
            scf.YieldOp([call.results[0]])
        func.ReturnOp([for_op.results[0]])
    _run(module)
    assert _function_names(module) == ["main"]
    (loop,) = walk_ops(module.operation, "heron_gpu.loop")
    assert loop.parent.name == "scf.for"
    assert len(walk_ops(loop, "arith.addf")) == SMALL_FUNCTION_OPS + 2


def test_reducer_of_shuffle_reduce_is_kept(ctx):
    f32 = ir.F32Type.get()
    module = ir.Module.create()
    with ir.InsertionPoint(module.body):
        main = func.FuncOp("main", ir.FunctionType.get([f32], [f32]))
        add = _private("add", [f32, f32], [f32])
    with ir.InsertionPoint(add.add_entry_block()):
        func.ReturnOp([arith.addf(*add.arguments)])
    with ir.InsertionPoint(main.add_entry_block()):
        func.ReturnOp([shuffle_reduce_op([main.arguments[0]], 16, "add").results[0]])
    _run(module)
    assert _function_names(module) == ["main", "add"]


def test_inlined_code_computes_the_same(ctx):
    """Host-JIT a chain of small scalar functions before and after inlining."""
    f32 = ir.F32Type.get()
    module = ir.Module.create()
    with ir.InsertionPoint(module.body):
        main = func.FuncOp("main", ir.FunctionType.get([f32, f32], [f32]))
        square = _private("square", [f32], [f32])
        combine = _private("combine", [f32, f32], [f32])
    with ir.InsertionPoint(square.add_entry_block()):
        func.ReturnOp([arith.mulf(square.arguments[0], square.arguments[0])])
    with ir.InsertionPoint(combine.add_entry_block()):
        x, y = combine.arguments
        sq = pure_call_op(square, [y], [f32]).results[0]
        func.ReturnOp([arith.subf(arith.mulf(x, sq), y)])
    with ir.InsertionPoint(main.add_entry_block()):
        x, y = main.arguments
        first = pure_call_op(combine, [x, y], [f32]).results[0]
        second = pure_call_op(combine, [first, x], [f32]).results[0]
        func.ReturnOp([second])
    main.attributes["llvm.emit_c_interface"] = ir.UnitAttr.get()
    _run(module)
    assert _function_names(module) == ["main"]
    address = jit(module, "main")
    compiled = ctypes.CFUNCTYPE(ctypes.c_float, ctypes.c_float, ctypes.c_float)(address)
    rng = np.random.default_rng(0)
    for x, y in rng.uniform(-3, 3, size=(20, 2)).astype(np.float32):
        first = np.float32(x * np.float32(y * y) - y)
        expected = np.float32(first * np.float32(x * x) - x)
        assert np.float32(compiled(float(x), float(y))) == expected


# -- the call-graph bookkeeping against the plain rescanning algorithm ----------------------


def _reference_inline(module: ir.Module) -> None:
    """The rule stated naively: rescan the module for every decision (slow, obviously right).

    The random modules' calls never have equal operands, so no call is merged."""
    from heron.emitters.pipeline import inline as impl

    def calls_in(op):
        return [impl._callee_name(c) for c in walk_ops(op, "heron_gpu.pure_call")]

    def reaches(functions, start, target):
        seen, stack = set(), [start]
        while stack:
            name = stack.pop()
            if name == target:
                return True
            if name not in seen and name in functions:
                seen.add(name)
                stack.extend(calls_in(functions[name]))
        return False

    table = module.operation
    functions = impl._functions(table)
    order, state = [], set()

    def visit(name):
        state.add(name)
        for callee in calls_in(functions[name]):
            if callee in functions and callee not in state:
                visit(callee)
        order.append(name)

    for name in functions:
        if name not in state:
            visit(name)

    def size(function):
        return len(walk_ops(function)) - 2

    done = []
    for name in order:
        before, largest = size(functions[name]), 0  # the shared rule's growth bound
        for call in walk_ops(functions[name], "heron_gpu.pure_call"):
            callee = impl._callee_name(call)
            if reaches(functions, callee, name):
                continue
            small = size(functions[callee]) <= SMALL_FUNCTION_OPS
            # XLA's rule: it calls (at its top level) what the call's block calls
            block_calls = {
                impl._callee_name(op) for op in call.block.operations if op.name == impl.PURE_CALL
            }
            own = functions[callee].regions[0].blocks[0].operations
            shared = (
                callee in done
                and block_calls & {impl._callee_name(op) for op in own if op.name == impl.PURE_CALL}
                and impl._brings_an_equal_call(
                    call,
                    functions[callee],
                    impl._top_level_calls(functions[callee]),
                    impl._CallKeys(
                        op.operation for op in call.block.operations if op.name == impl.PURE_CALL
                    ),
                )
            )
            once = calls_in(table).count(callee) == 1
            if shared and not (small or once):
                callee_size = size(functions[callee])
                bound = before + max(largest, callee_size) + impl.SHARED_GROWTH_OPS
                if size(functions[name]) + callee_size > bound:
                    continue
                largest = max(largest, callee_size)
            if small or once or shared:
                impl.inline_call(call, functions[callee])
        done.append(name)
    # what the public functions reach stays (a cycle of private ones nothing else calls
    # goes too: MLIR's symbol-dce)
    functions = impl._functions(table)
    live = [n for n, op in functions.items() if not impl._is_private(op)]
    reached = set(live)
    while live:
        for callee in calls_in(functions[live.pop()]):
            if callee not in reached:
                reached.add(callee)
                live.append(callee)
    for n, op in functions.items():
        if n not in reached:
            op.erase()


def _random_call_module(seed: int) -> ir.Module:
    """main and private scalar functions of random sizes calling each other (cycles too)."""
    rng = np.random.default_rng(seed)
    f32 = ir.F32Type.get()
    n = int(rng.integers(3, 8))
    module = ir.Module.create()
    with ir.InsertionPoint(module.body):
        main = func.FuncOp("main", ir.FunctionType.get([f32], [f32]))
        functions = [_private(f"f{i}", [f32], [f32]) for i in range(n)]
    for i, function in enumerate([main, *functions]):
        with ir.InsertionPoint(function.add_entry_block()):
            value = function.arguments[0]
            for _ in range(int(rng.choice([1, 5, SMALL_FUNCTION_OPS + 3]))):
                value = arith.addf(value, value)
            # mostly calls to later functions; sometimes back (a cycle) or to itself
            for _ in range(int(rng.integers(0, 4))):
                low = min(i, n - 1)
                j = int(rng.integers(low, n)) if rng.random() < 0.8 else int(rng.integers(0, n))
                value = pure_call_op(functions[j], [value], [f32]).results[0]
            func.ReturnOp([value])
    return module


@pytest.mark.parametrize("seed", range(30))
def test_inlining_matches_the_rescanning_reference(ctx, seed):
    expected = _random_call_module(seed)
    _reference_inline(expected)
    module = _random_call_module(seed)
    _run(module)
    assert str(module) == str(expected)


def test_equal_calls_are_merged_and_the_callee_inlined_once(ctx):
    """Two calls of a big function at the same operands are one call (a pure_call is
    pure), so the function is called once and inlined: its body appears once."""
    f32 = ir.F32Type.get()
    module, main, f = _main_and_f(SMALL_FUNCTION_OPS + 5)
    with ir.InsertionPoint(main.add_entry_block()):
        first = pure_call_op(f, list(main.arguments), [f32]).results[0]
        second = pure_call_op(f, list(main.arguments), [f32]).results[0]
        func.ReturnOp([arith.mulf(first, second)])
    _run(module)
    assert not walk_ops(module.operation, "heron_gpu.pure_call")
    assert _function_names(module) == ["main"]
    assert len(walk_ops(module.operation, "arith.addf")) == SMALL_FUNCTION_OPS + 5


def test_a_callee_that_calls_what_its_caller_calls_is_inlined(ctx):
    """XLA's rule: a big function called more than once is inlined where its caller's
    block calls a function it calls too (a threefry hash's rounds each read the two
    before them); the equal calls that brings together are then one."""
    f32 = ir.F32Type.get()
    module = ir.Module.create()
    with ir.InsertionPoint(module.body):
        main = func.FuncOp("main", ir.FunctionType.get([f32, f32], [f32]))
        a = _private("a", [f32, f32], [f32])
        g = _private("g", [f32, f32], [f32])
    with ir.InsertionPoint(g.add_entry_block()):
        func.ReturnOp([_big_body(list(g.arguments), SMALL_FUNCTION_OPS + 5)])
    with ir.InsertionPoint(a.add_entry_block()):
        x, y = a.arguments
        shared = pure_call_op(g, [x, y], [f32]).results[0]
        func.ReturnOp([_big_body([shared, y], SMALL_FUNCTION_OPS + 5)])
    with ir.InsertionPoint(main.add_entry_block()):
        x, y = main.arguments
        direct = pure_call_op(g, [x, y], [f32]).results[0]
        at_x = pure_call_op(a, [x, y], [f32]).results[0]
        at_y = pure_call_op(a, [y, y], [f32]).results[0]
        func.ReturnOp([arith.mulf(direct, arith.mulf(at_x, at_y))])
    _run(module)
    assert _function_names(module) == ["main", "g"]
    calls = walk_ops(module.operation, "heron_gpu.pure_call")
    # g at (x, y) once (main's own call and a's, merged) and at (y, y) once
    assert len(calls) == 2
    assert {tuple(c.operands)[0].get_name() for c in calls} == {"%arg0", "%arg1"}


def _fibonacci_chain(levels: int, same_operands: bool) -> ir.Module:
    """f0 a big body; f_k(x, y) calls f_{k-1} and f_{k-2} (a threefry hash's rounds,
    each reading the two before it), at the caller's own operands or at operands of
    their own (``same_operands`` False: a blackjax NUTS kernel's functions)."""
    f32 = ir.F32Type.get()
    module = ir.Module.create()
    with ir.InsertionPoint(module.body):
        main = func.FuncOp("main", ir.FunctionType.get([f32, f32], [f32]))
        chain = [_private(f"f{k}", [f32, f32], [f32]) for k in range(levels)]
    for k, function in enumerate(chain):
        with ir.InsertionPoint(function.add_entry_block()):
            x, y = function.arguments
            if k < 2:
                func.ReturnOp([_big_body([x, y], SMALL_FUNCTION_OPS + 5)])
                continue
            first = x if same_operands else arith.addf(x, y)
            second = x if same_operands else arith.mulf(x, y)
            a = pure_call_op(chain[k - 1], [first, y], [f32]).results[0]
            b = pure_call_op(chain[k - 2], [second, y], [f32]).results[0]
            func.ReturnOp([_big_body([arith.addf(a, b), y], SMALL_FUNCTION_OPS + 5)])
    with ir.InsertionPoint(main.add_entry_block()):
        x, y = main.arguments
        top = pure_call_op(chain[-1], [x, y], [f32]).results[0]
        again = pure_call_op(chain[-2], [y, x], [f32]).results[0]
        func.ReturnOp([arith.mulf(top, again)])
    return module


def test_the_shared_callee_rule_inlines_for_equal_calls_only_and_bounded(ctx, monkeypatch):
    """A shared callee is inlined where it brings a call equal to one its caller's block
    makes (the same callee at the same values), which the merge then makes one: calls
    that differ in their operands never merge, and inlining for them made a blackjax
    NUTS kernel's functions double level after level (its compile did not end). Where
    they are equal, each function grows by about its largest shared callee."""
    from heron.emitters.pipeline import inline as impl

    def sizes(module: ir.Module) -> list[int]:
        return [len(walk_ops(f)) - 2 for f in module.body.operations]

    own = SMALL_FUNCTION_OPS + 12  # a level's own ops and calls, and a little more
    differing = _fibonacci_chain(20, same_operands=False)
    _run(differing)
    assert max(sizes(differing)) <= 2 * own  # nothing inlined by the shared rule
    equal = _fibonacci_chain(20, same_operands=True)
    _run(equal)
    assert 2 * own < max(sizes(equal)) <= 20 * own  # inlined, linear in the levels
    monkeypatch.setattr(impl, "SHARED_GROWTH_OPS", 10**9)
    unbounded = _fibonacci_chain(20, same_operands=True)
    _run(unbounded)
    assert max(sizes(unbounded)) > max(sizes(equal))  # the bound holds it back
