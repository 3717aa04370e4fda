"""GPU ids and sizes (``gpu.thread_id``, ``gpu.block_id``, ``gpu.block_dim``, ``gpu.grid_dim``,
``gpu.lane_id``, ``gpu.subgroup_size``), warp shuffles (``gpu.shuffle``) and barriers
(``gpu.barrier``).

Shuffles and barriers are collective: the hardware has every thread of the
warp (the first ``width`` lanes of it) or of the block wait for the others,
so one reached by only part of them hangs or reads garbage. The interpreter
reports that as ``divergent-shuffle`` / ``divergent-barrier``, naming a
thread that did not take part.

``gpu.shuffle`` follows the upstream gpu dialect (NVIDIA ``shfl.sync``, AMD
``ds_bpermute``): lane ``k`` (``k < width``) reads lane ``k ^ offset``
(xor), ``k - offset`` (up), ``k + offset`` (down) or ``offset`` (idx) of its
warp; a source outside ``[0, width)`` (or past the last thread of a partial
warp), and any lane ``k >= width``, gets its own value and ``valid`` false.
Values of any type shuffle whole (vectors element by element, 64-bit
values as such; the compiler may split them into 32-bit shuffles first).
"""

from __future__ import annotations

import numpy as np

from heron.runtime.interpreter import memory
from heron.runtime.interpreter.engine import Frame, semantics
from heron.runtime.interpreter.program import Op

_DIMENSIONS = {"x": 0, "y": 1, "z": 2}


def _dimension(frame: Frame, op: Op) -> int:
    text = str(op.attributes.get("dimension", ""))
    for name, number in _DIMENSIONS.items():
        if text in (f"#gpu<dim {name}>", name):
            return number
    raise frame.unsupported(op, f"unknown dimension {text!r}")


def _check_upper_bound(frame: Frame, op: Op, values, limit: int) -> None:
    bound = op.attributes.get("upper_bound")
    if bound is not None and limit > int(bound):
        raise frame.unsupported(
            op, f"the launch has {limit} along this dimension; the op promises at most {bound}"
        )


@semantics("gpu.thread_id")
def thread_id(frame: Frame, op: Op) -> None:
    dimension = _dimension(frame, op)
    _check_upper_bound(frame, op, None, frame.lanes.block[dimension])
    frame.set_result(op, frame.lanes.thread_id(dimension))


@semantics("gpu.block_id")
def block_id(frame: Frame, op: Op) -> None:
    dimension = _dimension(frame, op)
    _check_upper_bound(frame, op, None, frame.lanes.grid[dimension])
    frame.set_result(op, frame.lanes.block_id(dimension))


@semantics("gpu.block_dim")
def block_dim(frame: Frame, op: Op) -> None:
    frame.set_result(op, np.int64(frame.lanes.block[_dimension(frame, op)]))


@semantics("gpu.grid_dim")
def grid_dim(frame: Frame, op: Op) -> None:
    frame.set_result(op, np.int64(frame.lanes.grid[_dimension(frame, op)]))


@semantics("gpu.lane_id")
def lane_id(frame: Frame, op: Op) -> None:
    frame.set_result(op, frame.lanes.lane_in_warp)


@semantics("gpu.subgroup_size")
def subgroup_size(frame: Frame, op: Op) -> None:
    frame.set_result(op, np.int64(frame.lanes.warp_size))


# -- collectives ----------------------------------------------------------------------------


def _fail_at(frame: Frame, kind: str, op: Op, bad: np.ndarray, detail) -> None:
    """Report ``bad`` lanes even when inactive (a thread missing from a collective)."""
    saved = frame.mask
    frame.mask = None
    try:
        frame.fail(kind, op, bad, detail)
    finally:
        frame.mask = saved


