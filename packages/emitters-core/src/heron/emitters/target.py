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

__all__ = ["EmitterTarget", "resident_block_limits", "resident_blocks"]


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
    #: What bounds the blocks one core keeps resident (``resident_blocks``): an
    #: emitter that plans its registers tells the backend the occupancy they allow.
    max_blocks_per_core: int
    registers_per_core_limit: int
    #: Registers a warp's allocation is rounded up to (per thread x warp size).
    register_allocation_unit: int
    shared_memory_per_core: int
    #: Bytes a block's shared memory is rounded up to.
    shared_memory_allocation_unit: int
    #: Shared memory the system takes from each resident block.
    shared_memory_reserved_per_block: int


def resident_block_limits(
    target: EmitterTarget, threads: int, registers: int | None, shared: int | None
) -> dict[str, int]:
    """How many blocks of ``threads`` threads one core of ``target`` keeps resident, per
    limit (the CUDA Occupancy Calculator's): ``blocks`` (the core's block slots),
    ``threads``, ``registers`` (a warp's, rounded up to the allocation unit) when
    ``registers`` is known, ``shared memory`` (rounded up, plus the part reserved per
    block) when ``shared`` is known and not zero. The one statement of the rule, for
    the emitters that plan their registers and for ``heron profile``."""
    warp = target.warp_size
    warps = -(-threads // warp)
    limits = {
        "blocks": target.max_blocks_per_core,
        "threads": target.threads_per_core_limit // (warps * warp),
    }
    if registers is not None:
        unit = target.register_allocation_unit
        per_warp = -(-registers * warp // unit) * unit
        limits["registers"] = (
            target.registers_per_core_limit // per_warp // warps if per_warp else limits["blocks"]
        )
    if shared:
        unit = target.shared_memory_allocation_unit
        per_block = -(-(shared + target.shared_memory_reserved_per_block) // unit) * unit
        limits["shared memory"] = target.shared_memory_per_core // per_block
    return limits


def resident_blocks(target: EmitterTarget, threads: int, registers: int, shared: int) -> int:
    """Blocks of ``threads`` threads, ``registers`` a thread and ``shared`` bytes one core of
    ``target`` keeps resident: the smallest of :func:`resident_block_limits`."""
    return min(resident_block_limits(target, threads, registers, shared).values())
