"""Python builders for ``heron_gpu`` ops.

Each builder creates one op at the current insertion point and location (the
``with ir.InsertionPoint(...)``/``with ir.Location...`` style the upstream
bindings use) and returns the ``ir.Operation``, so emitter code reads like
the IR it produces::

    loop = loop_op(thread_map, [tid, bid], [output], lambda syms, idx, it: [
        tensor.insert(pure_call_op("fused", [inp, *idx], [f32]).result, it[0], idx)
    ])

Region bodies end in ``gpu.yield`` (see :mod:`.irdl_source` for why). The
builders check nothing beyond what they must to build the op; call
:func:`heron.emitters.dialect.verify_xla_ops` on the finished module.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from mlir import ir
from mlir.dialects import gpu

from heron.emitters.dialect.irdl_source import (
    CALLEE_ATTR,
    DIALECT_NAME,
    INDEXING_MAP_ATTR,
    MAX_CALL_OPERANDS,
    MAX_CALL_RESULTS,
    MAX_DISTANCE_ATTR,
    MAX_ITER_ARGS,
    MAX_REDUCE_VALUES,
    MAX_SYNC_TENSORS,
    NUM_TILES_ATTR,
    OPERAND_SEGMENTS_ATTR,
    REDUCER_ATTR,
    RESULT_SEGMENTS_ATTR,
)
from heron.hlo.errors import UnsupportedError
from heron.indexing import IndexingMap, parse_indexing_map
from heron.indexing.parser import format_indexing_map

Values = Sequence[ir.Value]
LoopBody = Callable[[list[ir.Value], list[ir.Value], list[ir.Value]], Values]


def _name(op: str) -> str:
    return f"{DIALECT_NAME}.{op}"


def map_attr(indexing_map: IndexingMap | str) -> ir.StringAttr:
    """The string attribute for a map; text is parsed first so bad maps fail here."""
    if isinstance(indexing_map, str):
        indexing_map = parse_indexing_map(indexing_map)
    return ir.StringAttr.get(format_indexing_map(indexing_map))


def _symbol(callee: str | ir.Operation | ir.OpView) -> ir.FlatSymbolRefAttr:
    if isinstance(callee, str):
        return ir.FlatSymbolRefAttr.get(callee)
    return ir.FlatSymbolRefAttr.get(ir.StringAttr(callee.attributes["sym_name"]).value)


def _slots(op: str, what: str, count: int, limit: int) -> list[int]:
    """Segment sizes for a mixed-type list stored in ``limit`` optional slots."""
    if count > limit:
        # A limit of the dialect, not a malformed call: the fusion cannot be emitted
        # (a fusion pass takes that as a "no"; a user gets the op and the limit).
        raise UnsupportedError(
            f"{_name(op)}: {count} {what} exceed the heron_gpu dialect's limit of {limit}"
            " (MAX_* in heron.emitters.dialect.irdl_source)"
        )
    return [1] * count + [0] * (limit - count)


def _create(
    op: str,
    results: Sequence[ir.Type] = (),
    operands: Values = (),
    attributes: dict[str, ir.Attribute] | None = None,
    regions: int = 0,
    operand_segments: list[int] | None = None,
    result_segments: list[int] | None = None,
) -> ir.Operation:
    attributes = dict(attributes or {})
    if operand_segments is not None:
        attributes[OPERAND_SEGMENTS_ATTR] = ir.DenseI32ArrayAttr.get(operand_segments)
    if result_segments is not None:
        attributes[RESULT_SEGMENTS_ATTR] = ir.DenseI32ArrayAttr.get(result_segments)
    return ir.Operation.create(
        _name(op),
        results=list(results),
        operands=list(operands),
        attributes=attributes,
        regions=regions,
    )


def yield_op(values: Values) -> ir.Operation:
    """The terminator of loop and atomic_rmw bodies (upstream ``gpu.yield``)."""
    return gpu.YieldOp(list(values)).operation


def apply_indexing_op(
    indexing_map: IndexingMap | str, dims: Values, symbols: Values = ()
) -> ir.Operation:
    """Evaluate the map's results at ``dims`` and ``symbols`` (range then runtime)."""
    attr = map_attr(indexing_map)
    n_results = parse_indexing_map(attr.value).num_results
    index = ir.IndexType.get()
    return _create(
        "apply_indexing",
        results=[index] * n_results,
        operands=[*dims, *symbols],
        attributes={INDEXING_MAP_ATTR: attr},
    )


def loop_op(
    indexing_map: IndexingMap | str,
    dims: Values,
    iter_args: Values,
    body_builder: LoopBody,
    runtime_symbols: Values = (),
) -> ir.Operation:
    """A loop over the map's range symbols with an in-domain check, threading ``iter_args``.

    ``body_builder(symbols, map_results, iter_args)`` builds the body at its
    insertion point and returns the values to yield (one per iter_arg).
    """
    attr = map_attr(indexing_map)
    parsed = parse_indexing_map(attr.value)
    init_types = [v.type for v in iter_args]
    dim_operands = [*dims, *runtime_symbols]
    op = _create(
        "loop",
        results=init_types,
        operands=[*dim_operands, *iter_args],
        attributes={INDEXING_MAP_ATTR: attr},
        regions=1,
        operand_segments=[
            len(dim_operands),
            *_slots("loop", "iter_args", len(iter_args), MAX_ITER_ARGS),
        ],
        result_segments=_slots("loop", "results", len(iter_args), MAX_ITER_ARGS),
    )
    n_ranges, n_results = len(parsed.range_vars), parsed.num_results
    index = ir.IndexType.get()
    block = op.regions[0].blocks.append(*([index] * (n_ranges + n_results)), *init_types)
    args = list(block.arguments)
    with ir.InsertionPoint(block):
        yielded = body_builder(
            args[:n_ranges], args[n_ranges : n_ranges + n_results], args[n_ranges + n_results :]
        )
        yield_op(yielded)
    return op


