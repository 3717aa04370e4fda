"""What the GPU backends share when asking "is there a driver and a device here?".

cuda-python and hip-python install anywhere and fail only when called. Their
calls return ``(error_code, *values)`` tuples (or raise, when the driver
library itself cannot be opened). A backend's probe turns all of that into a
``DriverStatus`` with a one-line reason a person can act on; the GPU tests
skip with that reason.
"""

from __future__ import annotations

from typing import Any

import attrs


@attrs.frozen
class DriverStatus:
    """``available`` with a description of the devices, or not, with the reason."""

    available: bool
    reason: str
    devices: tuple[Any, ...] = ()


class CallFailed(Exception):
    """A driver call returned an error code."""


def unpack(result: Any, call: str) -> Any:
    """The values of a binding's result tuple ``(code, *values)``; raise on a non-zero code.

    Returns None for no value, the value for one, a tuple for several.
    """
    code, *values = result if isinstance(result, tuple) else (result,)
    if getattr(code, "value", code) != 0:
        raise CallFailed(f"{call} returned {getattr(code, 'name', code)}")
    if not values:
        return None
    return values[0] if len(values) == 1 else tuple(values)


def c_string(raw: Any) -> str:
    """A C string from a binding (bytes up to the first NUL, or str) as text."""
    if isinstance(raw, bytes | bytearray):
        raw = bytes(raw).split(b"\0", 1)[0].decode("utf-8", "replace")
    return str(raw).strip()
