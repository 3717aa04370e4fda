"""lower-loops-to-scf: the scf structure, the in-domain checks, and which points run the body.

Semantics are checked with a small Python interpreter of the scf/arith/tensor
ops the pass produces: a loop whose body inserts 1 into a tensor at its map's
results must leave exactly the in-domain points set (heron.indexing's
``IndexingMap.domain_points`` is the reference).
"""

from __future__ import annotations

import random

import numpy as np
import pytest
from heron_test_support.seed_modules import GELU_MAP, gelu_emitted_module
from mlir import ir
from mlir.dialects import arith, func, gpu, scf, tensor

from heron.emitters.dialect import (
    loop_op,
    op_indexing_map,
    verify_xla_ops,
)
from heron.emitters.ir_utils import walk_ops
from heron.emitters.pipeline import PipelineOptions
from heron.emitters.pipeline import inline as inline_pass
from heron.emitters.pipeline.lower_loops import PASS
from heron.indexing import parse_indexing_map


def _run(module: ir.Module) -> None:
    PASS.run(module, PipelineOptions())
    module.operation.verify()
    verify_xla_ops(module)
    assert not walk_ops(module.operation, "heron_gpu.loop")


def _constant(value: ir.Value) -> int:
    return ir.IntegerAttr(value.owner.attributes["value"]).value


def test_gelu_structure(ctx):
    module = gelu_emitted_module()
    inline_pass.PASS.run(module, PipelineOptions())
    _run(module)
    (for_op,) = walk_ops(module.operation, "scf.for")
    lower, upper, step, init = for_op.operands
    assert (_constant(lower), _constant(upper), _constant(step)) == (0, 4, 1)
    main = module.body.operations[0]
    assert init == main.regions[0].blocks[0].arguments[1]  # iter_args = the output tensor
    # both ids carry upper_bound equal to the domain: no check, so no scf.if either
    assert not walk_ops(for_op, "scf.if")
    assert not walk_ops(for_op, "arith.cmpi")
    (apply,) = walk_ops(for_op, "heron_gpu.apply_indexing")
    assert apply.parent.operation == for_op
    assert op_indexing_map(apply) == parse_indexing_map(GELU_MAP)
    tid, bid = list(apply.operands)[:2]
    assert tid.owner.name == "gpu.thread_id" and bid.owner.name == "gpu.block_id"
    assert apply.operands[2] == for_op.regions[0].blocks[0].arguments[0]
    (extract,) = walk_ops(for_op, "tensor.extract")
    assert list(extract.operands)[1:] == list(apply.results)
    body_ops = [op.operation for op in for_op.regions[0].blocks[0].operations]
    assert body_ops[-1].name == "scf.yield" and body_ops[-2].name == "tensor.insert"
    assert body_ops[-1].operands[0] == body_ops[-2].results[0]
    assert main.regions[0].blocks[0].operations[-1].operands[0] == for_op.results[0]


# -- a tiny interpreter for the lowered IR ---------------------------------------------------


def _interpret_block(block: ir.Block, env: dict) -> list:
    for op in block.operations:
        op = op.operation
        name = op.name
        args = [env[v] for v in op.operands]
        if name in ("scf.yield", "func.return", "gpu.yield"):
            return args
        if name == "arith.constant":
            attr = op.attributes["value"]
            value = ir.BoolAttr(attr).value if str(attr) in ("true", "false") else None
            results = [value if value is not None else ir.IntegerAttr(attr).value]
        elif name == "arith.cmpi":
            predicate = ir.IntegerAttr(op.attributes["predicate"]).value
            a, b = args
            results = [{2: a < b, 3: a <= b, 4: a > b, 5: a >= b, 0: a == b, 1: a != b}[predicate]]
        elif name == "arith.subi":
            results = [args[0] - args[1]]
        elif name == "arith.andi":
            results = [args[0] and args[1]]
        elif name == "heron_gpu.apply_indexing":
            m = op_indexing_map(op)
            results = list(m.evaluate(args[: m.num_dims], args[m.num_dims :]))
        elif name == "tensor.insert":
            value, dest, *idx = args
            new = dest.copy()
            new[tuple(idx)] = value
            results = [new]
        elif name == "scf.for":
            lower, upper, step, *iters = args
            body = op.regions[0].blocks[0]
            for iv in range(lower, upper, step):
                local = dict(env)
                local.update(zip(body.arguments, [iv, *iters]))
                iters = _interpret_block(body, local)
            results = iters
        elif name == "scf.if":
            region = op.regions[0] if args[0] else op.regions[1]
            results = _interpret_block(region.blocks[0], dict(env))
        else:
            raise AssertionError(f"interpreter does not know {name}")
        env.update(zip(op.results, results))
    raise AssertionError("block without terminator")


