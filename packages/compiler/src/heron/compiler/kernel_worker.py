"""A kernel worker process (:mod:`heron.compiler.kernel_workers`): requests on the standard
input, each an emitted kernel's MLIR text taken through heron's passes and the backends'
stages but a batched last one, answers on the standard output.

Run as ``python -m heron.compiler.kernel_worker`` by :class:`KernelWorkers`.
"""

from __future__ import annotations

import os
import pickle
import sys
from typing import Any

from heron.compiler import driver
from heron.compiler.kernel_workers import KernelRequest, read_message, write_message
from heron.hlo.errors import HloError, UnsupportedError
from heron.target import Target

__all__ = ["serve"]


def _answer(number: int, request: KernelRequest) -> tuple[int, bool, Any]:
    try:
        made = driver.compile_emitted_text(
            request.text, request.kernel_name, request.fusion_name, request.target, request.backends
        )
        return number, True, made
    except Exception as exc:  # noqa: BLE001 - handed to the compile that asked
        error = exc
    try:
        pickle.dumps(error)
    except Exception:  # noqa: BLE001 - an error that cannot travel is said in words
        error = UnsupportedError(f"{type(error).__name__}: {error}")
    if isinstance(error, HloError):
        error.location = None  # locations name this process's text
    return number, False, error


def _warm_up() -> None:
    """Import what a request needs (MLIR, heron's passes, the backends' stages) before the
    first one comes: the compile that started the worker is still emitting meanwhile."""
    from heron.emitters.dialect.context import make_context
    from heron.runtime.core.registry import default_backends

    make_context()
    registry = default_backends()
    for spec in registry.specs:
        try:
            driver._plan(Target.preset("h100"), spec.name, None, registry)
            registry.load_stages(spec.name)
        except Exception:  # noqa: BLE001 - a backend this machine cannot compile for
            continue


def serve() -> None:
    """A worker's loop: requests on the standard input, answers on the standard output
    (anything else the compile prints goes to the standard error)."""
    channel = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)
    _warm_up()
    requests = sys.stdin.buffer
    while (request := read_message(requests)) is not None:
        write_message(channel, _answer(request.number, request))


if __name__ == "__main__":
    serve()
