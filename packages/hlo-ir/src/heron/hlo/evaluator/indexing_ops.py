"""gather and scatter, with XLA's full dimension numbers.

Both are computed with index arithmetic on whole arrays: one start vector
per batch (gather) or update-scatter (scatter) position, added to the window
offsets by broadcasting, then one fancy-indexing read (gather) or one
combining write (scatter: ``reductions.scatter_combine``).

Bounds (as XLA defines them): a gather start is clamped so the whole slice
lies in the operand; a scatter whose update window does not lie wholly in
the operand is skipped, the whole window, not just the elements outside.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

from heron.hlo.evaluator.common import instruction_error
from heron.hlo.evaluator.data_movement import indices_as_int64, required
from heron.hlo.evaluator.reductions import scatter_combine
from heron.hlo.ir import Instruction, Literal

if TYPE_CHECKING:
    from heron.hlo.evaluator.interpreter import Evaluator


def _index_vectors(inst: Instruction, indices: np.ndarray, index_vector_dim: int) -> np.ndarray:
    """Indices with the index vector as the last axis (a trailing 1 when it is implicit)."""
    idx = indices_as_int64(np.asarray(indices))
    if index_vector_dim == idx.ndim:
        return idx[..., np.newaxis]
    if not 0 <= index_vector_dim < idx.ndim:
        raise instruction_error(
            inst, f"index_vector_dim={index_vector_dim} out of range for indices of rank {idx.ndim}"
        )
    return np.moveaxis(idx, index_vector_dim, -1)


def _batch_axis(dim: int, index_vector_dim: int) -> int:
    """Position of indices dimension ``dim`` once the index vector dimension is removed."""
    return dim if dim < index_vector_dim else dim - 1


def _starts(
    inst: Instruction,
    idx: np.ndarray,
    index_map: Sequence[int],
    operand_batching_dims: Sequence[int],
    indices_batching_dims: Sequence[int],
    index_vector_dim: int,
    rank: int,
) -> np.ndarray:
    """Start index in the operand for every batch position: shape batch + (rank,)."""
    batch_shape = idx.shape[:-1]
    if idx.shape[-1] != len(index_map):
        raise instruction_error(
            inst, f"index vectors have {idx.shape[-1]} components, the map {len(index_map)}"
        )
    starts = np.zeros(batch_shape + (rank,), dtype=np.int64)
    for k, d in enumerate(index_map):
        starts[..., d] = idx[..., k]
    for od, idim in zip(operand_batching_dims, indices_batching_dims):
        axis = _batch_axis(idim, index_vector_dim)
        counter = np.arange(batch_shape[axis]).reshape(
            [-1 if a == axis else 1 for a in range(len(batch_shape))]
        )
        starts[..., od] = counter
    return starts


def _gather(ev: Evaluator, inst: Instruction, ops: list[Literal]) -> Literal:
    operand, indices = ops
    rank = operand.ndim
    offset_dims = tuple(inst.attributes.get("offset_dims", ()))
    collapsed = set(inst.attributes.get("collapsed_slice_dims", ()))
    index_map = tuple(inst.attributes.get("start_index_map", ()))
    slice_sizes = tuple(required(inst, "slice_sizes"))
    operand_batching = tuple(inst.attributes.get("operand_batching_dims", ()))
    indices_batching = tuple(inst.attributes.get("start_indices_batching_dims", ()))
    ivd = required(inst, "index_vector_dim")
    if len(slice_sizes) != rank:
        raise instruction_error(inst, f"slice_sizes has {len(slice_sizes)} entries, rank {rank}")
    for d, size in enumerate(slice_sizes):
        if size > operand.shape[d]:
            raise instruction_error(inst, f"slice size {size} exceeds operand dimension {d}")

    idx = _index_vectors(inst, indices, ivd)
    starts = _starts(inst, idx, index_map, operand_batching, indices_batching, ivd, rank)
    for d in index_map:
        np.clip(starts[..., d], 0, operand.shape[d] - slice_sizes[d], out=starts[..., d])

    batch_shape = starts.shape[:-1]
    window_dims = [d for d in range(rank) if d not in collapsed and d not in operand_batching]
    nb, nw = len(batch_shape), len(window_dims)
    keys = []
    for d in range(rank):
        start = starts[..., d].reshape(batch_shape + (1,) * nw)
        if d in window_dims:
            j = window_dims.index(d)
            offset = np.arange(slice_sizes[d]).reshape(
                (1,) * (nb + j) + (-1,) + (1,) * (nw - j - 1)
            )
            keys.append(start + offset)
        else:
            keys.append(start)
    if len(offset_dims) != nw:
        raise instruction_error(
            inst, f"offset_dims has {len(offset_dims)} entries for {nw} window dimensions"
        )
    if rank == 0:
        gathered = np.broadcast_to(operand, batch_shape)
    else:
        gathered = operand[tuple(keys)]
        gathered = np.broadcast_to(
            gathered, batch_shape + tuple(slice_sizes[d] for d in window_dims)
        )
    # Output axes: offset_dims hold the window axes in order, the rest the batch axes.
    source = []
    batch_axis = 0
    for p in range(nb + nw):
        if p in offset_dims:
            source.append(nb + offset_dims.index(p))
        else:
            source.append(batch_axis)
            batch_axis += 1
    return np.transpose(gathered, source)


def _scatter(ev: Evaluator, inst: Instruction, ops: list[Literal]) -> Literal:
    count = (len(ops) - 1) // 2
    if count == 0 or len(ops) != 2 * count + 1:
        raise instruction_error(inst, f"scatter needs 2n+1 operands, got {len(ops)}")
    operands, indices, updates = ops[:count], ops[count], ops[count + 1 :]
    targets, sources = scatter_destinations(inst, indices, updates[0].shape, operands[0].shape)
    values = [np.asarray(u).reshape(-1)[sources] for u in updates]
    outs = [np.array(o, copy=True).reshape(-1) for o in operands]
    scatter_combine(ev, inst.called("to_apply"), outs, targets, values)
    results = [o.reshape(operands[0].shape) for o in outs]
    return tuple(results) if inst.shape.is_tuple else results[0]


def scatter_destinations(
    inst: Instruction,
    indices: np.ndarray,
    update_shape: tuple[int, ...],
    operand_shape: tuple[int, ...],
) -> tuple[np.ndarray, np.ndarray]:
    """Where the updates of ``scatter`` go: ``(targets, sources)``, for each update element
    that lands inside the operand, in the order the scatter combines them, its flat
    (row-major) position in the operand and in the update array. Updates whose window
    would leave the operand are dropped, as XLA drops them.

    The one statement of a scatter's addressing: the evaluator combines by it, and the
    check's summation bound counts the updates that meet at each element by it."""
    rank = len(operand_shape)
    window_update_dims = tuple(inst.attributes.get("update_window_dims", ()))
    inserted = set(inst.attributes.get("inserted_window_dims", ()))
    index_map = tuple(inst.attributes.get("scatter_dims_to_operand_dims", ()))
    operand_batching = tuple(inst.attributes.get("input_batching_dims", ()))
    indices_batching = tuple(inst.attributes.get("scatter_indices_batching_dims", ()))
    ivd = required(inst, "index_vector_dim")

    idx = _index_vectors(inst, indices, ivd)
    starts = _starts(inst, idx, index_map, operand_batching, indices_batching, ivd, rank)
    update_rank = len(update_shape)
    scatter_update_dims = [d for d in range(update_rank) if d not in window_update_dims]
    order = scatter_update_dims + list(window_update_dims)
    positions = np.transpose(
        np.arange(int(np.prod(update_shape, dtype=np.int64))).reshape(update_shape), order
    )
    scatter_shape = positions.shape[: len(scatter_update_dims)]
    window_shape = positions.shape[len(scatter_update_dims) :]
    if scatter_shape != starts.shape[:-1]:
        raise instruction_error(
            inst,
            f"update scatter dimensions {list(scatter_shape)} do not match the indices'"
            f" batch dimensions {list(starts.shape[:-1])}",
        )
    window_dims = [d for d in range(rank) if d not in inserted and d not in operand_batching]
    if len(window_dims) != len(window_shape):
        raise instruction_error(
            inst,
            f"{len(window_shape)} update window dimensions for {len(window_dims)} operand ones",
        )
    extent = [1] * rank
    for d, size in zip(window_dims, window_shape):
        extent[d] = size

    num_scatter = int(np.prod(scatter_shape, dtype=np.int64))
    num_window = int(np.prod(window_shape, dtype=np.int64))
    flat_starts = starts.reshape(num_scatter, rank)
    dims = np.asarray(operand_shape, dtype=np.int64)
    in_bounds = np.all(
        (flat_starts >= 0) & (flat_starts <= dims - np.asarray(extent, dtype=np.int64)), axis=1
    )
    strides = np.ones(rank, dtype=np.int64)
    for d in range(rank - 2, -1, -1):
        strides[d] = strides[d + 1] * operand_shape[d + 1]
    window_offsets = np.zeros(num_window, dtype=np.int64)
    if window_dims:
        grids = np.indices(window_shape, dtype=np.int64).reshape(len(window_dims), -1)
        for j, d in enumerate(window_dims):
            window_offsets += grids[j] * strides[d]
    base = flat_starts[in_bounds] @ strides if rank else np.zeros(int(in_bounds.sum()), np.int64)
    targets = (base[:, None] + window_offsets[None, :]).reshape(-1)
    sources = positions.reshape(num_scatter, num_window)[in_bounds].reshape(-1)
    return targets, sources


HANDLERS = {
    "gather": _gather,
    "scatter": _scatter,
}