def _random_map(rng: random.Random) -> str:
    dims = rng.randint(0, 2)
    ranges = rng.randint(0, 2)
    runtime = rng.randint(0, 1)
    names = [f"d{i}" for i in range(dims)] + [f"s{i}" for i in range(ranges)]
    names += [f"r{i}" for i in range(runtime)]
    bounds = []
    for _ in names:
        lo = rng.randint(-2, 2)
        bounds.append((lo, lo + rng.randint(0, 4)))
    variables = names or ["0"]

    def term() -> str:
        v = rng.choice(variables)
        return f"{v} * {rng.randint(-3, 3)}" if v != "0" else str(rng.randint(0, 5))

    constraints = []
    for _ in range(rng.randint(0, 2)):
        if not names:
            break
        v = rng.choice(names)
        expr = rng.choice([f"{v} mod {rng.randint(2, 3)}", f"{term()} + {term()}"])
        lo = rng.randint(-3, 1)
        constraints.append(f"{expr} in [{lo}, {lo + rng.randint(0, 4)}]")
    head = "(" + ", ".join(names[:dims]) + ")"
    if ranges:
        head += "[" + ", ".join(names[dims : dims + ranges]) + "]"
    if runtime:
        head += "{" + ", ".join(names[dims + ranges :]) + "}"
    domain = [f"{n} in [{lo}, {hi}]" for n, (lo, hi) in zip(names, bounds)]
    text = f"{head} -> ({', '.join(names) or '0'})"
    if domain or constraints:
        text += ", domain: " + ", ".join(domain + constraints)
    return text


def _lowered(map_text: str) -> tuple[ir.Block, list[int]]:
    """Lower a loop whose body sets out[point - lower bounds] = 1; the function's block."""
    m = parse_indexing_map(map_text)
    variables = [*m.dimensions, *m.symbols]
    shape = [v.bounds.size for v in variables] or [1]
    offsets = [v.bounds.lower for v in variables]
    index, i64 = ir.IndexType.get(), ir.IntegerType.get_signless(64)
    t = ir.RankedTensorType.get(shape, i64)
    n_args = m.num_dims + len(m.runtime_vars)
    module = ir.Module.create()
    with ir.InsertionPoint(module.body):
        f = func.FuncOp("f", ir.FunctionType.get([*([index] * n_args), t], [t]))
    with ir.InsertionPoint(f.add_entry_block()):
        *ids, out = f.arguments

        def body(symbols, results, iters):
            one = arith.constant(i64, 1)
            # results are exactly the variables (dims, range and runtime symbols)
            idx = [
                arith.subi(r, arith.constant(index, off)) for r, off in zip(results, offsets)
            ] or [arith.constant(index, 0)]
            return [tensor.insert(one, iters[0], idx)]

        loop = loop_op(m, ids[: m.num_dims], [out], body, runtime_symbols=ids[m.num_dims :])
        func.ReturnOp([loop.results[0]])
    verify_xla_ops(module)
    _run(module)
    _MODULES.append(module)  # keep it alive while its block is used
    return f.regions[0].blocks[0], shape


_MODULES: list[ir.Module] = []


def _visited(block: ir.Block, shape: list[int], dim_values: list[int]) -> np.ndarray:
    env = dict(zip(block.arguments, [*dim_values, np.zeros(shape, np.int64)]))
    return _interpret_block(block, env)[0]


def _reference(map_text: str, dim_values: list[int], runtime_values: list[int]) -> np.ndarray:
    m = parse_indexing_map(map_text)
    variables = [*m.dimensions, *m.symbols]
    shape = [v.bounds.size for v in variables] or [1]
    out = np.zeros(shape, np.int64)
    n_ranges = len(m.range_vars)
    for dims, symbols in m.domain_points():
        if list(dims) == dim_values[: m.num_dims] and list(symbols[n_ranges:]) == runtime_values:
            point = [v - var.bounds.lower for v, var in zip([*dims, *symbols], variables)]
            out[tuple(point) or (0,)] = 1
    return out


