"""GPU ids and sizes (``gpu.thread_id``, ``gpu.block_id``, ``gpu.block_dim``, ``gpu.grid_dim``,
``gpu.lane_id``), warp shuffles (``gpu.shuffle``) and barriers (``gpu.barrier``)."""

from __future__ import annotations

import numpy as np

from heron.runtime.core.interpreter.engine import Frame, semantics
from heron.runtime.core.interpreter.program import Op

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
