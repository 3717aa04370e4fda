"""A fusion compiled for a backend's device, and one run of it there.

This is what the correctness harness (``heron check``) and the sequential
executor (``heron run``) share: :func:`compile_for_backend` takes a fusion
through heron (emit, heron's passes, the backend's compiler) to a
:class:`~heron.runtime.core.device.KernelImage`; :func:`run_on_device`
uploads logical numpy inputs in the memory representation
(:mod:`heron.hlo.memory_layout`), launches, and brings the outputs back as
logical arrays. On the interpreter device the run also says how often each
buffer's bytes were read and written (:class:`DeviceRun`).
"""

from __future__ import annotations

import time
from collections.abc import Sequence

import attrs
import numpy as np

from heron.compiler.driver import emit_one, lower
from heron.hlo.errors import UnsupportedError
from heron.hlo.ir import Instruction
from heron.hlo.memory_layout import from_memory, memory_bytes, to_memory
from heron.hlo.shapes import ArrayShape
from heron.indexing.thread_maps import LaunchDimensions

__all__ = ["DeviceKernel", "DeviceRun", "compile_for_backend", "run_on_device"]

#: The heron pipeline's target for each backend (the interpreter behaves like an NVIDIA GPU).
PIPELINE_TARGET = {"interpreter": "cuda", "cuda": "cuda", "rocm": "rocm"}


@attrs.frozen
class DeviceKernel:
    """One fusion's kernel for one backend, with what is needed to launch it."""

    fusion_name: str
    emitter: str
    backend: str
    image: object  # heron.runtime.core.device.KernelImage
    launch: LaunchDimensions
    input_shapes: tuple[ArrayShape, ...]
    output_shapes: tuple[ArrayShape, ...]
    compile_seconds: float
    #: Output index -> input index of an in-place output (see ``EmittedKernel.output_aliases``).
    output_aliases: dict[int, int] = attrs.field(factory=dict, hash=False)

    @property
    def grid(self) -> tuple[int, int, int]:
        return (self.launch.block_x, self.launch.block_y, 1)

    @property
    def block(self) -> tuple[int, int, int]:
        return (self.launch.thread_x, 1, 1)


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


#: The pipeline target whose warp the interpreter emulates, by warp size.
INTERPRETER_TARGET_BY_WARP = {32: "cuda", 64: "rocm"}


def compile_for_backend(
    fusion: Instruction,
    backend: str = "interpreter",
    arch: str | None = None,
    *,
    warp_size: int | None = None,
) -> DeviceKernel:
    """Emit ``fusion``, run heron's passes and the backend's compiler (from its plugin).

    ``warp_size`` (the interpreter only) lowers for the target with that warp:
    a kernel lowered for 32-lane warps shuffles with width 32, which leaves
    the upper half of a 64-lane wavefront out.
    """
    from heron.runtime.core.registry import load_backends

    if backend not in PIPELINE_TARGET:
        raise UnsupportedError(
            f"unknown backend {backend!r} (expected one of {', '.join(PIPELINE_TARGET)})"
        )
    start = time.perf_counter()
    target = PIPELINE_TARGET[backend]
    if backend == "interpreter" and warp_size is not None:
        if warp_size not in INTERPRETER_TARGET_BY_WARP:
            raise UnsupportedError(f"the interpreter has no target with {warp_size}-lane warps")
        target = INTERPRETER_TARGET_BY_WARP[warp_size]
    kernel = emit_one(fusion)
    lowered = lower(kernel, target, stop_after="lower-tensors")
    compiler = load_backends().load_compiler(backend)
    extra = {"arch": arch} if arch is not None else {}
    try:
        image = compiler(lowered, kernel.name, **extra)
    except (ValueError, RuntimeError) as exc:
        raise UnsupportedError(
            f"fusion '{kernel.fusion_name}': the {backend} compiler failed: {exc}"
        ) from exc
    return DeviceKernel(
        fusion_name=kernel.fusion_name,
        emitter=kernel.emitter,
        backend=backend,
        image=image,
        launch=kernel.launch,
        input_shapes=tuple(a.shape for a in kernel.arguments if not a.is_output),
        output_shapes=tuple(a.shape for a in kernel.arguments if a.is_output),
        compile_seconds=time.perf_counter() - start,
        output_aliases=dict(kernel.output_aliases),
    )


def run_on_device(
    device, kernel: DeviceKernel, inputs: Sequence[np.ndarray], *, loaded=None
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
        loaded = device.load_kernel(kernel.image)
    in_buffers = [
        device.upload(to_memory(x, shape), f"input {k}")
        for k, (x, shape) in enumerate(zip(inputs, kernel.input_shapes, strict=True))
    ]
    out_buffers = [
        device.upload(to_memory(inputs[kernel.output_aliases[k]], shape), f"output {k}")
        if k in kernel.output_aliases
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
