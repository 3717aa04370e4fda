"""Hoisting what both arms of an ``scf.if`` compute equally (run by the inline pass)."""

from __future__ import annotations

import ctypes

import numpy as np
from heron_test_support.host_jit import jit
from mlir import ir
from mlir.dialects import arith, func, scf

from heron.emitters.dialect import pure_call_op, verify_xla_ops
from heron.emitters.ir_utils import walk_ops
from heron.emitters.pipeline import PipelineOptions
from heron.emitters.pipeline.inline import PASS, SMALL_FUNCTION_OPS

#: Big enough to stay a function when called more than once.
_BIG = SMALL_FUNCTION_OPS + 5


def _private(name: str, inputs, results) -> func.FuncOp:
    op = func.FuncOp(name, ir.FunctionType.get(inputs, results))
    op.sym_visibility = ir.StringAttr.get("private")
    return op


def _module(arms: str) -> ir.Module:
    """``main(x, y)``: ``if x < y`` with arms that call ``g`` (``_BIG`` ops) as ``arms``
    says: 'same' (both ``g(x * y, y)``, the product made in each arm), 'one' (the then
    arm only), 'differ' (``g(x, y)`` and ``g(y, x)``), 'nested' (the else arm an inner
    ``if`` whose two arms call ``g(x * y, y)`` too); ``g``'s result plus 1 or minus 1."""
    f32 = ir.F32Type.get()
    module = ir.Module.create()
    with ir.InsertionPoint(module.body):
        main = func.FuncOp("main", ir.FunctionType.get([f32, f32], [f32]))
        g = _private("g", [f32, f32], [f32])
    with ir.InsertionPoint(g.add_entry_block()):
        value, y = g.arguments
        for _ in range(_BIG // 2):
            value = arith.subf(arith.mulf(value, y), y)
        func.ReturnOp([value])
    main.attributes["llvm.emit_c_interface"] = ir.UnitAttr.get()
    with ir.InsertionPoint(main.add_entry_block()):
        x, y = main.arguments
        one = arith.constant(f32, 1.0)

        def call(a, b):
            return pure_call_op(g, [a, b], [f32]).results[0]

        def arm(sign, operands):
            a, b = operands
            product = arith.mulf(x, y) if a is None else a
            result = call(product, b)
            return arith.addf(result, one) if sign > 0 else arith.subf(result, one)

        condition = arith.cmpf(arith.CmpFPredicate.OLT, x, y)
        if_op = scf.IfOp(condition, [f32], has_else=True)
        with ir.InsertionPoint(if_op.then_block):
            if arms == "differ":
                scf.YieldOp([arm(+1, (x, y))])
            else:
                scf.YieldOp([arm(+1, (None, y))])
        with ir.InsertionPoint(if_op.else_block):
            if arms == "same":
                scf.YieldOp([arm(-1, (None, y))])
            elif arms == "one":
                scf.YieldOp([arith.subf(x, y)])
            elif arms == "differ":
                scf.YieldOp([arm(-1, (y, x))])
            else:  # nested
                inner_condition = arith.cmpf(arith.CmpFPredicate.OGT, x, one)
                inner = scf.IfOp(inner_condition, [f32], has_else=True)
                with ir.InsertionPoint(inner.then_block):
                    scf.YieldOp([arm(-1, (None, y))])
                with ir.InsertionPoint(inner.else_block):
                    scf.YieldOp([arith.mulf(arm(-1, (None, y)), y)])
                scf.YieldOp([inner.results[0]])
        func.ReturnOp([if_op.results[0]])
    return module


def _expected(arms: str, x: np.float32, y: np.float32) -> np.float32:
    def g(a, b):
        for _ in range(_BIG // 2):
            a = np.float32(np.float32(a * b) - b)
        return a

    if arms == "differ":
        return np.float32(g(x, y) + 1) if x < y else np.float32(g(y, x) - 1)
    shared = g(np.float32(x * y), y)
    if x < y:
        return np.float32(shared + 1)
    if arms == "same":
        return np.float32(shared - 1)
    if arms == "one":
        return np.float32(x - y)
    minus = np.float32(shared - 1)
    return minus if x > 1 else np.float32(minus * y)


def _inlined(arms: str) -> ir.Module:
    module = _module(arms)
    verify_xla_ops(module)
    PASS.run(module, PipelineOptions())
    module.operation.verify()
    verify_xla_ops(module)
    return module


def _assert_computes_the_same(module: ir.Module, arms: str) -> None:
    """Host-JIT ``module`` (lowered in place) and compare with numpy."""
    address = jit(module, "main")
    compiled = ctypes.CFUNCTYPE(ctypes.c_float, ctypes.c_float, ctypes.c_float)(address)
    rng = np.random.default_rng(0)
    for x, y in rng.uniform(-2, 2, size=(40, 2)).astype(np.float32):
        got = np.float32(compiled(float(x), float(y)))
        np.testing.assert_array_equal(got, _expected(arms, x, y))


def _calls(module: ir.Module) -> list[ir.Operation]:
    return walk_ops(module.operation, "heron_gpu.pure_call")


def _outside_every_if(op: ir.Operation) -> bool:
    parent = op.parent
    while parent is not None:
        if parent.name == "scf.if":
            return False
        parent = parent.parent
    return True


def test_a_call_both_arms_make_is_made_once_before_the_if(ctx):
    """Both arms call ``g`` at the same values (the operand, a product, made in each arm):
    the product and the call move before the ``scf.if`` and are one; ``g`` is then called
    once, so inlined. A threefry hash's two lanes share their rounds so, and numpyro's
    key-splitting kernel computed them twice (401 ALU instructions where 203 do)."""
    module = _inlined("same")
    assert not _calls(module)  # called once after the hoist: inlined
    (if_op,) = walk_ops(module.operation, "scf.if")
    products = [op for op in walk_ops(module.operation, "arith.mulf") if _outside_every_if(op)]
    assert len(products) == _BIG // 2 + 1  # g's body and the product, all outside
    assert not walk_ops(if_op, "arith.mulf")
    _assert_computes_the_same(module, "same")


def test_a_call_from_inner_arms_moves_out_through_both_ifs(ctx):
    module = _inlined("nested")
    assert not _calls(module)
    ifs = walk_ops(module.operation, "scf.if")
    assert len(ifs) == 2
    outer, inner = ifs
    # left in the arms: the + 1, the inner arms' - 1 (moved out of the inner if, not
    # further: the outer then-arm adds 1) and the inner else's * y
    inside = [op.name for op in walk_ops(outer) if op != outer]
    assert (inside.count("arith.addf"), inside.count("arith.subf")) == (1, 1)
    assert inside.count("arith.mulf") == 1
    assert not walk_ops(inner, "arith.subf")
    _assert_computes_the_same(module, "nested")


def test_what_a_hoist_erases_is_told_by_callee_not_by_op(ctx):
    """The product and the call an inner ``if`` hoists are erased in turn, as the twins of
    the outer ``if``'s equals: the hoist answers what it erased (the callee of each call,
    None for other ops), never the ops it moved, which may be gone by then (brax's
    generalized pipeline aborted the process reading a freed op's name)."""
    from heron.emitters.pipeline.hoist_common import hoist_common_ops

    module = _module("nested")
    verify_xla_ops(module)
    erased = hoist_common_ops(_calls(module))
    module.operation.verify()
    # inner if: its else arm's product, call and - 1; outer if: the product and the call
    # the inner one hoisted (the outer then-arm adds 1)
    assert sorted(erased, key=str) == [None, None, None, "g", "g"]
    assert len(_calls(module)) == 1 and _outside_every_if(_calls(module)[0])


def test_what_one_arm_computes_stays_in_it(ctx):
    """The condition guards a call made in one arm only (it may read out of bounds on
    the other path): it is not moved."""
    module = _inlined("one")
    assert not _calls(module)  # called once: inlined, in its arm
    (if_op,) = walk_ops(module.operation, "scf.if")
    assert len(walk_ops(if_op, "arith.mulf")) == _BIG // 2 + 1
    _assert_computes_the_same(module, "one")


def test_calls_at_different_values_stay_in_their_arms(ctx):
    """Both arms call ``g``, at different values: nothing is shared, nothing moves (and
    ``g``, big and called twice, stays a function)."""
    module = _inlined("differ")
    calls = _calls(module)
    assert len(calls) == 2
    assert not any(_outside_every_if(call) for call in calls)
