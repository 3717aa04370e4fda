"""heron's device arrays as ``jax.Array`` values, and the arguments jax hands heron as they are.

A heron run on a GPU leaves its results in device buffers
(:class:`heron.runtime.core.resident.DeviceArray`); where jax has the same GPU,
``jax.dlpack.from_dlpack`` makes each a ``jax.Array`` over the same memory
(the heron array lives until jax is done with it). Arguments go the other way
without this module: a ``jax.Array`` is passed to the runner untouched, and the
runner takes it through DLPack where it is on the runner's device.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import jax
import numpy as np

from heron.runtime.core import dlpack

__all__ = ["as_jax_arrays", "jax_sees"]

#: DLPack device type -> jax's platform of that memory.
_PLATFORMS = {dlpack.CPU: "cpu", dlpack.CUDA: "gpu", dlpack.ROCM: "gpu"}


def jax_sees(where: tuple[int, int]) -> bool:
    """Whether jax has a device on DLPack device ``where`` (type, id), so that heron's arrays
    there can become ``jax.Array`` values without a copy."""
    platform = _PLATFORMS.get(where[0])
    if platform is None:
        return False
    try:
        devices = jax.devices(platform)
    except RuntimeError:  # jax has no backend of that platform (a CPU-only jaxlib)
        return False
    if platform == "cpu":
        return bool(devices)
    return any(getattr(d, "local_hardware_id", d.id) == where[1] for d in devices)


def as_jax_arrays(outputs: Sequence[Any]) -> list[Any]:
    """Each of heron's ``outputs`` as a ``jax.Array`` over its memory (DLPack, no copy), or
    a copy of its values where DLPack cannot describe its buffer (a result in a
    transposed layout, a packed type: ``DLPackError``, a ``BufferError``)."""
    return [_as_jax_array(output) for output in outputs]


def _as_jax_array(output: Any) -> Any:
    try:
        return jax.dlpack.from_dlpack(output)
    except BufferError:
        return jax.numpy.asarray(np.asarray(output))