def pure_call_op(
    callee: str | ir.Operation | ir.OpView, operands: Values, result_types: Sequence[ir.Type]
) -> ir.Operation:
    """A call to a side-effect-free function (a subgraph of the partitioned fusion)."""
    return _create(
        "pure_call",
        results=result_types,
        operands=operands,
        attributes={CALLEE_ATTR: _symbol(callee)},
        operand_segments=_slots("pure_call", "operands", len(operands), MAX_CALL_OPERANDS),
        result_segments=_slots("pure_call", "results", len(result_types), MAX_CALL_RESULTS),
    )


def allocate_shared_op(tensor_type: ir.RankedTensorType) -> ir.Operation:
    """A block-wide shared-memory buffer, seen as a tensor."""
    return _create("allocate_shared", results=[tensor_type])


def sync_threads_op(tensors: Values) -> ir.Operation:
    """A block barrier; its results are the tensors as every thread sees them after it."""
    segments = _slots("sync_threads", "tensors", len(tensors), MAX_SYNC_TENSORS)
    return _create(
        "sync_threads",
        results=[t.type for t in tensors],
        operands=tensors,
        operand_segments=segments,
        result_segments=segments,
    )


def sync_threads(tensors: Values) -> list[ir.Value]:
    """The tensors as every thread of the block sees them after a barrier, any number of
    them: one ``sync_threads`` op per :data:`MAX_SYNC_TENSORS` (the dialect's slots).
    Every write before the first barrier is seen after the last, so the barriers after the
    first cost a few cycles and change nothing else (a fusion of seventeen row
    reductions, jaxtronomy's lens gradients, syncs seventeen tiles)."""
    tensors = list(tensors)
    synced: list[ir.Value] = []
    for start in range(0, len(tensors), MAX_SYNC_TENSORS):
        synced.extend(sync_threads_op(tensors[start : start + MAX_SYNC_TENSORS]).results)
    return synced


def predicated_insert_op(
    condition: ir.Value, value: ir.Value, dest: ir.Value, indices: Values
) -> ir.Operation:
    """``dest`` with ``value`` stored at ``indices`` when ``condition`` holds, else ``dest``."""
    return _create(
        "predicated_insert", results=[dest.type], operands=[condition, value, dest, *indices]
    )


def predicated_extract_op(
    condition: ir.Value, fallback: ir.Value, src: ir.Value, indices: Values
) -> ir.Operation:
    """``src[indices]`` when ``condition`` holds, else ``fallback`` (no load happens)."""
    return _create(
        "predicated_extract",
        results=[fallback.type],
        operands=[condition, fallback, src, *indices],
    )


def atomic_rmw_op(
    tensor: ir.Value,
    indices: Values,
    body_builder: Callable[[ir.Value], ir.Value],
    lanes: int = 1,
) -> ir.Operation:
    """Atomically replace ``tensor[indices]`` by ``body_builder(current value)``.

    With ``lanes`` > 1 the op updates that many consecutive elements of a 1-D tensor
    from ``indices`` on as one vector (the body takes and yields ``vector<lanes>``).
    """
    op = _create("atomic_rmw", results=[tensor.type], operands=[tensor, *indices], regions=1)
    element = ir.RankedTensorType(tensor.type).element_type
    if lanes > 1:
        element = ir.VectorType.get([lanes], element)
    block = op.regions[0].blocks.append(element)
    with ir.InsertionPoint(block):
        yield_op([body_builder(block.arguments[0])])
    return op


def shuffle_reduce_op(
    operands: Values, max_distance: int, reducer: str | ir.Operation | ir.OpView
) -> ir.Operation:
    """Warp butterfly reduction of ``operands`` with ``reducer``, distances max_distance..1."""
    i64 = ir.IntegerType.get_signless(64)
    segments = _slots("shuffle_reduce", "values", len(operands), MAX_REDUCE_VALUES)
    return _create(
        "shuffle_reduce",
        results=[v.type for v in operands],
        operands=operands,
        attributes={
            MAX_DISTANCE_ATTR: ir.IntegerAttr.get(i64, max_distance),
            REDUCER_ATTR: _symbol(reducer),
        },
        operand_segments=segments,
        result_segments=segments,
    )


def ldmatrix_op(src: ir.Value, indices: Values, num_tiles: int) -> ir.Operation:
    """A warp's ``ldmatrix`` of ``num_tiles`` 8 x 8 matrices of 16-bit words from the
    shared tensor ``src``: the lane supplies the row that starts at ``src[indices]``
    and receives ``vector<num_tiles x (32 / element bits) x T>`` (PTX semantics;
    ``lower-tensors`` makes it an ``nvgpu.ldmatrix``)."""
    element = ir.RankedTensorType(src.type).element_type
    per_register = 32 // _bit_width(element)
    i64 = ir.IntegerType.get_signless(64)
    return _create(
        "ldmatrix",
        results=[ir.VectorType.get([num_tiles, per_register], element)],
        operands=[src, *indices],
        attributes={NUM_TILES_ATTR: ir.IntegerAttr.get(i64, num_tiles)},
    )


def _bit_width(element: ir.Type) -> int:
    if isinstance(element, ir.IntegerType):
        return ir.IntegerType(element).width
    return ir.FloatType(element).width
