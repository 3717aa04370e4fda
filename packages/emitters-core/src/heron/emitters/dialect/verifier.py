"""Checks on ``heron_gpu`` ops that IRDL cannot express.

IRDL checks operand/result kinds and attribute presence when MLIR verifies.
What needs the indexing map's text (counts of dimensions, symbols and
results), the block structure of regions, matching types between operands,
results and yields, or the symbol table (a ``pure_call``'s callee and its
signature) is checked here. :func:`verify_xla_ops` runs MLIR's verifier
first and then these rules, so a caller gets one entry point.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence

from mlir import ir

from heron.emitters.callbacks import collect_ops
from heron.emitters.dialect.irdl_source import (
    CALLEE_ATTR,
    DIALECT_NAME,
    INDEXING_MAP_ATTR,
    MAX_DISTANCE_ATTR,
    NUM_TILES_ATTR,
    OPERAND_SEGMENTS_ATTR,
    REDUCER_ATTR,
)
from heron.indexing import IndexingError, IndexingMap, parse_indexing_map

# Ops whose symbol table holds the functions that calls refer to.
_SYMBOL_TABLE_OPS = ("builtin.module", "gpu.module")

# Largest shuffle distance: half of a 64-lane AMD wavefront.
MAX_SHUFFLE_DISTANCE = 32


class DialectVerificationError(ValueError):
    """A ``heron_gpu`` op breaks a rule of the dialect; the message names the op and where."""


def _fail(op: ir.Operation, message: str) -> DialectVerificationError:
    return DialectVerificationError(f"'{op.name}' op at {op.location}: {message}")


def _types(values: Sequence[ir.Value]) -> list[ir.Type]:
    return [v.type for v in values]


def _fmt(types: Sequence[ir.Type]) -> str:
    return "(" + ", ".join(str(t) for t in types) + ")"


@functools.lru_cache(maxsize=4096)
def _parse_cached(text: str) -> IndexingMap:
    """Maps are immutable, and passes read the same map text many times over."""
    return parse_indexing_map(text)


def op_indexing_map(op: ir.Operation) -> IndexingMap:
    """Parse the op's ``indexing_map`` string attribute into an IndexingMap."""
    text = ir.StringAttr(op.attributes[INDEXING_MAP_ATTR]).value
    try:
        return _parse_cached(text)
    except IndexingError as exc:
        raise _fail(op, f"bad indexing map {text!r}: {exc}") from exc


def _segments(op: ir.Operation) -> list[int]:
    return list(ir.DenseI32ArrayAttr(op.attributes[OPERAND_SEGMENTS_ATTR]))


def _single_block_with_yield(op: ir.Operation) -> tuple[ir.Block, ir.Operation]:
    region = op.regions[0]
    blocks = list(region.blocks)
    if len(blocks) != 1:
        raise _fail(op, f"body must have exactly one block, has {len(blocks)}")
    block = blocks[0]
    ops = list(block.operations)
    terminator = ops[-1].operation if ops else None
    if terminator is None or terminator.name != "gpu.yield":
        raise _fail(op, "body must end with gpu.yield")
    return block, terminator


def _check_yield(op: ir.Operation, terminator: ir.Operation, expected: list[ir.Type]) -> None:
    yielded = _types(terminator.operands)
    if yielded != expected:
        raise _fail(op, f"body yields {_fmt(yielded)} but {_fmt(expected)} is expected")


def verify_loop(op: ir.Operation) -> None:
    """dims = map dims + runtime symbols; block args = range symbols, map results, iter_args."""
    indexing_map = op_indexing_map(op)
    n_dims, *init_slots = _segments(op)
    n_inits = sum(init_slots)
    expected_dims = indexing_map.num_dims + len(indexing_map.runtime_vars)
    if n_dims != expected_dims:
        raise _fail(
            op,
            f"has {n_dims} dim operand(s) but its map needs {indexing_map.num_dims} "
            f"dimension(s) + {len(indexing_map.runtime_vars)} runtime symbol(s)",
        )
    init_types = _types(list(op.operands)[n_dims:])
    result_types = _types(op.results)
    if init_types != result_types:
        raise _fail(op, f"iter_args {_fmt(init_types)} differ from results {_fmt(result_types)}")
    block, terminator = _single_block_with_yield(op)
    n_ranges, n_results = len(indexing_map.range_vars), indexing_map.num_results
    arg_types = _types(block.arguments)
    expected_args = n_ranges + n_results + n_inits
    if len(arg_types) != expected_args:
        raise _fail(
            op,
            f"body has {len(arg_types)} block argument(s) but needs {expected_args}: "
            f"{n_ranges} range symbol(s) + {n_results} map result(s) + {n_inits} iter_arg(s)",
        )
    index = ir.IndexType.get()
    if any(t != index for t in arg_types[: n_ranges + n_results]):
        raise _fail(op, "symbol and map-result block arguments must have type index")
    if arg_types[n_ranges + n_results :] != init_types:
        raise _fail(op, "iter_arg block arguments must have the iter_args' types")
    _check_yield(op, terminator, result_types)


