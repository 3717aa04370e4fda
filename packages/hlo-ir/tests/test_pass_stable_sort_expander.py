"""stable-sort-expander: a stable sort gets an s32 iota operand, bit for bit the same results."""

from __future__ import annotations

import numpy as np
import pytest

from heron.hlo.evaluator import evaluate_module
from heron.hlo.parser import parse_module
from heron.hlo.passes import HloPass, run_pipeline
from heron.hlo.passes.stable_sort_expander import expand_stable_sorts

#: JAX's jnp.sort comparator: NaN and -0.0 made canonical, so -0.0 and 0.0 tie and
#: only stability decides their order.
SORT = """
HloModule sort
cmp {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  zero = f32[] constant(0)
  a_zero = pred[] compare(a, zero), direction=EQ
  a0 = f32[] select(a_zero, zero, a)
  b_zero = pred[] compare(b, zero), direction=EQ
  b0 = f32[] select(b_zero, zero, b)
  ROOT lt = pred[] compare(a0, b0), direction=LT, type=TOTALORDER
}
ENTRY main {
  x = f32[3,50] parameter(0)
  ROOT s = f32[3,50] sort(x), dimensions={DIM}STABLE, to_apply=cmp
}
"""


def _module(dim: int, stable: bool):
    text = SORT.replace("DIM", str(dim)).replace("STABLE", ", is_stable=true" if stable else "")
    return parse_module(text)


@pytest.mark.parametrize("dim", [0, 1])
def test_a_stable_sort_gets_an_iota_and_keeps_every_bit(dim):
    original, module = _module(dim, True), _module(dim, True)
    run_pipeline(module, HloPass("under-test", expand_stable_sorts))
    (sort,) = [i for i in module.entry.instructions if i.opcode == "sort"]
    assert [op.opcode for op in sort.operands] == ["parameter", "iota"]
    assert sort.operands[1].attr("iota_dimension") == dim
    assert sort.attributes["is_stable"] is True
    assert len(sort.called("to_apply").parameters) == 4
    rng = np.random.default_rng(dim)
    for _ in range(5):
        x = rng.choice(np.array([0.0, -0.0, 1.0, np.nan, -1.0], np.float32), (3, 50))
        expected = np.asarray(evaluate_module(original, [x.astype(np.float32)]))
        actual = np.asarray(evaluate_module(module, [x.astype(np.float32)]))
        assert expected.tobytes() == actual.tobytes()


def test_unstable_sorts_and_sorts_with_an_iota_are_left_alone():
    unstable = _module(1, False)
    assert not expand_stable_sorts(unstable)
    argsort = parse_module(
        """
HloModule argsort
cmp {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  i = s32[] parameter(2)
  j = s32[] parameter(3)
  ROOT lt = pred[] compare(a, b), direction=LT
}
ENTRY main {
  x = f32[3,50] parameter(0)
  i = s32[50] iota(), iota_dimension=0
  b = s32[3,50] broadcast(i), dimensions={1}
  ROOT s = (f32[3,50], s32[3,50]) sort(x, b), dimensions={1}, is_stable=true, to_apply=cmp
}
"""
    )
    assert not expand_stable_sorts(argsort)
