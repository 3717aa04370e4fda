"""Per-instruction indexing maps: which operand elements each output element reads.

``output_to_input_maps(inst)`` gives, for every operand, a map from the
output's index space (dimensions = the result's dimensions) to the operand's
index space. It is what the emitters use to read operands while writing one
output element, and what ``fusion_indexing`` composes through a fused
computation. Three kinds of extra variables appear:

- range symbols (``s_i``) for loops the consumer runs to produce one output
  element: the reduced dimensions of ``reduce``, the window of
  ``reduce-window``, the contracting dimensions of ``dot``;
- runtime symbols (``rt_i``) for values read at run time: dynamic-slice
  offsets, gather start indices. Their bounds are the clamped range XLA
  guarantees, so bounds checks stay provable;
- constraints for partial maps: an output element of ``pad`` or
  ``concatenate`` reads a given operand only inside a sub-domain.

An operand that a result element reads as a whole scalar (a pad value, a
reduce init value, a dynamic-slice offset) gets a map with no results.
``input_to_output_map`` is the reverse direction for the ops the emitters walk
forwards (from a hero to its epilogue's roots).

Everything the analysis does not model raises ``UnsupportedError`` naming the
instruction, so a caller can fall back instead of trusting a wrong map.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from heron.hlo.attributes import PaddingConfig, SliceRange, Window
from heron.hlo.errors import UnsupportedError
from heron.hlo.ir import Instruction
from heron.hlo.opcodes import is_elementwise
from heron.hlo.shapes import ArrayShape, TupleShape
from heron.indexing.affine import AffineExpr, Constant, Dim, Symbol
from heron.indexing.indexing_map import IndexingMap, Variable
from heron.indexing.interval import Interval

__all__ = [
    "input_to_output_map",
    "output_to_input_maps",
    "reshape_exprs",
]

# Ops that only pass their (single array) operand through, element for element.
_IDENTITY_OPS = frozenset({"copy", "convert", "reduce-precision", "opt-barrier"})


# -- helpers ----------------------------------------------------------------------------


def _unsupported(inst: Instruction, why: str) -> UnsupportedError:
    return UnsupportedError(
        f"indexing analysis: '{inst.name}' ({inst.opcode}): {why}", inst.location
    )


def _array(inst: Instruction, shape, what: str) -> ArrayShape:
    if not isinstance(shape, ArrayShape):
        raise _unsupported(inst, f"{what} has tuple shape {shape}")
    return shape


def _dims_vars(dims: Sequence[int], prefix: str = "d") -> tuple[Variable, ...]:
    return tuple(Variable(f"{prefix}{i}", Interval(0, n - 1)) for i, n in enumerate(dims))


def _map(
    dims: Sequence[int],
    results: Sequence[AffineExpr],
    range_sizes: Sequence[int] = (),
    runtime_bounds: Sequence[Interval] = (),
    constraints: Sequence[tuple[AffineExpr, Interval]] = (),
) -> IndexingMap:
    return IndexingMap.for_shape(dims, results, range_sizes, runtime_bounds, constraints)


def _scalar_read(dims: Sequence[int]) -> IndexingMap:
    """Every output element reads the operand's one element (pad value, init value...)."""
    return _map(dims, ())


def _never_read(dims: Sequence[int], operand_rank: int) -> IndexingMap:
    """A map with an empty domain: no output element reads this operand."""
    return _map(dims, (Constant(0),) * operand_rank, constraints=((Constant(0), Interval(1, 0)),))


def _identity(dims: Sequence[int]) -> IndexingMap:
    return IndexingMap.identity(dims)


def _strides(sizes: Sequence[int]) -> list[int]:
    """Row-major strides of ``sizes``."""
    strides = [1] * len(sizes)
    for i in range(len(sizes) - 2, -1, -1):
        strides[i] = strides[i + 1] * sizes[i + 1]
    return strides


