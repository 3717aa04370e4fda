"""lower-heron-gpu-to-scf: the heron_gpu ops that need no memory model, in scf, gpu and func.

XLA lowers its GPU dialect in two steps (``LowerXlaGpuToScf``, then
``LowerTensors``); so does heron. Before ``lower-tensors`` this pass rewrites,
still on tensors:

- ``predicated_insert(c, x, dest[i])`` -> ``scf.if c { tensor.insert x into dest[i] }
  else { dest }``;
- ``predicated_extract(c, fallback, src[i])`` -> ``scf.if c { tensor.extract src[i] }
  else { fallback }``: no load happens where ``c`` is false;
- ``shuffle_reduce(values, max_distance, reducer)`` -> for each distance from
  ``max_distance`` down to 1, a ``gpu.shuffle xor`` of every value and a call of the
  reducer on both: a warp's butterfly reduction. Values of other widths than 32
  bits are shuffled as 32-bit lanes (widened, or split in two for 64-bit ones,
  complex numbers part by part).

``lower-tensors`` then sees only tensor reads and writes, control flow and the ops
that need the memory model it chooses (shared memory, atomics, ldmatrix).
"""

from __future__ import annotations

from mlir import ir
from mlir.dialects import arith, func, gpu, scf, tensor

from heron.emitters import ir_utils
from heron.emitters.pipeline.manager import Pass, PipelineOptions
from heron.hlo.errors import UnsupportedError

__all__ = ["PASS", "lower_to_scf"]


def _unsupported(op: ir.Operation, why: str) -> UnsupportedError:
    return UnsupportedError(f"lower-heron-gpu-to-scf: '{op.name}' at {op.location}: {why}")


def _replace(op: ir.Operation, values: list[ir.Value]) -> None:
    for old, new in zip(op.results, values, strict=True):
        old.replace_all_uses_with(new)
    op.erase()


def _predicated_insert(op: ir.Operation, options: PipelineOptions) -> None:
    condition, value, dest, *indices = op.operands
    guarded = scf.IfOp(condition, [dest.type], has_else=True)
    with ir.InsertionPoint(guarded.then_block):
        scf.YieldOp([tensor.InsertOp(value, dest, indices).result])
    with ir.InsertionPoint(guarded.else_block):
        scf.YieldOp([dest])
    _replace(op, [guarded.results[0]])


def _predicated_extract(op: ir.Operation, options: PipelineOptions) -> None:
    condition, fallback, src, *indices = op.operands
    guarded = scf.IfOp(condition, [fallback.type], has_else=True)
    with ir.InsertionPoint(guarded.then_block):
        scf.YieldOp([tensor.ExtractOp(src, indices).result])
    with ir.InsertionPoint(guarded.else_block):
        scf.YieldOp([fallback])
    _replace(op, [guarded.results[0]])


def _shuffle_reduce(op: ir.Operation, options: PipelineOptions) -> None:
    distance = ir.IntegerAttr(op.attributes["max_distance"]).value
    reducer = ir.FlatSymbolRefAttr(op.attributes["reducer"]).value
    values = list(op.operands)
    i32 = ir.IntegerType.get_signless(32)
    width = arith.ConstantOp(i32, options.warp_size).result
    while distance >= 1:
        offset = arith.ConstantOp(i32, distance).result
        shuffled = [_shuffle(op, v, offset, width) for v in values]
        call = func.CallOp([v.type for v in values], reducer, [*values, *shuffled])
        values = list(call.results)
        distance //= 2
    _replace(op, values)


def _shuffle(op: ir.Operation, value: ir.Value, offset: ir.Value, width: ir.Value) -> ir.Value:
    """``gpu.shuffle xor`` of any scalar: split or widened to 32-bit lanes."""
    i32 = ir.IntegerType.get_signless(32)

    def lane(v: ir.Value) -> ir.Value:
        return gpu.ShuffleOp(v, offset, width, gpu.ShuffleMode.XOR).results[0]

    t = value.type
    if isinstance(t, ir.ComplexType):
        from mlir.dialects import complex as complex_dialect

        re = _shuffle(op, complex_dialect.ReOp(value).result, offset, width)
        im = _shuffle(op, complex_dialect.ImOp(value).result, offset, width)
        return complex_dialect.CreateOp(t, re, im).result
    if not isinstance(t, ir.IntegerType | ir.FloatType):
        raise _unsupported(op, f"cannot shuffle a value of type {t}")
    bits = ir_utils.bit_width(t)
    int_type = ir.IntegerType.get_signless(bits)
    as_int = value if isinstance(t, ir.IntegerType) else arith.bitcast(int_type, value)
    if bits == 32:
        result = lane(as_int)
    elif bits < 32:
        result = arith.trunci(int_type, lane(arith.extui(i32, as_int)))
    elif bits == 64:
        i64 = ir.IntegerType.get_signless(64)
        thirty_two = arith.ConstantOp(i64, 32).result
        low = lane(arith.trunci(i32, as_int))
        high = lane(arith.trunci(i32, arith.shrui(as_int, thirty_two)))
        result = arith.ori(arith.extui(i64, low), arith.shli(arith.extui(i64, high), thirty_two))
    else:
        raise _unsupported(op, f"cannot shuffle a value of type {t}")
    return result if isinstance(t, ir.IntegerType) else arith.bitcast(t, result)


_LOWERINGS = {
    "heron_gpu.predicated_insert": _predicated_insert,
    "heron_gpu.predicated_extract": _predicated_extract,
    "heron_gpu.shuffle_reduce": _shuffle_reduce,
}


def lower_to_scf(module: ir.Module, options: PipelineOptions | None = None) -> None:
    """Rewrite ``module``'s predicated accesses and warp reductions (in place)."""
    options = options or PipelineOptions()
    found = [op for op in ir_utils.walk_ops(module.operation) if op.name in _LOWERINGS]
    for op in found:
        with ir.InsertionPoint(op), op.location:
            _LOWERINGS[op.name](op, options)


def run(module: ir.Module, options: PipelineOptions) -> None:
    lower_to_scf(module, options)


PASS = Pass(
    name="lower-heron-gpu-to-scf",
    run=run,
    description="predicated accesses -> scf.if, shuffle_reduce -> gpu.shuffle and calls",
)
