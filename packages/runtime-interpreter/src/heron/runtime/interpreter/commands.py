"""The interpreter's command buffers: recorded commands with a CUDA graph's semantics.

:class:`~heron.runtime.interpreter.device.InterpreterDevice` records, between
``begin_recording`` and ``end_recording``, what it would have run: a launch, a
device-to-device copy, a memset, and (conditional nodes) a while loop or a
conditional holding commands of their own. A :class:`RecordedCommands` replays
them in order on the buffers they name *now* (a graph's nodes hold pointers,
not contents: what a kernel reads is the memory at replay time), and
``update`` swaps buffers for others of the same size without touching the
commands, as ``cuGraphExecUpdate`` does for a graph of the same topology.

The commands are data; running one is the device's business (its ``run_now``
hooks), so recorded and immediate work run through the same code.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import attrs

from heron.runtime.core.device import CommandBuffer, DeviceBuffer, DeviceError

if TYPE_CHECKING:
    from heron.runtime.interpreter.device import InterpreterDevice

__all__ = [
    "ConditionalCommand",
    "CopyCommand",
    "LaunchCommand",
    "MemsetCommand",
    "RecordedCommands",
    "WhileCommand",
]


@attrs.define(eq=False)
class LaunchCommand:
    kernel: Any
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
class WhileCommand:
    """``condition``; while the predicate byte is nonzero: ``body``, ``condition``."""

    condition: list[Any]
    buffers: list[DeviceBuffer]  # [predicate]
    body: list[Any]


@attrs.define(eq=False)
class ConditionalCommand:
    """Run ``branches[i]``, i read from the selector at replay time."""

    buffers: list[DeviceBuffer]  # [selector]
    selector_type: str
    branches: list[list[Any]]


Command = LaunchCommand | CopyCommand | MemsetCommand | WhileCommand | ConditionalCommand


def _nested(command: Command) -> Iterator[list[Any]]:
    if isinstance(command, WhileCommand):
        yield command.condition
        yield command.body
    elif isinstance(command, ConditionalCommand):
        yield from command.branches


def walk(commands: Sequence[Command]) -> Iterator[Command]:
    """Every command, nested ones too, in recording order."""
    for command in commands:
        yield command
        for inner in _nested(command):
            yield from walk(inner)


class RecordedCommands(CommandBuffer):
    """An interpreter command buffer (see the module docstring)."""

    def __init__(self, device: InterpreterDevice, commands: list[Command]) -> None:
        self.device = device
        self.commands = commands
        #: How many times it was replayed and updated (for tests and reports).
        self.replays = 0
        self.updates = 0
        self._launches: int | None = None

    @property
    def buffers(self) -> tuple[DeviceBuffer, ...]:
        seen: dict[int, DeviceBuffer] = {}
        for command in walk(self.commands):
            for buffer in command.buffers:
                seen.setdefault(id(buffer), buffer)
        return tuple(seen.values())

    def replay(self) -> None:
        if self.device.recording:
            raise DeviceError("replaying a command buffer while recording another is not supported")
        self.replays += 1
        before = self.device.launches
        self.device.run_commands(self.commands)
        self._launches = self.device.launches - before

    @property
    def launches_last_replay(self) -> int | None:
        return self._launches

    def update(self, mapping: Mapping[DeviceBuffer, DeviceBuffer]) -> None:
        recorded = {id(b) for b in self.buffers}
        for old, new in mapping.items():
            if id(old) not in recorded:
                raise DeviceError(
                    f"command buffer update: buffer '{old.label}' ({old.nbytes} bytes) is not"
                    " one the command buffer was recorded with"
                )
            if new.device is not self.device:
                raise DeviceError(
                    f"command buffer update: buffer '{new.label}' is another device's"
                )
            if new.nbytes != old.nbytes:
                raise DeviceError(
                    f"command buffer update: buffer '{old.label}' is {old.nbytes} bytes, its"
                    f" replacement '{new.label}' {new.nbytes}"
                )
        by_id = {id(old): new for old, new in mapping.items()}
        for command in walk(self.commands):
            command.buffers[:] = [by_id.get(id(b), b) for b in command.buffers]
        self.updates += 1


def record_nested(device: InterpreterDevice, build: Callable[[], None]) -> list[Command]:
    """The commands ``build()`` records through ``device`` (a loop's or a branch's)."""
    device.push_recording()
    try:
        build()
    finally:
        commands = device.pop_recording()
    return commands
