"""The commands a device records between ``begin_recording`` and ``end_recording``.

Every device records the same data first (launches, copies, memsets, and,
where it has conditional nodes, while loops and conditionals holding commands
of their own), each naming the :class:`~heron.runtime.core.device.DeviceBuffer`
objects it uses; what a device makes of the list is its own: the interpreter
replays it (``heron.runtime.interpreter.commands``), a GPU device captures it
into a graph at ``end_recording`` (CUDA, HIP). ``update`` points the same
commands at other buffers (:func:`remap`), which is a graph update of the same
topology (``cuGraphExecUpdate``, ``hipGraphExecUpdate``).

One definition, here, so that every device records and updates by the same
rules.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import attrs

from heron.runtime.core.device import SELECTOR_TYPES, DeviceBuffer, DeviceError

__all__ = [
    "Command",
    "ConditionalCommand",
    "CopyCommand",
    "LaunchCommand",
    "LibraryCallCommand",
    "MemsetCommand",
    "WhileCommand",
    "buffers_of",
    "check_predicate",
    "check_selector",
    "copy_command",
    "memset_command",
    "remap",
    "view_label",
    "walk",
]


@attrs.define(eq=False)
class LaunchCommand:
    kernel: Any  # a LoadedKernel of the device
    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    buffers: list[DeviceBuffer]
    shared_bytes: int = 0


@attrs.define(eq=False)
class CopyCommand:
    buffers: list[DeviceBuffer]  # [source, destination]


@attrs.define(eq=False)
class MemsetCommand:
    buffers: list[DeviceBuffer]  # [destination]
    value: int
    width: int


@attrs.define(eq=False)
class LibraryCallCommand:
    """A library call (a :class:`~heron.runtime.core.gemm.GemmCall`, ...) on its buffers."""

    call: Any
    buffers: list[DeviceBuffer]  # the contract's arguments, in its order


@attrs.define(eq=False)
class WhileCommand:
    """``condition``; while the predicate byte is nonzero: ``body``, ``condition``. With
    ``trip_count`` (proved by the compiler): ``body`` that many times, no condition."""

    condition: list[Any]
    buffers: list[DeviceBuffer]  # [predicate]
    body: list[Any]
    trip_count: int | None = None


@attrs.define(eq=False)
class ConditionalCommand:
    """Run ``branches[i]``, i read from the selector at replay time."""

    buffers: list[DeviceBuffer]  # [selector]
    selector_type: str
    branches: list[list[Any]]


Command = (
    LaunchCommand
    | CopyCommand
    | MemsetCommand
    | LibraryCallCommand
    | WhileCommand
    | ConditionalCommand
)


def walk(commands: Sequence[Command]) -> Iterator[Command]:
    """Every command, those inside loops and branches too, in recording order."""
    for command in commands:
        yield command
        if isinstance(command, WhileCommand):
            yield from walk(command.condition)
            yield from walk(command.body)
        elif isinstance(command, ConditionalCommand):
            for branch in command.branches:
                yield from walk(branch)


def buffers_of(commands: Sequence[Command]) -> tuple[DeviceBuffer, ...]:
    """Every buffer the commands use, each once, in order of first use."""
    seen: dict[int, DeviceBuffer] = {}
    for command in walk(commands):
        for buffer in command.buffers:
            seen.setdefault(id(buffer), buffer)
    return tuple(seen.values())


def remap(
    commands: Sequence[Command], mapping: Mapping[DeviceBuffer, DeviceBuffer], device: Any
) -> None:
    """Point the commands at ``mapping``'s values instead of its keys, in place.

    Every key must be a buffer the commands use, every value a buffer of
    ``device`` of the key's size; otherwise :class:`DeviceError` and nothing
    changes (``CommandBuffer.update``'s contract).
    """
    recorded = {id(b) for b in buffers_of(commands)}
    for old, new in mapping.items():
        if id(old) not in recorded:
            raise DeviceError(
                f"command buffer update: buffer '{old.label}' ({old.nbytes} bytes) is not one"
                " the command buffer was recorded with"
            )
        if new.device is not device:
            raise DeviceError(f"command buffer update: buffer '{new.label}' is another device's")
        if new.nbytes != old.nbytes:
            raise DeviceError(
                f"command buffer update: buffer '{old.label}' is {old.nbytes} bytes, its"
                f" replacement '{new.label}' {new.nbytes}"
            )
    by_id = {id(old): new for old, new in mapping.items()}
    for command in walk(commands):
        command.buffers[:] = [by_id.get(id(b), b) for b in command.buffers]


# -- the checks every device makes before it records or runs a command ----------------------


def view_label(buffer: DeviceBuffer, offset: int, nbytes: int) -> str:
    """The label of ``buffer[offset:offset + nbytes]``; DeviceError when it lies outside."""
    if not (0 <= offset and 0 <= nbytes and offset + nbytes <= buffer.nbytes):
        raise DeviceError(
            f"view [{offset}:{offset + nbytes}] of buffer '{buffer.label}' lies outside its"
            f" {buffer.nbytes} bytes"
        )
    return f"{buffer.label or 'buffer'}[{offset}:{offset + nbytes}]"


def copy_command(source: DeviceBuffer, destination: DeviceBuffer) -> CopyCommand:
    """A device-to-device copy; DeviceError when the sizes differ."""
    if source.nbytes != destination.nbytes:
        raise DeviceError(
            f"device copy from '{source.label}' ({source.nbytes} bytes) to"
            f" '{destination.label}' ({destination.nbytes} bytes): sizes differ"
        )
    return CopyCommand([source, destination])


def memset_command(buffer: DeviceBuffer, value: int, width: int) -> MemsetCommand:
    """A memset of a ``width``-byte pattern (cuMemsetD8/16/32); DeviceError when it cannot be."""
    if width not in (1, 2, 4) or not 0 <= value < 1 << (8 * width):
        raise DeviceError(f"memset: value {value} with width {width} (1, 2 or 4 bytes)")
    if buffer.nbytes % width:
        raise DeviceError(
            f"memset of '{buffer.label}': {buffer.nbytes} bytes is no multiple of {width}"
        )
    return MemsetCommand([buffer], value, width)


def check_predicate(predicate: DeviceBuffer, trip_count: int | None = None) -> None:
    """A while node's predicate is one byte (a pred), and its proved trip count, if any, an
    integer >= 0; DeviceError otherwise."""
    if predicate.nbytes != 1:
        raise DeviceError(f"record_while: the predicate is 1 byte, not {predicate.nbytes}")
    if trip_count is not None and (
        isinstance(trip_count, bool) or not isinstance(trip_count, int) or trip_count < 0
    ):
        raise DeviceError(f"record_while: a trip count is an integer >= 0, not {trip_count!r}")


def check_selector(selector: DeviceBuffer, selector_type: str, branch_count: int) -> None:
    """A conditional node's selector (pred: 1 byte and 2 branches; s32: 4 bytes and at
    least one branch); DeviceError otherwise."""
    width = SELECTOR_TYPES.get(selector_type)
    if width is None or selector.nbytes != width:
        raise DeviceError(
            f"record_conditional: a {selector_type!r} selector of {selector.nbytes} bytes"
            " (pred: 1, s32: 4)"
        )
    if not branch_count or (selector_type == "pred" and branch_count != 2):
        raise DeviceError(
            f"record_conditional: {branch_count} branches for a {selector_type} selector"
        )