def _delinearize(linear: AffineExpr, sizes: Sequence[int], linear_size: int) -> list[AffineExpr]:
    """Split a row-major linear index into indices over ``sizes``.

    The outermost index needs no ``mod`` (the linear index is in range) and
    the innermost no ``floordiv``: leaving them out keeps maps readable
    before the simplifier sees them.
    """
    strides = _strides(sizes)
    out: list[AffineExpr] = []
    for i, (size, stride) in enumerate(zip(sizes, strides)):
        if size == 1:
            out.append(Constant(0))
            continue
        expr = linear // stride if stride != 1 else linear
        if not (i == 0 or stride * size >= linear_size):
            expr = expr % size
        out.append(expr)
    return out


def reshape_exprs(
    exprs: Sequence[AffineExpr], from_sizes: Sequence[int], to_sizes: Sequence[int]
) -> list[AffineExpr]:
    """Row-major reshape of an index: ``exprs`` index ``from_sizes``; result indexes ``to_sizes``.

    Dimensions are first split into the smallest groups whose sizes have
    equal products on both sides (``[6, 4] -> [2, 3, 4]`` is ``{6} -> {2, 3}``
    and ``{4} -> {4}``), so that a reshape that only splits or merges some
    dimensions gives maps that leave the others alone.
    """
    if math.prod(from_sizes) != math.prod(to_sizes):
        raise ValueError(f"cannot reshape {list(from_sizes)} to {list(to_sizes)}")
    result: list[AffineExpr] = []
    i = j = 0
    n, m = len(from_sizes), len(to_sizes)
    while i < n or j < m:
        # One group: take a dimension from each side, then grow the side whose
        # product is smaller until they agree; size-1 dimensions join the group.
        gi: list[int] = []
        gj: list[int] = []
        pa = pb = 1
        if i < n:
            gi.append(i)
            pa *= from_sizes[i]
            i += 1
        if j < m:
            gj.append(j)
            pb *= to_sizes[j]
            j += 1
        while pa != pb:
            if pa < pb:
                gi.append(i)
                pa *= from_sizes[i]
                i += 1
            else:
                gj.append(j)
                pb *= to_sizes[j]
                j += 1
        while i < n and from_sizes[i] == 1:
            gi.append(i)
            i += 1
        while j < m and to_sizes[j] == 1:
            gj.append(j)
            j += 1
        group_from = [from_sizes[k] for k in gi]
        group_to = [to_sizes[k] for k in gj]
        linear: AffineExpr = Constant(0)
        for k, stride in zip(gi, _strides(group_from)):
            linear = linear + exprs[k] * stride
        result.extend(_delinearize(linear, group_to, math.prod(group_from)))
    return result


def _bitcast_exprs(
    out_shape: ArrayShape, in_shape: ArrayShape, exprs: Sequence[AffineExpr]
) -> list[AffineExpr]:
    """Indices into ``in_shape`` of the element at ``exprs`` in ``out_shape`` (same buffer)."""
    out_order = out_shape.major_to_minor
    in_order = in_shape.major_to_minor
    physical = reshape_exprs(
        [exprs[d] for d in out_order],
        [out_shape.dims[d] for d in out_order],
        [in_shape.dims[d] for d in in_order],
    )
    logical: list[AffineExpr] = [Constant(0)] * in_shape.rank
    for position, d in enumerate(in_order):
        logical[d] = physical[position]
    return logical


def _bitcast_operands(inst: Instruction) -> tuple[ArrayShape, ArrayShape]:
    out = _array(inst, inst.shape, "the result")
    src = _array(inst, inst.operands[0].shape, "the operand")
    for shape in (out, src):
        if shape.layout is not None and shape.layout.is_tiled:
            raise _unsupported(inst, f"bitcast with a tiled layout {shape}")
    if out.element_type.bit_width != src.element_type.bit_width:
        raise _unsupported(
            inst, f"bitcast between element types of different widths ({src} to {out})"
        )
    return out, src


def _dims(inst: Instruction, name: str) -> tuple[int, ...]:
    value = inst.attributes.get(name, ())
    return tuple(value)


def _result_shape(inst: Instruction, output_index: int) -> ArrayShape:
    shape = inst.shape
    if isinstance(shape, TupleShape):
        if not 0 <= output_index < len(shape.elements):
            raise _unsupported(inst, f"output index {output_index} out of range for {shape}")
        return _array(inst, shape.elements[output_index], f"result {output_index}")
    if output_index != 0:
        raise _unsupported(inst, f"output index {output_index} of an array-shaped result")
    return shape