def verify_apply_indexing(op: ir.Operation) -> None:
    """operands = map dims + all symbols; results = map results."""
    indexing_map = op_indexing_map(op)
    expected = indexing_map.num_dims + indexing_map.num_symbols
    if len(op.operands) != expected:
        raise _fail(
            op,
            f"has {len(op.operands)} operand(s) but its map has {indexing_map.num_dims} "
            f"dimension(s) + {indexing_map.num_symbols} symbol(s)",
        )
    if len(op.results) != indexing_map.num_results:
        raise _fail(
            op,
            f"has {len(op.results)} result(s) but its map has {indexing_map.num_results}",
        )


def _lookup_function(op: ir.Operation, attr_name: str) -> ir.FunctionType:
    """The function type of the ``func.func`` that ``attr_name`` refers to."""
    symbol = ir.FlatSymbolRefAttr(op.attributes[attr_name]).value
    table_op = op.parent
    while table_op is not None and table_op.name not in _SYMBOL_TABLE_OPS:
        table_op = table_op.parent
    if table_op is None:
        raise _fail(op, f"{attr_name} @{symbol}: no enclosing module to look it up in")
    try:
        callee = ir.SymbolTable(table_op)[symbol]
    except KeyError:
        raise _fail(op, f"{attr_name} @{symbol} does not exist") from None
    if callee.operation.name != "func.func":
        raise _fail(op, f"{attr_name} @{symbol} is a {callee.operation.name}, not a func.func")
    return ir.FunctionType(ir.TypeAttr(callee.attributes["function_type"]).value)


def verify_pure_call(op: ir.Operation) -> None:
    """The callee exists and its signature matches the operands and results."""
    fn_type = _lookup_function(op, CALLEE_ATTR)
    operands, results = _types(op.operands), _types(op.results)
    if list(fn_type.inputs) != operands or list(fn_type.results) != results:
        raise _fail(
            op,
            f"call {_fmt(operands)} -> {_fmt(results)} does not match the callee's type {fn_type}",
        )


def verify_sync_threads(op: ir.Operation) -> None:
    """Results are the synchronised tensors, one per operand, same types."""
    if _types(op.operands) != _types(op.results):
        raise _fail(op, "result types must equal operand types")


def _check_element_access(op: ir.Operation, tensor: ir.Value, indices: list[ir.Value]) -> ir.Type:
    tensor_type = ir.RankedTensorType(tensor.type)
    if len(indices) != tensor_type.rank:
        raise _fail(op, f"has {len(indices)} index(es) for a rank-{tensor_type.rank} tensor")
    return tensor_type.element_type


def verify_predicated_insert(op: ir.Operation) -> None:
    """Value is an element of dest; one index per dimension; result is dest's type."""
    _, value, dest, *indices = op.operands
    element = _check_element_access(op, dest, indices)
    if value.type != element:
        raise _fail(op, f"inserts a {value.type} into a tensor of {element}")
    if op.results[0].type != dest.type:
        raise _fail(op, "result type must equal the destination tensor's type")


def verify_predicated_extract(op: ir.Operation) -> None:
    """Fallback and result have the tensor's element type; one index per dimension."""
    _, fallback, src, *indices = op.operands
    element = _check_element_access(op, src, indices)
    if fallback.type != element or op.results[0].type != element:
        raise _fail(op, f"fallback and result must be {element}")


