"""Is there a CUDA driver and a device here? If not, why not, in one line.

cuda-python installs anywhere; its calls fail only when made. Depending on
the version, a missing ``libcuda.so`` shows up as an exception from the first
call or as an error code. ``probe`` turns every such failure into a
``DriverStatus`` whose ``reason`` a person can act on, e.g.
"no CUDA driver found (cuda.bindings.driver.cuInit failed: ...)".
"""

from __future__ import annotations

from typing import Any

import attrs

from heron.runtime.core.driver_probe import DriverStatus, c_string, unpack


@attrs.frozen
class DeviceInfo:
    index: int
    name: str
    compute_capability: tuple[int, int]
    total_memory: int

    def __str__(self) -> str:
        major, minor = self.compute_capability
        return f"{self.name} (sm_{major}{minor}, {self.total_memory / 2**30:.0f} GiB)"


def probe(bindings: Any = None) -> DriverStatus:
    """Initialise the CUDA driver and list its devices, or say why that is impossible.

    ``bindings`` is ``cuda.bindings.driver`` (imported here when not given;
    tests pass a stand-in).
    """
    if bindings is None:
        try:
            from cuda.bindings import driver as bindings
        except ImportError as exc:
            return DriverStatus(False, f"cuda-python is not installed ({exc})")
    try:
        unpack(bindings.cuInit(0), "cuInit")
    except Exception as exc:
        return DriverStatus(
            False, f"no CUDA driver found (cuda.bindings.driver.cuInit failed: {exc})"
        )
    try:
        version = unpack(bindings.cuDriverGetVersion(), "cuDriverGetVersion")
        count = unpack(bindings.cuDeviceGetCount(), "cuDeviceGetCount")
        attribute = bindings.CUdevice_attribute
        devices = []
        for index in range(count):
            dev = unpack(bindings.cuDeviceGet(index), "cuDeviceGet")
            name = c_string(unpack(bindings.cuDeviceGetName(256, dev), "cuDeviceGetName"))
            major = unpack(
                bindings.cuDeviceGetAttribute(
                    attribute.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev
                ),
                "cuDeviceGetAttribute",
            )
            minor = unpack(
                bindings.cuDeviceGetAttribute(
                    attribute.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev
                ),
                "cuDeviceGetAttribute",
            )
            memory = unpack(bindings.cuDeviceTotalMem(dev), "cuDeviceTotalMem")
            devices.append(DeviceInfo(index, name, (int(major), int(minor)), int(memory)))
    except Exception as exc:
        return DriverStatus(False, f"a CUDA driver is present but querying it failed: {exc}")
    release = f"{version // 1000}.{version % 1000 // 10}"
    if not devices:
        return DriverStatus(False, f"the CUDA driver (CUDA {release}) reports no device")
    listing = "; ".join(str(d) for d in devices)
    return DriverStatus(True, f"CUDA driver for CUDA {release}: {listing}", tuple(devices))