# -- output to input ----------------------------------------------------------------------


#: Attributes that never change an op's maps: source metadata and the computations an
#: op calls (its maps are those of its shapes and its other attributes).
NOT_INDEXING = frozenset({"metadata", "calls", "to_apply", "comparator", "select", "scatter"})

#: Maps by :func:`indexing_form`, bounded (cleared when full; maps are frozen values).
_MAPS: dict[tuple[object, ...], tuple[IndexingMap, ...]] = {}
_MAPS_KEPT = 1 << 15


def indexing_form(inst: Instruction, output_index: int = 0) -> tuple[object, ...] | None:
    """What ``inst``'s output-to-input maps are a function of: its opcode, result and
    operand shapes and the attributes but :data:`NOT_INDEXING` (None where a value has
    no hash). Two instructions of one form read their operands alike, whichever they
    are; the one place that says so (the cost model keys its read patterns on it)."""
    try:
        form = (
            inst.opcode,
            output_index,
            inst.shape,
            tuple(operand.shape for operand in inst.operands),
            tuple(
                (name, value) for name, value in inst.attributes.items() if name not in NOT_INDEXING
            ),
        )
        hash(form)
    except TypeError:
        return None
    return form


def output_to_input_maps(inst: Instruction, output_index: int = 0) -> list[IndexingMap]:
    """One map per operand, from result ``output_index``'s indices to that operand's indices.

    Memoised by :func:`indexing_form`: the partitioner asks for every user of every
    kernel's instructions, the fusion passes for every candidate, and the few forms
    of a program recur (a refusal is not kept: it names the instruction)."""
    if not inst.operands:
        _result_shape(inst, output_index)  # a bad output index is still refused
        return []
    form = indexing_form(inst, output_index)
    if form is None:
        return _output_to_input_maps(inst, output_index)
    known = _MAPS.get(form)
    if known is None:
        known = tuple(_output_to_input_maps(inst, output_index))
        if len(_MAPS) >= _MAPS_KEPT:
            _MAPS.clear()
        _MAPS[form] = known
    return list(known)


def forget_maps() -> None:
    """Forget the memoised maps (``heron.indexing.forget_memos``)."""
    _MAPS.clear()


def _output_to_input_maps(inst: Instruction, output_index: int) -> list[IndexingMap]:
    op = inst.opcode
    out = _result_shape(inst, output_index)
    dims = out.dims
    if not inst.operands:
        return []
    if is_elementwise(op) and op != "bitcast-convert" or op in _IDENTITY_OPS or op == "map":
        return [_elementwise_operand(inst, dims, operand) for operand in inst.operands]
    handler = _OUTPUT_TO_INPUT.get(op)
    if handler is None:
        raise _unsupported(inst, "no indexing map for this op")
    return handler(inst, dims, output_index)


def _elementwise_operand(inst: Instruction, dims: tuple[int, ...], operand: Instruction):
    shape = _array(inst, operand.shape, f"operand '{operand.name}'")
    if shape.dims == dims:
        return _identity(dims)
    if shape.is_scalar:  # clamp's bounds, old-style select predicates
        return _scalar_read(dims)
    raise _unsupported(inst, f"operand '{operand.name}' {shape} does not match the result")


def _bitcast_convert(inst, dims, output_index):
    src = _array(inst, inst.operands[0].shape, "the operand")
    out = _array(inst, inst.shape, "the result")
    a, b = src.element_type.bit_width, out.element_type.bit_width
    if a == b:
        return [_identity(dims)]
    if a > b:  # one wide element becomes a new minor dimension of narrow ones
        return [_map(dims, tuple(Dim(i) for i in range(src.rank)))]
    # narrow -> wide: a result element reads the operand's whole minor dimension
    ratio = b // a
    results = (*(Dim(i) for i in range(out.rank)), Symbol(0))
    return [_map(dims, results, range_sizes=(ratio,))]


def _broadcast(inst, dims, output_index):
    mapping = _dims(inst, "dimensions")
    return [_map(dims, tuple(Dim(d) for d in mapping))]