@semantics("gpu.barrier")
def barrier(frame: Frame, op: Op) -> None:
    """Every thread of a block that reaches the barrier must: then a new interval begins."""
    lanes = frame.lanes
    if frame.mask is None:
        memory.barrier(frame.launch, np.arange(lanes.block_count))
        return
    block = lanes.block_in_batch
    waiting = np.bincount(block[frame.mask], minlength=lanes.block_count)
    missing = ~frame.mask & (waiting[block] > 0)
    if missing.any():
        _fail_at(
            frame,
            "divergent-barrier",
            op,
            missing,
            lambda lane: (
                f"this thread does not reach the barrier, at which"
                f" {int(waiting[block[lane]])} of the {lanes.threads_per_block} threads of"
                " its block wait"
            ),
        )
    memory.barrier(frame.launch, np.flatnonzero(waiting))


_SHUFFLE_MODES = ("xor", "up", "down", "idx")


def _shuffle_mode(frame: Frame, op: Op) -> str:
    text = str(op.attributes.get("mode", ""))
    for mode in _SHUFFLE_MODES:
        if text in (f"#gpu<shuffle_mode {mode}>", mode):
            return mode
    raise frame.unsupported(op, f"unknown shuffle mode {text!r} (attribute 'mode')")


def _warp_widths(frame: Frame, op: Op, width) -> np.ndarray:
    """Each lane's warp's ``width`` (uniform over its active lanes, 1 to the warp size)."""
    lanes = frame.lanes
    size = lanes.size
    width = np.broadcast_to(np.asarray(width).astype(np.int64), (size,))
    active = frame.active()
    warp = lanes.warp_in_batch
    per_warp = np.zeros(int(warp.max()) + 1 if size else 0, np.int64)
    per_warp[warp[active]] = width[active]
    differs = active & (width != per_warp[warp])
    if differs.any():
        frame.fail(
            "divergent-shuffle",
            op,
            differs,
            lambda lane: (
                f"width {int(width[lane])} differs from {int(per_warp[warp[lane]])},"
                " another thread's of the same warp"
            ),
        )
    bad = active & ((width < 1) | (width > lanes.warp_size))
    if bad.any():
        lane = int(np.flatnonzero(bad)[0])
        raise frame.unsupported(
            op,
            f"shuffle width {int(width[lane])} is not between 1 and the warp size"
            f" {lanes.warp_size} ({lanes.describe(lane)})",
        )
    return per_warp[warp]


def _check_converged(frame: Frame, op: Op, width: np.ndarray) -> None:
    """The first ``width`` threads of every warp with an active lane must all be active."""
    if frame.mask is None:
        return
    lanes = frame.lanes
    warp = lanes.warp_in_batch
    taking_part = np.bincount(warp[frame.mask], minlength=int(warp.max()) + 1)
    missing = ~frame.mask & (taking_part[warp] > 0) & (lanes.lane_in_warp < width)
    if missing.any():
        _fail_at(
            frame,
            "divergent-shuffle",
            op,
            missing,
            lambda lane: (
                f"this thread (lane {int(lanes.lane_in_warp[lane])} of its warp) does not"
                f" take part in the shuffle of width {int(width[lane])} that"
                f" {int(taking_part[warp[lane]])} threads of its warp execute"
            ),
        )


@semantics("gpu.shuffle")
def shuffle(frame: Frame, op: Op) -> None:
    value, offset, width = frame.operands(op)
    mode = _shuffle_mode(frame, op)
    lanes = frame.lanes
    width = _warp_widths(frame, op, width)
    _check_converged(frame, op, width)
    lane = lanes.lane_in_warp
    offset = np.broadcast_to(np.asarray(offset).astype(np.int64), (lanes.size,))
    source = {
        "xor": lane ^ offset,
        "up": lane - offset,
        "down": lane + offset,
        "idx": offset,
    }[mode]
    thread = lanes.thread_linear - lane + source
    valid = (lane < width) & (source >= 0) & (source < width) & (thread < lanes.threads_per_block)
    own = np.arange(lanes.size)
    from_lane = np.where(valid, own - lane + source, own)
    values = frame.per_lane(value, op.operand_types[0])
    frame.set_results(op, values[from_lane], valid)
