"""Dots that share an operand become one dot (XLA's DotMerger).

Each module goes through the simplification pipeline and ``dot-merger`` (which the
GPU pipeline runs after it), checked against the reference evaluator (every output element
sums the same products, but the evaluator's f32 matmul, a BLAS call, may take them in
another order for a wider product: within a few f32 roundings), and its dots counted.
"""

from __future__ import annotations

import numpy as np
import pytest

from heron.hlo.evaluator import evaluate_module, flatten_literal, random_arguments
from heron.hlo.ir import Module
from heron.hlo.parser import parse_module
from heron.hlo.passes import run_pipeline, simplification_pipeline
from heron.hlo.passes.dot_merger import MAX_SIZE_TO_MERGE, merge_dots
from heron.hlo.printer import print_module
from heron.hlo.verifier import verify_module


def _simplified(module: Module, seed: int = 0) -> Module:
    """``module`` after the simplification pipeline, its results on random arguments the
    original's within f32 summation error."""
    original = parse_module(print_module(module))
    arguments = random_arguments(original, np.random.default_rng(seed))
    run_pipeline(module, simplification_pipeline())
    merge_dots(module)
    verify_module(module)
    before = flatten_literal(evaluate_module(original, arguments))
    after = flatten_literal(evaluate_module(module, arguments))
    for want, got in zip(before, after, strict=True):
        np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=1e-5, atol=1e-5)
    return module


def _dots(module: Module) -> list:
    return [i for c in module.computations for i in c.instructions if i.opcode == "dot"]


#: An LSTM cell's four gates: the input times four weights, the state times four others.
GATES = """
HloModule gates
ENTRY main {
  x = f32[4,8] parameter(0)
  h = f32[4,16] parameter(1)
  w0 = f32[8,16] parameter(2)
  w1 = f32[8,16] parameter(3)
  w2 = f32[8,16] parameter(4)
  w3 = f32[8,16] parameter(5)
  u0 = f32[16,16] parameter(6)
  u1 = f32[16,16] parameter(7)
  u2 = f32[16,16] parameter(8)
  u3 = f32[16,16] parameter(9)
  a0 = f32[4,16] dot(x, w0), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  a1 = f32[4,16] dot(x, w1), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  a2 = f32[4,16] dot(x, w2), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  a3 = f32[4,16] dot(x, w3), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  b0 = f32[4,16] dot(h, u0), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  b1 = f32[4,16] dot(h, u1), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  b2 = f32[4,16] dot(h, u2), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  b3 = f32[4,16] dot(h, u3), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  g0 = f32[4,16] add(a0, b0)
  g1 = f32[4,16] add(a1, b1)
  g2 = f32[4,16] add(a2, b2)
  g3 = f32[4,16] add(a3, b3)
  i = f32[4,16] logistic(g0)
  f = f32[4,16] logistic(g1)
  g = f32[4,16] tanh(g2)
  o = f32[4,16] logistic(g3)
  c = f32[4,16] multiply(i, g)
  ROOT r = (f32[4,16], f32[4,16], f32[4,16]) tuple(c, f, o)
}
"""


def test_an_lstm_cells_eight_gate_products_become_two_dots() -> None:
    module = _simplified(parse_module(GATES))
    dots = _dots(module)
    assert len(dots) == 2
    # each over one concatenation of the four weights along their free dimension
    widths = sorted(d.operands[1].array_shape.dims for d in dots)
    assert widths == [(8, 64), (16, 64)]
    assert all(d.operands[1].opcode == "concatenate" for d in dots)
    assert all(len(d.operands[1].operands) == 4 for d in dots)


def test_a_shared_right_operand_merges_along_the_left_free_dimension() -> None:
    module = _simplified(
        parse_module(
            """
HloModule rhs_shared
ENTRY main {
  a = f32[3,8] parameter(0)
  b = f32[5,8] parameter(1)
  w = f32[8,6] parameter(2)
  x = f32[3,6] dot(a, w), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  y = f32[5,6] dot(b, w), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  ROOT r = (f32[3,6], f32[5,6]) tuple(x, y)
}
"""
        )
    )
    (dot,) = _dots(module)
    assert dot.array_shape.dims == (8, 6)
    assert dot.operands[0].opcode == "concatenate"


