"""Adjacent extracts in one block -> one vector read (part of vectorize-loads-stores).

Emitters that give a thread several neighbouring elements without a vector
loop — the column reduction keeps one accumulator per column and reads its V
columns as V separate extracts at ``base``, ``base + 1``, ... — issue V scalar
loads where XLA issues one ``vector<V x T>`` load (the corpus files'
``CHECK: vector<2xf32>``). This rewrite finds such groups straight in one
block: extracts from a function argument whose indices are ``apply_indexing``
ops over the same operands and the same expression but for a constant
``o .. o + V - 1``. It is safe when

- all V extracts are in the same block (so whenever one runs, all run: the
  vector is in bounds because every element of it is read anyway);
- ``base = expression + o`` is a multiple of V on the map's whole domain (the
  read is aligned to V elements, V x element size <= 16 bytes);

then one ``vector.transfer_read`` at ``base`` replaces them, placed before the
first of them, each extract becoming a ``vector.extract`` of its position.
"""

from __future__ import annotations

from mlir import ir
from mlir.dialects import vector

from heron.emitters import ir_utils
from heron.emitters.dialect import op_indexing_map
from heron.emitters.pipeline.vector_access import erase_with_unused_index, transfer_read
from heron.indexing.affine import Constant
from heron.indexing.affine import mod as affine_mod
from heron.indexing.simplifier import linear_form, simplify_expr

#: Group sizes tried, widest first (16 only for 1-byte elements: ``_MAX_BYTES``).
_SIZES = (16, 8, 4, 2)
#: Widest vector access in bytes (XLA's buffer alignment guarantee).
_MAX_BYTES = 16


def _element_bytes(element: ir.Type) -> int | None:
    """Bytes of an element whose tensor type is its memory type, else None."""
    if isinstance(element, ir.IntegerType):
        width = ir.IntegerType(element).width
        return width // 8 if width >= 8 and width % 8 == 0 else None
    for kind, size in ((ir.F16Type, 2), (ir.BF16Type, 2), (ir.F32Type, 4), (ir.F64Type, 8)):
        if isinstance(element, kind):
            return size
    return None


def _position(extract: ir.Operation) -> tuple[tuple, int, ir.Operation] | None:
    """(group key, constant offset, apply op) of an extract at ``apply(...) = f + offset``."""
    tensor, *indices = extract.operands
    if len(indices) != 1 or not isinstance(indices[0], ir.OpResult):
        return None
    apply = indices[0].owner.operation
    if apply.name != "heron_gpu.apply_indexing" or len(apply.results) != 1:
        return None
    indexing_map = op_indexing_map(apply)
    terms, offset = linear_form(simplify_expr(indexing_map.results[0], indexing_map))
    shape = tuple(sorted((repr(t), c) for t, c in terms.items()))
    return (tensor, tuple(apply.operands), shape), offset, apply


def _aligned(apply: ir.Operation, size: int) -> bool:
    """Whether ``apply``'s result is a multiple of ``size`` on the map's whole domain."""
    indexing_map = op_indexing_map(apply)
    expr = simplify_expr(indexing_map.results[0], indexing_map)
    return simplify_expr(affine_mod(expr, Constant(size)), indexing_map) == Constant(0)


def _groups(block: ir.Block, func_args: set[ir.Value]) -> list[list[tuple[int, ir.Operation]]]:
    """Candidate groups: (offset, extract) lists in block order, one list per key."""
    by_key: dict[tuple, list[tuple[int, ir.Operation]]] = {}
    for op in ir_utils.block_ops(block):
        if op.name != "tensor.extract" or op.operands[0] not in func_args:
            continue
        element = ir.RankedTensorType(op.operands[0].type).element_type
        if _element_bytes(element) is None:
            continue
        found = _position(op)
        if found is None:
            continue
        key, offset, _ = found
        by_key.setdefault(key, []).append((offset, op))
    return list(by_key.values())


def _split(
    members: list[tuple[int, ir.Operation]], bytes_each: int
) -> list[tuple[int, list[tuple[int, ir.Operation]]]]:
    """Aligned runs ``(size, [(offset, extract)...])`` of V consecutive offsets, widest first.

    An element extracted twice (two reductions of one input) is one lane of the
    vector for both: extracts of one tensor value at one index read the same.
    """
    by_offset: dict[int, list[ir.Operation]] = {}
    for offset, op in members:
        by_offset.setdefault(offset, []).append(op)
    runs = []
    taken: set[int] = set()
    for size in _SIZES:
        if size * bytes_each > _MAX_BYTES:
            continue
        for low in sorted(by_offset):
            span = range(low, low + size)
            if any(o not in by_offset or o in taken for o in span):
                continue
            apply = by_offset[low][0].operands[1].owner.operation
            if not _aligned(apply, size):
                continue
            runs.append((size, [(o, op) for o in span for op in by_offset[o]]))
            taken.update(span)
    return runs


def vectorize_block(block: ir.Block, func_args: set[ir.Value]) -> int:
    """Rewrite the aligned adjacent extract groups of ``block``; how many were rewritten."""
    order = {op.results[0]: i for i, op in enumerate(ir_utils.block_ops(block)) if op.results}
    rewritten = 0
    for members in _groups(block, func_args):
        if len(members) < 2:
            continue
        tensor = members[0][1].operands[0]
        element = ir.RankedTensorType(tensor.type).element_type
        bytes_each = _element_bytes(element)
        assert bytes_each is not None
        for size, run in _split(members, bytes_each):
            _rewrite(run, size, element, order)
            rewritten += 1
    return rewritten


def _rewrite(run: list[tuple[int, ir.Operation]], size: int, element: ir.Type, order) -> None:
    first = min((op for _, op in run), key=lambda op: order[op.results[0]])
    base_apply = run[0][1].operands[1].owner.operation  # the lowest offset: the aligned base
    vector_type = ir.VectorType.get([size], element)
    with ir.InsertionPoint(first):
        base = base_apply.clone(ip=ir.InsertionPoint(first)).results[0]
        loaded = transfer_read(vector_type, run[0][1].operands[0], base)
        scalars = [vector.ExtractOp(loaded, [], [i]).result for i in range(size)]
    low = run[0][0]
    for offset, op in run:
        op.results[0].replace_all_uses_with(scalars[offset - low])
        erase_with_unused_index(op)


def run_function(func_op: ir.Operation) -> int:
    """Vectorize adjacent extracts in every block of ``func_op``; the groups rewritten."""
    func_args = set(func_op.regions[0].blocks[0].arguments)
    blocks: list[ir.Block] = []
    for op in ir_utils.walk_ops(func_op):
        for region in op.regions:
            blocks.extend(region.blocks)
    return sum(vectorize_block(block, func_args) for block in blocks)
