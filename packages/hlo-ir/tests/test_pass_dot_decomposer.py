"""dot-decomposer: every dot in [batch, M, K] x [batch, K, N] form, the same bits out."""

from __future__ import annotations

import numpy as np
import pytest

from heron.hlo.evaluator import evaluate_module, random_arguments
from heron.hlo.parser import parse_module
from heron.hlo.passes import HloPass, run_pipeline, simplification_pipeline
from heron.hlo.passes.dot_decomposer import canonicalise_dots, is_canonical_dot
from heron.hlo.printer import print_module

CASES = {
    # name: (lhs dims, rhs dims, result dims, dimension attributes)
    "matmul": ("4,3", "3,5", "4,5", "lhs_contracting_dims={1}, rhs_contracting_dims={0}"),
    "transposed_lhs": ("3,4", "3,5", "4,5", "lhs_contracting_dims={0}, rhs_contracting_dims={0}"),
    "transposed_rhs": ("4,3", "5,3", "4,5", "lhs_contracting_dims={1}, rhs_contracting_dims={1}"),
    "batch_last": (
        "4,3,2",
        "3,5,2",
        "2,4,5",
        "lhs_batch_dims={2}, lhs_contracting_dims={1}, "
        "rhs_batch_dims={2}, rhs_contracting_dims={0}",
    ),
    "two_contracting": (
        "4,3,2",
        "2,3,5",
        "4,5",
        "lhs_contracting_dims={1,2}, rhs_contracting_dims={1,0}",
    ),
    "two_free": ("4,2,3", "3,5,6", "4,2,5,6", "lhs_contracting_dims={2}, rhs_contracting_dims={0}"),
    "matrix_vector": ("4,3", "3", "4", "lhs_contracting_dims={1}, rhs_contracting_dims={0}"),
    "vector_matrix_transposed": (
        "3",
        "5,3",
        "5",
        "lhs_contracting_dims={0}, rhs_contracting_dims={1}",
    ),
    "outer_product": ("4,1", "3", "4,1,3", ""),
    "attention_scores": (
        "2,6,4,8",
        "2,7,4,8",
        "2,4,6,7",
        "lhs_batch_dims={0,2}, lhs_contracting_dims={3}, "
        "rhs_batch_dims={0,2}, rhs_contracting_dims={3}",
    ),
}


def _module(case: str, element: str) -> str:
    lhs, rhs, result, dims = CASES[case]
    sep = ", " if dims else ""
    return (
        f"HloModule {case}\nENTRY main {{\n  a = {element}[{lhs}] parameter(0)\n"
        f"  b = {element}[{rhs}] parameter(1)\n"
        f"  ROOT d = {element}[{result}] dot(a, b){sep}{dims}\n}}\n"
    )


@pytest.mark.parametrize("case", sorted(CASES))
@pytest.mark.parametrize("element", ["f32", "s32", "bf16"])
def test_canonical_dots_compute_the_same_bits(case: str, element: str) -> None:
    text = _module(case, element)
    original, module = parse_module(text), parse_module(text)
    run_pipeline(module, HloPass("under-test", canonicalise_dots))
    dots = [i for i in module.entry.instructions if i.opcode == "dot"]
    assert len(dots) == 1 and is_canonical_dot(dots[0]), print_module(module)
    assert module.entry.root_instruction.shape == original.entry.root_instruction.shape
    for seed in range(3):
        arguments = random_arguments(original, np.random.default_rng(seed))
        expected = evaluate_module(original, arguments)
        assert (
            np.asarray(evaluate_module(module, arguments)).tobytes()
            == np.asarray(expected).tobytes()
        )


def test_a_canonical_dot_is_left_alone_and_the_pipeline_cleans_up() -> None:
    module = parse_module(_module("matmul", "f32"))
    assert not canonicalise_dots(module)
    module = parse_module(_module("transposed_lhs", "f32"))
    run_pipeline(module, simplification_pipeline())
    opcodes = sorted(i.opcode for i in module.entry.instructions)
    assert opcodes == ["dot", "parameter", "parameter", "transpose"], print_module(module)


def test_a_chain_of_dots_is_rewritten_with_one_look_at_the_computation(monkeypatch) -> None:
    # Each dot reads the one before, transposed: every rewrite replaces an operand of
    # the next. One inserter serves the whole computation (made per dot, it scanned the
    # computation each time: 16 s for the 3,000 dots of a GPT-2 training step).
    from heron.hlo.passes import dot_decomposer

    lines = ["HloModule chain", "", "ENTRY main {", "  d0 = f32[4,4]{1,0} parameter(0)"]
    for k in range(6):
        lines.append(
            f"  d{k + 1} = f32[4,4]{{1,0}} dot(d{k}, d{k}),"
            " lhs_contracting_dims={0}, rhs_contracting_dims={1}"
        )
    lines += ["  ROOT out = f32[4,4]{1,0} negate(d6)", "}"]
    module = parse_module("\n".join(lines))
    arguments = random_arguments(module, np.random.default_rng(0))
    expected = evaluate_module(module, arguments)
    made = []
    original = dot_decomposer.Inserter

    def counting(*args, **kwargs):
        made.append(args)
        return original(*args, **kwargs)

    monkeypatch.setattr(dot_decomposer, "Inserter", counting)
    assert canonicalise_dots(module)
    assert len(made) == 1
    dots = [i for i in module.entry.instructions if i.opcode == "dot"]
    assert len(dots) == 6 and all(is_canonical_dot(d) for d in dots)
    assert np.array_equal(evaluate_module(module, arguments), expected)
