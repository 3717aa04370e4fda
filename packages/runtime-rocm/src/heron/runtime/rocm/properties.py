"""A HIP device's properties as ``Target`` fields, for ``Target.from_device``.

``HipDevice.properties()`` reads ``hipGetDeviceProperties`` (a
``hipDeviceProp_t``) and :func:`target_properties` maps its fields onto those
of ``heron.compiler.Target`` (which this package may not import: the compiler
side builds the Target, ``Target.from_device(device.properties())``). The arch
is ``gcnArchName`` (``gfx90a:sramecc+:xnack-``; ``from_device`` drops the
feature flags). A field the runtime leaves at 0 is left out, and the Target
borrows it from the closest preset, saying so in its ``source``. Memory
bandwidth: the memory clock (kHz) times the bus width, twice per clock, as
XLA derives it.
"""

from __future__ import annotations

from typing import Any

__all__ = ["FIELDS", "target_properties"]

#: ``hipDeviceProp_t`` field -> the Target field it gives.
FIELDS = {
    "warpSize": "warp_size",
    "multiProcessorCount": "core_count",
    "maxThreadsPerBlock": "threads_per_block_limit",
    "maxThreadsPerMultiProcessor": "threads_per_core_limit",
    "sharedMemPerBlock": "shared_memory_per_block",
    "sharedMemPerBlockOptin": "shared_memory_per_block_optin",
    "maxSharedMemoryPerMultiProcessor": "shared_memory_per_core",
    "regsPerMultiprocessor": "registers_per_core_limit",
    "regsPerBlock": "registers_per_block_limit",
    "maxBlocksPerMultiProcessor": "max_blocks_per_core",
    "l2CacheSize": "l2_cache_size",
    "totalGlobalMem": "device_memory_size",
}


def _text(raw: Any) -> str:
    if isinstance(raw, bytes | bytearray):
        raw = bytes(raw).split(b"\0", 1)[0].decode("utf-8", "replace")
    return str(raw).strip()


def target_properties(props: Any) -> dict[str, object]:
    """``Target.from_device``'s mapping from a ``hipDeviceProp_t`` (or anything with its fields)."""
    arch = _text(props.gcnArchName)
    if not arch:
        raise ValueError("the device properties have no gcnArchName: the arch is unknown")
    properties: dict[str, object] = {"backend": "rocm", "arch": arch}
    for name, field in FIELDS.items():
        value = int(getattr(props, name, 0) or 0)
        if value > 0:
            properties[field] = value
    for axis, limit in zip("xyz", list(getattr(props, "maxThreadsDim", ()))[:3], strict=False):
        if int(limit) > 0:
            properties[f"block_dim_limit_{axis}"] = int(limit)
    clock_khz = int(getattr(props, "clockRate", 0) or 0)
    if clock_khz > 0:
        properties["clock_rate_ghz"] = clock_khz / 1e6
    memory_khz = int(getattr(props, "memoryClockRate", 0) or 0)
    bus_bits = int(getattr(props, "memoryBusWidth", 0) or 0)
    if memory_khz > 0 and bus_bits > 0:
        properties["memory_bandwidth"] = 2 * memory_khz * 1000 * bus_bits // 8
    # AMD GPUs have no opt-in beyond the per-block LDS: the runtime may report 0 for it.
    if (
        "shared_memory_per_block" in properties
        and "shared_memory_per_block_optin" not in properties
    ):
        properties["shared_memory_per_block_optin"] = properties["shared_memory_per_block"]
    return properties
