"""Custom calls on the host: what the executor does for a ``CustomCallThunk``.

At load (:class:`HostCalls`), every custom call of the program is matched
with an installed implementation (the ``heron.custom_calls`` registry,
:mod:`heron.hlo.custom_calls`); a target no installed plugin provides refuses
the whole artefact before anything is allocated, naming the target and the
instruction. At run time, a call copies its operand slices from the device
(after every launch before it: ``copy_from_device`` waits), reads them as
logical arrays (:func:`heron.hlo.memory_layout.from_memory`, whatever the
layout), calls the host implementation, checks its results against the
declared shapes, and copies them into the result slices (``to_memory``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from heron.hlo.custom_calls.call import CustomCall
from heron.hlo.custom_calls.registry import CustomCallRegistry, default_custom_calls
from heron.hlo.memory_layout import from_memory, memory_dtype, to_memory
from heron.runtime.core.device import Device, DeviceBuffer, DeviceError
from heron.runtime.core.thunks import BufferSlice, CustomCallThunk, Thunk, walk

__all__ = ["HostCalls"]


class HostCalls:
    """The custom calls of one program, each resolved to its implementation once."""

    def __init__(self, program: Sequence[Thunk], registry: CustomCallRegistry | None = None):
        self._registry = registry
        self.calls: dict[CustomCallThunk, CustomCall] = {}
        for thunk in walk(program):
            if isinstance(thunk, CustomCallThunk) and thunk not in self.calls:
                call = thunk.call()
                self.registry.get(call)  # UnknownCustomCallTarget names the target and the call
                self.calls[thunk] = call

    @property
    def registry(self) -> CustomCallRegistry:
        # Only a program with custom calls loads the entry points.
        if self._registry is None:
            self._registry = default_custom_calls()
        return self._registry

    def targets(self) -> list[str]:
        return sorted({call.target for call in self.calls.values()})

    def run(
        self,
        thunk: CustomCallThunk,
        device: Device,
        view: Callable[[BufferSlice], DeviceBuffer],
    ) -> None:
        """Operands device -> host, the host implementation, results host -> device."""
        call = self.calls[thunk]
        operands = []
        for k, (piece, shape) in enumerate(zip(thunk.operands, call.operand_shapes, strict=True)):
            raw = device.copy_from_device(view(piece))
            try:
                operands.append(from_memory(raw.view(memory_dtype(shape.element_type)), shape))
            except ValueError as error:  # a pred byte no kernel stored as 0 or 1
                raise DeviceError(f"{call.where}: operand {k} ({shape}): {error}") from None
        results: list[np.ndarray] = self.registry.invoke(call, operands)
        for piece, shape, array in zip(thunk.results, call.result_shapes, results, strict=True):
            device.copy_to_device(view(piece), to_memory(array, shape))
