"""The FFI attributes jax writes into a GPU custom call's ``backend_config``, read and checked.

jax's typed-FFI calls carry their flags as an MLIR dictionary
(``{left = false, magma = "auto", right = true}``); the host implementations of
:mod:`heron.jax.gpu_solvers` and its sibling modules read them here, one way,
with errors that name the call.
"""

from __future__ import annotations

import re

from heron.hlo.custom_calls.call import CustomCall

__all__ = ["boolean", "check_magma"]


def boolean(call: CustomCall, name: str) -> bool:
    """A boolean attribute (``lower = true``); jax always writes the ones its calls take."""
    found = re.search(rf"\b{name}\s*=\s*(true|false)\b", call.backend_config)
    if found is None:
        raise call.error(f"backend_config {call.backend_config!r} has no boolean {name}")
    return found.group(1) == "true"


def check_magma(call: CustomCall) -> None:
    """Refuse a ``magma`` setting jax never writes. A hybrid call runs MAGMA on the GPU
    (``"on"``) or LAPACK on the host (``"off"``; ``"auto"`` picks by size), one
    contract either way, so heron's host LAPACK serves all three."""
    found = re.search(r'\bmagma\s*=\s*"([^"]*)"', call.backend_config)
    if found is not None and found.group(1) not in ("on", "off", "auto"):
        raise call.error(f'magma "{found.group(1)}" is none of "on", "off", "auto"')