def verify_atomic_rmw(op: ir.Operation) -> None:
    """Body takes the current element (or a vector of consecutive ones) and yields the new
    one; result is the input's type.

    A vector body updates ``n`` elements of a 1-D tensor from the index on, ``n`` a power
    of two from 2 (XLA's vectorized ``atomic_rmw``): whether the device can do that in
    one instruction, and that the index is aligned, is for the pass that makes it.
    """
    tensor, *indices = op.operands
    element = _check_element_access(op, tensor, indices)
    if op.results[0].type != tensor.type:
        raise _fail(op, "result type must equal the input tensor's type")
    block, terminator = _single_block_with_yield(op)
    arguments = _types(block.arguments)
    if len(arguments) == 1 and isinstance(arguments[0], ir.VectorType):
        vector_type = ir.VectorType(arguments[0])
        lanes = vector_type.shape
        if vector_type.element_type != element or len(lanes) != 1 or len(indices) != 1:
            raise _fail(
                op, f"a vector body must take a 1-D vector of {element} and update a 1-D tensor"
            )
        if lanes[0] < 2 or lanes[0] & (lanes[0] - 1):
            raise _fail(op, f"a vector body's length must be a power of two from 2, not {lanes[0]}")
        _check_yield(op, terminator, [vector_type])
        return
    if arguments != [element]:
        raise _fail(op, f"body must take exactly one {element} (the current value)")
    _check_yield(op, terminator, [element])


def verify_shuffle_reduce(op: ir.Operation) -> None:
    """max_distance is a power of two; reducer maps (T..., T...) to (T...)."""
    distance = ir.IntegerAttr(op.attributes[MAX_DISTANCE_ATTR]).value
    if distance < 1 or distance > MAX_SHUFFLE_DISTANCE or distance & (distance - 1):
        raise _fail(
            op, f"max_distance {distance} must be a power of two in [1, {MAX_SHUFFLE_DISTANCE}]"
        )
    operands = _types(op.operands)
    if not operands:
        raise _fail(op, "needs at least one operand")
    if _types(op.results) != operands:
        raise _fail(op, "result types must equal operand types")
    fn_type = _lookup_function(op, REDUCER_ATTR)
    if list(fn_type.inputs) != operands * 2 or list(fn_type.results) != operands:
        raise _fail(
            op,
            f"reducer type {fn_type} must be {_fmt(operands * 2)} -> {_fmt(operands)}",
        )


#: Matrices an ``ldmatrix`` may load (PTX ``.x1``, ``.x2``, ``.x4``).
LDMATRIX_TILES = (1, 2, 4)


def verify_ldmatrix(op: ir.Operation) -> None:
    """One index per dimension; 8- or 16-bit elements; num_tiles 1, 2 or 4; the result is
    ``vector<num_tiles x (32 / bits) x T>`` (one 32-bit register a matrix)."""
    src, *indices = op.operands
    element = _check_element_access(op, src, indices)
    bits = element.width if isinstance(element, ir.IntegerType | ir.FloatType) else 0
    if bits not in (8, 16):
        raise _fail(op, f"loads 8- or 16-bit elements, not {element}")
    tiles = ir.IntegerAttr(op.attributes[NUM_TILES_ATTR]).value
    if tiles not in LDMATRIX_TILES:
        raise _fail(op, f"num_tiles {tiles} must be one of {LDMATRIX_TILES}")
    expected = ir.VectorType.get([tiles, 32 // bits], element)
    if op.results[0].type != expected:
        raise _fail(op, f"result must be {expected}, not {op.results[0].type}")


def _no_extra_checks(op: ir.Operation) -> None:
    """allocate_shared: IRDL already checks everything (no operands, one tensor)."""


VERIFIERS: dict[str, Callable[[ir.Operation], None]] = {
    f"{DIALECT_NAME}.loop": verify_loop,
    f"{DIALECT_NAME}.apply_indexing": verify_apply_indexing,
    f"{DIALECT_NAME}.pure_call": verify_pure_call,
    f"{DIALECT_NAME}.allocate_shared": _no_extra_checks,
    f"{DIALECT_NAME}.sync_threads": verify_sync_threads,
    f"{DIALECT_NAME}.predicated_insert": verify_predicated_insert,
    f"{DIALECT_NAME}.predicated_extract": verify_predicated_extract,
    f"{DIALECT_NAME}.atomic_rmw": verify_atomic_rmw,
    f"{DIALECT_NAME}.shuffle_reduce": verify_shuffle_reduce,
    f"{DIALECT_NAME}.ldmatrix": verify_ldmatrix,
}


def verify_xla_ops(module: ir.Module | ir.Operation) -> None:
    """Run MLIR's verifier (IRDL rules), then the Python rules on every ``heron_gpu`` op.

    Raises ``mlir.ir.MLIRError`` for IRDL violations and
    :class:`DialectVerificationError` for the rules above.
    """
    root = module.operation
    root.verify()
    # Only the heron_gpu ops reach Python: the walk tests each op's name in its visitor.
    for op in collect_ops(root, _VERIFIED, label="verify_xla_ops"):
        VERIFIERS[op.name](op)


#: The ops :data:`VERIFIERS` has rules for.
_VERIFIED = frozenset(VERIFIERS)
