"""Is there a HIP runtime and an AMD GPU here? If not, why not, in one line.

hip-python installs anywhere; its calls fail only when made (``hipInit``
raises when ``libamdhip64.so`` cannot be opened). ``probe`` turns every such
failure into a ``DriverStatus`` whose ``reason`` a person can act on, e.g.
"no HIP runtime found (hip.hipInit failed: ...)".
"""

from __future__ import annotations

import re
from typing import Any

import attrs

from heron.runtime.core.driver_probe import DriverStatus, c_string, unpack


@attrs.frozen
class DeviceInfo:
    index: int
    name: str
    architecture: str
    total_memory: int

    def __str__(self) -> str:
        return f"{self.name} ({self.architecture}, {self.total_memory / 2**30:.0f} GiB)"


def _readable(exc: Exception) -> str:
    """``exc``'s message with the byte strings hip-python formats into it as text:
    ``failed to dlopen 'b'libamdhip64.so''`` reads ``failed to dlopen 'libamdhip64.so'``."""
    return re.sub(r"""b(['"])(.*?)\1""", r"\2", str(exc))


def probe(bindings: Any = None) -> DriverStatus:
    """Initialise HIP and list its devices, or say why that is impossible.

    ``bindings`` is ``hip.hip`` (imported here when not given; tests pass a
    stand-in).
    """
    if bindings is None:
        try:
            from hip import hip as bindings
        except ImportError as exc:
            return DriverStatus(False, f"hip-python is not installed ({exc})")
    try:
        unpack(bindings.hipInit(0), "hipInit")
    except Exception as exc:
        return DriverStatus(False, f"no HIP runtime found (hip.hipInit failed: {_readable(exc)})")
    try:
        version = unpack(bindings.hipDriverGetVersion(), "hipDriverGetVersion")
        result = bindings.hipGetDeviceCount()
        # hipGetDeviceCount reports "no device" as an error code, not as 0.
        if getattr(result[0], "name", "") == "hipErrorNoDevice":
            return DriverStatus(False, f"the HIP runtime (version {version}) reports no device")
        count = unpack(result, "hipGetDeviceCount")
        devices = []
        for index in range(count):
            props = unpack(bindings.hipGetDeviceProperties(index), "hipGetDeviceProperties")
            devices.append(
                DeviceInfo(
                    index,
                    c_string(props.name),
                    c_string(props.gcnArchName),
                    int(props.totalGlobalMem),
                )
            )
    except Exception as exc:
        return DriverStatus(False, f"a HIP runtime is present but querying it failed: {exc}")
    if not devices:
        return DriverStatus(False, f"the HIP runtime (version {version}) reports no device")
    listing = "; ".join(str(d) for d in devices)
    return DriverStatus(True, f"HIP runtime {version}: {listing}", tuple(devices))
