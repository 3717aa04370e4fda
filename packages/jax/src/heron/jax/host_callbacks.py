"""jax's Python callbacks (``jax.debug.print``, ``jax.pure_callback``, ``io_callback``) run
on the host, in the process that compiled them.

jax lowers a callback as ``custom-call(args...), custom_call_target=
"xla_ffi_python_cpu_callback"`` (``..._gpu_callback`` for a GPU) with
``backend_config={index = K : ui64}``: ``K`` numbers the Python functions
of that one lowering (``Lowered._lowering.compile_args["host_callbacks"]``),
which XLA's runtime calls with the operands as numpy arrays and whose
returned arrays are the results. heron.jax does the same: when it compiles a
lowered function it gives each callback a number unique in the process
(:func:`bind_callbacks`, which rewrites ``K``), and the host implementation
registered for the targets (:func:`python_callback`) calls that function.
The numbers mean nothing in another process, so a program with callbacks is
never written to or read from heron.jax's disk cache; an artefact of one
loaded elsewhere is refused by name ("no Python callback K in this process").
"""

from __future__ import annotations

import itertools
import re
import threading
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from heron.hlo.attributes import RawAttribute
from heron.hlo.custom_calls.call import CustomCall
from heron.hlo.custom_calls.hookspecs import CustomCallSpec, hookimpl
from heron.hlo.ir import Module

__all__ = ["TARGETS", "bind_callbacks", "callback_specs", "forget_callbacks", "python_callback"]

#: The custom-call targets jax's Python callbacks lower to (typed FFI), CPU and GPU.
TARGETS = ("xla_ffi_python_cpu_callback", "xla_ffi_python_gpu_callback")

_INDEX = re.compile(r"\bindex\s*=\s*(\d+)")
#: Process-wide callback number -> the Python function jax made for it.
_CALLBACKS: dict[int, Callable[..., Any]] = {}
_NUMBERS = itertools.count(1)
_LOCK = threading.Lock()


def _index(text: str) -> int | None:
    found = _INDEX.search(text)
    return int(found.group(1)) if found else None


def bind_callbacks(module: Module, callbacks: Sequence[Callable[..., Any]]) -> tuple[int, ...]:
    """Number ``module``'s callback calls for the process: call ``K`` of the lowering gets
    ``callbacks[K]`` under a fresh number written into its ``backend_config``. Returns
    the numbers given (for :func:`forget_callbacks` when the program goes); a call whose
    index has no function is left to be refused when it runs."""
    bound: list[int] = []
    for inst in module.instructions():
        if inst.opcode != "custom-call":
            continue
        target = inst.attributes.get("custom_call_target")
        if getattr(target, "text", target) not in TARGETS:
            continue
        config = inst.attributes.get("backend_config")
        index = _index(str(getattr(config, "text", config or "")))
        if index is None or index >= len(callbacks):
            continue
        with _LOCK:
            number = next(_NUMBERS)
            _CALLBACKS[number] = callbacks[index]
        inst.attributes["backend_config"] = RawAttribute(f"{{index = {number} : ui64}}")
        bound.append(number)
    return tuple(bound)


def forget_callbacks(numbers: Sequence[int]) -> None:
    """Drop the functions bound under ``numbers`` (heron.jax does when the compiled program
    that calls them is collected, so the table holds only live programs' callbacks)."""
    with _LOCK:
        for number in numbers:
            _CALLBACKS.pop(number, None)


def python_callback(
    operands: tuple[np.ndarray, ...], call: CustomCall
) -> np.ndarray | list[np.ndarray]:
    """Call the Python function bound to this call's number with its operands; its returned
    arrays are the results (none for ``jax.debug.print``)."""
    number = _index(call.backend_config)
    function = _CALLBACKS.get(number) if number is not None else None
    if function is None:
        raise call.error(
            f"no Python callback {number} in this process: jax's callbacks run only where"
            " heron.jax compiled the program (backend_config"
            f" {call.backend_config!r})"
        )
    returned = function(*operands)  # jax's wrapper returns a sequence, one per result leaf
    results = [np.asarray(result) for result in (() if returned is None else returned)]
    return results if call.tuple_result else results[0]


def callback_specs() -> list[CustomCallSpec]:
    return [
        CustomCallSpec(
            target=target,
            host=python_callback,
            description="jax's Python callback (jax.debug.print, pure_callback), on the host",
        )
        for target in TARGETS
    ]


@hookimpl
def heron_custom_call_specs() -> list[CustomCallSpec]:
    return callback_specs()
