"""What every library call's contract checks the same way: its attributes and its slices.

A contract (:class:`heron.runtime.core.gemm.GemmCall`,
:class:`heron.runtime.core.convolution.ConvolutionCall`) is an attrs class whose
fields are the thunk's attributes and whose arguments are slices in a fixed
order, the computed ones last (one for most calls; a fused attention's
backward pass computes three). Reading a thunk's attributes into one (no
unknown name, no missing required one) and checking its slices (one per
argument, each of its size, each output overlapping no other argument) are
the same for every call; the contracts keep their own meaning and only this
here.
"""

from __future__ import annotations

import abc
import math
from collections.abc import Collection, Mapping, Sequence
from typing import Any, ClassVar, TypeVar

import attrs
import numpy as np

from heron.runtime.core.thunks import BufferSlice, LibraryCallThunk, ThunkError

__all__ = [
    "LibraryContract",
    "check_argument_slices",
    "contract_from_attributes",
    "dense_strides",
    "is_dense",
    "read_strided",
    "written_strided",
]

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


class LibraryContract(abc.ABC):
    """What every contract (an attrs class) does the same way with its thunk: its fields as
    the thunk's attributes, read back from a thunk, and its slices checked.

    A contract sets :attr:`operation`, says its arguments (:attr:`operand_names`, the
    computed ones last: :attr:`outputs` of them) and their sizes (``byte_sizes()``), and
    describes itself (``describe()``); :attr:`may_be_the_output` names an operand the
    output may be exactly (a GEMM's C, read and written in place, as BLAS does).
    """

    operation: ClassVar[str]
    may_be_the_output: ClassVar[tuple[str, ...]] = ()
    #: How many of the last arguments the call computes.
    outputs: ClassVar[int] = 1

    @property
    @abc.abstractmethod
    def operand_names(self) -> tuple[str, ...]:
        """The arguments, in order, the computed one last."""

    @abc.abstractmethod
    def byte_sizes(self) -> tuple[int, ...]:
        """Each argument's bytes, in :attr:`operand_names` order."""

    @abc.abstractmethod
    def describe(self) -> str:
        """The call in one line, for reports and errors."""

    def attributes(self) -> dict[str, Any]:
        """The thunk's attributes: every field, tuples as JSON lists."""
        return {
            f.name: list(value) if isinstance(value := getattr(self, f.name), tuple) else value
            for f in attrs.fields(type(self))  # type: ignore[arg-type]
        }

    @classmethod
    def from_attributes(cls: type[T], attributes: Mapping[str, Any]) -> T:
        return contract_from_attributes(cls, attributes, cls.operation)  # type: ignore[attr-defined]

    @classmethod
    def from_thunk(cls: type[T], thunk: LibraryCallThunk) -> T:
        """The call a thunk describes; ThunkError when its slices do not fit the contract."""
        operation = cls.operation  # type: ignore[attr-defined]
        if thunk.operation != operation:
            raise ThunkError(f"library call {thunk.operation!r} is not a {operation} call")
        call = cls.from_attributes(dict(thunk.attributes))  # type: ignore[attr-defined]
        call.check_slices(thunk.arguments)
        return call

    def check_slices(self, arguments: Sequence[BufferSlice]) -> None:
        check_argument_slices(
            self.describe(),
            self.operand_names,
            self.byte_sizes(),
            arguments,
            self.may_be_the_output,
            self.outputs,
        )


def check_argument_slices(
    described: str,
    names: Sequence[str],
    sizes: Sequence[int],
    arguments: Sequence[BufferSlice],
    may_be_the_output: Collection[str] = (),
    outputs: int = 1,
) -> None:
    """One slice per argument (``names``, the ``outputs`` computed ones last), each
    ``sizes`` bytes, and each output overlapping no other argument but those of
    ``may_be_the_output`` when they are exactly it (a GEMM's C read and written in
    place); ThunkError otherwise, ``described`` first."""
    if len(arguments) != len(names):
        raise ThunkError(
            f"{described}: takes {len(names)} arguments ({', '.join(names)}),"
            f" given {len(arguments)}"
        )
    for name, size, piece in zip(names, sizes, arguments, strict=True):
        if piece.size != size:
            raise ThunkError(f"{described}: {name} is {size} bytes, its slice {piece} {piece.size}")
    first_output = len(names) - outputs
    for index in range(first_output, len(names)):
        out = arguments[index]
        for name, piece in zip(names[:index], arguments[:index], strict=True):
            if name in may_be_the_output and piece == out:
                continue
            if (
                piece.allocation == out.allocation
                and piece.offset < out.end
                and out.offset < piece.end
            ):
                raise ThunkError(f"{described}: {names[index]} {out} overlaps {name} {piece}")


def dense_strides(dims: Sequence[int], order: Sequence[int]) -> tuple[int, ...]:
    """Element strides of ``dims`` stored densely with ``order`` major to minor."""
    strides = [0] * len(dims)
    step = 1
    for d in reversed(order):
        strides[d] = step
        step *= dims[d]
    return tuple(strides)


def is_dense(dims: Sequence[int], strides: Sequence[int]) -> bool:
    """Whether ``strides`` store ``dims`` densely in some dimension order (size-1
    dimensions may have any stride)."""
    order = sorted(range(len(dims)), key=lambda d: (strides[d], dims[d]), reverse=True)
    expected = 1
    for d in reversed(order):
        if dims[d] != 1 and strides[d] != expected:
            return False
        expected *= dims[d]
    return True


def read_strided(
    raw: np.ndarray, dims: Sequence[int], strides: Sequence[int], dtype: np.dtype
) -> np.ndarray:
    """The tensor ``dims`` (element ``strides``) that the bytes ``raw`` hold, as a
    read-only array of ``dtype`` in logical order."""
    flat = np.ascontiguousarray(raw).view(dtype)
    width = np.dtype(dtype).itemsize
    return np.lib.stride_tricks.as_strided(
        flat, shape=tuple(dims), strides=[s * width for s in strides], writeable=False
    )


def written_strided(
    values: np.ndarray, dims: Sequence[int], strides: Sequence[int], dtype: np.dtype
) -> np.ndarray:
    """The bytes (uint8) of a dense buffer holding ``values`` (logical order, ``dims``)
    rounded to ``dtype`` and stored with element ``strides``."""
    out = np.zeros(math.prod(dims), dtype)
    width = np.dtype(dtype).itemsize
    view = np.lib.stride_tricks.as_strided(
        out, shape=tuple(dims), strides=[s * width for s in strides]
    )
    view[...] = values.reshape(tuple(dims)).astype(dtype)
    return out.view(np.uint8)
