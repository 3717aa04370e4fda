"""Running a compiled kernel on a device, and the Target a device's kernels are compiled for.

One kernel alone, not a module (that is :mod:`heron.compiler.program_run`):
what the correctness harness (``heron check``) runs once
:func:`heron.compiler.compile_fusion` has made a
:class:`~heron.compiler.driver.CompiledKernel`. :func:`run_on_device`
uploads logical numpy inputs in the memory representation
(:mod:`heron.hlo.memory_layout`), launches, and brings the outputs back as
logical arrays. On the interpreter device the run also says how often each
buffer's bytes were read and written (:class:`DeviceRun`).
:func:`target_for_device` answers "which Target?" when a caller names none.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import TYPE_CHECKING

import attrs
import numpy as np

from heron.hlo.errors import UnsupportedError
from heron.hlo.memory_layout import from_memory, memory_bytes, to_memory
from heron.hlo.shapes import ArrayShape
from heron.target import BACKENDS, Target, default_target

if TYPE_CHECKING:
    from heron.compiler.driver import CompiledKernel

__all__ = ["DeviceRun", "run_on_device", "target_for_device"]


@attrs.frozen
class DeviceRun:
    """Outputs (logical arrays) of one launch, and the buffers' access counts when known.

    ``input_counts`` / ``output_counts`` hold an
    :class:`heron.runtime.interpreter.device.AccessCounts` per buffer on
    the interpreter, ``None`` on devices that cannot count.
    """

    outputs: tuple[np.ndarray, ...]
    #: The output buffers' bytes as the device left them (poison where never written).
    raw_outputs: tuple[np.ndarray, ...]
    input_counts: tuple[object | None, ...]
    output_counts: tuple[object | None, ...]
    seconds: float


def target_for_device(device: object, backend: str, target: Target | None = None) -> Target:
    """The Target kernels for ``device`` (of ``backend``) are compiled for.

    ``target`` when given, else: a GPU backend's default preset (``cuda``:
    h100, ``rocm``: mi300x); for a device that emulates a GPU (the
    interpreter), the default preset whose warps are as wide as the device's,
    since a kernel lowered for 32-lane warps shuffles with width 32 and leaves
    the upper half of a 64-lane wavefront out. A given ``target`` whose warps
    differ from the device's is refused for the same reason.
    """
    lanes = getattr(device, "warp_size", None)
    if target is None:
        if backend in BACKENDS:
            return default_target(backend)
        matching = [default_target(b) for b in BACKENDS if default_target(b).warp_size == lanes]
        target = matching[0] if matching else Target.resolve(None, None)
    if lanes is not None and lanes != target.warp_size:
        raise UnsupportedError(
            f"the {backend} device runs warps of {lanes} lanes, but target {target.name!r}"
            f" has warps of {target.warp_size}"
        )
    return target


def run_on_device(
    device, kernel: CompiledKernel, inputs: Sequence[np.ndarray], *, loaded=None
) -> DeviceRun:
    """Launch ``kernel`` on ``device`` with logical ``inputs``; the outputs and access counts.

    Output buffers are fresh allocations (on the interpreter, filled with
    poison bytes), except an in-place output (``kernel.output_aliases``),
    which starts as a copy of the input it aliases: the kernel writes only
    what changes, as when XLA gives the output the operand's buffer.
    ``loaded`` is a kernel already loaded on ``device`` (to launch one image
    several times without loading it again).
    """
    if len(inputs) != len(kernel.input_shapes):
        raise UnsupportedError(
            f"fusion '{kernel.fusion_name}' takes {len(kernel.input_shapes)} inputs,"
            f" given {len(inputs)}"
        )
    if loaded is None:
        if kernel.image is None:
            raise UnsupportedError(
                f"fusion '{kernel.fusion_name}' was compiled without an image to run"
                f" (its last stage: {kernel.stages[-1].name})"
            )
        loaded = device.load_kernel(kernel.image)
    in_buffers = [
        device.upload(to_memory(x, shape), f"input {k}")
        for k, (x, shape) in enumerate(zip(inputs, kernel.input_shapes, strict=True))
    ]
    # An in-place output starts as the bytes of the input it aliases, in the input's
    # own layout: a bitcast root (f32[20,30]{0,1} -> f32[600]) shares the buffer, not the shape.
    out_buffers = [
        device.upload(to_memory(inputs[a], kernel.input_shapes[a]), f"output {k}")
        if (a := kernel.output_aliases.get(k)) is not None
        else device.allocate(memory_bytes(shape), f"output {k}")
        for k, shape in enumerate(kernel.output_shapes)
    ]
    start = time.perf_counter()
    device.launch(loaded, kernel.grid, kernel.block, [*in_buffers, *out_buffers])
    device.synchronize()
    seconds = time.perf_counter() - start
    counts = getattr(device, "access_counts", None)
    outputs, raw_outputs = [], []
    for buffer, shape in zip(out_buffers, kernel.output_shapes, strict=True):
        raw = device.copy_from_device(buffer)
        raw_outputs.append(raw)
        outputs.append(_logical(raw, shape))
    result = DeviceRun(
        outputs=tuple(outputs),
        raw_outputs=tuple(raw_outputs),
        input_counts=tuple(counts(b) if counts else None for b in in_buffers),
        output_counts=tuple(counts(b) if counts else None for b in out_buffers),
        seconds=seconds,
    )
    for buffer in (*in_buffers, *out_buffers):
        device.free(buffer)
    return result


def _logical(raw: np.ndarray, shape: ArrayShape) -> np.ndarray:
    """The buffer's bytes as a logical array; a pred byte that is not 0/1 reads as True.

    (An unwritten pred element is found from the access counts, or from
    ``DeviceRun.raw_outputs`` of two runs, not by failing here.)
    """
    from heron.hlo.memory_layout import memory_dtype, memory_size

    typed = raw[: memory_bytes(shape)].view(memory_dtype(shape.element_type))
    typed = typed[: memory_size(shape)]
    if shape.element_type.name == "PRED":
        typed = (typed != 0).astype(np.uint8)
    return from_memory(typed, shape)