@pytest.mark.parametrize("seed", range(40))
def test_lowered_loop_visits_exactly_the_domain(ctx, seed):
    rng = random.Random(seed)
    map_text = _random_map(rng)
    m = parse_indexing_map(map_text)
    block, shape = _lowered(map_text)
    outer = [*m.dimensions, *m.runtime_vars]
    for _ in range(6):
        # dims and runtime values mostly in bounds, sometimes just outside (must skip)
        values = [
            rng.randint(v.bounds.lower, v.bounds.upper)
            if rng.random() < 0.8
            else rng.choice([v.bounds.lower - 1, v.bounds.upper + 1])
            for v in outer
        ]
        got = _visited(block, shape, values)
        expected = _reference(map_text, values[: m.num_dims], values[m.num_dims :])
        np.testing.assert_array_equal(got, expected, err_msg=f"{map_text} at {values}")


def test_loop_without_range_symbols_is_a_bare_if(ctx):
    block, shape = _lowered("(d0) -> (d0), domain: d0 in [2, 5], d0 mod 2 in [0, 0]")
    assert _visited(block, shape, [4]).tolist() == [0, 0, 1, 0]
    assert _visited(block, shape, [3]).tolist() == [0, 0, 0, 0]
    assert _visited(block, shape, [6]).tolist() == [0, 0, 0, 0]
    module = ir.Module.create()
    index = ir.IndexType.get()
    with ir.InsertionPoint(module.body):
        f = func.FuncOp("f", ir.FunctionType.get([index], []))
    with ir.InsertionPoint(f.add_entry_block()):
        loop_op("(d0) -> (d0 * 2), domain: d0 in [0, 7]", [f.arguments[0]], [], lambda s, r, i: [])
        func.ReturnOp([])
    _run(module)
    assert not walk_ops(module.operation, "scf.for")
    (if_op,) = walk_ops(module.operation, "scf.if")
    # an unbounded function argument needs both checks
    predicates = [
        ir.IntegerAttr(op.attributes["predicate"]).value for op in walk_ops(f, "arith.cmpi")
    ]
    assert sorted(predicates) == [3, 5]  # sle, sge
    assert not list(if_op.results)


def test_constraint_check_uses_apply_indexing_and_skips_proven_ones(ctx):
    module = ir.Module.create()
    with ir.InsertionPoint(module.body):
        f = func.FuncOp("f", ir.FunctionType.get([], []))
    with ir.InsertionPoint(f.add_entry_block()):
        tid = gpu.thread_id(gpu.Dimension.x, upper_bound=64)
        text = (
            "(th_x)[s0] -> (th_x + s0), domain: th_x in [0, 63], s0 in [0, 1], "
            "th_x + s0 * 64 in [0, 127], th_x + s0 in [0, 40]"
        )
        loop_op(text, [tid], [], lambda s, r, i: [])
        func.ReturnOp([])
    _run(module)
    applies = walk_ops(module.operation, "heron_gpu.apply_indexing")
    check = [
        a for a in applies if op_indexing_map(a).num_results == 1 and a.parent.name == "scf.for"
    ]
    (check_op,) = check
    assert str(op_indexing_map(check_op).results[0]) in ("d0 + s0",)
    # th_x + s0 * 64 is always within [0, 127]; th_x + s0 <= 40 needs only the upper check
    (cmp,) = walk_ops(f, "arith.cmpi")
    assert ir.IntegerAttr(cmp.attributes["predicate"]).value == 3


def test_known_empty_domain_passes_iter_args_through(ctx):
    f32 = ir.F32Type.get()
    t = ir.RankedTensorType.get([4], f32)
    module = ir.Module.create()
    with ir.InsertionPoint(module.body):
        f = func.FuncOp("f", ir.FunctionType.get([t], [t]))
    with ir.InsertionPoint(f.add_entry_block()):
        zero = arith.constant(ir.IndexType.get(), 0)
        loop = loop_op(
            "(d0) -> (d0), domain: d0 in [0, 3], d0 * 2 in [3, 3]",
            [zero],
            [f.arguments[0]],
            lambda s, r, i: [tensor.insert(arith.constant(f32, 1.0), i[0], r)],
        )
        func.ReturnOp([loop.results[0]])
    _run(module)
    ret = f.regions[0].blocks[0].operations[-1]
    assert ret.operands[0] == f.arguments[0]


