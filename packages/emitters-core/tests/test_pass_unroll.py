"""unroll-loops: small constant-trip loops disappear, iter_args threaded, big ones stay."""

from __future__ import annotations

import pytest
from heron_test_support import vector_pipeline_inputs as _inputs
from mlir import ir

from heron.emitters import ir_utils
from heron.emitters.dialect import make_context, verify_xla_ops
from heron.emitters.pipeline import PipelineOptions, unroll, vectorize


def _names(module: ir.Module, name: str) -> list[ir.Operation]:
    return ir_utils.walk_ops(module.operation, name)


def test_vectorized_gelu_loop_is_unrolled_into_four_copies():
    with make_context(), ir.Location.unknown():
        module = ir.Module.parse(_inputs.gelu_flat())
        vectorize.run(module, PipelineOptions())
        unroll.run(module, PipelineOptions())
        verify_xla_ops(module)
        assert not _names(module, "scf.for")
        assert len(_names(module, "math.tanh")) == 4
        extracts = [str(op) for op in _names(module, "vector.extract")]
        assert len(extracts) == 4
        for lane in range(4):  # canonicalize made every position static
            assert any(f"[{lane}] : bf16 from vector<4xbf16>" in e for e in extracts)
        assert len(_names(module, "vector.transfer_read")) == 1
        assert len(_names(module, "vector.transfer_write")) == 1


NEST = """
func.func @nest() -> index {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c2 = arith.constant 2 : index
  %c3 = arith.constant 3 : index
  %outer = scf.for %i = %c0 to %c2 step %c1 iter_args(%acc = %c0) -> (index) {
    %inner = scf.for %j = %c1 to %c3 step %c1 iter_args(%acc2 = %acc) -> (index) {
      %k = arith.muli %i, %c3 : index
      %l = arith.addi %k, %j : index
      %sq = arith.muli %l, %l : index
      %n = arith.addi %acc2, %sq : index
      scf.yield %n : index
    }
    scf.yield %inner : index
  }
  return %outer : index
}
"""


def test_nested_loops_unroll_and_fold_to_the_sum():
    with make_context(), ir.Location.unknown():
        module = ir.Module.parse(NEST)
        unroll.run(module, PipelineOptions())
        assert not _names(module, "scf.for")
        ret = _names(module, "func.return")[0]
        value = ret.operands[0]
        assert value.owner.name == "arith.constant"
        expected = sum((i * 3 + j) ** 2 for i in range(2) for j in range(1, 3))
        assert ir.IntegerAttr(value.owner.attributes["value"]).value == expected


def _loop(lower: int, upper: int, step: int, body_ops: int = 1) -> str:
    body = "\n".join(f"    %x{k} = arith.addi %acc, %i : index" for k in range(body_ops))
    return f"""
func.func @f(%arg: index) -> index {{
  %lo = arith.constant {lower} : index
  %hi = arith.constant {upper} : index
  %st = arith.constant {step} : index
  %r = scf.for %i = %lo to %hi step %st iter_args(%acc = %arg) -> (index) {{
{body}
    scf.yield %x0 : index
  }}
  return %r : index
}}
"""


@pytest.mark.parametrize(
    ("text", "unrolled", "copies"),
    [
        (_loop(0, 8, 1), True, 8),
        (_loop(0, 9, 1), False, 0),
        (_loop(3, 19, 2), True, 8),  # 3, 5, ..., 17
        (_loop(0, 10, 3), True, 4),  # 0, 3, 6, 9
        (_loop(0, 4, 1, body_ops=301), False, 0),
        (_loop(5, 5, 1), True, 0),
    ],
)
def test_trip_count_and_body_size_limits(text, unrolled, copies):
    with make_context(), ir.Location.unknown():
        module = ir.Module.parse(text)
        (loop,) = _names(module, "scf.for")
        assert (unroll.trip_count(loop) <= unroll.MAX_TRIP_COUNT) or not unrolled
        assert unroll.unroll_all(module.operation) == int(unrolled)
        module.operation.verify()
        assert bool(_names(module, "scf.for")) != unrolled
        if unrolled:
            assert len(_names(module, "arith.addi")) == copies


def test_dynamic_bounds_are_left_alone():
    text = _loop(0, 4, 1).replace(
        "%hi = arith.constant 4 : index", "%hi = arith.addi %arg, %arg : index"
    )
    with make_context(), ir.Location.unknown():
        module = ir.Module.parse(text)
        before = str(module)
        unroll.run(module, PipelineOptions())
        assert str(module) == before


def test_a_loop_marked_keep_rolled_stays_a_loop():
    """An emitter's phase loop (a sort's tiles, a network's steps) is marked
    ``heron.keep_rolled``: copies of a phase only grow the kernel. The inner loop of
    the same nest, unmarked, is still unrolled."""
    marked = NEST.replace(
        "    scf.yield %inner : index\n  }\n",
        "    scf.yield %inner : index\n  } {heron.keep_rolled}\n",
    )
    assert marked != NEST
    with make_context(), ir.Location.unknown():
        module = ir.Module.parse(marked)
        unroll.run(module, PipelineOptions())
        loops = _names(module, "scf.for")
        assert len(loops) == 1 and unroll.KEEP_ROLLED in loops[0].attributes
