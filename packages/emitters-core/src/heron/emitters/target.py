"""What hero selection, the emitters and heron's passes read about the device.

The device is described once, by ``heron.compiler.Target`` (presets, or a real
device's properties). emitters-core sits below heron-compiler in the
dependency graph, so it cannot import that class; it states here, as a
Protocol, the part of it it reads. Any object with these attributes will do
(a ``Target``, or a small attrs class in a test), and nothing in emitters-core
keeps a device fact of its own.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

__all__ = ["EmitterTarget"]


@runtime_checkable
class EmitterTarget(Protocol):
    """The device facts emitters-core depends on (a subset of ``heron.compiler.Target``)."""

    #: ``"cuda"`` or ``"rocm"``: which lowering heron's passes prepare for.
    backend: str
    #: ``sm_90``, ``gfx942``, ...
    arch: str
    #: Lanes of a hardware warp (32) or wavefront (64 on CDNA).
    warp_size: int
    #: Streaming multiprocessors (CUDA) or compute units (ROCm).
    core_count: int
    threads_per_block_limit: int
    #: Threads a core keeps resident (2048 on an H100 SM): with ``core_count``,
    #: how many threads fill the device, from which XLA's loop unroll factor
    #: vectorises (``ComputeLoopFusionConfig``).
    threads_per_core_limit: int
    #: Bytes of shared memory a block may use without opting in.
    shared_memory_per_block: int
    #: Bytes of shared memory a block may use after opting in.
    shared_memory_per_block_optin: int
    #: The warp-level MMA instructions the device runs, as ``shape.type``
    #: (``"m16n8k16.f16"``; ``heron.compiler.Target.mma_shapes``): the GEMM
    #: emitter's tensor-core path is taken only for one listed here.
    mma_shapes: tuple[str, ...]
