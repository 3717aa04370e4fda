"""Scatter indices that keep the promises a scatter makes about them.

A scatter with ``unique_indices=true`` promises that no two update windows
touch the same operand element, and one with ``indices_are_sorted=true``
that its index vectors are ascending; XLA's result is undefined when the
promise is broken (its unique-index scatter writes without atomics). Random
inputs break both, so a check against the reference evaluator would compare
two arbitrary answers. For each such scatter whose indices come straight from
a fusion parameter, this module redraws that parameter: distinct windows laid
on a grid of the window size (non-overlapping), each in bounds, with the
vectors that do not fit placed out of bounds (a skipped update), and sorted
when sortedness is promised.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from heron.hlo.ir import Computation, Instruction

__all__ = ["keep_scatter_promises"]


def _leaf_positions(computation: Computation) -> dict[int, int]:
    """id(parameter) -> its buffer's position, for parameters that are arrays."""
    positions, position = {}, 0
    for param in computation.parameters:
        if param.shape.is_tuple:
            position += len(list(param.shape.leaves()))
            continue
        positions[id(param)] = position
        position += 1
    return positions


def _window_sizes(scatter: Instruction, operand_rank: int) -> list[int]:
    """The update window's size along each operand dimension (1 where inserted)."""
    update = next(iter(scatter.operands[-1].shape.leaves()))
    inserted = set(scatter.attr("inserted_window_dims", ()))
    window_dims = list(scatter.attr("update_window_dims", ()))
    sizes = [1] * operand_rank
    windowed = [d for d in range(operand_rank) if d not in inserted]
    for operand_dim, update_dim in zip(windowed, window_dims, strict=False):
        sizes[operand_dim] = update.dims[update_dim]
    return sizes


def _promised_indices(
    scatter: Instruction, indices: np.ndarray, rng: np.random.Generator
) -> np.ndarray:
    operand = next(iter(scatter.operands[0].shape.leaves()))
    index_map = list(scatter.attr("scatter_dims_to_operand_dims", ()))
    vector_dim = int(scatter.attr("index_vector_dim"))
    sizes = _window_sizes(scatter, operand.rank)
    has_vector_dim = vector_dim < indices.ndim
    moved = np.moveaxis(indices, vector_dim, -1) if has_vector_dim else indices[..., None]
    count = math.prod(moved.shape[:-1])
    # Window slots per scattered dimension, on a grid of the window size.
    # A window of size 0 writes nothing: any start index in range keeps every promise.
    slots = [
        operand.dims[d] // sizes[d] if sizes[d] else max(operand.dims[d], 1) for d in index_map
    ]
    total = math.prod(slots)
    unique = bool(scatter.attr("unique_indices", False))
    if unique:
        chosen = rng.choice(total, size=min(count, total), replace=False) if total else []
        linear = np.concatenate([np.asarray(chosen, np.int64), np.full(count - len(chosen), -1)])
    else:
        linear = rng.integers(0, max(total, 1), size=count)
    if scatter.attr("indices_are_sorted", False):
        linear = np.sort(linear[linear >= 0]).tolist() + [-1] * int((linear < 0).sum())
        linear = np.asarray(linear, np.int64)
    vectors = np.zeros((count, len(index_map)), np.int64)
    for k, position in enumerate(linear):
        if position < 0:  # no slot left: out of bounds, so the update is skipped
            vectors[k] = [operand.dims[d] for d in index_map]
            continue
        coordinates = np.unravel_index(int(position), slots) if slots else ()
        vectors[k] = [c * sizes[d] for c, d in zip(coordinates, index_map, strict=True)]
    shaped = vectors.reshape(moved.shape).astype(indices.dtype)
    if has_vector_dim:
        return np.moveaxis(shaped, -1, vector_dim)
    return shaped[..., 0]


def keep_scatter_promises(
    computation: Computation, args: Sequence[np.ndarray], rng: np.random.Generator
) -> list[np.ndarray]:
    """``args`` with the indices of promising scatters redrawn (see the module docstring)."""
    result = list(args)
    positions = _leaf_positions(computation)
    for inst in computation.instructions:
        if inst.opcode != "scatter":
            continue
        if not (inst.attr("unique_indices", False) or inst.attr("indices_are_sorted", False)):
            continue
        if inst.attr("input_batching_dims", ()):
            continue  # batched scatters keep random indices (documented limitation)
        indices = inst.operands[len(inst.operands) // 2]
        if indices.opcode != "parameter" or id(indices) not in positions:
            continue
        position = positions[id(indices)]
        result[position] = _promised_indices(inst, np.asarray(result[position]), rng)
    return result
