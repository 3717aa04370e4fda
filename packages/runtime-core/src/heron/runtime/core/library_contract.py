"""What every library call's contract checks the same way: its attributes and its slices.

A contract (:class:`heron.runtime.core.gemm.GemmCall`,
:class:`heron.runtime.core.convolution.ConvolutionCall`) is an attrs class whose
fields are the thunk's attributes and whose arguments are slices in a fixed
order, the computed one last. Reading a thunk's attributes into one (no
unknown name, no missing required one) and checking its slices (one per
argument, each of its size, the output overlapping no operand) are the same
for every call; the contracts keep their own meaning and only this here.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from typing import Any, TypeVar

import attrs

from heron.runtime.core.thunks import BufferSlice, ThunkError

__all__ = ["check_argument_slices", "contract_from_attributes"]

T = TypeVar("T")


def contract_from_attributes(cls: type[T], attributes: Mapping[str, Any], operation: str) -> T:
    """``cls(**attributes)``, or a ThunkError naming the unknown and missing attributes."""
    fields = attrs.fields(cls)  # type: ignore[arg-type]
    names = {f.name for f in fields}
    required = {f.name for f in fields if f.default is attrs.NOTHING}
    unknown = sorted(set(attributes) - names)
    missing = sorted(required - set(attributes))
    if unknown or missing:
        raise ThunkError(
            f"{operation}: attributes {', '.join(missing)} missing" * bool(missing)
            + ("; " if unknown and missing else "")
            + f"unknown attributes {', '.join(unknown)}" * bool(unknown)
        )
    return cls(**attributes)


def check_argument_slices(
    described: str,
    names: Sequence[str],
    sizes: Sequence[int],
    arguments: Sequence[BufferSlice],
    may_be_the_output: Collection[str] = (),
) -> None:
    """One slice per argument (``names``, the output last), each ``sizes`` bytes, and the
    output overlapping no operand but those of ``may_be_the_output`` when they are exactly
    it (a GEMM's C read and written in place); ThunkError otherwise, ``described`` first."""
    if len(arguments) != len(names):
        raise ThunkError(
            f"{described}: takes {len(names)} arguments ({', '.join(names)}),"
            f" given {len(arguments)}"
        )
    for name, size, piece in zip(names, sizes, arguments, strict=True):
        if piece.size != size:
            raise ThunkError(f"{described}: {name} is {size} bytes, its slice {piece} {piece.size}")
    out = arguments[-1]
    for name, piece in zip(names[:-1], arguments[:-1], strict=True):
        if name in may_be_the_output and piece == out:
            continue
        if piece.allocation == out.allocation and piece.offset < out.end and out.offset < piece.end:
            raise ThunkError(f"{described}: {names[-1]} {out} overlaps {name} {piece}")
