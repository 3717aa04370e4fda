"""What the emitters compute from the device's facts: how many blocks a core keeps
resident, and which grids run for one block's latency.

The device is described once, by :class:`heron.target.Target` (the bottom of
heron's dependency graph, which emitters-core imports like every layer); this
module states the occupancy rule over it, and nothing in emitters-core keeps a
device fact of its own.
"""

from __future__ import annotations

from heron.target import Target

__all__ = ["one_block_per_core", "resident_block_limits", "resident_blocks"]


def resident_block_limits(
    target: Target, threads: int, registers: int | None, shared: int | None
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


def resident_blocks(target: Target, threads: int, registers: int, shared: int) -> int:
    """Blocks of ``threads`` threads, ``registers`` a thread and ``shared`` bytes one core of
    ``target`` keeps resident: the smallest of :func:`resident_block_limits`."""
    return min(resident_block_limits(target, threads, registers, shared).values())


def one_block_per_core(blocks: int, target: Target) -> bool:
    """Whether a grid of ``blocks`` blocks gives no core of ``target`` a second block: the
    kernel then takes about one block's latency, however its steps are written.

    The emitters whose steps are a fixed network (a sort's compare-and-swap steps, a
    top-k's offers) write them out step by step with constant indices for the large
    grids, where every instruction of a step is paid once per block in every wave; on
    such a grid they keep them loops instead: a few index instructions more per step,
    and a kernel whose size, LLVM's and ptxas's time no longer grow with the steps
    (a sort of 8 rows of 32 took 100 ms to compile, written out, 56 ms rolled).
    """
    return blocks <= target.core_count
