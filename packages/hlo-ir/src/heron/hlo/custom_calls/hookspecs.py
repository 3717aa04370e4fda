"""The plugin contract for custom-call targets (entry-point group ``heron.custom_calls``).

A distribution provides targets by declaring, in its pyproject.toml::

    [project.entry-points."heron.custom_calls"]
    my_calls = "my_package.my_calls"

where ``my_package.my_calls`` implements the hook below::

    from heron.hlo.custom_calls.hookspecs import CustomCallSpec, hookimpl

    def my_scan(operands, call):      # numpy arrays, a heron.hlo.custom_calls.call.CustomCall
        return ...                    # numpy arrays of exactly the declared shapes and dtypes

    @hookimpl
    def heron_custom_call_specs():
        return [CustomCallSpec(target="my_package.scan", host=my_scan)]

The ABI of ``host`` is ``CustomCallSpec``'s docstring and docs/custom-calls.md.
Only host implementations exist so far: a device implementation (a kernel
image per backend and its launch rule) is a later extension of this spec.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import attrs
import pluggy

from heron.hlo.plugin_loading import PROJECT, check_callable

GROUP = "heron.custom_calls"

hookspec = pluggy.HookspecMarker(PROJECT)
hookimpl = pluggy.HookimplMarker(PROJECT)

#: A custom_call_target as HLO text may spell it and an artefact may store it: one
#: printable token, no whitespace or quotes (XLA's own are ``__cublas$gemm``,
#: ``Sharding``, ``cu_threefry2x32``; a plugin's are best namespaced, ``pkg.name``).
TARGET_PATTERN = re.compile(r"[!#-~]{1,200}\Z")


def check_target(instance: Any, attribute: attrs.Attribute, value: Any) -> None:
    """A custom_call_target: 1 to 200 printable ASCII characters, no space, quote or ``"``."""
    if not isinstance(value, str) or not TARGET_PATTERN.match(value):
        raise ValueError(
            f"{attribute.name} must be a custom_call_target of 1 to 200 printable ASCII"
            f" characters without spaces or double quotes, got {value!r:.80}"
        )


@attrs.frozen
class CustomCallSpec:
    """One custom-call target as a plugin provides it.

    ``target`` is the ``custom_call_target`` string the implementation answers
    to, exactly as the HLO spells it. ``host(operands, call)`` computes the
    call on the CPU:

    - ``operands``: a tuple of read-only numpy arrays, one per array leaf of the
      instruction's operands in order (a tuple operand gives its leaves), each
      in logical row-major index order whatever its layout, of the dtype heron
      uses for the element type (``ml_dtypes.bfloat16`` for bf16, ...);
    - ``call``: a :class:`heron.hlo.custom_calls.call.CustomCall`: the
      instruction's ``backend_config``, ``opaque`` and ``api_version`` as text,
      its declared operand and result shapes, and where it is;
    - returns one numpy array for an array-shaped result, a sequence of
      arrays (one per leaf) for a tuple-shaped one, each of exactly the
      declared dimensions and dtype (a numpy scalar of that dtype stands for a
      0-d array). Anything else is refused with an error naming the target and
      the instruction; nothing is converted.

    ``host`` must not keep or modify the operands, and must be deterministic
    (the evaluator and the executor both call it, and their results are compared).
    """

    target: str = attrs.field(validator=check_target)
    host: Callable[..., Any] = attrs.field(validator=check_callable)
    description: str = ""


@hookspec
def heron_custom_call_specs() -> CustomCallSpec | list[CustomCallSpec]:
    """Return the custom-call targets this plugin provides (one spec, or a list)."""
