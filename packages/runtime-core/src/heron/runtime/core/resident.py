"""Executables run on arrays that stay on the device: heron.jax's path (issue 30).

:meth:`Executable.run <heron.runtime.core.executor.Executable.run>` takes numpy
arrays and returns numpy arrays: every call copies every input to the device
and every result back, and waits for the device. :class:`ResidentRunner` runs
the same executable the way JAX runs XLA's:

- **Arguments are taken where they are.** A :class:`DeviceArray` of the same
  device (an earlier run's result) is used in place. An array of another
  library on the same memory (a ``jax.Array`` on the same GPU; a numpy or jax
  CPU array for the interpreter, whose memory is host memory) is consumed
  through DLPack (:mod:`heron.runtime.core.dlpack`) and used in place, the
  producer told the device's stream so that its pending work comes first.
  Anything else (a host array, an array on another device) is copied to the
  device once, into the parameter's own allocation. Only buffers whose bytes are
  heron's memory representation of the parameter are shared
  (:func:`heron.hlo.memory_layout.is_c_order`: row-major, not packed); others
  are copied through the host.
- **Results stay on the device.** Each result is written into a buffer of its
  own, returned as a :class:`DeviceArray` (``__dlpack__``, ``__array__``,
  ``block_until_ready``): nothing is copied out unless the caller reads it.
  Result buffers come from a pool: when an array is collected its buffer goes
  back there and the next run writes into it, so that a loop's runs keep
  binding the same buffers (prepared launches and recorded command buffers are
  then used as they are; a buffer that differs from the last run's costs a
  re-prepared launch or a graph update, never a re-recording).
- **Runs are asynchronous.** A run returns once its work is issued; reading
  a result (``np.asarray``, ``block_until_ready``) waits for it, and handing it
  to another library (``__dlpack__``) orders that library's stream after it
  without the host waiting.
- **Donation.** A parameter that shares its allocation with a result
  (input-output aliasing, from ``jax.jit``'s ``donate_argnums``) is written by
  the program: it is given a buffer the result then owns. A
  :class:`DeviceArray` the caller donates is that buffer (it is consumed:
  reading it afterwards is an error, as in JAX); any other value is copied into
  a fresh buffer first (on the device where it is already there), since heron
  cannot take another library's memory from it.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Collection, Sequence
from typing import Any

import attrs
import numpy as np

from heron.hlo.memory_layout import (
    from_memory,
    is_c_order,
    memory_bytes,
    memory_dtype,
    to_memory,
)
from heron.hlo.shapes import ArrayShape
from heron.runtime.core import dlpack
from heron.runtime.core.device import Device, DeviceBuffer, DeviceError
from heron.runtime.core.executor import Executable, ExecutorError

__all__ = ["BufferPool", "DeviceArray", "ResidentRunner", "RunInputs"]


class DeviceArray:
    """An array held in a device buffer, in heron's memory representation of ``hlo_shape``.

    What a :class:`ResidentRunner` run returns. ``shape``, ``dtype``, ``ndim``
    and ``size`` are numpy's; ``np.asarray(a)`` copies it to the host (waiting
    for the run that writes it); ``__dlpack__`` hands it to another library
    without a copy where its layout allows (:func:`~heron.hlo.memory_layout.is_c_order`),
    the array kept alive until that library is done with it. Its buffer goes
    back to the pool it came from (or is freed) when the array is collected.
    """

    __slots__ = ("__weakref__", "_buffer", "_release", "hlo_shape")

    def __init__(self, buffer: DeviceBuffer, hlo_shape: ArrayShape, pool: BufferPool | None):
        self._buffer: DeviceBuffer | None = buffer
        self.hlo_shape = hlo_shape
        release = pool.give_back if pool is not None else buffer.device.free
        self._release = weakref.finalize(self, release, buffer)

    # -- what it is ------------------------------------------------------------------------
    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(self.hlo_shape.dims)

    @property
    def dtype(self) -> np.dtype:
        return np.dtype(self.hlo_shape.element_type.numpy_dtype)

    @property
    def ndim(self) -> int:
        return len(self.hlo_shape.dims)

    @property
    def size(self) -> int:
        return int(self.hlo_shape.num_elements)

    @property
    def device(self) -> Device:
        return self.buffer.device

    @property
    def buffer(self) -> DeviceBuffer:
        """The device buffer holding the array; DeviceError once the array was deleted or
        donated."""
        if self._buffer is None:
            raise DeviceError(
                f"array {self.hlo_shape} was deleted or donated to a run; its buffer is gone"
            )
        return self._buffer

    def is_deleted(self) -> bool:
        return self._buffer is None

    def delete(self) -> None:
        """Give the buffer back now (as ``jax.Array.delete``)."""
        self._buffer = None
        self._release()

    def _consume(self) -> DeviceBuffer:
        """The buffer, taken by a run that writes a result into it (donation): this array
        no longer has it, and will not give it back."""
        buffer = self.buffer
        self._buffer = None
        self._release.detach()
        return buffer

    def __repr__(self) -> str:
        state = "deleted" if self._buffer is None else self.device.description
        return f"DeviceArray({self.hlo_shape}, on {state})"

    # -- reading it --------------------------------------------------------------------------
    def block_until_ready(self) -> DeviceArray:
        """Wait until the run writing this array has finished (as ``jax.Array``'s)."""
        self.device.synchronize()
        return self

    def __array__(self, dtype: Any = None, copy: bool | None = None) -> np.ndarray:
        buffer = self.buffer
        nbytes = memory_bytes(self.hlo_shape)
        device = buffer.device
        raw = device.copy_from_device(device.view(buffer, 0, nbytes) if nbytes else buffer)
        values = from_memory(raw.view(memory_dtype(self.hlo_shape.element_type)), self.hlo_shape)
        return values if dtype is None else values.astype(dtype, copy=False)

    def __dlpack_device__(self) -> tuple[int, int]:
        where = self.device.dlpack_device
        if where is None:
            raise dlpack.DLPackError(f"{self.device.description} shares no memory (DLPack)")
        return where

    def __dlpack__(
        self,
        *,
        stream: Any = None,
        max_version: tuple[int, int] | None = None,
        dl_device: tuple[int, int] | None = None,
        copy: bool | None = None,
    ) -> Any:
        """A DLPack capsule of the array's bytes (the unversioned one every consumer takes).

        The consumer's ``stream`` is ordered after the device's work so far
        (:meth:`~heron.runtime.core.device.Device.order_before`: an event its stream
        waits for on a GPU, so the host does not wait) unless it is the device's own.
        ``copy=True`` and another ``dl_device`` are refused (BufferError), as is a
        layout whose bytes are not numpy's (transposed or packed).
        """
        where = self.__dlpack_device__()
        if copy:
            raise dlpack.DLPackError("heron arrays are exported without a copy (copy=True)")
        if dl_device is not None and tuple(dl_device) != where:
            raise dlpack.DLPackError(f"the array is on DLPack device {where}, not {dl_device}")
        if not is_c_order(self.hlo_shape):
            raise dlpack.DLPackError(
                f"array {self.hlo_shape}: its buffer is not the C-order bytes of its values"
                " (a transposed layout or a packed type); copy it with np.asarray"
            )
        device = self.device
        if stream is None or stream != device.dlpack_stream:
            device.order_before(stream)
        return dlpack.capsule(device.address(self.buffer), self.shape, self.dtype, where, self)


class BufferPool:
    """Device buffers of results whose arrays are gone, by size, reused last-in first-out
    (see the module docstring); at most ``keep`` of each size, the rest freed."""

    def __init__(self, device: Device, keep: int = 4) -> None:
        self.device = device
        self.keep = keep
        self._free: dict[int, list[DeviceBuffer]] = {}
        self._lock = threading.Lock()  # arrays are collected on any thread
        #: Buffers allocated so far (tests and reports watch reuse).
        self.allocated = 0

    def take(self, nbytes: int, label: str = "") -> DeviceBuffer:
        with self._lock:
            free = self._free.get(nbytes)
            if free:
                return free.pop()
        self.allocated += 1
        return self.device.allocate(nbytes, label or "result")

    def give_back(self, buffer: DeviceBuffer) -> None:
        with self._lock:
            free = self._free.setdefault(buffer.nbytes, [])
            if len(free) < self.keep:
                free.append(buffer)
                return
        self.device.free(buffer)

    def clear(self) -> None:
        with self._lock:
            buffers = [b for free in self._free.values() for b in free]
            self._free.clear()
        for buffer in buffers:
            self.device.free(buffer)


@attrs.frozen
class RunInputs:
    """How a run took each argument: ``resident`` (a DeviceArray of the device, in place),
    ``dlpack`` (another library's memory, in place), ``donated`` (a DeviceArray consumed
    by a result), ``copied`` (from the host), ``copied on device`` (into a donated
    parameter's fresh buffer)."""

    ways: tuple[str, ...]

    def count(self, way: str) -> int:
        return self.ways.count(way)


class ResidentRunner:
    """An :class:`Executable` run on device-resident arrays (see the module docstring).

    ``immutable``: types whose arrays never change once made (``jax.Array``, which
    heron.jax names). An argument of one that an earlier run adopted through DLPack
    is adopted again without asking its library while it lives and is not deleted:
    its library's work on it was ordered before that first run, and nothing can
    write it since. Asking costs each argument of each call a capsule and, on a GPU,
    an event its stream records (a model's weights are the same arrays call after
    call). An array of a mutable library (torch's, numpy's) is asked every time: its
    owner may have written it in place since.
    """

    def __init__(
        self,
        executable: Executable,
        pool: BufferPool | None = None,
        immutable: tuple[type, ...] = (),
    ) -> None:
        self.executable = executable
        self.device = executable.device
        self.pool = pool or BufferPool(self.device)
        self.last_inputs = RunInputs(())
        self._immutable = immutable
        #: parameter number -> (the immutable array last adopted for it, its buffer)
        self._adopted: dict[int, tuple[weakref.ref, DeviceBuffer]] = {}

    def __call__(
        self, arguments: Sequence[Any], donate: Collection[int] = ()
    ) -> tuple[DeviceArray, ...]:
        """Run on ``arguments`` (parameter order: DeviceArrays, DLPack arrays, host
        arrays); the results as DeviceArrays, once the work is issued. ``donate``: the
        parameter numbers whose DeviceArrays the caller gives up (see the module docstring)."""
        executable = self.executable
        shapes = executable.parameter_shapes
        if len(arguments) != len(shapes):
            raise ExecutorError(
                f"the entry takes {len(shapes)} parameters, given {len(arguments)} arguments"
            )
        aliased = {
            parameter: result
            for result in range(len(executable.result_shapes))
            if (parameter := executable.donated_parameter(result)) is not None
        }
        buffers: list[DeviceBuffer | None] = []
        ways: list[str] = []
        for number, value in enumerate(arguments):
            if number in aliased:
                buffer, way = self._donated(number, value, number in donate)
            else:
                buffer, way = self._argument(number, value)
            buffers.append(buffer)
            ways.append(way)
        self.last_inputs = RunInputs(tuple(ways))
        results: dict[int, DeviceBuffer] = {}
        for number in range(len(executable.result_shapes)):
            parameter = executable.donated_parameter(number)
            if parameter is None:
                results[number] = self.pool.take(executable.result_size(number), f"result {number}")
        executable.execute(buffers, results=results, synchronize=False)
        arrays = []
        for number, shape in enumerate(executable.result_shapes):
            parameter = executable.donated_parameter(number)
            buffer = results[number] if parameter is None else buffers[parameter]
            assert buffer is not None
            arrays.append(DeviceArray(buffer, shape, self.pool))
        return tuple(arrays)

    # -- arguments -------------------------------------------------------------------------
    def _matches(self, number: int, array: DeviceArray) -> bool:
        shape = self.executable.parameter_shapes[number]
        return (
            array.device is self.device
            and array.shape == tuple(shape.dims)
            and array.hlo_shape.element_type is shape.element_type
            and array.hlo_shape.major_to_minor == shape.major_to_minor
        )

    def _argument(self, number: int, value: Any) -> tuple[DeviceBuffer | None, str]:
        """The buffer parameter ``number`` reads (None: its own allocation, filled here)."""
        if isinstance(value, DeviceArray) and self._matches(number, value):
            return value.buffer, "resident"
        imported = self._import(number, value)
        if imported is not None:
            return imported, "dlpack"
        array = self._host_array(number, value)
        self.executable.write_parameter(number, array)
        return None, "copied"

    def _donated(self, number: int, value: Any, donated: bool) -> tuple[DeviceBuffer, str]:
        """A fresh buffer for a parameter the program writes (its result's), holding ``value``."""
        executable = self.executable
        if donated and isinstance(value, DeviceArray) and self._matches(number, value):
            return value._consume(), "donated"
        size = executable.parameter_size(number)
        buffer = self.pool.take(size, f"parameter {number}")
        resident = isinstance(value, DeviceArray) and self._matches(number, value)
        source = value.buffer if resident else self._import(number, value)
        nbytes = memory_bytes(executable.parameter_shapes[number])
        if source is not None:
            device = self.device
            device.copy_on_device(device.view(source, 0, nbytes), device.view(buffer, 0, nbytes))
            return buffer, "copied on device"
        array = self._host_array(number, value)
        self.device.copy_to_device(buffer, to_memory(array, executable.parameter_shapes[number]))
        return buffer, "copied"

    def _import(self, number: int, value: Any) -> DeviceBuffer | None:
        """``value``'s memory adopted through DLPack, where it is on this device and holds the
        parameter's bytes as they are; None otherwise (then it is copied). An immutable
        array adopted for this parameter before is taken as it was (see the class)."""
        immutable = bool(self._immutable) and isinstance(value, self._immutable)
        if immutable:
            kept = self._adopted.get(number)
            if kept is not None and kept[0]() is value and not _deleted(value):
                return kept[1]
        buffer = self._adopt(number, value)
        if immutable:
            if buffer is None:
                self._adopted.pop(number, None)
            else:
                self._adopted[number] = (weakref.ref(value), buffer)
        return buffer

    def _adopt(self, number: int, value: Any) -> DeviceBuffer | None:
        """``value``'s memory through its library's ``__dlpack__`` (see :meth:`_import`)."""
        where = self.device.dlpack_device
        shape = self.executable.parameter_shapes[number]
        if where is None or not hasattr(value, "__dlpack__") or not is_c_order(shape):
            return None
        try:
            if tuple(value.__dlpack_device__()) != where:
                return None
            stream = self.device.dlpack_stream
            capsule = value.__dlpack__(stream=stream) if stream is not None else value.__dlpack__()
            tensor = dlpack.take(capsule, f"parameter {number}")
        except (BufferError, TypeError, AttributeError):
            return None  # a producer that will not share: copied instead
        if (
            tensor.shape != tuple(shape.dims)
            or tensor.dtype != np.dtype(shape.element_type.numpy_dtype)
            or not tensor.c_contiguous
        ):
            return None
        return self.device.adopt(tensor.address, tensor.nbytes, tensor, f"parameter {number}")

    def _host_array(self, number: int, value: Any) -> np.ndarray:
        return self.executable.check_input(number, value)


def _deleted(value: Any) -> bool:
    """Whether ``value`` was deleted or donated since (``jax.Array.is_deleted``)."""
    is_deleted = getattr(value, "is_deleted", None)
    return bool(is_deleted()) if callable(is_deleted) else False
