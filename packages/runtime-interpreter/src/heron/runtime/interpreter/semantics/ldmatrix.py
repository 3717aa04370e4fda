"""Warp-level matrix loads: ``nvgpu.ldmatrix`` (PTX ``ldmatrix.sync.aligned.m8n8``).

``%r = nvgpu.ldmatrix %src[%i...] {numTiles = n, transpose = t} : memref<..> ->
vector<n x w x T>`` loads ``n`` (1, 2 or 4) 8 x 8 matrices of 16-bit elements
from shared memory into the warp's registers, as the PTX ISA's ``ldmatrix``
("Warp-level matrix load instruction: ldmatrix") does:

- **Row addresses.** Each row of a matrix is 16 contiguous bytes (8 elements
  of 16 bits, or 16 of 8 bits), at the address one lane supplies: lane ``l``
  (``l < 8n``) gives row ``l % 8`` of matrix ``l / 8``. The other lanes'
  addresses are not used (for ``.x1`` lanes 8 to 31, for ``.x2`` 16 to 31),
  and they are not checked. Each row must lie inside the memref's last
  dimension and start 16-byte aligned (the PTX ISA: "each address ... must be
  aligned to 16 bytes"); the sanitizer reports ``out-of-bounds`` or
  ``misaligned`` naming the lane, and the row's reads are checked as any
  shared read (uninitialised elements, races with other threads' writes).
- **Distribution.** Lane ``l`` receives one 32-bit register a matrix: row
  ``l / 4``, bytes ``4 (l % 4)`` to ``4 (l % 4) + 3`` of that row (elements
  ``w (l % 4) ... w (l % 4) + w - 1``, ``w = 4 / element bytes``): result row
  ``i`` is that register of matrix ``i``.
- **``.trans``** (16-bit elements only): the matrix is read column-wise, so
  lane ``l`` receives elements ``[2 (l % 4)][l / 4]`` and
  ``[2 (l % 4) + 1][l / 4]`` of each matrix (rows as the lanes supplied them).

Like ``mma.sync``, the op is collective over whole warps of 32 lanes, every
lane executing it (``.aligned``): a lane missing is a ``divergent-shuffle``
finding.
"""

from __future__ import annotations

import numpy as np

from heron.runtime.interpreter import memory
from heron.runtime.interpreter.engine import Frame, semantics
from heron.runtime.interpreter.program import Op
from heron.runtime.interpreter.semantics.mma import WARP, check_warps
from heron.runtime.interpreter.types import VectorType, parse_type

__all__ = ["ROW_BYTES", "ldmatrix_rows", "received_positions"]

#: Bytes of one matrix row (8 elements of 16 bits) and the alignment of its address.
ROW_BYTES = 16


def ldmatrix_rows(tiles: int) -> tuple[np.ndarray, np.ndarray]:
    """(matrix, row) whose address each lane supplies for an ``.x{tiles}`` load;
    -1 for lanes whose address is not used."""
    lane = np.arange(WARP)
    used = lane < 8 * tiles
    return np.where(used, lane // 8, -1), np.where(used, lane % 8, -1)


def received_positions(
    tiles: int, per_register: int, transpose: bool
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(matrix, row, column) arrays, shape ``(32, tiles, per_register)``, of the element
    each lane receives at each position of its result."""
    lane = np.arange(WARP).reshape(WARP, 1, 1)
    matrix = np.arange(tiles).reshape(1, tiles, 1)
    e = np.arange(per_register).reshape(1, 1, per_register)
    if transpose:
        rows, cols = 2 * (lane % 4) + e, lane // 4 + 0 * e
    else:
        rows, cols = lane // 4 + 0 * e, per_register * (lane % 4) + e
    return tuple(np.broadcast_arrays(matrix + 0 * rows, rows, cols))


def _attribute(op: Op, name: str, default):
    value = op.attributes.get(name, default)
    if isinstance(value, str):
        value = value.split(":")[0].strip()
        return value == "true" if value in ("true", "false") else int(value)
    return value


def _layout(frame: Frame, op: Op, itemsize: int) -> tuple[int, bool, int]:
    tiles = int(_attribute(op, "numTiles", 0))
    transpose = bool(_attribute(op, "transpose", False))
    result = parse_type(op.result_types[0])
    per_register = 4 // itemsize if itemsize in (1, 2) else 0
    expected = (tiles, per_register)
    if (
        tiles not in (1, 2, 4)
        or not per_register
        or not isinstance(result, VectorType)
        or tuple(result.shape) != expected
        or (transpose and itemsize != 2)
    ):
        raise frame.unsupported(
            op,
            f"ldmatrix with numTiles={tiles}, transpose={transpose} and result"
            f" {op.result_types[0]}: the interpreter runs .x1, .x2 and .x4 of 16-bit"
            f" elements (vector<nx2>, .trans allowed) or 8-bit ones (vector<nx4>, no .trans)",
        )
    return tiles, transpose, per_register


@semantics("nvgpu.ldmatrix")
def ldmatrix(frame: Frame, op: Op) -> None:
    ref, *indices = frame.operands(op)
    itemsize = ref.type.dtype.itemsize
    tiles, transpose, per_register = _layout(frame, op, itemsize)
    check_warps(frame, op, "ldmatrix")
    lanes = frame.lanes
    lane = lanes.lane_in_warp
    supplying = lane < 8 * tiles
    # Unused lanes' addresses are ignored by the hardware: read row 0's instead, masked out.
    indices = [np.where(supplying, np.broadcast_to(i, (lanes.size,)), 0) for i in indices]
    width = ROW_BYTES // itemsize
    saved = frame.mask
    frame.mask = supplying if saved is None else saved & supplying
    try:
        flat = memory.flat_index(frame, op, ref, indices, width)
        memory.check_alignment(frame, op, ref, flat, ROW_BYTES)
        rows = memory.read(frame, op, ref, flat, width)  # (lanes, width), zeros where masked
    finally:
        frame.mask = saved
    warps = lanes.size // WARP
    per_warp = rows.reshape(warps, WARP, width)[:, : 8 * tiles]
    matrices = per_warp.reshape(warps, tiles, 8, width)  # [warp, matrix, row, element]
    m, r, c = received_positions(tiles, per_register, transpose)
    received = matrices[:, m, r, c]  # (warps, 32, tiles, per_register)
    frame.set_result(op, received.reshape(lanes.size, tiles, per_register))
