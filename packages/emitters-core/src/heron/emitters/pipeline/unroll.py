"""unroll-loops: fully unroll small ``scf.for`` loops with constant bounds.

After vectorization the loop over a thread's V elements only extracts from
and inserts into vectors; unrolled, every position is a constant, so the
vector ops become plain register moves and the loop overhead (and the
dynamic ``extractelement``) disappears, as in XLA's ``optimize_loops.cc``.
Loops are unrolled innermost first, so a small nest unrolls completely. A
loop is unrolled when its trip count is at most :data:`MAX_TRIP_COUNT` and its
body (all nested ops) has at most :data:`MAX_BODY_OPS` ops, which bounds code
growth. Upstream ``canonicalize`` then folds the per-iteration constants.
"""

from __future__ import annotations

from mlir import ir
from mlir.dialects import arith

from heron.emitters import ir_utils
from heron.emitters.callbacks import walk
from heron.emitters.pipeline.manager import Pass, PipelineOptions, run_upstream

#: A loop an emitter marks with this unit attribute stays a loop: a phase of a kernel
#: (a sort's tiles, a network's steps, each followed by a barrier), not the loop over a
#: thread's vector elements this pass is for (copies of a phase only grow the kernel).
KEEP_ROLLED = "heron.keep_rolled"
MAX_TRIP_COUNT = 8
MAX_BODY_OPS = 300


def _constant_index(value: ir.Value) -> int | None:
    if not isinstance(value, ir.OpResult) or value.owner.operation.name != "arith.constant":
        return None
    attr = value.owner.operation.attributes["value"]
    return ir.IntegerAttr(attr).value if isinstance(attr, ir.IntegerAttr) else None


def trip_count(loop: ir.Operation) -> int | None:
    """The number of iterations of an ``scf.for`` with constant bounds, else None."""
    lower, upper, step = (_constant_index(v) for v in list(loop.operands)[:3])
    if lower is None or upper is None or step is None or step <= 0:
        return None
    return max(0, -(-(upper - lower) // step))


def body_size(loop: ir.Operation) -> int:
    """Ops nested in the loop's body (the loop itself not counted)."""
    return len(ir_utils.walk_ops(loop)) - 1


def unroll(loop: ir.Operation) -> None:
    """Replace ``loop`` by one copy of its body per iteration, threading the iter_args."""
    operands = list(loop.operands)
    lower, step = _constant_index(operands[0]), _constant_index(operands[2])
    count = trip_count(loop)
    assert lower is not None and step is not None and count is not None
    body = loop.regions[0].blocks[0]
    carried = operands[3:]
    iv_type = body.arguments[0].type
    with ir.InsertionPoint(loop):
        for i in range(count):
            iv = _constant(iv_type, lower + i * step)
            mapping: dict[ir.Value, ir.Value] = {body.arguments[0]: iv}
            for arg, value in zip(list(body.arguments)[1:], carried, strict=True):
                mapping[arg] = value
            terminator = ir_utils.clone_block_into(body, mapping)
            assert terminator is not None
            carried = ir_utils.mapped(list(terminator.operands), mapping)
    for result, value in zip(loop.results, carried, strict=True):
        result.replace_all_uses_with(value)
    loop.erase()


def _constant(value_type: ir.Type, value: int) -> ir.Value:
    return arith.ConstantOp(value_type, value).result


def unroll_all(root: ir.Operation) -> int:
    """Unroll every eligible loop under ``root``, innermost first; how many were unrolled."""
    unrolled = 0
    # Post-order: an inner loop is seen (and unrolled) before the loop holding it, so
    # the outer loop's body size is measured after its inner loops grew.
    loops: list[ir.Operation] = []

    def visit(op: ir.Operation) -> ir.WalkResult:
        if op.name == "scf.for":
            loops.append(op)
        return ir.WalkResult.ADVANCE

    walk(root, visit, ir.WalkOrder.POST_ORDER, name="unroll: find loops")
    for loop in loops:
        count = trip_count(loop)
        if count is None or count > MAX_TRIP_COUNT or KEEP_ROLLED in loop.attributes:
            continue
        if body_size(loop) > MAX_BODY_OPS:
            continue
        unroll(loop)
        unrolled += 1
    return unrolled


def run(module: ir.Module, options: PipelineOptions) -> None:
    """Unroll the small loops of every function, then fold what the copies made constant."""
    del options
    if unroll_all(module.operation):
        run_upstream(module, "builtin.module(canonicalize)")


PASS = Pass(
    name="unroll-loops",
    run=run,
    description="unroll scf.for loops with at most 8 iterations and a small body",
)