def _reshape(inst, dims, output_index):
    src = _array(inst, inst.operands[0].shape, "the operand")
    exprs = [Dim(i) for i in range(len(dims))]
    return [_map(dims, reshape_exprs(exprs, dims, src.dims))]


def _bitcast(inst, dims, output_index):
    out, src = _bitcast_operands(inst)
    exprs = [Dim(i) for i in range(out.rank)]
    return [_map(dims, _bitcast_exprs(out, src, exprs))]


def _transpose(inst, dims, output_index):
    perm = _dims(inst, "dimensions")
    inverse = [0] * len(perm)
    for i, p in enumerate(perm):
        inverse[p] = i
    return [_map(dims, tuple(Dim(inverse[j]) for j in range(len(perm))))]


def _reverse(inst, dims, output_index):
    reversed_dims = set(_dims(inst, "dimensions"))
    results = tuple(
        (dims[i] - 1) - Dim(i) if i in reversed_dims else Dim(i) for i in range(len(dims))
    )
    return [_map(dims, results)]


def _slice(inst, dims, output_index):
    ranges: tuple[SliceRange, ...] = inst.attributes["slice"]
    results = tuple(Dim(i) * r.stride + r.start for i, r in enumerate(ranges))
    return [_map(dims, results)]


def _pad(inst, dims, output_index):
    config = inst.attributes["padding"]
    if not isinstance(config, PaddingConfig):
        raise _unsupported(inst, f"padding={config!r} is not a padding config")
    src = _array(inst, inst.operands[0].shape, "the operand")
    results: list[AffineExpr] = []
    constraints: list[tuple[AffineExpr, Interval]] = []
    for i, (pad, n) in enumerate(zip(config.dims, src.dims)):
        step = pad.interior + 1
        shifted = Dim(i) - pad.low
        results.append(shifted // step)
        # The operand's elements sit at shifted in {0, step, ..., (n - 1) * step}.
        span = Interval(0, (n - 1) * step)
        if not span.contains_interval(Interval(-pad.low, dims[i] - 1 - pad.low)):
            constraints.append((shifted, span))
        if step > 1:
            constraints.append((shifted % step, Interval(0, 0)))
    return [_map(dims, results, constraints=constraints), _scalar_read(dims)]


def _concatenate(inst, dims, output_index):
    (axis,) = _dims(inst, "dimensions")
    maps = []
    offset = 0
    for operand in inst.operands:
        size = _array(inst, operand.shape, f"operand '{operand.name}'").dims[axis]
        results = tuple(Dim(i) - offset if i == axis else Dim(i) for i in range(len(dims)))
        constraint = (Dim(axis), Interval(offset, offset + size - 1))
        maps.append(_map(dims, results, constraints=(constraint,)))
        offset += size
    return maps


def _offset_operand_maps(inst: Instruction, dims, first: int) -> list[IndexingMap]:
    """Maps of dynamic-(update-)slice's offset operands: each is read as a whole.

    Offsets are scalars (one per dimension); the old form passes one vector,
    whose elements are all read (a range symbol over it).
    """
    maps = []
    for operand in inst.operands[first:]:
        shape = _array(inst, operand.shape, f"offset operand '{operand.name}'")
        results = tuple(Symbol(i) for i in range(shape.rank))
        maps.append(_map(dims, results, range_sizes=shape.dims))
    return maps


def _dynamic_slice(inst, dims, output_index):
    src = _array(inst, inst.operands[0].shape, "the operand")
    sizes = _dims(inst, "dynamic_slice_sizes")
    # XLA clamps each offset so the slice stays inside: rt_i in [0, dim_i - size_i].
    bounds = [Interval(0, n - s) for n, s in zip(src.dims, sizes)]
    results = tuple(Dim(i) + Symbol(i) for i in range(src.rank))
    operand_map = _map(dims, results, runtime_bounds=bounds)
    return [operand_map, *_offset_operand_maps(inst, dims, 1)]


def _dynamic_update_slice(inst, dims, output_index):
    update = _array(inst, inst.operands[1].shape, "the update")
    bounds = [Interval(0, n - u) for n, u in zip(dims, update.dims)]
    results = tuple(Dim(i) - Symbol(i) for i in range(len(dims)))
    # The update is read only where the output lies inside the (clamped) window.
    constraints = tuple((Dim(i) - Symbol(i), Interval(0, u - 1)) for i, u in enumerate(update.dims))
    update_map = _map(dims, results, runtime_bounds=bounds, constraints=constraints)
    return [_identity(dims), update_map, *_offset_operand_maps(inst, dims, 2)]


def _reduce(inst, dims, output_index):
    count = len(inst.operands) // 2
    src = _array(inst, inst.operands[0].shape, "the operand")
    reduced = sorted(_dims(inst, "dimensions"))
    results: list[AffineExpr] = []
    kept = 0
    for i in range(src.rank):
        if i in reduced:
            results.append(Symbol(reduced.index(i)))
        else:
            results.append(Dim(kept))
            kept += 1
    sizes = [src.dims[d] for d in reduced]
    input_map = _map(dims, results, range_sizes=sizes)
    return [input_map] * count + [_scalar_read(dims)] * count


def _reduce_window(inst, dims, output_index):
    count = len(inst.operands) // 2
    src = _array(inst, inst.operands[0].shape, "the operand")
    window = inst.attributes["window"]
    if not isinstance(window, Window):
        raise _unsupported(inst, f"window={window!r} is not a window")
    results: list[AffineExpr] = []
    constraints: list[tuple[AffineExpr, Interval]] = []
    for i, (w, n) in enumerate(zip(window.dims, src.dims)):
        offset: AffineExpr = (w.size - 1) - Symbol(i) if w.window_reversal else Symbol(i)
        # Position in the padded, base-dilated operand.
        position = Dim(i) * w.stride + offset * w.window_dilation - w.pad_low
        step = w.base_dilation
        results.append(position // step)
        constraints.append((position, Interval(0, (n - 1) * step)))
        if step > 1:
            constraints.append((position % step, Interval(0, 0)))
    sizes = [w.size for w in window.dims]
    input_map = _map(dims, results, range_sizes=sizes, constraints=constraints)
    return [input_map] * count + [_scalar_read(dims)] * count


def _dot(inst, dims, output_index):
    lhs = _array(inst, inst.operands[0].shape, "lhs")
    rhs = _array(inst, inst.operands[1].shape, "rhs")
    lhs_batch, rhs_batch = _dims(inst, "lhs_batch_dims"), _dims(inst, "rhs_batch_dims")
    lhs_contract = _dims(inst, "lhs_contracting_dims")
    rhs_contract = _dims(inst, "rhs_contracting_dims")
    lhs_free = [d for d in range(lhs.rank) if d not in lhs_batch and d not in lhs_contract]
    rhs_free = [d for d in range(rhs.rank) if d not in rhs_batch and d not in rhs_contract]

    def operand_results(rank, batch, contract, free, free_offset) -> tuple[AffineExpr, ...]:
        results: list[AffineExpr] = []
        for d in range(rank):
            if d in batch:
                results.append(Dim(batch.index(d)))
            elif d in contract:
                results.append(Symbol(contract.index(d)))
            else:
                results.append(Dim(free_offset + free.index(d)))
        return tuple(results)

    sizes = [lhs.dims[d] for d in lhs_contract]
    nb = len(lhs_batch)
    return [
        _map(dims, operand_results(lhs.rank, lhs_batch, lhs_contract, lhs_free, nb), sizes),
        _map(
            dims,
            operand_results(rhs.rank, rhs_batch, rhs_contract, rhs_free, nb + len(lhs_free)),
            sizes,
        ),
    ]


def _gather(inst, dims, output_index):
    """Gather: runtime symbols hold the start index read for the output's batch element.

    rt_j is ``indices[batch..., j]`` clamped to ``[0, operand_dim - slice_size]``
    for operand dimension ``start_index_map[j]``; the indices operand's map
    reads the whole index vector of the output's batch element (range symbol).
    """
    src = _array(inst, inst.operands[0].shape, "the operand")
    indices = _array(inst, inst.operands[1].shape, "the start indices")
    offset_dims = _dims(inst, "offset_dims")
    collapsed = _dims(inst, "collapsed_slice_dims")
    start_index_map = _dims(inst, "start_index_map")
    ivd = inst.attributes["index_vector_dim"]
    slice_sizes = _dims(inst, "slice_sizes")
    operand_batching = _dims(inst, "operand_batching_dims")
    indices_batching = _dims(inst, "start_indices_batching_dims")

    batch_out = [d for d in range(len(dims)) if d not in offset_dims]
    indices_batch = [d for d in range(indices.rank) if d != ivd]  # in batch_out order
    window_operand = [
        d for d in range(src.rank) if d not in collapsed and d not in operand_batching
    ]

    results: list[AffineExpr] = []
    for d in range(src.rank):
        expr: AffineExpr
        if d in operand_batching:
            idim = indices_batching[operand_batching.index(d)]
            expr = Dim(batch_out[indices_batch.index(idim)])
        elif d in window_operand:
            expr = Dim(offset_dims[window_operand.index(d)])
        else:
            expr = Constant(0)
        if d in start_index_map:
            expr = expr + Symbol(start_index_map.index(d))
        results.append(expr)
    bounds = [Interval(0, src.dims[d] - slice_sizes[d]) for d in start_index_map]
    operand_map = _map(dims, results, runtime_bounds=bounds)

    index_results: list[AffineExpr] = []
    for t in range(indices.rank):
        if t == ivd:
            index_results.append(Symbol(0))
        else:
            index_results.append(Dim(batch_out[indices_batch.index(t)]))
    range_sizes = (indices.dims[ivd],) if ivd < indices.rank else ()
    return [operand_map, _map(dims, index_results, range_sizes=range_sizes)]


def _scatter(inst, dims, output_index):
    """Scatter: the operand is read element for element; indices and updates conservatively.

    Which update lands on an output element depends on the index values, so
    (as XLA does) an output element may read any element of the indices and
    the updates: their maps range over their whole shapes with range symbols.
    """
    count = len(inst.operands) // 2
    maps = [_identity(dims)] * count
    for operand in inst.operands[count:]:
        shape = _array(inst, operand.shape, f"operand '{operand.name}'")
        results = tuple(Symbol(i) for i in range(shape.rank))
        maps.append(_map(dims, results, range_sizes=shape.dims))
    # Only the operand of the selected output feeds it element for element.
    return [
        m if i >= count or i == output_index else _never_read(dims, len(dims))
        for i, m in enumerate(maps)
    ]


def _sort(inst, dims, output_index):
    (axis,) = _dims(inst, "dimensions")
    results = tuple(Symbol(0) if i == axis else Dim(i) for i in range(len(dims)))
    return [_map(dims, results, range_sizes=(dims[axis],))] * len(inst.operands)


def _tuple(inst, dims, output_index):
    maps = []
    for i, operand in enumerate(inst.operands):
        shape = _array(inst, operand.shape, f"element {i}")
        maps.append(_identity(dims) if i == output_index else _never_read(dims, shape.rank))
    return maps


def _get_tuple_element(inst, dims, output_index):
    # The operand is a tuple: the map goes to its element ``index`` (see fusion_indexing).
    return [_identity(dims)]


def _iota_like(inst, dims, output_index):
    return []


_OUTPUT_TO_INPUT = {
    "bitcast-convert": _bitcast_convert,
    "broadcast": _broadcast,
    "reshape": _reshape,
    "bitcast": _bitcast,
    "transpose": _transpose,
    "reverse": _reverse,
    "slice": _slice,
    "pad": _pad,
    "concatenate": _concatenate,
    "dynamic-slice": _dynamic_slice,
    "dynamic-update-slice": _dynamic_update_slice,
    "reduce": _reduce,
    "reduce-window": _reduce_window,
    "dot": _dot,
    "gather": _gather,
    "scatter": _scatter,
    "sort": _sort,
    "tuple": _tuple,
    "get-tuple-element": _get_tuple_element,
}


# -- input to output -------------------------------------------------------------------------


def input_to_output_map(inst: Instruction, operand_index: int) -> IndexingMap:
    """Map from operand ``operand_index``'s indices to the result indices that read it.

    Result dimensions an operand element feeds many of (a broadcast's new
    dimensions, every output element for a scalar operand) become range
    symbols; partial maps (slice, pad) carry constraints.
    """
    op = inst.opcode
    if not 0 <= operand_index < len(inst.operands):
        raise _unsupported(inst, f"operand index {operand_index} out of range")
    operand = inst.operands[operand_index]
    src = _array(inst, operand.shape, f"operand {operand_index}")
    out = _array(inst, inst.shape, "the result")
    in_dims, out_dims = src.dims, out.dims

    def spread(results: Sequence[AffineExpr] | None = None) -> IndexingMap:
        """Every result element reads this operand element: result dims as symbols."""
        return _map(in_dims, tuple(Symbol(i) for i in range(out.rank)), range_sizes=out_dims)

    if (
        (is_elementwise(op) and op != "bitcast-convert")
        or op in _IDENTITY_OPS
        or (op == "bitcast-convert" and src.element_type.bit_width == out.element_type.bit_width)
    ):
        return _identity(in_dims) if in_dims == out_dims else spread()
    if op == "broadcast":
        mapping = _dims(inst, "dimensions")
        results: list[AffineExpr] = []
        new_sizes: list[int] = []
        for j in range(out.rank):
            if j in mapping:
                results.append(Dim(mapping.index(j)))
            else:
                results.append(Symbol(len(new_sizes)))
                new_sizes.append(out_dims[j])
        return _map(in_dims, results, range_sizes=new_sizes)
    if op == "transpose":
        perm = _dims(inst, "dimensions")
        return _map(in_dims, tuple(Dim(p) for p in perm))
    if op == "reshape":
        exprs = [Dim(i) for i in range(src.rank)]
        return _map(in_dims, reshape_exprs(exprs, in_dims, out_dims))
    if op == "bitcast":
        out_shape, src_shape = _bitcast_operands(inst)
        exprs = [Dim(i) for i in range(src.rank)]
        return _map(in_dims, _bitcast_exprs(src_shape, out_shape, exprs))
    if op == "reverse":
        reversed_dims = set(_dims(inst, "dimensions"))
        return _map(
            in_dims,
            tuple(
                (n - 1) - Dim(i) if i in reversed_dims else Dim(i) for i, n in enumerate(in_dims)
            ),
        )
    if op == "reduce":
        count = len(inst.operands) // 2
        if operand_index >= count:
            return spread()
        reduced = set(_dims(inst, "dimensions"))
        return _map(in_dims, tuple(Dim(i) for i in range(src.rank) if i not in reduced))
    if op == "slice":
        ranges: tuple[SliceRange, ...] = inst.attributes["slice"]
        results = []
        constraints = []
        for i, (r, size) in enumerate(zip(ranges, out_dims)):
            shifted = Dim(i) - r.start
            results.append(shifted // r.stride)
            constraints.append((shifted, Interval(0, (size - 1) * r.stride)))
            if r.stride > 1:
                constraints.append((shifted % r.stride, Interval(0, 0)))
        return _map(in_dims, results, constraints=constraints)
    if op == "concatenate":
        (axis,) = _dims(inst, "dimensions")
        offset = sum(
            _array(inst, o.shape, "an operand").dims[axis] for o in inst.operands[:operand_index]
        )
        return _map(
            in_dims, tuple(Dim(i) + offset if i == axis else Dim(i) for i in range(src.rank))
        )
    if op == "pad":
        if operand_index == 1:
            return spread()
        config: PaddingConfig = inst.attributes["padding"]
        results = []
        constraints = []
        for i, (pad, size) in enumerate(zip(config.dims, out_dims)):
            position = Dim(i) * (pad.interior + 1) + pad.low
            results.append(position)
            # Negative padding crops: only elements that land inside the result.
            if not Interval(0, size - 1).contains_interval(
                Interval(pad.low, (in_dims[i] - 1) * (pad.interior + 1) + pad.low)
            ):
                constraints.append((position, Interval(0, size - 1)))
        return _map(in_dims, results, constraints=constraints)
    raise _unsupported(inst, "no input-to-output indexing map for this op")