PAIR = """
HloModule pairs
ENTRY main {
  x = f32[4,8] parameter(0)
  w = f32[8,6] parameter(1)
  v = f32[8,6] parameter(2)
  s = f32[4,8] parameter(3)
  z = f32[4,6] dot(x, w), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  y = f32[4,6] dot(x, v), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  ROOT r = (f32[4,6], f32[4,6]) tuple(y, z)
}
"""


@pytest.mark.parametrize(
    ("change", "merges"),
    [
        (("", ""), True),
        (("y = f32[4,6] dot(x, v)", "y = f32[4,6] dot(s, v)"), False),  # nothing shared
        (("ROOT r = (f32[4,6], f32[4,6]) tuple(y, z)", "ROOT r = f32[4,6] add(y, z)"), True),
        (  # another precision
            (
                "y = f32[4,6] dot(x, v), lhs_contracting_dims={1}, rhs_contracting_dims={0}",
                "y = f32[4,6] dot(x, v), lhs_contracting_dims={1}, rhs_contracting_dims={0},"
                " operand_precision={highest,highest}",
            ),
            False,
        ),
        (  # another type on the unshared side
            ("v = f32[8,6] parameter(2)", "v = f16[8,6] parameter(2)"),
            False,
        ),
        (  # ordered by a control edge
            (
                "ROOT r = (f32[4,6], f32[4,6]) tuple(y, z)",
                "ROOT r = (f32[4,6], f32[4,6]) tuple(y, z), control-predecessors={z}",
            ),
            False,
        ),
    ],
)
def test_dots_merge_only_where_they_may(change, merges) -> None:
    module = parse_module(PAIR.replace(*change) if change[0] else PAIR)
    assert merge_dots(module) == merges
    verify_module(module)
    assert len(_dots(module)) == (1 if merges else 2)


def test_a_dot_reading_the_other_is_not_merged_with_it() -> None:
    module = parse_module(
        """
HloModule chain
ENTRY main {
  x = f32[4,4] parameter(0)
  w = f32[4,4] parameter(1)
  a = f32[4,4] dot(x, w), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  ROOT b = f32[4,4] dot(x, a), lhs_contracting_dims={1}, rhs_contracting_dims={0}
}
"""
    )
    assert not merge_dots(module)


def test_a_dot_larger_than_the_threshold_is_not_merged() -> None:
    rows = MAX_SIZE_TO_MERGE // (4 * 8) + 1  # f32 rows of 8: one past the threshold
    text = f"""
HloModule large
ENTRY main {{
  x = f32[{rows},4] parameter(0)
  w = f32[4,8] parameter(1)
  v = f32[4,8] parameter(2)
  a = f32[{rows},8] dot(x, w), lhs_contracting_dims={{1}}, rhs_contracting_dims={{0}}
  b = f32[{rows},8] dot(x, v), lhs_contracting_dims={{1}}, rhs_contracting_dims={{0}}
  ROOT r = (f32[{rows},8], f32[{rows},8]) tuple(a, b)
}}
"""
    assert not merge_dots(parse_module(text))


_BATCHED = (
    "lhs_batch_dims={0}, lhs_contracting_dims={2}, rhs_batch_dims={0}, rhs_contracting_dims={1}"
)


def test_batched_dots_merge_along_the_unshared_free_dimension() -> None:
    module = _simplified(
        parse_module(
            """
HloModule batched
ENTRY main {
  x = f32[2,4,8] parameter(0)
  w = f32[2,8,6] parameter(1)
  v = f32[2,8,3] parameter(2)
  a = f32[2,4,6] dot(x, w), BATCHED
  b = f32[2,4,3] dot(x, v), BATCHED
  ROOT r = (f32[2,4,6], f32[2,4,3]) tuple(a, b)
}
""".replace("BATCHED", _BATCHED)
        )
    )
    (dot,) = _dots(module)
    assert dot.array_shape.dims == (2, 4, 9)
