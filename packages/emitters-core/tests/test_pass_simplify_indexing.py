"""simplify-indexing: no apply_indexing left, and the arith it emits computes the maps exactly.

Semantics: random maps (negative ranges, floordiv/mod/ceildiv, symbols, chains
of apply_indexing) are lowered, JIT-compiled for the host and evaluated at
every point of their domain against ``IndexingMap.evaluate``.
"""

from __future__ import annotations

import ctypes
import random

import numpy as np
import pytest
from heron_test_support.host_jit import jit
from heron_test_support.seed_modules import gelu_emitted_module
from mlir import ir
from mlir.dialects import arith, func, memref

from heron.emitters.dialect import (
    apply_indexing_op,
    verify_xla_ops,
)
from heron.emitters.ir_utils import walk_ops
from heron.emitters.pipeline import PipelineOptions, flatten_tensors, inline, lower_loops
from heron.emitters.pipeline.simplify_indexing import PASS
from heron.indexing import IndexingMap, compose, parse_indexing_map


def _run(module: ir.Module) -> None:
    PASS.run(module, PipelineOptions())
    module.operation.verify()
    verify_xla_ops(module)
    assert not walk_ops(module.operation, "heron_gpu.apply_indexing")


def test_gelu_index_math(ctx):
    module = gelu_emitted_module()
    for step in (inline, lower_loops, flatten_tensors):
        step.PASS.run(module, PipelineOptions())
    _run(module)
    names = [op.name for op in walk_ops(module.operation)]
    # th_x * 4 + bl_x * 512 + vector_index: no division is left, and one index serves both
    assert not {"arith.divui", "arith.remui", "arith.divsi", "arith.remsi"} & set(names)
    assert names.count("arith.muli") == 2 and names.count("arith.addi") == 2
    (extract,) = walk_ops(module.operation, "tensor.extract")
    (insert,) = walk_ops(module.operation, "tensor.insert")
    assert list(extract.operands)[1] == list(insert.operands)[2]
    assert not walk_ops(module.operation, "scf.if")  # the always-true check folded away


# -- semantics through the host JIT --------------------------------------------------------


def _random_expr(rng: random.Random, variables: list[str], depth: int = 0) -> str:
    choice = rng.random()
    if depth > 2 or choice < 0.3:
        return rng.choice(variables + [str(rng.randint(-5, 5))])
    if choice < 0.55:
        a, b = _random_expr(rng, variables, depth + 1), _random_expr(rng, variables, depth + 1)
        return f"({a} + {b})"
    if choice < 0.7:
        return f"({_random_expr(rng, variables, depth + 1)} * {rng.randint(-4, 4)})"
    kind = rng.choice(["floordiv", "mod", "ceildiv"])
    return f"({_random_expr(rng, variables, depth + 1)} {kind} {rng.randint(1, 7)})"


def random_map(rng: random.Random) -> str:
    n_dims, n_ranges, n_runtime = rng.randint(1, 2), rng.randint(0, 1), rng.randint(0, 1)
    dims = [f"d{i}" for i in range(n_dims)]
    ranges = [f"s{i}" for i in range(n_ranges)]
    runtime = [f"r{i}" for i in range(n_runtime)]
    variables = dims + ranges + runtime
    results = [_random_expr(rng, variables) for _ in range(rng.randint(1, 3))]
    head = f"({', '.join(dims)})"
    if ranges:
        head += f"[{', '.join(ranges)}]"
    if runtime:
        head += f"{{{', '.join(runtime)}}}"
    domain = []
    for v in variables:
        lo = rng.randint(-9, 5) if rng.random() < 0.5 else 0
        domain.append(f"{v} in [{lo}, {lo + rng.randint(0, 7)}]")
    return f"{head} -> ({', '.join(results)}), domain: {', '.join(domain)}"


def build_function(m: IndexingMap, second: IndexingMap | None = None) -> ir.Module:
    """``@f(dims..., symbols..., out: memref<R x i64>)`` storing the map's results.

    With ``second``, the first map's results feed a second apply_indexing (a chain).
    """
    index, i64 = ir.IndexType.get(), ir.IntegerType.get_signless(64)
    module = ir.Module.create()
    out_type = ir.MemRefType.get([(second or m).num_results], i64)
    n_args = m.num_dims + m.num_symbols
    with ir.InsertionPoint(module.body):
        f = func.FuncOp("f", ir.FunctionType.get([index] * n_args + [out_type], []))
    with ir.InsertionPoint(f.add_entry_block()):
        *args, out = f.arguments
        values = list(apply_indexing_op(m, args[: m.num_dims], args[m.num_dims :]).results)
        if second is not None:
            values = list(apply_indexing_op(second, values).results)
        for i, value in enumerate(values):
            memref.store(arith.index_cast(i64, value), out, [arith.constant(index, i)])
        func.ReturnOp([])
    return module


def check_against_map(m: IndexingMap, second: IndexingMap | None, lowering) -> None:
    """Lower with ``lowering``, JIT, and compare every domain point with the (composed) map."""
    module = build_function(m, second)
    verify_xla_ops(module)
    lowering(module)
    module.operation.verify()
    assert not walk_ops(module.operation, "heron_gpu.apply_indexing")
    reference = compose(m, second) if second is not None else m
    n_args = m.num_dims + m.num_symbols
    fn = ctypes.CFUNCTYPE(None, *([ctypes.c_int64] * n_args), ctypes.c_void_p)(jit(module, "f"))
    out = np.zeros(reference.num_results, np.int64)
    for dims, symbols in m.domain_points():
        if second is not None and not reference.in_domain(dims, symbols):
            continue
        fn(*dims, *symbols, out.ctypes.data)
        expected = reference.evaluate(dims, symbols)
        assert tuple(out.tolist()) == expected, (m.format(), dims, symbols)


def _lower(module: ir.Module) -> None:
    PASS.run(module, PipelineOptions())


@pytest.mark.parametrize("seed", range(4))
def test_random_maps_evaluate_exactly(ctx, seed):
    rng = random.Random(seed)
    for _ in range(12):
        m = parse_indexing_map(random_map(rng))
        second = None
        if rng.random() < 0.4:
            names = [f"x{i}" for i in range(m.num_results)]
            second = parse_indexing_map(
                f"({', '.join(names)}) -> ({_random_expr(rng, names)}), domain: "
                + ", ".join(f"{x} in [-1000, 1000]" for x in names)
            )
        check_against_map(m, second, _lower)


def test_non_negative_divisions_use_unsigned_ops_and_share_work(ctx):
    m = parse_indexing_map(
        "(d0, d1) -> (d0 floordiv 6, (d0 floordiv 6) * 3 + d1 mod 5, d1 floordiv 6), "
        "domain: d0 in [0, 100], d1 in [-7, 20]"
    )
    module = build_function(m)
    _lower(module)
    names = [op.name for op in walk_ops(module.operation)]
    assert names.count("arith.divui") == 1  # d0 floordiv 6 emitted once
    # d1 may be negative: signed sequence (divsi/remsi + select), not divui/remui
    assert names.count("arith.divsi") == 1 and "arith.select" in names
    assert names.count("arith.remui") == 0
    check_against_map(m, None, _lower)
