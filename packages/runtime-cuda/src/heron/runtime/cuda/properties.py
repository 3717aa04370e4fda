"""A CUDA device's attributes as ``Target`` fields, for ``Target.from_device``.

``CudaDevice.properties()`` queries ``cuDeviceGetAttribute`` for each of
:data:`ATTRIBUTES` (by its ``CU_DEVICE_ATTRIBUTE_`` suffix) and
``cuDeviceTotalMem``; :func:`target_properties` maps the numbers onto the
fields of ``heron.compiler.Target`` (which this package may not import: the
compiler side builds the Target, ``Target.from_device(device.properties())``).
A number the driver does not give (or gives as 0) is left out, and the Target
borrows it from the closest preset, saying so in its ``source``.

Memory bandwidth is derived as XLA derives it: the memory clock (kHz) times
the bus width, twice per clock (double data rate).
"""

from __future__ import annotations

from collections.abc import Mapping

__all__ = ["ATTRIBUTES", "target_properties"]

#: ``CU_DEVICE_ATTRIBUTE_<name>`` -> the Target field it gives (None: used in a formula).
ATTRIBUTES: dict[str, str | None] = {
    "COMPUTE_CAPABILITY_MAJOR": None,
    "COMPUTE_CAPABILITY_MINOR": None,
    "WARP_SIZE": "warp_size",
    "MULTIPROCESSOR_COUNT": "core_count",
    "MAX_THREADS_PER_BLOCK": "threads_per_block_limit",
    "MAX_THREADS_PER_MULTIPROCESSOR": "threads_per_core_limit",
    "MAX_SHARED_MEMORY_PER_BLOCK": "shared_memory_per_block",
    "MAX_SHARED_MEMORY_PER_BLOCK_OPTIN": "shared_memory_per_block_optin",
    "MAX_SHARED_MEMORY_PER_MULTIPROCESSOR": "shared_memory_per_core",
    "RESERVED_SHARED_MEMORY_PER_BLOCK": "shared_memory_reserved_per_block",
    "MAX_REGISTERS_PER_MULTIPROCESSOR": "registers_per_core_limit",
    "MAX_REGISTERS_PER_BLOCK": "registers_per_block_limit",
    "MAX_BLOCKS_PER_MULTIPROCESSOR": "max_blocks_per_core",
    "L2_CACHE_SIZE": "l2_cache_size",
    "MAX_BLOCK_DIM_X": "block_dim_limit_x",
    "MAX_BLOCK_DIM_Y": "block_dim_limit_y",
    "MAX_BLOCK_DIM_Z": "block_dim_limit_z",
    "CLOCK_RATE": None,
    "MEMORY_CLOCK_RATE": None,
    "GLOBAL_MEMORY_BUS_WIDTH": None,
}


def target_properties(attributes: Mapping[str, int], total_memory: int) -> dict[str, object]:
    """``Target.from_device``'s mapping from queried attributes (keys of :data:`ATTRIBUTES`).

    The compute capability is required (it is the arch); everything else is
    optional. ``total_memory`` is ``cuDeviceTotalMem``'s bytes (0: unknown).
    """
    try:
        major = int(attributes["COMPUTE_CAPABILITY_MAJOR"])
        minor = int(attributes["COMPUTE_CAPABILITY_MINOR"])
    except KeyError as exc:
        raise ValueError(f"device attributes lack {exc.args[0]}: the arch is unknown") from exc
    properties: dict[str, object] = {"backend": "cuda", "arch": f"sm_{major}{minor}"}
    for name, field in ATTRIBUTES.items():
        value = attributes.get(name)
        if field is None or value is None:
            continue
        # 0 is a real value only for the reserved shared memory; elsewhere it means "unknown".
        if int(value) > 0 or (field == "shared_memory_reserved_per_block" and int(value) == 0):
            properties[field] = int(value)
    clock_khz = int(attributes.get("CLOCK_RATE", 0))
    if clock_khz > 0:
        properties["clock_rate_ghz"] = clock_khz / 1e6
    memory_khz = int(attributes.get("MEMORY_CLOCK_RATE", 0))
    bus_bits = int(attributes.get("GLOBAL_MEMORY_BUS_WIDTH", 0))
    if memory_khz > 0 and bus_bits > 0:
        properties["memory_bandwidth"] = 2 * memory_khz * 1000 * bus_bits // 8
    if total_memory > 0:
        properties["device_memory_size"] = int(total_memory)
    return properties