def test_induction_variable_and_constant_dims_need_no_check(ctx):
    """A dim fed by an enclosing scf.for over [0, 4) or by a constant is known in bounds."""
    index = ir.IndexType.get()
    module = ir.Module.create()
    with ir.InsertionPoint(module.body):
        f = func.FuncOp("f", ir.FunctionType.get([], []))
    with ir.InsertionPoint(f.add_entry_block()):
        c0, c1, c4 = (arith.constant(index, v) for v in (0, 1, 4))
        for_op = scf.ForOp(c0, c4, c1)
        with ir.InsertionPoint(for_op.body):
            iv = for_op.induction_variable
            loop_op(
                "(d0, d1) -> (d0 + d1), domain: d0 in [0, 3], d1 in [0, 1]",
                [iv, c1],
                [],
                lambda s, r, i: [],
            )
            # d0 in [0, 2] does not hold for iv = 3: the upper check stays
            loop_op("(d0) -> (d0), domain: d0 in [0, 2]", [iv], [], lambda s, r, i: [])
            scf.YieldOp([])
        func.ReturnOp([])
    _run(module)
    # The first loop needs no check (no scf.if, no constant condition); the second does.
    (checked,) = walk_ops(module.operation, "scf.if")
    assert checked.operands[0].owner.name == "arith.cmpi"
    assert not [c for c in walk_ops(f, "arith.constant") if str(c.results[0].type) == "i1"]
    (cmp,) = walk_ops(f, "arith.cmpi")
    assert ir.IntegerAttr(cmp.attributes["predicate"]).value == 3  # sle only
    assert cmp.operands[0] == iv


def test_check_without_range_symbols_is_hoisted_above_the_nest(ctx):
    """A constraint on the ids only is checked once, before the scf.for, without the symbol.

    vectorize-loads-stores relies on it: the check must not take the vector loop's
    induction variable as an operand (vectorize_x4.hlo of the corpus).
    """
    index = ir.IndexType.get()
    module = ir.Module.create()
    with ir.InsertionPoint(module.body):
        f = func.FuncOp("f", ir.FunctionType.get([index], []))
    with ir.InsertionPoint(f.add_entry_block()):
        tid = gpu.thread_id(gpu.Dimension.x, upper_bound=128)
        bid = gpu.block_id(gpu.Dimension.x, upper_bound=469)
        text = (
            "(th_x, bl_x)[v]{r} -> (th_x * 4 + bl_x * 512 + v), "
            "domain: th_x in [0, 127], bl_x in [0, 468], v in [0, 3], r in [0, 9], "
            "th_x + bl_x * 128 + r in [0, 59999]"
        )
        loop_op(text, [tid, bid], [], lambda s, r, i: [], runtime_symbols=[f.arguments[0]])
        func.ReturnOp([])
    _run(module)
    (for_op,) = walk_ops(module.operation, "scf.for")
    (if_op,) = walk_ops(module.operation, "scf.if")
    assert if_op.parent.operation == for_op
    condition = if_op.operands[0]
    assert condition.owner.parent.name == "func.func"  # computed before the loop
    (check,) = [a for a in walk_ops(f, "heron_gpu.apply_indexing") if a.parent.name == "func.func"]
    check_map = op_indexing_map(check)
    assert check_map == parse_indexing_map(
        "(th_x, bl_x){r} -> (th_x + bl_x * 128 + r), "
        "domain: th_x in [0, 127], bl_x in [0, 468], r in [0, 9]"
    )
    assert list(check.operands) == [tid, bid, f.arguments[0]]
    # the in-loop map application still gets the induction variable
    (inner,) = walk_ops(if_op, "heron_gpu.apply_indexing")
    assert inner.operands[2] == for_op.regions[0].blocks[0].arguments[0]


def test_check_map_gets_only_the_symbols_it_uses(ctx):
    index = ir.IndexType.get()
    module = ir.Module.create()
    with ir.InsertionPoint(module.body):
        f = func.FuncOp("f", ir.FunctionType.get([index], []))
    with ir.InsertionPoint(f.add_entry_block()):
        tid = gpu.thread_id(gpu.Dimension.x, upper_bound=64)
        text = (
            "(th_x)[s0, s1]{r} -> (th_x + s0 + s1 + r), domain: th_x in [0, 63], "
            "s0 in [0, 1], s1 in [0, 2], r in [0, 5], th_x + s1 in [0, 40]"
        )
        loop_op(text, [tid], [], lambda s, r, i: [], runtime_symbols=[f.arguments[0]])
        func.ReturnOp([])
    _run(module)
    outer, inner = walk_ops(module.operation, "scf.for")
    check = [a for a in walk_ops(f, "heron_gpu.apply_indexing") if a.parent.name == "scf.for"]
    (check_op,) = check
    assert check_op.parent.operation == inner
    assert op_indexing_map(check_op) == parse_indexing_map(
        "(th_x)[s1] -> (th_x + s1), domain: th_x in [0, 63], s1 in [0, 2]"
    )
    assert list(check_op.operands) == [tid, inner.regions[0].blocks[0].arguments[0]]
