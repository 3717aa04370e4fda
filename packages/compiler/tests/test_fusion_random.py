"""The fusion passes on random unfused modules: same results, no cycles, emittable fusions.

Each module is a random JAX-style graph over one square shape: elementwise
ops, broadcasts of rows and columns, reductions along either dimension (then
broadcast back), transposes, and several outputs, so that producers have
several users, reductions have epilogues and siblings share operands.
"""

from __future__ import annotations

import copy
import random

import numpy as np
import pytest

from heron.compiler import Target, compile_fusion
from heron.compiler.fusion import count_kernels, fusion_pipeline
from heron.compiler.program_run import run_program
from heron.hlo.evaluator import evaluate_module, flatten_literal, random_arguments
from heron.hlo.ir import Module
from heron.hlo.parser import parse_module
from heron.hlo.passes import Pipeline, run_pipeline, simplification_pipeline

H100 = Target.preset("h100")

UNARY = ("negate", "exponential", "tanh", "abs", "sine")
BINARY = ("add", "multiply", "subtract", "maximum")


def random_module(seed: int) -> str:
    rng = random.Random(seed)
    n = rng.choice((8, 16, 32))
    square = f"f32[{n},{n}]{{1,0}}"
    vector = f"f32[{n}]{{0}}"
    lines = [
        f"  p0 = {square} parameter(0)",
        f"  p1 = {square} parameter(1)",
        f"  v0 = {vector} parameter(2)",
        "  zero = f32[] constant(0)",
    ]
    squares, vectors = ["p0", "p1"], ["v0"]
    for k in range(rng.randint(4, 12)):
        name = f"i{k}"
        choice = rng.random()
        if choice < 0.3:
            op = rng.choice(UNARY)
            lines.append(f"  {name} = {square} {op}({rng.choice(squares)})")
            squares.append(name)
        elif choice < 0.6:
            op = rng.choice(BINARY)
            a, b = rng.choice(squares), rng.choice(squares)
            lines.append(f"  {name} = {square} {op}({a}, {b})")
            squares.append(name)
        elif choice < 0.75:
            dim = rng.choice((0, 1))
            src = rng.choice(squares)
            lines.append(
                f"  {name} = {vector} reduce({src}, zero), dimensions={{{dim}}}, to_apply=add_f32"
            )
            vectors.append(name)
        elif choice < 0.9:
            dim = rng.choice((0, 1))
            lines.append(
                f"  {name} = {square} broadcast({rng.choice(vectors)}), dimensions={{{dim}}}"
            )
            squares.append(name)
        else:
            lines.append(
                f"  {name} = {square} transpose({rng.choice(squares)}), dimensions={{1,0}}"
            )
            squares.append(name)
    outputs = rng.sample(squares[2:] or squares, k=min(2, len(squares[2:]) or 1))
    if len(vectors) > 1:
        outputs.append(vectors[-1])
    shapes = ", ".join(square if o in squares else vector for o in outputs)
    lines.append(f"  ROOT out = ({shapes}) tuple({', '.join(outputs)})")
    body = "\n".join(lines)
    return f"""HloModule random_{seed}

add_f32 {{
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}}

ENTRY main {{
{body}
}}
"""


def _same(a: object, b: object) -> bool:
    if isinstance(a, tuple):
        return all(_same(x, y) for x, y in zip(a, b, strict=True))
    return np.asarray(a).tobytes() == np.asarray(b).tobytes()


def _fused(module: Module, arguments: list[np.ndarray]) -> Module:
    expected = evaluate_module(module, arguments)
    work = copy.deepcopy(module)
    run_pipeline(work, simplification_pipeline())
    for step in fusion_pipeline(H100).steps:
        run_pipeline(work, Pipeline("one", (step,)))  # verified: no cycle, valid HLO
        assert _same(evaluate_module(work, arguments), expected), step.name
    return work


@pytest.mark.parametrize("seed", range(40))
def test_random_modules_keep_their_results_bit_for_bit(seed: int) -> None:
    module = parse_module(random_module(seed))
    arguments = random_arguments(module, np.random.default_rng(seed))
    fused = _fused(module, arguments)
    kernels = count_kernels(fused)
    computing = sum(
        1 for i in module.entry.instructions if i.opcode not in ("parameter", "constant", "tuple")
    )
    assert kernels <= computing


@pytest.mark.parametrize("seed", range(12))
def test_every_fusion_made_compiles_and_runs_like_the_reference(seed: int) -> None:
    from heron.runtime.core.registry import load_backends

    module = parse_module(random_module(seed))
    arguments = random_arguments(module, np.random.default_rng(seed))
    fused = _fused(module, arguments)
    for inst in fused.entry.instructions:
        if inst.opcode == "fusion":
            compile_fusion(inst, H100, "interpreter")
    device = load_backends().create_device("interpreter")
    run = run_program(module, arguments, device, "interpreter", target=H100)
    assert run.kernel_launches == count_kernels(fused)
    expected = flatten_literal(evaluate_module(module, arguments))
    for actual, reference in zip(run.outputs, expected, strict=True):
        # Device reductions may reassociate: a tolerance, not bits.
        np.testing.assert_allclose(actual, reference, rtol=1e-4, atol=1e-4)
