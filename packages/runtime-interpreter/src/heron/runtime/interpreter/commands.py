"""The interpreter's command buffers: recorded commands with a CUDA graph's semantics.

:class:`~heron.runtime.interpreter.device.InterpreterDevice` records, between
``begin_recording`` and ``end_recording``, what it would have run: a launch, a
device-to-device copy, a memset, and (conditional nodes) a while loop or a
conditional holding commands of their own. A :class:`RecordedCommands` replays
them in order on the buffers they name *now* (a graph's nodes hold pointers,
not contents: what a kernel reads is the memory at replay time), and
``update`` swaps buffers for others of the same size without touching the
commands, as ``cuGraphExecUpdate`` does for a graph of the same topology.

The commands are :mod:`heron.runtime.core.commands`' data (every device records
the same); running one is the device's business (its ``run_now``
hooks), so recorded and immediate work run through the same code.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING

from heron.runtime.core.commands import (
    Command,
    ConditionalCommand,
    CopyCommand,
    LaunchCommand,
    MemsetCommand,
    WhileCommand,
    buffers_of,
    remap,
    walk,
)
from heron.runtime.core.device import CommandBuffer, DeviceBuffer, DeviceError

if TYPE_CHECKING:
    from heron.runtime.interpreter.device import InterpreterDevice

__all__ = [
    "Command",
    "ConditionalCommand",
    "CopyCommand",
    "LaunchCommand",
    "MemsetCommand",
    "RecordedCommands",
    "WhileCommand",
    "record_nested",
    "walk",
]


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
        return buffers_of(self.commands)

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
        remap(self.commands, mapping, self.device)
        self.updates += 1


def record_nested(device: InterpreterDevice, build: Callable[[], None]) -> list[Command]:
    """The commands ``build()`` records through ``device`` (a loop's or a branch's)."""
    device.push_recording()
    try:
        build()
    finally:
        commands = device.pop_recording()
    return commands
